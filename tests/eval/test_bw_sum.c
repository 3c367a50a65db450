/* The summing loops of `bench bw` (src/eval/bw_kernels.h): the AVX2 and
 * AVX-512 kernels give the portable reference's sum on random buffers, on
 * buffers whose words wrap around 2^64 when added, and on the shortest buffer
 * (256 bytes). Variants the active ISA does not allow are skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "eval/bw_kernels.h"
#include "kvcomp.h"

static void check_sizes(kvc_bw_sum_fn *fn, uint64_t fill) {
    const size_t sizes[] = {256, 512, 4096, 256 * 37};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        uint64_t *buf = aligned_alloc(64, n), s = 42 + k;
        assert_non_null(buf);
        for (size_t i = 0; i < n / 8; i++)
            buf[i] = fill ? fill : kvc_rng_next(&s);
        assert_int_equal(fn((const char *)buf, n), kvc_bw_sum_ref((const char *)buf, n));
        free(buf);
    }
}

static void test_avx2(void **state) {
    (void)state;
    if (kvc_active_isa() < KVC_ISA_AVX2) skip();
    check_sizes(kvc_bw_sum_avx2, 0);
    check_sizes(kvc_bw_sum_avx2, UINT64_MAX); /* every add wraps */
}

static void test_avx512(void **state) {
    (void)state;
    if (kvc_active_isa() < KVC_ISA_AVX512) skip();
    check_sizes(kvc_bw_sum_avx512, 0);
    check_sizes(kvc_bw_sum_avx512, UINT64_MAX);
}

static void test_reference(void **state) {
    (void)state;
    uint64_t buf[32] __attribute__((aligned(64)));
    for (int i = 0; i < 32; i++)
        buf[i] = (uint64_t)i;
    assert_int_equal(kvc_bw_sum_ref((const char *)buf, sizeof buf), 31 * 32 / 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference),
        cmocka_unit_test(test_avx2),
        cmocka_unit_test(test_avx512),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
