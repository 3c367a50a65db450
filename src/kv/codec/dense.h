/* Dense codecs f32 / f16 / bf16 (the `full` method, hot windows, reference):
 * a blob is rows [n][dim] of one element type, appendable (capacity
 * grows by 1/16), with spare capacity counted as metadata. Kernels: qk (G queries against n rows) and
 * pv (accumulate G probability rows times n value rows), a scalar reference
 * in codec/dense.c and AVX2 / AVX-512 variants in src/kernels/<isa>/kv_dense_*.c,
 * registered over the references at start-up by kvc_codecs_init(). */
#ifndef KVC_KV_CODEC_DENSE_H
#define KVC_KV_CODEC_DENSE_H

#include "kv/codec/codec.h"

typedef enum kvc_dense_type { KVC_DENSE_F32 = 0, KVC_DENSE_F16 = 1, KVC_DENSE_BF16 = 2 } kvc_dense_type;
enum { KVC_DENSE_N_TYPES = 3 };

/* s[g*lds + i] = q[g*ldq + :d] . x[i][:d]       for i < n, g < G  (x rows of d elements) */
typedef void (*kvc_qk_dense_fn)(const void *x, int n, int d, const float *q, int G, int ldq,
                                float *s, int lds);
/* o[g*ldo + :d] += sum_i p[g*ldp + i] * x[i][:d] */
typedef void (*kvc_pv_dense_fn)(const void *x, int n, int d, const float *p, int G, int ldp,
                                float *o, int ldo);

/* y[i] = x[i] for i < n, widened to f32 (decode, prefill over a dense past) */
typedef void (*kvc_cvt_dense_fn)(const void *x, size_t n, float *y);

/* y[i] = x[i] narrowed to the type (round to nearest even) for i < n (append) */
typedef void (*kvc_put_dense_fn)(const float *x, size_t n, void *y);

typedef struct kvc_dense_kernels {
    kvc_qk_dense_fn qk[KVC_DENSE_N_TYPES];
    kvc_pv_dense_fn pv[KVC_DENSE_N_TYPES];
    kvc_cvt_dense_fn cvt[KVC_DENSE_N_TYPES];
    kvc_put_dense_fn put[KVC_DENSE_N_TYPES];
} kvc_dense_kernels;

/* The active kernels (after kvc_codecs_init) and the scalar references. */
extern kvc_dense_kernels kvc_dense_k;
extern const kvc_dense_kernels kvc_dense_ref;

/* Codec tables (names "f32", "f16", "bf16"). */
extern const kvc_codec_ops kvc_codec_f32, kvc_codec_f16, kvc_codec_bf16;
const kvc_codec_ops *kvc_codec_dense(kvc_dense_type t);


/* Bytes of unused capacity of a blob if c is a dense codec, else 0. */
uint64_t kvc_dense_spare_bytes(const kvc_codec *c, const void *blob);

/* Raw rows of a dense blob (type per its codec); for kernels and tests. */
const void *kvc_dense_rows(const void *blob);
/* Keeps only the first n rows (n <= count). */
void kvc_dense_truncate(void *blob, int n);
/* Makes the blob hold n rows (n >= 0; rows past the old count are
 * uninitialised until written: the near buffer, kv/near.c, copies rows
 * into place through kvc_dense_rows). */
kvc_status kvc_dense_set_count(const kvc_codec *c, void *blob, int n);
/* Frees spare capacity (a chunk that will not grow any more). */
void kvc_dense_trim(const kvc_codec *c, void *blob);

/* SIMD kernels (src/kernels/<isa>/kv_dense_<isa>.c): each overwrites the
 * entries it implements; kvc_codecs_init calls them for the active ISA. */
void kvc_dense_register_avx2(kvc_dense_kernels *k);
void kvc_dense_register_avx512(kvc_dense_kernels *k);

#endif
