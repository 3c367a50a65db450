/* Weight types (src/model/wtype.h): for every supported type, the active
 * kernels (AVX2 / AVX-512 / scalar, as KVC_ISA selects) against the scalar
 * references, dot against dequantise-then-f32-dot, the block layouts against
 * blocks quantised and dequantised by ggml itself (fixture made by
 * scripts/fixtures/make_wtype_fixtures.py), the quantisers, matvec over the
 * thread pool, and the traits table's handling of unknown ids.
 *
 * Error budgets (all derived, none tuned):
 *  - Activation quantisation. The quantised kernels round the activation to
 *    int8 per block of B elements (B = 32 for q4_0/q4_1/q8_0, 256 for the
 *    k-quants) with step d_b = amax_b/127, so |x_i - x^_i| <= d_b/2 (plus a
 *    relative 1e-4 for the rounding of 127/amax). Hence
 *        |dot(w, x^) - dot(w, x)| <= AQ = sum_b (d_b/2)(1+1e-4) sum_{i in b}|w_i|.
 *    The float types use the f32 activation: AQ = 0.
 *  - Float rounding. Kernels form per-element terms no larger than
 *    t_i*|x^_i|, where t_i is the largest magnitude the kernel touches for
 *    element i: |w_i| for float types, |d|*q_max plus the offset the kernel
 *    adds and removes again (q4_0: 23|d|, q4_1: 15|d|+|m|, q8_0 on AVX-512
 *    with its +128 bias: 384|d|, k-quants: |d sc| q_max + |dmin m| or
 *    95|d sc| for q6_k). Each term then passes through at most k = nb + 16
 *    roundings (scale product, int->float, accumulation over at most nb
 *    blocks, lane reduction), so by the standard bound (Higham, Accuracy and
 *    Stability, 3.1) |error| <= 2 k u M with u = 2^-24 and
 *    M = sum_i t_i (|x_i| + d_b/2). Two such kernels differ by at most twice
 *    that: SIMD-vs-scalar budget 4 k u M; dot-vs-f32 budget AQ + 2 k u M.
 *  - Dequantise: SIMD variants may fuse d*q + m into one FMA: per element
 *    |difference| <= 2 u t_i.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/f16.h"
#include "base/threadpool.h"
#include "gguf/gguf.h"
#include "model/wtype.h"

static const uint32_t all_types[] = {KVC_WT_F32,  KVC_WT_F16,  KVC_WT_BF16,
                                     KVC_WT_Q4_0, KVC_WT_Q4_1, KVC_WT_Q8_0,
                                     KVC_WT_Q4_K, KVC_WT_Q5_K, KVC_WT_Q6_K,
                                     KVC_WT_Q5_0};
#define N_TYPES (sizeof all_types / sizeof all_types[0])

static const double U = 5.9604644775390625e-8; /* 2^-24 */

/* ---------- deterministic random numbers ---------- */
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd_u64(void) {
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return rng * 0x2545f4914f6cdd1dull;
}
static float rnd_unit(void) {
    return (float)((rnd_u64() >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}
static float rnd_normal(void) {
    float s = 0;
    for (int i = 0; i < 12; i++)
        s += (rnd_unit() + 1.0f) * 0.5f;
    return s - 6.0f;
}

/* ---------- per-type facts the budgets need ---------- */
static int act_block(uint32_t type) {
    const kvc_wtype *t = kvc_wtype_ref(type);
    return t->act == KVC_ACT_Q8_0 ? 32 : t->act == KVC_ACT_Q8_K ? 256 : 0;
}

static void q4k_sm(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63, *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* t[i]: the largest magnitude a kernel touches for element i (see the budget note above). */
static void term_bound(uint32_t type, const uint8_t *w, int64_t n, const float *wf, double *t) {
    switch (type) {
    case KVC_WT_F32:
    case KVC_WT_F16:
    case KVC_WT_BF16:
        for (int64_t i = 0; i < n; i++)
            t[i] = fabs(wf[i]);
        return;
    case KVC_WT_Q4_0:
        for (int64_t i = 0; i < n; i++)
            t[i] = 23.0 * fabs(kvc_f16_to_f32(*(const uint16_t *)(w + (i / 32) * 18)));
        return;
    case KVC_WT_Q5_0:
        for (int64_t i = 0; i < n; i++)
            t[i] = 47.0 * fabs(kvc_f16_to_f32(*(const uint16_t *)(w + (i / 32) * 22)));
        return;
    case KVC_WT_Q4_1:
        for (int64_t i = 0; i < n; i++) {
            const uint8_t *b = w + (i / 32) * 20;
            t[i] = 15.0 * fabs(kvc_f16_to_f32(*(const uint16_t *)b)) +
                   fabs(kvc_f16_to_f32(*(const uint16_t *)(b + 2)));
        }
        return;
    case KVC_WT_Q8_0:
        for (int64_t i = 0; i < n; i++)
            t[i] = 384.0 * fabs(kvc_f16_to_f32(*(const uint16_t *)(w + (i / 32) * 34)));
        return;
    case KVC_WT_Q4_K:
    case KVC_WT_Q5_K: {
        size_t bb = type == KVC_WT_Q4_K ? 144 : 176;
        double qmax = type == KVC_WT_Q4_K ? 15 : 31;
        for (int64_t i = 0; i < n; i++) {
            const uint8_t *b = w + (i / 256) * bb;
            int sc, m;
            q4k_sm(b + 4, (int)(i % 256) / 32, &sc, &m);
            t[i] = fabs(kvc_f16_to_f32(*(const uint16_t *)b)) * sc * qmax +
                   fabs(kvc_f16_to_f32(*(const uint16_t *)(b + 2))) * m;
        }
        return;
    }
    case KVC_WT_Q6_K:
        for (int64_t i = 0; i < n; i++) {
            const uint8_t *b = w + (i / 256) * 210;
            t[i] = 95.0 * fabs(kvc_f16_to_f32(*(const uint16_t *)(b + 208)) *
                               (double)(int8_t)b[192 + (i % 256) / 16]);
        }
        return;
    }
    fail_msg("no term bound for type %u", type);
}

typedef struct budget {
    double aq; /* activation quantisation bound AQ */
    double m;  /* magnitude M */
    double k;  /* roundings per term */
} budget;

static budget make_budget(uint32_t type, const uint8_t *w, int64_t n, const float *wf,
                          const float *x) {
    double *t = malloc((size_t)n * sizeof *t);
    assert_non_null(t);
    term_bound(type, w, n, wf, t);
    int ab = act_block(type);
    budget b = {0, 0, 0};
    for (int64_t i0 = 0; i0 < n; i0 += ab ? ab : n) {
        int64_t len = ab ? ab : n;
        double amax = 0, sw = 0;
        for (int64_t i = i0; i < i0 + len; i++)
            amax = fmax(amax, fabs(x[i])), sw += fabs(wf[i]);
        double half_step = ab ? amax / 127.0 * 0.5 * (1 + 1e-4) : 0;
        b.aq += half_step * sw;
        for (int64_t i = i0; i < i0 + len; i++)
            b.m += t[i] * (fabs(x[i]) + half_step);
    }
    const kvc_wtype *wt = kvc_wtype_ref(type);
    b.k = (double)(n / wt->block) + 16;
    free(t);
    return b;
}

/* ---------- test data ---------- */
enum { W_RANDOM, W_ZEROS, W_OUTLIER, W_CONST, W_TINY, W_SPARSE, W_RAW, N_WPAT };
static const char *wpat_name[] = {"random", "zeros",  "outlier",  "const",
                                  "tiny",   "sparse", "raw-bytes"};
enum { X_RANDOM, X_ZEROS, X_OUTLIER, X_ONEHOT, X_NEG, X_WIDE, N_XPAT };
static const char *xpat_name[] = {"random",  "zeros",    "outlier",
                                  "one-hot", "negative", "wide-range"};

static uint16_t rnd_finite_half(void) {
    float v = rnd_unit() * 2.0f;
    if ((rnd_u64() & 7) == 0) v *= 1e-5f; /* subnormal halves too */
    return kvc_f32_to_f16(v);
}

/* Random block bytes with every f16 field replaced by a finite value: covers
 * every nibble, packed-scale and sign pattern the format can hold. */
static void raw_weights(uint32_t type, uint8_t *w, int64_t n) {
    size_t bytes = kvc_wtype_row_bytes(type, n);
    for (size_t i = 0; i < bytes; i++)
        w[i] = (uint8_t)rnd_u64();
    const kvc_wtype *t = kvc_wtype_ref(type);
    for (int64_t blk = 0; blk < n / t->block; blk++) {
        uint8_t *b = w + blk * t->block_bytes;
        uint16_t h[2] = {rnd_finite_half(), rnd_finite_half()};
        switch (type) {
        case KVC_WT_F32: {
            float f = rnd_normal() * 3;
            memcpy(b, &f, 4);
            break;
        }
        case KVC_WT_F16:
            memcpy(b, h, 2);
            break;
        case KVC_WT_BF16: {
            uint16_t bf = kvc_f32_to_bf16(rnd_normal() * 3);
            memcpy(b, &bf, 2);
            break;
        }
        case KVC_WT_Q4_0:
        case KVC_WT_Q5_0:
        case KVC_WT_Q8_0:
            memcpy(b, h, 2);
            break;
        case KVC_WT_Q4_1:
        case KVC_WT_Q4_K:
        case KVC_WT_Q5_K:
            memcpy(b, h, 4);
            break;
        case KVC_WT_Q6_K:
            memcpy(b + 208, h, 2);
            break;
        }
    }
}

static void make_weights(int pat, uint32_t type, int64_t n, float *src, uint8_t *w) {
    for (int64_t i = 0; i < n; i++) {
        switch (pat) {
        case W_RANDOM:
            src[i] = rnd_normal();
            break;
        case W_ZEROS:
            src[i] = 0;
            break;
        case W_OUTLIER:
            src[i] = rnd_normal() * 0.02f;
            break;
        case W_CONST:
            src[i] = 0.75f;
            break;
        case W_TINY:
            src[i] = rnd_normal() * 1e-6f;
            break;
        case W_SPARSE:
            src[i] = (rnd_u64() % 13) == 0 ? rnd_normal() : 0.0f;
            break;
        default:
            src[i] = 0;
            break;
        }
    }
    if (pat == W_OUTLIER) src[n / 3] = 3000.0f, src[n - 1] = -500.0f;
    if (pat == W_RAW) {
        raw_weights(type, w, n);
        return;
    }
    kvc_wtype_ref(type)->quantize(src, w, n);
}

/* rows x n weights of `type`, each row W_RANDOM (src: n floats of scratch). */
static uint8_t *random_matrix(uint32_t type, int64_t rows, int64_t n, float *src) {
    size_t rb = kvc_wtype_row_bytes(type, n);
    uint8_t *w = malloc(rb * rows);
    assert_non_null(w);
    for (int64_t r = 0; r < rows; r++)
        make_weights(W_RANDOM, type, n, src, w + r * rb);
    return w;
}

static void make_act(int pat, int64_t n, float *x) {
    for (int64_t i = 0; i < n; i++) {
        switch (pat) {
        case X_RANDOM:
            x[i] = rnd_normal();
            break;
        case X_ZEROS:
            x[i] = 0;
            break;
        case X_OUTLIER:
            x[i] = rnd_normal();
            break;
        case X_ONEHOT:
            x[i] = 0;
            break;
        case X_NEG:
            x[i] = -fabsf(rnd_normal()) - 0.1f;
            break;
        case X_WIDE:
            x[i] = rnd_normal() * powf(10.0f, (float)(rnd_u64() % 7) - 3.0f);
            break;
        }
    }
    if (pat == X_OUTLIER) x[n / 2] = 1e4f, x[0] = -3e3f;
    if (pat == X_ONEHOT) x[(n * 5) / 7] = 1.5f;
}

static const int64_t *lengths(uint32_t type, int *count) {
    static const int64_t l1[] = {1, 7, 16, 33, 576, 1000};
    static const int64_t l32[] = {32, 64, 96, 128, 160, 544, 576, 608, 1536, 4128};
    static const int64_t l256[] = {256, 512, 768, 1280, 4352};
    int blk = kvc_wtype_ref(type)->block;
    if (blk == 1) return *count = 6, l1;
    if (blk == 32) return *count = 10, l32;
    return *count = 5, l256;
}

static double dot_f64(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

/* ---------- per-type kernel equivalence ---------- */
static void check_type(uint32_t type) {
    const kvc_wtype *act = kvc_wtype_get(type), *ref = kvc_wtype_ref(type);
    assert_non_null(act);
    assert_non_null(ref);
    assert_true(act->supported && ref->supported);
    assert_int_equal(act->act, ref->act);
    int nl;
    const int64_t *ls = lengths(type, &nl);
    for (int li = 0; li < nl; li++) {
        int64_t n = ls[li];
        size_t rb = kvc_wtype_row_bytes(type, n);
        assert_true(rb > 0);
        float *src = malloc(n * sizeof(float)), *x = malloc(n * sizeof(float));
        float *wf = malloc(n * sizeof(float)), *wf2 = malloc(n * sizeof(float));
        uint8_t *w = malloc(rb * 5); /* five rows for dot_rows */
        size_t abytes = kvc_act_bytes(act->act, n);
        void *a_ref = malloc(abytes), *a_act = malloc(abytes);
        double *t = malloc(n * sizeof(double));
        assert_true(src && x && wf && wf2 && w && a_ref && a_act && t);
        for (int wp = 0; wp < N_WPAT; wp++) {
            make_weights(wp, type, n, src, w);
            ref->dequant(w, wf, n);
            act->dequant(w, wf2, n);
            term_bound(type, w, n, wf, t);
            for (int64_t i = 0; i < n; i++)
                if (fabs((double)wf2[i] - wf[i]) > 2 * U * t[i])
                    fail_msg("%s n=%lld w=%s: dequant[%lld] %.9g vs reference %.9g", ref->name,
                             (long long)n, wpat_name[wp], (long long)i, wf2[i], wf[i]);
            for (int xp = 0; xp < N_XPAT; xp++) {
                make_act(xp, n, x);
                kvc_act_prepare_ref(ref->act, x, a_ref, n);
                kvc_act_prepare(act->act, x, a_act, n);
                if (memcmp(a_ref, a_act, abytes) != 0)
                    fail_msg("%s n=%lld x=%s: prepared activation differs from the reference",
                             ref->name, (long long)n, xpat_name[xp]);
                budget b = make_budget(type, w, n, wf, x);
                double ds = act->dot(w, a_act, n), dr = ref->dot(w, a_ref, n),
                       df = dot_f64(wf, x, n);
                double tol_simd = 4 * b.k * U * b.m, tol_f32 = b.aq + 2 * b.k * U * b.m;
                if (!(fabs(ds - dr) <= tol_simd))
                    fail_msg("%s n=%lld w=%s x=%s: dot %.9g vs reference %.9g (budget %.3g)",
                             ref->name, (long long)n, wpat_name[wp], xpat_name[xp], ds, dr,
                             tol_simd);
                if (!(fabs(ds - df) <= tol_f32) || !(fabs(dr - df) <= tol_f32))
                    fail_msg("%s n=%lld w=%s x=%s: dot %.9g / reference %.9g vs f32 dot %.9g "
                             "(budget %.3g)",
                             ref->name, (long long)n, wpat_name[wp], xpat_name[xp], ds, dr, df,
                             tol_f32);
                if (xp == X_ZEROS) assert_true(ds == 0.0 && dr == 0.0);
                if (act->dot_rows) { /* five rows: one group of four and a single */
                    for (int r = 1; r < 5; r++)
                        make_weights(W_RANDOM, type, n, src, w + r * rb);
                    memcpy(w + 2 * rb, w, rb); /* the tested row again, inside the group */
                    float y[5];
                    act->dot_rows(w, rb, 5, a_act, n, y);
                    for (int r = 0; r < 5; r++) {
                        float one = act->dot(w + r * rb, a_act, n);
                        if (y[r] != one)
                            fail_msg("%s n=%lld: dot_rows row %d %.9g vs dot %.9g", ref->name,
                                     (long long)n, r, y[r], one);
                    }
                }
            }
        }
        free(src), free(x), free(wf), free(wf2), free(w), free(a_ref), free(a_act), free(t);
    }
}

static void test_type(void **state) {
    check_type(*(const uint32_t *)*state);
}

/* ---------- quantisers (test helpers for other modules) ---------- */
static void test_quantize_roundtrip(void **state) {
    (void)state;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        uint32_t type = all_types[ti];
        const kvc_wtype *ref = kvc_wtype_ref(type);
        int64_t n = 1536;
        float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
        uint8_t *w = malloc(kvc_wtype_row_bytes(type, n));
        assert_true(x && y && w);
        for (int64_t i = 0; i < n; i++)
            x[i] = rnd_normal() * (i % 97 == 0 ? 8.0f : 1.0f);
        ref->quantize(x, w, n);
        ref->dequant(w, y, n);
        /* bound: one quantisation step of the (super-)block, from its range and the levels of the
         * type */
        int blk = ref->block > 1 ? ref->block : 1;
        double levels = type == KVC_WT_Q8_0   ? 254
                        : type == KVC_WT_Q6_K ? 63
                        : type == KVC_WT_Q5_K || type == KVC_WT_Q5_0 ? 31
                                              : 15;
        for (int64_t b0 = 0; b0 < n; b0 += blk) {
            double mn = 0, mx = 0;
            for (int64_t i = b0; i < b0 + blk; i++)
                mn = fmin(mn, x[i]), mx = fmax(mx, x[i]);
            double range = fmax(mx - mn, 2 * fmax(mx, -mn));
            for (int64_t i = b0; i < b0 + blk; i++) {
                double tol = type == KVC_WT_F32    ? 0
                             : type == KVC_WT_F16  ? fabs(x[i]) * 0x1p-11
                             : type == KVC_WT_BF16 ? fabs(x[i]) * 0x1p-8
                                                   : range / levels * 1.05;
                if (fabs((double)y[i] - x[i]) > tol)
                    fail_msg("%s: x[%lld] = %.6g round-trips to %.6g (tolerance %.3g)", ref->name,
                             (long long)i, x[i], y[i], tol);
            }
        }
        free(x), free(y), free(w);
    }
}

/* ---------- ggml's own blocks ---------- */
static uint32_t rd_u32(const uint8_t *p) {
    return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24;
}

static void test_ggml_blocks(void **state) {
    (void)state;
    const char *path = KVC_SOURCE_DIR "/tests/fixtures/wtype/ggml_blocks.bin";
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("missing fixture %s (scripts/fixtures/make_wtype_fixtures.py makes it)", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)size);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    assert_memory_equal(buf, "KVCWTYP1", 8);
    uint32_t nrec = rd_u32(buf + 8);
    size_t off = 12;
    int seen = 0;
    for (uint32_t r = 0; r < nrec; r++) {
        assert_true(off + 16 <= (size_t)size);
        uint32_t type = rd_u32(buf + off), rows = rd_u32(buf + off + 4), n = rd_u32(buf + off + 8),
                 nbytes = rd_u32(buf + off + 12);
        off += 16;
        size_t rb = kvc_wtype_row_bytes(type, n);
        assert_int_equal((size_t)rows * rb, nbytes);
        assert_true(off + nbytes + (size_t)rows * n * 4 <= (size_t)size);
        const uint8_t *blocks = buf + off;
        float *want =
            malloc((size_t)rows * n * sizeof(float)); /* the file is little-endian, as the host */
        assert_non_null(want);
        memcpy(want, buf + off + nbytes, (size_t)rows * n * sizeof(float));
        off += nbytes + (size_t)rows * n * 4;
        const kvc_wtype *act = kvc_wtype_get(type), *ref = kvc_wtype_ref(type);
        float *got = malloc(n * sizeof(float)), *x = malloc(n * sizeof(float));
        double *t = malloc(n * sizeof(double));
        void *a = malloc(kvc_act_bytes(act->act, n));
        assert_true(got && x && t && a);
        for (uint32_t row = 0; row < rows; row++) {
            const uint8_t *w = blocks + row * rb;
            const float *wg = want + (size_t)row * n;
            term_bound(type, w, n, wg, t);
            /* ggml computes the same products in f32, possibly fused: 2u per element */
            ref->dequant(w, got, n);
            for (uint32_t i = 0; i < n; i++)
                if (fabs((double)got[i] - wg[i]) > 2 * U * t[i])
                    fail_msg("%s row %u: dequant[%u] %.9g, ggml says %.9g", ref->name, row, i,
                             got[i], wg[i]);
            act->dequant(w, got, n);
            for (uint32_t i = 0; i < n; i++)
                if (fabs((double)got[i] - wg[i]) > 2 * U * t[i])
                    fail_msg("%s row %u: active dequant[%u] %.9g, ggml says %.9g", ref->name, row,
                             i, got[i], wg[i]);
            for (int xp = 0; xp < N_XPAT; xp++) {
                make_act(xp, n, x);
                kvc_act_prepare(act->act, x, a, n);
                budget b = make_budget(type, w, n, wg, x);
                double ds = act->dot(w, a, n), df = dot_f64(wg, x, n);
                if (!(fabs(ds - df) <= b.aq + 2 * b.k * U * b.m))
                    fail_msg("%s row %u x=%s: dot %.9g vs f32 dot of ggml's dequantisation %.9g",
                             ref->name, row, xpat_name[xp], ds, df);
            }
        }
        free(got), free(x), free(t), free(a), free(want);
        seen++;
    }
    assert_int_equal(seen, 7);
    free(buf);
}

/* ---------- traits table ---------- */
static void test_unknown_types(void **state) {
    (void)state;
    const uint32_t unknown[] = {4, 5, 31, 32, 33, 36, 37, 38, 40, 41, 1000, 0x7fffffff, 0xffffffff};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        assert_null(kvc_wtype_get(unknown[i]));
        assert_null(kvc_wtype_ref(unknown[i]));
        assert_int_equal(kvc_wtype_row_bytes(unknown[i], 256), 0);
    }
    /* known to ggml but without kernels here: named, so the loader can say which */
    const kvc_wtype *q51 = kvc_wtype_get(7);
    assert_non_null(q51);
    assert_false(q51->supported);
    assert_string_equal(q51->name, "q5_1");
    assert_false(kvc_wtype_get(KVC_WT_Q8_K)->supported);
    /* row sizes */
    assert_int_equal(kvc_wtype_row_bytes(KVC_WT_Q4_1, 576), 18 * 20);
    assert_int_equal(kvc_wtype_row_bytes(KVC_WT_Q8_0, 576), 18 * 34);
    assert_int_equal(kvc_wtype_row_bytes(KVC_WT_Q5_0, 896), 28 * 22);
    assert_int_equal(kvc_wtype_row_bytes(KVC_WT_Q6_K, 512), 2 * 210);
    assert_int_equal(kvc_wtype_row_bytes(KVC_WT_BF16, 7), 14);
    assert_int_equal(kvc_wtype_row_bytes(KVC_WT_Q4_1, 577), 0);
    assert_int_equal(kvc_wtype_row_bytes(KVC_WT_Q4_K, 576), 0);
    assert_int_equal(kvc_wtype_row_bytes(KVC_WT_Q4_1, -32), 0);
    for (size_t i = 0; i < N_TYPES; i++) {
        const kvc_wtype *t = kvc_wtype_get(all_types[i]);
        assert_non_null(t);
        assert_true(t->supported && t->dequant && t->dot && t->quantize);
    }
}

/* ---------- matvec ---------- */
static void ref_matvec(uint32_t type, const uint8_t *w, int64_t rows, int64_t n, const float *x,
                       float *y) {
    const kvc_wtype *ref = kvc_wtype_ref(type);
    void *a = malloc(kvc_act_bytes(ref->act, n));
    assert_non_null(a);
    kvc_act_prepare_ref(ref->act, x, a, n);
    size_t rb = kvc_wtype_row_bytes(type, n);
    for (int64_t r = 0; r < rows; r++)
        y[r] = ref->dot(w + r * rb, a, n);
    free(a);
}

static void test_matvec_threads(void **state) {
    (void)state;
    const int64_t shapes[][2] = {{37, 576}, {1, 256}, {5, 1536}, {130, 768}, {64, 4352}};
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        uint32_t type = all_types[ti];
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int64_t rows = shapes[s][0], n = shapes[s][1];
            size_t rb = kvc_wtype_row_bytes(type, n);
            if (!rb) continue;
            uint8_t *w = malloc(rb * rows);
            float *src = malloc(n * sizeof(float)), *x = malloc(n * sizeof(float));
            float *y0 = malloc(rows * sizeof(float)), *y = malloc(rows * sizeof(float)),
                  *yr = malloc(rows * sizeof(float));
            float *wf = malloc(n * sizeof(float));
            assert_true(w && src && x && y0 && y && yr && wf);
            for (int64_t r = 0; r < rows; r++)
                make_weights(r % 5 == 4 ? W_RAW : W_RANDOM, type, n, src, w + r * rb);
            make_act(X_RANDOM, n, x);
            kvc_matvec(NULL, type, w, rows, n, x, y0);
            ref_matvec(type, w, rows, n, x, yr);
            for (int64_t r = 0; r < rows; r++) {
                kvc_wtype_ref(type)->dequant(w + r * rb, wf, n);
                budget b = make_budget(type, w + r * rb, n, wf, x);
                if (!(fabs((double)y0[r] - yr[r]) <= 4 * b.k * U * b.m))
                    fail_msg("%s %lldx%lld: matvec row %lld %.9g vs reference %.9g",
                             kvc_wtype_ref(type)->name, (long long)rows, (long long)n, (long long)r,
                             y0[r], yr[r]);
            }
            for (int nt = 1; nt <= 3; nt++) {
                kvc_pool *pool;
                assert_int_equal(kvc_pool_create(nt, &pool), KVC_OK);
                memset(y, 0xff, rows * sizeof(float));
                kvc_matvec(pool, type, w, rows, n, x, y);
                /* rows are independent: the same bits whatever the thread count */
                assert_memory_equal(y, y0, rows * sizeof(float));
                kvc_pool_free(pool);
            }
            free(w), free(src), free(x), free(y0), free(y), free(yr), free(wf);
        }
    }
}

static void test_matvec_multi(void **state) {
    (void)state;
    const uint32_t types[] = {KVC_WT_Q4_1, KVC_WT_Q8_0, KVC_WT_Q6_K, KVC_WT_F16,  KVC_WT_Q4_K,
                              KVC_WT_Q4_1, KVC_WT_F32,  KVC_WT_Q4_0, KVC_WT_BF16, KVC_WT_Q5_K};
    const int64_t rows[] = {67, 9, 30, 4, 1, 129, 12, 40, 3, 17};
    enum { NOPS = 10 };
    const int64_t n = 768;
    kvc_matvec_op ops[NOPS];
    float *x = malloc(n * sizeof(float)), *src = malloc(n * sizeof(float));
    assert_true(x && src);
    make_act(X_WIDE, n, x);
    for (int o = 0; o < NOPS; o++) {
        uint8_t *w = random_matrix(types[o], rows[o], n, src);
        ops[o] = (kvc_matvec_op){
            .type = types[o], .w = w, .rows = rows[o], .y = malloc(rows[o] * sizeof(float))};
        assert_non_null(ops[o].y);
    }
    kvc_pool *pool;
    assert_int_equal(kvc_pool_create(2, &pool), KVC_OK);
    kvc_matvec_multi(pool, ops, NOPS, n, x);
    for (int o = 0; o < NOPS; o++) {
        float *y = malloc(rows[o] * sizeof(float));
        assert_non_null(y);
        kvc_matvec(NULL, types[o], ops[o].w, rows[o], n, x, y);
        assert_memory_equal(y, ops[o].y, rows[o] * sizeof(float));
        free(y);
        free((void *)ops[o].w), free(ops[o].y);
    }
    kvc_pool_free(pool);
    free(x), free(src);
}

/* Rows longer than matvec's column piece (16384): partial sums over pieces. */
static void test_matvec_long_rows(void **state) {
    (void)state;
    const uint32_t types[] = {KVC_WT_Q4_1, KVC_WT_Q8_0, KVC_WT_Q6_K, KVC_WT_F16};
    const int64_t n = 16384 * 2 + 512, rows = 6;
    float *x = malloc(n * sizeof(float)), *src = malloc(n * sizeof(float)),
          *wf = malloc(n * sizeof(float));
    assert_true(x && src && wf);
    make_act(X_RANDOM, n, x);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        size_t rb = kvc_wtype_row_bytes(types[ti], n);
        uint8_t *w = random_matrix(types[ti], rows, n, src);
        float y[6];
        kvc_matvec(NULL, types[ti], w, rows, n, x, y);
        for (int64_t r = 0; r < rows; r++) {
            kvc_wtype_ref(types[ti])->dequant(w + r * rb, wf, n);
            budget b = make_budget(types[ti], w + r * rb, n, wf, x);
            double df = dot_f64(wf, x, n);
            /* one more rounding per piece: k + 3 */
            if (!(fabs(y[r] - df) <= b.aq + 2 * (b.k + 3) * U * b.m))
                fail_msg("%s n=%lld row %lld: %.9g vs f32 dot %.9g", kvc_wtype_ref(types[ti])->name,
                         (long long)n, (long long)r, y[r], df);
        }
        free(w);
    }
    free(x), free(src), free(wf);
}

/* kvc_matmul: every (token, row) bit-identical to kvc_matvec of that token. */
static void test_matmul(void **state) {
    (void)state;
    const int64_t ms[] = {1, 2, 3, 5, 64};
    const int64_t shapes[][2] = {{37, 576}, {6, 1536}, {130, 768}, {1, 256}};
    kvc_pool *pools[2];
    assert_int_equal(kvc_pool_create(1, &pools[0]), KVC_OK);
    assert_int_equal(kvc_pool_create(2, &pools[1]), KVC_OK);
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        uint32_t type = all_types[ti];
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const int64_t rows = shapes[s][0], n = shapes[s][1];
            const size_t rb = kvc_wtype_row_bytes(type, n);
            if (!rb) continue;
            const int64_t ldx = n + 3, ldy = rows + 5, mmax = 64;
            uint8_t *w = malloc(rb * rows);
            float *src = malloc(n * sizeof(float)), *x = malloc(mmax * ldx * sizeof(float));
            float *y = malloc(mmax * ldy * sizeof(float)), *yv = malloc(rows * sizeof(float));
            assert_true(w && src && x && y && yv);
            for (int64_t r = 0; r < rows; r++)
                make_weights(r % 3 == 2 ? W_RAW : W_RANDOM, type, n, src, w + r * rb);
            for (int64_t i = 0; i < mmax; i++)
                make_act(i % N_XPAT, n, x + i * ldx);
            for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
                const int64_t m = ms[mi];
                kvc_pool *pool = pools[mi % 2];
                for (int64_t i = 0; i < m * ldy; i++)
                    y[i] = -12345.0f;
                kvc_matmul_op op = {.type = type, .w = w, .rows = rows, .y = y, .ldy = ldy};
                assert_int_equal(kvc_matmul(pool, &op, 1, n, x, ldx, m), KVC_OK);
                for (int64_t i = 0; i < m; i++) {
                    kvc_matvec(NULL, type, w, rows, n, x + i * ldx, yv);
                    if (memcmp(yv, y + i * ldy, rows * sizeof(float)) != 0)
                        fail_msg("%s %lldx%lld m=%lld: token %lld differs from matvec",
                                 kvc_wtype_ref(type)->name, (long long)rows, (long long)n,
                                 (long long)m, (long long)i);
                    for (int64_t r = rows; r < ldy; r++)
                        assert_true(y[i * ldy + r] == -12345.0f);
                }
            }
            free(w), free(src), free(x), free(y), free(yv);
        }
    }
    kvc_pool_free(pools[0]);
    kvc_pool_free(pools[1]);
}

/* Several ops in one call, and rows longer than the column piece. */
static void test_matmul_multi_long(void **state) {
    (void)state;
    const uint32_t types[] = {KVC_WT_Q4_1, KVC_WT_Q8_0, KVC_WT_Q6_K, KVC_WT_F16};
    const int64_t rows[] = {9, 5, 4, 7};
    enum { NOPS = 4 };
    const int64_t n = 16384 + 512, m = 3;
    float *x = malloc(m * n * sizeof(float)), *src = malloc(n * sizeof(float)),
          *yv = malloc(16 * sizeof(float));
    assert_true(x && src && yv);
    for (int64_t i = 0; i < m; i++)
        make_act(X_RANDOM, n, x + i * n);
    kvc_matmul_op ops[NOPS];
    for (int o = 0; o < NOPS; o++) {
        uint8_t *w = random_matrix(types[o], rows[o], n, src);
        ops[o] =
            (kvc_matmul_op){types[o], w, rows[o], malloc(m * rows[o] * sizeof(float)), rows[o]};
        assert_non_null(ops[o].y);
    }
    kvc_pool *pool;
    assert_int_equal(kvc_pool_create(2, &pool), KVC_OK);
    assert_int_equal(kvc_matmul(pool, ops, NOPS, n, x, n, m), KVC_OK);
    for (int o = 0; o < NOPS; o++) {
        for (int64_t i = 0; i < m; i++) {
            kvc_matvec(NULL, types[o], ops[o].w, rows[o], n, x + i * n, yv);
            assert_memory_equal(yv, ops[o].y + i * rows[o], rows[o] * sizeof(float));
        }
        free((void *)ops[o].w), free(ops[o].y);
    }
    /* bad calls are errors, not crashes */
    kvc_matmul_op bad = {KVC_WT_Q4_K, ops[0].w, 1, yv, 1};
    assert_int_equal(kvc_matmul(pool, &bad, 1, 576, x, 576, 1), KVC_ERR_ARG);
    bad.type = 7; /* q5_1: known, no kernels */
    assert_int_equal(kvc_matmul(pool, &bad, 1, 576, x, 576, 1), KVC_ERR_ARG);
    kvc_pool_free(pool);
    free(x), free(src), free(yv);
}

/* The default model's own tensors (quantised by llama.cpp): matvec against the
 * f32 dot of the dequantised rows, within the budget. Skipped without the model. */
static void test_real_model(void **state) {
    (void)state;
    kvc_gguf *g = NULL;
    if (kvc_gguf_open(KVC_MODEL_PATH, &g) != KVC_OK) {
        printf("(no model at %s: skipped)\n", KVC_MODEL_PATH);
        return;
    }
    const char *names[] = {"blk.0.attn_q.weight", "blk.0.ffn_down.weight", "blk.29.ffn_up.weight",
                           "token_embd.weight"};
    kvc_pool *pool;
    assert_int_equal(kvc_pool_create(2, &pool), KVC_OK);
    int checked = 0;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        const kvc_gguf_tensor *t = kvc_gguf_tensor_find(g, names[k]);
        if (!t || !kvc_wtype_get(t->type) || !kvc_wtype_get(t->type)->supported) continue;
        const int64_t n = (int64_t)t->ne[0],
                      rows = (int64_t)t->ne[1] < 300 ? (int64_t)t->ne[1] : 300;
        const size_t rb = kvc_wtype_row_bytes(t->type, n);
        assert_true(rb > 0 && rb * rows <= t->n_bytes);
        float *x = malloc(n * sizeof(float)), *y = malloc(rows * sizeof(float)),
              *wf = malloc(n * sizeof(float));
        assert_true(x && y && wf);
        make_act(X_RANDOM, n, x);
        kvc_matvec(pool, t->type, t->data, rows, n, x, y);
        for (int64_t r = 0; r < rows; r++) {
            const uint8_t *w = (const uint8_t *)t->data + r * rb;
            kvc_wtype_ref(t->type)->dequant(w, wf, n);
            budget b = make_budget(t->type, w, n, wf, x);
            double df = dot_f64(wf, x, n);
            if (!(fabs(y[r] - df) <= b.aq + 2 * b.k * U * b.m))
                fail_msg("%s row %lld: matvec %.9g vs f32 dot %.9g", names[k], (long long)r, y[r],
                         df);
        }
        free(x), free(y), free(wf);
        checked++;
    }
    assert_int_equal(checked, 4);
    kvc_pool_free(pool);
    kvc_gguf_close(g);
}

static void test_dequant_rows(void **state) {
    (void)state;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        uint32_t type = all_types[ti];
        const int64_t n = 512, rows = 7;
        size_t rb = kvc_wtype_row_bytes(type, n);
        uint8_t *w = malloc(rb * rows);
        float *src = malloc(n * sizeof(float)), *out = malloc(3 * n * sizeof(float)),
              *one = malloc(n * sizeof(float));
        assert_true(w && src && out && one);
        for (int64_t r = 0; r < rows; r++)
            make_weights(W_RANDOM, type, n, src, w + r * rb);
        kvc_dequant_rows(type, w, 2, 3, n, out);
        for (int r = 0; r < 3; r++) {
            kvc_wtype_get(type)->dequant(w + (2 + r) * rb, one, n);
            assert_memory_equal(out + r * n, one, n * sizeof(float));
        }
        free(w), free(src), free(out), free(one);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        {"f32", test_type, NULL, NULL, (void *)&all_types[0]},
        {"f16", test_type, NULL, NULL, (void *)&all_types[1]},
        {"bf16", test_type, NULL, NULL, (void *)&all_types[2]},
        {"q4_0", test_type, NULL, NULL, (void *)&all_types[3]},
        {"q4_1", test_type, NULL, NULL, (void *)&all_types[4]},
        {"q8_0", test_type, NULL, NULL, (void *)&all_types[5]},
        {"q4_k", test_type, NULL, NULL, (void *)&all_types[6]},
        {"q5_k", test_type, NULL, NULL, (void *)&all_types[7]},
        {"q6_k", test_type, NULL, NULL, (void *)&all_types[8]},
        {"q5_0", test_type, NULL, NULL, (void *)&all_types[9]},
        cmocka_unit_test(test_quantize_roundtrip),
        cmocka_unit_test(test_ggml_blocks),
        cmocka_unit_test(test_unknown_types),
        cmocka_unit_test(test_matvec_threads),
        cmocka_unit_test(test_matvec_multi),
        cmocka_unit_test(test_matvec_long_rows),
        cmocka_unit_test(test_dequant_rows),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_real_model),
        cmocka_unit_test(test_matmul_multi_long),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
