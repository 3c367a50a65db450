/* Randomized Hadamard rotation (docs/methods.md "rot"): the transform of
 * chunk.h that maps a head vector x to H·(s ⊙ x), with s a fixed vector of
 * random signs and H the orthonormal Walsh-Hadamard matrix, block-diagonal
 * when the head size is not a power of two (blocks of the sizes of d's binary
 * digits, largest first: 96 = 64 + 32, 80 = 64 + 16). The map is orthonormal,
 * so q'·k' = q·k exactly in real arithmetic, and it spreads a channel outlier
 * over all channels of its block: what a quantizer with per-group ranges
 * wants (the rotation llama.cpp and QuaRot apply before quantizing K and V).
 *
 * Keys, values and queries all use the same map (dim_k = dim_v = head_dim);
 * the inverse is s ⊙ H·y. Either side may be left in the original space
 * (the identity): keys with queries, or values with outputs. Each vector
 * costs d·log2(d) additions (the fast Walsh-Hadamard transform); no matrix is
 * stored, only the d signs.
 *
 * Smoothing (exponent a > 0): keys enter as H·(s ⊙ k / w) and queries as
 * H·(s ⊙ q ⊙ w), so q'·k' = q·k still; the weights w_c = (std(k_c) /
 * rms(q_c))^a are fitted to a stream's first prefill (the calibrate op) and
 * move a key channel's spread, which the quantizer pays for, onto the
 * query, which is exact. Until fitted (or with a = 0) w = 1. */
#ifndef KVC_KV_XFORM_HADAMARD_H
#define KVC_KV_XFORM_HADAMARD_H

#include <stdint.h>

#include "kv/chunk.h"

/* Largest head size accepted. */
#define KVC_HADAMARD_MAX_D 1024
/* Fewest rows the smoothing weights are fitted to (fewer: w stays 1), and
 * the largest weight (or inverse weight) a channel gets. */
#define KVC_HADAMARD_MIN_FIT 32
#define KVC_HADAMARD_MAX_W 64.0

/* In-place orthonormal Walsh-Hadamard transform of x [d] (any d >= 1:
 * block-diagonal over d's binary digits). Its own inverse up to rounding. */
void kvc_fwht(float *x, int d);

/* The sides a rotation maps: keys (and the queries), values (and the outputs). */
enum { KVC_HADAMARD_K = 1u, KVC_HADAMARD_V = 2u };

/* The randomized rotation for head size d of the given sides (a nonzero
 * KVC_HADAMARD_K | KVC_HADAMARD_V mask) whose signs are drawn from `seed`
 * and `stream` (e.g. the layer index): the same (seed, stream) gives the same
 * signs on every machine. `smooth` in [0, 1] is the exponent of the key
 * weights (0: none). One reference held by *out. */
kvc_status kvc_hadamard_create(int d, unsigned sides, uint64_t seed, uint64_t stream, float smooth,
                               kvc_xform **out);

#endif
