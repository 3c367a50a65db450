/* Activation preparation for the quantised matvec (the approach of llama.cpp's
 * vec_dot_type): the f32 activation is quantised once per matvec to int8
 * blocks with an f32 scale, so that weight kernels take integer dot products.
 * Q8_0 (blocks of 32) serves q4_0, q4_1, q8_0 and also stores s = d*sum(q) per
 * block for the offset terms; Q8_K (blocks of 256) serves the k-quants and
 * stores sums of 16 for their mins. Layouts are in wtype.h. Rounding is
 * lrintf (to nearest even) of x*(127/amax), so SIMD variants that use
 * cvtps2dq produce identical buffers. The active variants and the dispatching
 * kvc_act_prepare are in the registry, wtype.c. */
#include "model/wt_kernels.h"

#include <math.h>
#include <string.h>

/* Quantise one block of `len` values; returns the scale, writes q and the sum of q. */
static float quant_block(const float *x, int len, int8_t *q, int32_t *sum) {
    float amax = 0;
    for (int j = 0; j < len; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
    int32_t s = 0;
    for (int j = 0; j < len; j++) {
        q[j] = (int8_t)lrintf(x[j] * id);
        s += q[j];
    }
    *sum = s;
    return d;
}

void kvc_act_q8_0_ref(const float *x, void *buf, int64_t n) {
    int8_t *q = buf;
    float *d = (float *)(q + n), *s = d + n / KVC_QK;
    for (int64_t b = 0; b < n / KVC_QK; b++) {
        int32_t sum;
        d[b] = quant_block(x + b * KVC_QK, KVC_QK, q + b * KVC_QK, &sum);
        s[b] = d[b] * (float)sum;
    }
}

void kvc_act_q8_k_ref(const float *x, void *buf, int64_t n) {
    int8_t *q = buf;
    float *d = (float *)(q + n);
    int16_t *bsum = (int16_t *)(d + n / KVC_QKK);
    for (int64_t b = 0; b < n / KVC_QKK; b++) {
        int32_t sum;
        d[b] = quant_block(x + b * KVC_QKK, KVC_QKK, q + b * KVC_QKK, &sum);
        for (int g = 0; g < 16; g++) {
            int32_t gs = 0;
            for (int j = 0; j < 16; j++)
                gs += q[b * KVC_QKK + 16 * g + j];
            bsum[b * 16 + g] = (int16_t)gs;
        }
    }
}

size_t kvc_act_bytes(kvc_act_fmt fmt, int64_t n) {
    if (n < 0) return 0;
    switch (fmt) {
    case KVC_ACT_F32:
        return (size_t)n * sizeof(float);
    case KVC_ACT_Q8_0:
        return (size_t)n + (size_t)(n / KVC_QK) * 2 * sizeof(float);
    case KVC_ACT_Q8_K:
        return (size_t)n + (size_t)(n / KVC_QKK) * sizeof(float) +
               (size_t)(n / 16) * sizeof(int16_t);
    }
    return 0;
}

void kvc_act_prepare_with(kvc_act_fmt fmt, const float *x, void *buf, int64_t n,
                          kvc_act_fn q8_0, kvc_act_fn q8_k) {
    switch (fmt) {
    case KVC_ACT_F32:
        memcpy(buf, x, (size_t)n * sizeof(float));
        break;
    case KVC_ACT_Q8_0:
        q8_0(x, buf, n);
        break;
    case KVC_ACT_Q8_K:
        q8_k(x, buf, n);
        break;
    }
}

void kvc_act_prepare_ref(kvc_act_fmt fmt, const float *x, void *buf, int64_t n) {
    kvc_act_prepare_with(fmt, x, buf, n, kvc_act_q8_0_ref, kvc_act_q8_k_ref);
}
