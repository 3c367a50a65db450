/* The quant_k / quant_v codecs (src/kv/codec/quant.c) through the codec
 * table: decode round-trips within the quantization bound; qk over arbitrary
 * ranges (partial tiles, several ranges, G = 1..20 heads) equals the dot
 * products with the decoded keys; pv equals the probability-weighted sum of
 * the decoded values; byte counts match the layout; bad cfgs are rejected.
 *
 * Error budget for qk / pv against decode-then-dot in double: 1e-5 * sum of
 * |weight| * 2 max|element| (the kernel sums weight*scale*code and weight*min
 * apart, each bounded by 2 max|element|) (f32 accumulation in a different order, <= 64 channels or
 * <= 300 tokens per sum). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kv/codec/quant.h"

static uint64_t rng = 0x1234567887654321ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float gauss(void) {
    float u = ((float)rnd() + 1.0f) / 4294967297.0f, v = (float)rnd() / 4294967296.0f;
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

static void fill(float *x, int n, int dim, int ld, int outliers) {
    for (int t = 0; t < n; t++)
        for (int d = 0; d < ld; d++)
            x[t * ld + d] = d < dim ? gauss() * (outliers && d % 13 == 0 ? 20.0f : 1.0f) : NAN;
}

static void check_codec(int bits, int group, int dim, int n) {
    kvc_quant_cfg cfg = {bits, group, 0};
    kvc_codec kc = {&kvc_codec_quant_k, dim, &cfg}, vc = {&kvc_codec_quant_v, dim, &cfg};
    int ld = dim + 3;
    float *k = malloc(sizeof(float) * (n + 1) * ld), *v = malloc(sizeof(float) * (n + 1) * ld);
    fill(k, n, dim, ld, 1);
    fill(v, n, dim, ld, 0);
    void *kb, *vb;
    assert_int_equal(kc.ops->encode(&kc, k, n, ld, &kb), KVC_OK);
    assert_int_equal(vc.ops->encode(&vc, v, n, ld, &vb), KVC_OK);
    assert_int_equal(kc.ops->count(&kc, kb), n);
    assert_int_equal(vc.ops->count(&vc, vb), n);

    /* decode: every value within the per-row bound (scale/2 of its row is at
     * most range/qmax/2; the 3-bit eleventh slot may clamp) */
    float *kd = malloc(sizeof(float) * (n + 1) * dim), *vd = malloc(sizeof(float) * (n + 1) * dim);
    kc.ops->decode(&kc, kb, 0, n, kd, dim);
    vc.ops->decode(&vc, vb, 0, n, vd, dim);
    if (bits != 3) {
        for (int d = 0; d < dim; d++) { /* K: per channel within each group of tokens */
            for (int t0 = 0; t0 < n; t0 += group) {
                float mn = INFINITY, mx = -INFINITY;
                for (int t = t0; t < n && t < t0 + group; t++) {
                    mn = fminf(mn, k[t * ld + d]);
                    mx = fmaxf(mx, k[t * ld + d]);
                }
                float tol = (mx - mn) / ((1 << bits) - 1) * 0.5f * 1.01f + 1e-3f * (fabsf(mx) + fabsf(mn));
                for (int t = t0; t < n && t < t0 + group; t++)
                    assert_true(fabsf(kd[t * dim + d] - k[t * ld + d]) <= tol);
            }
        }
        for (int t = 0; t < n; t++) { /* V: per token within each group of channels */
            for (int c0 = 0; c0 < dim; c0 += group) {
                float mn = INFINITY, mx = -INFINITY;
                for (int d = c0; d < dim && d < c0 + group; d++) {
                    mn = fminf(mn, v[t * ld + d]);
                    mx = fmaxf(mx, v[t * ld + d]);
                }
                float tol = (mx - mn) / ((1 << bits) - 1) * 0.5f * 1.01f + 1e-3f * (fabsf(mx) + fabsf(mn));
                for (int d = c0; d < dim && d < c0 + group; d++)
                    assert_true(fabsf(vd[t * dim + d] - v[t * ld + d]) <= tol);
            }
        }
    }
    /* partial decode matches the full one */
    if (n > 3) {
        float *part = malloc(sizeof(float) * n * dim);
        kc.ops->decode(&kc, kb, 1, n - 2, part, dim);
        assert_memory_equal(part, kd + dim, sizeof(float) * (n - 3) * dim);
        vc.ops->decode(&vc, vb, 2, n - 1, part, dim);
        assert_memory_equal(part, vd + 2 * dim, sizeof(float) * (n - 3) * dim);
        free(part);
    }

    /* qk / pv over random ranges */
    double *kmax = calloc((size_t)dim, sizeof(double));
    for (int t = 0; t < n; t++)
        for (int d = 0; d < dim; d++) kmax[d] = fmax(kmax[d], fabs(kd[t * dim + d]));
    for (int rep = 0; rep < 6; rep++) {
        int G = 1 + (int)(rnd() % 20);
        kvc_range rg[4];
        int nr = 1 + (int)(rnd() % 4), tot = 0;
        for (int i = 0; i < nr; i++) {
            int a = (int)(rnd() % (n + 1)), b = (int)(rnd() % (n + 1));
            if (rep == 0 && i == 0) a = 0, b = n; /* the whole chunk */
            rg[i].begin = a < b ? a : b;
            rg[i].end = a < b ? b : a;
            tot += rg[i].end - rg[i].begin;
        }
        int ldq = dim + 1, lds = tot + 2, ldo = dim + 5;
        float *q = malloc(sizeof(float) * G * ldq), *s = malloc(sizeof(float) * G * lds);
        float *p = malloc(sizeof(float) * G * lds), *o = malloc(sizeof(float) * G * ldo);
        for (int i = 0; i < G * ldq; i++) q[i] = gauss();
        for (int i = 0; i < G * lds; i++) s[i] = 12345.0f, p[i] = (float)(rnd() % 1000) / 1000.0f;
        for (int i = 0; i < G * ldo; i++) o[i] = 0.5f;
        kvc_codec_qk_ranges(&kc, kb, q, G, ldq, rg, nr, s, lds);
        kvc_codec_pv_ranges(&vc, vb, p, G, lds, rg, nr, o, ldo);
        for (int g = 0; g < G; g++) {
            int j = 0;
            double *acc = calloc((size_t)dim, sizeof(double)), *mag = calloc((size_t)dim, sizeof(double));
            for (int i = 0; i < nr; i++) {
                for (int t = rg[i].begin; t < rg[i].end; t++, j++) {
                    /* the kernels sum q*scale*code and q*min separately: both
                     * terms are bounded by twice the largest |element| of the row */
                    double dot = 0, m = 0, vmax = 0;
                    for (int d = 0; d < dim; d++) vmax = fmax(vmax, fabs(vd[t * dim + d]));
                    for (int d = 0; d < dim; d++) {
                        dot += (double)q[g * ldq + d] * kd[t * dim + d];
                        m += fabs((double)q[g * ldq + d]) * 2.0 * kmax[d];
                        acc[d] += (double)p[g * lds + j] * vd[t * dim + d];
                        mag[d] += fabs((double)p[g * lds + j]) * 2.0 * vmax;
                    }
                    if (fabs(s[g * lds + j] - dot) > 1e-5 * m + 1e-6)
                        fail_msg("qk bits %d group %d n %d g %d token %d: %g vs %g", bits, group, n,
                                 g, t, s[g * lds + j], dot);
                }
            }
            assert_true(s[g * lds + tot] == 12345.0f); /* nothing past the ranges */
            for (int d = 0; d < dim; d++)
                if (fabs(o[g * ldo + d] - 0.5 - acc[d]) > 1e-5 * mag[d] + 1e-5)
                    fail_msg("pv bits %d group %d n %d g %d ch %d: %g vs %g", bits, group, n, g, d,
                             o[g * ldo + d] - 0.5, acc[d]);
            for (int d = dim; d < ldo; d++) assert_true(o[g * ldo + d] == 0.5f);
            free(acc);
            free(mag);
        }
        free(q);
        free(s);
        free(p);
        free(o);
    }

    free(kmax);
    /* bytes: payload is exactly the code words, meta the f16 pairs + header */
    uint64_t pk, mk, pv, mv;
    kc.ops->bytes(&kc, kb, &pk, &mk);
    vc.ops->bytes(&vc, vb, &pv, &mv);
    int vpw = kvc_quant_vpw(bits);
    uint64_t want_pk = 0;
    for (int t0 = 0; t0 < n; t0 += group) {
        int tn = n - t0 < group ? n - t0 : group;
        want_pk += (uint64_t)((tn + vpw - 1) / vpw) * 4 * dim;
    }
    assert_int_equal(pk, want_pk);
    assert_int_equal(mk, (uint64_t)((n + group - 1) / group) * 4 * dim + 24);
    uint64_t want_pv = 0;
    for (int c0 = 0; c0 < dim; c0 += group) {
        int cw = dim - c0 < group ? dim - c0 : group;
        want_pv += (uint64_t)((cw + vpw - 1) / vpw) * 4 * n;
    }
    assert_int_equal(pv, want_pv);
    kc.ops->free(&kc, kb);
    vc.ops->free(&vc, vb);
    free(k);
    free(v);
    free(kd);
    free(vd);
}

static void test_codec_all_shapes(void **state) {
    (void)state;
    int ns[] = {0, 1, 31, 32, 33, 64, 100, 257};
    int groups[] = {32, 16, 64, 11, 128};
    int dims[] = {64, 48, 128, 7};
    for (int bits = 1; bits <= 4; bits++)
        for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
            for (size_t b = 0; b < sizeof groups / sizeof groups[0]; b++)
                for (size_t c = 0; c < sizeof dims / sizeof dims[0]; c++)
                    check_codec(bits, groups[b], dims[c], ns[a]);
}

static void test_codec_bits_per_element(void **state) {
    (void)state;
    /* group 32, head_dim 64: codes b bits (3-bit: 3 words per 32 values = 3
     * bits), plus 32 bits of min+scale per 32 values = 1 bit */
    for (int bits = 1; bits <= 4; bits++) {
        kvc_quant_cfg cfg = {bits, 32, 0};
        uint64_t p, m;
        kvc_quant_k_bytes(&cfg, 64, 4096, &p, &m);
        assert_int_equal(p * 8, (uint64_t)bits * 64 * 4096);
        assert_int_equal(m - 24, 64ull * 4096 / 32 * 4);
        kvc_quant_v_bytes(&cfg, 64, 4096, &p, &m);
        assert_int_equal(p * 8, (uint64_t)bits * 64 * 4096);
        assert_int_equal(m - 24, 64ull * 4096 / 32 * 4);
    }
}

static void test_bad_cfg(void **state) {
    (void)state;
    kvc_quant_cfg bad[] = {{0, 32, 0}, {5, 32, 0}, {8, 32, 0}, {2, 0, 0}, {2, 129, 0}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kvc_codec kc = {&kvc_codec_quant_k, 64, &bad[i]};
        void *blob = NULL;
        float x[64] = {0};
        assert_int_equal(kc.ops->encode(&kc, x, 1, 64, &blob), KVC_ERR_ARG);
        assert_null(blob);
        assert_non_null(strstr(kvc_last_error(), bad[i].bits < 1 || bad[i].bits > 4 ? "bits" : "group"));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_all_shapes),
        cmocka_unit_test(test_codec_bits_per_element),
        cmocka_unit_test(test_bad_cfg),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
