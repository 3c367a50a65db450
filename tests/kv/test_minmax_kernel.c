/* The min/max block scoring kernels (src/kernels/<isa>/kv_minmax_<isa>.c)
 * against the scalar reference (src/kv/select/minmax_block.c) on raw blocks:
 * head dims 1..256 (odd ones too), G = 1..10 (more heads than one pass of
 * either kernel takes), unit counts that leave ragged last blocks (n not a
 * multiple of 16, n < 16), and adversarial values: all zero, huge magnitudes
 * (±6e4, f16's range), max below min is never stored but all-negative and
 * all-positive queries are. The kernels differ from the reference only in the
 * order of the f32 sums: |a - b| <= 1e-5 * sum_c |q| (|max| + |min|). Lanes
 * past n must not be written. The q8 block kernels the same way, over blocks
 * encoded from f16 ones (whose intervals the q8 ones must contain). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "base/f16.h"
#include "base/rng.h"
#include "kv/codec/codec.h"
#include "kv/select/minmax_block.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { return (float)kvc_rng_unit(&rng) * 2.0f - 1.0f; }

enum { KIND_RANDOM, KIND_ZERO, KIND_HUGE, KIND_QPOS, KIND_QNEG };

/* Blocks of n random units (max/min per channel, of the given kind) in the
 * f16 block layout; their f16 values also into hi/lo when not NULL. */
static void random_blocks(kvc_f16 *blk, int n, int dim, int kind, float *hi, float *lo) {
    for (int u = 0; u < n; u++)
        for (int c = 0; c < dim; c++) {
            float x = frand() * 3.0f, y = frand() * 3.0f;
            if (kind == KIND_ZERO) x = y = 0.0f;
            if (kind == KIND_HUGE) x *= 2e4f, y *= 2e4f;
            kvc_f16 *row = blk + (size_t)(u / KVC_MM_LANES) * dim * 2 * KVC_MM_LANES + (size_t)c * 2 * KVC_MM_LANES;
            row[u % KVC_MM_LANES] = kvc_f32_to_f16(x > y ? x : y);
            row[KVC_MM_LANES + u % KVC_MM_LANES] = kvc_f32_to_f16(x > y ? y : x);
            if (hi) hi[(size_t)u * dim + c] = kvc_f16_to_f32(row[u % KVC_MM_LANES]);
            if (lo) lo[(size_t)u * dim + c] = kvc_f16_to_f32(row[KVC_MM_LANES + u % KVC_MM_LANES]);
        }
}

/* G random queries split into [q+ | q-] (of the given kind). */
static void random_query(float *qpm, int G, int dim, int kind) {
    for (int g = 0; g < G; g++)
        for (int c = 0; c < dim; c++) {
            float v = frand();
            if (kind == KIND_QPOS) v = fabsf(v);
            if (kind == KIND_QNEG) v = -fabsf(v);
            qpm[(size_t)g * 2 * dim + c] = v > 0.0f ? v : 0.0f;
            qpm[(size_t)g * 2 * dim + dim + c] = v < 0.0f ? v : 0.0f;
        }
}

static void run_case(int n, int dim, int G, int kind) {
    int nb = (n + KVC_MM_LANES - 1) / KVC_MM_LANES;
    size_t ne = (size_t)nb * dim * 2 * KVC_MM_LANES;
    kvc_f16 *blk = calloc(ne, sizeof *blk);
    float *hi = malloc(sizeof(float) * (size_t)n * dim), *lo = malloc(sizeof(float) * (size_t)n * dim);
    float *qpm = malloc(sizeof(float) * (size_t)G * 2 * dim);
    float *a = malloc(sizeof(float) * (size_t)(n + 1)), *b = malloc(sizeof(float) * (size_t)(n + 1));
    assert_non_null(blk);
    assert_non_null(a);
    random_blocks(blk, n, dim, kind, hi, lo);
    random_query(qpm, G, dim, kind);
    a[n] = b[n] = 12345.0f; /* sentinel past the last unit */
    kvc_minmax_ref.score(blk, n, dim, qpm, G, a);
    kvc_minmax_k.score(blk, n, dim, qpm, G, b);
    assert_true(b[n] == 12345.0f);
    for (int u = 0; u < n; u++) {
        double mag = 0.0;
        for (int g = 0; g < G; g++)
            for (int c = 0; c < dim; c++)
                mag += fabs(qpm[(size_t)g * 2 * dim + c]) * fabs(hi[(size_t)u * dim + c]) +
                       fabs(qpm[(size_t)g * 2 * dim + dim + c]) * fabs(lo[(size_t)u * dim + c]);
        if (!(fabs((double)a[u] - b[u]) <= 1e-5 * mag + 1e-30))
            fail_msg("n %d dim %d G %d kind %d unit %d: ref %.9g kernel %.9g (magnitude %g)", n, dim, G, kind, u,
                     a[u], b[u], mag);
    }
    free(blk); free(hi); free(lo); free(qpm); free(a); free(b);
}

/* The q8 kernels: nb full blocks encoded from random f16 blocks of the same
 * kinds; the encoded intervals contain the f16 ones (kvc_mm_q8_value), and
 * the kernel agrees with the q8 reference as above. */
static void run_case_q8(int nb, int dim, int G, int kind) {
    int n = nb * KVC_MM_LANES;
    size_t ne = (size_t)nb * dim * 2 * KVC_MM_LANES, bq = kvc_mm_q8_bytes(dim);
    kvc_f16 *blk = calloc(ne, sizeof *blk);
    uint8_t *q8 = malloc((size_t)nb * bq);
    float *qpm = malloc(sizeof(float) * (size_t)G * 2 * dim);
    float *a = malloc(sizeof(float) * (size_t)(n + 1)), *b = malloc(sizeof(float) * (size_t)(n + 1));
    assert_non_null(blk);
    assert_non_null(q8);
    random_blocks(blk, n, dim, kind, NULL, NULL);
    double *mag = calloc((size_t)n, sizeof *mag);
    for (int k = 0; k < nb; k++) kvc_mm_q8_encode(blk + (size_t)k * dim * 2 * KVC_MM_LANES, dim, q8 + (size_t)k * bq);
    random_query(qpm, G, dim, kind);
    for (int u = 0; u < n; u++)
        for (int c = 0; c < dim; c++) {
            const uint8_t *qb = q8 + (size_t)(u / KVC_MM_LANES) * bq;
            const kvc_f16 *row = blk + (size_t)(u / KVC_MM_LANES) * dim * 2 * KVC_MM_LANES + (size_t)c * 2 * KVC_MM_LANES;
            float hx = kvc_mm_q8_value(qb, dim, u % KVC_MM_LANES, c, 0), hn = kvc_mm_q8_value(qb, dim, u % KVC_MM_LANES, c, 1);
            if (!(hx >= kvc_f16_to_f32(row[u % KVC_MM_LANES]) && hn <= kvc_f16_to_f32(row[KVC_MM_LANES + u % KVC_MM_LANES])))
                fail_msg("q8 dim %d unit %d ch %d: [%g, %g] does not contain [%g, %g]", dim, u, c, hn, hx,
                         kvc_f16_to_f32(row[KVC_MM_LANES + u % KVC_MM_LANES]), kvc_f16_to_f32(row[u % KVC_MM_LANES]));
            for (int g = 0; g < G; g++)
                mag[u] += fabs(qpm[(size_t)g * 2 * dim + c]) * fabs(hx) + fabs(qpm[(size_t)g * 2 * dim + dim + c]) * fabs(hn);
        }
    a[n] = b[n] = 12345.0f;
    kvc_minmax_ref.score_q8(q8, nb, dim, qpm, G, a);
    kvc_minmax_k.score_q8(q8, nb, dim, qpm, G, b);
    assert_true(b[n] == 12345.0f);
    for (int u = 0; u < n; u++)
        if (!(fabs((double)a[u] - b[u]) <= 1e-5 * mag[u] + 1e-30))
            fail_msg("q8 nb %d dim %d G %d kind %d unit %d: ref %.9g kernel %.9g (magnitude %g)", nb, dim, G, kind, u,
                     a[u], b[u], mag[u]);
    free(blk); free(q8); free(qpm); free(a); free(b); free(mag);
}

static void test_q8(void **state) {
    (void)state;
    const int dims[] = {1, 3, 16, 31, 64, 100, 128, 256};
    for (int di = 0; di < 8; di++)
        for (int nb = 1; nb <= 3; nb++)
            for (int G = 1; G <= 10; G++) run_case_q8(nb, dims[di], G, KIND_RANDOM);
    for (int kind = KIND_ZERO; kind <= KIND_QNEG; kind++)
        for (int G = 1; G <= 9; G += 4) {
            run_case_q8(2, 64, G, kind);
            run_case_q8(1, 128, G, kind);
        }
}

static void test_shapes(void **state) {
    (void)state;
    const int dims[] = {1, 3, 16, 31, 64, 100, 128, 256};
    const int ns[] = {1, 7, 15, 16, 17, 33, 64, 250};
    for (int di = 0; di < 8; di++)
        for (int ni = 0; ni < 8; ni++)
            for (int G = 1; G <= 10; G++) run_case(ns[ni], dims[di], G, KIND_RANDOM);
}

static void test_adversarial(void **state) {
    (void)state;
    for (int kind = KIND_ZERO; kind <= KIND_QNEG; kind++)
        for (int G = 1; G <= 9; G += 4) {
            run_case(37, 64, G, kind);
            run_case(5, 128, G, kind);
        }
}

int main(void) {
    kvc_codecs_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_adversarial),
        cmocka_unit_test(test_q8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
