/* The packed two-D format (src/kv/codec/packed.c, MosaicKV §5.1): packing
 * round-trips the kept groups exactly as f16 and zeroes the others; the kept
 * groups are those of largest energy; the active kernels (scalar, AVX2 or
 * AVX-512 per KVC_ISA) agree with the scalar reference and with a double
 * computation over the decoded vectors for group sizes 1, 2, 4, GQA groups
 * 1..8, ragged token counts and range starts, zero and tied vectors; bad
 * parameters are refused with the field named.
 *
 * Tolerance: 1e-5 relative (f32 sums in another order against double). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/f16.h"
#include "kv/codec/packed.h"

static uint64_t rng = 777;
static float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

/* kind 0 random, 1 all zero, 2 ties (equal magnitudes), 3 a few outliers */
static void fill(float *x, int n, int d, int kind) {
    for (int i = 0; i < n * d; i++) {
        float r = frand();
        x[i] = kind == 1 ? 0.0f : kind == 2 ? (r < 0 ? -0.5f : 0.5f) : kind == 3 && (i % 17) == 0 ? 40.0f * r : r;
    }
}

static void *encode(int d, int group, int keep, const float *x, int n) {
    kvc_packed_cfg cfg = {.group = group, .keep = keep};
    kvc_codec c = {.ops = &kvc_codec_packed_f16, .dim = d, .cfg = &cfg};
    void *blob;
    assert_int_equal(c.ops->encode(&c, x, n, d, &blob), KVC_OK);
    return blob;
}

static void test_roundtrip_keeps_top_groups(void **state) {
    (void)state;
    const int dims[] = {48, 64, 96, 128, 36};
    const int groups[] = {1, 2, 4};
    float x[8 * 128], y[8 * 128];
    for (int di = 0; di < 5; di++)
        for (int gi = 0; gi < 3; gi++)
            for (int kind = 0; kind < 4; kind++) {
                int d = dims[di], g = groups[gi], ng = d / g;
                if (d % g) continue;
                const int keeps[] = {1, ng / 4 > 0 ? ng / 4 : 1, ng};
                for (int ki = 0; ki < 3; ki++) {
                    int keep = keeps[ki], n = 7;
                    fill(x, n, d, kind);
                    void *blob = encode(d, g, keep, x, n);
                    kvc_codec c = {.ops = &kvc_codec_packed_f16, .dim = d};
                    assert_int_equal(c.ops->count(&c, blob), n);
                    c.ops->decode(&c, blob, 0, n, y, d);
                    for (int t = 0; t < n; t++) {
                        const float *xt = x + t * d, *yt = y + t * d;
                        int kept = 0;
                        double min_kept = INFINITY, max_dropped = 0;
                        for (int gr = 0; gr < ng; gr++) {
                            double e = 0;
                            int is_kept = 0;
                            for (int j = 0; j < g; j++) e += (double)xt[gr * g + j] * xt[gr * g + j];
                            /* a kept group holds exactly the f16 of the input */
                            for (int j = 0; j < g; j++) is_kept |= yt[gr * g + j] != 0.0f;
                            if (!is_kept && e > 0) {
                                for (int j = 0; j < g; j++) assert_true(yt[gr * g + j] == 0.0f);
                                if (e > max_dropped) max_dropped = e;
                                continue;
                            }
                            if (is_kept) {
                                kept++;
                                for (int j = 0; j < g; j++)
                                    assert_true(yt[gr * g + j] == kvc_f16_to_f32(kvc_f32_to_f16(xt[gr * g + j])));
                                if (e < min_kept) min_kept = e;
                            }
                        }
                        assert_true(kept <= keep);
                        if (kept > 0) assert_true(min_kept >= max_dropped);
                    }
                    uint64_t pay, meta;
                    c.ops->bytes(&c, blob, &pay, &meta);
                    assert_int_equal(pay, (uint64_t)n * keep * g * 2);
                    assert_true(meta >= (uint64_t)n * kvc_packed_words(d, g) * 4);
                    c.ops->free(&c, blob);
                }
            }
}

static void test_kernels_match_reference(void **state) {
    (void)state;
    kvc_codecs_init();
    const int dims[] = {48, 64, 96, 128, 20, 52}; /* 20, 52: a last piece and word that are short */
    const int groups[] = {1, 2, 4};
    int nmax = 70;
    float *x = malloc(sizeof(float) * nmax * 128), *dec = malloc(sizeof(float) * nmax * 128);
    float q[8 * 128], p[8 * 70], s1[8 * 70], s2[8 * 70], o1[8 * 128], o2[8 * 128];
    for (int di = 0; di < 6; di++)
        for (int gi = 0; gi < 3; gi++)
            for (int kind = 0; kind < 5; kind++)
                for (int G = 1; G <= 8; G++) {
                    int d = dims[di], g = groups[gi], ng = d / g;
                    /* kind 4: at the most that the AVX2 q·k with the heads
                     * in the lanes takes (a third of the channels in groups
                     * of 1, half in larger groups), or one fewer */
                    int few = (g == 1 ? d / 3 : d / 2) / g - G % 2;
                    int keep = kind == 2   ? ng
                               : kind == 4 ? (few > 0 ? few : 1)
                                           : 1 + (int)((unsigned)(frand() + 1.0f) * 1000) % ng;
                    int n = 1 + (di * 13 + gi * 7 + kind * 5 + G) % nmax;
                    fill(x, n, d, kind);
                    void *blob = encode(d, g, keep, x, n);
                    kvc_codec c = {.ops = &kvc_codec_packed_f16, .dim = d};
                    c.ops->decode(&c, blob, 0, n, dec, d);
                    for (int i = 0; i < G * d; i++) q[i] = frand();
                    for (int i = 0; i < G * nmax; i++) p[i] = frand() > 0.5f ? 0.0f : frand() + 1.0f;
                    for (int b = 0; b < n; b += 1 + n / 3) { /* ragged starts */
                        int m = n - b;
                        kvc_packed_view v = kvc_packed_blob_view(blob, b);
                        kvc_packed_k.qk(&v, m, q, G, d, s1, nmax);
                        kvc_packed_ref.qk(&v, m, q, G, d, s2, nmax);
                        for (int h = 0; h < G; h++)
                            for (int t = 0; t < m; t++) {
                                double r = 0, ra = 0; /* ra: the f32 sums' error scales with it */
                                for (int j = 0; j < d; j++) {
                                    double e = (double)q[h * d + j] * dec[(size_t)(b + t) * d + j];
                                    r += e, ra += fabs(e);
                                }
                                assert_true(fabs(s1[h * nmax + t] - r) <= 1e-5 * (1 + ra));
                                assert_true(fabs(s2[h * nmax + t] - r) <= 1e-5 * (1 + ra));
                            }
                        for (int i = 0; i < G * d; i++) o1[i] = o2[i] = 0.25f;
                        kvc_packed_k.pv(&v, m, p, G, nmax, o1, d);
                        kvc_packed_ref.pv(&v, m, p, G, nmax, o2, d);
                        for (int h = 0; h < G; h++)
                            for (int j = 0; j < d; j++) {
                                double r = 0.25, ra = 0.25;
                                for (int t = 0; t < m; t++) {
                                    double e = (double)p[h * nmax + t] * dec[(size_t)(b + t) * d + j];
                                    r += e, ra += fabs(e);
                                }
                                assert_true(fabs(o1[h * d + j] - r) <= 1e-5 * (1 + ra));
                                assert_true(fabs(o2[h * d + j] - r) <= 1e-5 * (1 + ra));
                            }
                    }
                    c.ops->free(&c, blob);
                }
    free(x), free(dec);
}

static void test_bad_cfg_refused(void **state) {
    (void)state;
    kvc_packed_cfg bad[] = {{3, 4}, {1, 0}, {2, 33}, {4, -1}};
    for (int i = 0; i < 4; i++) assert_int_equal(kvc_packed_cfg_check(&bad[i], 64), KVC_ERR_ARG);
    kvc_packed_cfg ok = {4, 16};
    assert_int_equal(kvc_packed_cfg_check(&ok, 64), KVC_OK);
    assert_int_equal(kvc_packed_cfg_check(&ok, 66), KVC_ERR_ARG);  /* not a multiple of 4 */
    assert_int_equal(kvc_packed_cfg_check(&ok, 0), KVC_ERR_ARG);
    assert_int_equal(kvc_packed_cfg_check(&ok, KVC_PACKED_MAX_D + 4), KVC_ERR_ARG);
    kvc_codec c = {.ops = &kvc_codec_packed_f16, .dim = 64, .cfg = NULL};
    void *blob;
    float x[64] = {0};
    assert_int_equal(c.ops->encode(&c, x, 1, 64, &blob), KVC_ERR_ARG);
    assert_null(blob);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_keeps_top_groups),
        cmocka_unit_test(test_kernels_match_reference),
        cmocka_unit_test(test_bad_cfg_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
