#!/usr/bin/env bash
# tests/attention_bytes_test.sh - the emulator's bytes profile (kiln run --profile) of paged decoding and varlen
# against their minimum, issue 25's GPU-less speed evidence (docs/attention.md "Bytes"):
# - split-KV decoding (bf16 d128, one query, 8:2 heads, 1024 keys, 4 splits, sm_80) loads at most 1.15x the K + V
#   bytes from a contiguous cache and at most 1.45x through pages of 16 (the block-table reads are counted per
#   lane: 4 bytes a 16-byte chunk), and stores what the contiguous cache stores;
# - varlen (bf16 d64 causal, 2:1 heads, sequences 37, 130, 1, sm_80) stores exactly what the three dense launches
#   on the same tokens store and loads at most 1.10x their bytes (each block's cu_seqlens reads, counted per
#   thread; blocks past a short sequence's end); one sequence of 300 at most 1.05x the dense launch's.
# The rotary family's bytes (stores the minimum, loads <= 1.15x x + cos/sin) are tests/rotary_emu_test.c's.
set -u
. "$(dirname "$0")/cli_lib.sh"

# bytes NAME ARGS...: sets $ld and $st from the first kernel's "global memory" profile line of kiln run ARGS
# --profile; 1 (and a failure) when the run fails or prints none.
bytes() {
    local name=$1 line
    shift
    "$KILN" run "$@" --profile >"$tmp/out" 2>&1
    line=$(sed -n 's/^  global memory *\([0-9]*\) B loaded, \([0-9]*\) B stored.*/\1 \2/p' "$tmp/out" | head -1)
    if [ -z "$line" ] || ! grep -q "^PASS" "$tmp/out"; then
        bad "$name" "no profile or not PASS: $(head -c 400 "$tmp/out")"
        return 1
    fi
    read -r ld st <<<"$line"
}

# within NAME NUM DEN BOUND: NUM / DEN <= BOUND
within() {
    local r
    r=$(awk -v n="$1" -v d="$2" 'BEGIN { printf "%.4f", n / d }')
    if awk -v r="$r" -v b="$3" 'BEGIN { exit !(r <= b) }'; then ok "$4 ($r <= $3)"; else bad "$4" "$1 / $2 = $r > $3"; fi
    [ -n "${KILN_TEST_VERBOSE:-}" ] && echo "     $4: $1 / $2 = $r (bound $3)"
    return 0
}

# ---- paged decoding: K + V bytes (1024 keys x 2 kv heads x 128 x 2 bytes, twice) ----
kv=$((1024 * 2 * 128 * 2 * 2))
dec="attention dtype=bf16 head_dim=128 splitkv=true --sm 80 --rows 1 --seq-k 1024 --heads 8:2 --splits 4"
if bytes "decode contiguous" $dec; then
    within "$ld" "$kv" 1.15 "decode, contiguous cache: loaded / (K + V)"
    st_contig=$st
    # shellcheck disable=SC2086
    if bytes "decode pages of 16" ${dec/splitkv=true/splitkv=true paged=true} --paged 16; then
        within "$ld" "$kv" 1.45 "decode, pages of 16 (shuffled): loaded / (K + V)"
        [ "$st" -eq "$st_contig" ] && ok "decode, pages of 16: stores what the contiguous cache stores" ||
            bad "decode paged stores" "$st B, contiguous $st_contig B"
    fi
fi

# ---- varlen against the dense kernel on the same tokens ----
va="attention dtype=bf16 head_dim=64 causal=true --sm 80 --heads 2:1"
dense_ld=0 dense_st=0
for n in 37 130 1; do
    # shellcheck disable=SC2086
    bytes "dense $n" $va --rows $n --seq-k $n || continue
    dense_ld=$((dense_ld + ld)) dense_st=$((dense_st + st))
done
# shellcheck disable=SC2086
if bytes "varlen 37,130,1" ${va/causal=true/causal=true varlen=true} --varlen 37,130,1; then
    within "$ld" "$dense_ld" 1.10 "varlen 37,130,1: loaded / the three dense launches'"
    [ "$st" -eq "$dense_st" ] && ok "varlen 37,130,1 stores what the dense launches store" ||
        bad "varlen stores" "$st B, dense $dense_st B"
fi
# shellcheck disable=SC2086
if bytes "dense 300" $va --rows 300 --seq-k 300; then
    d_ld=$ld d_st=$st
    # shellcheck disable=SC2086
    if bytes "varlen 300" ${va/causal=true/causal=true varlen=true} --varlen 300; then
        within "$ld" "$d_ld" 1.05 "varlen, one sequence of 300: loaded / dense"
        [ "$st" -eq "$d_st" ] && ok "varlen 300 stores what the dense launch stores" || bad "varlen 300 stores" "$st vs $d_st"
    fi
fi

finish attention_bytes
