/* Cache and driver tests (docs/design.md §4): full:f32/f16/bf16 through
 * kvc_cache_prefill / append / attend against a plain double-precision
 * attention over the same K/V; prefill with an empty cache = causal attention;
 * prefill with a past; the driver with 1..4 threads and every split gives the
 * reference output.
 *
 * Tolerances: f32 storage — |Δ| <= 2e-5 * (1 + |ref|) per element (f32
 * accumulation over up to a few thousand tokens, polynomial exp); f16/bf16
 * storage — compared with a reference over the rounded K/V (the codec is
 * exact up to rounding), same budget. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/f16.h"
#include "base/threadpool.h"
#include "kv/cache_impl.h"
#include "kv/synth.h"

static uint64_t rng_state = 12345;
static float frand(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

/* out[g] = attention of q (G heads, d) over keys/values rows 0..n-1 (row stride ld). */
static void ref_attn(const float *q, int G, int d, const float *k, const float *v, int n, int ld,
                     float *out) {
    double *s = malloc((size_t)(n ? n : 1) * sizeof *s);
    for (int g = 0; g < G; g++) {
        double m = -INFINITY, l = 0;
        for (int i = 0; i < n; i++) {
            double a = 0;
            for (int j = 0; j < d; j++) a += (double)q[g * d + j] * k[(size_t)i * ld + j];
            s[i] = a / sqrt((double)d);
            if (s[i] > m) m = s[i];
        }
        for (int j = 0; j < d; j++) {
            double o = 0;
            l = 0;
            for (int i = 0; i < n; i++) {
                double p = exp(s[i] - m);
                l += p;
                o += p * v[(size_t)i * ld + j];
            }
            out[g * d + j] = (float)(o / l);
        }
    }
    free(s);
}

static void round_like(int dtype, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (dtype == 1) x[i] = kvc_f16_to_f32(kvc_f32_to_f16(x[i]));
        if (dtype == 2) x[i] = kvc_bf16_to_f32(kvc_f32_to_bf16(x[i]));
    }
}

static void expect_close(const float *a, const float *ref, size_t n, double tol, const char *what) {
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - ref[i]) / (1.0 + fabs(ref[i]));
        if (!(e <= worst)) worst = e, at = i;
    }
    if (worst > tol) fail_msg("%s: element %zu: %g vs %g (err %g > %g)", what, at, a[at], ref[at], worst, tol);
}

typedef struct seq {
    int nl, nh, nkv, d, n;
    float *q, *k, *v; /* [n][nh][d], [n][nkv][d] per layer (same for every layer here) */
} seq;

static seq make_seq(int nh, int nkv, int d, int n) {
    seq s = {.nl = 1, .nh = nh, .nkv = nkv, .d = d, .n = n};
    s.q = malloc((size_t)n * nh * d * 4);
    s.k = malloc((size_t)n * nkv * d * 4);
    s.v = malloc((size_t)n * nkv * d * 4);
    for (size_t i = 0; i < (size_t)n * nh * d; i++) s.q[i] = 2.0f * frand();
    for (size_t i = 0; i < (size_t)n * nkv * d; i++) s.k[i] = 2.0f * frand(), s.v[i] = frand();
    /* a few outlier channels and tokens */
    for (int t = 0; t < n; t += 97) s.k[(size_t)t * nkv * d + 3] = 40.0f;
    return s;
}
static void free_seq(seq *s) { free(s->q); free(s->k); free(s->v); }

/* Reference output of query token t (all heads) over tokens 0..upto-1 of s (K/V rounded per dtype). */
static void ref_token(const seq *s, int dtype, const float *q, int upto, float *out) {
    int G = s->nh / s->nkv;
    size_t row = (size_t)s->nkv * s->d;
    float *k = malloc((size_t)upto * row * 4), *v = malloc((size_t)upto * row * 4);
    memcpy(k, s->k, (size_t)upto * row * 4);
    memcpy(v, s->v, (size_t)upto * row * 4);
    round_like(dtype, k, (size_t)upto * row);
    round_like(dtype, v, (size_t)upto * row);
    for (int h = 0; h < s->nkv; h++)
        ref_attn(q + (size_t)h * G * s->d, G, s->d, k + (size_t)h * s->d, v + (size_t)h * s->d, upto, (int)row,
                 out + (size_t)h * G * s->d);
    free(k);
    free(v);
}

static kvc_cache *make_cache(const char *spec, int nh, int nkv, int d, int max, kvc_pool *pool) {
    kvc_cache_shape sh = {.n_layers = 2, .n_heads = nh, .n_kv_heads = nkv, .head_dim = d, .max_tokens = max};
    kvc_cache *c = NULL;
    kvc_status st = kvc_cache_create(&sh, spec, pool, &c);
    if (st != KVC_OK) fail_msg("create %s: %s", spec, kvc_last_error());
    return c;
}

static void test_prefill_empty_is_causal(void **state) {
    (void)state;
    seq s = make_seq(6, 2, 64, 300);
    kvc_cache *c = make_cache("full:f32", 6, 2, 64, 4096, NULL);
    float *out = malloc((size_t)s.n * s.nh * s.d * 4), *ref = malloc((size_t)s.nh * s.d * 4);
    assert_int_equal(kvc_cache_prefill(c, 0, s.n, s.q, s.k, s.v, out), KVC_OK);
    for (int t = 0; t < s.n; t += 13) {
        ref_token(&s, 0, s.q + (size_t)t * s.nh * s.d, t + 1, ref);
        expect_close(out + (size_t)t * s.nh * s.d, ref, (size_t)s.nh * s.d, 2e-5, "causal prefill");
    }
    assert_int_equal(kvc_cache_tokens(c, 0), s.n);
    assert_int_equal(kvc_cache_tokens(c, 1), 0);
    kvc_cache_free(c);
    free(out); free(ref);
    free_seq(&s);
}

/* Prefill in chunks (the second attends to the first, compressed), then decode. */
static void run_chunked(const char *spec, int dtype, int block, kvc_pool *pool) {
    seq s = make_seq(9, 3, 64, 2600);
    kvc_cache *c = make_cache(spec, 9, 3, 64, 8192, pool);
    size_t qrow = (size_t)s.nh * s.d, kvrow = (size_t)s.nkv * s.d;
    float *out = malloc((size_t)s.n * qrow * 4), *ref = malloc(qrow * 4);
    int cuts[] = {0, 1100, 1101, 2500, 2600};
    for (int i = 0; i + 1 < 5; i++) {
        int a = cuts[i], n = cuts[i + 1] - cuts[i];
        assert_int_equal(kvc_cache_prefill(c, 1, n, s.q + a * qrow, s.k + a * kvrow, s.v + a * kvrow, out + a * qrow), KVC_OK);
    }
    /* chunk 0 is exact; later chunks see the past through the codec (rounded) and themselves exactly */
    for (int t = 0; t < 2500; t += 37) {
        int chunk_start = t < 1100 ? 0 : t < 1101 ? 1100 : 1101;
        int sealed = chunk_start / block * block; /* full seals every token (block = 1 here) */
        /* reference: sealed past rounded per dtype, hot window and own chunk exact */
        float *k = malloc((size_t)(t + 1) * kvrow * 4), *v = malloc((size_t)(t + 1) * kvrow * 4);
        memcpy(k, s.k, (size_t)(t + 1) * kvrow * 4);
        memcpy(v, s.v, (size_t)(t + 1) * kvrow * 4);
        round_like(dtype, k, (size_t)sealed * kvrow);
        round_like(dtype, v, (size_t)sealed * kvrow);
        int G = s.nh / s.nkv;
        for (int h = 0; h < s.nkv; h++)
            ref_attn(s.q + t * qrow + (size_t)h * G * s.d, G, s.d, k + (size_t)h * s.d, v + (size_t)h * s.d, t + 1,
                     (int)kvrow, ref + (size_t)h * G * s.d);
        free(k); free(v);
        expect_close(out + t * qrow, ref, qrow, 2e-5, spec);
    }
    /* decode: the last 100 tokens appended one by one, attending each time */
    float *o = malloc(qrow * 4);
    kvc_cache_reset(c);
    assert_int_equal(kvc_cache_tokens(c, 1), 0);
    assert_int_equal(kvc_cache_prefill(c, 1, 2500, s.q, s.k, s.v, out), KVC_OK);
    for (int t = 2500; t < 2600; t++) {
        assert_int_equal(kvc_cache_append(c, 1, s.k + t * kvrow, s.v + t * kvrow), KVC_OK);
        if (t % 9 && t != 2599) continue;
        for (int split = 0; split <= 5; split++) {
            assert_int_equal(kvc_cache_attend_opts(c, 1, s.q + t * qrow, o, split), KVC_OK);
            /* tokens still in the hot window are exact f32, so round only sealed ones */
            kvc_stream *st = kvc_cache_stream(c, 1, 0);
            int hot0 = (int)st->hot->pos0;
            float *k = malloc((size_t)(t + 1) * kvrow * 4), *v = malloc((size_t)(t + 1) * kvrow * 4);
            memcpy(k, s.k, (size_t)(t + 1) * kvrow * 4);
            memcpy(v, s.v, (size_t)(t + 1) * kvrow * 4);
            round_like(dtype, k, (size_t)hot0 * kvrow);
            round_like(dtype, v, (size_t)hot0 * kvrow);
            int G = s.nh / s.nkv;
            for (int h = 0; h < s.nkv; h++)
                ref_attn(s.q + t * qrow + (size_t)h * G * s.d, G, s.d, k + (size_t)h * s.d, v + (size_t)h * s.d,
                         t + 1, (int)kvrow, ref + (size_t)h * G * s.d);
            free(k); free(v);
            expect_close(o, ref, qrow, 2e-5, spec);
        }
    }
    kvc_cache_stats stats;
    kvc_cache_stats_get(c, &stats);
    assert_int_equal(stats.tokens, 2600 / 2); /* layer 0 is empty: tokens averaged over layers */
    assert_true(stats.payload_bytes > 0);
    assert_true(stats.bytes_per_token > 0);
    free(o);
    kvc_cache_free(c);
    free(out); free(ref);
    free_seq(&s);
}

static void test_full_f32_chunked(void **state) { (void)state; run_chunked("full:f32", 0, 1, NULL); }
static void test_full_f16_chunked(void **state) { (void)state; run_chunked("full:f16", 1, 1, NULL); }
static void test_full_bf16_chunked(void **state) { (void)state; run_chunked("full:bf16,block=64", 2, 1, NULL); }

static void test_threads_and_splits(void **state) {
    (void)state;
    for (int nt = 1; nt <= 4; nt++) {
        kvc_pool *pool = NULL;
        assert_int_equal(kvc_pool_create(nt, &pool), KVC_OK);
        run_chunked("full:f16,block=128", 1, 1, pool);
        kvc_pool_free(pool);
    }
}

/* The synthetic loader fills the cache like appends do, and the driver matches
 * the reference over what the stream holds. */
static void test_synth_load(void **state) {
    (void)state;
    kvc_pool *pool = NULL;
    assert_int_equal(kvc_pool_create(3, &pool), KVC_OK);
    kvc_cache *c = make_cache("full:f16", 4, 1, 32, 1 << 16, pool);
    assert_int_equal(kvc_cache_load_random(c, 0, 20000, 7), KVC_OK);
    assert_int_equal(kvc_cache_tokens(c, 0), 20000);
    float q[4 * 32], o[4 * 32], ref[4 * 32];
    for (int i = 0; i < 4 * 32; i++) q[i] = frand();
    for (int split = 0; split <= 7; split++) {
        assert_int_equal(kvc_cache_attend_opts(c, 0, q, o, split), KVC_OK);
        assert_int_equal(kvc_attend_reference(kvc_cache_stream(c, 0, 0), q, 4, ref), KVC_OK);
        expect_close(o, ref, 4 * 32, 2e-5, "synthetic 20000 tokens");
    }
    kvc_cache_free(c);
    kvc_pool_free(pool);
}

static void test_bad_calls(void **state) {
    (void)state;
    kvc_cache_shape sh = {.n_layers = 1, .n_heads = 5, .n_kv_heads = 2, .head_dim = 8, .max_tokens = 10};
    kvc_cache *c = NULL;
    assert_int_equal(kvc_cache_create(&sh, "full", NULL, &c), KVC_ERR_ARG);
    assert_non_null(strstr(kvc_last_error(), "multiple"));
    sh.n_heads = 4;
    assert_int_equal(kvc_cache_create(&sh, "nope", NULL, &c), KVC_ERR_ARG);
    assert_non_null(strstr(kvc_last_error(), "full"));
    assert_int_equal(kvc_cache_create(&sh, NULL, NULL, &c), KVC_OK);
    float k[2 * 8 * 11] = {0}, q[4 * 8 * 11] = {0}, out[4 * 8 * 11];
    assert_int_equal(kvc_cache_prefill(c, 0, 11, q, k, k, out), KVC_ERR_RANGE);
    assert_int_equal(kvc_cache_prefill(c, 1, 1, q, k, k, out), KVC_ERR_ARG);
    assert_int_equal(kvc_cache_prefill(c, 0, 10, q, k, k, out), KVC_OK);
    assert_int_equal(kvc_cache_append(c, 0, k, k), KVC_ERR_RANGE);
    assert_non_null(strstr(kvc_last_error(), "capacity"));
    kvc_cache_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefill_empty_is_causal),
        cmocka_unit_test(test_full_f32_chunked),
        cmocka_unit_test(test_full_f16_chunked),
        cmocka_unit_test(test_full_bf16_chunked),
        cmocka_unit_test(test_threads_and_splits),
        cmocka_unit_test(test_synth_load),
        cmocka_unit_test(test_bad_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
