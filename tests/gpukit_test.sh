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
for f in run sanitize kiln-gpucheck kiln-kit lib/libkiln.so.0.gz kit.kbundle.gz kit_90a.kbundle.gz specs_90a.txt transformer.kbundle.gz peers.py specs.txt lib/libkiln_rt.so.0 \
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
# the spec lists: make writes them with `kiln-kit specs [--arch]` after building kiln-kit (which links libkiln, the
# templates inside), so a list newer than that kiln-kit is its list; listing again here took ~10 s of CPU
kk=$(dirname "$KIT")/bench/kiln-kit
for f in specs.txt specs_90a.txt; do
    if [ "$KIT/$f" -nt "$kk" ]; then ok "$f is kiln-kit's list"; else bad "$f" "older than $kk: make gpu-kit"; fi
done

# ---- the bundle: every spec as PTX for every SM and as a cubin for sm_90 (the Makefile's KIT_CUBIN_SMS: the GPU
# the kit is carried to) and no other SM, all checksums good (bundle-info checks)
gzip -dc "$KIT/kit.kbundle.gz" >"$tmp/kit.kbundle"
if "$KILN" bundle-info "$tmp/kit.kbundle" >"$tmp/info" 2>&1; then ok "bundle opens"; else bad "bundle opens" "$(head -3 "$tmp/info")"; fi
nspecs=$(wc -l <"$KIT/specs.txt")
for sm in 75 80 86 89 90 100 120; do
    for kind in ptx cubin; do
        want=$nspecs
        [ $kind = cubin ] && [ $sm != 90 ] && want=0
        n=$(awk -v sm=$sm -v k=$kind '$2 == sm && $3 == k' "$tmp/info" | wc -l)
        if [ "$n" -eq "$want" ]; then ok "bundle sm_$sm $kind: $n"; else bad "bundle sm_$sm $kind" "$n entries, want $want"; fi
    done
done

# the arch bundle: sm_90a PTX and a cubin of every spec `kiln-kit specs --arch` lists (the wgmma attention rows), nothing else
gzip -dc "$KIT/kit_90a.kbundle.gz" >"$tmp/kit_90a.kbundle"
"$KILN" bundle-info "$tmp/kit_90a.kbundle" >"$tmp/info90a" 2>&1
n90a=$(grep -c "path=wgmma" "$KIT/specs_90a.txt")
for kind in ptx cubin; do
    n=$(awk -v k=$kind '$2 == "90a" && $3 == k && /path=wgmma/' "$tmp/info90a" | wc -l)
    if [ "$n" -eq "$n90a" ] && [ "$n" -gt 0 ]; then ok "arch bundle sm_90a $kind"; else bad "arch bundle sm_90a $kind" "$n entries, want $n90a"; fi
done
n=$(awk '$2 ~ /^[0-9]+a?$/ && $2 != "90a"' "$tmp/info90a" | wc -l)
if [ "$n" -eq 0 ]; then ok "arch bundle holds sm_90a only"; else bad "arch bundle holds sm_90a only" "$n other entries"; fi

# The sanitizer pass (O=build/san) has no kit of its own: from here on every program is the plain build's kit
# and fake driver, which the plain pass runs whole (~55 s again, wave 22). Its own code ran above: kiln
# bundle-info over the kit's bundles.
if [ "$O" != build ]; then
    echo "gpukit: sanitizer pass: the kit's programs are the plain build's (its pass runs them); this build's kiln checked the bundles"
    finish gpukit
fi

# ---- a whole run against the fake driver: runs end to end, and the correctness check FAILS
export KILN_CUDA_DRIVER=$FAKE FAKE_CUDA_SM=90
# a fake compute-sanitizer: records its arguments, runs the command it wraps, then reports as FAKE_SANITIZER says
# (clean, errors: 3 of them and the --error-exitcode status, unsupported: the device refused, hang: never ends)
mkdir -p "$tmp/bin"
cat >"$tmp/bin/compute-sanitizer" <<'EOF'
#!/usr/bin/env bash
printf '%s|' "$@" >>"$FAKE_SANITIZER_LOG"; echo >>"$FAKE_SANITIZER_LOG"
ec=1
while [ $# -gt 0 ]; do case $1 in --error-exitcode) ec=$2; shift 2 ;; --*=*) shift ;; --*) shift 2 ;; *) break ;; esac; done
case ${FAKE_SANITIZER:-clean} in
unsupported) echo "========= Error: Device not supported"; exit 1 ;;
hang) exec sleep 30 ;;
esac
"$@"; rc=$?
if [ "${FAKE_SANITIZER:-clean}" = errors ]; then
    echo "========= Invalid __shared__ write of size 16 bytes"; echo "========= ERROR SUMMARY: 3 errors"; exit "$ec"
fi
echo "========= ERROR SUMMARY: 0 errors"; exit $rc
EOF
chmod +x "$tmp/bin/compute-sanitizer"
export FAKE_SANITIZER_LOG=$tmp/sanitizer.args
PATH="$tmp/bin:$PATH" FAKE_SANITIZER=errors KIT_QUICK=1 KIT_OUT=$tmp/kitout "$KIT/run" >"$tmp/run.log" 2>&1
rc=$?
if [ $rc -eq 1 ]; then ok "fake run exits 1"; else bad "fake run exits 1" "exit $rc: $(tail -5 "$tmp/run.log")"; fi
if grep -q "^GPU KIT: correctness FAIL" "$tmp/run.log"; then ok "fake run says FAIL"; else bad "fake run says FAIL" "$(tail -3 "$tmp/run.log")"; fi
# compute-sanitizer: each tool once over kiln-gpucheck check of the sm_90a cases in mode 'cubin sm_90a'; its errors fail
# the run, and each tool's verdict is a row of summary.md
n=$(grep -c "^--tool|\(memcheck\|racecheck\|synccheck\)|--error-exitcode|86|--print-limit|20|[^|]*/kiln-gpucheck|check|[^|]*kit.kbundle|[^|]*/cases|--arch-bundle|[^|]*kit_90a.kbundle|--mode|cubin sm_90a|$" "$tmp/sanitizer.args")
if [ "$n" -eq 3 ]; then ok "sanitizer: memcheck, racecheck, synccheck over check --mode 'cubin sm_90a'"; else bad "sanitizer command lines" "$n of 3: $(head -3 "$tmp/sanitizer.args")"; fi
n=$(grep -c "^| \(memcheck\|racecheck\|synccheck\) | FAIL: 3 errors | 3 | [0-9]* | [0-9]* checks (case x payload), [0-9]* failed (exit 86) |$" "$tmp/kitout/summary.md")
if [ "$n" -eq 3 ] && grep -q "^verdict: FAIL$" "$tmp/kitout/summary.md" && grep -q "compute-sanitizer FAIL;" "$tmp/run.log"; then
    ok "sanitizer errors: FAIL in summary.md and the verdict"; else bad "sanitizer errors" "$n rows; $(grep -A8 '^## compute-sanitizer' "$tmp/kitout/summary.md")"; fi
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

# issue 27: the sm_90a wgmma rows (the fake device is a 9.0) in every sm_90a payload mode and the JIT path (sm_90a PTX
# generated), and only there; the speed rows (kiln-wgmma beside kiln-fa2 at each dtype and head_dim) and their table
for mode in "cubin sm_90a" "ptx sm_90a" "cubin sm_90a/name" "jit"; do
    n=$(cat "$tmp/kitout/check_aot.csv" "$tmp/kitout/check_jit.csv" |
        awk -F, -v m="$mode" '$3 == m && $1 ~ /^attn-wgmma-/ && $5 ~ /path=wgmma/ && $6 ~ / sm_90a /' | wc -l)
    if [ "$n" -gt 0 ]; then ok "checked wgmma attention $mode"; else bad "checked wgmma attention $mode" "no rows"; fi
done
n=$(cat "$tmp/kitout/check_aot.csv" "$tmp/kitout/check_jit.csv" | awk -F, '($1 ~ /^attn-wgmma-/) != ($3 ~ /sm_90a/) && $3 != "jit"' | wc -l)
if [ "$n" -eq 0 ]; then ok "sm_90a modes check the wgmma rows only"; else bad "sm_90a modes check the wgmma rows only" "$n rows elsewhere"; fi
for dt in bf16 f16; do
    for d in 64 128 256; do
        for impl in kiln-wgmma kiln-fa2; do
            n=$(grep -c "^attention_fwd_wgmma,$impl,$dt,0,$d," "$tmp/kitout/bench.csv")
            if [ "$n" -gt 0 ]; then ok "bench $impl $dt d$d"; else bad "bench $impl $dt d$d" "no row"; fi
        done
    done
done
if grep -q "^### Attention forward on sm_90a" "$tmp/kitout/summary.md" && grep -q "wgmma/FA2 | wgmma/cuDNN" "$tmp/kitout/summary.md"; then
    ok "summary: wgmma table"; else bad "summary: wgmma table" "no table with the wgmma/FA2 and wgmma/cuDNN ratios"; fi
# the sm_90a backward (path=wgmma: prep, dkdv, convert or dq from the arch bundle) in every sm_90a launch mode and the JIT
# path, its deterministic rows run twice, never by name (a sequence); the forward's split-KV (GQA-packed) and paged rows,
# the paged kernel by name too (one kernel); the backward's speed rows beside kiln's FA2 backward, and their table with
# the goals' ratios and the head dim that is not built on wgmma said in it
for mode in "cubin sm_90a" "ptx sm_90a" "jit"; do
    n=$(cat "$tmp/kitout/check_aot.csv" "$tmp/kitout/check_jit.csv" |
        awk -F, -v m="$mode" '$3 == m && $1 ~ /^attn-wgmma-bwd-/ && $2 == "attention_bwd" && $5 ~ /kernel=dkdv .*path=wgmma/ && $6 ~ / sm_90a / && $7 ~ /^d[qkv]$/' | wc -l)
    if [ "$n" -ge 6 ]; then ok "checked wgmma attention_bwd $mode"; else bad "checked wgmma attention_bwd $mode" "$n rows"; fi
    for kind in splitkv paged; do
        n=$(cat "$tmp/kitout/check_aot.csv" "$tmp/kitout/check_jit.csv" |
            awk -F, -v m="$mode" -v k="$kind" '$3 == m && $1 ~ ("^attn-wgmma-" k "-") && $5 ~ ("path=wgmma.*" k "=true") && $6 ~ / sm_90a /' | wc -l)
        if [ "$n" -gt 0 ]; then ok "checked wgmma $kind $mode"; else bad "checked wgmma $kind $mode" "no rows"; fi
    done
done
n=$(awk -F, '$1 ~ /^attn-wgmma-bwd-.*-det-/ && $3 == "cubin sm_90a" && $7 == "dq@rerun"' "$tmp/kitout/check_aot.csv" | wc -l)
if [ "$n" -gt 0 ]; then ok "wgmma deterministic rerun rows"; else bad "wgmma deterministic rerun rows" "none"; fi
n=$(awk -F, '$1 ~ /^attn-wgmma-(bwd|splitkv)-/ && $4 == "by-name"' "$tmp/kitout/check_aot.csv" | wc -l)
m=$(awk -F, '$1 ~ /^attn-wgmma-paged-/ && $3 == "cubin sm_90a/name" && $7 == "o"' "$tmp/kitout/check_aot.csv" | wc -l)
if [ "$n" -eq 0 ] && [ "$m" -gt 0 ]; then ok "wgmma sequences generic launch only, paged by name too"; else bad "wgmma by-name rows" "sequences $n, paged $m"; fi
for dt in bf16 f16; do
    for d in 64 128 256; do
        for impl in kiln-wgmma kiln-wgmma-det kiln-fa2 kiln-fa2-det; do
            n=$(grep -c "^attention_bwd_wgmma,$impl,$dt,0,$d," "$tmp/kitout/bench.csv")
            if [ "$n" -gt 0 ]; then ok "bench backward $impl $dt d$d"; else bad "bench backward $impl $dt d$d" "no row"; fi
        done
    done
done
if grep -q "^### Attention backward on sm_90a" "$tmp/kitout/summary.md" && grep -q "wgmma/cuDNN | det./cuDNN" "$tmp/kitout/summary.md" &&
    grep -q "^| bf16 | 256 | " "$tmp/kitout/summary.md" && ! grep -q "not built on wgmma" "$tmp/kitout/summary.md"; then
    ok "summary: wgmma backward table"; else bad "summary: wgmma backward table" "no table with the ratios and a d256 row"; fi
# planted bugs on the sm_90a cases (prepared again here, alone: the run's are gone): an arch bundle without their specs,
# one with the backward's dkdv but not the rest of its sequence, and a K row stride the tensor map cannot take (100 bf16 =
# 200 bytes); each must be refused, naming the cause
"$tmp/kiln-kit" prepare "$tmp/wcases" --sm 90 --arch-only --quick -j 2 >"$tmp/prep90" 2>&1
n=$(ls "$tmp/wcases" | grep -vc "attn-wgmma-")
if [ "$n" -eq 0 ] && grep -q "^prepared [1-9][0-9]* cases .* 0 failed" "$tmp/prep90"; then ok "prepare --arch-only: the sm_90a rows alone";
else bad "prepare --arch-only" "$n others; $(tail -2 "$tmp/prep90")"; fi
"$KIT/kiln-gpucheck" check "$tmp/kit.kbundle" "$tmp/wcases" --arch-bundle "$tmp/kit_90a.kbundle" >"$tmp/right" 2>&1
n=$(grep -c "sm_90a .* FAIL " "$tmp/right")
if [ "$n" -gt 0 ] && ! grep -q "ERROR" "$tmp/right"; then ok "wgmma cases launch (poison, no error)"; else bad "wgmma cases launch" "$(grep -m2 ERROR "$tmp/right")"; fi
dkdv=$(grep -m1 "^attention_bwd kernel=dkdv .*path=wgmma" "$KIT/specs_90a.txt")
"$KILN" bundle --spec "$dkdv" --sm 90a -o "$tmp/dkdv90a.kbundle" >/dev/null 2>&1
"$KIT/kiln-gpucheck" check "$tmp/kit.kbundle" "$tmp/wcases" --arch-bundle "$tmp/dkdv90a.kbundle" >"$tmp/noprep" 2>&1
n=$(grep -c "attn-wgmma-bwd-.* ptx sm_90a .*ERROR kernel 'attention_bwd [^']*kernel=prep [^']*' for sm_90 is in no loaded bundle" "$tmp/noprep")
if [ "$n" -gt 0 ]; then ok "planted: an arch bundle without the backward's prep fails"; else bad "planted: no prep" "$(grep -m2 "bwd" "$tmp/noprep")"; fi
"$KILN" bundle --spec 'attention dtype=f16 head_dim=64 causal=true path=wgmma' --sm 90a -o "$tmp/wrong90a.kbundle" >/dev/null 2>&1
"$KIT/kiln-gpucheck" check "$tmp/kit.kbundle" "$tmp/wcases" --arch-bundle "$tmp/wrong90a.kbundle" >"$tmp/wrong" 2>&1
rc=$?
n=$(grep -c "sm_90a .*ERROR kernel 'attention .*path=wgmma' for sm_90 is in no loaded bundle" "$tmp/wrong")
if [ $rc -eq 1 ] && [ "$n" -gt 0 ]; then ok "planted: arch bundle without the case's spec fails"; else bad "planted: wrong arch bundle" "exit $rc: $(tail -2 "$tmp/wrong")"; fi
sed -i 's/^scalar stride_ks i64 128$/scalar stride_ks i64 100/' "$tmp"/wcases/*.kcase # same length: the data stays in place
"$KIT/kiln-gpucheck" check "$tmp/kit.kbundle" "$tmp/wcases" --arch-bundle "$tmp/kit_90a.kbundle" >"$tmp/badmap" 2>&1
rc=$?
n=$(grep -c "sm_90a .*ERROR tensor k's stride of axis 1 .* is not a multiple of 16 bytes" "$tmp/badmap")
if [ $rc -eq 1 ] && [ "$n" -gt 0 ]; then ok "planted: a K stride no tensor map takes fails"; else bad "planted: bad map" "exit $rc: $(tail -2 "$tmp/badmap")"; fi
# another device: the rows are skipped, saying why (no case prepared, no sm_90a mode)
"$tmp/kiln-kit" prepare "$tmp/cases89" --sm 89 --arch-only --small -j 2 >"$tmp/prep89" 2>&1
if grep -q "sm_90a wgmma attention rows skipped: they run on a 9.0 device only (this one is sm_89)" "$tmp/prep89" &&
    [ -z "$(ls "$tmp/cases89")" ]; then ok "prepare sm_89: no wgmma cases"; else bad "prepare sm_89" "$(head -3 "$tmp/prep89")"; fi
FAKE_CUDA_SM=89 "$KIT/kiln-gpucheck" check "$tmp/kit.kbundle" "$tmp/wcases" --arch-bundle "$tmp/kit_90a.kbundle" >"$tmp/sm89" 2>&1
if grep -q "sm_90a modes skipped: the wgmma attention rows run on a 9.0 device only (this one is sm_89)" "$tmp/sm89" &&
    ! grep -q "sm_90a .*FAIL\|sm_90a .*ERROR" "$tmp/sm89"; then ok "sm_89: sm_90a rows skipped"; else bad "sm_89 skip" "$(head -5 "$tmp/sm89")"; fi

# run's sanitizer step alone (KIT_SANITIZER_ONLY=1: it prepares its own cases, the quick sm_90a rows here): the verdict
# is the tools', summary.md the section
PATH="$tmp/bin:$PATH" FAKE_SANITIZER=clean KIT_SANITIZER_ONLY=1 KIT_QUICK=1 KIT_OUT=$tmp/sanout "$KIT/run" >"$tmp/sanonly.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "^GPU KIT: compute-sanitizer only (KIT_SANITIZER_ONLY=1): clean in" "$tmp/sanonly.log" &&
    grep -q "^verdict: clean$" "$tmp/sanout/summary.md" && ! grep -q "^== AOT path" "$tmp/sanonly.log"; then
    ok "run KIT_SANITIZER_ONLY=1"; else bad "run KIT_SANITIZER_ONLY=1" "exit $rc: $(tail -5 "$tmp/sanonly.log")"; fi
# the sanitizer step on its own (over the sm_90a cases above): clean; none found (skipped, exit 0); a device it does not
# support (skipped); a tool that does not finish in KIT_SANITIZER_TIMEOUT (FAIL); bad usage (exit 2, one line)
san() { "$KIT/sanitize" "$KIT/kiln-gpucheck" "$tmp/kit.kbundle" "$tmp/kit_90a.kbundle" "$tmp/wcases" "$tmp/san.md"; }
rm -f "$tmp/san.md"; PATH="$tmp/bin:$PATH" FAKE_SANITIZER=clean san >"$tmp/san.out" 2>&1
rc=$?
nw=$(ls "$tmp/wcases" | wc -l) # each case once: the one mode
if [ $rc -eq 0 ] && [ "$(grep -c "| clean | 0 | [0-9]* | $nw checks (case x payload)" "$tmp/san.md")" -eq 3 ] && grep -q "^verdict: clean$" "$tmp/san.md"; then
    ok "sanitizer clean"; else bad "sanitizer clean" "exit $rc: $(cat "$tmp/san.out")"; fi
rm -f "$FAKE_SANITIZER_LOG"; PATH="$tmp/bin:$PATH" KIT_SANITIZER_TOOLS=synccheck KIT_SANITIZER_OPTIONS="--check-bulk-copy=yes --x y" san >"$tmp/san.out" 2>&1
if grep -q "^--tool|synccheck|--error-exitcode|86|--print-limit|20|--check-bulk-copy=yes|--x|y|[^|]*/kiln-gpucheck|check|" "$FAKE_SANITIZER_LOG"; then
    ok "sanitizer: KIT_SANITIZER_OPTIONS on the command line"; else bad "sanitizer options" "$(cat "$FAKE_SANITIZER_LOG")"; fi
rm -f "$tmp/san.md"; KIT_CUDA_DIRS=$tmp/nocuda san >"$tmp/san.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "^  skipped: no compute-sanitizer (not on PATH, none under $tmp/nocuda)$" "$tmp/san.out" &&
    grep -q "^verdict: skipped: no compute-sanitizer" "$tmp/san.md"; then ok "sanitizer: none found, skipped"; else bad "sanitizer none" "exit $rc: $(cat "$tmp/san.out")"; fi
rm -f "$tmp/san.md"; PATH="$tmp/bin:$PATH" FAKE_SANITIZER=unsupported san >"$tmp/san.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "^verdict: skipped: compute-sanitizer does not support this device" "$tmp/san.md"; then
    ok "sanitizer: unsupported device, skipped"; else bad "sanitizer unsupported" "exit $rc: $(cat "$tmp/san.out")"; fi
rm -f "$tmp/san.md"; PATH="$tmp/bin:$PATH" FAKE_SANITIZER=hang KIT_SANITIZER_TIMEOUT=1 KIT_SANITIZER_TOOLS=racecheck san >"$tmp/san.out" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "^  racecheck  FAIL: did not finish in 1 s" "$tmp/san.out"; then ok "sanitizer: a tool past its time fails";
else bad "sanitizer timeout" "exit $rc: $(cat "$tmp/san.out")"; fi
KIT_SANITIZER_TOOLS=memcheck,racecheck san >"$tmp/san.out" 2>&1
rc=$?
if [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/san.out")" -eq 1 ] && grep -q "valid: memcheck, racecheck, synccheck, initcheck" "$tmp/san.out"; then
    ok "sanitizer: bad tool list"; else bad "sanitizer bad tools" "exit $rc: $(cat "$tmp/san.out")"; fi

# ---- the device's SM picks the kernels: sm_87 runs sm_86 code
FAKE_CUDA_SM=87 "$KIT/kiln-gpucheck" device >"$tmp/dev" 2>&1
if grep -q "^86 " "$tmp/dev"; then ok "sm_87 -> sm_86 kernels"; else bad "sm_87 -> sm_86 kernels" "$(cat "$tmp/dev")"; fi

# ---- bad input: one clear line, exit 2
KILN="$KIT/kiln-gpucheck"
expect "no command" 2 "expected 'device'" --
expect "unknown command" 2 "expected 'device'" -- frob a b
expect "unknown option" 2 "unknown argument '--frob'" -- check a b --frob
expect "gpucheck: --arch-bundle without a file" 2 "unknown argument '--arch-bundle'" -- bench "$tmp/kit.kbundle" --arch-bundle
expect "gpucheck: an unknown mode" 2 "no mode 'cubin sm_91a' on this device; its modes: 'cubin sm_90', 'ptx sm_90', 'ptx sm_75', 'cubin sm_90/name', 'cubin sm_90a', 'ptx sm_90a', 'cubin sm_90a/name'" -- check "$tmp/kit.kbundle" "$tmp/wcases" --arch-bundle "$tmp/kit_90a.kbundle" --mode "cubin sm_91a"
expect "gpucheck: --mode is check's" 2 "unknown argument '--mode'" -- bench "$tmp/kit.kbundle" --mode "cubin sm_90"
expect "missing arch bundle" 2 "kiln-gpucheck: arch bundle:" -- check "$tmp/kit.kbundle" "$tmp/wcases" --arch-bundle "$tmp/nope.kbundle"
mkdir -p "$tmp/empty"
expect "no cases" 2 "no cases in" -- check "$tmp/kit.kbundle" "$tmp/empty"
expect "missing bundle" 2 "bundle" -- check "$tmp/nope.kbundle" "$tmp/empty"
head -c 100000 "$tmp/kit.kbundle" >"$tmp/cut.kbundle"
expect "truncated bundle" 2 "bundle" -- check "$tmp/cut.kbundle" "$tmp/empty"
KILN_CUDA_DRIVER=$tmp/none.so expect "no driver" 2 "no CUDA driver" -- check "$tmp/kit.kbundle" "$tmp/empty"
KILN="$tmp/kiln-kit"
expect "kit: no command" 2 "expected a command" --
expect "kit: specs bad argument" 2 "specs takes no argument or --arch, not '--frob'" -- specs --frob
expect "kit: prepare needs --sm" 2 "needs --sm" -- prepare "$tmp/c"
expect "kit: bad sm" 2 "valid: 75" -- prepare "$tmp/c" --sm 70
expect "kit: jit without cases" 2 "no cases" -- jit "$tmp/empty"
finish gpukit
