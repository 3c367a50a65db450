/* MUSTAFAR + KIVI (the MUSTAFAR paper §4.2.2, prune then quantize): the
 * bitmap_quant_k / bitmap_quant_v codecs keep exactly the top-|x| channels of
 * each vector, decode every kept value to within half a quantization step of
 * the original (min rounded down, scale up, codes to nearest: |x̂ - x| <=
 * scale/2 + 1e-6·|x|), pruned channels decode to exactly 0; qk / pv equal the
 * dense products over the decoded vectors (f32 budget 2e-6 · Σ|terms|); and
 * through the cache "mustafar:...+kivi:bits=B" attends like the reference over
 * its decoded cache and takes fewer bytes than mustafar alone. */
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
#include "kv/codec/bitmap_quant.h"
#include "kv/codec/prune.h"
#include "kv/synth.h"

static uint64_t rng = 77;
static float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static void codec_case(int is_k, int d, int n, int keep, int bits, int group) {
    kvc_bitmap_quant_cfg cfg = {keep, bits, group};
    kvc_codec c = {.ops = is_k ? &kvc_codec_bitmap_quant_k : &kvc_codec_bitmap_quant_v, .dim = d, .cfg = &cfg};
    int ld = d + 2;
    float *x = malloc(sizeof(float) * (size_t)n * ld), *y = malloc(sizeof(float) * (size_t)n * d);
    for (int i = 0; i < n * ld; i++) x[i] = frand() * ((i % ld) % 7 == 0 ? 20.0f : 1.0f);
    void *blob;
    assert_int_equal(c.ops->encode(&c, x, n, ld, &blob), KVC_OK);
    assert_int_equal(c.ops->count(&c, blob), n);
    c.ops->decode(&c, blob, 0, n, y, d);
    int qmax = (1 << bits) - 1;
    uint64_t mask[4];
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * ld;
        kvc_prune_topk(xi, d, keep, mask);
        /* the step of the value's group: recomputed from the kept values */
        for (int j = 0; j < d; j++) {
            float got = y[(size_t)i * d + j];
            if (!(mask[j >> 6] >> (j & 63) & 1)) {
                assert_true(got == 0.0f);
                continue;
            }
            float lo = INFINITY, hi = -INFINITY;
            if (is_k) { /* channel j over the token group */
                int g0 = i / group * group, g1 = g0 + group < n ? g0 + group : n;
                for (int t = g0; t < g1; t++) {
                    uint64_t mt[4];
                    kvc_prune_topk(x + (size_t)t * ld, d, keep, mt);
                    if (mt[j >> 6] >> (j & 63) & 1) {
                        float v = x[(size_t)t * ld + j];
                        lo = v < lo ? v : lo, hi = v > hi ? v : hi;
                    }
                }
            } else { /* the token's group of kept values */
                int rank = 0, r0, r1;
                for (int c2 = 0; c2 < j; c2++) rank += (int)(mask[c2 >> 6] >> (c2 & 63) & 1);
                r0 = rank / group * group, r1 = r0 + group;
                int r = 0;
                for (int c2 = 0; c2 < d; c2++) {
                    if (!(mask[c2 >> 6] >> (c2 & 63) & 1)) continue;
                    if (r >= r0 && r < r1) lo = xi[c2] < lo ? xi[c2] : lo, hi = xi[c2] > hi ? xi[c2] : hi;
                    r++;
                }
            }
            double step = (hi - lo) / qmax;
            /* f16 rounding of min (down) and scale (up) widens the step a little */
            double tol = step * 0.5 * (1 + 2e-3) + 2e-3 * step + 1e-6 * fabs(xi[j]) + 1e-4 * fabs(lo) + 1e-7;
            if (!(fabs(got - xi[j]) <= tol))
                fail_msg("token %d channel %d: %g vs %g (tol %g)", i, j, got, xi[j], tol);
        }
    }
    /* qk / pv against the decoded vectors */
    int G = 3;
    float q[3 * 130], s[3 * 64], p[3 * 64], o[3 * 130], oref[3 * 130];
    for (int i = 0; i < G * d; i++) q[i] = frand();
    kvc_range r[2] = {{1, n / 2}, {n / 2 + 1, n}};
    int m = (n / 2 - 1) + (n - n / 2 - 1);
    assert_true(m <= 64);
    kvc_codec_qk_ranges(&c, blob, q, G, d, r, 2, s, 64);
    for (int i = 0; i < G * 64; i++) p[i] = frand() + 1.0f;
    memset(o, 0, sizeof o);
    memset(oref, 0, sizeof oref);
    kvc_codec_pv_ranges(&c, blob, p, G, 64, r, 2, o, d);
    int jj = 0;
    for (int ri = 0; ri < 2; ri++)
        for (int t = r[ri].begin; t < r[ri].end; t++, jj++)
            for (int g = 0; g < G; g++) {
                double e = 0, mag = 0;
                for (int j = 0; j < d; j++) {
                    e += (double)q[g * d + j] * y[(size_t)t * d + j], mag += fabs(q[g * d + j] * y[(size_t)t * d + j]);
                    oref[g * d + j] += p[g * 64 + jj] * y[(size_t)t * d + j];
                }
                assert_true(fabs(s[g * 64 + jj] - e) <= 2e-6 * mag + 1e-30);
            }
    for (int i = 0; i < G * d; i++) assert_true(fabs(o[i] - oref[i]) <= 1e-5 * (1 + fabs(oref[i])));
    uint64_t pay, meta;
    c.ops->bytes(&c, blob, &pay, &meta);
    assert_true(pay == (uint64_t)n * 4 * ((keep * bits + 31) / 32));
    assert_true(meta >= (uint64_t)n * 8 * ((d + 63) / 64));
    c.ops->free(&c, blob);
    free(x), free(y);
}

static void test_codecs(void **state) {
    (void)state;
    for (int is_k = 0; is_k < 2; is_k++) {
        codec_case(is_k, 64, 50, 32, 2, 32);
        codec_case(is_k, 64, 33, 19, 4, 32);
        codec_case(is_k, 64, 40, 19, 1, 8);
        codec_case(is_k, 130, 20, 65, 2, 16);
        codec_case(is_k, 64, 10, 0, 2, 32);
        codec_case(is_k, 64, 10, 64, 4, 32);
    }
}

static void cache_case(const char *spec, const char *alone) {
    int nh = 6, nkv = 2, G = 3, d = 64, n = 500;
    kvc_cache_shape shape = {.n_layers = 1, .n_heads = nh, .n_kv_heads = nkv, .head_dim = d, .max_tokens = 1024};
    kvc_cache *c, *c2;
    assert_int_equal(kvc_cache_create(&shape, spec, NULL, &c), KVC_OK);
    assert_int_equal(kvc_cache_create(&shape, alone, NULL, &c2), KVC_OK);
    float *k = malloc(sizeof(float) * n * nkv * d), *v = malloc(sizeof(float) * n * nkv * d);
    kvc_synth_kv(nkv, d, 0, n, 9, k, v);
    assert_int_equal(kvc_cache_append_n(c, 0, n, k, v, NULL), KVC_OK);
    assert_int_equal(kvc_cache_append_n(c2, 0, n, k, v, NULL), KVC_OK);
    float q[6 * 64], out[6 * 64], ref[3 * 64];
    for (int i = 0; i < nh * d; i++) q[i] = frand();
    assert_int_equal(kvc_cache_attend(c, 0, q, out), KVC_OK);
    for (int h = 0; h < nkv; h++) {
        assert_int_equal(kvc_attend_reference(kvc_cache_stream(c, 0, h), q + h * G * d, G, ref), KVC_OK);
        for (int i = 0; i < G * d; i++) assert_true(fabs(out[h * G * d + i] - ref[i]) <= 3e-5 * (1 + fabs(ref[i])));
    }
    kvc_cache_stats a, b;
    kvc_cache_stats_get(c, &a);
    kvc_cache_stats_get(c2, &b);
    assert_true(a.payload_bytes + a.meta_bytes < b.payload_bytes + b.meta_bytes);
    kvc_cache_free(c);
    kvc_cache_free(c2);
    free(k), free(v);
}

static void test_through_cache(void **state) {
    (void)state;
    cache_case("mustafar:k=0.5,v=0.5+kivi:bits=2", "mustafar:k=0.5,v=0.5");
    cache_case("mustafar:k=0.7,v=0.7+kivi:bits=4,group=32", "mustafar:k=0.7,v=0.7");
    cache_case("mustafar:k=0.7,v=0+kivi:bits=2", "mustafar:k=0.7,v=0");
    cache_case("mustafar:k=0,v=0.7+kivi:bits=4", "mustafar:k=0,v=0.7");
}

static void test_bad_bits(void **state) {
    (void)state;
    kvc_cache_shape shape = {.n_layers = 1, .n_heads = 2, .n_kv_heads = 1, .head_dim = 64, .max_tokens = 64};
    kvc_cache *c = NULL;
    assert_int_equal(kvc_cache_create(&shape, "mustafar:k=0.5+kivi:bits=3", NULL, &c), KVC_ERR_ARG);
    assert_non_null(strstr(kvc_last_error(), "bits 3"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codecs),
        cmocka_unit_test(test_through_cache),
        cmocka_unit_test(test_bad_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
