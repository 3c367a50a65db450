/* Q5_K weights (ggml type 13): as Q4_K (8 sub-blocks of 32 with 6-bit scales
 * and mins under f16 super-scales) with 5-bit values: the fifth bit of
 * element 64c+l is bit 2c of qh[l], of element 64c+32+l bit 2c+1.
 * x = d*sc_j*q - dmin*m_j, q in [0, 31]. Scalar references: dequantise, dot
 * with a Q8_K-prepared activation, and a simple min/max quantiser. */
#include "model/wt_kernels.h"

#include <math.h>
#include <string.h>

void kvc_quantize_kscales(const float *x, int levels, kvc_f16 *d_out, kvc_f16 *dmin_out,
                          uint8_t scales[12], float eff_scale[8], float eff_min[8]);

static inline int q5k_value(const kvc_blk_q5_k *b, int c, int l, int hi) {
    int lo = hi ? b->qs[32 * c + l] >> 4 : b->qs[32 * c + l] & 0xf;
    return lo | (((b->qh[l] >> (2 * c + hi)) & 1) << 4);
}

void kvc_dequant_q5_k_ref(const void *x, float *y, int64_t n) {
    const kvc_blk_q5_k *b = x;
    for (int64_t i = 0; i < n / KVC_QKK; i++, y += KVC_QKK) {
        float d = kvc_f16_to_f32(b[i].d), dmin = kvc_f16_to_f32(b[i].dmin);
        for (int c = 0; c < 4; c++) {
            int sc0, m0, sc1, m1;
            kvc_q4k_scale_min(2 * c, b[i].scales, &sc0, &m0);
            kvc_q4k_scale_min(2 * c + 1, b[i].scales, &sc1, &m1);
            float d0 = d * sc0, o0 = dmin * m0, d1 = d * sc1, o1 = dmin * m1;
            for (int l = 0; l < 32; l++) {
                y[64 * c + l] = d0 * (float)q5k_value(&b[i], c, l, 0) - o0;
                y[64 * c + 32 + l] = d1 * (float)q5k_value(&b[i], c, l, 1) - o1;
            }
        }
    }
}

float kvc_dot_q5_k_ref(const void *row, const void *act, int64_t n) {
    const kvc_blk_q5_k *b = row;
    const int8_t *qa = kvc_act_q(act);
    const float *da = kvc_act_q8_k_d(act, n);
    const int16_t *bsum = kvc_act_q8_k_bsum(act, n);
    double s = 0;
    for (int64_t i = 0; i < n / KVC_QKK; i++) {
        int32_t sumi = 0, summ = 0;
        for (int c = 0; c < 4; c++) {
            int sc0, m0, sc1, m1;
            kvc_q4k_scale_min(2 * c, b[i].scales, &sc0, &m0);
            kvc_q4k_scale_min(2 * c + 1, b[i].scales, &sc1, &m1);
            const int8_t *a = qa + i * KVC_QKK + 64 * c;
            int32_t s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += q5k_value(&b[i], c, l, 0) * a[l];
                s1 += q5k_value(&b[i], c, l, 1) * a[32 + l];
            }
            sumi += sc0 * s0 + sc1 * s1;
            const int16_t *bs = bsum + i * 16 + 4 * c;
            summ += m0 * (bs[0] + bs[1]) + m1 * (bs[2] + bs[3]);
        }
        s += (double)(kvc_f16_to_f32(b[i].d) * da[i]) * sumi -
             (double)(kvc_f16_to_f32(b[i].dmin) * da[i]) * summ;
    }
    return (float)s;
}

void kvc_quantize_q5_k_ref(const float *x, void *y, int64_t n) {
    kvc_blk_q5_k *b = y;
    for (int64_t i = 0; i < n / KVC_QKK; i++, x += KVC_QKK) {
        float es[8], em[8];
        kvc_quantize_kscales(x, 31, &b[i].d, &b[i].dmin, b[i].scales, es, em);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                int q[2];
                for (int h = 0; h < 2; h++) {
                    int j = 2 * c + h;
                    float v = x[32 * j + l];
                    q[h] = es[j] > 0 ? (int)lrintf((v + em[j]) / es[j]) : 0;
                    q[h] = q[h] < 0 ? 0 : q[h] > 31 ? 31 : q[h];
                    b[i].qh[l] |= (uint8_t)((q[h] >> 4) << (2 * c + h));
                }
                b[i].qs[32 * c + l] = (uint8_t)((q[0] & 0xf) | ((q[1] & 0xf) << 4));
            }
        }
    }
}
