/* Scalar reference kernels of the PackKV codecs (math in packkv.h): q.k and
 * p.v on one bit-packed block, unpacking one residual at a time (q.k in
 * either key layout: per-item widths or grouped units). Every SIMD variant
 * (src/kernels/<isa>/kv_packkv_<isa>.c) is tested against these. */
#include "kv/codec/packkv.h"

#include <math.h>

#include "base/f16.h"

uint32_t kvc_pk_unit_offset(const kvc_pk_block *b, int u) {
    uint32_t off = 0;
    for (int i = 0; i < u; i++)
        off += (uint32_t)(b->pack * b->group * kvc_pk_unit_width(b, i) / 8);
    return off;
}

/* Keys: the units of a pack hold `group` channels each, pack-major. */
static void qk_ref(const kvc_pk_block *b, const float *q, int ldq, int G, int j0, int j1, float *s,
                   int lds) {
    int p0 = j0 / b->pack, p1 = (j1 + b->pack - 1) / b->pack, g = b->group;
    for (int h = 0; h < G; h++) {
        const float *qh = q + (size_t)h * ldq;
        float qsum = 0.0f;
        for (int c = 0; c < b->dim; c++) qsum += qh[c];
        const uint8_t *src = b->data + kvc_pk_unit_offset(b, kvc_pk_item(b, p0, 0) / g);
        for (int p = p0; p < p1; p++) {
            float acc[16] = {0}, dmin = 0.0f;
            for (int cu = 0; cu < b->dim; cu += g) {
                int w = kvc_pk_item_width(b, kvc_pk_item(b, p, cu));
                for (int k = 0; k < g; k++) {
                    int c = cu + k;
                    dmin += qh[c] * (float)b->pmins[kvc_pk_item(b, p, c)];
                    for (int t = 0; t < b->pack; t++)
                        acc[t] += qh[c] * (float)kvc_pk_residual(src, w, kvc_pk_rindex(0, g, t, k));
                }
                src += (size_t)b->pack * g * w / 8;
            }
            for (int t = 0; t < b->pack; t++) {
                int j = p * b->pack + t;
                if (j < j0 || j >= j1) continue;
                s[(size_t)h * lds + j - j0] =
                    kvc_bf16_to_f32(b->scales[j]) * (acc[t] + dmin) + b->mins[j] * qsum;
            }
        }
    }
}

/* Values: every unit of the block in order (either layout), each adding its
 * tokens inside [j0, j1) to its channels' sums. */
static void pv_ref(const kvc_pk_block *b, const float *p, int ldp, int G, int j0, int j1, float *o,
                   int ldo) {
    int g = b->group, units = b->np * b->dim / g;
    for (int h = 0; h < G; h++) {
        const float *ph = p + (size_t)h * ldp - j0; /* ph[j]: weight of block token j */
        float *oh = o + (size_t)h * ldo, mterm = 0.0f, acc[KVC_PK_MAX_DIM] = {0};
        for (int j = j0; j < j1; j++) mterm += ph[j] * b->mins[j];
        const uint8_t *src = b->data;
        for (int u = 0; u < units; u++) {
            int w = kvc_pk_unit_width(b, u), pk = u % b->np, c0 = u / b->np * g;
            for (int k = 0; k < g; k++)
                for (int t = 0; t < b->pack; t++) {
                    int j = pk * b->pack + t;
                    if (j < j0 || j >= j1) continue;
                    float wt = ph[j] * kvc_bf16_to_f32(b->scales[j]);
                    int r = kvc_pk_residual(src, w, kvc_pk_rindex(1, g, t, k));
                    acc[c0 + k] += wt * (float)(b->pmins[u * g + k] + r);
                }
            src += (size_t)b->pack * g * w / 8;
        }
        for (int c = 0; c < b->dim; c++)
            oh[c] += acc[c] + mterm;
    }
}

const kvc_pk_kernels kvc_pk_ref = {.qk = qk_ref, .pv = pv_ref};
kvc_pk_kernels kvc_pk_k = {.qk = qk_ref, .pv = pv_ref};
