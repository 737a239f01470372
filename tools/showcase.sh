#!/usr/bin/env bash
# tools/showcase.sh - the main job (`make run`): generate bf16 LayerNorm PTX for every SM, show
# ptxas accepts it with no spills, lint finds nothing, and no bf16 instruction appears below sm_80;
# then run the kernel on the CPU emulator against the C reference.
set -u
KILN=${1:-bin/kiln}
out=build/showcase
mkdir -p "$out"
PTXAS=${PTXAS:-$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)}
spec="layernorm x=bf16 w=f32 y=bf16 hidden=4096"
status=0
echo "kiln: $spec"
printf '  %-6s %-8s %-10s %-24s %-10s %s\n' target ptx-isa registers "ptxas spills" "bf16 ops" lint
for sm in 75 80 86 89 90; do
    f="$out/layernorm_sm$sm.ptx"
    if ! "$KILN" emit $spec --sm "$sm" -o "$f"; then status=1; continue; fi
    ver=$(grep -m1 '^\.version' "$f" | awk '{print $2}')
    bf16=$(grep -v '^\s*//' "$f" | grep -c '\.bf16' || true)
    if [ -x "$PTXAS" ]; then
        log=$("$PTXAS" --gpu-name "sm_$sm" -v "$f" -o /dev/null 2>&1) || status=1
        regs=$(grep -oE 'Used [0-9]+ registers' <<<"$log" | grep -oE '[0-9]+')
        spill=$(grep -oE '[0-9]+ bytes spill (stores|loads)' <<<"$log" | awk '{printf "%s%s B %s", (NR > 1 ? ", " : ""), $1, $4}')
    else
        regs="-" spill="ptxas not found"
    fi
    lint="-"
    if "$KILN" lint --help >/dev/null 2>&1; then
        if "$KILN" lint "$f" >/dev/null 2>&1; then lint=clean; else lint=FINDINGS; status=1; fi
    fi
    printf '  sm_%-3s %-8s %-10s %-24s %-10s %s\n' "$sm" "$ver" "${regs:--}" "${spill:--}" "$bf16" "$lint"
done
echo "  (PTX in $out/)"
if "$KILN" run --help >/dev/null 2>&1; then
    for sm in 75 80; do
        echo "emulator, sm_$sm:"
        "$KILN" run $spec --sm "$sm" --rows 8 --seed 1 | sed 's/^/  /' || status=1
    done
fi
exit $status
