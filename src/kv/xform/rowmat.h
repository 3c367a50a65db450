/* Small row-block matrix products: y[G][cols] = x[G][k] · M[k][cols], for the
 * few rows of a GQA group (G <= 16) against a transform matrix of a head
 * (k, cols <= a head dimension). MosaicKV maps the query into each segment's
 * rotated space and the output back once per segment and step: at 256K tokens
 * that is hundreds of G x 64 x 48 products per step, where a general sgemm
 * spends more on dispatch and packing than on the multiply-adds. The kernels
 * vectorize over the columns of M and keep every row's partial sums in
 * registers, so M streams through once. M is IEEE half precision (the
 * rotation bases are stored in f16: a map streams half the bytes) and is
 * widened to f32 in registers; x, y and the sums are f32.
 *
 * Scalar reference here (sums in order of i), SIMD versions in
 * src/kernels/<isa>/kv_rowmat_<isa>.c (fused multiply-adds in the same order,
 * so results differ from the reference by rounding only). */
#ifndef KVC_KV_XFORM_ROWMAT_H
#define KVC_KV_XFORM_ROWMAT_H

#include "base/f16.h"
#include "kvcomp.h"

/* y[g*ldy + j] = sum_{i<k} x[g*ldx + i] · f32(m[i*ldm + j]) for g < G, j < cols. */
typedef void (*kvc_rowmat_fn)(const float *x, int G, int ldx, const kvc_f16 *m, int k, int cols,
                              int ldm, float *y, int ldy);

extern kvc_rowmat_fn kvc_rowmat;           /* active (after kvc_codecs_init) */
extern const kvc_rowmat_fn kvc_rowmat_ref; /* scalar reference */


void kvc_rowmat_register_avx2(kvc_rowmat_fn *f);
void kvc_rowmat_register_avx512(kvc_rowmat_fn *f);

#endif
