/* The kv tests' pseudo-random numbers: a xorshift64 with a fixed seed, so
 * every run of a test sees the same data (a failure reproduces). Included by
 * one translation unit per test binary: the state is file-static. */
#ifndef KVC_TESTS_KV_TEST_RNG_H
#define KVC_TESTS_KV_TEST_RNG_H

#include <stdint.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

#endif
