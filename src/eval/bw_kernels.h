/* The summing loops of `bench bw` (bench_bw.c): each returns the sum of the
 * 64-bit words of p[0..n) (n a multiple of 256, p 64-byte aligned) so that no
 * load can be optimised away. The portable reference (GCC vector extension,
 * 128-bit) is in bench_bw.c; the AVX2 and
 * AVX-512 ones in src/kernels/<isa>/bw_sum_<isa>.c, chosen by kvc_active_isa(). */
#ifndef KVC_EVAL_BW_KERNELS_H
#define KVC_EVAL_BW_KERNELS_H

#include <stddef.h>
#include <stdint.h>

typedef uint64_t kvc_bw_sum_fn(const char *p, size_t n);

uint64_t kvc_bw_sum_ref(const char *p, size_t n);
uint64_t kvc_bw_sum_avx2(const char *p, size_t n);
uint64_t kvc_bw_sum_avx512(const char *p, size_t n);

#endif
