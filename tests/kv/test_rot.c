/* The randomized Hadamard rotation and the `rot` modifier
 * (src/kv/xform/hadamard.c, src/kv/method/rot.c): the Walsh-Hadamard transform
 * is orthonormal and its own inverse for power-of-two and block-diagonal head
 * sizes; the signed rotation maps back exactly through restore and finish_out
 * and is reproducible from its seed; a one-sided rotation (sides=k or v) is
 * the identity on the other side; smoothing weights are fitted as
 * documented and keep scores and restored keys exact; attention (prefill and decode) through a
 * rotated cache equals attention through the unrotated one when the codec
 * loses nothing (full:f32+rot vs full:f32), and a rotated quantized cache
 * still matches the reference over what it stores; rot composes in the spec
 * parser and bad specs are refused with messages naming the problem.
 *
 * Tolerances: 1e-5 for orthonormality and round trips (a few float additions
 * per element); 2e-5 · (1 + |ref|) for attention through f32 caches (the
 * rotation adds a few roundings to q, k, v and the output, as in
 * test_cache.c's f32 tolerance). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/status.h"
#include "base/threadpool.h"
#include "kv/attend.h"
#include "kv/cache_impl.h"
#include "kv/method/method.h"
#include "kv/method/tuned_profile.h"
#include "kv/synth.h"
#include "kv/xform/hadamard.h"
#include "expect_close.h"

static const int DIMS[] = {1, 2, 3, 16, 64, 80, 96, 100, 128};
static const unsigned BOTH = KVC_HADAMARD_K | KVC_HADAMARD_V;
enum { N_DIMS = (int)(sizeof DIMS / sizeof DIMS[0]) };

/* The transform's matrix, column j = fwht(e_j): orthonormal and symmetric
 * (so its own inverse), and fwht(fwht(x)) = x for random x. */
static void test_fwht_orthonormal_involution(void **state) {
    (void)state;
    rng = 7;
    for (int t = 0; t < N_DIMS; t++) {
        int d = DIMS[t];
        float *m = calloc((size_t)d * d, sizeof *m);
        for (int j = 0; j < d; j++) {
            m[(size_t)j * d + j] = 1.0f;
            kvc_fwht(m + (size_t)j * d, d); /* row j of m = fwht(e_j) = column j of H */
        }
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++) {
                double dot = 0;
                for (int c = 0; c < d; c++) dot += (double)m[(size_t)i * d + c] * m[(size_t)j * d + c];
                if (fabs(dot - (i == j)) > 1e-5) fail_msg("d %d: <h%d, h%d> = %g", d, i, j, dot);
                if (fabsf(m[(size_t)i * d + j] - m[(size_t)j * d + i]) > 1e-6) fail_msg("d %d: not symmetric", d);
            }
        float x[128], y[128];
        for (int c = 0; c < d; c++) x[c] = y[c] = frand();
        kvc_fwht(y, d);
        kvc_fwht(y, d);
        expect_close(y, x, (size_t)d, 1e-5, "fwht twice");
        free(m);
    }
}

/* apply then restore (keys and values) and apply then finish_out give the
 * input back; norms and dot products are kept; the same (seed, stream) gives
 * the same rotation, another seed a different one. */
static void test_hadamard_xform_round_trip(void **state) {
    (void)state;
    rng = 11;
    for (int t = 0; t < N_DIMS; t++) {
        int d = DIMS[t];
        kvc_xform *x, *same, *other;
        assert_int_equal(kvc_hadamard_create(d, BOTH, 5, 3, 0, &x), KVC_OK);
        assert_int_equal(kvc_hadamard_create(d, BOTH, 5, 3, 0, &same), KVC_OK);
        assert_int_equal(kvc_hadamard_create(d, BOTH, 6, 3, 0, &other), KVC_OK);
        float a[2][128], b[2][128], ra[2][128], back[2][128], rs[128], ro[128];
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < d; c++) a[r][c] = frand(), b[r][c] = frand();
        x->ops->apply(x, 0, a[0], 2, 128, ra[0], 128);
        for (int which = 0; which < 2; which++) {
            x->ops->restore(x, which, ra[0], 2, 128, back[0], 128);
            expect_close(back[0], a[0], (size_t)d, 1e-5, "restore row 0");
            expect_close(back[1], a[1], (size_t)d, 1e-5, "restore row 1");
        }
        x->ops->finish_out(x, ra[0], 2, 128, back[0], 128);
        expect_close(back[1], a[1], (size_t)d, 1e-5, "finish_out");
        float rb[128];
        x->ops->prepare_q(x, b[0], 1, 128, rb, 128);
        double dot = 0, rdot = 0;
        for (int c = 0; c < d; c++) dot += (double)a[0][c] * b[0][c], rdot += (double)ra[0][c] * rb[c];
        assert_true(fabs(dot - rdot) <= 1e-5 * (1 + fabs(dot)));
        same->ops->apply(same, 0, a[0], 1, 128, rs, 128);
        assert_memory_equal(rs, ra[0], (size_t)d * sizeof(float));
        other->ops->apply(other, 0, a[0], 1, 128, ro, 128);
        if (d >= 16) assert_true(memcmp(ro, ra[0], (size_t)d * sizeof(float)) != 0);
        kvc_xform_release(x);
        kvc_xform_release(same);
        kvc_xform_release(other);
    }
    kvc_xform *bad;
    assert_int_equal(kvc_hadamard_create(0, BOTH, 1, 0, 0, &bad), KVC_ERR_ARG);
    assert_null(bad);
    assert_int_equal(kvc_hadamard_create(64, 0, 1, 0, 0, &bad), KVC_ERR_ARG);
    assert_null(bad);
    assert_int_equal(kvc_hadamard_create(64, 4, 1, 0, 0, &bad), KVC_ERR_ARG);
    assert_null(bad);
}

/* Per channel c of k [n][d] (stride d): the spread around the mean; of q
 * [n][G][d]: the root mean square over tokens and heads. */
static void spread_and_rms(const float *k, const float *q, int n, int G, int d, int c, double *k_std, double *q_rms) {
    double s = 0, ss = 0, qq = 0;
    for (int t = 0; t < n; t++) {
        s += k[(size_t)t * d + c], ss += (double)k[(size_t)t * d + c] * k[(size_t)t * d + c];
        for (int g = 0; g < G; g++) qq += (double)q[((size_t)t * G + g) * d + c] * q[((size_t)t * G + g) * d + c];
    }
    *k_std = sqrt(fmax(ss / n - (s / n) * (s / n), 0));
    *q_rms = sqrt(qq / ((double)n * G));
}

/* The key weight w_c a fitted transform gives channel c: the keys' map sends
 * e_c to a vector of norm 1 / w_c. */
static double key_weight(const kvc_xform *x, int d, int c) {
    float e[128] = {0}, y[128];
    e[c] = 1;
    x->ops->apply(x, 0, e, 1, 128, y, 128);
    double n2 = 0;
    for (int i = 0; i < d; i++) n2 += (double)y[i] * y[i];
    return 1 / sqrt(n2);
}

/* Smoothing: the weights fitted by calibrate follow (std(k_c) / rms(q_c))^a
 * up to a common factor, with a constant channel clamped, not infinite;
 * scores, restored keys and the values' map are unchanged by them; too few
 * rows, a = 0 or a values-only rotation fit nothing. */
static void test_hadamard_smoothing(void **state) {
    (void)state;
    enum { D = 64, GQ = 3, NT = 100 };
    rng = 13;
    static float k[NT * D], q[NT * GQ * D];
    for (int t = 0; t < NT; t++)
        for (int c = 0; c < D; c++) {
            k[t * D + c] = c == 5 ? 7.0f : 3.0f + (float)(1 << (c % 5)) * frand(); /* channel 5 constant */
            for (int g = 0; g < GQ; g++) q[(t * GQ + g) * D + c] = (float)(1 << ((3 * c) % 4)) * frand();
        }
    kvc_xform *x, *plain, *half;
    assert_int_equal(kvc_hadamard_create(D, BOTH, 5, 3, 1.0f, &x), KVC_OK);
    assert_int_equal(kvc_hadamard_create(D, BOTH, 5, 3, 0, &plain), KVC_OK);
    assert_int_equal(kvc_hadamard_create(D, BOTH, 5, 3, 0.5f, &half), KVC_OK);
    x->ops->calibrate(x, q, GQ * D, GQ, k, D, NT);
    half->ops->calibrate(half, q, GQ * D, GQ, k, D, NT);
    plain->ops->calibrate(plain, q, GQ * D, GQ, k, D, NT);
    /* the floors of hadamard.c: 1e-3 of the mean over channels */
    double sd[D], rm[D], fs = 0, fr = 0;
    for (int c = 0; c < D; c++) spread_and_rms(k, q, NT, GQ, D, c, &sd[c], &rm[c]), fs += 1e-3 * sd[c] / D, fr += 1e-3 * rm[c] / D;
    for (int c = 1; c < D; c++) {
        if (c == 5) continue;
        double want = ((sd[c] + fs) / (rm[c] + fr)) / ((sd[0] + fs) / (rm[0] + fr));
        double got = key_weight(x, D, c) / key_weight(x, D, 0);
        if (fabs(got / want - 1) > 1e-3) fail_msg("a = 1, channel %d: weight ratio %g, want %g", c, got, want);
        got = key_weight(half, D, c) / key_weight(half, D, 0);
        if (fabs(got / sqrt(want) - 1) > 1e-3) fail_msg("a = 1/2, channel %d: weight ratio %g, want %g", c, got, sqrt(want));
        assert_true(fabs(key_weight(plain, D, c) - 1) < 1e-5);
    }
    double w5 = key_weight(x, D, 5);
    assert_true(isfinite(w5) && w5 >= 1 / KVC_HADAMARD_MAX_W * (1 - 1e-5));
    /* scores, restored keys and values are those of the exact map */
    float a[D], b[D], ra[D], rb[D], pa[D], back[D];
    for (int c = 0; c < D; c++) a[c] = frand(), b[c] = frand();
    x->ops->apply(x, 0, a, 1, D, ra, D);
    x->ops->prepare_q(x, b, 1, D, rb, D);
    double dot = 0, rdot = 0;
    for (int c = 0; c < D; c++) dot += (double)a[c] * b[c], rdot += (double)ra[c] * rb[c];
    assert_true(fabs(dot - rdot) <= 1e-5 * (1 + fabs(dot)));
    x->ops->restore(x, 0, ra, 1, D, back, D);
    expect_close(back, a, D, 1e-5, "restore of smoothed keys");
    x->ops->apply(x, 1, a, 1, D, ra, D);
    plain->ops->apply(plain, 1, a, 1, D, pa, D);
    assert_memory_equal(ra, pa, sizeof ra);
    /* fewer rows than KVC_HADAMARD_MIN_FIT, or only the values rotated: nothing fitted */
    kvc_xform *few, *vonly;
    assert_int_equal(kvc_hadamard_create(D, BOTH, 5, 3, 1.0f, &few), KVC_OK);
    assert_int_equal(kvc_hadamard_create(D, KVC_HADAMARD_V, 5, 3, 1.0f, &vonly), KVC_OK);
    few->ops->calibrate(few, q, GQ * D, GQ, k, D, KVC_HADAMARD_MIN_FIT - 1);
    vonly->ops->calibrate(vonly, q, GQ * D, GQ, k, D, NT);
    few->ops->apply(few, 0, a, 1, D, ra, D);
    plain->ops->apply(plain, 0, a, 1, D, pa, D);
    assert_memory_equal(ra, pa, sizeof ra);
    vonly->ops->prepare_q(vonly, a, 1, D, ra, D);
    assert_memory_equal(ra, a, sizeof ra);
    kvc_xform *bad;
    assert_int_equal(kvc_hadamard_create(D, BOTH, 5, 3, 1.5f, &bad), KVC_ERR_ARG);
    assert_null(bad);
    kvc_xform_release(x);
    kvc_xform_release(plain);
    kvc_xform_release(half);
    kvc_xform_release(few);
    kvc_xform_release(vonly);
}

/* A one-sided rotation: the rotated side is the two-sided map (same signs),
 * the other side the identity (queries with keys, outputs with values). */
static void test_hadamard_one_side(void **state) {
    (void)state;
    rng = 12;
    const int d = 96;
    kvc_xform *both, *side[2];
    assert_int_equal(kvc_hadamard_create(d, BOTH, 5, 3, 0, &both), KVC_OK);
    assert_int_equal(kvc_hadamard_create(d, KVC_HADAMARD_K, 5, 3, 0, &side[0]), KVC_OK);
    assert_int_equal(kvc_hadamard_create(d, KVC_HADAMARD_V, 5, 3, 0, &side[1]), KVC_OK);
    float a[128], rot[128], out[128], back[128];
    for (int c = 0; c < d; c++) a[c] = frand();
    both->ops->apply(both, 0, a, 1, 128, rot, 128);
    for (int s = 0; s < 2; s++) {
        kvc_xform *x = side[s];
        for (int which = 0; which < 2; which++) {
            x->ops->apply(x, which, a, 1, 128, out, 128);
            assert_memory_equal(out, which == s ? rot : a, (size_t)d * sizeof(float));
            x->ops->restore(x, which, out, 1, 128, back, 128);
            expect_close(back, a, (size_t)d, 1e-5, "one-sided restore");
        }
        x->ops->prepare_q(x, a, 1, 128, out, 128);
        assert_memory_equal(out, s == 0 ? rot : a, (size_t)d * sizeof(float));
        x->ops->finish_out(x, s == 1 ? rot : a, 1, 128, back, 128);
        expect_close(back, a, (size_t)d, 1e-5, "one-sided finish_out");
        kvc_xform_release(x);
    }
    kvc_xform_release(both);
}

enum { NL = 2, NH = 6, NKV = 2, G = NH / NKV };

static kvc_cache *make(const char *spec, int d, int max_tokens, kvc_pool *pool) {
    kvc_cache_shape sh = {.n_layers = NL, .n_heads = NH, .n_kv_heads = NKV, .head_dim = d, .max_tokens = max_tokens};
    kvc_cache *c = NULL;
    if (kvc_cache_create(&sh, spec, pool, &c) != KVC_OK) fail_msg("%s: %s", spec, kvc_last_error());
    return c;
}

/* Prefill (two chunks, so the second attends through the cache) then decode
 * steps, the same inputs into a plain and a rotated cache: every prefill and
 * decode output must agree. The hot window and the sealed chunks are both
 * exercised (full seals everything; kivi's window keeps 32). */
static void run_pair(const char *plain, const char *rotated, int d, double tol) {
    kvc_pool *pool = NULL;
    assert_int_equal(kvc_pool_create(2, &pool), KVC_OK);
    enum { P1 = 70, P2 = 90, DEC = 12, N = P1 + P2 + DEC };
    kvc_cache *a = make(plain, d, N, pool), *b = make(rotated, d, N, pool);
    float *q = malloc(sizeof(float) * N * NH * d), *k = malloc(sizeof(float) * N * NKV * d);
    float *v = malloc(sizeof(float) * N * NKV * d);
    float *oa = malloc(sizeof(float) * P2 * NH * d), *ob = malloc(sizeof(float) * P2 * NH * d);
    kvc_synth_kv(NKV, d, 0, N, 3, k, v);
    rng = 21;
    for (size_t i = 0; i < (size_t)N * NH * d; i++) q[i] = 2.0f * frand();
    for (int layer = 0; layer < NL; layer++) {
        int at = 0;
        for (int part = 0; part < 2; part++) {
            int n = part ? P2 : P1;
            const float *qq = q + (size_t)at * NH * d, *kk = k + (size_t)at * NKV * d, *vv = v + (size_t)at * NKV * d;
            assert_int_equal(kvc_cache_prefill(a, layer, n, qq, kk, vv, oa), KVC_OK);
            assert_int_equal(kvc_cache_prefill(b, layer, n, qq, kk, vv, ob), KVC_OK);
            expect_close(ob, oa, (size_t)n * NH * d, tol, "prefill");
            at += n;
        }
        for (; at < N; at++) {
            const float *kk = k + (size_t)at * NKV * d, *vv = v + (size_t)at * NKV * d, *qq = q + (size_t)at * NH * d;
            assert_int_equal(kvc_cache_append(a, layer, kk, vv), KVC_OK);
            assert_int_equal(kvc_cache_append(b, layer, kk, vv), KVC_OK);
            assert_int_equal(kvc_cache_attend(a, layer, qq, oa), KVC_OK);
            assert_int_equal(kvc_cache_attend(b, layer, qq, ob), KVC_OK);
            expect_close(ob, oa, (size_t)NH * d, tol, "decode");
        }
    }
    free(q); free(k); free(v); free(oa); free(ob);
    kvc_cache_free(a);
    kvc_cache_free(b);
    kvc_pool_free(pool);
}

/* A tuned profile for the NL layers of these caches, written to a temporary
 * file whose name goes to *path (the caller unlinks it). */
static void save_profile(kvc_tuned_codec k0, kvc_tuned_codec v0, kvc_tuned_codec k1, kvc_tuned_codec v1,
                         char *path, size_t size) {
    kvc_tuned_profile *p;
    assert_int_equal(kvc_tuned_profile_uniform(NL, k0, &p), KVC_OK);
    p->layer[0].k = k0, p->layer[0].v = v0, p->layer[1].k = k1, p->layer[1].v = v1;
    snprintf(path, size, "/tmp/kvc_test_rot_%d.tuned", (int)getpid());
    if (kvc_tuned_profile_save(p, path) != KVC_OK) fail_msg("%s", kvc_last_error());
    kvc_tuned_profile_free(p);
}

static void test_rotated_f32_cache_is_exact(void **state) {
    (void)state;
    run_pair("full:f32", "full:f32+rot", 64, 2e-5);
    run_pair("full:f32", "full:f32+rot:seed=9", 96, 2e-5); /* block-diagonal 64 + 32 */
    run_pair("full:f32", "full:f32+rot:sides=k", 64, 2e-5);
    run_pair("full:f32", "full:f32+rot:sides=v", 96, 2e-5);
    run_pair("full:f32", "full:f32+rot:smooth=0", 64, 2e-5);
    run_pair("full:f32", "full:f32+rot:smooth=1", 96, 2e-5); /* weights fitted to the first prefill */
    /* tuned with every side f32 and an f32 window: lossless, so +rot is exact too */
    char path[64], plain[160], rotated[160];
    const kvc_tuned_codec f32 = {32, 0};
    save_profile(f32, f32, f32, f32, path, sizeof path);
    snprintf(plain, sizeof plain, "tuned:profile=%s,hot=f32", path);
    snprintf(rotated, sizeof rotated, "tuned:profile=%s,hot=f32+rot", path);
    run_pair(plain, rotated, 64, 2e-5);
    run_pair(plain, rotated, 96, 2e-5);
    unlink(path);
}

/* A lossy codec in the rotated space: decode attention still equals the
 * double reference over what the streams store (in their space, with the
 * query mapped), so the driver, the maps and the codecs agree. */
static void check_rotated_reference(const char *spec, int d, int n, int layer) {
    kvc_cache *c = make(spec, d, n + 1, NULL);
    float *k = malloc(sizeof(float) * n * NKV * d), *v = malloc(sizeof(float) * n * NKV * d);
    float *qs = malloc(sizeof(float) * n * NH * d), *outs = malloc(sizeof(float) * n * NH * d);
    float q[NH * 128], out[NH * 128], ref[G * 128];
    kvc_synth_kv(NKV, d, 0, n, 8, k, v);
    rng = 4;
    for (int i = 0; i < NH * d; i++) q[i] = frand();
    for (size_t i = 0; i < (size_t)n * NH * d; i++) qs[i] = frand() * (float)(1 + i % 3);
    /* a prefill with queries (which fits a smoothing rotation), or only K/V */
    if (strstr(spec, "smooth=")) assert_int_equal(kvc_cache_prefill(c, layer, n, qs, k, v, outs), KVC_OK);
    else assert_int_equal(kvc_cache_load(c, layer, n, k, v), KVC_OK);
    free(qs);
    free(outs);
    assert_int_equal(kvc_cache_attend(c, layer, q, out), KVC_OK);
    for (int h = 0; h < NKV; h++) {
        kvc_stream *s = kvc_cache_stream(c, layer, h);
        assert_non_null(s->xf);
        assert_true(s->n_chunks > 0);
        assert_int_equal(kvc_attend_reference(s, q + h * G * d, G, ref), KVC_OK);
        expect_close(out + h * G * d, ref, (size_t)G * d, 2e-5, spec);
    }
    free(k);
    free(v);
    kvc_cache_free(c);
}

static void test_rotated_quantized_matches_reference(void **state) {
    (void)state;
    /* groups that are not multiples of 16 take the float kernels, exact
     * against the reference up to f32 rounding */
    check_rotated_reference("kivi:bits=3,group=8+rot", 64, 300, 0);
    check_rotated_reference("kivi:bits=3,group=8+rot:sides=v", 64, 300, 1);
    check_rotated_reference("kivi:bits=3,group=8+rot:sides=k", 96, 300, 0);
    check_rotated_reference("kivi:bits=3,group=8+rot:smooth=0.5", 64, 300, 0);
    check_rotated_reference("kivi:bits=2,group=8+rot:smooth=1,sides=k", 96, 300, 1);
    /* tuned: float-kernel codecs (groups that are not multiples of 16) per
     * layer and side, dense sides too, head dims 64 and 96 */
    char path[64], spec[160];
    save_profile((kvc_tuned_codec){3, 8}, (kvc_tuned_codec){16, 0}, (kvc_tuned_codec){32, 0},
                 (kvc_tuned_codec){3, 24}, path, sizeof path);
    snprintf(spec, sizeof spec, "tuned:profile=%s+rot", path);
    for (int d = 64; d <= 96; d += 32)
        for (int layer = 0; layer < NL; layer++) check_rotated_reference(spec, d, 300, layer);
    snprintf(spec, sizeof spec, "tuned:profile=%s,window=0,hot=f32+rot:seed=3", path);
    check_rotated_reference(spec, 64, 257, 0);
    unlink(path);
}

/* Whether every stream of a layer has key weights of 1 after a prefill of n
 * tokens (the plain rotation), or every one has fitted weights. */
static int fitted_weights(const char *spec, int n) {
    enum { D = 64 };
    kvc_cache *c = make(spec, D, n, NULL);
    float *k = malloc(sizeof(float) * n * NKV * D), *v = malloc(sizeof(float) * n * NKV * D);
    float *q = malloc(sizeof(float) * n * NH * D), *out = malloc(sizeof(float) * n * NH * D);
    kvc_synth_kv(NKV, D, 0, n, 8, k, v);
    rng = 5;
    for (size_t i = 0; i < (size_t)n * NH * D; i++) q[i] = frand() * (float)(1 + i % 4);
    assert_int_equal(kvc_cache_prefill(c, 0, n, q, k, v, out), KVC_OK);
    int fitted = 0;
    for (int h = 0; h < NKV; h++) {
        const kvc_xform *x = kvc_cache_stream(c, 0, h)->xf;
        int unit = 1;
        for (int ch = 0; ch < D; ch++) unit &= fabs(key_weight(x, D, ch) - 1) < 1e-5;
        fitted += !unit;
    }
    free(k); free(v); free(q); free(out);
    kvc_cache_free(c);
    assert_true(fitted == 0 || fitted == NKV);
    return fitted == NKV;
}

/* The default smoothing follows the base: on for per-channel key quantizers
 * (kivi, kvmix, tuned), off for the rest; an explicit value wins; a first
 * prefill shorter than KVC_HADAMARD_MIN_FIT fits nothing. */
static void test_smoothing_default_by_base(void **state) {
    (void)state;
    assert_true(fitted_weights("kivi:bits=2+rot", 64));
    assert_false(fitted_weights("kivi:bits=2+rot:smooth=0", 64));
    assert_false(fitted_weights("mustafar+rot", 64));
    assert_true(fitted_weights("mustafar+rot:smooth=0.5", 64));
    assert_false(fitted_weights("full:f32+rot", 64));
    assert_false(fitted_weights("kivi:bits=2+rot", KVC_HADAMARD_MIN_FIT - 1));
}

static void expect_refused(const char *spec, const char *needle) {
    kvc_spec s;
    kvc_status st = kvc_spec_parse(spec, &s);
    if (st != KVC_ERR_ARG) fail_msg("'%s' accepted", spec);
    if (!strstr(kvc_last_error(), needle)) fail_msg("'%s': message '%s' lacks '%s'", spec, kvc_last_error(), needle);
}

static void test_spec(void **state) {
    (void)state;
    const char *ok[] = {"kivi:bits=2+rot", "kivi:bits=4+rot:seed=7", "kvmix:profile=" KVC_SOURCE_DIR "/profiles/smollm2.kvmix+rot", "mustafar+kivi:bits=2+rot",
                        "mustafar:k=0.5,v=0.5+h2o:0.5+rot", "packkv+rot", "think:0.5+rot", "full:f32+rot:3",
                        "packkv+h2o+rot", "kivi:bits=2+rot:sides=v", "kivi+rot:sides=k,seed=2", "tuned:profile=" KVC_SOURCE_DIR "/profiles/smollm2-b3.tuned+rot"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        kvc_spec s;
        if (kvc_spec_parse(ok[i], &s) != KVC_OK) fail_msg("'%s': %s", ok[i], kvc_last_error());
        char buf[512];
        kvc_spec_format(&s, buf, sizeof buf);
        assert_non_null(strstr(buf, "+rot:seed="));
        kvc_spec_free(&s);
    }
    expect_refused("rot", "can only follow '+'");
    expect_refused("rot:seed=1+kivi", "can only follow '+'");
    expect_refused("kivi+rot:seed=-1", "seed");
    expect_refused("kivi+rot:seed=abc", "seed");
    expect_refused("kivi+rot:seed=2147483648", "seed");
    expect_refused("kivi+rot:bits=2", "bits");
    expect_refused("kivi+rot:sides=q", "sides");
    expect_refused("kivi+rot:smooth=1.5", "smooth");
    expect_refused("kivi+rot:smooth=-0.1", "smooth=-0.1 is neither -1");
    expect_refused("kivi+rot:smooth=-2", "smooth");
    expect_refused("kivi+rot+rot", "stacked twice");
    expect_refused("mosaic+rot", "cannot be stacked on mosaic");
    expect_refused("streaming+rot", "cannot be stacked on streaming");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fwht_orthonormal_involution),
        cmocka_unit_test(test_hadamard_xform_round_trip),
        cmocka_unit_test(test_hadamard_smoothing),
        cmocka_unit_test(test_hadamard_one_side),
        cmocka_unit_test(test_rotated_f32_cache_is_exact),
        cmocka_unit_test(test_rotated_quantized_matches_reference),
        cmocka_unit_test(test_smoothing_default_by_base),
        cmocka_unit_test(test_spec),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
