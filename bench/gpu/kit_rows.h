/* bench/gpu/kit_rows.h - GPU check kit: the tables of what is checked and what is timed (one place). */
#ifndef KILN_BENCH_GPU_KIT_ROWS_H
#define KILN_BENCH_GPU_KIT_ROWS_H

/*
 * How each table's rows are spelled: the spec (a printf format over the row's fields; booleans as
 * "true"/"false"), and the check CSV's family column where the table is not a plain family (split-KV
 * decoding). The attention backward's spec is its dkdv kernel, whose launch description runs the
 * whole sequence (prep, dkdv, convert or dq).
 */
#define KIT_LN_SPEC "layernorm x=%s w=%s y=%s hidden=%s weight=true bias=true"
#define KIT_ATTN_SPEC "attention dtype=%s out=%s head_dim=%d causal=%s path=auto"
#define KIT_ATTN_SPLIT_SPEC KIT_ATTN_SPEC " splitkv=true"
#define KIT_ATTN_SPLIT_FAMILY "attention_splitkv"
#define KIT_ATTN_BWD_SPEC "attention_bwd kernel=dkdv dtype=%s head_dim=%d causal=%s deterministic=%s"
/* the speed sweep's CSV names of the attention backward, atomic and deterministic (peers.py's rows match) */
#define KIT_ATTN_BWD_CSV "attention_bwd"
#define KIT_ATTN_BWD_DET_CSV "attention_bwd_det"

/*
 * Correctness rows. Each becomes one case per emulated SM (the device's, and sm_75 whose PTX the
 * device's driver JIT-compiles: the sm_75 code paths, bf16 without bf16 instructions, run there).
 * A new family joins with a row table here, a case builder in kit_gen.c (inputs, emulator run,
 * float64 reference) and, when it has a typed launch helper, an adapter in kit_launch.c.
 */
typedef struct kit_ln_row {
    const char *x, *w, *y;   /* dtypes */
    int hidden;              /* 0: hidden=launch */
    int run_hidden;          /* row length for hidden=launch rows (not a fixed size in the bundle) */
    int large_mean;          /* adversarial inputs: rows around 10000 and 1000 */
    int quick;               /* also in the quick (fake-driver) run */
} kit_ln_row;

static const kit_ln_row kit_ln_rows[] = {
    {"f32", "f32", "f32", 768, 0, 0, 1},     {"f32", "f32", "f32", 4096, 0, 1, 0},
    {"f32", "f32", "f32", 16384, 0, 0, 0},   {"f32", "f32", "f32", 0, 1000, 0, 0},
    {"f16", "f16", "f16", 768, 0, 0, 0},     {"f16", "f16", "f16", 4096, 0, 0, 0},
    {"f16", "f16", "f16", 16384, 0, 0, 0},   {"bf16", "bf16", "bf16", 768, 0, 0, 1},
    {"bf16", "bf16", "bf16", 1024, 0, 0, 0}, {"bf16", "bf16", "bf16", 2048, 0, 0, 0},
    {"bf16", "bf16", "bf16", 4096, 0, 0, 0}, {"bf16", "bf16", "bf16", 8192, 0, 0, 0},
    {"bf16", "bf16", "bf16", 12288, 0, 0, 0}, {"bf16", "bf16", "bf16", 16384, 0, 0, 0},
    {"bf16", "bf16", "bf16", 0, 5000, 0, 1}, {"bf16", "f32", "bf16", 4096, 0, 0, 0},
    {"bf16", "f32", "bf16", 0, 3000, 0, 0},  {"f16", "f32", "f32", 2048, 0, 0, 0},
    {"bf16", "f32", "f32", 8192, 0, 0, 0},
};

typedef struct kit_attn_row {
    const char *dtype, *out;
    int head_dim, causal;
    int batch, heads_q, heads_kv, seq_q, seq_k;
    int quick;
} kit_attn_row;

static const kit_attn_row kit_attn_rows[] = {
    {"bf16", "bf16", 64, 0, 1, 2, 2, 200, 200, 1},  {"bf16", "bf16", 64, 1, 1, 2, 2, 200, 200, 0},
    {"bf16", "bf16", 128, 0, 1, 2, 2, 200, 200, 0}, {"bf16", "bf16", 128, 1, 2, 2, 2, 131, 131, 0},
    {"f16", "f16", 64, 0, 1, 2, 2, 200, 200, 0},    {"f16", "f16", 64, 1, 1, 2, 2, 200, 200, 0},
    {"f16", "f16", 128, 0, 1, 2, 2, 200, 200, 0},   {"f16", "f16", 128, 1, 1, 2, 2, 200, 200, 1},
    {"f32", "f32", 64, 0, 1, 2, 2, 130, 130, 0},    {"f32", "f32", 128, 1, 1, 2, 2, 130, 130, 0},
    {"bf16", "bf16", 32, 0, 1, 2, 2, 200, 200, 0},  {"bf16", "bf16", 96, 1, 1, 2, 2, 150, 150, 0},
    {"bf16", "bf16", 256, 0, 1, 2, 2, 100, 100, 0}, {"bf16", "bf16", 128, 1, 1, 4, 1, 77, 300, 0},
    {"f16", "f16", 64, 1, 1, 2, 2, 150, 100, 0},    {"bf16", "f32", 64, 0, 1, 2, 2, 200, 200, 0},
};

/* The sm_90a attention forward (TMA + wgmma, FA3's structure; `path=wgmma` is opt-in until a GPU has run it,
 * docs/hopper.md): the same row fields, checked only on a 9.0 device, emulated for sm_90a (KIT_SM_90A) and
 * launched from the arch bundle (kit_90a.kbundle: sm_90a PTX and cubins of `kiln-kit specs --arch`). bf16/f16,
 * d64/d128/d256 (and d96, d32), causal and not, odd seq tails (a partial 128-row query tile and key tile), GQA, seq_q != seq_k. */
#define KIT_ATTN_WGMMA_SPEC "attention dtype=%s out=%s head_dim=%d causal=%s path=wgmma"
#define KIT_SM_90A 1090 /* KILN_SM_ARCH + 90: the arch-specific sm_90a target */
static const kit_attn_row kit_attn_wgmma_rows[] = {
    {"bf16", "bf16", 64, 0, 1, 2, 2, 200, 200, 1},  {"bf16", "bf16", 64, 1, 2, 4, 2, 131, 131, 0},
    {"bf16", "bf16", 128, 0, 1, 2, 2, 150, 150, 0}, {"bf16", "bf16", 128, 1, 1, 4, 1, 77, 300, 1},
    {"f16", "f16", 64, 1, 1, 2, 2, 200, 200, 0},    {"f16", "f16", 128, 0, 1, 4, 2, 130, 70, 0},
    {"bf16", "bf16", 256, 1, 1, 2, 2, 100, 100, 0}, {"f16", "f16", 256, 0, 1, 2, 1, 90, 150, 0},
    /* d96 and d32 on the 128- and 64-column tiles (templates/lib/attn_wgmma_dims.lua) */
    {"bf16", "bf16", 96, 1, 1, 4, 2, 130, 170, 0},  {"f16", "f16", 32, 0, 1, 2, 2, 100, 140, 0},
    /* the rest of the speed sweep's kernels (kiln-kit checks that every spec it times has a row) */
    {"f16", "f16", 64, 0, 2, 2, 2, 70, 200, 0},     {"f16", "f16", 128, 1, 1, 2, 1, 190, 190, 0},
    {"bf16", "bf16", 256, 0, 1, 4, 2, 60, 130, 0},  {"f16", "f16", 256, 1, 1, 2, 2, 130, 80, 0},
};

/* The sm_90a forward's decoding and KV-cache kernels (issue 27), checked like the rows above: splits > 0 is
 * split-KV decoding (`splitkv=true`; the split kernel and its combine, `splits` forced), GQA-packed (a 128-row
 * block holds the heads_q / heads_kv query heads that share a kv head, times the query rows: G 8 below);
 * page_size > 0 is a paged KV cache (`paged=true`: K and V in shuffled pages of that many rows, each entry's length
 * drawn up to seq_k, entry 1 empty; templates/lib/attn_paged.ref.c), both at once where a row has both. The page
 * sizes divide both key tiles (64 and 128). */
#define KIT_ATTN_WGMMA_SPLIT_SPEC KIT_ATTN_WGMMA_SPEC " splitkv=true"
#define KIT_ATTN_WGMMA_PAGED_SPEC KIT_ATTN_WGMMA_SPEC " paged=true"
#define KIT_ATTN_WGMMA_PAGED_SPLIT_SPEC KIT_ATTN_WGMMA_SPEC " splitkv=true paged=true"
typedef struct kit_attn_wgmma_kv_row {
    const char *dtype;
    int head_dim, causal;
    int batch, heads_q, heads_kv, seq_q, seq_k;
    int splits, page_size;
    int quick;
} kit_attn_wgmma_kv_row;

static const kit_attn_wgmma_kv_row kit_attn_wgmma_kv_rows[] = {
    {"bf16", 128, 0, 2, 8, 1, 1, 1000, 4, 0, 1},  /* G 8, one query: decoding */
    {"f16", 64, 1, 1, 16, 2, 2, 700, 3, 0, 0},    /* G 8, two query rows (16 packed rows a head group), causal */
    {"bf16", 256, 0, 1, 8, 1, 1, 300, 2, 0, 0},   /* G 8 at d256 */
    {"bf16", 64, 1, 2, 4, 2, 100, 300, 0, 16, 1}, /* paged, pages of 16, GQA 2 */
    {"f16", 128, 0, 3, 2, 2, 130, 200, 0, 64, 0}, /* paged, pages of 64, an empty entry */
    {"bf16", 128, 0, 3, 8, 1, 1, 600, 3, 32, 0},  /* paged split-KV decoding, G 8, pages of 32 */
};

/* The sm_90a attention backward (`attention_bwd kernel=dkdv ... path=wgmma`: its launch description runs prep, the
 * wgmma dK/dV kernel (dQ inside it by f32 atomics), convert; deterministic: prep, dkdv, then the dq kernel), checked
 * as kit_attn_bwd_rows are: float64 gradients through the family's reference, the emulator's run of the sm_90a
 * modules first; deterministic rows run twice on the GPU. Every (dtype, head_dim, causal, deterministic) the
 * backward's speed sweep times, with odd tails and seq_q != seq_k; GQA; a sliding window (window=true with these
 * sides, -1 unbounded). head_dim 256 (wave 20: 256-column tiles, two consumer warpgroups on one 64-key block): one
 * key block or two, small. */
#define KIT_ATTN_BWD_WGMMA_SPEC KIT_ATTN_BWD_SPEC " path=wgmma"
typedef struct kit_attn_bwd_wgmma_row {
    const char *dtype;
    int head_dim, causal, deterministic;
    int window, window_left, window_right;
    int batch, heads_q, heads_kv, seq_q, seq_k;
    int quick;
} kit_attn_bwd_wgmma_row;

static const kit_attn_bwd_wgmma_row kit_attn_bwd_wgmma_rows[] = {
    {"bf16", 64, 0, 0, 0, 0, 0, 1, 2, 2, 150, 150, 1},  {"bf16", 64, 0, 1, 0, 0, 0, 2, 2, 2, 70, 130, 0},
    {"bf16", 64, 1, 0, 0, 0, 0, 1, 2, 2, 130, 130, 0},  {"bf16", 64, 1, 1, 0, 0, 0, 1, 2, 2, 200, 170, 0},
    {"f16", 64, 0, 0, 0, 0, 0, 1, 2, 2, 100, 77, 0},    {"f16", 64, 0, 1, 0, 0, 0, 1, 2, 2, 129, 129, 0},
    {"f16", 64, 1, 0, 0, 0, 0, 2, 2, 2, 64, 64, 0},     {"f16", 64, 1, 1, 0, 0, 0, 1, 2, 2, 90, 150, 0},
    {"bf16", 128, 0, 0, 0, 0, 0, 1, 2, 2, 140, 140, 0}, {"bf16", 128, 0, 1, 0, 0, 0, 1, 2, 2, 100, 60, 0},
    {"bf16", 128, 1, 0, 0, 0, 0, 1, 2, 2, 150, 150, 0}, {"bf16", 128, 1, 1, 0, 0, 0, 1, 2, 2, 100, 100, 1},
    {"f16", 128, 0, 0, 0, 0, 0, 2, 2, 2, 70, 70, 0},    {"f16", 128, 0, 1, 0, 0, 0, 1, 2, 2, 130, 190, 0},
    {"f16", 128, 1, 0, 0, 0, 0, 1, 2, 2, 129, 100, 0},  {"f16", 128, 1, 1, 0, 0, 0, 1, 2, 2, 150, 150, 0},
    /* GQA 4:1 with seq_q < seq_k (bottom-right causal), and GQA 6:2 deterministic */
    {"bf16", 128, 1, 0, 0, 0, 0, 1, 4, 1, 77, 300, 0},  {"f16", 64, 0, 1, 0, 0, 0, 1, 6, 2, 100, 90, 0},
    /* a sliding window (Mistral's shape: left only, causal), and both sides without causal */
    {"bf16", 64, 1, 0, 1, 50, 0, 1, 2, 2, 200, 200, 0}, {"f16", 128, 0, 1, 1, 40, 20, 1, 4, 2, 130, 160, 0},
    /* head_dim 256: every dtype x causal x deterministic the speed sweep times */
    {"bf16", 256, 0, 0, 0, 0, 0, 1, 2, 1, 70, 100, 0},  {"bf16", 256, 0, 1, 0, 0, 0, 1, 1, 1, 64, 64, 0},
    {"bf16", 256, 1, 0, 0, 0, 0, 1, 1, 1, 100, 130, 0}, {"bf16", 256, 1, 1, 0, 0, 0, 1, 1, 1, 77, 64, 0},
    {"f16", 256, 0, 0, 0, 0, 0, 1, 1, 1, 50, 64, 0},    {"f16", 256, 0, 1, 0, 0, 0, 1, 1, 1, 64, 90, 0},
    {"f16", 256, 1, 0, 0, 0, 0, 1, 1, 1, 90, 70, 0},    {"f16", 256, 1, 1, 0, 0, 0, 1, 1, 1, 64, 64, 0},
};

/* Split-KV decoding rows (kiln_attention_forward_splitkv with `splits` forced, so that the split and
 * combine kernels run whatever the device's SM count): GQA/MQA, seq_q 1..16, odd seq_k, more splits
 * than key tiles; the decode sweep's spec (bf16 d128), f16 d64 causal, bf16 d64 causal with an f32
 * output, f32 d128 (the SIMT path). Each spec is a split and a combine kernel for 5 SMs in the bundle;
 * every dtype, head_dim and causal is proven on the emulator (tests/attention_splitkv_test.c). */
typedef struct kit_attn_split_row {
    const char *dtype, *out;
    int head_dim, causal;
    int batch, heads_q, heads_kv, seq_q, seq_k, splits;
    int quick;
} kit_attn_split_row;

static const kit_attn_split_row kit_attn_split_rows[] = {
    {"bf16", "bf16", 128, 0, 1, 8, 2, 1, 1500, 12, 1}, {"bf16", "bf16", 128, 0, 2, 8, 1, 3, 777, 7, 0},
    {"bf16", "bf16", 128, 0, 1, 4, 4, 16, 300, 5, 0},  {"bf16", "bf16", 128, 0, 1, 8, 1, 1, 2000, 40, 0},
    {"f16", "f16", 64, 1, 2, 8, 2, 4, 1029, 9, 0},     {"bf16", "f32", 64, 1, 1, 16, 1, 2, 4097, 33, 0},
    {"f32", "f32", 128, 0, 1, 4, 1, 1, 640, 6, 0},
};

/* Attention backward rows (the whole sequence through kiln_attention_backward: prep, dkdv, then
 * convert, or dq when deterministic). Paths as the runtime picks them: mma m16n8k16 for f16/bf16 at
 * head_dim <= 128 on the device, m16n8k8 for f16 and for bf16 (f16-scaled; SIMT for the bf16 kernels that do
 * not hold rows spanning more than 2^32, lib/attn_bwd_f16scaled.lua holds) in the sm_75 PTX, SIMT for f32 and
 * head_dim 256. Deterministic rows also run twice on the GPU and must give the same bits. */
typedef struct kit_attn_bwd_row {
    const char *dtype;
    int head_dim, causal, deterministic;
    int batch, heads_q, heads_kv, seq_q, seq_k;
    int quick;
} kit_attn_bwd_row;

static const kit_attn_bwd_row kit_attn_bwd_rows[] = {
    {"bf16", 64, 0, 0, 1, 2, 2, 128, 128, 1},  {"bf16", 64, 1, 1, 1, 2, 2, 128, 128, 1},
    {"bf16", 128, 1, 0, 1, 2, 2, 100, 100, 0}, {"bf16", 128, 0, 1, 2, 2, 2, 70, 70, 0},
    {"f16", 64, 1, 0, 1, 2, 2, 128, 128, 0},   {"f16", 128, 0, 0, 1, 2, 2, 100, 100, 0},
    {"f16", 128, 1, 1, 1, 2, 2, 100, 100, 0},  {"f32", 64, 0, 0, 1, 2, 2, 80, 80, 0},
    {"f32", 128, 1, 1, 1, 2, 2, 64, 64, 0},    {"bf16", 256, 1, 0, 1, 2, 2, 64, 64, 0},
    {"bf16", 128, 1, 0, 1, 4, 1, 60, 150, 0},  {"f16", 64, 1, 1, 1, 4, 2, 90, 50, 0},
    {"bf16", 32, 0, 1, 1, 3, 1, 77, 100, 0},
};

/* Norm-family rows (used when KIT_HAVE_NORM): spec as written, row length for hidden=launch. */
typedef struct kit_norm_row {
    const char *spec;
    int run_hidden;
    int quick;
} kit_norm_row;

static const kit_norm_row kit_norm_rows[] = {
    {"rmsnorm x=f32 hidden=768", 0, 0},
    {"rmsnorm x=bf16 hidden=4096", 0, 1},
    {"rmsnorm x=bf16 w=f32 y=bf16 hidden=16384", 0, 0},
    {"rmsnorm x=f16 hidden=launch", 3000, 0},
    {"rmsnorm x=bf16 hidden=4096 residual=true r=f32", 0, 0},
    {"layernorm x=bf16 hidden=4096 residual=true", 0, 0},
    {"layernorm_bwd x=f32 hidden=768", 0, 0},
    {"layernorm_bwd x=bf16 hidden=4096", 0, 1},
    {"layernorm_bwd x=bf16 w=f32 hidden=16384", 0, 0},
    {"layernorm_bwd x=bf16 hidden=12288", 0, 0},
    {"layernorm_bwd x=f16 hidden=launch", 3000, 0},
    {"layernorm_bwd x=bf16 hidden=4096 residual=true r=f32", 0, 0},
    {"rmsnorm_bwd x=bf16 hidden=4096", 0, 0},
    {"rmsnorm_bwd x=f32 hidden=launch", 1000, 0},
    {"rmsnorm_bwd x=bf16 w=f32 hidden=8192 residual=true", 0, 0},
    {"rmsnorm_bwd x=bf16 hidden=16384 residual=true", 0, 0},
    /* offset=1: zero-centered weights (1 + w in f32), forward and backward, every row form */
    {"rmsnorm x=bf16 y=f32 hidden=4096 offset=1", 0, 1},
    {"rmsnorm x=bf16 hidden=4096 residual=true r=f32 offset=1", 0, 0},
    {"layernorm x=bf16 w=f32 hidden=launch offset=1", 3000, 0},
    {"layernorm x=f16 y=f32 hidden=768 offset=1", 0, 0},
    {"rmsnorm_bwd x=bf16 dx=f32 hidden=4096 offset=1", 0, 1},
    {"layernorm_bwd x=bf16 w=f32 hidden=16384 offset=1", 0, 0},
    {"layernorm_bwd x=f16 hidden=launch offset=1", 3000, 0},
    /* the two-block row (form=split2/split4: row statistics, then the columns split between blocks),
     * which auto takes where no reload form fits (f32 and residual rows at 12288/16384 on some SMs) */
    {"layernorm_bwd x=bf16 hidden=16384 form=split2", 0, 0},
    {"rmsnorm_bwd x=f32 hidden=16384 residual=true form=split4", 0, 0},
    {"layernorm_bwd x=f32 hidden=16384 residual=true r=f32", 0, 0},
};

/* Backward kernel forms the speed sweep times beside the default (templates/lib/norm.lua
 * `form=`, docs/norms.md), bf16, LayerNorm with weight and bias, RMSNorm with weight; each through
 * the same two kernels and grid rule as kiln_norm_backward, on the sweep's data. The H100's
 * defaults (smem16 up to 16384) are the sweep rows themselves; these are the alternatives: the
 * register form of the first runs (fixed), the reload form with the accumulators in registers
 * at 8 and 16 elements per thread, shared-memory accumulators at 8, and at the wide sizes the
 * forms the smaller-smem SMs take (reg16 = the 12288 wide form measured at 71.5 %, reg32; reg32 at
 * 16384 spills 4 bytes on sm_90 and stays out), and at 16384 the two-block row (split2, split4: a
 * row-statistics kernel, then the columns split between 2 or 4 blocks; three kernels per launch).
 * kiln-kit prepare leaves out a row whose spec does not generate for every SM. */
typedef struct kit_form_row {
    const char *family;
    int hidden;
    const char *form;
} kit_form_row;

static const kit_form_row kit_norm_bwd_form_rows[] = {
    {"layernorm_bwd", 4096, "fixed"},  {"layernorm_bwd", 4096, "reg8"},  {"layernorm_bwd", 4096, "reg16"},
    {"layernorm_bwd", 4096, "smem8"},  {"layernorm_bwd", 8192, "fixed"},  {"layernorm_bwd", 8192, "reg8"},
    {"layernorm_bwd", 8192, "reg16"},  {"layernorm_bwd", 8192, "smem8"},  {"layernorm_bwd", 12288, "reg16"},
    {"layernorm_bwd", 12288, "reg32"}, {"rmsnorm_bwd", 4096, "fixed"},    {"rmsnorm_bwd", 4096, "reg8"},
    {"layernorm_bwd", 16384, "split2"}, {"layernorm_bwd", 16384, "split4"}, {"rmsnorm_bwd", 16384, "split2"},
    {"rmsnorm_bwd", 16384, "split4"},
};

/* The norm speed sweeps beside LayerNorm forward (bf16, kit_ln_sweep_hidden; offset=1 also at
 * kit_offset_sweep_hidden): the family, the CSV's bench name (peers.py's rows match it), the table's
 * title, and for a backward the spec its kernel forms (kit_norm_bwd_form_rows) are timed as (hidden,
 * form), written out as the bundle's canonical spec. */
typedef struct kit_norm_sweep {
    const char *family, *csv, *title, *form_spec;
} kit_norm_sweep;

static const kit_norm_sweep kit_norm_sweeps[] = {
    {"rmsnorm", "rmsnorm_fwd", "rmsnorm forward bf16", NULL},
    {"layernorm_bwd", "layernorm_bwd", "layernorm backward bf16",
     "layernorm_bwd x=bf16 w=bf16 dy=bf16 dx=bf16 hidden=%d weight=true bias=true form=%s"},
    {"rmsnorm_bwd", "rmsnorm_bwd", "rmsnorm backward bf16", "rmsnorm_bwd x=bf16 w=bf16 dy=bf16 dx=bf16 hidden=%d weight=true form=%s"},
};

/* Speed sweeps (the AOT check times these; peers.py times torch, Triton and SDPA on the same shapes). Rows
 * above 16384 take the hidden=launch form (x read again per pass, through L2): 32768 and 65536 measure it
 * against copy before a cluster-reduction form (a row over 2-4 CTAs, docs/norms.md "Norms on sm_90") is
 * worth building. */
static const int kit_ln_sweep_hidden[] = {768, 1024, 2048, 4096, 8192, 12288, 16384, 32768, 65536};
#define KIT_LN_SWEEP_MAX_HIDDEN 65536
#define KIT_LN_MAX_FIXED 16384 /* the norm templates' largest fixed hidden: above it, hidden=launch */
/* the RMSNorm forward and both backward sweeps also time offset=1 (zero-centered weights) at these */
static const int kit_offset_sweep_hidden[] = {4096, 16384};
static const char *const kit_ln_sweep_dtypes[] = {"bf16", "f32"};
#define KIT_LN_SWEEP_BYTES (256.0 * 1024 * 1024) /* at least this much traffic per launch */

static const int kit_attn_sweep_seq[] = {512, 1024, 2048, 4096, 8192, 16384};
static const int kit_attn_sweep_d[] = {64, 128};
static const char *const kit_attn_sweep_dtypes[] = {"bf16"};
#define KIT_ATTN_SWEEP_TOKENS 16384 /* batch = tokens / seq */
#define KIT_ATTN_SWEEP_WIDTH 2048   /* heads = width / head_dim */
/* decoding (one query per sequence, bf16 d128, 32 query heads over 8 kv heads, as Llama-3-8B):
 * kiln split-KV (automatic split count), kiln non-split, and SDPA in peers.py; GB/s of K and V read */
static const int kit_decode_sweep_seq_k[] = {4096, 16384, 65536};
static const int kit_decode_sweep_batch[] = {1, 8};
#define KIT_DECODE_HEADS_Q 32
#define KIT_DECODE_HEADS_KV 8
#define KIT_DECODE_D 128
/* the same decoding over a paged KV cache (issue 25: batch >= 8, pages of 16 within 10 % of the contiguous
 * cache, >= 80 % of copy bandwidth): the decode sweep's batches from KIT_DECODE_PAGED_MIN_BATCH up, K and V
 * as pages of these sizes through a shuffled block table (every page a random one of the cache's) */
static const int kit_decode_page_sizes[] = {16, 256};
#define KIT_DECODE_PAGED_MIN_BATCH 8
#define KIT_ATTN_PAGED_SPEC KIT_ATTN_SPEC " paged=true"
#define KIT_ATTN_PAGED_SPLIT_SPEC KIT_ATTN_SPLIT_SPEC " paged=true"
/* varlen against the dense kernel on the same tokens (issue 25: within 5 %): the forward sweep's bf16 tensors read
 * as packed sequences of one length (cu_seqlens i * seq), causal off/on, at these head dims and lengths (the
 * forward's shape rule: batch = tokens / seq, heads = width / head_dim) */
static const int kit_varlen_sweep_d[] = {128};
static const int kit_varlen_sweep_seq[] = {1024, 4096};
#define KIT_ATTN_VARLEN_SPEC KIT_ATTN_SPEC " varlen=true"
/* the rotary family against copy bandwidth (issue 25: >= 90 %): bf16 x [batch, seq, heads, d] out of place (the
 * forward sweep's tokens, heads = width / d), cos/sin bf16 [seq, d / 2], GPT-NeoX halves and GPT-J pairs */
static const char *const kit_rotary_sweep_modes[] = {"false", "true"}; /* the spec's interleaved */
#define KIT_ROTARY_D 128
#define KIT_ROTARY_SEQ 4096
/* spelled canonically: the runtime finds bundle kernels by their canonical spec (no defaults filled in without Lua) */
#define KIT_ROTARY_SPEC "rotary dtype=bf16 cs=bf16 head_dim=%d rotary_dim=%d interleaved=%s varlen=false inplace=false"
/* the sm_90a wgmma forward against kiln's FA2 (mma.sync, path=auto) kernel on the same tensors, on a 9.0 device
 * (issue 27): these dtypes and head dims, causal off/on, the forward's sequence lengths and shape rule */
static const char *const kit_wgmma_sweep_dtypes[] = {"bf16", "f16"};
static const int kit_wgmma_sweep_d[] = {64, 128, 256};
#define KIT_WGMMA_CSV "attention_fwd_wgmma" /* the CSV's bench name (peers.py's rows match) */
/* attention backward: bf16, the same head_dims and shapes rule, these sequence lengths */
static const int kit_attn_bwd_sweep_seq[] = {1024, 4096, 16384};
/* the sm_90a wgmma backward beside kiln's FA2 backward (path=auto: mma.sync on sm_90), atomic and deterministic, on a
 * 9.0 device (issue 27): kit_wgmma_sweep_dtypes, these head dims (all the forward sweep's since wave 20; one not built
 * on wgmma would be said in summary.md, and kiln-kit checks that it is refused), causal off/on, the forward's lengths
 * and shape rule;
 * peers.py times SDPA's flash and cuDNN backward on the same shapes */
static const int kit_wgmma_bwd_sweep_d[] = {64, 128, 256};
#define KIT_WGMMA_BWD_CSV "attention_bwd_wgmma" /* the CSV's bench name (peers.py's rows match) */

#endif
