/* Dense codecs f32 / f16 / bf16 (docs/design.md §4 "Codec", the `full` method and
 * every hot window): a blob is rows [n][dim] of one element type in a buffer
 * that grows by 1/16 (appendable; spare capacity counts as metadata; kernels
 * use unaligned loads). This file holds the codec tables and the scalar reference
 * kernels; SIMD kernels are in src/kernels/<isa>/kv_dense_<isa>.c. */
#include "kv/codec/dense.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/f16.h"
#include "base/status.h"

typedef struct dense_blob {
    int n, cap;
    void *rows; /* [cap][dim] elements */
} dense_blob;

static size_t elem_size(kvc_dense_type t) { return t == KVC_DENSE_F32 ? 4 : 2; }

static kvc_dense_type type_of(const kvc_codec *c) {
    if (c->ops == &kvc_codec_f16) return KVC_DENSE_F16;
    if (c->ops == &kvc_codec_bf16) return KVC_DENSE_BF16;
    return KVC_DENSE_F32;
}

const void *kvc_dense_rows(const void *blob) { return ((const dense_blob *)blob)->rows; }

void kvc_dense_truncate(void *blob, int n) {
    dense_blob *b = blob;
    if (n >= 0 && n < b->n) b->n = n;
}

/* ---- scalar reference kernels ------------------------------------------- */

static inline float load_elem(kvc_dense_type t, const void *x, size_t i) {
    switch (t) {
    case KVC_DENSE_F16: return kvc_f16_to_f32(((const kvc_f16 *)x)[i]);
    case KVC_DENSE_BF16: return kvc_bf16_to_f32(((const kvc_bf16 *)x)[i]);
    default: return ((const float *)x)[i];
    }
}

static void qk_ref(kvc_dense_type t, const void *x, int n, int d, const float *q, int G, int ldq,
                   float *s, int lds) {
    for (int i = 0; i < n; i++) {
        for (int g = 0; g < G; g++) {
            const float *qg = q + (size_t)g * ldq;
            float acc = 0.0f;
            for (int j = 0; j < d; j++) acc += qg[j] * load_elem(t, x, (size_t)i * d + j);
            s[(size_t)g * lds + i] = acc;
        }
    }
}

static void pv_ref(kvc_dense_type t, const void *x, int n, int d, const float *p, int G, int ldp,
                   float *o, int ldo) {
    for (int i = 0; i < n; i++) {
        for (int g = 0; g < G; g++) {
            float pg = p[(size_t)g * ldp + i];
            float *og = o + (size_t)g * ldo;
            for (int j = 0; j < d; j++) og[j] += pg * load_elem(t, x, (size_t)i * d + j);
        }
    }
}

static void qk_f32_ref(const void *x, int n, int d, const float *q, int G, int ldq, float *s,
                       int lds) {
    qk_ref(KVC_DENSE_F32, x, n, d, q, G, ldq, s, lds);
}
static void qk_f16_ref(const void *x, int n, int d, const float *q, int G, int ldq, float *s,
                       int lds) {
    qk_ref(KVC_DENSE_F16, x, n, d, q, G, ldq, s, lds);
}
static void qk_bf16_ref(const void *x, int n, int d, const float *q, int G, int ldq, float *s,
                        int lds) {
    qk_ref(KVC_DENSE_BF16, x, n, d, q, G, ldq, s, lds);
}
static void pv_f32_ref(const void *x, int n, int d, const float *p, int G, int ldp, float *o,
                       int ldo) {
    pv_ref(KVC_DENSE_F32, x, n, d, p, G, ldp, o, ldo);
}
static void pv_f16_ref(const void *x, int n, int d, const float *p, int G, int ldp, float *o,
                       int ldo) {
    pv_ref(KVC_DENSE_F16, x, n, d, p, G, ldp, o, ldo);
}
static void pv_bf16_ref(const void *x, int n, int d, const float *p, int G, int ldp, float *o,
                        int ldo) {
    pv_ref(KVC_DENSE_BF16, x, n, d, p, G, ldp, o, ldo);
}

static void cvt_f32_ref(const void *x, size_t n, float *y) { memcpy(y, x, n * 4); }
static void cvt_f16_ref(const void *x, size_t n, float *y) {
    for (size_t i = 0; i < n; i++) y[i] = kvc_f16_to_f32(((const kvc_f16 *)x)[i]);
}
static void cvt_bf16_ref(const void *x, size_t n, float *y) {
    for (size_t i = 0; i < n; i++) y[i] = kvc_bf16_to_f32(((const kvc_bf16 *)x)[i]);
}

static void put_f32_ref(const float *x, size_t n, void *y) { memcpy(y, x, n * 4); }
static void put_f16_ref(const float *x, size_t n, void *y) {
    for (size_t i = 0; i < n; i++) ((kvc_f16 *)y)[i] = kvc_f32_to_f16(x[i]);
}
static void put_bf16_ref(const float *x, size_t n, void *y) {
    for (size_t i = 0; i < n; i++) ((kvc_bf16 *)y)[i] = kvc_f32_to_bf16(x[i]);
}

const kvc_dense_kernels kvc_dense_ref = {
    .qk = {qk_f32_ref, qk_f16_ref, qk_bf16_ref},
    .pv = {pv_f32_ref, pv_f16_ref, pv_bf16_ref},
    .cvt = {cvt_f32_ref, cvt_f16_ref, cvt_bf16_ref},
    .put = {put_f32_ref, put_f16_ref, put_bf16_ref},
};
kvc_dense_kernels kvc_dense_k = {
    .qk = {qk_f32_ref, qk_f16_ref, qk_bf16_ref},
    .pv = {pv_f32_ref, pv_f16_ref, pv_bf16_ref},
    .cvt = {cvt_f32_ref, cvt_f16_ref, cvt_bf16_ref},
    .put = {put_f32_ref, put_f16_ref, put_bf16_ref},
};

/* ---- codec operations ------------------------------------------------------ */

static void store_rows(kvc_dense_type t, void *dst, const float *x, int n, int d, int ld) {
    kvc_put_dense_fn put = kvc_dense_k.put[t];
    if (ld == d) { /* contiguous rows: one call */
        put(x, (size_t)n * d, dst);
        return;
    }
    for (int i = 0; i < n; i++) put(x + (size_t)i * ld, (size_t)d, (char *)dst + (size_t)i * d * elem_size(t));
}

/* Capacity grows by 1/16 (at least 16 rows) with realloc, which extends large
 * blocks in place (mremap) more often than not: spare capacity stays below
 * ~6% of a blob, the cost of copying amortised over 16 appends. */
static kvc_status resize(const kvc_codec *c, dense_blob *b, int cap) {
    size_t row = (size_t)c->dim * elem_size(type_of(c));
    void *r = realloc(b->rows, (size_t)(cap ? cap : 1) * row);
    if (!r) return kvc_fail(KVC_ERR_NOMEM, "dense %s blob: %d rows of %zu bytes", c->ops->name, cap, row);
    b->rows = r;
    b->cap = cap;
    return KVC_OK;
}

static kvc_status reserve(const kvc_codec *c, dense_blob *b, int need) {
    if (need <= b->cap) return KVC_OK;
    int64_t cap = b->cap + (b->cap / 16 > 16 ? b->cap / 16 : 16);
    if (cap < need) cap = need;
    cap = (cap + 15) & ~(int64_t)15;
    return resize(c, b, cap > INT32_MAX ? need : (int)cap);
}

kvc_status kvc_dense_set_count(const kvc_codec *c, void *blob, int n) {
    dense_blob *b = blob;
    KVC_CHECK(n >= 0, KVC_ERR_ARG, "dense %s blob: %d rows", c->ops->name, n);
    KVC_TRY(reserve(c, b, n));
    b->n = n;
    return KVC_OK;
}

void kvc_dense_trim(const kvc_codec *c, void *blob) {
    dense_blob *b = blob;
    if (b->cap > b->n) resize(c, b, b->n); /* a failed shrink keeps the old buffer */
}

static kvc_status dense_append(const kvc_codec *c, void *blob, const float *x, int n, int ld) {
    dense_blob *b = blob;
    if (n <= 0) return KVC_OK;
    KVC_TRY(reserve(c, b, b->n + n));
    kvc_dense_type t = type_of(c);
    store_rows(t, (char *)b->rows + (size_t)b->n * c->dim * elem_size(t), x, n, c->dim, ld);
    b->n += n;
    return KVC_OK;
}

static kvc_status dense_encode(const kvc_codec *c, const float *x, int n, int ld, void **out) {
    *out = NULL;
    dense_blob *b = calloc(1, sizeof *b);
    if (!b) return kvc_fail(KVC_ERR_NOMEM, "dense blob");
    kvc_status st = n > 0 ? reserve(c, b, n) : KVC_OK;
    if (st == KVC_OK) st = dense_append(c, b, x, n, ld);
    if (st != KVC_OK) {
        free(b->rows);
        free(b);
        return st;
    }
    *out = b;
    return KVC_OK;
}

/* A hot window that held a prefill chunk gives the spare memory back once
 * drained: down to n + n/8 rows whenever more than a quarter (and 64 rows)
 * would be spare, so a long-lived window (kvmix's recent context, ~10-20% of
 * the tokens) is not charged for the chunk it once held, while small steps
 * do not reallocate. */
static void shrink(const kvc_codec *c, dense_blob *b) {
    int64_t want = (int64_t)b->n + b->n / 8;
    want = want < 16 ? 16 : (want + 15) & ~(int64_t)15;
    if (b->cap - want < 64 || (int64_t)b->cap * 4 < want * 5) return;
    resize(c, b, (int)want); /* a failed shrink keeps the larger buffer */
}

static void dense_drop_front(const kvc_codec *c, void *blob, int n) {
    dense_blob *b = blob;
    if (n <= 0) return;
    if (n >= b->n) {
        b->n = 0;
        shrink(c, b);
        return;
    }
    size_t row = (size_t)c->dim * elem_size(type_of(c));
    memmove(b->rows, (char *)b->rows + (size_t)n * row, (size_t)(b->n - n) * row);
    b->n -= n;
    shrink(c, b);
}

static int dense_count(const kvc_codec *c, const void *blob) {
    (void)c;
    return ((const dense_blob *)blob)->n;
}

static void dense_qk(const kvc_codec *c, const void *blob, const float *q, int G, int ldq, int begin,
                     int end, float *s, int lds) {
    const dense_blob *b = blob;
    kvc_dense_type t = type_of(c);
    size_t row = (size_t)c->dim * elem_size(t);
    kvc_dense_k.qk[t]((const char *)b->rows + (size_t)begin * row, end - begin, c->dim, q, G, ldq, s, lds);
}

static void dense_pv(const kvc_codec *c, const void *blob, const float *p, int G, int ldp, int begin,
                     int end, float *o, int ldo) {
    const dense_blob *b = blob;
    kvc_dense_type t = type_of(c);
    size_t row = (size_t)c->dim * elem_size(t);
    kvc_dense_k.pv[t]((const char *)b->rows + (size_t)begin * row, end - begin, c->dim, p, G, ldp, o, ldo);
}

/* One prefetch per cache line of the rows, into L2 (a 256-token item of K
 * and V is 64 KiB at head dim 64: more than L1). */
static void dense_prefetch(const kvc_codec *c, const void *blob, int begin, int end) {
    const dense_blob *b = blob;
    size_t row = (size_t)c->dim * elem_size(type_of(c));
    const char *p = (const char *)b->rows + (size_t)begin * row, *e = (const char *)b->rows + (size_t)end * row;
    for (; p < e; p += 64) __builtin_prefetch(p, 0, 2);
}

static void dense_decode(const kvc_codec *c, const void *blob, int begin, int end, float *x,
                         int ld) {
    const dense_blob *b = blob;
    kvc_dense_type t = type_of(c);
    int d = c->dim;
    const char *rows = (const char *)b->rows + (size_t)begin * d * elem_size(t);
    if (ld == d) {
        kvc_dense_k.cvt[t](rows, (size_t)(end - begin) * d, x);
        return;
    }
    for (int i = begin; i < end; i++)
        kvc_dense_k.cvt[t](rows + (size_t)(i - begin) * d * elem_size(t), (size_t)d, x + (size_t)(i - begin) * ld);
}

static const float *dense_view_f32(const kvc_codec *c, const void *blob) {
    return type_of(c) == KVC_DENSE_F32 ? ((const dense_blob *)blob)->rows : NULL;
}

static void dense_bytes(const kvc_codec *c, const void *blob, uint64_t *payload, uint64_t *meta) {
    const dense_blob *b = blob;
    uint64_t row = (uint64_t)c->dim * elem_size(type_of(c));
    *payload = (uint64_t)b->n * row;
    *meta = (uint64_t)(b->cap - b->n) * row + sizeof *b;
}

uint64_t kvc_dense_spare_bytes(const kvc_codec *c, const void *blob) {
    if (c->ops != &kvc_codec_f32 && c->ops != &kvc_codec_f16 && c->ops != &kvc_codec_bf16) return 0;
    const dense_blob *b = blob;
    return (uint64_t)(b->cap - b->n) * c->dim * elem_size(type_of(c));
}

static void dense_free(const kvc_codec *c, void *blob) {
    (void)c;
    dense_blob *b = blob;
    if (!b) return;
    free(b->rows);
    free(b);
}

#define DENSE_OPS(NAME)                                                                            \
    {                                                                                              \
        .name = NAME, .granule = 1, .cheap_decode = 1, .piece = 4, .encode = dense_encode,         \
        .append = dense_append, .drop_front = dense_drop_front, .count = dense_count,              \
        .qk = dense_qk, .pv = dense_pv,                                                            \
        .prefetch = dense_prefetch, .decode = dense_decode, .view_f32 = dense_view_f32,           \
        .bytes = dense_bytes,                                                                      \
        .free = dense_free,                                                                        \
    }

const kvc_codec_ops kvc_codec_f32 = DENSE_OPS("f32");
const kvc_codec_ops kvc_codec_f16 = DENSE_OPS("f16");
const kvc_codec_ops kvc_codec_bf16 = DENSE_OPS("bf16");

const kvc_codec_ops *kvc_codec_dense(kvc_dense_type t) {
    switch (t) {
    case KVC_DENSE_F16: return &kvc_codec_f16;
    case KVC_DENSE_BF16: return &kvc_codec_bf16;
    default: return &kvc_codec_f32;
    }
}
