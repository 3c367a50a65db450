/* The mosaic method through the cache (MosaicKV §4-§5): prompt segments of
 * `segment` tokens and the prompt's tail each get their own rotation; decode
 * segments close at `maxseg`; every final chunk stores K and V packed in its
 * segment's truncated rotated space with a block index; decode attention with
 * every token selected equals a double-precision reference over the decoded
 * two-D-compressed cache, and with stage-2 selection it equals the reference
 * over exactly the selected blocks plus the always-attended tokens; the
 * ablation switches run the same checks; bytes count rotations, bitmaps,
 * block keys and the open-segment buffers; bad specs are refused.
 *
 * Tolerance of the attention comparisons: 1e-4 relative (f32 rotations of the
 * query and output and f32 accumulation against double over restored rows). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "kv/attend.h"
#include "kv/cache_impl.h"
#include "kv/synth.h"

static uint64_t rng = 4242;
static float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static void expect_close(const float *a, const float *ref, int n, const char *what) {
    for (int i = 0; i < n; i++) {
        double e = fabs((double)a[i] - ref[i]) / (1.0 + fabs(ref[i]));
        if (!(e <= 1e-4)) fail_msg("%s: element %d: %g vs %g (err %g)", what, i, a[i], ref[i], e);
    }
}

/* Selected units of one attend call (on_select). */
typedef struct picked {
    int n;
    int32_t ci[8192];
    kvc_range r[8192];
} picked;

static void on_select(void *ctx, int req, int n, const int32_t *ci, const kvc_range *u) {
    picked *p = ctx;
    assert_true(n <= 8192);
    p->n = n;
    memcpy(p->ci, ci, sizeof *ci * n);
    memcpy(p->r, u, sizeof *u * n);
}

/* Reference attention over the decoded cache restricted to the selected
 * units of selectable chunks, everything of the others and the hot window. */
static void reference_selected(kvc_stream *s, const picked *p, const float *q, int G, float *out) {
    int d = s->dim;
    int64_t total = s->hot->n;
    for (int ci = 0; ci < s->n_chunks; ci++) total += s->chunks[ci]->n;
    float *k = malloc(sizeof(float) * total * d), *v = malloc(sizeof(float) * total * d);
    int64_t n = 0;
    for (int ci = -1; ci < s->n_chunks; ci++) {
        kvc_chunk *c = ci < 0 ? s->hot : s->chunks[ci];
        for (int t = 0; t < c->n; t++) {
            int use = ci < 0 || !c->sel.ops;
            for (int i = 0; i < p->n && !use; i++) use = p->ci[i] == ci && t >= p->r[i].begin && t < p->r[i].end;
            if (!use) continue;
            assert_int_equal(kvc_chunk_decode(c, t, t + 1, k + n * d, v + n * d, d), KVC_OK);
            n++;
        }
    }
    for (int g = 0; g < G; g++) {
        double m = -INFINITY, l = 0, o[256] = {0};
        double *sc = malloc(sizeof(double) * (n ? n : 1));
        for (int64_t t = 0; t < n; t++) {
            double a = 0;
            for (int c = 0; c < d; c++) a += (double)q[g * d + c] * k[t * d + c];
            sc[t] = a / sqrt((double)d);
            if (sc[t] > m) m = sc[t];
        }
        for (int64_t t = 0; t < n; t++) {
            double e = exp(sc[t] - m);
            l += e;
            for (int c = 0; c < d; c++) o[c] += e * v[t * d + c];
        }
        for (int c = 0; c < d; c++) out[g * d + c] = (float)(o[c] / l);
        free(sc);
    }
    free(k), free(v);
}

/* Prompt of n_prompt tokens in one batch, then n_dec decode tokens; checks
 * attention against the references along the way. */
static kvc_cache *run_case(const char *spec, int d, int n_prompt, int n_dec, double frac) {
    int nh = 6, nkv = 2, G = 3, n = n_prompt + n_dec;
    kvc_cache_shape shape = {.n_layers = 1, .n_heads = nh, .n_kv_heads = nkv, .head_dim = d, .max_tokens = n + 1};
    kvc_cache *c;
    assert_int_equal(kvc_cache_create(&shape, spec, NULL, &c), KVC_OK);
    float *k = malloc(sizeof(float) * (size_t)n * nkv * d), *v = malloc(sizeof(float) * (size_t)n * nkv * d);
    kvc_synth_kv(nkv, d, 0, n, 11, k, v);
    assert_int_equal(kvc_cache_append_n(c, 0, n_prompt, k, v, NULL), KVC_OK);
    float *q = malloc(sizeof(float) * nh * d), *out = malloc(sizeof(float) * nh * d), *ref = malloc(sizeof(float) * G * d);
    picked *pk = malloc(sizeof *pk);
    for (int t = n_prompt; t < n; t++) {
        assert_int_equal(kvc_cache_append(c, 0, k + (size_t)t * nkv * d, v + (size_t)t * nkv * d), KVC_OK);
        if ((t - n_prompt) % 29 != 0 && t != n - 1) continue;
        for (int i = 0; i < nh * d; i++) q[i] = frand() * 2.0f;
        for (int h = 0; h < nkv; h++) {
            kvc_stream *s = kvc_cache_stream(c, 0, h);
            int64_t selectable = 0;
            for (int ci = 0; ci < s->n_chunks; ci++)
                if (s->chunks[ci]->sel.ops) selectable += s->chunks[ci]->n;
            kvc_attend_req rq = {.s = s, .q = q + (size_t)h * G * d, .out = out,
                                 .plan = {.budget = frac >= 1 ? -1 : llround(frac * selectable)}};
            kvc_attend_opts o = {.G = G, .split = 1 + t % 3, .on_select = on_select, .cb_ctx = pk};
            pk->n = 0;
            assert_int_equal(kvc_attend(&rq, 1, &o, NULL, c->ws), KVC_OK);
            if (frac >= 1) assert_int_equal(kvc_attend_reference(s, q + (size_t)h * G * d, G, ref), KVC_OK);
            else reference_selected(s, pk, q + (size_t)h * G * d, G, ref);
            expect_close(out, ref, G * d, spec);
        }
        /* the cache's own attend runs the method's selection */
        assert_int_equal(kvc_cache_attend(c, 0, q, out), KVC_OK);
    }
    free(k), free(v), free(q), free(out), free(ref), free(pk);
    return c;
}

static void test_segments_and_format(void **state) {
    (void)state;
    int d = 64;
    /* 2 prompt segments of 256 + a tail of 100, then decode segments of 64 */
    kvc_cache *c = run_case("mosaic:segment=256,maxseg=64,segloss=1e9,tokens=1,async=0", d, 612, 200, 1.0);
    for (int h = 0; h < 2; h++) {
        kvc_stream *s = kvc_cache_stream(c, 0, h);
        /* prompt segments 256, 256 and the tail: 100 tokens less the 612 % 32
         * still in the update buffer, closed by the first decode token */
        assert_true(s->n_chunks >= 4);
        assert_int_equal(s->chunks[0]->n, 256);
        assert_int_equal(s->chunks[1]->n, 256);
        assert_int_equal(s->chunks[2]->n, 96);
        assert_true(s->chunks[0]->xf != s->chunks[1]->xf && s->chunks[1]->xf != s->chunks[2]->xf);
        int64_t pos = 0;
        for (int ci = 0; ci < s->n_chunks; ci++) {
            kvc_chunk *ch = s->chunks[ci];
            assert_true(ch->pos0 == pos);
            pos += ch->n;
            assert_non_null(ch->xf);
            assert_non_null(ch->sel.ops);
            /* trunc 0.25 of 64: 48 stored channels */
            assert_int_equal(ch->xf->dim_k, 48);
            assert_int_equal(ch->kc.dim, 48);
            assert_string_equal(ch->kc.ops->name, "packed_f16");
            if (ci >= 3 && ci < s->n_chunks - 1) assert_int_equal(ch->n, 64); /* closed decode segments */
        }
        assert_int_equal(pos + s->hot->n, 812);
        assert_true(s->hot->n < 32);
    }
    kvc_cache_stats st;
    kvc_cache_stats_get(c, &st);
    assert_true(st.meta_bytes > (uint64_t)3 * 2 * 64 * 48 * 4); /* at least three rotations counted */
    assert_true(st.index_bytes > 0);
    kvc_cache_free(c);
}

static void test_attention_equals_reference(void **state) {
    (void)state;
    kvc_cache_free(run_case("mosaic:segment=300,tokens=1", 64, 700, 90, 1.0));
    kvc_cache_free(run_case("mosaic:segment=256,maxseg=128,tokens=1,group=2,block=4", 128, 400, 160, 1.0));
    kvc_cache_free(run_case("mosaic:segment=128,tokens=1,keep=0.125,trunc=0.5", 32, 300, 40, 1.0));
}

static void test_selection_equals_reference_over_selected(void **state) {
    (void)state;
    kvc_cache_free(run_case("mosaic:segment=256", 64, 900, 70, 0.1));
    kvc_cache_free(run_case("mosaic:segment=512,block=16,group=4", 128, 1100, 40, 0.0625));
}

static void test_ablations(void **state) {
    (void)state;
    kvc_cache_free(run_case("mosaic:segment=256,rotate=0,pervector=0,dynamic=0,tokens=1", 64, 600, 40, 1.0));
    kvc_cache_free(run_case("mosaic:segment=256,pervector=0,dynamic=0,tokens=1", 64, 600, 40, 1.0));
    kvc_cache_free(run_case("mosaic:segment=256,dynamic=0,tokens=1", 64, 600, 40, 1.0));
    kvc_cache_free(run_case("mosaic:segment=256,dynamic=0", 64, 600, 40, 0.1));
    /* without truncation and everything kept the cache is exact up to f16 */
    kvc_cache *c = run_case("mosaic:segment=256,keep=1,trunc=0,dynamic=0,tokens=1", 64, 400, 40, 1.0);
    kvc_stream *s = kvc_cache_stream(c, 0, 0);
    assert_int_equal(s->chunks[0]->xf->dim_k, 64);
    kvc_cache_free(c);
}

/* Decode segments closed by the manager thread while decode goes on: the
 * attention checks of run_case hold at every checked step whatever the swap
 * timing; once the manager is done, the next step boundary swaps every final
 * chunk in; decode never waited (the counters). Run under ThreadSanitizer by
 * make test-tsan. */
static void test_manager_swaps_segments(void **state) {
    (void)state;
    int d = 64, nkv = 2, n_dec = 400;
    kvc_cache *c = run_case("mosaic:segment=256,maxseg=64,segloss=1e9,tokens=0.2", d, 512, n_dec, 0.2);
    /* decode segments: 400 decode tokens leave in buffers of 32, 64 per segment */
    int expect_jobs = nkv * (n_dec / 64);
    kvc_cache_stats st;
    for (int spin = 0; spin < 200000; spin++) {
        kvc_cache_stats_get(c, &st);
        if (st.bg_jobs >= (uint64_t)expect_jobs) break;
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(st.bg_jobs, expect_jobs);
    assert_true(st.bg_busy_s > 0);
    assert_int_equal(st.bg_waits, 0);
    float k[2 * 64], v[2 * 64];
    kvc_synth_kv(nkv, d, 912, 1, 11, k, v);
    assert_int_equal(kvc_cache_append(c, 0, k, v), KVC_OK); /* a step boundary: swaps */
    for (int h = 0; h < nkv; h++) {
        kvc_stream *s = kvc_cache_stream(c, 0, h);
        int64_t pos = 0;
        int finals = 0;
        for (int ci = 0; ci < s->n_chunks; ci++) {
            assert_true(s->chunks[ci]->pos0 == pos);
            pos += s->chunks[ci]->n;
            finals += s->chunks[ci]->n == 64;
        }
        assert_int_equal(finals, n_dec / 64);
    }
    kvc_cache_free(c);
}

static void test_bad_specs(void **state) {
    (void)state;
    assert_int_equal(kvc_method_validate("mosaic:group=3"), KVC_ERR_ARG);
    assert_int_equal(kvc_method_validate("mosaic:block=5"), KVC_ERR_ARG);
    assert_int_equal(kvc_method_validate("mosaic:keep=0.9,trunc=0.25"), KVC_ERR_ARG);
    assert_int_equal(kvc_method_validate("mosaic:window=20"), KVC_ERR_ARG);
    assert_int_equal(kvc_method_validate("mosaic:tokens=1.5"), KVC_ERR_ARG);
    assert_int_equal(kvc_method_validate("mosaic:segment=8"), KVC_ERR_ARG);
    assert_int_equal(kvc_method_validate("mosaic:keep=0.25,tokens=0.1,segment=2048,group=2,block=8"), KVC_OK);
    kvc_cache_shape shape = {.n_layers = 1, .n_heads = 2, .n_kv_heads = 1, .head_dim = 30, .max_tokens = 64};
    kvc_cache *c = NULL;
    assert_int_equal(kvc_cache_create(&shape, "mosaic", NULL, &c), KVC_ERR_UNSUPPORTED);
    assert_null(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_segments_and_format),
        cmocka_unit_test(test_attention_equals_reference),
        cmocka_unit_test(test_selection_equals_reference_over_selected),
        cmocka_unit_test(test_ablations),
        cmocka_unit_test(test_manager_swaps_segments),
        cmocka_unit_test(test_bad_specs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
