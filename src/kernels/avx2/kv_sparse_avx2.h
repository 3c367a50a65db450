/* Helpers of the AVX2 kernels over sparse vectors stored as a channel mask
 * plus the kept values in channel order (kv_bitmap_avx2.c: MUSTAFAR's bitmap
 * tiles; kv_packed_avx2.c: MosaicKV's packed format); included only by them. */
#ifndef KVC_KERNELS_KV_SPARSE_AVX2_H
#define KVC_KERNELS_KV_SPARSE_AVX2_H

#include <stdint.h>

/* Byte j of the result = the number of set bits in bytes 0..j-1 of m (byte
 * 0 = 0): where the kept values of each 8-channel piece start. Computed from
 * the mask at once (byte popcounts, then a multiply for the prefix sums), so
 * the pieces' loads do not wait on each other as a pointer advanced piece by
 * piece made them. */
static inline uint64_t kvc_piece_offsets(uint64_t m) {
    uint64_t x = m - ((m >> 1) & 0x5555555555555555ull);
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (x * 0x0101010101010101ull) << 8; /* bytes <= 56 before the shift: no carries */
}

#endif
