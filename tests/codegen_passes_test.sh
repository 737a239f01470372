#!/usr/bin/env bash
# tests/codegen_passes_test.sh - the NVPTX codegen passes kiln leaves out (gen/gen_llvm.cpp's
# dropped_codegen_passes) are really left out, KILN_CODEGEN_PASSES=drop:NAME[#N] leaves out
# exactly the Nth pass of that name, and a template's config().lsr / .slsr = false leaves loop /
# straight-line strength reduction out of its kernels only, and attention keeps early tail duplication
# where it changes the PTX (window, softcap and ALiBi together): all judged by the PTX of kernels the choice changes.
set -u
. "$(dirname "$0")/cli_lib.sh"

emit() { # FILE [KILN_CODEGEN_PASSES]
    if KILN_CODEGEN_PASSES=${2-} "$KILN" emit "${SPEC[@]}" --sm 80 -o "$1" 2>"$tmp/err"; then return 0; fi
    bad "emit $1" "$(cat "$tmp/err")"
    return 1
}
same() { # NAME A B WANT(same|differ)
    local got=differ
    cmp -s "$2" "$3" && got=same
    if [ "$got" = "$4" ]; then ok "$1"; else bad "$1" "the PTX is $got, want $4"; fi
}

SPEC=(attention dtype=f16 head_dim=96 splitkv=true)
emit "$tmp/default.ptx" || finish codegen_passes
emit "$tmp/llvm.ptx" llvm &&
    same "split-KV attention: N-ary reassociation and the second EarlyCSE change nothing" "$tmp/default.ptx" "$tmp/llvm.ptx" same
emit "$tmp/nary.ptx" "drop:Nary reassociation" &&
    same "N-ary reassociation is already left out" "$tmp/default.ptx" "$tmp/nary.ptx" same
emit "$tmp/cse3.ptx" "drop:Early CSE#3" &&
    same "the third EarlyCSE is one kiln keeps" "$tmp/default.ptx" "$tmp/cse3.ptx" differ
emit "$tmp/cse4.ptx" "drop:Early CSE#4" &&
    same "#N names one occurrence (there is no fourth)" "$tmp/default.ptx" "$tmp/cse4.ptx" same
emit "$tmp/empty.ptx" "drop:" && same "an empty drop list changes nothing" "$tmp/default.ptx" "$tmp/empty.ptx" same
emit "$tmp/lsr.ptx" "drop:Loop Strength Reduction" &&
    same "split-KV attention keeps LSR" "$tmp/default.ptx" "$tmp/lsr.ptx" differ

SPEC=(attention dtype=f16 head_dim=96)
emit "$tmp/a.ptx" && emit "$tmp/a_lsr.ptx" "drop:Loop Strength Reduction" &&
    same "cp.async tensor-core attention leaves LSR out" "$tmp/a.ptx" "$tmp/a_lsr.ptx" same

SPEC=(attention dtype=f16 head_dim=64 causal=top_left window=true softcap=true alibi=true)
emit "$tmp/w.ptx" && emit "$tmp/w_td.ptx" "drop:Early Tail Duplication" &&
    same "attention with window, softcap and ALiBi keeps early tail duplication (config().skip_codegen)" "$tmp/w.ptx" "$tmp/w_td.ptx" differ

SPEC=(attention_combine out=f32 head_dim=96)
emit "$tmp/c.ptx" && emit "$tmp/c_lsr.ptx" "drop:Loop Strength Reduction" &&
    same "attention_combine leaves LSR out (config().lsr = false)" "$tmp/c.ptx" "$tmp/c_lsr.ptx" same
emit "$tmp/c_llvm.ptx" llvm && same "KILN_CODEGEN_PASSES=llvm brings LSR back" "$tmp/c.ptx" "$tmp/c_llvm.ptx" differ

SPEC=(rmsnorm_bwd x=f32 hidden=16384)
emit "$tmp/r.ptx" && emit "$tmp/r_slsr.ptx" "drop:Straight line strength reduction" &&
    same "the norm backward leaves straight-line strength reduction out (config().slsr = false)" "$tmp/r.ptx" "$tmp/r_slsr.ptx" same
emit "$tmp/r_llvm.ptx" llvm && same "KILN_CODEGEN_PASSES=llvm brings it back" "$tmp/r.ptx" "$tmp/r_llvm.ptx" differ
finish codegen_passes
