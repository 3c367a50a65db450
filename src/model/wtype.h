/* Weight types: a traits table indexed by the ggml type id, in the style of
 * ggml's type_traits. Each supported type has a block size, bytes per block, a
 * dequantise routine and a row-dot kernel; dot kernels take the activation as
 * f32 (or as the type's preferred activation format, see `vec_quant`).
 * Scalar references live in src/model/wt_*.c; AVX2/AVX-512 variants in
 * src/kernels/<isa>/wt_*_<isa>.c register over them at start-up. */
#ifndef KVC_MODEL_WTYPE_H
#define KVC_MODEL_WTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "kvcomp.h"

/* ggml type ids (stable, from the GGUF spec); the weight tables cover ids below
 * KVC_WT_COUNT, with names and block sizes from src/gguf/ggml_types.c. */
enum {
    KVC_WT_F32 = 0, KVC_WT_F16 = 1, KVC_WT_Q4_0 = 2, KVC_WT_Q4_1 = 3, KVC_WT_Q5_0 = 6,
    KVC_WT_Q8_0 = 8, KVC_WT_Q8_1 = 9, KVC_WT_Q4_K = 12, KVC_WT_Q5_K = 13,
    KVC_WT_Q6_K = 14, KVC_WT_Q8_K = 15, KVC_WT_BF16 = 30,
    KVC_WT_COUNT = 40,
};

/* How a matvec prepares the activation vector once for all rows. */
typedef enum kvc_act_fmt { KVC_ACT_F32 = 0, KVC_ACT_Q8_0 = 1, KVC_ACT_Q8_K = 2 } kvc_act_fmt;

typedef struct kvc_wtype {
    const char *name;   /* "q4_1" */
    int block;          /* elements per block (1 for f32/f16/bf16) */
    size_t block_bytes; /* bytes per block */
    int supported;      /* 0: known id but no kernels */
    kvc_act_fmt act;    /* activation format dot() expects */
    /* y[0..n) = dequantised x (n a multiple of block) */
    void (*dequant)(const void *x, float *y, int64_t n);
    /* dot of one weight row of n elements with the prepared activation */
    float (*dot)(const void *row, const void *act, int64_t n);
    /* --- added by the weight-kernel module (additive) --- */
    /* y = quantised x[0..n) (n a multiple of block): scalar, round-to-nearest
     * in the style of ggml's *_ref quantisers; for tests and tools. */
    void (*quantize)(const float *x, void *y, int64_t n);
    /* optional (NULL: matvec loops over dot): y[r] = dot(row r, act) for r in
     * [0, nrows), rows `stride` bytes apart. SIMD variants share activation
     * loads across rows. */
    void (*dot_rows)(const void *w, size_t stride, int64_t nrows, const void *act, int64_t n,
                     float *y);
    /* optional (NULL: kvc_matmul loops over tokens): y[i*ldy + r] = dot(row r, activation i)
     * for r < nrows, i < m; activation i at (const char *)acts + i*act_stride. Unpacks each
     * weight row once for all m activations; bit-identical to dot_rows per token. */
    void (*dot_batch)(const void *w, size_t stride, int64_t nrows, const void *acts,
                      size_t act_stride, int64_t m, int64_t n, float *y, int64_t ldy);
} kvc_wtype;

/* The traits table after kernel registration for the active ISA. NULL for an
 * id that is out of range or unknown. */
const kvc_wtype *kvc_wtype_get(uint32_t type);

/* Bytes for one row of n elements; 0 when n is not a multiple of the block or the type is unknown. */
size_t kvc_wtype_row_bytes(uint32_t type, int64_t n);

/* Prepare the activation x[n] in format fmt into buf (kvc_act_bytes(fmt, n) bytes). */
size_t kvc_act_bytes(kvc_act_fmt fmt, int64_t n);
void kvc_act_prepare(kvc_act_fmt fmt, const float *x, void *buf, int64_t n);

/* y[r] = dot(row r of W, x) for r in [0, rows): W is `rows` rows of `n` elements of
 * `type`, row-major. Parallel over rows on the pool (NULL: serial). */
struct kvc_pool;
void kvc_matvec(struct kvc_pool *pool, uint32_t type, const void *w, int64_t rows, int64_t n,
                const float *x, float *y);

/* --- added by the weight-kernel module (additive) --- */

/* Prepared activation layouts (internal to matvec; documented for kernels):
 *   KVC_ACT_F32:  float x[n].
 *   KVC_ACT_Q8_0: blocks of 32: int8 q[n] | float d[n/32] | float s[n/32],
 *                 x[i] ~ d[i/32]*q[i], q in [-127, 127], s[b] = d[b]*sum(q of block b).
 *   KVC_ACT_Q8_K: blocks of 256: int8 q[n] | float d[n/256] | int16 bsum[n/16],
 *                 bsum[g] = sum of q over the 16 elements of group g.
 * The buffer must be kvc_act_bytes(fmt, n) bytes; no alignment is required. */

/* The scalar reference table (never overridden by SIMD variants): tests compare
 * kvc_wtype_get(t)->dot against kvc_wtype_ref(t)->dot. NULL as kvc_wtype_get. */
const kvc_wtype *kvc_wtype_ref(uint32_t type);

/* Scalar reference activation preparation (kvc_act_prepare may be SIMD; both
 * give bit-identical buffers). */
void kvc_act_prepare_ref(kvc_act_fmt fmt, const float *x, void *buf, int64_t n);

/* out[r*n .. r*n+n) = dequantised row row0+r of W, for r in [0, nrows): W is
 * row-major with rows of n elements of `type` (n a multiple of the block).
 * For prefill: dequantise a weight tile, then sgemm. Unknown type: no-op (the
 * loader rejects unknown types before any kernel runs). */
void kvc_dequant_rows(uint32_t type, const void *w, int64_t row0, int64_t nrows, int64_t n,
                      float *out);

/* Several matvecs over the same activation x[n] in one pool dispatch (e.g.
 * q, k, v of one layer; gate and up): the activation is prepared once per
 * activation format and rows of all ops are shared out together. */
typedef struct kvc_matvec_op {
    uint32_t type;  /* weight type of w */
    const void *w;  /* rows x n, row-major */
    int64_t rows;
    float *y;       /* [rows] */
} kvc_matvec_op;
void kvc_matvec_multi(struct kvc_pool *pool, const kvc_matvec_op *ops, int n_ops, int64_t n,
                      const float *x);

/* A batch of m activations through the same weights (prefill chunks without
 * dequantising; the quantised activations of llama.cpp's CPU matmul):
 * op.y[i*op.ldy + r] = dot(row r of op.w, x + i*ldx) for i < m, r < op.rows.
 * Per token and row the result is bit-identical to kvc_matvec. Allocates the
 * m prepared activations: KVC_ERR_NOMEM when that fails. */
typedef struct kvc_matmul_op {
    uint32_t type;
    const void *w;  /* rows x n, row-major */
    int64_t rows;
    float *y;       /* [m][ldy], columns [0, rows) written */
    int64_t ldy;
} kvc_matmul_op;
kvc_status kvc_matmul(struct kvc_pool *pool, const kvc_matmul_op *ops, int n_ops, int64_t n,
                      const float *x, int64_t ldx, int64_t m);

#endif
