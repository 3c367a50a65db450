/* Activation preparation on non-finite input (probe finding: a model with
 * overlapping tensors fed garbage to the activations, and the AVX-512 Q8_0
 * block sum added cvtps2dq's INT_MIN results, overflowing a signed int - a
 * UBSan error). Whatever the input (NaN, Inf, huge, denormal), every ISA must
 * prepare the activation without undefined behaviour (the ASan+UBSan build
 * runs this), and the Q8_K group sums must be the sums of the int8 values
 * actually stored. Run once per KVC_ISA level like every model test. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/wtype.h"

enum { N = 512 }; /* two Q8_K blocks, sixteen Q8_0 blocks */

/* Fills x with a pattern of `bad` values among ordinary ones. */
static void fill(float *x, float bad, int every) {
    for (int i = 0; i < N; i++)
        x[i] = i % every == 0 ? bad : (float)((i * 37) % 19) - 9.0f;
}

static void check_q8_k_sums(const float *x) {
    unsigned char *buf = malloc(kvc_act_bytes(KVC_ACT_Q8_K, N));
    assert_non_null(buf);
    kvc_act_prepare(KVC_ACT_Q8_K, x, buf, N);
    const int8_t *q = (const int8_t *)buf;
    const int16_t *bsum = (const int16_t *)(buf + N + (N / 256) * sizeof(float));
    for (int g = 0; g < N / 16; g++) {
        int s = 0;
        for (int j = 0; j < 16; j++)
            s += q[16 * g + j];
        assert_int_equal(bsum[g], s);
    }
    free(buf);
}

static void check_q8_0(const float *x) {
    void *buf = malloc(kvc_act_bytes(KVC_ACT_Q8_0, N));
    assert_non_null(buf);
    kvc_act_prepare(KVC_ACT_Q8_0, x, buf, N); /* UBSan: no signed overflow in the block sum */
    free(buf);
}

static void test_nonfinite_activations(void **state) {
    (void)state;
    const float bad[] = {NAN, INFINITY, -INFINITY, 3e38f, -3e38f, 1e-45f};
    float x[N];
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        for (int every = 1; every <= 7; every += 6) { /* all bad, or one in seven */
            fill(x, bad[b], every);
            check_q8_0(x);
            check_q8_k_sums(x);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_nonfinite_activations)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
