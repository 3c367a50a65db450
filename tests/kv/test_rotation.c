/* The per-segment rotation transform (src/kv/xform/rotation.c): the
 * eigenvector basis of an accumulated second moment is orthonormal and sorted
 * by decreasing eigenvalue and diagonalises the matrix; the incremental
 * accumulation equals a batch one; the channel-order basis is a permutation by
 * energy; with no truncation, restoring the rotated rows gives the original
 * ones up to the f16 rounding of the stored bases, and attention through the
 * transform equals plain attention over the restored keys and values; every
 * map equals a double product with the f16-rounded basis; bad sizes are
 * refused.
 *
 * Tolerances: orthonormality 1e-5 (f32 basis from a double eigensolver);
 * restored rows 4e-3 of the row's norm (bases rounded to f16, 2^-11 per
 * element); attention 1e-4 relative (f32 maps of q, k and o against double
 * over the restored rows, which carry the same rounded bases). */
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
#include "kv/codec/dense.h"
#include "kv/xform/rotation.h"

static uint64_t rng = 12345;
static float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

/* n correlated rows of d: a few strong directions plus noise. */
static void correlated(float *x, int n, int d) {
    float dir[4][512];
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < d; c++) dir[r][c] = frand();
    for (int t = 0; t < n; t++)
        for (int c = 0; c < d; c++) {
            float s = 0.1f * frand();
            for (int r = 0; r < 4; r++) s += (4 - r) * dir[r][c] * ((float)((t * 7 + r * 13) % 11) / 11.0f - 0.5f);
            x[(size_t)t * d + c] = s;
        }
}

static void check_basis(int d, int n) {
    float *x = malloc(sizeof(float) * (size_t)n * d), *rot = malloc(sizeof(float) * (size_t)d * d);
    double *ev = malloc(sizeof(double) * d);
    correlated(x, n, d);
    kvc_cov c, c2;
    assert_int_equal(kvc_cov_init(&c, d), KVC_OK);
    assert_int_equal(kvc_cov_init(&c2, d), KVC_OK);
    for (int t = 0; t < n; t++) kvc_cov_add(&c, x + (size_t)t * d, 1, d); /* one token at a time */
    kvc_cov_add(&c2, x, n, d);                                            /* the batch */
    assert_int_equal(c.n, n);
    for (int i = 0; i < d; i++)
        for (int j = i; j < d; j++)
            assert_true(fabs(c.s[i * d + j] - c2.s[i * d + j]) <= 1e-9 * (1 + fabs(c2.s[i * d + j])));
    assert_int_equal(kvc_cov_eigen(&c, rot, ev), KVC_OK);
    for (int a = 0; a < d; a++)
        for (int b = 0; b < d; b++) {
            double s = 0;
            for (int i = 0; i < d; i++) s += (double)rot[i * d + a] * rot[i * d + b];
            assert_true(fabs(s - (a == b)) <= 1e-5);
        }
    for (int j = 1; j < d; j++) assert_true(ev[j] <= ev[j - 1]);
    /* Rᵀ Σ R is diagonal with the eigenvalues on it */
    double scale = ev[0] > 0 ? ev[0] : 1;
    for (int a = 0; a < d; a += 7)
        for (int b = 0; b < d; b += 5) {
            double s = 0;
            for (int i = 0; i < d; i++)
                for (int j = 0; j < d; j++) {
                    double sij = i <= j ? c.s[i * d + j] : c.s[j * d + i];
                    s += rot[i * d + a] * sij * rot[j * d + b];
                }
            assert_true(fabs(s - (a == b ? ev[a] : 0.0)) <= 1e-4 * scale);
        }
    kvc_cov_free(&c);
    kvc_cov_free(&c2);
    free(x), free(rot), free(ev);
}

static void test_eigen_basis_orthonormal(void **state) {
    (void)state;
    check_basis(64, 300);
    check_basis(128, 1000);
    check_basis(36, 20); /* fewer tokens than channels: rank-deficient */
}

static void test_channel_order(void **state) {
    (void)state;
    int d = 48;
    kvc_cov c;
    assert_int_equal(kvc_cov_init(&c, d), KVC_OK);
    float x[48];
    for (int t = 0; t < 50; t++) {
        for (int i = 0; i < d; i++) x[i] = frand() * (float)((i * 17) % 23 + 1);
        kvc_cov_add(&c, x, 1, d);
    }
    float rot[48 * 48];
    kvc_cov_channel_order(&c, rot);
    double prev = INFINITY;
    int seen[48] = {0};
    for (int j = 0; j < d; j++) {
        int one = -1;
        for (int i = 0; i < d; i++) {
            assert_true(rot[i * d + j] == 0.0f || rot[i * d + j] == 1.0f);
            if (rot[i * d + j] == 1.0f) {
                assert_int_equal(one, -1);
                one = i;
            }
        }
        assert_true(one >= 0 && !seen[one]);
        seen[one] = 1;
        assert_true(c.s[one * d + one] <= prev);
        prev = c.s[one * d + one];
    }
    kvc_cov_free(&c);
}

/* Plain softmax attention of G queries over n original rows, double. */
static void plain_attention(const float *q, int G, const float *k, const float *v, int n, int d,
                            float *out) {
    for (int g = 0; g < G; g++) {
        double m = -INFINITY, l = 0, o[512] = {0};
        double *s = malloc(sizeof(double) * n);
        for (int t = 0; t < n; t++) {
            double a = 0;
            for (int c = 0; c < d; c++) a += (double)q[g * d + c] * k[(size_t)t * d + c];
            s[t] = a / sqrt((double)d);
            if (s[t] > m) m = s[t];
        }
        for (int t = 0; t < n; t++) {
            double p = exp(s[t] - m);
            l += p;
            for (int c = 0; c < d; c++) o[c] += p * v[(size_t)t * d + c];
        }
        for (int c = 0; c < d; c++) out[g * d + c] = (float)(o[c] / l);
        free(s);
    }
}

/* Two segments with their own rotations (no truncation), stored f32 in the
 * rotated space, plus a plain hot window: restoring gives back the original
 * rows (up to the f16 bases), and the driver's attention equals plain
 * attention over the restored rows. */
static void test_attention_through_rotation_equals_plain(void **state) {
    (void)state;
    kvc_codecs_init();
    int d = 64, G = 3, seg = 200, n = 2 * seg + 10;
    float *k = malloc(sizeof(float) * n * d), *v = malloc(sizeof(float) * n * d);
    float *kt = malloc(sizeof(float) * n * d), *vt = malloc(sizeof(float) * n * d);
    float *kd = malloc(sizeof(float) * n * d), *vd = malloc(sizeof(float) * n * d);
    float *rk = malloc(sizeof(float) * d * d), *rv = malloc(sizeof(float) * d * d);
    correlated(k, n, d);
    for (int i = 0; i < n * d; i++) v[i] = frand();
    kvc_stream *s;
    assert_int_equal(kvc_stream_create(0, 0, d, 0, &s), KVC_OK);
    kvc_codec f32 = {.ops = &kvc_codec_f32, .dim = d};
    for (int sg = 0; sg < 2; sg++) {
        const float *ks = k + (size_t)sg * seg * d, *vs = v + (size_t)sg * seg * d;
        kvc_cov ck, cv;
        assert_int_equal(kvc_cov_init(&ck, d), KVC_OK);
        assert_int_equal(kvc_cov_init(&cv, d), KVC_OK);
        kvc_cov_add(&ck, ks, seg, d);
        kvc_cov_add(&cv, vs, seg, d);
        assert_int_equal(kvc_cov_eigen(&ck, rk, NULL), KVC_OK);
        assert_int_equal(kvc_cov_eigen(&cv, rv, NULL), KVC_OK);
        kvc_xform *xf;
        assert_int_equal(kvc_rotation_create(d, rk, d, rv, d, &xf), KVC_OK);
        kvc_rotation_apply(xf, 0, ks, seg, d, kt, d);
        kvc_rotation_apply(xf, 1, vs, seg, d, vt, d);
        /* restore undoes apply, up to the f16 rounding of the bases */
        float *kds = kd + (size_t)sg * seg * d, *vds = vd + (size_t)sg * seg * d;
        xf->ops->restore(xf, 0, kt, seg, d, kds, d);
        xf->ops->restore(xf, 1, vt, seg, d, vds, d);
        for (int t = 0; t < seg; t++) {
            double nk = 0, nv = 0;
            for (int c = 0; c < d; c++) {
                nk += (double)ks[t * d + c] * ks[t * d + c];
                nv += (double)vs[t * d + c] * vs[t * d + c];
            }
            for (int c = 0; c < d; c++) {
                assert_true(fabsf(kds[t * d + c] - ks[t * d + c]) <= 4e-3 * sqrt(nk));
                assert_true(fabsf(vds[t * d + c] - vs[t * d + c]) <= 4e-3 * sqrt(nv));
            }
        }
        /* two chunks share the segment's transform */
        for (int half = 0; half < 2; half++) {
            kvc_chunk *c;
            int b = half * seg / 2;
            assert_int_equal(kvc_chunk_encode(&f32, &f32, kt + (size_t)b * d, vt + (size_t)b * d, seg / 2, d,
                                              sg * seg + b, NULL, xf, &c),
                             KVC_OK);
            assert_int_equal(kvc_stream_insert(s, s->n_chunks, c), KVC_OK);
        }
        assert_true(xf->ops->bytes(xf) >= (uint64_t)2 * d * d * sizeof(kvc_f16));
        kvc_xform_release(xf);
        kvc_cov_free(&ck);
        kvc_cov_free(&cv);
    }
    assert_int_equal(kvc_stream_hot_push(s, k + (size_t)2 * seg * d, v + (size_t)2 * seg * d, 10, d), KVC_OK);
    memcpy(kd + (size_t)2 * seg * d, k + (size_t)2 * seg * d, sizeof(float) * 10 * d);
    memcpy(vd + (size_t)2 * seg * d, v + (size_t)2 * seg * d, sizeof(float) * 10 * d);
    float q[3 * 64], out[3 * 64], ref[3 * 64];
    for (int i = 0; i < G * d; i++) q[i] = frand() * 3.0f;
    kvc_attend_ws *ws;
    assert_int_equal(kvc_attend_ws_create(&ws), KVC_OK);
    for (int split = 1; split <= 3; split++) {
        kvc_attend_req rq = {.s = s, .q = q, .out = out, .plan = {.budget = -1}};
        kvc_attend_opts o = {.G = G, .split = split};
        assert_int_equal(kvc_attend(&rq, 1, &o, NULL, ws), KVC_OK);
        plain_attention(q, G, kd, vd, n, d, ref);
        for (int i = 0; i < G * d; i++) assert_true(fabsf(out[i] - ref[i]) <= 1e-4f * (1 + fabsf(ref[i])));
    }
    kvc_attend_ws_free(ws);
    kvc_stream_free(s);
    free(k), free(v), free(kt), free(vt), free(kd), free(vd), free(rk), free(rv);
}

/* Every map of the transform (apply and restore, keys and values, the query
 * in and the output out) against a double-precision product with the
 * f16-rounded basis, for head sizes whose bases span one or many of the
 * widening tiles, with fewer kept channels than d. */
static double rounded(const float *basis, int d, int i, int j) {
    return kvc_f16_to_f32(kvc_f32_to_f16(basis[(size_t)i * d + j]));
}

static void check_map(const float *y, const float *x, int n, int kin, int kout, const float *basis,
                      int d, int forward) {
    for (int t = 0; t < n; t++)
        for (int j = 0; j < kout; j++) {
            double r = 0, mag = 0;
            for (int i = 0; i < kin; i++) {
                double b = forward ? rounded(basis, d, i, j) : rounded(basis, d, j, i);
                r += (double)x[(size_t)t * kin + i] * b;
                mag += fabs((double)x[(size_t)t * kin + i] * b);
            }
            assert_true(fabs(y[(size_t)t * kout + j] - r) <= 1e-5 * mag + 1e-30);
        }
}

static void test_maps_match_f16_reference(void **state) {
    (void)state;
    kvc_codecs_init();
    const int dims[] = {64, 200, KVC_ROT_MAX_D};
    for (int di = 0; di < 3; di++) {
        int d = dims[di], dk = d - d / 4, dv = d / 2, n = 5, G = 3;
        float *rk = malloc(sizeof(float) * d * d), *rv = malloc(sizeof(float) * d * d);
        float *x = malloc(sizeof(float) * n * d), *y = malloc(sizeof(float) * n * d);
        assert_non_null(rk), assert_non_null(rv), assert_non_null(x), assert_non_null(y);
        for (int i = 0; i < d * d; i++) rk[i] = frand(), rv[i] = frand();
        for (int i = 0; i < n * d; i++) x[i] = frand();
        kvc_xform *xf;
        assert_int_equal(kvc_rotation_create(d, rk, dk, rv, dv, &xf), KVC_OK);
        kvc_rotation_apply(xf, 0, x, n, d, y, dk); /* x·Rk */
        check_map(y, x, n, d, dk, rk, d, 1);
        kvc_rotation_apply(xf, 1, x, n, d, y, dv); /* x·Rv */
        check_map(y, x, n, d, dv, rv, d, 1);
        xf->ops->restore(xf, 0, x, n, dk, y, d); /* x·Rkᵀ */
        check_map(y, x, n, dk, d, rk, d, 0);
        xf->ops->restore(xf, 1, x, n, dv, y, d); /* x·Rvᵀ */
        check_map(y, x, n, dv, d, rv, d, 0);
        xf->ops->prepare_q(xf, x, G, d, y, dk);
        check_map(y, x, G, d, dk, rk, d, 1);
        xf->ops->finish_out(xf, x, G, dv, y, d);
        check_map(y, x, G, dv, d, rv, d, 0);
        kvc_xform_release(xf);
        free(rk), free(rv), free(x), free(y);
    }
}

static void test_bad_sizes_refused(void **state) {
    (void)state;
    kvc_cov c;
    assert_int_equal(kvc_cov_init(&c, 0), KVC_ERR_ARG);
    assert_int_equal(kvc_cov_init(&c, KVC_ROT_MAX_D + 1), KVC_ERR_ARG);
    float r[16] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
    kvc_xform *x;
    assert_int_equal(kvc_rotation_create(4, r, 0, r, 4, &x), KVC_ERR_ARG);
    assert_int_equal(kvc_rotation_create(4, r, 4, r, 5, &x), KVC_ERR_ARG);
    assert_int_equal(kvc_rotation_create(4, r, 2, r, 3, &x), KVC_OK);
    assert_int_equal(x->dim_k, 2);
    assert_int_equal(x->dim_v, 3);
    kvc_xform_release(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eigen_basis_orthonormal),
        cmocka_unit_test(test_channel_order),
        cmocka_unit_test(test_attention_through_rotation_equals_plain),
        cmocka_unit_test(test_maps_match_f16_reference),
        cmocka_unit_test(test_bad_sizes_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
