/* Base module: f16/bf16 conversions against known values, status messages,
 * the thread pool runs every task exactly once for any thread count, the
 * bit spreads that stand in for PDEP equal a bit-by-bit deposit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/bits.h"
#include "base/cpu.h"
#include "base/f16.h"
#include "base/status.h"
#include "base/threadpool.h"

static void test_f16_known_values(void **state) {
    (void)state;
    assert_int_equal(kvc_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(kvc_f32_to_f16(-2.0f), 0xc000);
    assert_int_equal(kvc_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(kvc_f32_to_f16(1e6f), 0x7c00);
    assert_int_equal(kvc_f32_to_f16(5.9604644775390625e-8f), 0x0001);
    assert_true(kvc_f16_to_f32(0x3555) > 0.333f && kvc_f16_to_f32(0x3555) < 0.334f);
    assert_true(isnan(kvc_f16_to_f32(kvc_f32_to_f16(NAN))));
    /* every finite half round-trips exactly */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00) continue;
        assert_int_equal(kvc_f32_to_f16(kvc_f16_to_f32((kvc_f16)h)), h);
    }
}

static void test_bf16_round_nearest_even(void **state) {
    (void)state;
    assert_int_equal(kvc_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(kvc_f32_to_bf16(kvc_bits_f32(0x3f808000u)), 0x3f80); /* tie to even */
    assert_int_equal(kvc_f32_to_bf16(kvc_bits_f32(0x3f818000u)), 0x3f82);
    assert_true(kvc_bf16_to_f32(0x4049) > 3.14f && kvc_bf16_to_f32(0x4049) < 3.15f);
}

static void test_error_message(void **state) {
    (void)state;
    kvc_status s = kvc_fail(KVC_ERR_FORMAT, "tensor %s: offset %d past end", "x", 812);
    assert_int_equal(s, KVC_ERR_FORMAT);
    assert_non_null(strstr(kvc_last_error(), "tensor x: offset 812 past end"));
    assert_string_equal(kvc_status_string(KVC_ERR_NOMEM), "out of memory");
}

static void count_task(void *ctx, int task, int thread) {
    int *hits = ctx;
    (void)thread;
    __atomic_fetch_add(&hits[task], 1, __ATOMIC_RELAXED);
}

/* bit i of x to bit i * step, one bit at a time: what PDEP with the masks
 * 0x5555... (step 2) and 0x1111... (step 4) computes */
static uint64_t spread_ref(uint64_t x, int nbits, int step) {
    uint64_t v = 0;
    for (int i = 0; i < nbits; i++) v |= (x >> i & 1) << (i * step);
    return v;
}

static void test_bit_spread(void **state) {
    (void)state;
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (int n = 0; n < 100000; n++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17; /* xorshift64 */
        uint32_t x = n < 3 ? (uint32_t[]){0, 0xffffffffu, 0x80000001u}[n] : (uint32_t)r;
        assert_true(kvc_spread2_u32(x) == spread_ref(x, 32, 2));
        assert_true(kvc_spread4_u16((uint16_t)x) == spread_ref((uint16_t)x, 16, 4));
    }
}

static void test_fast_pdep_override(void **state) {
    (void)state;
    setenv("KVC_PDEP", "0", 1);
    assert_int_equal(kvc_cpu_fast_pdep(), 0);
    setenv("KVC_PDEP", "1", 1);
    assert_int_equal(kvc_cpu_fast_pdep(), 1);
    unsetenv("KVC_PDEP");
}

static void test_pool_runs_each_task_once(void **state) {
    (void)state;
    for (int nt = 1; nt <= 4; nt++) {
        kvc_pool *p;
        assert_int_equal(kvc_pool_create(nt, &p), KVC_OK);
        assert_int_equal(kvc_pool_threads(p), nt);
        for (int rep = 0; rep < 50; rep++) {
            int hits[37] = {0};
            kvc_pool_run(p, 37, count_task, hits);
            for (int i = 0; i < 37; i++) assert_int_equal(hits[i], 1);
        }
        kvc_pool_free(p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_known_values),
        cmocka_unit_test(test_bf16_round_nearest_even),
        cmocka_unit_test(test_error_message),
        cmocka_unit_test(test_pool_runs_each_task_once),
        cmocka_unit_test(test_bit_spread),
        cmocka_unit_test(test_fast_pdep_override),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
