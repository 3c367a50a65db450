/* The one pseudo-random generator of kvcomp: splitmix64 (Steele, Lea and
 * Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014), as a
 * stateful stream and as the stateless mix it is built on. Everything seeded
 * (sampling, profiling prompts, RULER instances, synthetic K/V, tests) draws
 * from here, so a seed means the same numbers everywhere. */
#ifndef KVC_BASE_RNG_H
#define KVC_BASE_RNG_H

#include <stdint.h>

#define KVC_RNG_GOLDEN 0x9e3779b97f4a7c15ull

/* splitmix64's output function of x + golden ratio: a bijection of 64-bit
 * words that mixes every input bit into every output bit. Counter-based use
 * (kvc_rng_mix(seed ^ index)) makes any element of a sequence reproducible on
 * its own. */
static inline uint64_t kvc_rng_mix(uint64_t x) {
    uint64_t z = x + KVC_RNG_GOLDEN;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Next number of the stream whose state is *s (any value is a valid seed). */
static inline uint64_t kvc_rng_next(uint64_t *s) {
    uint64_t x = *s;
    *s += KVC_RNG_GOLDEN;
    return kvc_rng_mix(x);
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double kvc_rng_unit(uint64_t *s) {
    return (double)(kvc_rng_next(s) >> 11) * 0x1.0p-53;
}

#endif
