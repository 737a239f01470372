#!/usr/bin/env bash
# tests/gpukit_test.sh - the GPU check kit (make gpu-kit): what it holds and links, its bundle, and a whole
# run against the fake CUDA driver, which executes no kernel: the kit must run end to end and FAIL its
# correctness check (every output stays poisoned), proving that the check can fail.
source tests/cli_lib.sh
O=${O:-build}
KIT=$O/gpu-kit FAKE=$O/tests/libfakecuda.so.1
if [ ! -x "$KIT/run" ]; then # the sanitizer suite uses the plain build's kit, with the plain fake driver
    KIT=build/gpu-kit FAKE=build/tests/libfakecuda.so.1
fi
if [ ! -x "$KIT/run" ] || [ ! -f "$FAKE" ]; then
    echo "gpukit: 0 passed, 0 failed, 1 skipped (no $KIT/run or fake driver: make gpu-kit)"
    exit 0
fi
FAKE=$(cd "$(dirname "$FAKE")" && pwd)/$(basename "$FAKE")

# ---- contents and size
for f in run kiln-gpucheck kiln-kit lib/libkiln.so.0.gz kit.kbundle.gz transformer.kbundle.gz peers.py specs.txt lib/libkiln_rt.so.0 \
    lib/liblua5.4.so.0 python/kiln/torch.py python/tests/test_torch_real.py python/tests/test_torch_swap_norms.py \
    models.py python/kiln/flash_attn.py python/kiln/transformers.py python/tests/test_torch_flash_attn.py python/tests/test_torch_transformers.py \
    python/tests/conftest.py python/kiln/_fa_varlen.py python/tests/test_torch_flash_attn_kernels.py python/tests/test_torch_fa_matrix.py python/tests/fa_matrix.py; do
    if [ -e "$KIT/$f" ]; then ok "kit has $f"; else bad "kit has $f" "missing"; fi
done
size=$(du -sbL "$KIT" | cut -f1)
if [ "$size" -lt $((48 << 20)) ]; then ok "kit size"; else bad "kit size" "$size bytes: more than 48 MiB of the 64 a call carries with the tree"; fi

# ---- link dependencies: the AOT check needs libc (and libdl/libm) only; the generator (no LLVM or Lua
# package on the GPU machine) libc/libstdc++ and what lib/ carries
needed() { readelf -d "$1" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | sort | tr '\n' ' '; }
deps=$(needed "$KIT/kiln-gpucheck")
extra=$(tr ' ' '\n' <<<"$deps" | grep -vE '^(libc|libm|libdl|libpthread)\.so\.[0-9]+$|^$' || true)
if [ -z "$extra" ]; then ok "kiln-gpucheck links libc only"; else bad "kiln-gpucheck links libc only" "also: $extra"; fi
# kiln-kit and libkiln.so.0 (LLVM inside) need nothing the kit's lib/ does not carry beyond libc/libstdc++
mkdir -p "$tmp/lib" && cp "$KIT/kiln-kit" "$tmp/kiln-kit" && cp "$KIT"/lib/*.so.* "$tmp/lib/" &&
    gzip -dc "$KIT/lib/libkiln.so.0.gz" >"$tmp/lib/libkiln.so.0"
shipped=$(cd "$tmp/lib" && ls | tr '\n' '|' | sed 's/|$//; s/\./\\./g; s/+/\\+/g')
for bin in kiln-kit lib/libkiln.so.0; do
    deps=$(needed "$tmp/$bin")
    extra=$(tr ' ' '\n' <<<"$deps" | grep -vE "^(libc|libm|libdl|libpthread|libstdc\+\+|libgcc_s)\.so\.[0-9]+\$|^ld-linux-x86-64\.so\.2\$|^(${shipped})\$|^\$" || true)
    if [ -z "$extra" ]; then ok "$bin needs only libc/libstdc++ and the kit's lib/"; else bad "$bin's libraries" "also: $extra"; fi
done
if "$tmp/kiln-kit" specs | cmp -s - "$KIT/specs.txt"; then ok "specs.txt is the kit's list"; else bad "specs" "differs"; fi

# ---- the bundle: every spec as PTX and cubin for every SM, all checksums good (bundle-info checks)
gzip -dc "$KIT/kit.kbundle.gz" >"$tmp/kit.kbundle"
if "$KILN" bundle-info "$tmp/kit.kbundle" >"$tmp/info" 2>&1; then ok "bundle opens"; else bad "bundle opens" "$(head -3 "$tmp/info")"; fi
nspecs=$(wc -l <"$KIT/specs.txt")
for sm in 75 80 86 89 90; do
    for kind in ptx cubin; do
        n=$(awk -v sm=$sm -v k=$kind '$2 == sm && $3 == k' "$tmp/info" | wc -l)
        if [ "$n" -eq "$nspecs" ]; then ok "bundle sm_$sm $kind"; else bad "bundle sm_$sm $kind" "$n entries, want $nspecs"; fi
    done
done

# ---- a whole run against the fake driver: runs end to end, and the correctness check FAILS
export KILN_CUDA_DRIVER=$FAKE FAKE_CUDA_SM=90
KIT_QUICK=1 KIT_OUT=$tmp/kitout "$KIT/run" >"$tmp/run.log" 2>&1
rc=$?
if [ $rc -eq 1 ]; then ok "fake run exits 1"; else bad "fake run exits 1" "exit $rc: $(tail -5 "$tmp/run.log")"; fi
if grep -q "^GPU KIT: correctness FAIL" "$tmp/run.log"; then ok "fake run says FAIL"; else bad "fake run says FAIL" "$(tail -3 "$tmp/run.log")"; fi
for f in kit.log check_aot.csv check_jit.csv jit_timing.csv bench.csv summary.md; do
    if [ -s "$tmp/kitout/$f" ]; then ok "output $f"; else bad "output $f" "missing or empty"; fi
done
for mode in "cubin sm_90" "ptx sm_90" "ptx sm_75" "cubin sm_90/name"; do
    for fam in layernorm attention; do
        n=$(awk -F, -v m="$mode" -v f=$fam '$3 == m && $2 == f' "$tmp/kitout/check_aot.csv" | wc -l)
        if [ "$n" -gt 0 ]; then ok "checked $fam $mode"; else bad "checked $fam $mode" "no rows"; fi
    done
done
# split-KV decoding: split + combine through the generic launch (its `after` kernel) in every payload mode, and the
# decoding speed rows (kiln split-KV and non-split) in bench.csv
for mode in "cubin sm_90" "ptx sm_90" "ptx sm_75" "jit"; do
    n=$(awk -F, -v m="$mode" '$3 == m && $2 == "attention_splitkv"' "$tmp/kitout/check_aot.csv" "$tmp/kitout/check_jit.csv" | wc -l)
    if [ "$n" -gt 0 ]; then ok "checked attention_splitkv $mode"; else bad "checked attention_splitkv $mode" "no rows"; fi
done
n=$(grep -c "^attention_decode,kiln-splitkv," "$tmp/kitout/bench.csv"); m=$(grep -c "^attention_decode,kiln," "$tmp/kitout/bench.csv")
if [ "$n" -gt 0 ] && [ "$m" -gt 0 ]; then ok "decoding speed rows"; else bad "decoding speed rows" "split-KV $n, non-split $m"; fi
# attention backward: the whole sequence through the generic launch in every payload mode and in the JIT path, and the
# deterministic cases' second run (its own rows, "<output>@rerun")
for mode in "cubin sm_90" "ptx sm_90" "ptx sm_75" "jit"; do
    n=$(cat "$tmp/kitout/check_aot.csv" "$tmp/kitout/check_jit.csv" |
        awk -F, -v m="$mode" '$3 == m && $2 == "attention_bwd" && $4 == "launch" && $7 ~ /^d[qkv]$/' | wc -l)
    if [ "$n" -gt 0 ]; then ok "checked attention_bwd $mode"; else bad "checked attention_bwd $mode" "no rows"; fi
done
n=$(awk -F, '$2 == "attention_bwd" && $7 == "dq@rerun"' "$tmp/kitout/check_aot.csv" | wc -l)
if [ "$n" -gt 0 ]; then ok "deterministic rerun rows"; else bad "deterministic rerun rows" "none"; fi
n=$(awk -F, '$2 == "attention_bwd" && $4 == "by-name"' "$tmp/kitout/check_aot.csv" | wc -l)
if [ "$n" -eq 0 ]; then ok "attention_bwd generic launch only"; else bad "attention_bwd generic launch only" "$n by-name rows"; fi
rows=$(cat "$tmp/kitout/check_aot.csv" "$tmp/kitout/check_jit.csv" | awk -F, '$1 != "case"' | wc -l)
passed=$(cat "$tmp/kitout/check_aot.csv" "$tmp/kitout/check_jit.csv" | awk -F, '$1 != "case" && $18 == "pass"' | wc -l)
poisoned=$(cat "$tmp/kitout/check_aot.csv" "$tmp/kitout/check_jit.csv" | awk -F, '$1 != "case" && $16 ~ /nan/' | wc -l)
if [ "$rows" -gt 20 ] && [ "$passed" -eq 0 ]; then ok "no output passes"; else bad "no output passes" "$passed of $rows passed"; fi
if [ "$poisoned" -eq "$rows" ]; then ok "unwritten outputs read as poison"; else bad "poison" "$poisoned of $rows read NaN"; fi
for b in copy mma_peak layernorm_fwd attention_fwd attention_bwd attention_bwd_det; do
    if grep -q "^$b," "$tmp/kitout/bench.csv"; then ok "bench $b"; else bad "bench $b" "no row"; fi
done
if grep -q "^| bf16 | 4096 |" "$tmp/kitout/summary.md"; then ok "summary table"; else bad "summary table" "no bf16 4096 row"; fi
# issue 25's speed rows: paged decoding (pages of 16 and 256), varlen beside the dense kernel, rotary both modes;
# each with its table in summary.md
for row in attention_decode_paged,kiln-splitkv-page16 attention_decode_paged,kiln-splitkv-page256 \
    attention_varlen,kiln-varlen attention_varlen,kiln-dense rotary,kiln-neox rotary,kiln-interleaved; do
    if grep -q "^$row," "$tmp/kitout/bench.csv"; then ok "bench $row"; else bad "bench $row" "no row"; fi
done
for t in "Paged decoding" "Varlen vs the dense kernel" "Rotary, out of place"; do
    if grep -q "^### $t" "$tmp/kitout/summary.md"; then ok "summary: $t"; else bad "summary: $t" "no table"; fi
done

# ---- the device's SM picks the kernels: sm_87 runs sm_86 code
FAKE_CUDA_SM=87 "$KIT/kiln-gpucheck" device >"$tmp/dev" 2>&1
if grep -q "^86 " "$tmp/dev"; then ok "sm_87 -> sm_86 kernels"; else bad "sm_87 -> sm_86 kernels" "$(cat "$tmp/dev")"; fi

# ---- bad input: one clear line, exit 2
KILN="$KIT/kiln-gpucheck"
expect "no command" 2 "expected 'device'" --
expect "unknown command" 2 "expected 'device'" -- frob a b
expect "unknown option" 2 "unknown argument '--frob'" -- check a b --frob
mkdir -p "$tmp/empty"
expect "no cases" 2 "no cases in" -- check "$tmp/kit.kbundle" "$tmp/empty"
expect "missing bundle" 2 "bundle" -- check "$tmp/nope.kbundle" "$tmp/empty"
head -c 100000 "$tmp/kit.kbundle" >"$tmp/cut.kbundle"
expect "truncated bundle" 2 "bundle" -- check "$tmp/cut.kbundle" "$tmp/empty"
KILN_CUDA_DRIVER=$tmp/none.so expect "no driver" 2 "no CUDA driver" -- check "$tmp/kit.kbundle" "$tmp/empty"
KILN="$tmp/kiln-kit"
expect "kit: no command" 2 "expected a command" --
expect "kit: prepare needs --sm" 2 "needs --sm" -- prepare "$tmp/c"
expect "kit: bad sm" 2 "valid: 75" -- prepare "$tmp/c" --sm 70
expect "kit: jit without cases" 2 "no cases" -- jit "$tmp/empty"
finish gpukit
