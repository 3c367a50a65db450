/* Small AVX-512 helpers shared by the weight kernels in this directory. */
#ifndef KVC_KERNELS_WT_AVX512_UTIL_H
#define KVC_KERNELS_WT_AVX512_UTIL_H

#include <immintrin.h>
#include <stdint.h>

#define KVC_AINLINE static inline __attribute__((always_inline))

KVC_AINLINE float kvc_f16_load_avx512(const uint16_t *p) { return _cvtsh_ss(*p); }

/* Mask of the first k lanes (0 <= k <= 16). */
KVC_AINLINE __mmask16 kvc_mask16(int k) { return (__mmask16)((1u << k) - 1u); }

/* Mask of the first k lanes (0 <= k <= 32). */
KVC_AINLINE __mmask32 kvc_mask32(int k) { return k >= 32 ? ~(__mmask32)0 : (__mmask32)((1u << k) - 1u); }

/* Mask of the first k bytes (0 <= k <= 64). */
KVC_AINLINE __mmask64 kvc_mask64(int k) { return k >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << k) - 1); }

#endif
