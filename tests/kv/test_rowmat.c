/* The row-block matrix product kernels (src/kernels/<isa>/kv_rowmat_<isa>.c)
 * against the scalar reference (src/kv/xform/rowmat.c): rows G = 1..17 (more
 * than one pass of either kernel's row group), inner sizes k = 1..130 and
 * column counts that leave ragged last blocks (1, 7, 15, 16, 17, 31, 33, 48,
 * 64, 100, 128), with leading dimensions larger than the used width; values
 * random and huge, the matrix in f16 (finite halves, subnormals included).
 * The kernels use fused multiply-adds in the reference's order, so
 * |a - b| <= 1e-5 * sum_i |x_i m_ij|. Columns past cols and rows past G of y
 * must not be written. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "base/rng.h"
#include "kv/codec/codec.h"
#include "kv/xform/rowmat.h"

static uint64_t rng = 0x243f6a8885a308d3ull;
static float frand(void) { return (float)kvc_rng_unit(&rng) * 2.0f - 1.0f; }

static void run_case(int G, int k, int cols, float scale) {
    int ldx = k + 3, ldm = cols + 5, ldy = cols + 2;
    float *x = malloc(sizeof(float) * (size_t)(G + 1) * ldx);
    kvc_f16 *m = malloc(sizeof(kvc_f16) * (size_t)k * ldm);
    float *a = malloc(sizeof(float) * (size_t)(G + 1) * ldy), *b = malloc(sizeof(float) * (size_t)(G + 1) * ldy);
    assert_non_null(x);
    assert_non_null(m);
    assert_non_null(a);
    assert_non_null(b);
    for (size_t i = 0; i < (size_t)(G + 1) * ldx; i++) x[i] = frand() * scale;
    for (size_t i = 0; i < (size_t)k * ldm; i++) m[i] = kvc_f32_to_f16(frand() * (i % 7 ? 1.0f : 1e-6f));
    for (size_t i = 0; i < (size_t)(G + 1) * ldy; i++) a[i] = b[i] = 777.0f; /* sentinels */
    kvc_rowmat_ref(x, G, ldx, m, k, cols, ldm, a, ldy);
    kvc_rowmat(x, G, ldx, m, k, cols, ldm, b, ldy);
    for (int g = 0; g <= G; g++)
        for (int j = 0; j < ldy; j++) {
            size_t at = (size_t)g * ldy + j;
            if (g == G || j >= cols) {
                if (b[at] != 777.0f) fail_msg("G %d k %d cols %d: wrote y[%d][%d] outside the result", G, k, cols, g, j);
                continue;
            }
            double mag = 0.0;
            for (int i = 0; i < k; i++)
                mag += fabs((double)x[(size_t)g * ldx + i] * kvc_f16_to_f32(m[(size_t)i * ldm + j]));
            if (!(fabs((double)a[at] - b[at]) <= 1e-5 * mag + 1e-30))
                fail_msg("G %d k %d cols %d y[%d][%d]: ref %.9g kernel %.9g", G, k, cols, g, j, a[at], b[at]);
        }
    free(x); free(m); free(a); free(b);
}

static void test_shapes(void **state) {
    (void)state;
    const int cols[] = {1, 7, 15, 16, 17, 31, 33, 48, 64, 100, 128};
    const int ks[] = {1, 3, 48, 64, 130};
    for (int G = 1; G <= 17; G++)
        for (int ki = 0; ki < 5; ki++)
            for (int ci = 0; ci < 11; ci++) run_case(G, ks[ki], cols[ci], 1.0f);
}

static void test_huge(void **state) {
    (void)state;
    run_case(3, 64, 48, 3e4f);
    run_case(9, 128, 100, 3e4f);
}

int main(void) {
    kvc_codecs_init(); /* registers the SIMD kernel of this CPU */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_huge),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
