/* Codec "chanprune_f16" (chanprune.h): per group of tokens its kept channels
 * (an ascending list of `keep` u16), and the kept channels of every token as
 * f16, [n][keep]. Channel choice: largest
 * column L2 norm, ties to the lower index (kvc_prune_topk on the norms). */
#include "kv/codec/chanprune.h"

#include <stdlib.h>
#include <string.h>

#include "base/f16.h"
#include "base/status.h"
#include "kv/codec/dense.h"
#include "kv/codec/prune.h"

/* One allocation: this header, ch [ngroups][keep], rows [n][keep]. */
typedef struct cp_blob {
    int n, d, keep, group, ngroups;
    size_t alloc;
    int16_t *ch;   /* kept channels of each group, ascending */
    kvc_f16 *rows; /* [n][keep] */
} cp_blob;

static kvc_status cp_encode(const kvc_codec *c, const float *x, int n, int ld, void **out) {
    const kvc_chanprune_cfg *cfg = c->cfg;
    int d = c->dim, keep = cfg->keep, group = cfg->group;
    *out = NULL;
    KVC_CHECK(d >= 1 && d <= KVC_PRUNE_MAX_D, KVC_ERR_ARG, "chanprune codec: dim %d outside [1, %d]", d,
              KVC_PRUNE_MAX_D);
    KVC_CHECK(keep >= 1 && keep <= d, KVC_ERR_ARG, "chanprune codec: keep %d outside [1, %d]", keep, d);
    KVC_CHECK(group >= 1, KVC_ERR_ARG, "chanprune codec: group %d below 1", group);
    KVC_CHECK(n >= 0, KVC_ERR_ARG, "chanprune codec: %d tokens", n);
    int ngroups = (n + group - 1) / group;
    size_t hdr = (sizeof(cp_blob) + 15) & ~(size_t)15;
    size_t chb = ((size_t)ngroups * keep * sizeof(int16_t) + 15) & ~(size_t)15;
    size_t alloc = hdr + chb + (size_t)n * keep * sizeof(kvc_f16);
    cp_blob *b = malloc(alloc);
    if (!b) return kvc_fail(KVC_ERR_NOMEM, "chanprune blob of %d tokens", n);
    *b = (cp_blob){.n = n, .d = d, .keep = keep, .group = group, .ngroups = ngroups, .alloc = alloc};
    b->ch = (int16_t *)((char *)b + hdr);
    b->rows = (kvc_f16 *)((char *)b + hdr + chb);
    for (int gi = 0; gi < ngroups; gi++) {
        int t0 = gi * group, t1 = t0 + group < n ? t0 + group : n;
        float norm[KVC_PRUNE_MAX_D];
        uint64_t mask[KVC_PRUNE_MAX_D / 64];
        for (int j = 0; j < d; j++) norm[j] = 0.0f;
        for (int i = t0; i < t1; i++)
            for (int j = 0; j < d; j++) norm[j] += x[(size_t)i * ld + j] * x[(size_t)i * ld + j];
        kvc_prune_topk(norm, d, keep, mask);
        int16_t *ch = b->ch + (size_t)gi * keep;
        int w = 0;
        for (int j = 0; j < d; j++)
            if (mask[j >> 6] >> (j & 63) & 1) ch[w++] = (int16_t)j;
        for (int i = t0; i < t1; i++)
            for (int r = 0; r < keep; r++) b->rows[(size_t)i * keep + r] = kvc_f32_to_f16(x[(size_t)i * ld + ch[r]]);
    }
    *out = b;
    return KVC_OK;
}

static int cp_count(const kvc_codec *c, const void *blob) {
    (void)c;
    return ((const cp_blob *)blob)->n;
}

/* Runs BODY over the pieces of tokens [begin, end) split at group
 * boundaries: piece [t0, t1) of group gi, at output offset off. */
#define FOR_PIECES(b, begin, end, BODY)                                                            \
    do {                                                                                           \
        for (int t0 = (begin); t0 < (end);) {                                                      \
            int gi = t0 / (b)->group, gend = (gi + 1) * (b)->group;                                \
            int t1 = (end) < gend ? (end) : gend, off = t0 - (begin);                              \
            BODY;                                                                                  \
            t0 = t1;                                                                               \
        }                                                                                          \
    } while (0)

static void cp_qk(const kvc_codec *c, const void *blob, const float *q, int G, int ldq, int begin,
                  int end, float *s, int lds) {
    (void)c;
    const cp_blob *b = blob;
    float qs[16 * KVC_PRUNE_MAX_D];
    for (int g0 = 0; g0 < G; g0 += 16) {
        int gb = G - g0 < 16 ? G - g0 : 16, cur = -1;
        FOR_PIECES(b, begin, end, {
            const int16_t *ch = b->ch + (size_t)gi * b->keep;
            if (gi != cur) { /* gather the query's kept channels once per group */
                for (int g = 0; g < gb; g++)
                    for (int e = 0; e < b->keep; e++) qs[g * b->keep + e] = q[(size_t)(g0 + g) * ldq + ch[e]];
                cur = gi;
            }
            kvc_dense_k.qk[KVC_DENSE_F16](b->rows + (size_t)t0 * b->keep, t1 - t0, b->keep, qs, gb, b->keep,
                                          s + (size_t)g0 * lds + off, lds);
        });
    }
}

static void cp_pv(const kvc_codec *c, const void *blob, const float *p, int G, int ldp, int begin,
                  int end, float *o, int ldo) {
    (void)c;
    const cp_blob *b = blob;
    float os[16 * KVC_PRUNE_MAX_D];
    for (int g0 = 0; g0 < G; g0 += 16) {
        int gb = G - g0 < 16 ? G - g0 : 16;
        FOR_PIECES(b, begin, end, {
            const int16_t *ch = b->ch + (size_t)gi * b->keep;
            memset(os, 0, (size_t)gb * b->keep * sizeof(float));
            kvc_dense_k.pv[KVC_DENSE_F16](b->rows + (size_t)t0 * b->keep, t1 - t0, b->keep,
                                          p + (size_t)g0 * ldp + off, gb, ldp, os, b->keep);
            for (int g = 0; g < gb; g++)
                for (int e = 0; e < b->keep; e++) o[(size_t)(g0 + g) * ldo + ch[e]] += os[g * b->keep + e];
        });
    }
}

static void cp_decode(const kvc_codec *c, const void *blob, int begin, int end, float *x, int ld) {
    (void)c;
    const cp_blob *b = blob;
    for (int i = begin; i < end; i++) {
        float *xi = x + (size_t)(i - begin) * ld;
        const int16_t *ch = b->ch + (size_t)(i / b->group) * b->keep;
        memset(xi, 0, (size_t)b->d * sizeof(float));
        for (int e = 0; e < b->keep; e++) xi[ch[e]] = kvc_f16_to_f32(b->rows[(size_t)i * b->keep + e]);
    }
}

/* payload: the kept f16 values; meta: header and channel lists. */
static void cp_bytes(const kvc_codec *c, const void *blob, uint64_t *payload, uint64_t *meta) {
    (void)c;
    const cp_blob *b = blob;
    *payload = (uint64_t)b->n * b->keep * 2;
    *meta = b->alloc - *payload;
}

static void cp_free(const kvc_codec *c, void *blob) {
    (void)c;
    free(blob);
}

const kvc_codec_ops kvc_codec_chanprune_f16 = {
    .name = "chanprune_f16",
    .granule = 1,
    .encode = cp_encode,
    .count = cp_count,
    .qk = cp_qk,
    .pv = cp_pv,
    .decode = cp_decode,
    .bytes = cp_bytes,
    .free = cp_free,
};
