/* The online sentence splitter (sentence_split.h): a window of pending
 * weights from the open sentence's start, closed sentences appended to a
 * growing list of ends. */
#include "kv/method/sentence_split.h"

#include <stdlib.h>
#include <string.h>

kvc_status kvc_split_init(kvc_splitter *sp, int L, int delta, int cap, kvc_split_mode mode) {
    memset(sp, 0, sizeof *sp);
    KVC_CHECK(L >= 1 && delta >= 1 && cap >= 1, KVC_ERR_ARG, "sentence split: L %d, delta %d, cap %d must be >= 1",
              L, delta, cap);
    KVC_CHECK(mode >= KVC_SPLIT_WEIGHTED && mode <= KVC_SPLIT_PUNCT, KVC_ERR_ARG, "sentence split: mode %d", (int)mode);
    sp->L = L;
    sp->delta = delta;
    sp->cap = cap;
    sp->mode = mode;
    return KVC_OK;
}

void kvc_split_free(kvc_splitter *sp) {
    free(sp->w);
    free(sp->ends);
    memset(sp, 0, sizeof *sp);
}

void kvc_split_reset(kvc_splitter *sp) {
    sp->total = sp->current = 0;
    sp->head = sp->n_w = 0;
    sp->n_ends = 0;
}

static kvc_status close_at(kvc_splitter *sp, int64_t e) {
    if (sp->n_ends == sp->cap_ends) {
        int64_t cap = sp->cap_ends ? sp->cap_ends * 2 : 256;
        int64_t *p = realloc(sp->ends, (size_t)cap * sizeof *p);
        if (!p) return kvc_fail(KVC_ERR_NOMEM, "sentence ends (%lld)", (long long)cap);
        sp->ends = p;
        sp->cap_ends = cap;
    }
    sp->ends[sp->n_ends++] = e;
    int adv = (int)(e - sp->current);
    sp->head += adv;
    sp->n_w -= adv;
    sp->current = e;
    return KVC_OK;
}

/* Weight of the token ending a sentence at e (token e - 1), by mode. */
static float weight_at(const kvc_splitter *sp, int64_t e) {
    float w = sp->w[sp->head + (e - 1 - sp->current)];
    if (sp->mode == KVC_SPLIT_LENGTH) return 0.0f;
    if (sp->mode == KVC_SPLIT_FLAT && w > 0.0f) return 1.0f;
    return w;
}

/* Decides the open sentence if the known tokens allow it (final: the text
 * ended at total); returns 1 if a sentence was closed. */
static int decide(kvc_splitter *sp, int final, int64_t *end) {
    int64_t cur = sp->current, n = sp->total;
    if (cur >= n) return 0;
    if (sp->mode == KVC_SPLIT_PUNCT) {
        int64_t lim = cur + sp->cap < n ? cur + sp->cap : n;
        for (int64_t e = cur + 1; e <= lim; e++)
            if (weight_at(sp, e) > 0.0f) return *end = e, 1;
        if (cur + sp->cap <= n || final) return *end = lim, 1;
        return 0;
    }
    int64_t ideal = cur + sp->L, we = ideal + sp->delta;
    if (we > n) {
        if (!final) return 0;
        if (ideal > n) ideal = n;
        we = ideal + sp->delta < n ? ideal + sp->delta : n;
    }
    int64_t ws = ideal - sp->delta > cur + 1 ? ideal - sp->delta : cur + 1;
    int64_t best = -1;
    float best_score = 0.0f;
    for (int64_t e = ws; e <= we; e++) {
        float w = weight_at(sp, e);
        if (w <= 0.0f) continue;
        int64_t dist = e > ideal ? e - ideal : ideal - e;
        float score = 0.7f * w + 0.3f * (1.0f - (float)dist / (float)sp->delta);
        int64_t bdist = best < 0 ? 0 : (best > ideal ? best - ideal : ideal - best);
        if (best < 0 || score > best_score || (score == best_score && dist < bdist)) {
            best = e;
            best_score = score;
        }
    }
    *end = best >= 0 ? best : ideal;
    return 1;
}

static kvc_status run(kvc_splitter *sp, int final) {
    int64_t e;
    while (decide(sp, final, &e)) KVC_TRY(close_at(sp, e));
    return KVC_OK;
}

kvc_status kvc_split_push(kvc_splitter *sp, const float *w, int n) {
    KVC_CHECK(n >= 0, KVC_ERR_ARG, "sentence split: %d tokens", n);
    if (n == 0) return KVC_OK;
    if (sp->head + sp->n_w + n > sp->cap_w) { /* slide the pending weights to the front, grow */
        if (sp->n_w > 0) memmove(sp->w, sp->w + sp->head, (size_t)sp->n_w * sizeof *sp->w);
        sp->head = 0;
        if (sp->n_w + n > sp->cap_w) {
            int cap = sp->cap_w ? sp->cap_w : 256;
            while (cap < sp->n_w + n) cap *= 2;
            float *p = realloc(sp->w, (size_t)cap * sizeof *p);
            if (!p) return kvc_fail(KVC_ERR_NOMEM, "sentence split window (%d)", cap);
            sp->w = p;
            sp->cap_w = cap;
        }
    }
    memcpy(sp->w + sp->head + sp->n_w, w, (size_t)n * sizeof *w);
    sp->n_w += n;
    sp->total += n;
    return run(sp, 0);
}

kvc_status kvc_split_finish(kvc_splitter *sp) { return run(sp, 1); }
