/* Softmax kernels of the attention driver (docs/design.md §4 "Driver"): the max of
 * a score row, and exponentiation in place against a running max with the
 * sum returned. Scalar references in softmax.c; AVX2 / AVX-512 variants in
 * src/kernels/<isa>/kv_dense_softmax_<isa>.c, registered by kvc_codecs_init.
 * The SIMD exp is a polynomial accurate to a few ulp (budget in tests/kv). */
#ifndef KVC_KV_SOFTMAX_H
#define KVC_KV_SOFTMAX_H

#include "kvcomp.h"

typedef struct kvc_softmax_kernels {
    /* max of s[0..n), -inf for n == 0 or all -inf */
    float (*max)(const float *s, int n);
    /* s[i] = exp(s[i] - m) for i < n (exp(-inf) = 0); returns the sum. m is finite. */
    float (*exp_sum)(float *s, int n, float m);
} kvc_softmax_kernels;

extern kvc_softmax_kernels kvc_softmax_k;
extern const kvc_softmax_kernels kvc_softmax_ref;

/* SIMD kernels (src/kernels/<isa>/kv_dense_softmax_<isa>.c), registered by
 * kvc_codecs_init for the active ISA. */
void kvc_softmax_register_avx2(kvc_softmax_kernels *k);
void kvc_softmax_register_avx512(kvc_softmax_kernels *k);

#endif
