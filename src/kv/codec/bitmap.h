/* Bitmap tiles (MUSTAFAR §3, Figure 5b; byte layout in docs/formats.md
 * "Bitmap tiles"): the compressed form of per-token pruned K and V.
 *
 * CPU layout, token-major for both K and V: a token's vector of d channels is
 * split into nt = ceil(d/64) tiles of 64 channels; each tile is a 64-bit bitmap
 * (bit c%64 set when channel c is kept) and the kept values follow as 16-bit
 * floats in channel order: f16 ("bitmap_f16", the paper's) or bfloat16
 * ("bitmap_bf16": widening bf16 to f32 is a shift, so the AVX-512 kernels
 * skip VCVTPH2PS; docs/formats.md "Bitmap tiles"). Every token keeps exactly
 * `keep` values, so token t's values start at t * keep and no per-tile offset
 * array is stored: a tile's start inside its token is the popcount of the
 * earlier tiles' bitmaps.
 *
 *   bits [n][nt] u64      vals [n][keep] f16|bf16      + KVC_BITMAP_PAD readable bytes
 *
 * The scalar references below are what the AVX2 and AVX-512 kernels
 * (src/kernels/<isa>/kv_bitmap_<isa>.c) must match. */
#ifndef KVC_KV_CODEC_BITMAP_H
#define KVC_KV_CODEC_BITMAP_H

#include <stddef.h>
#include <stdint.h>

#include "base/f16.h"
#include "kv/codec/codec.h"

#define KVC_BITMAP_TILE 64
/* Kernels may read up to this many bytes past the last value (16-byte loads
 * of the AVX2 expand); buffers holding vals are allocated this much longer. */
#define KVC_BITMAP_PAD 64
/* Largest head size (channels per vector) the codec takes. */
#define KVC_BITMAP_MAX_D 1024
/* Query heads the scalar q·k accumulates at once (more go in blocks). */
#define KVC_BITMAP_MAX_G 16

static inline int kvc_bitmap_tiles(int d) { return (d + KVC_BITMAP_TILE - 1) / KVC_BITMAP_TILE; }

/* A read-only view of n consecutive encoded tokens. */
typedef struct kvc_bitmap_view {
    const uint64_t *bits; /* [n][nt] */
    const uint16_t *vals; /* [n][keep] f16 or bf16, KVC_BITMAP_PAD bytes readable past the end */
    int d, keep;
    int bf16; /* vals are bfloat16 (else f16) */
} kvc_bitmap_view;

/* One kept value as stored, and back. */
static inline uint16_t kvc_bitmap_narrow(float x, int bf16) {
    return bf16 ? kvc_f32_to_bf16(x) : kvc_f32_to_f16(x);
}
static inline float kvc_bitmap_widen(uint16_t h, int bf16) {
    return bf16 ? kvc_bf16_to_f32(h) : kvc_f16_to_f32(h);
}

/* Packs one token: mask has exactly `keep` bits set among the d channels; the
 * values x[c] at set bits are stored as f16 (bf16 when `bf16`) in channel order. */
void kvc_bitmap_pack(const float *x, const uint64_t *mask, int d, int bf16, uint64_t *bits,
                     uint16_t *vals);

/* The scalar reference of pack and its AVX-512 variant (kvc_bitmap_k.pack). */
void kvc_bitmap_pack_scalar(const float *x, const uint64_t *mask, int d, int bf16, uint64_t *bits,
                            uint16_t *vals);
void kvc_bitmap_pack_avx512(const float *x, const uint64_t *mask, int d, int bf16, uint64_t *bits,
                            uint16_t *vals);

/* Unpacks one token to d floats (pruned channels are 0). */
void kvc_bitmap_unpack(const uint64_t *bits, const uint16_t *vals, int d, int bf16, float *x);

/* Tokens 0..n-1 of the view against g query heads:
 *   s[h*lds + i] = sum_c q[h*ldq + c] * K[i][c]               (h < g, i < n) */
typedef void (*kvc_bitmap_qk_fn)(const kvc_bitmap_view *k, int n, const float *q, int g, int ldq,
                                 float *s, int lds);
/*   o[h*ldo + c] += sum_i p[h*ldp + i] * V[i][c]               (h < g, c < d) */
typedef void (*kvc_bitmap_pv_fn)(const kvc_bitmap_view *v, int n, const float *p, int g, int ldp,
                                 float *o, int ldo);

/* Scalar references and the SIMD variants (any g; src/kernels/<isa>/kv_bitmap_<isa>.c). */
void kvc_qk_bitmap_scalar(const kvc_bitmap_view *k, int n, const float *q, int g, int ldq,
                              float *s, int lds);
void kvc_pv_bitmap_scalar(const kvc_bitmap_view *v, int n, const float *p, int g, int ldp,
                              float *o, int ldo);
void kvc_qk_bitmap_avx2(const kvc_bitmap_view *k, int n, const float *q, int g, int ldq,
                            float *s, int lds);
void kvc_pv_bitmap_avx2(const kvc_bitmap_view *v, int n, const float *p, int g, int ldp,
                            float *o, int ldo);
void kvc_qk_bitmap_avx512(const kvc_bitmap_view *k, int n, const float *q, int g, int ldq,
                              float *s, int lds);
void kvc_pv_bitmap_avx512(const kvc_bitmap_view *v, int n, const float *p, int g, int ldp,
                              float *o, int ldo);

/* ---- the codec (codec.h) ------------------------------------------------- */

/* Parameters of a bitmap_f16 / bitmap_bf16 codec instance (kvc_codec.cfg). */
typedef struct kvc_bitmap_cfg {
    int keep; /* values kept per vector, 0..dim */
} kvc_bitmap_cfg;

/* "bitmap_f16": encode keeps the `keep` largest-magnitude channels of each
 * vector (kvc_prune_topk order), so a vector already zeroed outside an
 * output-aware mask encodes to exactly that mask's values. */
extern const kvc_codec_ops kvc_codec_bitmap_f16;
/* "bitmap_bf16": the same with the kept values stored as bfloat16. */
extern const kvc_codec_ops kvc_codec_bitmap_bf16;

/* The tiles of tokens [begin, end) of a bitmap blob (tests, benchmarks). */
kvc_bitmap_view kvc_bitmap_blob_view(const void *blob, int begin);

/* The kernels in use: the scalar references until kvc_codecs_init() registers
 * the variants of the active ISA over them (codec_registry.c). */
typedef void (*kvc_bitmap_pack_fn)(const float *x, const uint64_t *mask, int d, int bf16,
                                   uint64_t *bits, uint16_t *vals);
typedef struct kvc_bitmap_kernels {
    kvc_bitmap_qk_fn qk;
    kvc_bitmap_pv_fn pv;
    kvc_bitmap_pack_fn pack;
} kvc_bitmap_kernels;
extern kvc_bitmap_kernels kvc_bitmap_k;
extern const kvc_bitmap_kernels kvc_bitmap_ref;
void kvc_bitmap_register_avx2(kvc_bitmap_kernels *k);
void kvc_bitmap_register_avx512(kvc_bitmap_kernels *k);

#endif
