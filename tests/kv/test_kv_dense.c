/* Dense codecs and their kernels (codec/dense.h, softmax.h): every codec
 * round-trips; the active kernels (scalar, AVX2 or AVX-512 per KVC_ISA) equal
 * the scalar references on random and adversarial inputs (zeros, large
 * outliers, -inf scores, odd n / d / G, strides).
 *
 * Error budgets (the kernels only reorder f32 sums):
 *   qk:  |s - s_ref| <= 1e-5 * sum_j |q_j k_j| + 1e-30
 *   pv:  |o - o_ref| <= 1e-5 * (|o_0| + sum_i |p_i v_i|) + 1e-30
 *   max: exact;  exp: |e - expf| <= 4e-7 * expf + 1e-37 per element (Cephes
 *   polynomial, < 2 ulp), sum within 1e-6 relative. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/f16.h"
#include "kv/codec/codec.h"
#include "kv/codec/dense.h"
#include "kv/softmax.h"

static uint64_t rs = 99;
static float frand(void) {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rs >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static const kvc_dense_type types[] = {KVC_DENSE_F32, KVC_DENSE_F16, KVC_DENSE_BF16};

static void pack(kvc_dense_type t, const float *x, size_t n, void *out) {
    for (size_t i = 0; i < n; i++) {
        if (t == KVC_DENSE_F32) ((float *)out)[i] = x[i];
        if (t == KVC_DENSE_F16) ((kvc_f16 *)out)[i] = kvc_f32_to_f16(x[i]);
        if (t == KVC_DENSE_BF16) ((kvc_bf16 *)out)[i] = kvc_f32_to_bf16(x[i]);
    }
}
static float unpack(kvc_dense_type t, const void *x, size_t i) {
    if (t == KVC_DENSE_F16) return kvc_f16_to_f32(((const kvc_f16 *)x)[i]);
    if (t == KVC_DENSE_BF16) return kvc_bf16_to_f32(((const kvc_bf16 *)x)[i]);
    return ((const float *)x)[i];
}

/* kind: 0 random, 1 zeros, 2 outliers, 3 mixed magnitudes */
static void fill(float *x, size_t n, int kind, float big) {
    for (size_t i = 0; i < n; i++) {
        float r = frand();
        x[i] = kind == 1 ? 0.0f : kind == 2 ? (i % 17 == 3 ? big * r : r) : kind == 3 ? r * powf(10.0f, 3.0f * frand()) : r;
    }
}

static void test_kernels_match_reference(void **state) {
    (void)state;
    kvc_codecs_init();
    const int ns[] = {0, 1, 3, 4, 5, 8, 17, 63, 256};
    const int ds[] = {1, 7, 8, 16, 33, 64, 80, 128};
    const int Gs[] = {1, 2, 3, 4, 5, 6, 7, 8};
    for (int ti = 0; ti < 3; ti++) {
        kvc_dense_type t = types[ti];
        float big = t == KVC_DENSE_F16 ? 6e4f : 1e15f;
        for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
            for (size_t b = 0; b < sizeof ds / sizeof *ds; b++)
                for (size_t c = 0; c < sizeof Gs / sizeof *Gs; c++)
                    for (int kind = 0; kind < 4; kind++) {
                        int n = ns[a], d = ds[b], G = Gs[c], ldq = d + 3, lds = n + 5, ldo = d + 1;
                        float *xf = malloc((size_t)(n + 1) * d * 4);
                        void *x = malloc((size_t)(n + 1) * d * 4);
                        float *q = malloc((size_t)G * ldq * 4), *p = malloc((size_t)G * lds * 4);
                        float *s1 = malloc((size_t)G * lds * 4), *s2 = malloc((size_t)G * lds * 4);
                        float *o1 = malloc((size_t)G * ldo * 4), *o2 = malloc((size_t)G * ldo * 4);
                        fill(xf, (size_t)n * d, kind, big);
                        pack(t, xf, (size_t)n * d, x);
                        fill(q, (size_t)G * ldq, kind == 1 ? 0 : kind, 10.0f);
                        for (int i = 0; i < G * lds; i++) p[i] = kind == 1 ? 0.0f : fabsf(frand());
                        for (int i = 0; i < G * ldo; i++) o1[i] = o2[i] = frand();
                        for (int i = 0; i < G * lds; i++) s1[i] = s2[i] = 7.0f; /* untouched past n */
                        kvc_dense_k.qk[t](x, n, d, q, G, ldq, s1, lds);
                        kvc_dense_ref.qk[t](x, n, d, q, G, ldq, s2, lds);
                        kvc_dense_k.pv[t](x, n, d, p, G, lds, o1, ldo);
                        kvc_dense_ref.pv[t](x, n, d, p, G, lds, o2, ldo);
                        for (int g = 0; g < G; g++) {
                            for (int i = 0; i < lds; i++) {
                                double mag = 0;
                                for (int j = 0; j < d && i < n; j++) mag += fabs((double)q[g * ldq + j] * unpack(t, x, (size_t)i * d + j));
                                double e = fabs((double)s1[g * lds + i] - s2[g * lds + i]);
                                if (!(e <= 1e-5 * mag + 1e-30))
                                    fail_msg("qk %s n=%d d=%d G=%d kind=%d g=%d i=%d: %g vs %g", kvc_codec_dense(t)->name,
                                             n, d, G, kind, g, i, s1[g * lds + i], s2[g * lds + i]);
                            }
                            for (int j = 0; j < ldo; j++) {
                                double mag = fabs(o2[g * ldo + j]);
                                for (int i = 0; i < n && j < d; i++) mag += fabs((double)p[g * lds + i] * unpack(t, x, (size_t)i * d + j));
                                double e = fabs((double)o1[g * ldo + j] - o2[g * ldo + j]);
                                if (!(e <= 1e-5 * mag + 1e-30))
                                    fail_msg("pv %s n=%d d=%d G=%d kind=%d g=%d j=%d: %g vs %g", kvc_codec_dense(t)->name,
                                             n, d, G, kind, g, j, o1[g * ldo + j], o2[g * ldo + j]);
                            }
                        }
                        /* conversion to f32 is exact */
                        kvc_dense_k.cvt[t](x, (size_t)n * d, xf);
                        for (size_t i = 0; i < (size_t)n * d; i++) {
                            float want = unpack(t, x, i);
                            assert_memory_equal(&xf[i], &want, 4);
                        }
                        free(xf); free(x); free(q); free(p); free(s1); free(s2); free(o1); free(o2);
                    }
    }
}

static void test_softmax_kernels(void **state) {
    (void)state;
    kvc_codecs_init();
    for (int n = 0; n < 70; n++)
        for (int kind = 0; kind < 3; kind++) {
            float s1[80], s2[80];
            for (int i = 0; i < n; i++) {
                s1[i] = kind == 0 ? 30.0f * frand() : kind == 1 ? 0.0f : (i % 5 == 0 ? -INFINITY : 200.0f * frand());
                s2[i] = s1[i];
            }
            float m1 = kvc_softmax_k.max(s1, n), m2 = kvc_softmax_ref.max(s2, n);
            assert_true(m1 == m2 || (isinf(m1) && isinf(m2)));
            if (!isfinite(m2)) continue;
            float sum1 = kvc_softmax_k.exp_sum(s1, n, m1), sum2 = kvc_softmax_ref.exp_sum(s2, n, m2);
            for (int i = 0; i < n; i++)
                if (!(fabsf(s1[i] - s2[i]) <= 4e-7f * s2[i] + 1e-37f))
                    fail_msg("exp n=%d kind=%d i=%d: %.9g vs %.9g", n, kind, i, s1[i], s2[i]);
            assert_true(fabsf(sum1 - sum2) <= 1e-6f * sum2);
        }
    /* dense sweep of exp over [-90, 0] */
    float x[1000], y[1000];
    for (int i = 0; i < 1000; i++) x[i] = y[i] = -90.0f * (float)i / 999.0f;
    kvc_softmax_k.exp_sum(x, 1000, 0.0f);
    for (int i = 0; i < 1000; i++) {
        float e = expf(y[i]);
        if (y[i] < -87.3f) e = x[i]; /* flushed to zero below the clamp: either is fine */
        if (!(fabsf(x[i] - e) <= 4e-7f * e + 1e-37f)) fail_msg("exp(%g) = %.9g, expf %.9g", y[i], x[i], e);
    }
}

static void test_codec_round_trip(void **state) {
    (void)state;
    kvc_codecs_init();
    for (int ti = 0; ti < 3; ti++) {
        kvc_dense_type t = types[ti];
        const kvc_codec_ops *ops = kvc_codec_dense(t);
        assert_ptr_equal(kvc_codec_find(ops->name), ops);
        for (int d = 1; d <= 130; d += 43) {
            kvc_codec c = {.ops = ops, .dim = d, .cfg = NULL};
            int n = 100, ld = d + 2;
            float *x = malloc((size_t)n * ld * 4), *y = malloc((size_t)n * d * 4);
            fill(x, (size_t)n * ld, 3, 0);
            x[5] = 0.0f;
            x[6] = -0.0f;
            void *blob = NULL;
            assert_int_equal(ops->encode(&c, x, 40, ld, &blob), KVC_OK);
            assert_int_equal(ops->append(&c, blob, x + (size_t)40 * ld, 60, ld), KVC_OK);
            assert_int_equal(ops->count(&c, blob), n);
            ops->decode(&c, blob, 0, n, y, d);
            for (int i = 0; i < n; i++)
                for (int j = 0; j < d; j++) {
                    float want = x[(size_t)i * ld + j];
                    if (t == KVC_DENSE_F16) want = kvc_f16_to_f32(kvc_f32_to_f16(want));
                    if (t == KVC_DENSE_BF16) want = kvc_bf16_to_f32(kvc_f32_to_bf16(want));
                    assert_memory_equal(&y[(size_t)i * d + j], &want, 4);
                }
            uint64_t pay, meta;
            ops->bytes(&c, blob, &pay, &meta);
            assert_int_equal(pay, (uint64_t)n * d * (t == KVC_DENSE_F32 ? 4 : 2));
            assert_true((ops->view_f32(&c, blob) != NULL) == (t == KVC_DENSE_F32));
            /* qk over two ranges equals the concatenation */
            float q[2 * 130], s[2 * 100], s2[2 * 100];
            fill(q, (size_t)2 * d, 0, 0);
            kvc_range r[2] = {{3, 10}, {50, 51}};
            kvc_codec_qk_ranges(&c, blob, q, 2, d, r, 2, s, 100);
            kvc_dense_k.qk[t]((const char *)kvc_dense_rows(blob) + (size_t)3 * d * (t ? 2 : 4), 7, d, q, 2, d, s2, 100);
            kvc_dense_k.qk[t]((const char *)kvc_dense_rows(blob) + (size_t)50 * d * (t ? 2 : 4), 1, d, q, 2, d, s2 + 7, 100);
            for (int g = 0; g < 2; g++) assert_memory_equal(s + g * 100, s2 + g * 100, 8 * 4);
            ops->drop_front(&c, blob, 30);
            assert_int_equal(ops->count(&c, blob), n - 30);
            ops->decode(&c, blob, 0, 1, y, d);
            float want = x[(size_t)30 * ld];
            if (t == KVC_DENSE_F16) want = kvc_f16_to_f32(kvc_f32_to_f16(want));
            if (t == KVC_DENSE_BF16) want = kvc_bf16_to_f32(kvc_f32_to_bf16(want));
            assert_memory_equal(&y[0], &want, 4);
            ops->free(&c, blob);
            free(x);
            free(y);
        }
    }
}

/* The narrowing kernels (append) equal the scalar rounding bit for bit:
 * ties, subnormals, overflow to inf, NaNs with any payload, ragged n. */
static void test_put_kernels(void **state) {
    (void)state;
    kvc_codecs_init();
    const uint32_t special[] = {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fffffffu, 0x7f800000u,
                                0xff800000u, 0x477ff000u, 0x477fefffu, 0x33000000u, 0x33800001u,
                                0x38800000u, 0x387fffffu, 0x80000000u, 0x3f801000u, 0x3f803000u};
    enum { N = 203 };
    float x[N];
    for (int i = 0; i < N; i++) {
        uint32_t u = i < 15 ? special[i] : (uint32_t)rand() * 2654435761u;
        memcpy(&x[i], &u, 4);
    }
    for (int t = 0; t < KVC_DENSE_N_TYPES; t++)
        for (int n = 0; n <= N; n += 29) {
            uint16_t a[2 * N], b[2 * N];
            memset(a, 0, sizeof a);
            memset(b, 0, sizeof b);
            kvc_dense_ref.put[t](x, (size_t)n, a);
            kvc_dense_k.put[t](x, (size_t)n, b);
            assert_memory_equal(a, b, sizeof a);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernels_match_reference),
        cmocka_unit_test(test_softmax_kernels),
        cmocka_unit_test(test_codec_round_trip),
        cmocka_unit_test(test_put_kernels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
