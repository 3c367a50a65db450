/* Read and reuse statistics of decode selection (usage.h). A selection
 * becomes a sorted list of position intervals (units of chunks without a
 * position array are consecutive positions; others go token by token; the
 * list is sorted only if it does not come sorted, which it does for sentkv
 * and quest: a sort of 7.5K intervals per KV head and step at 1M tokens); the
 * overlap with the previous list is one merge pass. */
#include "kv/select/usage.h"

#include <stdlib.h>

void kvc_sel_usage_read(kvc_sel_usage *u, const kvc_stream *s, int64_t n_read) {
    u->read += (uint64_t)n_read;
    u->context += (uint64_t)s->n_pos;
}

static int push(kvc_sel_usage *u, int *n, int64_t b, int64_t e) {
    if (*n > 0 && u->tmp[2 * *n - 1] == b) { /* extends the previous interval */
        u->tmp[2 * *n - 1] = e;
        return 1;
    }
    if (*n == u->tmp_cap) {
        int cap = u->tmp_cap ? u->tmp_cap * 2 : 64;
        int64_t *p = realloc(u->tmp, (size_t)cap * 2 * sizeof *p);
        if (!p) return 0;
        u->tmp = p;
        u->tmp_cap = cap;
    }
    u->tmp[2 * *n] = b;
    u->tmp[2 * *n + 1] = e;
    (*n)++;
    return 1;
}

static int cmp_iv(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Tokens in both sorted interval lists. */
static uint64_t overlap(const int64_t *a, int na, const int64_t *b, int nb) {
    uint64_t t = 0;
    int i = 0, j = 0;
    while (i < na && j < nb) {
        int64_t lo = a[2 * i] > b[2 * j] ? a[2 * i] : b[2 * j];
        int64_t hi = a[2 * i + 1] < b[2 * j + 1] ? a[2 * i + 1] : b[2 * j + 1];
        if (hi > lo) t += (uint64_t)(hi - lo);
        if (a[2 * i + 1] < b[2 * j + 1]) i++;
        else j++;
    }
    return t;
}

void kvc_sel_usage_select(kvc_sel_usage *u, const kvc_stream *s, int n_units, const int32_t *chunk_idx,
                          const kvc_range *units) {
    int n = 0;
    uint64_t sel = 0;
    for (int k = 0; k < n_units; k++) {
        const kvc_chunk *c = s->chunks[chunk_idx[k]];
        kvc_range r = units[k];
        sel += (uint64_t)(r.end - r.begin);
        if (!c->pos) {
            if (!push(u, &n, c->pos0 + r.begin, c->pos0 + r.end)) return;
            continue;
        }
        for (int t = r.begin; t < r.end; t++)
            if (!push(u, &n, c->pos[t], c->pos[t] + 1)) return;
    }
    int sorted = 1; /* the driver's units come in (chunk, begin) order: in position order unless
                     * chunks hold permuted positions or are out of position order */
    for (int i = 1; i < n && sorted; i++) sorted = u->tmp[2 * i] >= u->tmp[2 * i - 2];
    if (!sorted) qsort(u->tmp, (size_t)n, 2 * sizeof(int64_t), cmp_iv);
    if (u->have_prev) { /* the first step of a sequence has nothing to reuse */
        u->selected += sel;
        u->reused += overlap(u->tmp, n, u->iv, u->n);
    }
    u->have_prev = 1;
    int64_t *t = u->iv; /* the new selection becomes the previous one */
    int tc = u->cap;
    u->iv = u->tmp;
    u->cap = u->tmp_cap;
    u->n = n;
    u->tmp = t;
    u->tmp_cap = tc;
}

void kvc_sel_usage_forget(kvc_sel_usage *u) {
    u->n = 0;
    u->have_prev = 0;
}

void kvc_sel_usage_free(kvc_sel_usage *u) {
    free(u->iv);
    free(u->tmp);
}
