/* KV codecs: the storage formats of a chunk's keys or values (docs/design.md §4,
 * "Codec"). One operations table per format, ggml type-traits style; the driver
 * never switches over formats. A codec *instance* (kvc_codec) is a table plus
 * the parameters a method chose (bits, group, sparsity ...) and the vector
 * dimension it stores (head_dim, or fewer when a transform truncates channels).
 *
 * A blob is the encoded form of one chunk's K (or V): n vectors of c->dim
 * floats, laid out however the codec likes (tiles along tokens, per-token
 * packs, bitmaps, tokens permuted inside the blob ...). Tokens are addressed
 * by their index 0..n-1 inside the chunk; ranges are [begin, end) of indices.
 * K and V of one chunk may use different codecs.
 *
 * Kernels see queries already scaled by 1/sqrt(head_dim) and already mapped by
 * the chunk's transform (chunk.h), so a codec only computes raw dot products.
 * Every op must accept any range inside [0, n) (a codec with tiles of 64 may
 * be asked for tokens 10..200); the driver prefers ranges aligned to
 * `granule` tokens so that such codecs rarely see partial tiles. */
#ifndef KVC_KV_CODEC_H
#define KVC_KV_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "kvcomp.h"

/* A half-open range of token indices inside a chunk. */
typedef struct kvc_range {
    int32_t begin, end;
} kvc_range;

typedef struct kvc_codec kvc_codec;

typedef struct kvc_codec_ops {
    const char *name;   /* "f32", "f16", "bf16", "kivi_k", "bitmap_f16", ... */
    int granule;        /* preferred range alignment in tokens (1 = any, 64 = tiles) */
    /* decode is a plain element conversion (the dense formats): chunked
     * prefill then decodes a key tile again for each query tile, which keeps
     * its working set in L2, instead of once per span of query tiles
     * (kv/prefill.c), which pays off only when decoding costs more. */
    int cheap_decode;
    /* Optional: the driver gives this codec's scattered ranges (selected
     * units) to qk / pv at most `piece` tokens at a time, its prefetch cursor
     * moving on between the pieces (kv/attend.c); 0: whole ranges. Worth it
     * where a call costs little beyond its rows (the dense formats; pieces
     * of 4 made mosaic's packed vectors 1.1-1.7x slower). */
    int piece;

    /* Encodes n vectors x [n][ld] (the first c->dim floats of each row) into a
     * new blob. n may be 0 for an appendable codec (an empty hot window). */
    kvc_status (*encode)(const kvc_codec *c, const float *x, int n, int ld, void **blob);

    /* Optional (NULL: not appendable): appends n vectors at the end of the blob. */
    kvc_status (*append)(const kvc_codec *c, void *blob, const float *x, int n, int ld);

    /* Optional: drops the first n vectors (the hot window when tokens leave it). */
    void (*drop_front)(const kvc_codec *c, void *blob, int n);

    /* Number of vectors in the blob. */
    int (*count)(const kvc_codec *c, const void *blob);

    /* Scores of G queries against the keys of tokens [begin, end):
     *   s[g*lds + j - begin] = q[g*ldq + :] . key(j)
     * q rows have c->dim floats. Writes exactly end - begin per row. Lists of
     * ranges are the driver's loop (kvc_codec_qk_ranges), not the codec's. */
    void (*qk)(const kvc_codec *c, const void *blob, const float *q, int G, int ldq, int begin,
               int end, float *s, int lds);

    /* Accumulates values weighted by probabilities, same token order as qk:
     *   o[g*ldo + :] += sum_j p[g*ldp + j - begin] * value(j)   (begin <= j < end)
     * o rows have c->dim floats. p may contain zeros (masked tokens). */
    void (*pv)(const kvc_codec *c, const void *blob, const float *p, int G, int ldp, int begin,
               int end, float *o, int ldo);

    /* Optional: a hint that tokens [begin, end) are read next — the codec asks
     * the memory system to start loading them (the driver calls it for the
     * next work item of scattered selected ranges while it computes the
     * current one, since short ranges defeat the hardware prefetcher). No
     * effect on any result. */
    void (*prefetch)(const kvc_codec *c, const void *blob, int begin, int end);

    /* Dense reconstruction of tokens [begin, end) into x [end-begin][ld]
     * (reference, tests, chunked prefill, re-encoding). */
    void (*decode)(const kvc_codec *c, const void *blob, int begin, int end, float *x, int ld);

    /* Optional: the blob's rows as contiguous f32 [n][c->dim] when the format
     * is plain f32 (lets prefill run BLAS on it without a copy); else NULL. */
    const float *(*view_f32)(const kvc_codec *c, const void *blob);

    /* Bytes held: encoded values, and metadata (scales, mins, bitmaps, offsets,
     * padding, unused capacity of appendable blobs). */
    void (*bytes)(const kvc_codec *c, const void *blob, uint64_t *payload, uint64_t *meta);

    void (*free)(const kvc_codec *c, void *blob);
} kvc_codec_ops;

/* A codec instance. `cfg` points at the codec's own parameter struct (owned by
 * the method state that built it, or static), NULL for parameterless codecs. */
struct kvc_codec {
    const kvc_codec_ops *ops;
    int dim;          /* floats per vector */
    const void *cfg;
};

/* qk / pv over the ranges r[0..nr) in range order, scores (probabilities)
 * packed one range after the other: the one loop over token ranges. */
void kvc_codec_qk_ranges(const kvc_codec *c, const void *blob, const float *q, int G, int ldq,
                         const kvc_range *r, int nr, float *s, int lds);
void kvc_codec_pv_ranges(const kvc_codec *c, const void *blob, const float *p, int G, int ldp,
                         const kvc_range *r, int nr, float *o, int ldo);
/* The prefetch hint over a list of ranges (nothing if the codec has none). */
void kvc_codec_prefetch_ranges(const kvc_codec *c, const void *blob, const kvc_range *r, int nr);

/* Looks up a registered codec table by name ("f32", "f16", "bf16", ...);
 * NULL when unknown. Tables register in codec_registry.c. */
const kvc_codec_ops *kvc_codec_find(const char *name);

/* Initialises kernel dispatch of every codec (idempotent, thread-safe; called
 * by kvc_cache_create and by tests). */
void kvc_codecs_init(void);

#endif
