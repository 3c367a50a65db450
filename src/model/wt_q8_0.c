/* Q8_0 weights (ggml type 8): blocks of 32 int8 values with one f16 scale,
 * x = d*q. Scalar references: dequantise, dot with a Q8_0-prepared activation
 * (per block: d_w*d_a*sum(q_w*q_a)), and the round-to-nearest quantiser
 * (d = max|x|/127) of ggml's quantize_row_q8_0_ref. */
#include "model/wt_kernels.h"

#include <math.h>

void kvc_dequant_q8_0_ref(const void *x, float *y, int64_t n) {
    const kvc_blk_q8_0 *b = x;
    for (int64_t i = 0; i < n / KVC_QK; i++) {
        float d = kvc_f16_to_f32(b[i].d);
        for (int j = 0; j < KVC_QK; j++)
            y[i * KVC_QK + j] = d * (float)b[i].qs[j];
    }
}

float kvc_dot_q8_0_ref(const void *row, const void *act, int64_t n) {
    const kvc_blk_q8_0 *b = row;
    const int8_t *q = kvc_act_q(act);
    const float *da = kvc_act_q8_0_d(act, n);
    double s = 0;
    for (int64_t i = 0; i < n / KVC_QK; i++) {
        int32_t isum = 0;
        for (int j = 0; j < KVC_QK; j++)
            isum += (int32_t)b[i].qs[j] * q[i * KVC_QK + j];
        s += (double)(kvc_f16_to_f32(b[i].d) * da[i]) * isum;
    }
    return (float)s;
}

void kvc_quantize_q8_0_ref(const float *x, void *y, int64_t n) {
    kvc_blk_q8_0 *b = y;
    for (int64_t i = 0; i < n / KVC_QK; i++) {
        const float *xb = x + i * KVC_QK;
        float amax = 0;
        for (int j = 0; j < KVC_QK; j++)
            amax = fmaxf(amax, fabsf(xb[j]));
        float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        b[i].d = kvc_f32_to_f16(d);
        for (int j = 0; j < KVC_QK; j++)
            b[i].qs[j] = (int8_t)lrintf(xb[j] * id);
    }
}
