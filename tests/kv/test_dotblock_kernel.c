/* The block-key scoring kernel (src/kernels/avx2/kv_dotblock_avx2.c) against
 * the scalar reference (src/kv/select/dot_block.c) on raw blocks written by
 * kvc_db_put: head dims 1..256 (odd ones too), G = 1..10 (more heads than one
 * pass of the kernel takes), ldq > dim, unit counts that leave ragged last
 * blocks (n < 16, n not a multiple of 16), and all-zero and huge (f16-range)
 * keys. The kernel differs from the reference only in the order of the f32
 * sums: |a - b| <= 1e-5 · max_g sum_c |q_g,c · k_c|. Lanes past n are never
 * written, and the reference itself equals a plain double dot product of
 * the f16-rounded keys. */
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
#include "kv/select/dot_block.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float frand(void) { return (float)kvc_rng_unit(&rng) * 2.0f - 1.0f; }

enum { KIND_RANDOM, KIND_ZERO, KIND_HUGE };

static void run_case(int n, int dim, int G, int kind) {
    int ldq = dim + 3;
    kvc_f16 *blk = calloc(kvc_db_elems(n, dim), sizeof *blk);
    float *keys = malloc(sizeof(float) * (size_t)n * dim), *q = malloc(sizeof(float) * (size_t)G * ldq);
    float *a = malloc(sizeof(float) * (size_t)(n + 1)), *b = malloc(sizeof(float) * (size_t)(n + 1));
    assert_non_null(blk);
    assert_non_null(keys);
    assert_non_null(q);
    assert_non_null(a);
    assert_non_null(b);
    for (int u = 0; u < n; u++) {
        float *k = keys + (size_t)u * dim;
        for (int c = 0; c < dim; c++) k[c] = kind == KIND_ZERO ? 0.0f : frand() * (kind == KIND_HUGE ? 6e4f : 3.0f);
        kvc_db_put(blk, dim, u, k);
        for (int c = 0; c < dim; c++) k[c] = kvc_f16_to_f32(kvc_f32_to_f16(k[c]));
    }
    for (size_t i = 0; i < (size_t)G * ldq; i++) q[i] = frand();
    a[n] = b[n] = 12345.0f; /* sentinel past the last unit */
    kvc_db_score_ref(blk, n, dim, q, G, ldq, a);
    kvc_db_score(blk, n, dim, q, G, ldq, b);
    assert_true(a[n] == 12345.0f && b[n] == 12345.0f);
    for (int u = 0; u < n; u++) {
        double best = -INFINITY, mag = 0.0;
        for (int g = 0; g < G; g++) {
            double s = 0.0, m = 0.0;
            for (int c = 0; c < dim; c++) {
                double p = (double)q[(size_t)g * ldq + c] * keys[(size_t)u * dim + c];
                s += p;
                m += fabs(p);
            }
            if (s > best) best = s;
            if (m > mag) mag = m;
        }
        double tol = 1e-5 * mag + 1e-30;
        if (!(fabs(a[u] - best) <= tol && fabs((double)b[u] - a[u]) <= tol))
            fail_msg("n %d dim %d G %d kind %d unit %d: exact %.9g ref %.9g kernel %.9g", n, dim, G, kind, u,
                     best, a[u], b[u]);
    }
    free(blk); free(keys); free(q); free(a); free(b);
}

static void test_kernel_matches_reference(void **state) {
    (void)state;
    kvc_codecs_init();
    static const int dims[] = {1, 3, 4, 16, 33, 48, 64, 96, 128, 256};
    static const int ns[] = {1, 5, 15, 16, 17, 40, 64, 129};
    for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
            for (int G = 1; G <= 10; G++) run_case(ns[ni], dims[di], G, KIND_RANDOM);
    for (int G = 1; G <= 6; G++) {
        run_case(37, 64, G, KIND_ZERO);
        run_case(37, 64, G, KIND_HUGE);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_matches_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
