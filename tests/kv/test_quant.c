/* Quant codec math (src/kv/codec/quant_pack.c): bit packing at 1-4 bits is
 * exact (3 bits: 11 values per word, the eleventh 2 bits wide); every bit width
 * round-trips within its quantization bound; constant rows and extreme values
 * are handled; the AVX2 and AVX-512 fused kernels agree with the scalar
 * reference, which agrees with decode-then-dot in double.
 *
 * Error budgets:
 *  - round trip: |x - x^| <= scale/2 * (1 + 1e-5) + 1e-6 * |x| for a code not
 *    clamped by its slot (the f16 min is rounded down and the scale up, so no
 *    value is clipped by the range); the 3-bit eleventh slot clamps to 3 and
 *    then decodes to exactly min + 3*scale.
 *  - kernels vs scalar, and scalar vs double: |diff| <= 2e-6 * sum_r |w_r| *
 *    (|code*scale| + |min|) over the row: f32 accumulation of <= 128+ terms in a
 *    different order (FMA vs mul+add), relative error ~ rows * 2^-24. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kv/codec/quant.h"

#include "test_rng.h"
static float frand(void) { return (float)rnd() / 4294967296.0f * 2.0f - 1.0f; } /* [-1,1) */
static float gauss(void) {
    float u = ((float)rnd() + 1.0f) / 4294967297.0f, v = (float)rnd() / 4294967296.0f;
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

static void test_pack_unpack_exact(void **state) {
    (void)state;
    for (int bits = 1; bits <= 4; bits++) {
        for (int n = 1; n <= KVC_QUANT_MAX_N; n++) {
            uint8_t codes[KVC_QUANT_MAX_N], back[KVC_QUANT_MAX_N];
            uint32_t words[KVC_QUANT_MAX_N];
            for (int i = 0; i < n; i++) codes[i] = (uint8_t)(rnd() % (kvc_quant_qmax(bits, i) + 1));
            kvc_quant_pack(bits, codes, n, words);
            kvc_quant_unpack(bits, words, n, back);
            assert_memory_equal(codes, back, (size_t)n);
        }
    }
    assert_int_equal(kvc_quant_vpw(1), 32);
    assert_int_equal(kvc_quant_vpw(2), 16);
    assert_int_equal(kvc_quant_vpw(3), 11);
    assert_int_equal(kvc_quant_vpw(4), 8);
    assert_int_equal(kvc_quant_vpw(5), 0);
    assert_int_equal(kvc_quant_words(3, 32), 3);
    assert_int_equal(kvc_quant_words(3, 33), 3);
    assert_int_equal(kvc_quant_words(3, 34), 4);
    assert_int_equal(kvc_quant_words(2, 32), 2);
}

static void test_pack_3bit_layout(void **state) {
    (void)state;
    /* ten 3-bit values at bits 0..29, the eleventh at bits 30..31 */
    uint8_t codes[22];
    for (int i = 0; i < 22; i++) codes[i] = (uint8_t)(i % 11 == 10 ? 3 : 7);
    uint32_t w[2];
    kvc_quant_pack(3, codes, 22, w);
    assert_int_equal(w[0], 0xffffffffu);
    assert_int_equal(w[1], 0xffffffffu);
    memset(codes, 0, sizeof codes);
    codes[0] = 5;  /* bits 0..2 */
    codes[9] = 6;  /* bits 27..29 */
    codes[10] = 2; /* bits 30..31 */
    codes[11] = 1; /* next word, bits 0..2 */
    kvc_quant_pack(3, codes, 22, w);
    assert_int_equal(w[0], 5u | (6u << 27) | (2u << 30));
    assert_int_equal(w[1], 1u);
    assert_int_equal(kvc_quant_qmax(3, 10), 3);
    assert_int_equal(kvc_quant_qmax(3, 21), 3);
    assert_int_equal(kvc_quant_qmax(3, 11), 7);
    /* 2 bits: value i at bit 2i */
    uint8_t c2[16] = {1, 2, 3};
    kvc_quant_pack(2, c2, 16, w);
    assert_int_equal(w[0], 1u | (2u << 2) | (3u << 4));
}

static void test_f16_directed_rounding(void **state) {
    (void)state;
    for (int i = 0; i < 200000; i++) {
        float x = frand() * powf(2.0f, (float)(int)(rnd() % 40) - 24.0f);
        float d = kvc_f16_to_f32(kvc_f16_round_down(x)), u = kvc_f16_to_f32(kvc_f16_round_up(x));
        assert_true(d <= x && u >= x);
        assert_true(u - d <= fabsf(x) * 1e-3f + 1e-7f);
    }
    assert_true(kvc_f16_to_f32(kvc_f16_round_down(1e9f)) == 65504.0f);
    assert_true(kvc_f16_to_f32(kvc_f16_round_up(-1e9f)) == -65504.0f);
    assert_true(kvc_f16_to_f32(kvc_f16_round_down(-1e-9f)) < 0.0f);
    assert_true(kvc_f16_to_f32(kvc_f16_round_up(1e-9f)) > 0.0f);
}

/* Row r of x is encoded from x[r*n ...]; checks the bound of each value. */
static void check_roundtrip(const float *x, int rows, int n, int bits) {
    int wpr = kvc_quant_words(bits, n);
    kvc_f16 *mins = malloc(sizeof(kvc_f16) * rows), *scales = malloc(sizeof(kvc_f16) * rows);
    uint32_t *words = malloc(sizeof(uint32_t) * rows * wpr);
    float *y = malloc(sizeof(float) * rows * n);
    kvc_quant_encode(x, n, 1, rows, n, bits, mins, scales, words);
    kvc_qtile t = {mins, scales, words, rows, n, bits};
    kvc_quant_decode(&t, y, n);
    uint8_t codes[KVC_QUANT_MAX_N];
    for (int r = 0; r < rows; r++) {
        float s = kvc_f16_to_f32(scales[r]), m = kvc_f16_to_f32(mins[r]);
        float mn = INFINITY, mx = -INFINITY;
        for (int i = 0; i < n; i++) {
            mn = fminf(mn, x[r * n + i]);
            mx = fmaxf(mx, x[r * n + i]);
        }
        assert_true(m <= mn);                                    /* min rounded down */
        assert_true(m + s * (bits == 3 ? 7 : (1 << bits) - 1) >= mx - 1e-6f * fabsf(mx) - 1e-30f);
        assert_true(s >= 0.0f && isfinite(s));
        kvc_quant_unpack(bits, words + (size_t)r * wpr, n, codes);
        for (int i = 0; i < n; i++) {
            float xi = x[r * n + i], yi = y[r * n + i];
            assert_true(isfinite(yi));
            int qm = kvc_quant_qmax(bits, i);
            if (codes[i] == qm && bits == 3 && qm == 3 && xi > m + 3.5f * s) {
                assert_true(yi == 3.0f * s + m); /* the eleventh slot clamped */
                continue;
            }
            float bound = s * 0.5f * (1.0f + 1e-5f) + 1e-6f * fabsf(xi) + 1e-30f;
            if (!(fabsf(xi - yi) <= bound))
                fail_msg("bits %d n %d row %d i %d: x %g decoded %g (min %g scale %g)", bits, n, r,
                         i, xi, yi, m, s);
        }
    }
    free(mins);
    free(scales);
    free(words);
    free(y);
}

static void test_roundtrip_bound(void **state) {
    (void)state;
    int ns[] = {1, 2, 7, 11, 16, 31, 32, 33, 64, 100, 128};
    float *x = malloc(sizeof(float) * 64 * 128);
    for (int bits = 1; bits <= 4; bits++) {
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            int n = ns[k];
            for (int kind = 0; kind < 6; kind++) {
                for (int i = 0; i < 64 * n; i++) {
                    switch (kind) {
                    case 0: x[i] = gauss(); break;                       /* normal */
                    case 1: x[i] = frand() * 1e-3f + 5.0f; break;        /* offset, narrow */
                    case 2: x[i] = rnd() % 17 == 0 ? 300.0f * frand() : gauss(); break; /* outliers */
                    case 3: x[i] = 0.0f; break;                          /* zeros */
                    case 4: x[i] = -2.5f; break;                         /* constant row */
                    case 5: x[i] = (float)(rnd() % 5) - 2.0f; break;     /* few levels */
                    }
                }
                check_roundtrip(x, 64, n, bits);
            }
        }
    }
    free(x);
}

static void test_constant_row_is_exact_or_tiny(void **state) {
    (void)state;
    float x[32];
    for (int i = 0; i < 32; i++) x[i] = 0.1f; /* not representable in f16 */
    kvc_f16 mn, sc;
    uint32_t w[4];
    for (int bits = 1; bits <= 4; bits++) {
        kvc_quant_encode(x, 32, 1, 1, 32, bits, &mn, &sc, w);
        float y[32];
        kvc_qtile t = {&mn, &sc, w, 1, 32, bits};
        kvc_quant_decode(&t, y, 32);
        for (int i = 0; i < 32; i++) assert_true(fabsf(y[i] - 0.1f) < 1e-4f);
        for (int i = 0; i < 32; i++) x[i] = 0.0f;
        kvc_quant_encode(x, 32, 1, 1, 32, bits, &mn, &sc, w);
        assert_int_equal(sc, 0);
        kvc_quant_decode(&t, y, 32);
        for (int i = 0; i < 32; i++) assert_true(y[i] == 0.0f);
        for (int i = 0; i < 32; i++) x[i] = 0.1f;
    }
}

static void test_strided_encode_matches_transposed(void **state) {
    (void)state;
    /* keys [token][channel]: per-channel rows via row_stride 1, val_stride D */
    enum { T = 32, D = 24 };
    float k[T * D], kt[D * T];
    for (int t = 0; t < T; t++)
        for (int d = 0; d < D; d++) kt[d * T + t] = k[t * D + d] = gauss() * (1.0f + (float)d);
    for (int bits = 1; bits <= 4; bits++) {
        kvc_f16 m1[D], s1[D], m2[D], s2[D];
        uint32_t w1[D * 4], w2[D * 4];
        kvc_quant_encode(k, 1, D, D, T, bits, m1, s1, w1);
        kvc_quant_encode(kt, T, 1, D, T, bits, m2, s2, w2);
        assert_memory_equal(m1, m2, sizeof m1);
        assert_memory_equal(s1, s2, sizeof s1);
        assert_memory_equal(w1, w2, sizeof(uint32_t) * D * kvc_quant_words(bits, T));
    }
}

static void test_nan_and_huge_values(void **state) {
    (void)state;
    float x[16];
    for (int i = 0; i < 16; i++) x[i] = gauss();
    x[3] = NAN;
    x[5] = 1e30f;
    x[6] = -1e30f;
    kvc_f16 mn, sc;
    uint32_t w[2];
    for (int bits = 1; bits <= 4; bits++) {
        kvc_quant_encode(x, 16, 1, 1, 16, bits, &mn, &sc, w);
        float y[16];
        kvc_qtile t = {&mn, &sc, w, 1, 16, bits};
        kvc_quant_decode(&t, y, 16);
        for (int i = 0; i < 16; i++) assert_true(isfinite(y[i]));
        /* clipped to the f16 range: the top code, and -65504 */
        float top = kvc_f16_to_f32(mn) + kvc_f16_to_f32(sc) * (float)((1 << bits) - 1);
        assert_true(y[5] == top && y[6] == -65504.0f && kvc_f16_to_f32(sc) <= 65504.0f);
    }
}

/* sum_r w_r * dequant in double, and the budget sum |w_r| (|code*s| + |m|). */
static void ref_double(const kvc_qtile *t, const float *w, int i, double *val, double *mag) {
    int wpr = kvc_quant_words(t->bits, t->n);
    uint8_t codes[KVC_QUANT_MAX_N];
    *val = *mag = 0;
    for (int r = 0; r < t->rows; r++) {
        kvc_quant_unpack(t->bits, t->words + (size_t)r * wpr, t->n, codes);
        double s = kvc_f16_to_f32(t->scales[r]), m = kvc_f16_to_f32(t->mins[r]);
        *val += (double)w[r] * (codes[i] * s + m);
        *mag += fabs((double)w[r]) * (fabs(codes[i] * s) + fabs(m));
    }
}

static void run_kernel_case(kvc_quant_wsum_fn fn, const char *name, int bits, int rows, int n,
                            int nw, int kind) {
    int wpr = kvc_quant_words(bits, n);
    float *x = malloc(sizeof(float) * rows * n);
    for (int i = 0; i < rows * n; i++) {
        switch (kind) {
        case 0: x[i] = gauss(); break;
        case 1: x[i] = 0.0f; break;
        case 2: x[i] = rnd() % 13 == 0 ? 1e4f * frand() : gauss(); break;
        default: x[i] = frand() * 1e-4f - 3.0f; break;
        }
    }
    kvc_f16 *mins = malloc(sizeof(kvc_f16) * rows), *scales = malloc(sizeof(kvc_f16) * rows);
    uint32_t *words = malloc(sizeof(uint32_t) * rows * wpr);
    kvc_quant_encode(x, n, 1, rows, n, bits, mins, scales, words);
    kvc_qtile t = {mins, scales, words, rows, n, bits};
    int ldw = rows + 3, ldo = n + 5;
    float *w = malloc(sizeof(float) * nw * ldw);
    for (int i = 0; i < nw * ldw; i++) w[i] = kind == 1 ? 0.0f : gauss();
    float *o_ref = malloc(sizeof(float) * nw * ldo), *o_k = malloc(sizeof(float) * nw * ldo);
    for (int i = 0; i < nw * ldo; i++) o_ref[i] = o_k[i] = frand(); /* accumulates into out */
    float *o_init = malloc(sizeof(float) * nw * ldo);
    memcpy(o_init, o_ref, sizeof(float) * nw * ldo);
    kvc_quant_wsum_scalar(&t, w, ldw, nw, o_ref, ldo);
    fn(&t, w, ldw, nw, o_k, ldo);
    for (int h = 0; h < nw; h++) {
        for (int i = 0; i < ldo; i++) {
            if (i >= n) { /* padding untouched */
                assert_true(o_k[h * ldo + i] == o_init[h * ldo + i]);
                assert_true(o_ref[h * ldo + i] == o_init[h * ldo + i]);
                continue;
            }
            double val, mag;
            ref_double(&t, w + h * ldw, i, &val, &mag);
            double budget = 2e-6 * mag * (1.0 + rows / 64.0) + 1e-6;
            double want = val + o_init[h * ldo + i];
            if (fabs(o_ref[h * ldo + i] - want) > budget || fabs(o_k[h * ldo + i] - want) > budget)
                fail_msg("%s bits %d rows %d n %d nw %d kind %d h %d i %d: scalar %.9g kernel %.9g "
                         "double %.9g budget %g",
                         name, bits, rows, n, nw, kind, h, i, o_ref[h * ldo + i], o_k[h * ldo + i],
                         want, budget);
        }
    }
    free(x);
    free(mins);
    free(scales);
    free(words);
    free(w);
    free(o_ref);
    free(o_k);
    free(o_init);
}

static void run_kernel(kvc_quant_wsum_fn fn, const char *name) {
    int ns[] = {1, 5, 8, 11, 16, 17, 31, 32, 33, 48, 64, 100, 128};
    int rowss[] = {1, 3, 64, 100};
    for (int bits = 1; bits <= 4; bits++)
        for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
            for (size_t b = 0; b < sizeof rowss / sizeof rowss[0]; b++)
                for (int nw = 1; nw <= 9; nw += (nw < 5 ? 1 : 4))
                    for (int kind = 0; kind < 4; kind++)
                        run_kernel_case(fn, name, bits, rowss[b], ns[a], nw, kind);
}

static void test_kernel_scalar_vs_double(void **state) {
    (void)state;
    run_kernel(kvc_quant_wsum_scalar, "scalar");
}

static kvc_quant_wsum_fn registered(void (*reg)(kvc_quant_wsum_fn *)) {
    kvc_quant_wsum_fn f = kvc_quant_wsum_scalar;
    reg(&f);
    return f;
}

static void test_kernel_avx2(void **state) {
    (void)state;
    if (kvc_active_isa() < KVC_ISA_AVX2) skip();
    run_kernel(registered(kvc_quant_register_avx2), "avx2");
}

static void test_kernel_avx512(void **state) {
    (void)state;
    if (kvc_active_isa() < KVC_ISA_AVX512) skip();
    run_kernel(registered(kvc_quant_register_avx512), "avx512");
}

static void test_dispatch_follows_isa(void **state) {
    (void)state;
    kvc_codecs_init();
    kvc_quant_wsum_fn f = kvc_quant_wsum_k;
    switch (kvc_active_isa()) {
    case KVC_ISA_AVX512: assert_ptr_equal(f, registered(kvc_quant_register_avx512)); break;
    case KVC_ISA_AVX2: assert_ptr_equal(f, registered(kvc_quant_register_avx2)); break;
    default: assert_ptr_equal(f, kvc_quant_wsum_scalar); break;
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack_unpack_exact),
        cmocka_unit_test(test_pack_3bit_layout),
        cmocka_unit_test(test_f16_directed_rounding),
        cmocka_unit_test(test_roundtrip_bound),
        cmocka_unit_test(test_constant_row_is_exact_or_tiny),
        cmocka_unit_test(test_strided_encode_matches_transposed),
        cmocka_unit_test(test_nan_and_huge_values),
        cmocka_unit_test(test_kernel_scalar_vs_double),
        cmocka_unit_test(test_kernel_avx2),
        cmocka_unit_test(test_kernel_avx512),
        cmocka_unit_test(test_dispatch_follows_isa),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
