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

/* ggml type ids (stable, from the GGUF spec) */
enum {
    KVC_WT_F32 = 0, KVC_WT_F16 = 1, KVC_WT_Q4_0 = 2, KVC_WT_Q4_1 = 3,
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

#endif
