/* Q5_0 weights (ggml type 6): blocks of 32 5-bit values with one f16 scale,
 * x = d*(q-16); byte j of qs holds the low four bits of element j in its low
 * nibble and of element j+16 in its high nibble, bit j of the 32-bit qh the
 * fifth bit of element j. Llama.cpp's Q4_K_M files use it for matrices whose
 * width is no multiple of 256 (Qwen2.5-0.5B's 896 columns). Scalar references:
 * dequantise, dot with a Q8_0-prepared activation (d_w*(d_a*sum(q_w*q_a) -
 * 16*s_a) per block), and the quantiser of ggml's quantize_row_q5_0_ref
 * (d = value of largest magnitude / -16). */
#include "model/wt_kernels.h"

#include <math.h>

static uint32_t q5_0_qh(const kvc_blk_q5_0 *b) {
    uint32_t qh;
    memcpy(&qh, b->qh, sizeof qh);
    return qh;
}

/* q of element j (0..31) of block b, in [0, 31] */
static int q5_0_value(const kvc_blk_q5_0 *b, uint32_t qh, int j) {
    int nib = j < 16 ? b->qs[j] & 0xf : b->qs[j - 16] >> 4;
    return nib | (int)((qh >> j) & 1) << 4;
}

void kvc_dequant_q5_0_ref(const void *x, float *y, int64_t n) {
    const kvc_blk_q5_0 *b = x;
    for (int64_t i = 0; i < n / KVC_QK; i++) {
        float d = kvc_f16_to_f32(b[i].d);
        uint32_t qh = q5_0_qh(&b[i]);
        for (int j = 0; j < KVC_QK; j++)
            y[i * KVC_QK + j] = d * (float)(q5_0_value(&b[i], qh, j) - 16);
    }
}

float kvc_dot_q5_0_ref(const void *row, const void *act, int64_t n) {
    const kvc_blk_q5_0 *b = row;
    const int8_t *q = kvc_act_q(act);
    const float *da = kvc_act_q8_0_d(act, n), *sa = kvc_act_q8_0_s(act, n);
    double s = 0;
    for (int64_t i = 0; i < n / KVC_QK; i++) {
        const int8_t *qa = q + i * KVC_QK;
        uint32_t qh = q5_0_qh(&b[i]);
        int32_t isum = 0;
        for (int j = 0; j < KVC_QK; j++)
            isum += q5_0_value(&b[i], qh, j) * qa[j];
        float d = kvc_f16_to_f32(b[i].d);
        s += (double)(d * da[i]) * isum - 16.0 * (double)(d * sa[i]);
    }
    return (float)s;
}

void kvc_quantize_q5_0_ref(const float *x, void *y, int64_t n) {
    kvc_blk_q5_0 *b = y;
    for (int64_t i = 0; i < n / KVC_QK; i++) {
        const float *xb = x + i * KVC_QK;
        float amax = 0, max = 0;
        for (int j = 0; j < KVC_QK; j++)
            if (fabsf(xb[j]) > amax) amax = fabsf(xb[j]), max = xb[j];
        float d = max / -16.0f, id = d ? 1.0f / d : 0.0f;
        b[i].d = kvc_f32_to_f16(d);
        uint32_t qh = 0;
        memset(b[i].qs, 0, sizeof b[i].qs);
        for (int j = 0; j < KVC_QK; j++) {
            int q = (int)lrintf(xb[j] * id) + 16;
            q = q < 0 ? 0 : q > 31 ? 31 : q;
            b[i].qs[j % 16] |= (uint8_t)((q & 0xf) << (j < 16 ? 0 : 4));
            qh |= (uint32_t)(q >> 4) << j;
        }
        memcpy(b[i].qh, &qh, sizeof qh);
    }
}
