#!/usr/bin/env bash
# tests/lint_bin_test.sh - `kiln lint` on binaries from the command line: listings, --sm/--device and --cuda verdicts,
# exit statuses, --json, truncated and non-CUDA input (nvcc's outputs in tests/fuzz/corpus/bin/).
set -u
. "$(dirname "$0")/cli_lib.sh"
dir=$tmp # cli_lib.sh removes it on exit

b=tests/fuzz/corpus/bin
expect_re "fatbin listing" 0 'a.fatbin: cubin sm_80, PTX compute_90 \(.version 9.0, zstd\)' -- lint $b/a.fatbin
expect_re "cubin listing, 'a' target" 0 'e.cubin: cubin sm_100a$' -- lint $b/e.cubin
expect_re "-rdc object" 0 'rdc.o: elf, 1 fatbin container, 1 image' -- lint $b/rdc.o
expect_re "runs by cubin" 0 'runs on sm_86: the driver loads cubin sm_80' -- lint $b/a.fatbin --sm 86
expect_re "--device alias" 0 'runs on sm_89' -- lint $b/a.fatbin --device sm_89
expect_re "runs by JIT" 0 'runs on sm_120: the driver JIT-compiles PTX compute_90' -- lint $b/a.fatbin --sm 12.0
expect_re "no kernel image" 1 'error: no kernel image is available for execution on the device: sm_75 gets none of its images; fix: add -gencode arch=compute_75,code=sm_75' -- lint $b/a.fatbin --sm 75
expect_re "no kernel image verdict" 1 'a.fatbin: cannot run on sm_75' -- lint $b/a.fatbin --sm 75
expect_re "sm_90a cubin on 10.0" 1 'cubin sm_90a: runs on sm_90 only' -- lint $b/z.fatbin --sm 100
expect_re "old driver, new PTX" 1 'fix: update the driver to CUDA 13.0 or newer, or add a cubin: -gencode arch=compute_90,code=sm_90' -- lint $b/a.fatbin --sm 90 --cuda 12.8
expect_re "driver without the GPU" 1 'a CUDA 12.4 driver does not support sm_120 devices at all' -- lint $b/a.fatbin --sm 120 --cuda 12.4
expect_re "driver check alone warns" 1 'warning: a CUDA 12.4 driver refuses PTX compute_90' -- lint $b/a.fatbin --cuda 12.4
expect_re "driver check alone, clean" 0 'loads on a driver of CUDA 13.0' -- lint $b/a.fatbin --cuda 13.0
expect_re "binary and PTX together" 1 'cannot run on sm_75' -- lint $b/a.fatbin tests/lint/turing_clean.sm75.ptx --sm 75
head -c 2000 $b/a.fatbin >"$dir/cut.fatbin"
expect_re "truncated fatbin" 2 'cut.fatbin: fatbin container at offset 0x0 .* \(truncated\?\)' -- lint "$dir/cut.fatbin"
head -c 3000 $b/rdc.o >"$dir/cut.o"
expect_re "truncated object" 2 'cut.o: .*past the end|cut.o: .*outside' -- lint "$dir/cut.o"
expect_re "ELF without CUDA" 2 'no CUDA device code: this ELF file has no .nv_fatbin or __nv_relfatbin section' -- lint "$KILN"
expect_re "bad device" 2 'unknown device SM' -- lint $b/a.fatbin --sm 77

# --json is one valid document with the images and the verdict
out=$("$KILN" lint --json --sm 75 $b/a.fatbin $b/rdc.o "$dir/cut.fatbin" 2>/dev/null)
if python3 -c '
import json, sys
d = json.loads(sys.argv[1])["files"]
a, o, cut = d
assert a["format"] == "fatbin" and a["runs_on_device"] is False, a
assert [(i["kind"], i["target"]) for i in a["images"]] == [("cubin", "sm_80"), ("ptx", "sm_90")], a["images"]
assert a["images"][1]["ptx"] == "9.0" and a["images"][1]["compression"] == "zstd" and a["images"][1]["findings"] == []
assert "no kernel image is available" in a["findings"][0]["message"], a["findings"]
assert o["format"] == "elf" and o["images"][0]["functions"] == 1
assert "truncated" in cut["error"]
' "$out"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL --json: $out" | head -30; fi

finish "lint_bin_cli"
