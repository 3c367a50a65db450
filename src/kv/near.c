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

typedef struct hole {
    int32_t off, len;
} hole;

typedef struct hole_list {
    hole *h;
    int n, cap;
} hole_list;

/* A unit held (or to be held): its first position, first row (-1: none
 * yet) and length; `fresh` while its rows are still to be copied. A unit
 * whose copy was not finished has a negative length (mark_stale). */
typedef struct held_unit {
    int64_t pos;
    int32_t off, len;
    unsigned char fresh;
} held_unit;

typedef struct unit_list {
    held_unit *u;
    int n, cap;
} unit_list;

/* Per row: the length of the unit starting there (else 0), and 1 + the next
 * list's index of the unit to copy there (else 0). */
typedef struct row_mark {
    int32_t len, copy;
} row_mark;

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
    row_mark *mark;      /* [cap_mark] */
    int cap_mark;
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

static int push_hole(kvc_near *nb, int32_t off, int32_t len) {
    hole_list *h = &nb->holes[len < NB - 1 ? len : NB - 1];
    if (!grow_to((void **)&h->h, &h->cap, h->n + 1, sizeof *h->h)) return 0;
    h->h[h->n++] = (hole){off, len};
    return 1;
}

/* A hole of len rows or longer (the rest stays a hole): its first row, or -1
 * (none, or no memory to keep the rest: the caller puts the unit at the end). */
static int32_t take_hole(kvc_near *nb, int32_t len) {
    for (int b = len < NB - 1 ? len : NB - 1; b < NB; b++) {
        hole_list *h = &nb->holes[b];
        for (int i = h->n - 1; i >= 0; i--) {
            if (h->h[i].len < len) continue; /* only the last bucket mixes lengths */
            int32_t off = h->h[i].off, rest = h->h[i].len - len;
            h->h[i] = h->h[--h->n];
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
    if (nb->cap_mark) memset(nb->mark, 0, (size_t)nb->cap_mark * sizeof *nb->mark);
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

/* Sets the rows' end to `end` (growing the blobs and the row marks). */
static kvc_status set_end(kvc_near *nb, int end) {
    KVC_TRY(kvc_dense_set_count(&nb->ch->kc, nb->ch->kb, end));
    KVC_TRY(kvc_dense_set_count(&nb->ch->vc, nb->ch->vb, end));
    int old = nb->cap_mark;
    if (!grow_to((void **)&nb->mark, &nb->cap_mark, end, sizeof *nb->mark))
        return kvc_fail(KVC_ERR_NOMEM, "near buffer: %d rows", end);
    memset(nb->mark + old, 0, (size_t)(nb->cap_mark - old) * sizeof *nb->mark);
    nb->ch->n = end;
    return KVC_OK;
}

/* Rows for every unit of `next` without one (off < 0): a hole, else the end.
 * Returns 0 when the end would pass `limit` (the caller rebuilds). */
static kvc_status place_new(kvc_near *nb, int limit, int *fits) {
    *fits = 1;
    for (int i = 0; i < nb->next.n; i++) {
        held_unit *x = &nb->next.u[i];
        if (x->off >= 0) continue;
        int32_t off = take_hole(nb, x->len);
        if (off < 0) {
            off = nb->ch->n;
            if (off + x->len > limit) {
                *fits = 0;
                return KVC_OK;
            }
            KVC_TRY(set_end(nb, off + x->len));
        }
        x->off = off;
        nb->mark[off].len = x->len;
    }
    return KVC_OK;
}

/* The fresh units of next are to be copied: marked at their first row, for
 * read_ranges to list in row order. */
static void mark_copies(kvc_near *nb, int64_t *copied) {
    for (int i = 0; i < nb->next.n; i++)
        if (nb->next.u[i].fresh) {
            nb->mark[nb->next.u[i].off].copy = i + 1;
            *copied += nb->next.u[i].len;
        }
}

/* The units of the previous step's copies that the attention did not fill
 * completely (it failed, or never ran) are stale: marked by a negative
 * length in the held list, so that match_held treats them as new. */
static void mark_stale(kvc_near *nb) {
    for (int k = 0; k < nb->n_cp; k++)
        if (atomic_load_explicit(&nb->cp_done[k], memory_order_relaxed) < nb->cp[k].len)
            nb->held.u[nb->cp[k].unit].len = -nb->cp[k].len;
    nb->n_cp = 0;
}

static int add_copy(kvc_near *nb, int32_t row, const kvc_near_unit *u) {
    int i = nb->mark[row].copy - 1;
    nb->mark[row].copy = 0;
    int cap = nb->cap_cp;
    if (!grow_to((void **)&nb->cp, &cap, nb->n_cp + 1, sizeof *nb->cp)) return 0;
    if (cap > nb->cap_cp) {
        atomic_int *d = realloc(nb->cp_done, (size_t)cap * sizeof *d);
        if (!d) return 0;
        nb->cp_done = d;
        nb->cap_cp = cap;
    }
    nb->cp[nb->n_cp] = (near_copy){row, nb->next.u[i].len, u[i].r.begin, i, u[i].c};
    atomic_init(&nb->cp_done[nb->n_cp], 0);
    nb->n_cp++;
    return 1;
}

/* Unit j of the held list leaves: its rows become a hole (a stale unit's
 * length is negative, mark_stale). */
static int release_held(kvc_near *nb, const held_unit *h) {
    nb->mark[h->off].len = 0;
    return push_hole(nb, h->off, h->len < 0 ? -h->len : h->len);
}

/* next := the units u, with the rows of those held already (the others
 * fresh, without rows); the held units not in u become holes. */
static int match_held(kvc_near *nb, const kvc_near_unit *u, int n) {
    const unit_list *h = &nb->held;
    int j = 0;
    for (int i = 0; i < n; i++) {
        int64_t pos = u[i].c->pos0 + u[i].r.begin;
        int32_t len = u[i].r.end - u[i].r.begin;
        for (; j < h->n && h->u[j].pos < pos; j++) /* no longer selected */
            if (!release_held(nb, &h->u[j])) return 0;
        int kept = j < h->n && h->u[j].pos == pos && h->u[j].len == len;
        nb->next.u[i] = (held_unit){pos, kept ? h->u[j].off : -1, len, !kept};
        if (j < h->n && h->u[j].pos == pos) {
            if (!kept && !release_held(nb, &h->u[j])) return 0;
            j++;
        }
    }
    for (; j < h->n; j++)
        if (!release_held(nb, &h->u[j])) return 0;
    nb->next.n = n;
    return 1;
}

/* Every unit of next placed afresh from row 0, in position order. */
static kvc_status rebuild(kvc_near *nb, int need) {
    clear_holes(nb);
    clear_row_marks(nb);
    KVC_TRY(set_end(nb, need));
    int32_t off = 0;
    for (int i = 0; i < nb->next.n; i++) {
        held_unit *x = &nb->next.u[i];
        x->off = off, x->fresh = 1;
        nb->mark[off].len = x->len;
        off += x->len;
    }
    return KVC_OK;
}

/* The rows in use as ranges in row order, adjacent ones merged, and the
 * copies marked (mark_copies) listed in the same order. */
static kvc_status read_ranges(kvc_near *nb, const kvc_near_unit *u, int *n_ranges) {
    int m = 0;
    for (int32_t i = 0; i < nb->ch->n;) {
        int32_t len = nb->mark[i].len;
        if (!len) {
            i++;
            continue;
        }
        if (nb->mark[i].copy && !add_copy(nb, i, u)) return kvc_fail(KVC_ERR_NOMEM, "near buffer copies");
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
    if (!grow_to((void **)&nb->next.u, &nb->next.cap, n, sizeof *nb->next.u))
        return kvc_fail(KVC_ERR_NOMEM, "near buffer: %d units", n);
    kvc_status st = KVC_OK;
    int fits = 1;
    mark_stale(nb);
    if (!match_held(nb, u, n)) st = kvc_fail(KVC_ERR_NOMEM, "near buffer holes");
    int limit = (int)need * END_FACTOR + SLACK_ROWS;
    if (st == KVC_OK) st = place_new(nb, limit, &fits);
    if (st == KVC_OK && (!fits || nb->ch->n > limit)) /* or the selection shrank */
        st = rebuild(nb, (int)need);
    if (st == KVC_OK) {
        mark_copies(nb, copied);
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

/* The part of copy c inside rows r: destination rows [*b, *e), and its
 * source rows' K and V. */
static void clip_copy(const kvc_near *nb, const near_copy *c, kvc_range r, int32_t *b, int32_t *e,
                      const char **ks, const char **vs) {
    *b = c->dst > r.begin ? c->dst : r.begin;
    *e = c->dst + c->len < r.end ? c->dst + c->len : r.end;
    size_t from = (size_t)(c->from + *b - c->dst) * (size_t)nb->dim * 2;
    *ks = (const char *)kvc_dense_rows(c->src->kb) + from;
    *vs = (const char *)kvc_dense_rows(c->src->vb) + from;
}

void kvc_near_fill(kvc_near *nb, kvc_range r) {
    size_t row = (size_t)nb->dim * 2;
    char *kd = (char *)kvc_dense_rows(nb->ch->kb), *vd = (char *)kvc_dense_rows(nb->ch->vb);
    for (int k = first_copy_after(nb, r.begin); k < nb->n_cp && nb->cp[k].dst < r.end; k++) {
        int32_t b, e;
        const char *ks, *vs;
        clip_copy(nb, &nb->cp[k], r, &b, &e, &ks, &vs);
        memcpy(kd + (size_t)b * row, ks, (size_t)(e - b) * row);
        memcpy(vd + (size_t)b * row, vs, (size_t)(e - b) * row);
        atomic_fetch_add_explicit(&nb->cp_done[k], e - b, memory_order_relaxed);
    }
}

void kvc_near_prefetch(const kvc_near *nb, kvc_range r) {
    size_t row = (size_t)nb->dim * 2;
    for (int k = first_copy_after(nb, r.begin); k < nb->n_cp && nb->cp[k].dst < r.end; k++) {
        int32_t b, e;
        const char *ks, *vs;
        clip_copy(nb, &nb->cp[k], r, &b, &e, &ks, &vs);
        for (size_t x = 0; x < (size_t)(e - b) * row; x += 64) __builtin_prefetch(ks + x, 0, 0), __builtin_prefetch(vs + x, 0, 0);
    }
}

const kvc_chunk *kvc_near_chunk(const kvc_near *nb) { return nb->ch; }

uint64_t kvc_near_bytes(const kvc_near *nb) {
    if (!nb) return 0;
    uint64_t p = 0, m = 0, x = 0;
    kvc_chunk_bytes(nb->ch, &p, &m, &x);
    uint64_t b = sizeof *nb + p + m + x + (uint64_t)nb->cap_mark * sizeof(row_mark) +
                 (uint64_t)nb->cap_ranges * sizeof(kvc_range) +
                 (uint64_t)nb->cap_cp * (sizeof(near_copy) + sizeof(atomic_int)) +
                 (uint64_t)(nb->held.cap + nb->next.cap) * sizeof(held_unit);
    for (int i = 0; i < NB; i++) b += (uint64_t)nb->holes[i].cap * sizeof(hole);
    return b;
}

void kvc_near_free(kvc_near *nb) {
    if (!nb) return;
    kvc_chunk_free(nb->ch);
    free(nb->held.u);
    free(nb->next.u);
    free(nb->mark);
    free(nb->cp);
    free(nb->cp_done);
    for (int i = 0; i < NB; i++) free(nb->holes[i].h);
    free(nb->ranges);
    free(nb);
}
