/* The min/max bound index (select/minmax.h) and the quest method:
 *  - the bound of a unit is an upper bound of q·k for every key of the unit
 *    and every query head (random and adversarial keys: wide ranges, zeros,
 *    values that f16 cannot hold exactly, units of 1 token), and the unit's
 *    score (the split-query dot product) is the largest head bound, in the
 *    f16 and the q8 format; the q8 intervals contain the f16 ones and are at
 *    most one grid step wider (round trip);
 *  - quest keeps the current page hot, seals whole pages with one index entry
 *    each, counts the index bytes, and with budget = all (1 or a count above
 *    the context) its attention equals the plain reference over the cache;
 *  - with a small budget the attended pages are the best-scored ones.
 *    (Real keys of the model: tests/model/test_select_bounds.c.)
 *
 * Tolerance of the attention comparison: |Δ| <= 3e-5 * (1 + |ref|). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "expect_close.h"

#include "kv/attend.h"
#include "kv/cache_impl.h"
#include "kv/select/minmax.h"
#include "kv/synth.h"


/* Checks every token of every unit of x against its bounds: k [n][d]. The
 * score bounds each head's q·k when it is the largest head bound (with the
 * heads summed it bounds their sum: test_bound_random). */
static void check_bounds(const kvc_minmax *x, const float *k, int d, const float *q, int G) {
    float b[8];
    int nu = kvc_selector_minmax.n_units(x);
    float *sc = malloc(sizeof(float) * nu);
    kvc_selector_minmax.score(x, q, G, d, sc);
    for (int u = 0; u < nu; u++) {
        kvc_range r = kvc_selector_minmax.unit(x, u);
        kvc_minmax_bounds(x, u, q, G, d, b);
        for (int g = 0; g < G; g++) {
            for (int t = r.begin; t < r.end; t++) {
                double dot = 0, mag = 0;
                for (int i = 0; i < d; i++) {
                    dot += (double)q[g * d + i] * k[(size_t)t * d + i];
                    mag += fabs((double)q[g * d + i] * k[(size_t)t * d + i]);
                }
                if (!(dot <= b[g] + 1e-5 * (1.0 + mag)))
                    fail_msg("unit %d token %d head %d: q.k %g above the bound %g", u, t, g, dot, b[g]);
                if (!(kvc_minmax_flags(x) & KVC_MM_HEADS_SUM) && !(dot <= sc[u] + 1e-5 * (1.0 + mag)))
                    fail_msg("unit %d token %d head %d: q.k %g above the score %g", u, t, g, dot, sc[u]);
            }
        }
    }
    free(sc);
}

/* Keys of several kinds: uniform, wide-range, mostly zero, f16-inexact. */
static void make_keys(float *k, int n, int d, int kind) {
    for (int i = 0; i < n * d; i++) {
        float r = frand();
        switch (kind) {
        case 0: k[i] = r; break;
        case 1: k[i] = r * 3000.0f; break;
        case 2: k[i] = (i % 7) ? 0.0f : r; break;
        default: k[i] = 1.0f + r * 1e-4f; break; /* many values between two f16 */
        }
    }
}

static void test_bound_random(void **state) {
    (void)state;
    kvc_codecs_init();
    enum { D = 64, NT = 2000, G = 3 };
    float *k = malloc(sizeof(float) * NT * D), q[G * D];
    for (int fmt = 0; fmt <= KVC_MM_FLAGS; fmt++) /* f16, q8, each with the heads' max or sum */
    for (int kind = 0; kind < 4; kind++) {
        make_keys(k, NT, D, kind);
        kvc_minmax *x;
        assert_int_equal(kvc_minmax_create_fmt(D, fmt, &x), KVC_OK);
        int t = 0;
        while (t < NT) {
            int len = 1 + (int)((frand() + 1.0f) * 20.0f);
            if (len > NT - t) len = NT - t;
            assert_int_equal(kvc_minmax_add(x, k + (size_t)t * D, len, D), KVC_OK);
            t += len;
        }
        assert_int_equal(kvc_minmax_tokens(x), NT);
        for (int trial = 0; trial < 5; trial++) {
            for (int i = 0; i < G * D; i++) q[i] = frand() * (trial + 1);
            check_bounds(x, k, D, q, G);
            /* the score is the largest head bound, or with KVC_MM_HEADS_SUM their sum,
             * which bounds the sum of the heads' scores of every key of the unit */
            int nu = kvc_selector_minmax.n_units(x), summed = (fmt & KVC_MM_HEADS_SUM) != 0;
            float *sc = malloc(sizeof(float) * nu), b[G];
            kvc_selector_minmax.score(x, q, G, D, sc);
            for (int u = 0, t0 = 0; u < nu; u++) {
                kvc_minmax_bounds(x, u, q, G, D, b);
                float m = b[0] > b[1] ? b[0] : b[1];
                m = summed ? b[0] + b[1] + b[2] : m > b[2] ? m : b[2];
                /* the same bound summed in another order (split query, f16 dot kernel) */
                if (!(fabsf(sc[u] - m) <= 1e-5f * (1.0f + fabsf(m)) * D))
                    fail_msg("fmt %d, unit %d: score %g, %s of the head bounds %g", fmt, u, sc[u],
                             summed ? "sum" : "largest", m);
                kvc_range r = kvc_selector_minmax.unit(x, u);
                assert_int_equal(r.begin, t0);
                for (int tok = r.begin; summed && tok < r.end; tok++) {
                    double all = 0.0;
                    for (int g = 0; g < G; g++)
                        for (int i = 0; i < D; i++) all += (double)q[g * D + i] * k[(size_t)tok * D + i];
                    if (!(all <= sc[u] + 1e-4 * (1.0 + fabs(all)) * D))
                        fail_msg("fmt %d, unit %d, token %d: heads' scores sum to %g above the bound %g", fmt, u,
                                 tok, all, sc[u]);
                }
                t0 = r.end;
            }
            free(sc);
        }
        kvc_selector_minmax.free(x);
    }
    free(k);
}

/* score_range (the driver's pieces of a chunk) gives score's values bit for
 * bit for every range [u0, u1) with u0 on a 16-unit block and u1 on one or
 * at the end: f16 and q8 indexes, each with the heads' max or sum (q8:
 * ranges in the 8-bit blocks, across into the open f16 block, and inside
 * it), unit counts that are and are not multiples of 16, G = 1..8. */
static void test_score_range(void **state) {
    (void)state;
    kvc_codecs_init();
    enum { D = 64 };
    uint64_t saved = rng; /* the later tests see the random numbers they saw before this test */
    const int counts[] = {1, 15, 16, 17, 48, 77, 200};
    float *k = malloc(sizeof(float) * 200 * 3 * D), q[8 * D];
    for (int fmt = 0; fmt <= KVC_MM_FLAGS; fmt++)
        for (int ni = 0; ni < 7; ni++) {
            int nu = counts[ni];
            make_keys(k, 200 * 3, D, ni % 4);
            kvc_minmax *x;
            assert_int_equal(kvc_minmax_create_fmt(D, fmt, &x), KVC_OK);
            int t = 0;
            for (int u = 0; u < nu; u++) {
                int len = 1 + (u * 7) % 3;
                assert_int_equal(kvc_minmax_add(x, k + (size_t)t * D, len, D), KVC_OK);
                t += len;
            }
            for (int G = 1; G <= 8; G++) {
                for (int i = 0; i < G * D; i++) q[i] = frand();
                float *all = malloc(sizeof(float) * nu), *part = malloc(sizeof(float) * nu);
                kvc_selector_minmax.score(x, q, G, D, all);
                for (int u0 = 0; u0 < nu; u0 += KVC_SCORE_ALIGN)
                    for (int u1 = u0 + KVC_SCORE_ALIGN; ; u1 += KVC_SCORE_ALIGN) {
                        if (u1 > nu) u1 = nu;
                        memset(part, 0xff, sizeof(float) * nu);
                        kvc_selector_minmax.score_range(x, q, G, D, u0, u1, part);
                        if (memcmp(part, all + u0, sizeof(float) * (size_t)(u1 - u0)))
                            fail_msg("fmt %d, %d units, G %d: range [%d, %d) differs from score", fmt, nu, G, u0, u1);
                        for (int u = u1 - u0; u < nu; u++) /* nothing written past the range */
                            assert_int_equal(((uint32_t *)part)[u], 0xffffffffu);
                        if (u1 == nu) break;
                    }
                free(all), free(part);
            }
            kvc_selector_minmax.free(x);
        }
    free(k);
    rng = saved;
}

/* The q8 format (minmax_block.h) against the f16 one on the same units: every
 * stored interval contains the f16 interval (so every key element: outward
 * rounding held through the requantization), is at most one grid step wider
 * on each side (the step being the block's f16 range / 255), the last
 * unfilled block is the f16 one, and the q8 index takes 40/64 of the bytes of
 * full blocks. Units of 1..40 tokens, the four kinds of keys, ragged ends. */
static void test_q8_round_trip(void **state) {
    (void)state;
    kvc_codecs_init();
    enum { D = 64, NT = 3000 };
    float *k = malloc(sizeof(float) * NT * D);
    for (int kind = 0; kind < 4; kind++) {
        make_keys(k, NT, D, kind);
        kvc_minmax *f, *x;
        assert_int_equal(kvc_minmax_create(D, &f), KVC_OK);
        assert_int_equal(kvc_minmax_create_fmt(D, KVC_MM_Q8, &x), KVC_OK);
        assert_true(kvc_minmax_is_q8(x) && !kvc_minmax_is_q8(f));
        assert_int_equal(kvc_minmax_flags(x), KVC_MM_Q8);
        kvc_minmax *bad = NULL;
        assert_int_equal(kvc_minmax_create_fmt(D, KVC_MM_FLAGS + 1, &bad), KVC_ERR_ARG);
        assert_null(bad);
        int t = 0;
        while (t < NT) {
            int len = 1 + (int)((frand() + 1.0f) * 20.0f);
            if (len > NT - t) len = NT - t;
            assert_int_equal(kvc_minmax_add(f, k + (size_t)t * D, len, D), KVC_OK);
            assert_int_equal(kvc_minmax_add(x, k + (size_t)t * D, len, D), KVC_OK);
            t += len;
        }
        int nu = kvc_selector_minmax.n_units(x);
        assert_int_equal(nu, kvc_selector_minmax.n_units(f));
        assert_true(nu % 16 != 0); /* a ragged open block is covered */
        for (int u = 0; u < nu; u++) {
            kvc_range r = kvc_selector_minmax.unit(x, u);
            kvc_range rf = kvc_selector_minmax.unit(f, u);
            assert_int_equal(r.begin, rf.begin);
            assert_int_equal(r.end, rf.end);
            for (int c = 0; c < D; c++) {
                float qx, qn, fx, fn;
                kvc_minmax_unit_range(x, u, c, &qx, &qn);
                kvc_minmax_unit_range(f, u, c, &fx, &fn);
                for (int t2 = r.begin; t2 < r.end; t2++) {
                    float e = k[(size_t)t2 * D + c];
                    if (!(qn <= e && e <= qx)) fail_msg("kind %d unit %d ch %d: %g outside [%g, %g]", kind, u, c, e, qn, qx);
                }
                assert_true(qx >= fx && qn <= fn);
                if (u / 16 == nu / 16) { /* the open block stays f16 */
                    assert_true(qx == fx && qn == fn);
                    continue;
                }
                float hi = -INFINITY, lo = INFINITY; /* the block's f16 range */
                for (int v = u / 16 * 16; v < u / 16 * 16 + 16; v++) {
                    float a, b;
                    kvc_minmax_unit_range(f, v, c, &a, &b);
                    hi = a > hi ? a : hi;
                    lo = b < lo ? b : lo;
                }
                double step = ((double)hi - lo) / 255.0 * (1.0 + 1e-5) + 1e-30 + 1e-7 * fabs(lo);
                if (!(qx - fx <= step && fn - qn <= step))
                    fail_msg("kind %d unit %d ch %d: q8 [%g, %g] vs f16 [%g, %g], step %g", kind, u, c, qn, qx, fn, fx,
                             step);
            }
        }
        uint64_t bf = kvc_selector_minmax.bytes(f), bx = kvc_selector_minmax.bytes(x);
        uint64_t full = (uint64_t)(nu / 16) * 16 * D * 2 * 2, qfull = (uint64_t)(nu / 16) * 40 * D;
        assert_true(bx < bf);
        assert_true(bf - bx == full - qfull);
        kvc_selector_minmax.free(f);
        kvc_selector_minmax.free(x);
    }
    free(k);
}

static void test_bad_index_input(void **state) {
    (void)state;
    kvc_minmax *x;
    assert_int_equal(kvc_minmax_create(0, &x), KVC_ERR_ARG);
    assert_int_equal(kvc_minmax_create(2000, &x), KVC_ERR_ARG);
    assert_int_equal(kvc_minmax_create(4, &x), KVC_OK);
    float k[4] = {0};
    assert_int_equal(kvc_minmax_add(x, k, 0, 4), KVC_ERR_ARG);
    kvc_selector_minmax.free(x);
    assert_int_equal(kvc_method_validate("quest:page=16,block=100"), KVC_ERR_ARG);
    assert_int_equal(kvc_method_validate("quest:budget=-1"), KVC_ERR_ARG);
    assert_int_equal(kvc_method_validate("quest:0.1,page=32,dense=0"), KVC_OK);
}

enum { NL = 3, NH = 6, NKV = 2, GQ = 3, HD = 64, NTOK = 1500, NPRE = 1100 };

static void make_q(float *q, const float *k, int t) { /* a key of the past, perturbed: peaked scores */
    for (int h = 0; h < NKV; h++)
        for (int g = 0; g < GQ; g++)
            for (int i = 0; i < HD; i++)
                q[(h * GQ + g) * HD + i] = k[((size_t)t * NKV + h) * HD + i] * (1.0f + 0.25f * frand());
}

/* Prefill NPRE tokens in chunks of 275, decode the rest; at some steps compare
 * with the reference (budget all) or check the page layout. */
static void run(const char *spec, int all) {
    kvc_codecs_init();
    kvc_cache_shape shape = {.n_layers = NL, .n_heads = NH, .n_kv_heads = NKV, .head_dim = HD, .max_tokens = NTOK};
    kvc_cache *c;
    assert_int_equal(kvc_cache_create(&shape, spec, NULL, &c), KVC_OK);
    size_t row = (size_t)NKV * HD;
    float *k = malloc(sizeof(float) * NTOK * row), *v = malloc(sizeof(float) * NTOK * row);
    float *q = malloc(sizeof(float) * 275 * NH * HD), *out = malloc(sizeof(float) * 275 * NH * HD);
    float ref[GQ * HD];
    kvc_synth_kv(NKV, HD, 0, NTOK, 5, k, v);
    for (int l = 0; l < NL; l++)
        for (int t0 = 0; t0 < NPRE; t0 += 275) {
            for (int i = 0; i < 275; i++) make_q(q + (size_t)i * NH * HD, k, t0 + i);
            assert_int_equal(kvc_cache_prefill(c, l, 275, q, k + t0 * row, v + t0 * row, out), KVC_OK);
        }
    for (int t = NPRE; t < NTOK; t++)
        for (int l = 0; l < NL; l++) {
            assert_int_equal(kvc_cache_append(c, l, k + t * row, v + t * row), KVC_OK);
            make_q(q, k, (t * 7919) % t);
            assert_int_equal(kvc_cache_attend(c, l, q, out), KVC_OK);
            for (int h = 0; h < NKV; h++) {
                kvc_stream *s = kvc_cache_stream(c, l, h);
                /* selected layers keep the current page hot (1..16 tokens); dense ones seal all */
                if (l >= 2) assert_true(s->hot->n >= 1 && s->hot->n <= 16);
                else assert_int_equal(s->hot->n, 0);
                if (all && t % 37 == 0) {
                    assert_int_equal(kvc_attend_reference(s, q + h * GQ * HD, GQ, ref), KVC_OK);
                    expect_close(out + h * GQ * HD, ref, GQ * HD, 3e-5, spec);
                }
            }
        }
    /* pages: every sealed chunk of a selected layer is whole pages with one
     * index entry per page; the index bytes are in the stats */
    uint64_t pages = 0;
    for (int l = 2; l < NL; l++)
        for (int h = 0; h < NKV; h++) {
            kvc_stream *s = kvc_cache_stream(c, l, h);
            for (int ci = 0; ci < s->n_chunks; ci++) {
                const kvc_chunk *ch = s->chunks[ci];
                assert_ptr_equal(ch->sel.ops, &kvc_selector_minmax);
                assert_int_equal(ch->n % 16, 0);
                assert_int_equal(kvc_minmax_tokens(ch->sel.index), ch->n);
                pages += (uint64_t)ch->n / 16;
            }
        }
    kvc_cache_stats st;
    kvc_cache_stats_get(c, &st);
    assert_true(st.index_bytes >= pages * 2 * HD * 2);
    kvc_cache_free(c);
    free(k), free(v), free(q), free(out);
}

static void test_quest_all_is_full(void **state) {
    (void)state;
    run("quest:budget=1", 1);
    run("quest:budget=100000,block=64", 1);
}

static void test_quest_budget(void **state) {
    (void)state;
    run("quest:budget=0.1", 0);
    run("quest:budget=200,block=32", 0);
}

/* With a small budget, the pages attended are the top-scored ones: the output
 * equals attention over those pages plus the hot window, computed from the
 * decoded keys in double precision. */
static void test_quest_attends_top_pages(void **state) {
    (void)state;
    kvc_codecs_init();
    kvc_cache_shape shape = {.n_layers = 1, .n_heads = NH, .n_kv_heads = NKV, .head_dim = HD, .max_tokens = NTOK};
    kvc_cache *c;
    assert_int_equal(kvc_cache_create(&shape, "quest:budget=0.05,dense=0", NULL, &c), KVC_OK);
    size_t row = (size_t)NKV * HD;
    float *k = malloc(sizeof(float) * NTOK * row), *v = malloc(sizeof(float) * NTOK * row);
    float q[NH * HD], out[NH * HD];
    kvc_synth_kv(NKV, HD, 0, NTOK, 9, k, v);
    assert_int_equal(kvc_cache_load(c, 0, 1203, k, v), KVC_OK);
    make_q(q, k, 500);
    assert_int_equal(kvc_cache_attend(c, 0, q, out), KVC_OK);
    float scale = 1.0f / sqrtf((float)HD);
    for (int h = 0; h < NKV; h++) {
        kvc_stream *s = kvc_cache_stream(c, 0, h);
        assert_int_equal(s->n_chunks, 1);
        const kvc_chunk *ch = s->chunks[0];
        int nu = kvc_selector_minmax.n_units(ch->sel.index);
        float qs[GQ * HD], *sc = malloc(sizeof(float) * nu);
        for (int i = 0; i < GQ * HD; i++) qs[i] = q[h * GQ * HD + i] * scale;
        kvc_selector_minmax.score(ch->sel.index, qs, GQ, HD, sc);
        int64_t budget = (int64_t)ceil(0.05 * 1203) - s->hot->n;
        int take = (int)(budget / 16);
        uint8_t *pick = calloc((size_t)nu, 1);
        for (int j = 0; j < take; j++) { /* best remaining, earlier first on ties */
            int b = -1;
            for (int u = 0; u < nu; u++)
                if (!pick[u] && (b < 0 || sc[u] > sc[b])) b = u;
            pick[b] = 1;
        }
        /* reference over the picked pages and the hot window */
        float *kd = malloc(sizeof(float) * 1203 * HD), *vd = malloc(sizeof(float) * 1203 * HD);
        int n = 0;
        for (int u = 0; u < nu; u++)
            if (pick[u]) {
                assert_int_equal(kvc_chunk_decode(ch, u * 16, u * 16 + 16, kd + n * HD, vd + n * HD, HD), KVC_OK);
                n += 16;
            }
        assert_int_equal(kvc_chunk_decode(s->hot, 0, s->hot->n, kd + n * HD, vd + n * HD, HD), KVC_OK);
        n += s->hot->n;
        for (int g = 0; g < GQ; g++) {
            double m = -INFINITY, l = 0, o[HD] = {0}, *p = malloc(sizeof(double) * n);
            for (int t = 0; t < n; t++) {
                double dot = 0;
                for (int i = 0; i < HD; i++) dot += (double)qs[g * HD + i] * kd[t * HD + i];
                p[t] = dot;
                if (dot > m) m = dot;
            }
            for (int t = 0; t < n; t++) {
                double e = exp(p[t] - m);
                l += e;
                for (int i = 0; i < HD; i++) o[i] += e * vd[t * HD + i];
            }
            float want[HD];
            for (int i = 0; i < HD; i++) want[i] = (float)(o[i] / l);
            expect_close(out + (h * GQ + g) * HD, want, HD, 3e-5, "top pages");
            free(p);
        }
        free(kd), free(vd), free(pick), free(sc);
    }
    kvc_cache_free(c);
    free(k), free(v);
}

int main(void) {
    rng = 777;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bound_random),
        cmocka_unit_test(test_q8_round_trip),
        cmocka_unit_test(test_score_range),
        cmocka_unit_test(test_bad_index_input),
        cmocka_unit_test(test_quest_all_is_full),
        cmocka_unit_test(test_quest_budget),
        cmocka_unit_test(test_quest_attends_top_pages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
