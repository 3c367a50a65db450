/* Shared by the method tests of tests/kv: a deterministic uniform generator
 * in [-1, 1) (each test seeds `rng` itself) and the relative comparison of an
 * attention output with its reference, |a - ref| <= tol * (1 + |ref|),
 * failing with the element, both values and the error. Include after cmocka.h. */
#ifndef KVC_TESTS_KV_EXPECT_CLOSE_H
#define KVC_TESTS_KV_EXPECT_CLOSE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

static uint64_t rng;

static inline float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static inline void expect_close(const float *a, const float *ref, size_t n, double tol, const char *what) {
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - ref[i]) / (1.0 + fabs(ref[i]));
        if (!(e <= tol)) fail_msg("%s: element %zu: %g vs %g (err %g > %g)", what, i, a[i], ref[i], e, tol);
    }
}

#endif
