/* The mustafar method through the cache (the MUSTAFAR paper §2, §3): tokens leave
 * the dense local window in blocks, every sealed key and value keeps exactly
 * round((1-s)·D) channels — the largest by |x| (or, output-aware, by
 * |k|·Σ|q| over the token's window of queries) — stored exactly as bf16
 * (or f16 with dtype=f16);
 * decode attention over the compressed cache equals a double-precision
 * reference attention over the decoded (pruned) cache; lengths and head sizes
 * that are not multiples of 64 work; bytes count bitmaps and padding.
 *
 * Tolerance of the attention comparison: |Δ| <= 3e-5 * (1 + |ref|) per output
 * element (f32 accumulation and the driver's polynomial exp against double). */
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


static int count_nonzero(const float *x, int d) {
    int c = 0;
    for (int j = 0; j < d; j++) c += x[j] != 0.0f;
    return c;
}

/* Checks every sealed chunk of every stream of layer 0 against the original
 * rows k, v [n][nkv][d]: exactly keep values, the top-|x| ones of the tokens
 * as the f16 hot window held them, as f16 (bf16 when `bf16`). */
static void check_pruned(kvc_cache *c, const float *k, const float *v, int keep_k, int keep_v, int bf16) {
    int nkv = c->shape.n_kv_heads, d = c->shape.head_dim;
    float *dk = malloc(sizeof(float) * 4096 * d), *dv = malloc(sizeof(float) * 4096 * d);
    uint64_t mask[16];
    for (int h = 0; h < nkv; h++) {
        kvc_stream *s = kvc_cache_stream(c, 0, h);
        for (int ci = 0; ci < s->n_chunks; ci++) {
            kvc_chunk *ch = s->chunks[ci];
            assert_true(ch->n <= 4096);
            assert_int_equal(kvc_chunk_decode(ch, 0, ch->n, dk, dv, d), KVC_OK);
            for (int i = 0; i < ch->n; i++) {
                int64_t p = kvc_chunk_pos(ch, i);
                for (int side = 0; side < 2; side++) {
                    const float *orig = (side ? v : k) + ((size_t)p * nkv + h) * d;
                    const float *got = (side ? dv : dk) + (size_t)i * d;
                    int keep = side ? keep_v : keep_k;
                    assert_int_equal(count_nonzero(got, d), keep);
                    float held[1024];
                    for (int j = 0; j < d; j++) held[j] = kvc_f16_to_f32(kvc_f32_to_f16(orig[j]));
                    kvc_prune_topk(held, d, keep, mask);
                    for (int j = 0; j < d; j++) {
                        /* a pruned side is stored as bitmap tiles; an unpruned one dense f16 */
                        float kept = bf16 && keep < d ? kvc_bf16_to_f32(kvc_f32_to_bf16(held[j])) : held[j];
                        float want = (mask[j >> 6] >> (j & 63) & 1) ? kept : 0.0f;
                        assert_true(got[j] == want);
                    }
                }
            }
        }
    }
    free(dk);
    free(dv);
}

static void run_case(int d, int n_tok, const char *spec, double sk, double sv, int window, int block) {
    int nh = 6, nkv = 2, G = 3;
    kvc_cache_shape shape = {.n_layers = 1, .n_heads = nh, .n_kv_heads = nkv, .head_dim = d, .max_tokens = 4096};
    kvc_cache *c;
    assert_int_equal(kvc_cache_create(&shape, spec, NULL, &c), KVC_OK);
    float *k = malloc(sizeof(float) * (size_t)n_tok * nkv * d), *v = malloc(sizeof(float) * (size_t)n_tok * nkv * d);
    kvc_synth_kv(nkv, d, 0, n_tok, 7, k, v);
    /* half as a prefill-like bulk append, the rest token by token (decode) */
    int first = n_tok / 2;
    assert_int_equal(kvc_cache_append_n(c, 0, first, k, v, NULL), KVC_OK);
    float *q = malloc(sizeof(float) * nh * d), *out = malloc(sizeof(float) * nh * d), *ref = malloc(sizeof(float) * G * d);
    for (int t = first; t < n_tok; t++) {
        assert_int_equal(kvc_cache_append(c, 0, k + (size_t)t * nkv * d, v + (size_t)t * nkv * d), KVC_OK);
        if ((t - first) % 37 == 0 || t == n_tok - 1) {
            for (int i = 0; i < nh * d; i++) q[i] = frand() * 2.0f;
            assert_int_equal(kvc_cache_attend(c, 0, q, out), KVC_OK);
            for (int h = 0; h < nkv; h++) {
                kvc_stream *s = kvc_cache_stream(c, 0, h);
                assert_int_equal(kvc_attend_reference(s, q + (size_t)h * G * d, G, ref), KVC_OK);
                expect_close(out + (size_t)h * G * d, ref, (size_t)G * d, 3e-5, spec);
                /* local window: at least `window` dense tokens, fewer than window + block */
                assert_true(s->hot->n >= (t + 1 < window ? t + 1 : window));
                assert_true(s->hot->n < window + block);
            }
        }
    }
    int keep_k = kvc_prune_keep_count(sk, d), keep_v = kvc_prune_keep_count(sv, d);
    check_pruned(c, k, v, keep_k, keep_v, strstr(spec, "dtype=f16") == NULL);
    /* bytes: payload counts the kept 16-bit values; meta at least the bitmaps */
    kvc_cache_stats st;
    kvc_cache_stats_get(c, &st);
    uint64_t sealed = 0;
    for (int h = 0; h < nkv; h++) {
        kvc_stream *s = kvc_cache_stream(c, 0, h);
        for (int ci = 0; ci < s->n_chunks; ci++) sealed += (uint64_t)s->chunks[ci]->n;
    }
    assert_int_equal(st.payload_bytes, sealed * 2 * (uint64_t)(keep_k + keep_v));
    int nt = (d + 63) / 64;
    uint64_t bitmaps = sealed * 8 * (uint64_t)nt * ((keep_k < d) + (keep_v < d));
    assert_true(st.meta_bytes >= bitmaps);
    assert_true(st.bytes_per_token > 0);
    kvc_cache_free(c);
    free(k), free(v), free(q), free(out), free(ref);
}

static void test_attention_equals_reference_on_pruned(void **state) {
    (void)state;
    run_case(64, 700, "mustafar:k=0.5,v=0.5", 0.5, 0.5, 32, 64);
    run_case(64, 333, "mustafar:k=0.7,v=0.7", 0.7, 0.7, 32, 64);
    run_case(64, 300, "mustafar:k=0.7,v=0", 0.7, 0.0, 32, 64);
    run_case(64, 300, "mustafar:k=0,v=0.7", 0.0, 0.7, 32, 64);
    run_case(80, 411, "mustafar:k=0.6,v=0.3,window=16,block=50", 0.6, 0.3, 16, 50);
    run_case(128, 259, "mustafar:k=0.9,v=0.5,block=256", 0.9, 0.5, 32, 256);
    run_case(32, 97, "mustafar:k=1,v=1,window=0,block=1", 1.0, 1.0, 0, 1);
    run_case(64, 333, "mustafar:k=0.7,v=0.7,dtype=f16", 0.7, 0.7, 32, 64);
    run_case(64, 300, "mustafar:k=0.7,v=0,dtype=f16", 0.7, 0.0, 32, 64);
    run_case(100, 259, "mustafar:k=0.6,v=0.4,dtype=f16,block=50", 0.6, 0.4, 32, 50);
}

/* Output-aware K (Figure 3): a prefill chunk with queries; key i of the chunk
 * is pruned by |k| * sum over queries i..i+window-1 (all heads of the group)
 * of |q|. Values stay magnitude-pruned. */
static void test_outaware_prefill_scores(void **state) {
    (void)state;
    int nh = 4, nkv = 2, G = 2, d = 64, n = 300, W = 32;
    kvc_cache_shape shape = {.n_layers = 1, .n_heads = nh, .n_kv_heads = nkv, .head_dim = d, .max_tokens = 1024};
    kvc_cache *c;
    assert_int_equal(kvc_cache_create(&shape, "mustafar:k=0.7,v=0.5,outaware=1", NULL, &c), KVC_OK);
    float *k = malloc(sizeof(float) * n * nkv * d), *v = malloc(sizeof(float) * n * nkv * d);
    float *q = malloc(sizeof(float) * n * nh * d), *out = malloc(sizeof(float) * n * nh * d);
    kvc_synth_kv(nkv, d, 0, n, 3, k, v);
    for (int i = 0; i < n * nh * d; i++) q[i] = frand() * ((i % d) < 8 ? 10.0f : 1.0f);
    assert_int_equal(kvc_cache_prefill(c, 0, n, q, k, v, out), KVC_OK);
    int keep = kvc_prune_keep_count(0.7, d), differs = 0;
    float dk[64], score[64], qs[64];
    uint64_t mask, magmask;
    for (int h = 0; h < nkv; h++) {
        kvc_stream *s = kvc_cache_stream(c, 0, h);
        assert_true(s->n_chunks > 0);
        for (int ci = 0; ci < s->n_chunks; ci++) {
            kvc_chunk *ch = s->chunks[ci];
            for (int i = 0; i < ch->n; i++) {
                int64_t p = kvc_chunk_pos(ch, i);
                const float *kp = k + ((size_t)p * nkv + h) * d;
                memset(qs, 0, sizeof qs);
                for (int t = (int)p; t < p + W && t < n; t++)
                    kvc_prune_accumulate_absq(q + ((size_t)t * nh + h * G) * d, G, d, qs);
                kvc_prune_outaware_score(kp, qs, d, score);
                kvc_prune_topk(score, d, keep, &mask);
                kvc_prune_topk(kp, d, keep, &magmask);
                differs += mask != magmask;
                assert_int_equal(kvc_chunk_decode(ch, i, i + 1, dk, NULL, d), KVC_OK);
                for (int j = 0; j < d; j++) {
                    /* held f16 in the hot window, then bf16 in the tiles */
                    float held = kvc_f16_to_f32(kvc_f32_to_f16(kp[j]));
                    float want = (mask >> j & 1) ? kvc_bf16_to_f32(kvc_f32_to_bf16(held)) : 0.0f;
                    assert_true(dk[j] == want);
                }
            }
        }
    }
    assert_true(differs > 0); /* the query weighting changed some masks */
    kvc_cache_free(c);
    free(k), free(v), free(q), free(out);
}

/* Output-aware in decode: tokens appended one by one, each query observed
 * by the tokens still in their window, then sealed. */
static void test_outaware_decode_runs(void **state) {
    (void)state;
    int nh = 3, nkv = 1, d = 64, n = 200;
    kvc_cache_shape shape = {.n_layers = 1, .n_heads = nh, .n_kv_heads = nkv, .head_dim = d, .max_tokens = 512};
    kvc_cache *c;
    assert_int_equal(kvc_cache_create(&shape, "mustafar:k=0.5,v=0.5,outaware=true", NULL, &c), KVC_OK);
    float k[64], v[64], q[3 * 64], out[3 * 64], ref[3 * 64];
    for (int t = 0; t < n; t++) {
        kvc_synth_kv(nkv, d, t, 1, 5, k, v);
        for (int i = 0; i < nh * d; i++) q[i] = frand();
        assert_int_equal(kvc_cache_append(c, 0, k, v), KVC_OK);
        assert_int_equal(kvc_cache_attend(c, 0, q, out), KVC_OK);
    }
    kvc_stream *s = kvc_cache_stream(c, 0, 0);
    assert_true(s->n_chunks >= 2);
    assert_int_equal(kvc_attend_reference(s, q, 3, ref), KVC_OK);
    expect_close(out, ref, 3 * 64, 3e-5, "outaware decode");
    kvc_cache_free(c);
}

static void test_bad_specs(void **state) {
    (void)state;
    assert_int_equal(kvc_method_validate("mustafar:k=1.5"), KVC_ERR_ARG);
    assert_int_equal(kvc_method_validate("mustafar:sparsity=0.5"), KVC_ERR_ARG);
    assert_int_equal(kvc_method_validate("mustafar:k=0.5,v=0.7,window=32,block=64,outaware=1"), KVC_OK);
    assert_int_equal(kvc_method_validate("mustafar:dtype=f16"), KVC_OK);
    assert_int_equal(kvc_method_validate("mustafar:dtype=f32"), KVC_ERR_ARG);
}

int main(void) {
    rng = 99;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_equals_reference_on_pruned),
        cmocka_unit_test(test_outaware_prefill_scores),
        cmocka_unit_test(test_outaware_decode_runs),
        cmocka_unit_test(test_bad_specs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
