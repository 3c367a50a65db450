/* Per-segment rotation with channel truncation (MosaicKV §2.3, §4.2, §5.2,
 * §5.5; docs/methods.md "mosaic"): the transform of chunk.h whose keys are
 * stored as K' = K·Rk and values as V' = V·Rv, where the columns of Rk (Rv)
 * are the leading eigenvectors of the segment's second-moment matrix KᵀK
 * (VᵀV), sorted by decreasing eigenvalue, and only the first dim_k (dim_v)
 * columns are kept: the globally unimportant rotated channels are truncated.
 *
 * The second-moment matrix is accumulated incrementally, one outer product
 * per token (kvc_cov_add), so a segment's strategy is ready the moment the
 * segment ends (§5.5); the eigendecomposition is LAPACK's dsyevr.
 *
 * With the columns orthonormal, q'·k' = q·Rk·Rkᵀ·k equals q·k when nothing is
 * truncated; with truncation it is q·P·k with P the projection onto the kept
 * channels. The driver maps each query once per segment (prepare_q) and each
 * segment's accumulated output once (finish_out), never the stored vectors.
 * The kept bases are stored in f16 and every map uses the same rounded
 * values (rotation.c says why). */
#ifndef KVC_KV_XFORM_ROTATION_H
#define KVC_KV_XFORM_ROTATION_H

#include <stdint.h>

#include "kv/chunk.h"

/* Largest head size a rotation accepts (d×d doubles per accumulator). */
#define KVC_ROT_MAX_D 512

/* Running second moment Σ x xᵀ of d-vectors (upper triangle, double). */
typedef struct kvc_cov {
    int d;
    int64_t n;  /* vectors added */
    double *s;  /* [d][d], entries (i, j) with j >= i are maintained */
} kvc_cov;

kvc_status kvc_cov_init(kvc_cov *c, int d);
void kvc_cov_free(kvc_cov *c);
void kvc_cov_reset(kvc_cov *c);
/* Adds n vectors x [n][ld] (the first d floats of each row). */
void kvc_cov_add(kvc_cov *c, const float *x, int n, int ld);

/* Eigenvectors of the accumulated matrix by decreasing eigenvalue: column j
 * of the returned basis is rot[i * d + j] (rot is [d][d] row-major, so x·rot
 * rotates a row vector x); eval[j] the eigenvalues (>= 0 up to rounding).
 * LAPACK dsyevr; KVC_ERR_INTERNAL if it fails to converge. */
kvc_status kvc_cov_eigen(const kvc_cov *c, float *rot, double *eval);

/* Basis of the ablation without rotation: the identity with its columns
 * ordered by decreasing diagonal of the accumulated matrix (channel energy),
 * so truncation drops the weakest original channels. */
void kvc_cov_channel_order(const kvc_cov *c, float *rot);

/* A transform from two bases rk, rv [d][d] (as kvc_cov_eigen returns them)
 * keeping their first dim_k and dim_v columns. One reference held by *out. */
kvc_status kvc_rotation_create(int d, const float *rk, int dim_k, const float *rv, int dim_v,
                               kvc_xform **out);

/* x' = x·R for n rows x [n][ldx] (d floats) -> xt [n][ldt] (dim floats) with
 * the transform's key (which = 0) or value (1) basis: how a method rotates a
 * segment before encoding it. */
void kvc_rotation_apply(const kvc_xform *x, int which, const float *xin, int n, int ldx, float *xt,
                        int ldt);

#endif
