#!/usr/bin/env bash
# tests/lint_test.sh - `kiln lint` on the command line: exit statuses, messages, --sm, --json, bad input.
set -u
. "$(dirname "$0")/cli_lib.sh"
dir=$tmp # cli_lib.sh removes it on exit

corpus=tests/lint
good=$corpus/bf16_cvt.sm80.ptx
sed 's/^\.target sm_80/.target sm_75/' "$good" >"$dir/bf16_cvt.sm75.ptx"
broken=$dir/bf16_cvt.sm75.ptx
line=$(grep -n 'cvt.rn.bf16.f32' "$broken" | head -1 | cut -d: -f1)

expect_re "clean file" 0 '^$' -- lint "$good"
expect_re "clean files, several" 0 '^$' -- lint "$good" "$corpus/turing_clean.sm75.ptx" "$corpus/shfl_vote.sm80.ptx"
expect_re "broken file names file:line and the need" 1 "bf16_cvt.sm75.ptx:$line: error: needs sm_80 for cvt.bf16.f32; the module's .target is sm_75" -- lint "$broken"
expect_re "broken file shows the instruction" 1 '^    cvt.rn.bf16.f32 %rs1, %f1;' -- lint "$broken"
expect_re "broken file summary" 1 'bf16_cvt.sm75.ptx: 2 errors, 0 warnings \(.target sm_75, .version 9.0\)' -- lint "$broken"
expect_re "clean + broken = 1" 1 'error: needs sm_80' -- lint "$good" "$broken"
expect_re "--sm: runs" 0 'runs on sm_90 \(.target sm_80' -- lint --sm 90 "$good"
expect_re "--sm: cannot run" 1 'cannot run on sm_75' -- lint "$good" --sm sm_75
expect_re "--sm: what it loses" 1 'needs sm_80 for cvt.bf16.f32: an sm_75 device does not have it' -- lint --sm=7.5 "$good"
expect_re "--sm: arch-specific" 1 'an sm_100 device cannot run it \(arch-specific' -- lint --sm 100 "$corpus/wgmma.sm90a.ptx"
expect_re "--json findings" 1 '"kind": "target", "severity": "error", "instruction": "cvt.rn.bf16.f32 %rs1, %f1;"' -- lint --json "$broken"
expect_re "--json clean" 0 '"target": "sm_80", "sm": 80, "ptx": "9.0"' -- lint --json "$good"
if command -v python3 >/dev/null; then
    if "$KILN" lint --json "$good" "$broken" "$dir/missing.ptx" 2>/dev/null | python3 -m json.tool >/dev/null; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAIL --json output is not valid JSON"
    fi
fi
expect_re "--help" 0 'usage: kiln lint FILE' -- lint --help

# bad input and usage: exit 2, one clear line
expect_re "no file" 2 'lint needs at least one PTX file' -- lint
expect_re "missing file" 2 "kiln: error: cannot open lint input '$dir/nope.ptx': No such file or directory" -- lint "$dir/nope.ptx"
: >"$dir/empty.ptx"
expect_re "empty file" 2 'empty.ptx: empty input' -- lint "$dir/empty.ptx"
printf '\x7fELF\x02\x01\x01\x00\x00\x00' >"$dir/binary.ptx"
expect_re "binary file" 2 'binary.ptx: binary data, not PTX text' -- lint "$dir/binary.ptx"
printf '.version 7.0\n.address_size 64\n' >"$dir/notarget.ptx"
expect_re "no .target" 2 'notarget.ptx: not a PTX module: no .target directive' -- lint "$dir/notarget.ptx"
expect_re "directory" 2 "kiln: error: lint input '$dir' is a directory" -- lint "$dir"
expect_re "bad --sm" 2 "--sm: unknown device SM '74'; valid: .*75, 80, 86" -- lint --sm 74 "$good"
expect_re "--sm without value" 2 '--sm needs a value' -- lint "$good" --sm
expect_re "unknown option" 2 "unknown option '--fast' for lint; valid: --sm N, --cuda X.Y, --json, --help" -- lint --fast "$good"
expect_re "unreadable among good ones: 2 wins" 2 'nope.ptx' -- lint "$good" "$dir/nope.ptx" "$broken"
expect_re "stdin" 1 '^-:[0-9]+: error: needs sm_80' -- lint - <"$broken"

# --cuda: will this PTX load on a driver (or assemble with the ptxas) of that CUDA release?
sed 's/^\.version .*/.version 9.4/' "$good" >"$dir/v94.ptx"
expect_re "--cuda: newer .version" 1 'v94.ptx:[0-9]+: error: CUDA 12.4 accepts PTX ISA up to 8.4' -- lint --cuda 12.4 "$dir/v94.ptx"
expect_re "--cuda: does not load" 1 'v94.ptx: does not load on a driver of CUDA 12.4' -- lint --cuda=12.4 "$dir/v94.ptx"
expect_re "--cuda: loads" 0 'bf16_cvt.sm80.ptx: loads on a driver of CUDA 13.0' -- lint --cuda 13.0 "$good"
expect_re "--cuda as cuDriverGetVersion" 0 'loads on a driver of CUDA 13.1' -- lint --cuda 13010 "$good"
expect_re "--cuda: target too new" 1 "CUDA 12.4 does not know .target sm_100a" -- lint --cuda 12.4 "$corpus/blackwell.sm100a.ptx"
sed 's/^\.target sm_80/.target sm_70/; s/^\.version .*/.version 6.0/' "$corpus/shfl_vote.sm80.ptx" >"$dir/v70.ptx"
expect_re "--cuda: old target, a warning" 1 'warning: CUDA 13.0.s ptxas and nvcc cannot build for sm_70' -- lint --cuda 13.0 "$dir/v70.ptx"
expect_re "--cuda --json" 1 '"cuda": "12.4", "cuda_loads": false' -- lint --json --cuda 12.4 "$dir/v94.ptx"
expect_re "--cuda: unknown release" 2 "--cuda: unknown CUDA release '12.10'; valid: 9.0, .*13.0" -- lint --cuda 12.10 "$good"
expect_re "--cuda without value" 2 '--cuda needs a value' -- lint "$good" --cuda

# bytes ptxas refuses, line ends it reads
printf '\xef\xbb\xbf' | cat - "$good" >"$dir/bom.ptx"
expect_re "UTF-8 BOM" 1 'bom.ptx:1: error: non-ASCII character \(byte 0xef, column 1\), a UTF-8 byte-order mark' -- lint "$dir/bom.ptx"
printf '.version 7.0\r.target sm_75\r.address_size 64\r.visible .entry k()\r{\r.reg .b16 %%rs<2>;\r.reg .f32 %%f<2>;\rcvt.rn.bf16.f32 %%rs1, %%f1;\r}\r' >"$dir/cr.ptx"
expect_re "lone CR line ends" 1 'cr.ptx:1: error: needs sm_80 for cvt.bf16.f32' -- lint "$dir/cr.ptx"

# input without end or over the limit: one clear error, nothing read forever (issue 30 item 4)
expect_re "/dev/zero" 2 "lint input '/dev/zero' is a character device, not a regular file" -- lint /dev/zero
mkfifo "$dir/fifo.ptx"
expect_re "a FIFO" 2 "lint input '$dir/fifo.ptx' is a FIFO \(named pipe\), not a regular file" -- lint "$dir/fifo.ptx"
truncate -s 257M "$dir/sparse.ptx"
expect_re "a sparse file over the limit" 2 "sparse.ptx' is larger \(269484032 bytes\) than kiln's input limit of 256 MiB; set KILN_MAX_INPUT_MB to raise it" -- lint "$dir/sparse.ptx"
head -c 1500000 /dev/zero | tr '\0' '\n' | cat "$good" - >"$dir/long.ptx"
KILN_MAX_INPUT_MB=1 expect_re "KILN_MAX_INPUT_MB lowers the limit" 2 "long.ptx' is larger \([0-9]+ bytes\) than kiln's input limit of 1 MiB" -- lint "$dir/long.ptx"
KILN_MAX_INPUT_MB=2 expect_re "KILN_MAX_INPUT_MB raises it" 0 '^$' -- lint "$dir/long.ptx"
KILN_MAX_INPUT_MB=1 expect_re "stdin streamed to the limit" 2 "standard input is larger than kiln's input limit of 1 MiB" -- lint - < <(cat /dev/zero)
KILN_MAX_INPUT_MB=lots expect "bad KILN_MAX_INPUT_MB" 2 "KILN_MAX_INPUT_MB='lots' is not a size in mebibytes; valid: 1 to" -- lint "$good"

# the summary lines agree with the errors: a module ptxas refuses neither loads nor runs anywhere
printf '.version 8.6\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\ntcgen05.fence::before_thread_sync;\nret;\n}\n' >"$dir/tc90.ptx"
expect_re "--cuda summary after arch errors" 1 "tc90.ptx: does not load on a driver of CUDA 12.8: ptxas and the driver's JIT refuse the 1 error above" -- lint --cuda 12.8 "$dir/tc90.ptx"
expect_re "--sm summary after arch errors" 1 "tc90.ptx: cannot run on sm_100: ptxas and the driver's JIT refuse the 1 error above" -- lint --sm 100 "$dir/tc90.ptx"

# a megabyte line and CRLF line ends
{ printf '.version 7.0\r\n.target sm_75\r\n// '; head -c 2000000 /dev/zero | tr '\0' x; printf '\r\n.visible .entry k()\r\n{\r\n.reg .b16 %%rs<2>;\r\n.reg .f32 %%f<2>;\r\ncvt.rn.bf16.f32 %%rs1, %%f1;\r\n}\r\n'; } >"$dir/big.ptx"
expect_re "megabyte line, CRLF" 1 'big.ptx:8: error: needs sm_80' -- lint "$dir/big.ptx"

finish "lint cli"
