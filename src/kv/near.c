/* The near buffer (near.h): the units held, in position order, each with the
 * row it starts at; per row the length of the unit that starts there (0 for
 * a hole's or a unit's inner rows), from which the attended ranges and the
 * copies to make are read off in row order; holes kept in buckets by length,
 * so that a new unit finds one of its own length or the next longer in a few
 * steps. */
#include "kv/near.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kv/codec/dense.h"

/* Hole buckets: exact lengths 1 .. NB-2, and NB-1 for all longer ones. */
enum { NB = 64 };
/* The end may pass the rows the selection needs by this factor (and
 * SLACK_ROWS) before the buffer is rebuilt in order. */
enum { END_FACTOR = 2, SLACK_ROWS = 256 };

typedef struct hole_list {
    int32_t *off, *len;
    int n, cap;
} hole_list;

typedef struct unit_list {
    int64_t *pos;
    int32_t *off, *len;
    int n, cap;
} unit_list;

/* A copy the attention makes (kvc_near_fill): rows [dst, dst + len) from
 * rows [from, from + len) of src; `unit` is its index in the held list. */
typedef struct near_copy {
    int32_t dst, len, from, unit;
    const kvc_chunk *src;
} near_copy;

struct kvc_near {
    int dim;
    kvc_chunk *ch;       /* the rows, K and V; ch->n: rows up to the end */
    unit_list held, next; /* the units held (by position), and the next step's being built */
    int32_t *start;      /* [cap_start]: length of the unit starting at the row, else 0 */
    int32_t *fresh_at;   /* [cap_start]: 1 + the next list's index of a unit to copy there, else 0 */
    int cap_start;
    hole_list holes[NB];
    kvc_range *ranges;
    int cap_ranges;
    near_copy *cp;       /* this step's copies, in row order */
    atomic_int *cp_done; /* rows of each copy filled so far */
    int n_cp, cap_cp;
};

static int grow_to(void **p, int *cap, int n, size_t es) {
    if (n <= *cap) return 1;
    int c = *cap ? *cap : 64;
    while (c < n) c *= 2;
    void *q = realloc(*p, (size_t)c * es);
    if (!q) return 0;
    *p = q;
    *cap = c;
    return 1;
}

static int unit_list_reserve(unit_list *l, int n) {
    int c = l->cap, ok = grow_to((void **)&l->pos, &c, n, sizeof *l->pos);
    c = l->cap, ok = ok && grow_to((void **)&l->off, &c, n, sizeof *l->off);
    c = l->cap, ok = ok && grow_to((void **)&l->len, &c, n, sizeof *l->len);
    if (ok) l->cap = c;
    return ok;
}

static int push_hole(kvc_near *nb, int32_t off, int32_t len) {
    hole_list *h = &nb->holes[len < NB - 1 ? len : NB - 1];
    int c = h->cap;
    if (!grow_to((void **)&h->off, &c, h->n + 1, sizeof *h->off)) return 0;
    c = h->cap;
    if (!grow_to((void **)&h->len, &c, h->n + 1, sizeof *h->len)) return 0;
    h->cap = c;
    h->off[h->n] = off, h->len[h->n] = len;
    h->n++;
    return 1;
}

/* A hole of len rows or longer (the rest stays a hole): its first row, or -1
 * (none, or no memory to keep the rest: the caller puts the unit at the end). */
static int32_t take_hole(kvc_near *nb, int32_t len) {
    for (int b = len < NB - 1 ? len : NB - 1; b < NB; b++) {
        hole_list *h = &nb->holes[b];
        for (int i = h->n - 1; i >= 0; i--) {
            if (h->len[i] < len) continue; /* only the last bucket mixes lengths */
            int32_t off = h->off[i], rest = h->len[i] - len;
            h->off[i] = h->off[h->n - 1], h->len[i] = h->len[h->n - 1];
            h->n--;
            if (rest > 0 && !push_hole(nb, off + len, rest)) {
                push_hole(nb, off, len + rest); /* the slot it just left: room is there */
                return -1;
            }
            return off;
        }
    }
    return -1;
}

static void clear_holes(kvc_near *nb) {
    for (int b = 0; b < NB; b++) nb->holes[b].n = 0;
}

static void clear_row_marks(kvc_near *nb) {
    if (!nb->cap_start) return;
    memset(nb->start, 0, (size_t)nb->cap_start * sizeof *nb->start);
    memset(nb->fresh_at, 0, (size_t)nb->cap_start * sizeof *nb->fresh_at);
}

int kvc_near_eligible(const kvc_chunk *c, int dim) {
    return c->kc.ops == &kvc_codec_f16 && c->vc.ops == &kvc_codec_f16 && c->kc.dim == dim && c->vc.dim == dim &&
           !c->xf && !c->dead && !c->pos;
}

static kvc_status near_create(int dim, kvc_near **out) {
    kvc_near *nb = calloc(1, sizeof *nb);
    if (!nb) return kvc_fail(KVC_ERR_NOMEM, "near buffer");
    nb->dim = dim;
    kvc_codec f16 = {.ops = &kvc_codec_f16, .dim = dim, .cfg = NULL};
    kvc_status st = kvc_chunk_encode(&f16, &f16, NULL, NULL, 0, dim, 0, NULL, NULL, &nb->ch);
    if (st != KVC_OK) {
        free(nb);
        return st;
    }
    *out = nb;
    return KVC_OK;
}

/* Sets the rows' end to `end` (growing the blobs and the per-row arrays). */
static kvc_status set_end(kvc_near *nb, int end) {
    void *rows;
    KVC_TRY(kvc_dense_set_count(&nb->ch->kc, nb->ch->kb, end, &rows));
    KVC_TRY(kvc_dense_set_count(&nb->ch->vc, nb->ch->vb, end, &rows));
    int old = nb->cap_start, cap = old;
    if (!grow_to((void **)&nb->start, &cap, end, sizeof *nb->start) ||
        !grow_to((void **)&nb->fresh_at, &nb->cap_start, end, sizeof *nb->fresh_at))
        return kvc_fail(KVC_ERR_NOMEM, "near buffer: %d rows", end);
    if (nb->cap_start > old) {
        memset(nb->start + old, 0, (size_t)(nb->cap_start - old) * sizeof *nb->start);
        memset(nb->fresh_at + old, 0, (size_t)(nb->cap_start - old) * sizeof *nb->fresh_at);
    }
    nb->ch->n = end;
    return KVC_OK;
}

/* Rows for every unit of `next` without one (off < 0): a hole, else the end.
 * Returns 0 when the end would pass `limit` (the caller rebuilds). */
static kvc_status place_new(kvc_near *nb, int limit, int *fits) {
    unit_list *l = &nb->next;
    *fits = 1;
    for (int i = 0; i < l->n; i++) {
        if (l->off[i] >= 0) continue;
        int32_t off = take_hole(nb, l->len[i]);
        if (off < 0) {
            off = nb->ch->n;
            if (off + l->len[i] > limit) {
                *fits = 0;
                return KVC_OK;
            }
            KVC_TRY(set_end(nb, off + l->len[i]));
        }
        l->off[i] = off;
        nb->start[off] = l->len[i];
    }
    return KVC_OK;
}

/* The units of next placed in this call (fresh[]) are to be copied: marked
 * at their first row, for read_ranges to list in row order. */
static void mark_copies(kvc_near *nb, const unsigned char *fresh, int64_t *copied) {
    for (int i = 0; i < nb->next.n; i++)
        if (fresh[i]) {
            nb->fresh_at[nb->next.off[i]] = i + 1;
            *copied += nb->next.len[i];
        }
}

/* The units of the previous step's copies that the attention did not fill
 * completely (it failed, or never ran) are stale: marked by a negative
 * length in the held list, so that match_held treats them as new. */
static void mark_stale(kvc_near *nb) {
    for (int k = 0; k < nb->n_cp; k++)
        if (atomic_load_explicit(&nb->cp_done[k], memory_order_relaxed) < nb->cp[k].len)
            nb->held.len[nb->cp[k].unit] = -nb->cp[k].len;
    nb->n_cp = 0;
}

static int add_copy(kvc_near *nb, int32_t row, const kvc_near_unit *u) {
    int i = nb->fresh_at[row] - 1;
    nb->fresh_at[row] = 0;
    int cap = nb->cap_cp;
    if (!grow_to((void **)&nb->cp, &cap, nb->n_cp + 1, sizeof *nb->cp)) return 0;
    if (cap > nb->cap_cp) {
        atomic_int *d = realloc(nb->cp_done, (size_t)cap * sizeof *d);
        if (!d) return 0;
        nb->cp_done = d;
        nb->cap_cp = cap;
    }
    nb->cp[nb->n_cp] = (near_copy){row, nb->next.len[i], u[i].r.begin, i, u[i].c};
    atomic_init(&nb->cp_done[nb->n_cp], 0);
    nb->n_cp++;
    return 1;
}

/* Unit j of the held list leaves: its rows become a hole (a stale unit's
 * length is negative, mark_stale). */
static int release_held(kvc_near *nb, int j) {
    const unit_list *h = &nb->held;
    nb->start[h->off[j]] = 0;
    return push_hole(nb, h->off[j], h->len[j] < 0 ? -h->len[j] : h->len[j]);
}

/* next := the units u, with the rows of those held already; the held units
 * not in u become holes. fresh[i]: unit i has no rows yet. */
static int match_held(kvc_near *nb, const kvc_near_unit *u, int n, unsigned char *fresh) {
    unit_list *h = &nb->held, *x = &nb->next;
    x->n = 0;
    int j = 0;
    for (int i = 0; i < n; i++) {
        int64_t pos = u[i].c->pos0 + u[i].r.begin;
        int32_t len = u[i].r.end - u[i].r.begin;
        for (; j < h->n && h->pos[j] < pos; j++) /* no longer selected */
            if (!release_held(nb, j)) return 0;
        int kept = j < h->n && h->pos[j] == pos && h->len[j] == len;
        x->pos[i] = pos, x->len[i] = len, x->off[i] = kept ? h->off[j] : -1;
        fresh[i] = !kept;
        if (j < h->n && h->pos[j] == pos) {
            if (!kept && !release_held(nb, j)) return 0;
            j++;
        }
    }
    for (; j < h->n; j++)
        if (!release_held(nb, j)) return 0;
    x->n = n;
    return 1;
}

/* Every unit of next placed afresh from row 0, in position order. */
static kvc_status rebuild(kvc_near *nb, int need, unsigned char *fresh) {
    clear_holes(nb);
    clear_row_marks(nb);
    KVC_TRY(set_end(nb, need));
    int32_t off = 0;
    for (int i = 0; i < nb->next.n; i++) {
        nb->next.off[i] = off;
        nb->start[off] = nb->next.len[i];
        fresh[i] = 1;
        off += nb->next.len[i];
    }
    return KVC_OK;
}

/* The rows in use as ranges in row order, adjacent ones merged, and the
 * copies marked (mark_copies) listed in the same order. */
static kvc_status read_ranges(kvc_near *nb, const kvc_near_unit *u, int *n_ranges) {
    int m = 0;
    for (int32_t i = 0; i < nb->ch->n;) {
        int32_t len = nb->start[i];
        if (!len) {
            i++;
            continue;
        }
        if (nb->fresh_at[i] && !add_copy(nb, i, u)) return kvc_fail(KVC_ERR_NOMEM, "near buffer copies");
        if (m > 0 && nb->ranges[m - 1].end == i) {
            nb->ranges[m - 1].end = i + len;
        } else {
            if (!grow_to((void **)&nb->ranges, &nb->cap_ranges, m + 1, sizeof *nb->ranges))
                return kvc_fail(KVC_ERR_NOMEM, "near buffer ranges");
            nb->ranges[m++] = (kvc_range){i, i + len};
        }
        i += len;
    }
    *n_ranges = m;
    return KVC_OK;
}

kvc_status kvc_near_update(kvc_near **pnb, int dim, const kvc_near_unit *u, int n, const kvc_range **ranges,
                           int *n_ranges, int64_t *copied) {
    *ranges = NULL;
    *n_ranges = 0;
    *copied = 0;
    if (!*pnb) KVC_TRY(near_create(dim, pnb));
    kvc_near *nb = *pnb;
    int64_t need = 0;
    for (int i = 0; i < n; i++) {
        KVC_CHECK(kvc_near_eligible(u[i].c, dim) && u[i].r.begin < u[i].r.end &&
                      (i == 0 || u[i].c->pos0 + u[i].r.begin >= u[i - 1].c->pos0 + u[i - 1].r.end),
                  KVC_ERR_INTERNAL, "near buffer: unit %d of %d not a dense f16 unit in position order", i, n);
        need += u[i].r.end - u[i].r.begin;
    }
    KVC_CHECK(need <= INT32_MAX / END_FACTOR - SLACK_ROWS, KVC_ERR_RANGE, "near buffer: %lld tokens",
              (long long)need);
    unsigned char *fresh = malloc((size_t)(n ? n : 1));
    if (!fresh || !unit_list_reserve(&nb->next, n)) {
        free(fresh);
        return kvc_fail(KVC_ERR_NOMEM, "near buffer: %d units", n);
    }
    kvc_status st = KVC_OK;
    int fits = 1;
    mark_stale(nb);
    if (!match_held(nb, u, n, fresh)) st = kvc_fail(KVC_ERR_NOMEM, "near buffer holes");
    int limit = (int)need * END_FACTOR + SLACK_ROWS;
    if (st == KVC_OK) st = place_new(nb, limit, &fits);
    if (st == KVC_OK && (!fits || nb->ch->n > limit)) /* or the selection shrank */
        st = rebuild(nb, (int)need, fresh);
    if (st == KVC_OK) {
        mark_copies(nb, fresh, copied);
        st = read_ranges(nb, u, n_ranges);
        unit_list t = nb->held;
        nb->held = nb->next, nb->next = t;
    }
    if (st != KVC_OK) { /* start again from an empty buffer next time */
        nb->held.n = 0;
        nb->n_cp = 0;
        clear_holes(nb);
        clear_row_marks(nb);
        nb->ch->n = 0;
        *n_ranges = 0;
        *copied = 0;
    }
    free(fresh);
    *ranges = nb->ranges;
    return st;
}

/* The first copy that ends after row `row` (copies are in row order). */
static int first_copy_after(const kvc_near *nb, int32_t row) {
    int lo = 0, hi = nb->n_cp;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (nb->cp[mid].dst + nb->cp[mid].len <= row) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

void kvc_near_fill(kvc_near *nb, kvc_range r) {
    size_t row = (size_t)nb->dim * 2;
    char *kd = (char *)kvc_dense_rows(nb->ch->kb), *vd = (char *)kvc_dense_rows(nb->ch->vb);
    for (int k = first_copy_after(nb, r.begin); k < nb->n_cp && nb->cp[k].dst < r.end; k++) {
        const near_copy *c = &nb->cp[k];
        int32_t b = c->dst > r.begin ? c->dst : r.begin, e = c->dst + c->len < r.end ? c->dst + c->len : r.end;
        size_t from = (size_t)(c->from + b - c->dst) * row, bytes = (size_t)(e - b) * row;
        memcpy(kd + (size_t)b * row, (const char *)kvc_dense_rows(c->src->kb) + from, bytes);
        memcpy(vd + (size_t)b * row, (const char *)kvc_dense_rows(c->src->vb) + from, bytes);
        atomic_fetch_add_explicit(&nb->cp_done[k], e - b, memory_order_relaxed);
    }
}

void kvc_near_prefetch(const kvc_near *nb, kvc_range r) {
    size_t row = (size_t)nb->dim * 2;
    for (int k = first_copy_after(nb, r.begin); k < nb->n_cp && nb->cp[k].dst < r.end; k++) {
        const near_copy *c = &nb->cp[k];
        int32_t b = c->dst > r.begin ? c->dst : r.begin, e = c->dst + c->len < r.end ? c->dst + c->len : r.end;
        size_t from = (size_t)(c->from + b - c->dst) * row, bytes = (size_t)(e - b) * row;
        const char *ks = (const char *)kvc_dense_rows(c->src->kb) + from,
                   *vs = (const char *)kvc_dense_rows(c->src->vb) + from;
        for (size_t x = 0; x < bytes; x += 64) __builtin_prefetch(ks + x, 0, 0), __builtin_prefetch(vs + x, 0, 0);
    }
}

const kvc_chunk *kvc_near_chunk(const kvc_near *nb) { return nb->ch; }

uint64_t kvc_near_bytes(const kvc_near *nb) {
    if (!nb) return 0;
    uint64_t p = 0, m = 0, x = 0;
    kvc_chunk_bytes(nb->ch, &p, &m, &x);
    uint64_t b = sizeof *nb + p + m + x + (uint64_t)nb->cap_start * 8 + (uint64_t)nb->cap_ranges * sizeof(kvc_range) +
                 (uint64_t)nb->cap_cp * (sizeof(near_copy) + sizeof(atomic_int)) +
                 (uint64_t)(nb->held.cap + nb->next.cap) * 16;
    for (int i = 0; i < NB; i++) b += (uint64_t)nb->holes[i].cap * 8;
    return b;
}

void kvc_near_free(kvc_near *nb) {
    if (!nb) return;
    kvc_chunk_free(nb->ch);
    free(nb->held.pos), free(nb->held.off), free(nb->held.len);
    free(nb->next.pos), free(nb->next.off), free(nb->next.len);
    free(nb->start);
    free(nb->fresh_at);
    free(nb->cp);
    free(nb->cp_done);
    for (int i = 0; i < NB; i++) free(nb->holes[i].off), free(nb->holes[i].len);
    free(nb->ranges);
    free(nb);
}
