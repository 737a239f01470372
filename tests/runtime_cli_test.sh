#!/usr/bin/env bash
# tests/runtime_cli_test.sh - `kiln bundle` / `kiln bundle-info`, and a program built from --emit-c output.
set -u
: "${O:=build}" "${KILN:=bin/kiln}"
LIBDIR=lib CFLAGS_EXTRA=""
if [ "$O" != build ]; then LIBDIR=$O/lib CFLAGS_EXTRA="-fsanitize=address,undefined"; fi
export KILN_CUDA_DRIVER="$PWD/$O/tests/libfakecuda.so.1" KILN_CACHE=0
T=$(mktemp -d /tmp/kiln_cli_test.XXXXXX)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0 skip=0
ok() { pass=$((pass + 1)); }
no() { fail=$((fail + 1)); echo "FAIL $*"; }
check() { local what=$1; shift; if "$@"; then ok; else no "$what"; fi; }

# the default matrix: every family x 3 dtypes x every plain SM from 75 up (kiln list's targets less the
# arch-specific sm_90a, which a bundle holds for every spec when --sm names it), plus on sm_90a alone the kernels the
# templates declare for it (K.bundle.arch: attention's path=wgmma, 16)
"$KILN" bundle -o "$T/default.kbundle" 2>"$T/err"
check "default bundle" test -s "$T/default.kbundle" -a ! -s "$T/err"
"$KILN" bundle-info "$T/default.kbundle" >"$T/info"
nsm=$("$KILN" list | sed -n 's/^targets: *//p' | tr ' ' '\n' | sed 's/^sm_//' | grep -v 'a$' | awk '$1 >= 75' | wc -l)
want=$((74 * nsm + 16))
check "bundle-info counts $want entries: 16 sm_90a path=wgmma attention kernels and 74 per SM x $nsm SMs (layernorm, rmsnorm, layernorm_bwd, rmsnorm_bwd, norm_reduce 3 each, attention 6, attention_bwd 18, split-KV decoding f16/bf16 d64/d128 split + combine 8, Mistral's window f16/bf16 d128 2, Gemma 2's softcap bf16 d256 with and without the window 2, BLOOM/MPT's ALiBi bf16 d128 1, dropout bf16 d128 forward + dkdv 2, varlen prefill f16/bf16 d128 causal 2, paged KV cache f16/bf16 d128 causal split-KV + plain, with and without the append 8, bf16 with rotary=neox in the append split-KV + plain 2, rotary 3 dtypes x d64/d128 + GPT-J f16/bf16 d128: 8)" grep -q " $want entries" "$T/info"
check "the default bundle holds dropout (sm_80 bf16 d128, forward and dkdv)" \
    grep -Eq " 80 ptx .*attention_bwd kernel=dkdv dtype=bf16 out=bf16 grad=bf16 head_dim=128 causal=true .*dropout=true" "$T/info"
check "the default bundle holds paged decoding with the append and rotary (sm_80 bf16 d128)" \
    grep -Eq " 80 ptx .*attention dtype=bf16 out=bf16 head_dim=128 causal=true path=auto splitkv=true paged=true append=true rotary=neox" "$T/info"
check "the default bundle holds varlen prefill (sm_80 bf16 d128)" \
    grep -Eq " 80 ptx .*attention dtype=bf16 out=bf16 head_dim=128 causal=true path=auto varlen=true" "$T/info"
check "the default bundle holds Mistral's window (sm_80 bf16 d128)" \
    grep -Eq " 80 ptx .*attention dtype=bf16 out=bf16 head_dim=128 causal=true path=auto window=true" "$T/info"
check "the default bundle holds ALiBi (sm_80 bf16 d128 causal: BLOOM, MPT)" \
    grep -Eq " 80 ptx .*attention dtype=bf16 out=bf16 head_dim=128 causal=true path=auto alibi=true" "$T/info"
check "the default bundle holds Gemma 2's softcap (sm_90 bf16 d256)" \
    grep -Eq " 90 ptx .*attention dtype=bf16 out=bf16 head_dim=256 causal=true path=auto window=true softcap=true" "$T/info"
check "the default bundle holds rotary (sm_75 bf16 GPT-J)" grep -Eq " 75 ptx .*rotary dtype=bf16 cs=bf16 head_dim=128 rotary_dim=128 interleaved=true" "$T/info"
check "the default bundle holds Blackwell (sm_120 attention)" grep -Eq " 120 ptx .*attention dtype=bf16" "$T/info"
check "bundle-info lists the norm backwards' norm_reduce" grep -Eq " 90 ptx .*norm_reduce w=bf16" "$T/info"
check "bundle-info lists sm_75 bf16" grep -Eq " 75 ptx .*layernorm x=bf16 w=bf16 y=bf16 hidden=launch" "$T/info"
check "the default bundle holds sm_90a for path=wgmma alone: 16 attention kernels" \
    test "$(grep -Ec '^ *[0-9]+ +90a ptx .*attention dtype=.* path=wgmma' "$T/info")" -eq 16 -a "$(grep -Ec '^ *[0-9]+ +90a ' "$T/info")" -eq 16
check "  d128 128-key tiles, d256 softcap on 32-key tiles among them" \
    grep -Eq " 90a ptx .*attention dtype=bf16 out=bf16 head_dim=256 causal=true path=wgmma window=true softcap=true" "$T/info"
# the runtime's pick from that bundle on the fake driver (libkiln_rt alone: an entry or an error, never a generator)
cc -std=c11 -Wall -Wextra -Werror $CFLAGS_EXTRA -Iinclude tests/fake_cuda/bundle_pick.c "$LIBDIR/libkiln_rt.a" -ldl -lpthread \
    -o "$T/pick" 2>"$T/cc"
check "bundle_pick builds: $(head -3 "$T/cc")" test -x "$T/pick"
# (libkiln_rt alone has no templates to canonicalize a spec: the bundle's own spelling)
WG="attention dtype=bf16 out=bf16 head_dim=128 causal=false path=wgmma" AUTO="attention dtype=bf16 out=bf16 head_dim=128 causal=false path=auto"
out=$(FAKE_CUDA_SM=90 "$T/pick" "$T/default.kbundle" "$WG" 2>&1)
check "9.0 device: path=wgmma from the sm_90a entry ($out)" grep -q "sm=1090 kind=ptx entry=kiln_attention_bf16_bf16_128_false_wgmma" <<<"$out"
out=$(FAKE_CUDA_SM=90 "$T/pick" "$T/default.kbundle" "$AUTO" 2>&1)
check "9.0 device: path=auto from sm_90 PTX ($out)" grep -q "sm=90 kind=ptx" <<<"$out"
for dev in 100 120; do
    out=$(FAKE_CUDA_SM=$dev "$T/pick" "$T/default.kbundle" "$AUTO" 2>&1)
    check "sm_$dev device: path=auto from its own PTX, not sm_90a ($out)" grep -q "sm=$dev kind=ptx" <<<"$out"
    out=$(FAKE_CUDA_SM=$dev "$T/pick" "$T/default.kbundle" "$WG" 2>&1)
    check "sm_$dev device: no path=wgmma entry runs there ($out)" grep -q "^error: " <<<"$out"
done
# (the plain pass alone: two more default sets, 164 kernels, whose generation under the sanitizers is the same
# code as the default bundle's above; the sanitizer pass's largest script, 113 s of CPU in wave 23)
if [ "$O" = build ]; then
    "$KILN" bundle --sm 75 -o "$T/plain.kbundle" 2>"$T/err" && "$KILN" bundle-info "$T/plain.kbundle" >"$T/pinfo"
    check "--sm without 90a: the default set's sm_90a kernels left out" bash -c "! grep -Eq '^ *[0-9]+ +90a ' '$T/pinfo'"
    "$KILN" bundle --sm 90a -o "$T/arch.kbundle" 2>"$T/err" && "$KILN" bundle-info "$T/arch.kbundle" >"$T/ainfo"
    check "--sm 90a: every default spec on sm_90a, path=wgmma's once each" \
        test "$(grep -Ec ' 90a ptx .*path=wgmma' "$T/ainfo")" -eq 16 -a "$(grep -Ec '^ *[0-9]+ +90a ' "$T/ainfo")" -eq 90
fi
"$KILN" bundle layernorm --dtypes bf16/f32/bf16 --hidden 4096 --sm 90,sm_90a -o "$T/a.kbundle" 2>"$T/err"
"$KILN" bundle-info "$T/a.kbundle" >"$T/ainfo"
check "--sm 90,sm_90a: a bundle with sm_90 and sm_90a PTX" grep -Eq " 90a ptx +8\.0 .*layernorm x=bf16" "$T/ainfo"
check "--sm 90,sm_90a: sm_90's entry too" grep -Eq " 90 ptx +7\.8 .*layernorm x=bf16" "$T/ainfo"

# bad input: exit 2, one error line, no output file
bad() {
    local what=$1; shift
    "$KILN" bundle "$@" -o "$T/bad.kbundle" >"$T/out" 2>"$T/err"
    local rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <"$T/err")" -eq 1 ] && grep -q "^kiln: error: .*valid" "$T/err" && [ ! -e "$T/bad.kbundle" ]
    then ok; else no "$what (rc $rc: $(cat "$T/err"))"; fi
}
bad "unknown family" nosuchfamily
bad "unknown dtype" layernorm --dtypes f64
bad "unknown SM" layernorm --sm 61
bad "wrong combination" layernorm --dtypes bf16/f32
bad "bad shape" layernorm --hidden 0
bad "bad spec" --spec "layernorm x=int8"
"$KILN" bundle layernorm >/dev/null 2>"$T/err"
check "missing output is an error" grep -q "missing output" "$T/err"
printf 'not a bundle at all\n' >"$T/junk"
"$KILN" bundle-info "$T/junk" 2>"$T/err"
check "bundle-info refuses junk" test $? -eq 2
check "  and says why" grep -q "not a kiln bundle" "$T/err"
head -c 3000 "$T/default.kbundle" >"$T/cut.kbundle"
"$KILN" bundle-info "$T/cut.kbundle" 2>"$T/err"
check "bundle-info refuses a truncated bundle" grep -q "truncated" "$T/err"

# spec list: comments, blank lines, repeats collapse to one variant
printf '# LayerNorm for the model\nlayernorm x=bf16 w=f32 y=bf16 hidden=4096\n\nlayernorm hidden=4096 x=bf16 w=f32  # same\n' >"$T/specs"
"$KILN" bundle --spec-list "$T/specs" --sm 80,90 -o "$T/list.kbundle" 2>"$T/err"
"$KILN" bundle-info "$T/list.kbundle" >"$T/info" 2>&1
check "spec list: 2 entries" grep -q "2 entries" "$T/info"

# --emit-c: the .c/.h pair compiles and links with libkiln_rt alone
"$KILN" bundle layernorm --dtypes bf16/f32/bf16 --hidden launch,4096 --sm 75,80,90 --emit-c "$T/ln_bundle" 2>"$T/err"
check "emit-c wrote both files" test -s "$T/ln_bundle.c" -a -s "$T/ln_bundle.h"
cc -std=c11 -Wall -Wextra -Werror $CFLAGS_EXTRA -Iinclude -I"$T" tests/fake_cuda/emitc_main.c "$T/ln_bundle.c" \
    "$LIBDIR/libkiln_rt.a" -ldl -lpthread -o "$T/emitc" 2>"$T/cc"
check "emit-c program builds: $(head -3 "$T/cc")" test -x "$T/emitc"
check "  and needs no LLVM or Lua" bash -c "! nm '$T/emitc' | grep -Eq 'LLVM|lua_'"
SPEC="layernorm x=bf16 w=f32 y=bf16 hidden=4096 weight=true bias=true"
for pair in 75:75 80:80 86:80 89:80 90:90; do
    dev=${pair%:*} want=${pair#*:}
    out=$(FAKE_CUDA_SM=$dev "$T/emitc" "$SPEC" 2>&1)
    check "sm_$dev device gets sm_$want PTX ($out)" grep -q "sm=$want kind=ptx" <<<"$out"
    check "  and launches" grep -q "launched layernorm" <<<"$out"
done
out=$(FAKE_CUDA_SM=80 "$T/emitc" "layernorm x=f16 w=f16 y=f16 hidden=launch weight=true bias=true" 2>&1)
check "missing spec names the bundle's holdings ($out)" grep -q "no generator is linked.*layernorm x=bf16" <<<"$out"

# --cubin: ptxas-made cubins, preferred on their exact SM
if [ -x /usr/local/cuda/bin/ptxas ] || command -v ptxas >/dev/null; then
    "$KILN" bundle layernorm --dtypes bf16/f32/bf16 --hidden 4096,launch --sm 80,86 --cubin --emit-c "$T/ln_bundle" 2>"$T/err"
    check "cubin bundle: $(cat "$T/err")" test -s "$T/ln_bundle.c"
    cc -std=c11 $CFLAGS_EXTRA -Iinclude -I"$T" tests/fake_cuda/emitc_main.c "$T/ln_bundle.c" "$LIBDIR/libkiln_rt.a" \
        -ldl -lpthread -o "$T/emitc"
    out=$(FAKE_CUDA_SM=86 "$T/emitc" "$SPEC" 2>&1)
    check "sm_86 device gets the sm_86 cubin ($out)" grep -q "sm=86 kind=cubin" <<<"$out"
    out=$(FAKE_CUDA_SM=89 "$T/emitc" "$SPEC" 2>&1)
    check "sm_89 device gets sm_86 PTX, not the cubin ($out)" grep -q "sm=86 kind=ptx" <<<"$out"
    # --cubin-sm: cubins for the listed SMs alone, PTX for every --sm; an SM outside --sm is refused
    "$KILN" bundle layernorm --dtypes bf16/f32/bf16 --hidden 4096 --sm 80,86 --cubin-sm 86 -o "$T/cub86.kbundle" 2>"$T/err"
    "$KILN" bundle-info "$T/cub86.kbundle" >"$T/info" 2>&1
    check "--cubin-sm 86: one sm_86 cubin ($(cat "$T/err"))" test "$(awk '$3 == "cubin"' "$T/info" | wc -l)" -eq 1
    check "  it is sm_86's" test "$(awk '$2 == 86 && $3 == "cubin"' "$T/info" | wc -l)" -eq 1
    check "  and PTX for sm_80 and sm_86" test "$(awk '$3 == "ptx"' "$T/info" | wc -l)" -eq 2
    out=$("$KILN" bundle layernorm --dtypes bf16 --hidden 4096 --sm 80,86 --cubin-sm 90 -o "$T/no.kbundle" 2>&1)
    rc=$?
    check "--cubin-sm outside --sm: exit 2, names the valid SMs ($out)" \
        test $rc -eq 2 -a "$out" = "kiln: error: --cubin-sm 90 is not one of --sm's SMs (80, 86)"
    check "  and writes no bundle" test ! -e "$T/no.kbundle"
    out=$("$KILN" bundle layernorm --dtypes bf16 --hidden 4096 --sm 80 --cubin-sm sm_x -o "$T/no.kbundle" 2>&1)
    check "--cubin-sm with a bad SM: exit 2 ($out)" test $? -eq 2 -a ! -e "$T/no.kbundle"
    out=$("$KILN" bundle layernorm --dtypes bf16 --hidden 4096 --sm 80 --cubin-sm "" -o "$T/no.kbundle" 2>&1)
    check "--cubin-sm '': exit 2, not every SM's cubins ($out)" test $? -eq 2 -a ! -e "$T/no.kbundle"
else
    skip=$((skip + 1))
fi
echo "runtime_cli: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
