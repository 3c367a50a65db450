/* Chunked prefill attention (docs/design.md §2, cache.h kvc_cache_prefill): the n
 * queries of a prompt chunk attend to the stream's compressed past (every
 * chunk and the hot window, decoded tile by tile: codec decode + transform
 * restore, so quantisation and pruning error are seen; dead tokens masked; no
 * selection, as prefill attention is dense in the papers) and causally and
 * exactly to the chunk's own k, v. Queries are processed in tiles of QT
 * tokens × G heads as one matrix; scores and outputs are BLAS sgemm products
 * with an online softmax across key tiles. A key tile of a compressed past
 * is decoded once for a span of KVC_PREFILL_QTILE query tokens (several
 * query tiles), so its decode (bit unpacking, bitmaps, the inverse
 * transform) is paid per key and span, not per key and query tile; a dense
 * past is converted per query tile (past_chunk). */
#include "kv/prefill.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kv/softmax.h"

enum { QT = 64, SPAN = KVC_PREFILL_QTILE, KT = 256 };
_Static_assert(SPAN % QT == 0, "a span is whole query tiles");

struct kvc_prefill_ws {
    float *qm, *om, *m, *l; /* a span's queries, outputs and softmax state */
    float *s;               /* one query tile's scores against a key tile */
    float *kt, *vt;         /* one decoded key tile */
    size_t cap_q, cap_k;    /* floats of qm and of kt */
    uint64_t bytes_q, bytes_k; /* allocated for the span, for the key tile */
};

kvc_status kvc_prefill_ws_create(kvc_prefill_ws **out) {
    *out = calloc(1, sizeof **out);
    return *out ? KVC_OK : kvc_fail(KVC_ERR_NOMEM, "prefill workspace");
}

void kvc_prefill_ws_free(kvc_prefill_ws *w) {
    if (!w) return;
    free(w->qm); free(w->om); free(w->s); free(w->m); free(w->l); free(w->kt); free(w->vt);
    free(w);
}

uint64_t kvc_prefill_ws_bytes(const kvc_prefill_ws *w) {
    return w ? sizeof *w + w->bytes_q + w->bytes_k : 0;
}

static kvc_status reserve(kvc_prefill_ws *w, int G, int d) {
    size_t nq = (size_t)SPAN * G * d, nk = (size_t)KT * d;
    if (w->cap_q < nq) {
        free(w->qm); free(w->om); free(w->s); free(w->m); free(w->l);
        w->qm = malloc(nq * 4);
        w->om = malloc(nq * 4);
        w->s = malloc((size_t)QT * G * KT * 4);
        w->m = malloc((size_t)SPAN * G * 4);
        w->l = malloc((size_t)SPAN * G * 4);
        w->cap_q = w->qm && w->om && w->s && w->m && w->l ? nq : 0;
        w->bytes_q = w->cap_q ? (2 * nq + 2 * (size_t)SPAN * G + (size_t)QT * G * KT) * 4 : 0;
        if (!w->cap_q) return kvc_fail(KVC_ERR_NOMEM, "prefill query span (%d x %d)", SPAN * G, d);
    }
    if (w->cap_k < nk) {
        free(w->kt); free(w->vt);
        w->kt = malloc(nk * 4);
        w->vt = malloc(nk * 4);
        w->cap_k = w->kt && w->vt ? nk : 0;
        w->bytes_k = w->cap_k * 2 * 4;
        if (!w->cap_k) return kvc_fail(KVC_ERR_NOMEM, "prefill key tile (%d x %d)", KT, d);
    }
    return KVC_OK;
}

/* Online softmax update of the span's rows r0 .. r0 + rows - 1 (one query
 * tile) for their nk scores in s (ld KT), then O += P V. With causal != 0,
 * key j is visible to the tile's row r iff first_key + j <= tok0 + r / G. */
static void update(kvc_prefill_ws *w, int r0, int rows, int G, int d, int nk, const float *vt,
                   int ldv, const uint64_t *dead, int dead_off, int causal, int first_key,
                   int tok0) {
    float *wm = w->m + r0, *wl = w->l + r0, *om = w->om + (size_t)r0 * d;
    for (int r = 0; r < rows; r++) {
        float *s = w->s + (size_t)r * KT;
        int lim = nk;
        if (causal) {
            int tok = tok0 + r / G; /* this query's index in the chunk */
            lim = tok - first_key + 1;
            if (lim > nk) lim = nk;
            if (lim < 0) lim = 0;
            for (int j = lim; j < nk; j++) s[j] = -INFINITY;
        }
        if (dead)
            for (int j = 0; j < nk; j++) {
                int t = dead_off + j;
                if ((dead[t >> 6] >> (t & 63)) & 1) s[j] = -INFINITY;
            }
        float mt = kvc_softmax_k.max(s, nk);
        if (mt == -INFINITY) {
            memset(s, 0, (size_t)nk * 4);
            continue;
        }
        float m = wm[r] > mt ? wm[r] : mt;
        if (m > wm[r]) {
            float a = wm[r] == -INFINITY ? 0.0f : expf(wm[r] - m);
            float *o = om + (size_t)r * d;
            for (int j = 0; j < d; j++) o[j] *= a;
            wl[r] *= a;
            wm[r] = m;
        }
        wl[r] += kvc_softmax_k.exp_sum(s, nk, m);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, nk, 1.0f, w->s, KT, vt, ldv,
                1.0f, om, d);
}

/* Scores of the span's rows r0 .. r0 + rows - 1 against nk keys (rows ld ldk). */
static void scores(kvc_prefill_ws *w, int r0, int rows, int d, const float *kt, int ldk, int nk) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, nk, d, 1.0f, w->qm + (size_t)r0 * d,
                d, kt, ldk, 0.0f, w->s, KT);
}

/* A chunk's K or V as f32 rows in place, when its codec stores them so and no
 * transform stands between; NULL: decode it. */
static const float *f32_view(const kvc_chunk *c, const kvc_codec *cc, const void *blob) {
    return !c->xf && cc->ops->view_f32 ? cc->ops->view_f32(cc, blob) : NULL;
}

/* The span's nt queries against one chunk of the past. A key tile that costs
 * more to decode than to convert is decoded once for all the span's query
 * tiles; a dense one is converted again for each query tile, so that the
 * tile's working set (its queries, outputs, scores and the key tile) stays in
 * L2. Each query row sees the key tiles in the same order either way, so the
 * results are the same. */
static kvc_status past_chunk(kvc_prefill_ws *w, const kvc_chunk *c, int nt, int G, int d) {
    const float *kf = f32_view(c, &c->kc, c->kb), *vf = f32_view(c, &c->vc, c->vb);
    const int per_tile = !c->xf && c->kc.ops->cheap_decode && c->vc.ops->cheap_decode;
    const int step = per_tile ? QT : SPAN; /* query tokens per decode of a key tile */
    for (int u0 = 0; u0 < nt; u0 += step) {
        int u1 = nt - u0 < step ? nt : u0 + step;
        for (int b = 0; b < c->n; b += KT) {
            int nk = c->n - b < KT ? c->n - b : KT;
            const float *kt = kf ? kf + (size_t)b * d : w->kt;
            const float *vt = vf ? vf + (size_t)b * d : w->vt;
            if (!kf || !vf)
                KVC_TRY(kvc_chunk_decode(c, b, b + nk, kf ? NULL : w->kt, vf ? NULL : w->vt, d));
            for (int u = u0; u < u1; u += QT) {
                int r0 = u * G, rows = (u1 - u < QT ? u1 - u : QT) * G;
                scores(w, r0, rows, d, kt, d, nk);
                update(w, r0, rows, G, d, nk, vt, d, c->dead, b, 0, 0, 0);
            }
        }
    }
    return KVC_OK;
}

kvc_status kvc_prefill_attend(const kvc_stream *s, int G, int n, const float *q, int ldq,
                              const float *k, const float *v, int ldkv, float *out, int ldo,
                              int t_begin, int t_end, kvc_prefill_ws *w) {
    int d = s->dim;
    KVC_TRY(reserve(w, G, d));
    float scale = 1.0f / sqrtf((float)d);
    if (t_end > n) t_end = n;
    for (int t0 = t_begin; t0 < t_end; t0 += SPAN) {
        int nt = t_end - t0 < SPAN ? t_end - t0 : SPAN, rows = nt * G;
        for (int i = 0; i < nt; i++)
            for (int g = 0; g < G; g++) {
                const float *src = q + (size_t)(t0 + i) * ldq + (size_t)g * d;
                float *dst = w->qm + ((size_t)i * G + g) * d;
                for (int j = 0; j < d; j++) dst[j] = src[j] * scale;
            }
        for (int r = 0; r < rows; r++) w->m[r] = -INFINITY, w->l[r] = 0.0f;
        memset(w->om, 0, (size_t)rows * d * 4);

        /* the past: sealed chunks, then the hot window */
        for (int ci = 0; ci <= s->n_chunks; ci++)
            KVC_TRY(past_chunk(w, ci < s->n_chunks ? s->chunks[ci] : s->hot, nt, G, d));
        /* the chunk itself, causally: query tile u sees keys 0 .. t0+u+its tokens-1 */
        for (int u = 0; u < nt; u += QT) {
            int nu = nt - u < QT ? nt - u : QT, r0 = u * G, last = t0 + u + nu;
            for (int b = 0; b < last; b += KT) {
                int nk = last - b < KT ? last - b : KT;
                scores(w, r0, nu * G, d, k + (size_t)b * ldkv, ldkv, nk);
                update(w, r0, nu * G, G, d, nk, v + (size_t)b * ldkv, ldkv, NULL, 0, 1, b, t0 + u);
            }
        }
        for (int i = 0; i < nt; i++)
            for (int g = 0; g < G; g++) {
                int r = i * G + g;
                float inv = w->l[r] > 0.0f ? 1.0f / w->l[r] : 0.0f;
                const float *src = w->om + (size_t)r * d;
                float *dst = out + (size_t)(t0 + i) * ldo + (size_t)g * d;
                for (int j = 0; j < d; j++) dst[j] = src[j] * inv;
            }
    }
    return KVC_OK;
}
