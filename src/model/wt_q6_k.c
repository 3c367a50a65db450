/* Q6_K weights (ggml type 14): super-blocks of 256 = 16 groups of 16 6-bit
 * values with int8 group scales under one f16 super-scale,
 * x = d*sc_g*(q-32). Element e = 128h + 32k + l (h < 2, k < 4, l < 32) takes
 * its low 4 bits from ql[64h + l + 32*(k&1)] (low nibble for k < 2, high for
 * k >= 2) and its high 2 bits from bits 2k..2k+1 of qh[32h + l]; its group is
 * e/16. Scalar references: dequantise, dot with a Q8_K-prepared activation,
 * and a simple quantiser (signed max per group mapped to -32, 8-bit scales). */
#include "model/wt_kernels.h"

#include <math.h>
#include <string.h>

/* The 256 values (q-32, in [-32, 31]) of one block in element order. */
static void q6k_values(const kvc_blk_q6_k *b, int8_t v[256]) {
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        int8_t *o = v + 128 * h;
        for (int l = 0; l < 32; l++) {
            o[l] = (int8_t)(((ql[l] & 0xf) | ((qh[l] & 3) << 4)) - 32);
            o[l + 32] = (int8_t)(((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32);
            o[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            o[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

void kvc_dequant_q6_k_ref(const void *x, float *y, int64_t n) {
    const kvc_blk_q6_k *b = x;
    int8_t v[256];
    for (int64_t i = 0; i < n / KVC_QKK; i++, y += KVC_QKK) {
        float d = kvc_f16_to_f32(b[i].d);
        q6k_values(&b[i], v);
        for (int e = 0; e < KVC_QKK; e++)
            y[e] = d * (float)b[i].scales[e / 16] * (float)v[e];
    }
}

float kvc_dot_q6_k_ref(const void *row, const void *act, int64_t n) {
    const kvc_blk_q6_k *b = row;
    const int8_t *qa = kvc_act_q(act);
    const float *da = kvc_act_q8_k_d(act, n);
    int8_t v[256];
    double s = 0;
    for (int64_t i = 0; i < n / KVC_QKK; i++) {
        q6k_values(&b[i], v);
        const int8_t *a = qa + i * KVC_QKK;
        int32_t sumi = 0;
        for (int g = 0; g < 16; g++) {
            int32_t sg = 0;
            for (int e = 16 * g; e < 16 * g + 16; e++)
                sg += v[e] * a[e];
            sumi += b[i].scales[g] * sg;
        }
        s += (double)(kvc_f16_to_f32(b[i].d) * da[i]) * sumi;
    }
    return (float)s;
}

void kvc_quantize_q6_k_ref(const float *x, void *y, int64_t n) {
    kvc_blk_q6_k *b = y;
    for (int64_t i = 0; i < n / KVC_QKK; i++, x += KVC_QKK) {
        float gs[16], amax_s = 0;
        for (int g = 0; g < 16; g++) {
            float amax = 0, max = 0;
            for (int l = 0; l < 16; l++)
                if (fabsf(x[16 * g + l]) > amax) amax = fabsf(x[16 * g + l]), max = x[16 * g + l];
            gs[g] = max / -32.0f;
            amax_s = fmaxf(amax_s, fabsf(gs[g]));
        }
        b[i].d = kvc_f32_to_f16(amax_s / 127.0f);
        float d = kvc_f16_to_f32(b[i].d);
        memset(b[i].ql, 0, sizeof b[i].ql);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int g = 0; g < 16; g++) {
            int sc = d > 0 ? (int)lrintf(gs[g] / d) : 0;
            sc = sc < -128 ? -128 : sc > 127 ? 127 : sc;
            b[i].scales[g] = (int8_t)sc;
            float es = d * (float)sc;
            for (int l = 0; l < 16; l++) {
                int e = 16 * g + l;
                int q = es != 0 ? (int)lrintf(x[e] / es) : 0;
                q = (q < -32 ? -32 : q > 31 ? 31 : q) + 32;
                int h = e >> 7, k = (e >> 5) & 3, ll = e & 31;
                b[i].ql[64 * h + ll + 32 * (k & 1)] |= (uint8_t)((q & 0xf) << (k < 2 ? 0 : 4));
                b[i].qh[32 * h + ll] |= (uint8_t)((q >> 4) << (2 * k));
            }
        }
    }
}
