#!/usr/bin/env bash
# tests/fuzz/make_seeds.sh - regenerates the seed corpora in tests/fuzz/corpus/ from kiln's own
# outputs: PTX (kiln emit), bundles (kiln bundle), kiln.meta blocks, disk-cache entries (written
# by the runtime's own writer), spec strings. Run from the repository root after `make`.
set -eu
KILN=${KILN:-bin/kiln}
C=tests/fuzz/corpus
mkdir -p $C/spec $C/ptx $C/bundle $C/meta $C/disk
specs=("layernorm x=f16 hidden=4096" "layernorm x=bf16 w=f32 y=bf16 hidden=launch weight=false"
       "attention dtype=f16 head_dim=64 causal=true" "attention dtype=bf16 out=f32 head_dim=128 path=simt")
i=0
for s in "${specs[@]}"; do
    printf '%s' "$s" > $C/spec/spec$i.txt
    sm=$([ $((i % 2)) = 0 ] && echo 75 || echo 80)
    $KILN emit "$s" --sm $sm > $C/ptx/kiln$i.ptx
    sed -n '/kiln.meta end/q;p' $C/ptx/kiln$i.ptx > $C/meta/meta$i.txt
    echo '// kiln.meta end' >> $C/meta/meta$i.txt
    i=$((i + 1))
done
printf '%s' "layernorm  x=f32   y=bf16 hidden=0768 " > $C/spec/spacing.txt
printf '.version 7.0\n.target sm_75\n.address_size 64\n.visible .entry k()\n{\n\tcvt.rn.bf16.f32 %%rs1, %%f1;\n\tret;\n}\n' > $C/ptx/bf16_on_75.ptx
$KILN bundle --spec "layernorm x=f16 hidden=1000" --spec "layernorm x=bf16 hidden=launch" --sm 75,80 -o $C/bundle/small.kbundle >/dev/null
# disk-cache entries, written by rt_disk_write itself
tmp=$(mktemp -d)
cat > $tmp/w.c <<'CEOF'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rt.h"
int main(int argc, char **argv) {
    rt_disk d; char warn[256]; uint8_t key[16];
    rt_disk_init(&d, argv[1], false, warn, sizeof warn);
    for (int i = 3; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb"); if (!f) return 1;
        static char text[1 << 20]; size_t n = fread(text, 1, sizeof text, f); fclose(f);
        rt_hash128(argv[i], strlen(argv[i]), key);
        if (rt_disk_write(&d, key, argv[2], text, n)) return 1;
    }
    return 0;
}
CEOF
cc -std=c11 -D_GNU_SOURCE -Iinclude -Iruntime $tmp/w.c -o $tmp/w lib/libkiln_rt.a -ldl -lpthread -lm
$tmp/w $tmp/cache "layernorm x=f16 w=f16 y=f16 hidden=4096 weight=true bias=true" $C/ptx/kiln0.ptx $C/meta/meta1.txt
i=0
for f in $tmp/cache/*.kcache; do cp "$f" $C/disk/entry$i.kcache; i=$((i + 1)); done
rm -rf "$tmp"
# binaries for lint's binary reader: nvcc's fatbins, objects and cubins of a tiny kernel (CUDA 13: zstd-compressed
# entries, 'a' targets, nvlink's code-less stub in a shared library, an -rdc object's __nv_relfatbin)
NVCC=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
if [ -x "$NVCC" ]; then
    mkdir -p $C/bin
    k=tests/lint_bin_kernel.cu
    $NVCC -fatbin -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=compute_90 $k -o $C/bin/a.fatbin
    $NVCC -fatbin --compress-mode=size -gencode arch=compute_90a,code=[sm_90a,compute_90a] $k -o $C/bin/z.fatbin
    $NVCC -cubin -gencode arch=compute_100a,code=sm_100a $k -o $C/bin/e.cubin
    $NVCC -c -rdc=true -gencode arch=compute_86,code=sm_86 $k -o $C/bin/rdc.o
else
    echo "no $NVCC: the bin corpus is left as it is"
fi
ls -l $C/*
