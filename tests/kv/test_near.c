/* The near buffer (kv/near.h), on dense f16 chunks whose every row carries
 * its position in its first element (exact in f16 below 2048):
 *  - after every update the attended ranges hold exactly the selected
 *    tokens, each row equal to its source row, the ranges in row order and
 *    not overlapping; only the units the previous selection did not hold are
 *    copied; the end stays within twice the selection (plus slack), over a
 *    long run of drifting, shrinking and growing selections;
 *  - an empty selection and one that is all new (a rebuild) work;
 *  - rows are copied by kvc_near_fill over any cut of the ranges; a unit
 *    whose copy was not finished (the attention failed) is copied again;
 *  - ineligible chunks (f32 rows, a transform-free chunk with evicted tokens)
 *    and units out of position order are refused, not stored;
 *  - a stream drops its buffer when chunks are replaced or cleared. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "expect_close.h"

#include "kv/codec/dense.h"
#include "kv/near.h"
#include "kv/stream.h"

enum { DIM = 16, NCH = 3, CHUNK = 600 };

/* Chunk c holds positions c*CHUNK .. : row t = {pos, then values}. */
static kvc_chunk *make_chunk(int c, const kvc_codec_ops *ops) {
    float *x = malloc(sizeof(float) * CHUNK * DIM);
    for (int t = 0; t < CHUNK; t++) {
        x[t * DIM] = (float)(c * CHUNK + t);
        for (int j = 1; j < DIM; j++) x[t * DIM + j] = frand();
    }
    kvc_codec cd = {.ops = ops, .dim = DIM, .cfg = NULL};
    kvc_chunk *ch = NULL;
    assert_int_equal(kvc_chunk_encode(&cd, &cd, x, x, CHUNK, DIM, (int64_t)c * CHUNK, NULL, NULL, &ch), KVC_OK);
    free(x);
    return ch;
}

/* Units of 1..24 tokens tiling every chunk; a selection takes some of them. */
typedef struct tiling {
    kvc_near_unit u[NCH * CHUNK];
    int n;
} tiling;

static void tile_chunks(kvc_chunk **ch, tiling *t) {
    t->n = 0;
    for (int c = 0; c < NCH; c++)
        for (int b = 0; b < CHUNK;) {
            int len = 1 + (int)((frand() + 1.0f) * 12.0f);
            if (len > 24) len = 24;
            if (b + len > CHUNK) len = CHUNK - b;
            t->u[t->n++] = (kvc_near_unit){ch[c], {b, b + len}};
            b += len;
        }
}

/* The buffer's attended rows against the selection: every selected token
 * once, each row equal to its source. */
static void check_rows(const kvc_near *nb, const kvc_near_unit *sel, int n, const kvc_range *r, int nr) {
    const kvc_chunk *ch = kvc_near_chunk(nb);
    int total = 0, want = 0;
    for (int i = 0; i < n; i++) want += sel[i].r.end - sel[i].r.begin;
    unsigned char *seen = calloc(NCH * CHUNK, 1);
    float kr[DIM], vr[DIM], src[DIM];
    for (int i = 0; i < nr; i++) {
        assert_true(r[i].begin < r[i].end && r[i].end <= ch->n);
        if (i > 0) assert_true(r[i].begin > r[i - 1].end); /* in row order, adjacent ones merged */
        for (int t = r[i].begin; t < r[i].end; t++, total++) {
            ch->kc.ops->decode(&ch->kc, ch->kb, t, t + 1, kr, DIM);
            ch->vc.ops->decode(&ch->vc, ch->vb, t, t + 1, vr, DIM);
            int pos = (int)kr[0];
            assert_true(pos >= 0 && pos < NCH * CHUNK && !seen[pos]);
            seen[pos] = 1;
            const kvc_chunk *c = NULL; /* the unit selecting pos */
            for (int u = 0; u < n && !c; u++)
                if (pos >= sel[u].c->pos0 + sel[u].r.begin && pos < sel[u].c->pos0 + sel[u].r.end) c = sel[u].c;
            assert_non_null(c);
            int row = pos - (int)c->pos0;
            c->kc.ops->decode(&c->kc, c->kb, row, row + 1, src, DIM);
            assert_memory_equal(kr, src, sizeof kr);
            c->vc.ops->decode(&c->vc, c->vb, row, row + 1, src, DIM);
            assert_memory_equal(vr, src, sizeof vr);
        }
    }
    assert_int_equal(total, want);
    free(seen);
}

/* The attention's part: every range filled, in pieces of varying size cut
 * anywhere (a work item may end inside a unit), some prefetched first. */
static void fill_rows(kvc_near *nb, const kvc_range *r, int nr, int step) {
    for (int i = 0; i < nr; i++) {
        int cut = 1 + (step * 7 + i * 13) % 40;
        for (int b = r[i].begin; b < r[i].end; b += cut) {
            kvc_range piece = {b, b + cut < r[i].end ? b + cut : r[i].end};
            if (i % 2) kvc_near_prefetch(nb, piece);
            kvc_near_fill(nb, piece);
        }
    }
}

/* Tokens of sel not in prev (both in position order). */
static int64_t new_tokens(const kvc_near_unit *sel, int n, const kvc_near_unit *prev, int np) {
    int64_t t = 0;
    for (int i = 0, j = 0; i < n; i++) {
        int64_t p = sel[i].c->pos0 + sel[i].r.begin;
        while (j < np && prev[j].c->pos0 + prev[j].r.begin < p) j++;
        if (!(j < np && prev[j].c->pos0 + prev[j].r.begin == p)) t += sel[i].r.end - sel[i].r.begin;
    }
    return t;
}

static void test_near_follows_selection(void **state) {
    (void)state;
    kvc_codecs_init();
    rng = 7;
    kvc_chunk *ch[NCH];
    for (int c = 0; c < NCH; c++) ch[c] = make_chunk(c, &kvc_codec_f16);
    tiling *t = malloc(sizeof *t);
    tile_chunks(ch, t);
    unsigned char *in = calloc((size_t)t->n, 1);
    kvc_near_unit *sel = malloc(sizeof(kvc_near_unit) * t->n), *prev = malloc(sizeof(kvc_near_unit) * t->n);
    int np = 0;
    kvc_near *nb = NULL;
    for (int step = 0; step < 300; step++) {
        /* drift: each unit flips in or out with a small chance; every 50
         * steps the selection grows or shrinks a lot, or becomes all new */
        double p_flip = step % 50 == 25 ? 0.5 : 0.04, p_in = step % 100 < 50 ? 0.15 : 0.05;
        for (int i = 0; i < t->n; i++) {
            float x = (frand() + 1.0f) / 2.0f;
            if (x < p_flip) in[i] = (frand() + 1.0f) / 2.0f < p_in * 2;
        }
        if (step == 120) /* nothing selected */
            for (int i = 0; i < t->n; i++) in[i] = 0;
        int n = 0;
        int64_t need = 0;
        for (int i = 0; i < t->n; i++)
            if (in[i]) sel[n++] = t->u[i], need += t->u[i].r.end - t->u[i].r.begin;
        const kvc_range *r;
        int nr;
        int64_t copied;
        assert_int_equal(kvc_near_update(&nb, DIM, sel, n, &r, &nr, &copied), KVC_OK);
        fill_rows(nb, r, nr, step);
        check_rows(nb, sel, n, r, nr);
        /* a rebuild copies everything; otherwise exactly the new units */
        int64_t fresh = new_tokens(sel, n, prev, np);
        assert_true(copied == fresh || copied == need);
        assert_true(kvc_near_chunk(nb)->n <= 2 * need + 256);
        assert_true(kvc_near_bytes(nb) > 0);
        memcpy(prev, sel, sizeof(kvc_near_unit) * n);
        np = n;
    }
    kvc_near_free(nb);
    for (int c = 0; c < NCH; c++) kvc_chunk_free(ch[c]);
    free(t), free(in), free(sel), free(prev);
}

static void test_near_refuses(void **state) {
    (void)state;
    kvc_codecs_init();
    rng = 3;
    kvc_chunk *f32 = make_chunk(0, &kvc_codec_f32), *f16 = make_chunk(1, &kvc_codec_f16);
    assert_false(kvc_near_eligible(f32, DIM));
    assert_true(kvc_near_eligible(f16, DIM));
    assert_false(kvc_near_eligible(f16, DIM * 2));
    kvc_near *nb = NULL;
    const kvc_range *r;
    int nr;
    int64_t copied;
    kvc_near_unit bad = {f32, {0, 4}};
    assert_int_equal(kvc_near_update(&nb, DIM, &bad, 1, &r, &nr, &copied), KVC_ERR_INTERNAL);
    kvc_near_unit backwards[2] = {{f16, {10, 14}}, {f16, {2, 6}}};
    assert_int_equal(kvc_near_update(&nb, DIM, backwards, 2, &r, &nr, &copied), KVC_ERR_INTERNAL);
    kvc_near_unit good[2] = {{f16, {2, 6}}, {f16, {20, 30}}};
    assert_int_equal(kvc_near_update(&nb, DIM, good, 2, &r, &nr, &copied), KVC_OK);
    assert_int_equal(nr, 1);
    assert_int_equal(r[0].end - r[0].begin, 14);
    assert_int_equal(copied, 14);
    /* the attention filled only the first unit and part of the second
     * (it failed): the second is copied again next time */
    kvc_near_fill(nb, (kvc_range){r[0].begin, r[0].begin + 7});
    assert_int_equal(kvc_near_update(&nb, DIM, good, 2, &r, &nr, &copied), KVC_OK);
    assert_int_equal(copied, 10);
    kvc_near_fill(nb, r[0]);
    check_rows(nb, good, 2, r, nr);
    assert_int_equal(kvc_near_update(&nb, DIM, good, 2, &r, &nr, &copied), KVC_OK);
    assert_int_equal(copied, 0);
    assert_int_equal(kvc_chunk_kill(f16, 3), KVC_OK); /* evicted tokens: no longer eligible */
    assert_false(kvc_near_eligible(f16, DIM));
    kvc_near_free(nb);
    kvc_chunk_free(f32);
    kvc_chunk_free(f16);
}

/* A stream keeps its buffer while chunks are appended, drops it when they
 * are replaced or cleared (positions and rows may then change). */
static void test_stream_drops_near(void **state) {
    (void)state;
    kvc_codecs_init();
    rng = 5;
    kvc_stream *s = NULL;
    assert_int_equal(kvc_stream_create(0, 0, DIM, KVC_DENSE_F16, &s), KVC_OK);
    assert_int_equal(kvc_stream_insert(s, 0, make_chunk(0, &kvc_codec_f16)), KVC_OK);
    kvc_near_unit u = {s->chunks[0], {0, 8}};
    const kvc_range *r;
    int nr;
    int64_t copied;
    assert_int_equal(kvc_near_update(&s->near, DIM, &u, 1, &r, &nr, &copied), KVC_OK);
    assert_non_null(s->near);
    assert_int_equal(kvc_stream_insert(s, 1, make_chunk(1, &kvc_codec_f16)), KVC_OK); /* an append */
    assert_non_null(s->near);
    kvc_chunk *c2 = make_chunk(2, &kvc_codec_f16);
    assert_int_equal(kvc_stream_replace(s, 1, 1, &c2, 1), KVC_OK);
    assert_null(s->near);
    assert_int_equal(kvc_near_update(&s->near, DIM, &u, 1, &r, &nr, &copied), KVC_OK);
    assert_int_equal(kvc_stream_insert(s, 0, make_chunk(2, &kvc_codec_f16)), KVC_OK); /* not at the end */
    assert_null(s->near);
    assert_int_equal(kvc_near_update(&s->near, DIM, &u, 1, &r, &nr, &copied), KVC_OK);
    kvc_stream_clear(s);
    assert_null(s->near);
    kvc_stream_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_near_follows_selection),
        cmocka_unit_test(test_near_refuses),
        cmocka_unit_test(test_stream_drops_near),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
