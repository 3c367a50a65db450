/* Q4_1 weights (ggml type 3, the default model's type): blocks of 32 4-bit
 * values with an f16 scale and an f16 offset, x = d*q + m; nibble order as
 * Q4_0. Scalar references: dequantise, dot with a Q8_0-prepared activation
 * (d_w*d_a*sum(q_w*q_a) + m_w*s_a per block, s_a = d_a*sum(q_a)), and the
 * min/max quantiser of ggml's quantize_row_q4_1_ref. */
#include "model/wt_kernels.h"

#include <math.h>

void kvc_dequant_q4_1_ref(const void *x, float *y, int64_t n) {
    const kvc_blk_q4_1 *b = x;
    for (int64_t i = 0; i < n / KVC_QK; i++) {
        float d = kvc_f16_to_f32(b[i].d), m = kvc_f16_to_f32(b[i].m);
        for (int j = 0; j < 16; j++) {
            y[i * KVC_QK + j] = d * (float)(b[i].qs[j] & 0xf) + m;
            y[i * KVC_QK + j + 16] = d * (float)(b[i].qs[j] >> 4) + m;
        }
    }
}

float kvc_dot_q4_1_ref(const void *row, const void *act, int64_t n) {
    const kvc_blk_q4_1 *b = row;
    const int8_t *q = kvc_act_q(act);
    const float *da = kvc_act_q8_0_d(act, n), *sa = kvc_act_q8_0_s(act, n);
    double s = 0;
    for (int64_t i = 0; i < n / KVC_QK; i++) {
        const int8_t *qa = q + i * KVC_QK;
        int32_t isum = 0;
        for (int j = 0; j < 16; j++)
            isum += (b[i].qs[j] & 0xf) * qa[j] + (b[i].qs[j] >> 4) * qa[j + 16];
        s += (double)(kvc_f16_to_f32(b[i].d) * da[i]) * isum +
             (double)(kvc_f16_to_f32(b[i].m) * sa[i]);
    }
    return (float)s;
}

void kvc_quantize_q4_1_ref(const float *x, void *y, int64_t n) {
    kvc_blk_q4_1 *b = y;
    for (int64_t i = 0; i < n / KVC_QK; i++) {
        const float *xb = x + i * KVC_QK;
        float min = INFINITY, max = -INFINITY;
        for (int j = 0; j < KVC_QK; j++)
            min = fminf(min, xb[j]), max = fmaxf(max, xb[j]);
        float d = (max - min) / 15.0f, id = d ? 1.0f / d : 0.0f;
        b[i].d = kvc_f32_to_f16(d);
        b[i].m = kvc_f32_to_f16(min);
        for (int j = 0; j < 16; j++) {
            int q0 = (int)lrintf((xb[j] - min) * id), q1 = (int)lrintf((xb[j + 16] - min) * id);
            q0 = q0 < 0 ? 0 : q0 > 15 ? 15 : q0;
            q1 = q1 < 0 ? 0 : q1 > 15 ? 15 : q1;
            b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}
