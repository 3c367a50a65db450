/* Bit spreading without BMI2's PDEP: bit i of x moved to bit 2i or 4i (the
 * deposit PDEP does with the masks 0x5555... and 0x1111...). PDEP is one
 * cycle-class instruction on Intel and AMD Zen 3+, but microcoded on AMD Zen
 * 1 and 2 (hundreds of cycles, data-dependent), so kernels that spread mask
 * bits take these shift-and-mask versions there (kvc_cpu_fast_pdep). */
#ifndef KVC_BASE_BITS_H
#define KVC_BASE_BITS_H

#include <stdint.h>

/* bit i of x to bit 2i, i < 32 */
static inline uint64_t kvc_spread2_u32(uint32_t x) {
    uint64_t v = x;
    v = (v | v << 16) & 0x0000ffff0000ffffull;
    v = (v | v << 8) & 0x00ff00ff00ff00ffull;
    v = (v | v << 4) & 0x0f0f0f0f0f0f0f0full;
    v = (v | v << 2) & 0x3333333333333333ull;
    v = (v | v << 1) & 0x5555555555555555ull;
    return v;
}

/* bit i of x to bit 4i, i < 16 */
static inline uint64_t kvc_spread4_u16(uint16_t x) {
    uint64_t v = x;
    v = (v | v << 24) & 0x000000ff000000ffull;
    v = (v | v << 12) & 0x000f000f000f000full;
    v = (v | v << 6) & 0x0303030303030303ull;
    v = (v | v << 3) & 0x1111111111111111ull;
    return v;
}

#endif
