/* The think baseline (ThinK; the MUSTAFAR paper §2.1): each block of `block` keys
 * leaving the window keeps exactly round((1-ratio)·D) channels — the same
 * channels for every token of the block, the top ones by
 * ||Q_obs[:, j]||·||K_block[:, j]|| over the last `obs` queries — stored as
 * f16, pruned channels exactly 0; values dense f16; attention over the cache
 * equals the reference over its decoded keys and values.
 * Tolerance: |Δ| <= 3e-5 * (1 + |ref|). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/f16.h"
#include "kv/attend.h"
#include "kv/cache_impl.h"
#include "kv/codec/prune.h"
#include "kv/synth.h"

static uint64_t rng = 5;
static float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static void run(const char *spec, double ratio, int block, int d, int n) {
    int nh = 6, nkv = 2, G = 3, W = 32, obs = 32;
    kvc_cache_shape shape = {.n_layers = 1, .n_heads = nh, .n_kv_heads = nkv, .head_dim = d, .max_tokens = 2048};
    kvc_cache *c;
    assert_int_equal(kvc_cache_create(&shape, spec, NULL, &c), KVC_OK);
    float *k = malloc(sizeof(float) * n * nkv * d), *v = malloc(sizeof(float) * n * nkv * d);
    float *q = malloc(sizeof(float) * n * nh * d), *out = malloc(sizeof(float) * n * nh * d);
    kvc_synth_kv(nkv, d, 0, n, 21, k, v);
    for (int i = 0; i < n * nh * d; i++) q[i] = frand() * (1.0f + (float)((i % d) % 5));
    assert_int_equal(kvc_cache_prefill(c, 0, n, q, k, v, out), KVC_OK);
    int keep = kvc_prune_keep_count(ratio, d);
    float *dk = malloc(sizeof(float) * block * d), *dv = malloc(sizeof(float) * block * d);
    for (int h = 0; h < nkv; h++) {
        kvc_stream *s = kvc_cache_stream(c, 0, h);
        int sealed = 0;
        /* the observation window: the prefill's last obs queries of this group */
        double qn[256] = {0};
        for (int t = n - obs; t < n; t++)
            for (int g = 0; g < G; g++)
                for (int j = 0; j < d; j++) {
                    double x = q[((size_t)t * nh + h * G + g) * d + j];
                    qn[j] += x * x;
                }
        for (int ci = 0; ci < s->n_chunks; ci++) {
            kvc_chunk *ch = s->chunks[ci];
            for (int b0 = 0; b0 < ch->n; b0 += block) {
                int nb = ch->n - b0 < block ? ch->n - b0 : block;
                assert_int_equal(kvc_chunk_decode(ch, b0, b0 + nb, dk, dv, d), KVC_OK);
                int64_t p0 = kvc_chunk_pos(ch, b0);
                float score[256];
                uint64_t mask[4];
                for (int j = 0; j < d; j++) {
                    double kn = 0;
                    for (int i = 0; i < nb; i++) {
                        double x = k[((size_t)(p0 + i) * nkv + h) * d + j];
                        kn += x * x;
                    }
                    score[j] = (float)(sqrt(qn[j]) * sqrt(kn));
                }
                kvc_prune_topk(score, d, keep, mask);
                for (int i = 0; i < nb; i++)
                    for (int j = 0; j < d; j++) {
                        float orig = k[((size_t)(p0 + i) * nkv + h) * d + j];
                        float want = (mask[j >> 6] >> (j & 63) & 1) ? kvc_f16_to_f32(kvc_f32_to_f16(orig)) : 0.0f;
                        assert_true(dk[(size_t)i * d + j] == want);
                        float vo = v[((size_t)(p0 + i) * nkv + h) * d + j];
                        assert_true(dv[(size_t)i * d + j] == kvc_f16_to_f32(kvc_f32_to_f16(vo)));
                    }
            }
            sealed += ch->n;
        }
        assert_true(sealed >= n - W - block);
        assert_true(s->hot->n >= W && s->hot->n < W + block);
    }
    /* decode steps, then attention against the reference */
    float qq[6 * 256], o[6 * 256], ref[3 * 256];
    for (int t = 0; t < 40; t++) {
        float kk[2 * 256], vv[2 * 256];
        kvc_synth_kv(nkv, d, n + t, 1, 21, kk, vv);
        assert_int_equal(kvc_cache_append(c, 0, kk, vv), KVC_OK);
        for (int i = 0; i < nh * d; i++) qq[i] = frand();
        assert_int_equal(kvc_cache_attend(c, 0, qq, o), KVC_OK);
    }
    for (int h = 0; h < nkv; h++) {
        assert_int_equal(kvc_attend_reference(kvc_cache_stream(c, 0, h), qq + h * G * d, G, ref), KVC_OK);
        for (int i = 0; i < G * d; i++) assert_true(fabs(o[h * G * d + i] - ref[i]) <= 3e-5 * (1 + fabs(ref[i])));
    }
    kvc_cache_stats st;
    kvc_cache_stats_get(c, &st);
    assert_true(st.payload_bytes > 0);
    kvc_cache_free(c);
    free(k), free(v), free(q), free(out), free(dk), free(dv);
}

static void test_think(void **state) {
    (void)state;
    run("think:0.5", 0.5, 64, 64, 500);
    run("think:ratio=0.7,block=100", 0.7, 100, 64, 517);
    run("think:ratio=0.3,block=64", 0.3, 64, 96, 300);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_think)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
