/* The h2o method (H2O; the MUSTAFAR paper §4.2.1), alone and under mustafar: after
 * every prefill chunk and decode step at most ceil(budget·seen) tokens stay
 * live (the hot window is always kept), the newest ceil(recent·seen) tokens
 * are never evicted, tokens that draw most of the attention survive, evicted
 * tokens' memory is freed by compaction, attention equals the reference over
 * the surviving tokens, and with mustafar the surviving tokens stay pruned
 * exactly as mustafar alone prunes them.
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

#include "base/f16.h"
#include "kv/attend.h"
#include "kv/cache_impl.h"
#include "kv/codec/prune.h"
#include "kv/synth.h"


enum { NH = 4, NKV = 2, G = 2, D = 64, NTOK = 1200, NPRE = 1000 };
static const int heavy[] = {3, 150, 411, 640, 777};

static int is_heavy(int p) {
    for (unsigned i = 0; i < sizeof heavy / sizeof heavy[0]; i++)
        if (heavy[i] == p) return 1;
    return 0;
}

/* Keys: random, except heavy tokens whose keys align with every query. */
static void make_kv(float *k, float *v) {
    kvc_synth_kv(NKV, D, 0, NTOK, 11, k, v);
    for (int t = 0; t < NTOK; t++)
        if (is_heavy(t))
            for (int h = 0; h < NKV; h++)
                for (int c = 0; c < D; c++) k[((size_t)t * NKV + h) * D + c] = (c < 8) ? 6.0f : 0.0f;
}
static void make_q(float *q, int n) {
    for (int i = 0; i < n * NH * D; i++) q[i] = ((i % D) < 8 ? 1.5f : 0.0f) + 0.3f * frand();
}

static int alive(const kvc_stream *s, int64_t pos) {
    if (pos >= s->n_pos - s->hot->n) return 1;
    for (int ci = 0; ci < s->n_chunks; ci++) {
        const kvc_chunk *c = s->chunks[ci];
        for (int i = 0; i < c->n; i++)
            if (kvc_chunk_pos(c, i) == pos) return !kvc_chunk_is_dead(c, i);
    }
    return 0;
}

/* After a decode attention (prefill: `extra` tokens of the last chunk may still
 * wait for eviction, see h2o.c). */
static void check_invariants(kvc_cache *c, double budget, double recent, int extra) {
    for (int h = 0; h < NKV; h++) {
        kvc_stream *s = kvc_cache_stream(c, 0, h);
        int64_t seen = s->n_pos, live = kvc_stream_live_tokens(s);
        int64_t keep = (int64_t)ceil(budget * seen - 1e-9);
        int64_t rn = (int64_t)ceil(recent * seen - 1e-9);
        /* older tokens still in the hot window wait until they are sealed */
        if (!(live <= keep + s->hot->n + extra))
            fail_msg("seen %lld live %lld keep %lld hot %d extra %d", (long long)seen, (long long)live, (long long)keep, s->hot->n, extra);
        for (int64_t p = seen - rn; p < seen; p++) assert_true(alive(s, p));
        for (unsigned i = 0; i < sizeof heavy / sizeof heavy[0]; i++)
            if (heavy[i] < seen) assert_true(alive(s, heavy[i]));
        /* memory: allocated sealed tokens exceed the live ones by less than the
         * compaction threshold (plus one rebuild's worth of slack) */
        int64_t sealed = 0, dead = 0;
        for (int ci = 0; ci < s->n_chunks; ci++) sealed += s->chunks[ci]->n, dead += s->chunks[ci]->n_dead;
        assert_true(dead <= (int64_t)(0.25 * (double)sealed) + 64);
    }
}

static void run(const char *spec, double budget, double recent, double sk, double sv) {
    kvc_cache_shape shape = {.n_layers = 1, .n_heads = NH, .n_kv_heads = NKV, .head_dim = D, .max_tokens = NTOK};
    kvc_cache *c;
    assert_int_equal(kvc_cache_create(&shape, spec, NULL, &c), KVC_OK);
    float *k = malloc(sizeof(float) * NTOK * NKV * D), *v = malloc(sizeof(float) * NTOK * NKV * D);
    float *q = malloc(sizeof(float) * 250 * NH * D), *out = malloc(sizeof(float) * 250 * NH * D);
    float ref[G * D];
    make_kv(k, v);
    for (int t0 = 0; t0 < NPRE; t0 += 250) { /* chunked prefill */
        make_q(q, 250);
        assert_int_equal(kvc_cache_prefill(c, 0, 250, q, k + (size_t)t0 * NKV * D, v + (size_t)t0 * NKV * D, out), KVC_OK);
        check_invariants(c, budget, recent, 250);
    }
    for (int t = NPRE; t < NTOK; t++) {
        assert_int_equal(kvc_cache_append(c, 0, k + (size_t)t * NKV * D, v + (size_t)t * NKV * D), KVC_OK);
        make_q(q, 1);
        assert_int_equal(kvc_cache_attend(c, 0, q, out), KVC_OK);
        if (t % 50 == 0 || t == NTOK - 1) {
            check_invariants(c, budget, recent, 0);
            for (int h = 0; h < NKV; h++) {
                assert_int_equal(kvc_attend_reference(kvc_cache_stream(c, 0, h), q + h * G * D, G, ref), KVC_OK);
                expect_close(out + h * G * D, ref, G * D, 3e-5, spec);
            }
        }
    }
    /* surviving sealed tokens: stored as the base stores them */
    int bf16_tiles = strstr(spec, "mustafar") && !strstr(spec, "dtype=f16");
    int kk = kvc_prune_keep_count(sk, D), kv = kvc_prune_keep_count(sv, D);
    float dk[D], dv[D];
    uint64_t m;
    for (int h = 0; h < NKV; h++) {
        kvc_stream *s = kvc_cache_stream(c, 0, h);
        for (int ci = 0; ci < s->n_chunks; ci++) {
            kvc_chunk *ch = s->chunks[ci];
            for (int i = 0; i < ch->n; i++) {
                if (kvc_chunk_is_dead(ch, i)) continue;
                int64_t p = kvc_chunk_pos(ch, i);
                assert_int_equal(kvc_chunk_decode(ch, i, i + 1, dk, dv, D), KVC_OK);
                for (int side = 0; side < 2; side++) {
                    const float *orig = (side ? v : k) + ((size_t)p * NKV + h) * D;
                    float held[D]; /* as the f16 hot window held the token */
                    for (int j = 0; j < D; j++) held[j] = kvc_f16_to_f32(kvc_f32_to_f16(orig[j]));
                    int keep = side ? kv : kk;
                    kvc_prune_topk(held, D, keep, &m);
                    for (int j = 0; j < D; j++) {
                        /* mustafar's bitmap tiles hold bf16 unless dtype=f16; dense sides f16 */
                        float kept = keep < D && bf16_tiles ? kvc_bf16_to_f32(kvc_f32_to_bf16(held[j])) : held[j];
                        float want = (m >> j & 1) ? kept : 0.0f;
                        assert_true((side ? dv : dk)[j] == want);
                    }
                }
            }
        }
    }
    kvc_cache_stats st;
    kvc_cache_stats_get(c, &st);
    assert_true(st.tokens <= (uint64_t)ceil(budget * NTOK) + 64);
    kvc_cache_free(c);
    free(k), free(v), free(q), free(out);
}

static void test_h2o_alone(void **state) {
    (void)state;
    run("h2o:budget=0.2,recent=0.1", 0.2, 0.1, 0.0, 0.0);
    run("h2o:0.3,recent=0.05,block=100", 0.3, 0.05, 0.0, 0.0);
}

static void test_mustafar_on_h2o(void **state) {
    (void)state;
    run("mustafar:k=0.5,v=0.5+h2o:budget=0.2", 0.2, 0.1, 0.5, 0.5);
    run("mustafar:k=0.7,v=0.7,outaware=0+h2o:budget=0.4,recent=0.2", 0.4, 0.2, 0.7, 0.7);
}

/* Memory really goes: the payload of an h2o cache is close to the live tokens'
 * f16 bytes, far below what the tokens seen would take. */
static void test_eviction_frees_memory(void **state) {
    (void)state;
    kvc_cache_shape shape = {.n_layers = 1, .n_heads = NH, .n_kv_heads = NKV, .head_dim = D, .max_tokens = NTOK};
    kvc_cache *c;
    assert_int_equal(kvc_cache_create(&shape, "h2o:budget=0.1,recent=0.05", NULL, &c), KVC_OK);
    float *k = malloc(sizeof(float) * NTOK * NKV * D), *v = malloc(sizeof(float) * NTOK * NKV * D);
    float *q = malloc(sizeof(float) * 250 * NH * D), *out = malloc(sizeof(float) * 250 * NH * D);
    make_kv(k, v);
    for (int t0 = 0; t0 < NPRE; t0 += 250) {
        make_q(q, 250);
        assert_int_equal(kvc_cache_prefill(c, 0, 250, q, k + (size_t)t0 * NKV * D, v + (size_t)t0 * NKV * D, out), KVC_OK);
    }
    make_q(q, 1);
    assert_int_equal(kvc_cache_attend(c, 0, q, out), KVC_OK); /* evicts the last chunk's tokens */
    kvc_cache_stats st;
    kvc_cache_stats_get(c, &st);
    uint64_t live_sealed = 0, alloc_sealed = 0;
    for (int h = 0; h < NKV; h++) {
        kvc_stream *s = kvc_cache_stream(c, 0, h);
        for (int ci = 0; ci < s->n_chunks; ci++)
            live_sealed += (uint64_t)(s->chunks[ci]->n - s->chunks[ci]->n_dead), alloc_sealed += (uint64_t)s->chunks[ci]->n;
    }
    assert_int_equal(st.payload_bytes, alloc_sealed * D * 2 * 2);
    assert_true(alloc_sealed < (uint64_t)(1.34 * live_sealed) + 64);
    assert_true(st.payload_bytes < (uint64_t)NPRE * NKV * D * 2 * 2 / 4);
    kvc_cache_free(c);
    free(k), free(v), free(q), free(out);
}

static void test_bad_specs(void **state) {
    (void)state;
    assert_int_equal(kvc_method_validate("h2o:budget=0.1,recent=0.2"), KVC_ERR_ARG);
    assert_int_equal(kvc_method_validate("h2o:budget=2"), KVC_ERR_ARG);
    assert_int_equal(kvc_method_validate("mustafar:k=0.5+h2o:budget=0.2"), KVC_OK);
}

int main(void) {
    rng = 4242;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_h2o_alone),
        cmocka_unit_test(test_mustafar_on_h2o),
        cmocka_unit_test(test_eviction_frees_memory),
        cmocka_unit_test(test_bad_specs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
