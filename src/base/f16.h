/* IEEE half and bfloat16 conversions, scalar and exact (round to nearest even).
 * Kernels use F16C/AVX-512 instructions; these are the references they match. */
#ifndef KVC_BASE_F16_H
#define KVC_BASE_F16_H

#include <stdint.h>
#include <string.h>

typedef uint16_t kvc_f16;
typedef uint16_t kvc_bf16;

static inline uint32_t kvc_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float kvc_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float kvc_f16_to_f32(kvc_f16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return kvc_bits_f32(sign | 0x7f800000u | (man << 13)); /* inf / nan */
    if (exp == 0) { /* zero or subnormal: man * 2^-24 */
        float f = (float)man * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    return kvc_bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

static inline kvc_f16 kvc_f32_to_f16(float f) {
    uint32_t x = kvc_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (kvc_f16)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (kvc_f16)(sign | 0x7c00); /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) { /* below 2^-14: subnormal half, round to nearest even */
        float a = kvc_bits_f32(ax) * 16777216.0f; /* scale by 2^24 */
        uint32_t m = (uint32_t)a;
        float rem = a - (float)m;
        if (rem > 0.5f || (rem == 0.5f && (m & 1))) m++;
        return (kvc_f16)(sign | m);
    }
    uint32_t r = ax + 0xfff + ((ax >> 13) & 1) - 0x38000000u; /* rebias 127 -> 15, RNE */
    return (kvc_f16)(sign | (r >> 13));
}

static inline float kvc_bf16_to_f32(kvc_bf16 h) { return kvc_bits_f32((uint32_t)h << 16); }

static inline kvc_bf16 kvc_f32_to_bf16(float f) {
    uint32_t x = kvc_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (kvc_bf16)((x >> 16) | 0x40); /* quiet nan */
    return (kvc_bf16)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

#endif
