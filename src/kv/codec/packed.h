/* Packed two-D format (MosaicKV §5.1 "Packed KV Format", "Variable-Granularity
 * Bitmap"; byte layout in docs/formats.md "Packed vectors"): the stored form of
 * MosaicKV's rotated, channel-truncated and per-vector sparsified keys, values
 * and block keys.
 *
 * A vector of d channels (d = the transform's kept channels) is split into
 * ng = d / group element groups of `group` adjacent channels (1, 2 or 4); each
 * vector keeps the `keep` groups of largest energy (sum of squares). Per token:
 * a position bitmap of ng bits in nw = ceil(ng / 32) 32-bit words (bit g%32 of
 * word g/32 set when group g is kept), and the keep·group kept values as f16 in
 * channel order. Every token keeps the same number of groups, so token t's
 * values start at t·keep·group and no offset array is stored.
 *
 *   header (64 B) | bits [n][nw] u32 | vals [n][keep·group] f16 | KVC_PACKED_PAD
 *
 * The blob describes itself (d, group, keep in the header): kernels and decode
 * never read the codec's cfg, which is used by encode only.
 *
 * Kernels work on the packed vectors directly ("never unpacking a matrix",
 * §5.3): q·k walks the bitmap and multiplies each kept group with the query's
 * channels at its position; p·v adds each kept group into the output at its
 * position. Scalar references here, SIMD in src/kernels/<isa>/kv_packed_<isa>.c. */
#ifndef KVC_KV_CODEC_PACKED_H
#define KVC_KV_CODEC_PACKED_H

#include <stdint.h>

#include "base/f16.h"
#include "kv/codec/codec.h"

#define KVC_PACKED_MAX_D 512 /* channels per vector */
#define KVC_PACKED_PAD 64    /* readable bytes past the last value */
#define KVC_PACKED_MAX_G 16  /* query heads per kernel call (a GQA group) */

/* Encode parameters (kvc_codec.cfg of a packed_f16 instance). */
typedef struct kvc_packed_cfg {
    int group; /* channels per element group: 1, 2 or 4 */
    int keep;  /* groups kept per vector, 1..dim/group */
} kvc_packed_cfg;

/* Names the bad field: group not 1/2/4, dim not a multiple of group, keep
 * outside [1, dim/group], dim outside [1, KVC_PACKED_MAX_D]. */
kvc_status kvc_packed_cfg_check(const kvc_packed_cfg *c, int dim);

/* Tokens of a blob as the kernels see them. */
typedef struct kvc_packed_view {
    const uint32_t *bits; /* [n][nw] */
    const kvc_f16 *vals;  /* [n][keep·group] */
    int d, group, nw, nv; /* channels, group size, bitmap words, values per token */
} kvc_packed_view;

static inline int kvc_packed_words(int d, int group) { return (d / group + 31) / 32; }

/* Marks the `keep` groups of x (d floats) with the largest energy in bits
 * (nw words); ties to the lower group. Returns the kept energy. */
double kvc_packed_select(const float *x, int d, int group, int keep, uint32_t *bits);
/* Writes the values of the groups marked in bits, in channel order, as f16. */
void kvc_packed_pack(const float *x, const uint32_t *bits, int d, int group, kvc_f16 *vals);
/* Dense d floats from a packed vector (zeros outside the kept groups). */
void kvc_packed_unpack(const uint32_t *bits, const kvc_f16 *vals, int d, int group, float *x);

/* Kernels: scores s[h*lds + t] = q_h · k_t (t < n) and o[h*ldo + c] +=
 * Σ_t p[h*ldp + t] · v_t[c] for h < G <= KVC_PACKED_MAX_G. */
typedef void (*kvc_packed_qk_fn)(const kvc_packed_view *k, int n, const float *q, int G, int ldq,
                                 float *s, int lds);
typedef void (*kvc_packed_pv_fn)(const kvc_packed_view *v, int n, const float *p, int G, int ldp,
                                 float *o, int ldo);
typedef struct kvc_packed_kernels {
    kvc_packed_qk_fn qk;
    kvc_packed_pv_fn pv;
} kvc_packed_kernels;

extern kvc_packed_kernels kvc_packed_k;         /* active (kvc_codecs_init registers SIMD) */
extern const kvc_packed_kernels kvc_packed_ref; /* scalar reference */
void kvc_packed_register_avx2(kvc_packed_kernels *k);
void kvc_packed_register_avx512(kvc_packed_kernels *k);

/* "packed_f16": encode selects and packs per vector with the cfg; any range. */
extern const kvc_codec_ops kvc_codec_packed_f16;

/* Tokens [begin, ...) of a packed_f16 blob. */
kvc_packed_view kvc_packed_blob_view(const void *blob, int begin);

#endif
