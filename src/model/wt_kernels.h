/* Internal to the weight-type module: ggml block layouts (static_assert'ed
 * sizes, ggml/src/ggml-common.h), accessors for the prepared activation
 * layouts documented in wtype.h, the scalar reference kernels of each type
 * (src/model/wt_<type>.c) and the registration hooks of the SIMD variants
 * (src/kernels/<isa>/wt_<type>_<isa>.c), which overwrite entries of the
 * active traits table once at start-up. */
#ifndef KVC_MODEL_WT_KERNELS_H
#define KVC_MODEL_WT_KERNELS_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/f16.h"
#include "model/wtype.h"

#define KVC_QK  32  /* elements per block of the legacy types (q4_0, q4_1, q5_0, q8_0) */
#define KVC_QKK 256 /* elements per super-block of the k-quants */

typedef struct {
    kvc_f16 d;
    uint8_t qs[16];
} kvc_blk_q4_0; /* x = d*(q-8) */
typedef struct {
    kvc_f16 d, m;
    uint8_t qs[16];
} kvc_blk_q4_1; /* x = d*q + m */
typedef struct {
    kvc_f16 d;
    uint8_t qh[4];  /* bit j: fifth bit of element j */
    uint8_t qs[16]; /* as q4_0 */
} kvc_blk_q5_0;     /* x = d*(q-16) */
typedef struct {
    kvc_f16 d;
    int8_t qs[32];
} kvc_blk_q8_0; /* x = d*q */
/* q4_k: 8 sub-blocks of 32, 6-bit scale and min each packed in `scales`;
 * x = d*sc*q - dmin*m, q in [0,15]. qs[32c+l]: low nibble element 64c+l, high 64c+32+l. */
typedef struct {
    kvc_f16 d, dmin;
    uint8_t scales[12];
    uint8_t qs[128];
} kvc_blk_q4_k;
/* q5_k: as q4_k plus a fifth bit: bit (2c) of qh[l] for element 64c+l, bit (2c+1) for 64c+32+l. */
typedef struct {
    kvc_f16 d, dmin;
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
} kvc_blk_q5_k;
/* q6_k: 16 groups of 16 with int8 scales; x = d*sc*(q-32), q in [0,63] from 4 low bits in ql
 * and 2 high bits in qh (see wt_q6_k.c for the element order). */
typedef struct {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    kvc_f16 d;
} kvc_blk_q6_k;

static_assert(sizeof(kvc_blk_q4_0) == 18, "q4_0 block");
static_assert(sizeof(kvc_blk_q4_1) == 20, "q4_1 block");
static_assert(sizeof(kvc_blk_q5_0) == 22, "q5_0 block");
static_assert(sizeof(kvc_blk_q8_0) == 34, "q8_0 block");
static_assert(sizeof(kvc_blk_q4_k) == 144, "q4_k block");
static_assert(sizeof(kvc_blk_q5_k) == 176, "q5_k block");
static_assert(sizeof(kvc_blk_q6_k) == 210, "q6_k block");

/* --- prepared activations (layouts in wtype.h) --- */
static inline const int8_t *kvc_act_q(const void *act) {
    return (const int8_t *)act;
}
static inline const float *kvc_act_q8_0_d(const void *act, int64_t n) {
    return (const float *)((const int8_t *)act + n);
}
static inline const float *kvc_act_q8_0_s(const void *act, int64_t n) {
    return (const float *)((const int8_t *)act + n) + n / KVC_QK;
}
static inline const float *kvc_act_q8_k_d(const void *act, int64_t n) {
    return (const float *)((const int8_t *)act + n);
}
static inline const int16_t *kvc_act_q8_k_bsum(const void *act, int64_t n) {
    return (const int16_t *)((const float *)((const int8_t *)act + n) + n / KVC_QKK);
}

/* q4_k / q5_k: sub-block j's 6-bit scale and min from the 12 packed bytes. */
static inline void kvc_q4k_scale_min(int j, const uint8_t *s, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* q4_k / q5_k: all 8 scales (bytes 0..7 of u) and 8 mins (bytes 8..15) at
 * once with 32-bit word operations (the SIMD kernels' unpacking; equals
 * kvc_q4k_scale_min); kvc_q4k_unpack gives them as 16 bytes. */
static inline void kvc_q4k_words(const uint8_t *s, uint32_t u[4]) {
    memcpy(u, s, 12);
    const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
    u[3] = ((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4); /* mins 4..7 */
    uint32_t mins_lo = u[1] & m6;                          /* mins 0..3 */
    u[1] = (u[2] & m4) | (((u[0] >> 6) & m2) << 4);        /* scales 4..7 */
    u[2] = mins_lo;
    u[0] &= m6; /* scales 0..3 */
}
static inline void kvc_q4k_unpack(const uint8_t *s, uint8_t out[16]) {
    uint32_t u[4];
    kvc_q4k_words(s, u);
    memcpy(out, u, 16);
}

/* --- scalar references, one set per type --- */
void kvc_dequant_f32_ref(const void *x, float *y, int64_t n);
float kvc_dot_f32_ref(const void *row, const void *act, int64_t n);
void kvc_quantize_f32_ref(const float *x, void *y, int64_t n);

void kvc_dequant_f16_ref(const void *x, float *y, int64_t n);
float kvc_dot_f16_ref(const void *row, const void *act, int64_t n);
void kvc_quantize_f16_ref(const float *x, void *y, int64_t n);

void kvc_dequant_bf16_ref(const void *x, float *y, int64_t n);
float kvc_dot_bf16_ref(const void *row, const void *act, int64_t n);
void kvc_quantize_bf16_ref(const float *x, void *y, int64_t n);

void kvc_dequant_q4_0_ref(const void *x, float *y, int64_t n);
float kvc_dot_q4_0_ref(const void *row, const void *act, int64_t n);
void kvc_quantize_q4_0_ref(const float *x, void *y, int64_t n);

void kvc_dequant_q4_1_ref(const void *x, float *y, int64_t n);
float kvc_dot_q4_1_ref(const void *row, const void *act, int64_t n);
void kvc_quantize_q4_1_ref(const float *x, void *y, int64_t n);

void kvc_dequant_q5_0_ref(const void *x, float *y, int64_t n);
float kvc_dot_q5_0_ref(const void *row, const void *act, int64_t n);
void kvc_quantize_q5_0_ref(const float *x, void *y, int64_t n);

void kvc_dequant_q8_0_ref(const void *x, float *y, int64_t n);
float kvc_dot_q8_0_ref(const void *row, const void *act, int64_t n);
void kvc_quantize_q8_0_ref(const float *x, void *y, int64_t n);

void kvc_dequant_q4_k_ref(const void *x, float *y, int64_t n);
float kvc_dot_q4_k_ref(const void *row, const void *act, int64_t n);
void kvc_quantize_q4_k_ref(const float *x, void *y, int64_t n);

void kvc_dequant_q5_k_ref(const void *x, float *y, int64_t n);
float kvc_dot_q5_k_ref(const void *row, const void *act, int64_t n);
void kvc_quantize_q5_k_ref(const float *x, void *y, int64_t n);

void kvc_dequant_q6_k_ref(const void *x, float *y, int64_t n);
float kvc_dot_q6_k_ref(const void *row, const void *act, int64_t n);
void kvc_quantize_q6_k_ref(const float *x, void *y, int64_t n);

/* Activation preparation: the references (wt_act.c) and the active variants
 * (wtype.c), which SIMD registration may replace. */
typedef void (*kvc_act_fn)(const float *x, void *buf, int64_t n);
void kvc_act_q8_0_ref(const float *x, void *buf, int64_t n);
void kvc_act_q8_k_ref(const float *x, void *buf, int64_t n);
extern kvc_act_fn kvc_act_q8_0_active, kvc_act_q8_k_active;
/* buf = x prepared in format fmt with the given Q8_0 and Q8_K preparations
 * (the references for kvc_act_prepare_ref, the active ones for kvc_act_prepare). */
void kvc_act_prepare_with(kvc_act_fmt fmt, const float *x, void *buf, int64_t n,
                          kvc_act_fn q8_0, kvc_act_fn q8_k);

/* Registers the SIMD variants for kvc_active_isa() once (idempotent, thread-safe). */
void kvc_wt_init(void);

/* --- SIMD registration: each kernel file overwrites the entries it implements --- */
void kvc_wt_register_float_avx2(kvc_wtype *table);
void kvc_wt_register_q4_0_avx2(kvc_wtype *table);
void kvc_wt_register_q4_1_avx2(kvc_wtype *table);
void kvc_wt_register_q5_0_avx2(kvc_wtype *table);
void kvc_wt_register_q8_0_avx2(kvc_wtype *table);
void kvc_wt_register_q4_k_avx2(kvc_wtype *table);
void kvc_wt_register_q5_k_avx2(kvc_wtype *table);
void kvc_wt_register_q6_k_avx2(kvc_wtype *table);
void kvc_wt_register_act_avx2(kvc_act_fn *q8_0, kvc_act_fn *q8_k);

void kvc_wt_register_float_avx512(kvc_wtype *table);
void kvc_wt_register_q4_0_avx512(kvc_wtype *table);
void kvc_wt_register_q4_1_avx512(kvc_wtype *table);
void kvc_wt_register_q5_0_avx512(kvc_wtype *table);
void kvc_wt_register_q8_0_avx512(kvc_wtype *table);
void kvc_wt_register_q4_k_avx512(kvc_wtype *table);
void kvc_wt_register_q5_k_avx512(kvc_wtype *table);
void kvc_wt_register_q6_k_avx512(kvc_wtype *table);
void kvc_wt_register_act_avx512(kvc_act_fn *q8_0, kvc_act_fn *q8_k);

#endif
