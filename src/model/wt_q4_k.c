/* Q4_K weights (ggml type 12, "k-quants"): super-blocks of 256 = 8 sub-blocks
 * of 32 4-bit values; each sub-block has a 6-bit scale and a 6-bit min, packed
 * into 12 bytes and scaled by the f16 super-scales d and dmin:
 * x = d*sc_j*q - dmin*m_j. Scalar references: dequantise, dot with a
 * Q8_K-prepared activation (integer sums per sub-block, mins through the
 * activation's 16-element sums), and a simple quantiser (min/max per
 * sub-block, then 6-bit scales; not ggml's iterative search, which only
 * improves accuracy and does not change the format). */
#include "model/wt_kernels.h"

#include <math.h>
#include <string.h>

void kvc_dequant_q4_k_ref(const void *x, float *y, int64_t n) {
    const kvc_blk_q4_k *b = x;
    for (int64_t i = 0; i < n / KVC_QKK; i++, y += KVC_QKK) {
        float d = kvc_f16_to_f32(b[i].d), dmin = kvc_f16_to_f32(b[i].dmin);
        for (int c = 0; c < 4; c++) {
            int sc0, m0, sc1, m1;
            kvc_q4k_scale_min(2 * c, b[i].scales, &sc0, &m0);
            kvc_q4k_scale_min(2 * c + 1, b[i].scales, &sc1, &m1);
            float d0 = d * sc0, o0 = dmin * m0, d1 = d * sc1, o1 = dmin * m1;
            const uint8_t *q = b[i].qs + 32 * c;
            for (int l = 0; l < 32; l++) {
                y[64 * c + l] = d0 * (float)(q[l] & 0xf) - o0;
                y[64 * c + 32 + l] = d1 * (float)(q[l] >> 4) - o1;
            }
        }
    }
}

float kvc_dot_q4_k_ref(const void *row, const void *act, int64_t n) {
    const kvc_blk_q4_k *b = row;
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
            const uint8_t *q = b[i].qs + 32 * c;
            const int8_t *a = qa + i * KVC_QKK + 64 * c;
            int32_t s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++)
                s0 += (q[l] & 0xf) * a[l], s1 += (q[l] >> 4) * a[32 + l];
            sumi += sc0 * s0 + sc1 * s1;
            const int16_t *bs = bsum + i * 16 + 4 * c;
            summ += m0 * (bs[0] + bs[1]) + m1 * (bs[2] + bs[3]);
        }
        s += (double)(kvc_f16_to_f32(b[i].d) * da[i]) * sumi -
             (double)(kvc_f16_to_f32(b[i].dmin) * da[i]) * summ;
    }
    return (float)s;
}

/* Shared by q4_k and q5_k: per-sub-block scale (max-min)/levels and min -min(0, x),
 * both quantised to 6 bits against the super-block maxima; returns the packed
 * 12 bytes and the effective (f16-rounded) d, dmin. */
void kvc_quantize_kscales(const float *x, int levels, kvc_f16 *d_out, kvc_f16 *dmin_out,
                          uint8_t scales[12], float eff_scale[8], float eff_min[8]);
void kvc_quantize_kscales(const float *x, int levels, kvc_f16 *d_out, kvc_f16 *dmin_out,
                          uint8_t scales[12], float eff_scale[8], float eff_min[8]) {
    float sub_scale[8], sub_min[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float mn = 0, mx = 0; /* the format stores min <= 0 (as a positive m) */
        for (int l = 0; l < 32; l++)
            mn = fminf(mn, x[32 * j + l]), mx = fmaxf(mx, x[32 * j + l]);
        sub_scale[j] = (mx - mn) / (float)levels;
        sub_min[j] = -mn;
        max_scale = fmaxf(max_scale, sub_scale[j]);
        max_min = fmaxf(max_min, sub_min[j]);
    }
    *d_out = kvc_f32_to_f16(max_scale / 63.0f);
    *dmin_out = kvc_f32_to_f16(max_min / 63.0f);
    float d = kvc_f16_to_f32(*d_out), dmin = kvc_f16_to_f32(*dmin_out);
    int sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        /* round the scale up and the min up so that [-min, -min + levels*scale] still covers x */
        sc[j] = d > 0 ? (int)ceilf(sub_scale[j] / d) : 0;
        m[j] = dmin > 0 ? (int)ceilf(sub_min[j] / dmin) : 0;
        sc[j] = sc[j] > 63 ? 63 : sc[j];
        m[j] = m[j] > 63 ? 63 : m[j];
        eff_scale[j] = d * (float)sc[j];
        eff_min[j] = dmin * (float)m[j];
    }
    memset(scales, 0, 12);
    for (int j = 0; j < 4; j++) {
        scales[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        scales[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        scales[j + 8] = (uint8_t)((sc[j + 4] & 0xf) | ((m[j + 4] & 0xf) << 4));
    }
}

void kvc_quantize_q4_k_ref(const float *x, void *y, int64_t n) {
    kvc_blk_q4_k *b = y;
    for (int64_t i = 0; i < n / KVC_QKK; i++, x += KVC_QKK) {
        float es[8], em[8];
        kvc_quantize_kscales(x, 15, &b[i].d, &b[i].dmin, b[i].scales, es, em);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                int q[2];
                for (int h = 0; h < 2; h++) {
                    int j = 2 * c + h;
                    float v = x[32 * j + l];
                    q[h] = es[j] > 0 ? (int)lrintf((v + em[j]) / es[j]) : 0;
                    q[h] = q[h] < 0 ? 0 : q[h] > 15 ? 15 : q[h];
                }
                b[i].qs[32 * c + l] = (uint8_t)(q[0] | (q[1] << 4));
            }
        }
    }
}
