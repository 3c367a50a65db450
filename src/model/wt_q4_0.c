/* Q4_0 weights (ggml type 2): blocks of 32 4-bit values with one f16 scale,
 * x = d*(q-8); byte j holds element j in its low nibble and element j+16 in
 * its high nibble. Scalar references: dequantise, dot with a Q8_0-prepared
 * activation (d_w*(d_a*sum(q_w*q_a) - 8*s_a) per block), and the quantiser of
 * ggml's quantize_row_q4_0_ref (d = value of largest magnitude / -8). */
#include "model/wt_kernels.h"

#include <math.h>

void kvc_dequant_q4_0_ref(const void *x, float *y, int64_t n) {
    const kvc_blk_q4_0 *b = x;
    for (int64_t i = 0; i < n / KVC_QK; i++) {
        float d = kvc_f16_to_f32(b[i].d);
        for (int j = 0; j < 16; j++) {
            y[i * KVC_QK + j] = d * (float)((b[i].qs[j] & 0xf) - 8);
            y[i * KVC_QK + j + 16] = d * (float)((b[i].qs[j] >> 4) - 8);
        }
    }
}

float kvc_dot_q4_0_ref(const void *row, const void *act, int64_t n) {
    const kvc_blk_q4_0 *b = row;
    const int8_t *q = kvc_act_q(act);
    const float *da = kvc_act_q8_0_d(act, n), *sa = kvc_act_q8_0_s(act, n);
    double s = 0;
    for (int64_t i = 0; i < n / KVC_QK; i++) {
        const int8_t *qa = q + i * KVC_QK;
        int32_t isum = 0;
        for (int j = 0; j < 16; j++)
            isum += (b[i].qs[j] & 0xf) * qa[j] + (b[i].qs[j] >> 4) * qa[j + 16];
        float d = kvc_f16_to_f32(b[i].d);
        s += (double)(d * da[i]) * isum - 8.0 * (double)(d * sa[i]);
    }
    return (float)s;
}

void kvc_quantize_q4_0_ref(const float *x, void *y, int64_t n) {
    kvc_blk_q4_0 *b = y;
    for (int64_t i = 0; i < n / KVC_QK; i++) {
        const float *xb = x + i * KVC_QK;
        float amax = 0, max = 0;
        for (int j = 0; j < KVC_QK; j++)
            if (fabsf(xb[j]) > amax) amax = fabsf(xb[j]), max = xb[j];
        float d = max / -8.0f, id = d ? 1.0f / d : 0.0f;
        b[i].d = kvc_f32_to_f16(d);
        for (int j = 0; j < 16; j++) {
            int q0 = (int)lrintf(xb[j] * id) + 8, q1 = (int)lrintf(xb[j + 16] * id) + 8;
            q0 = q0 < 0 ? 0 : q0 > 15 ? 15 : q0;
            q1 = q1 < 0 ? 0 : q1 > 15 ? 15 : q1;
            b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}
