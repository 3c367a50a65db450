/* The AVX-512 kernels of PackKV's grouped layout (kv_packkv_grouped_avx512.c),
 * called by the paper-layout kernels' entry points (kv_packkv_avx512.c) for
 * blocks whose group is not 1; compiled with the AVX-512 flags. */
#ifndef KVC_KERNELS_KV_PACKKV_AVX512_H
#define KVC_KERNELS_KV_PACKKV_AVX512_H

#include "kv/codec/packkv.h"

void kvc_pk_grouped_init_avx512(void); /* the decode tables; before the first call */
void kvc_pk_qk_grouped_avx512(const kvc_pk_block *b, const float *q, int ldq, int G, int j0, int j1,
                              float *s, int lds);
void kvc_pk_pv_grouped_avx512(const kvc_pk_block *b, const float *p, int ldp, int G, int j0, int j1,
                              float *o, int ldo);

#endif
