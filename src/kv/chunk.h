/* Chunks and transforms (docs/design.md §4). A chunk is a set of tokens of one
 * stream stored in one format: an encoded K blob and V blob (codec.h), an
 * optional transform shared by the chunks of a segment, an optional selector
 * index, optional token positions (tokens permuted inside a block, evicted
 * tokens) and an optional dead mask (tokens evicted after encoding).
 *
 * Attention is invariant to the order of tokens, so chunks in a stream and
 * tokens in a chunk may be in any order; positions are kept only for methods
 * that need them (H2O bookkeeping, StreamingLLM sinks, sentence ends).
 *
 * Transform (MosaicKV's per-segment SVD rotation, channel truncation): keys
 * and values of the chunk are stored in a transformed space, K' = K·Rk and
 * V' = V·Rv restricted to dim_k / dim_v channels. For a query q the driver calls
 * prepare_q once per group of consecutive chunks sharing the transform
 * (q' = q·Rk), runs the codecs with q', accumulates o' (dim_v floats) for the
 * group with its own softmax state, and calls finish_out once (o = o'·Rvᵀ)
 * before merging the group's partial result. Never per token. */
#ifndef KVC_KV_CHUNK_H
#define KVC_KV_CHUNK_H

#include <stdatomic.h>
#include <stdint.h>

#include "kv/codec/codec.h"
#include "kv/select/selector.h"

typedef struct kvc_xform kvc_xform;

typedef struct kvc_xform_ops {
    const char *name;
    /* q [G][ldq] (head_dim floats) -> qt [G][ldt] (x->dim_k floats). */
    void (*prepare_q)(const kvc_xform *x, const float *q, int G, int ldq, float *qt, int ldt);
    /* ot [G][ldt] (x->dim_v floats) -> out [G][ldo] (head_dim floats), overwriting out. */
    void (*finish_out)(const kvc_xform *x, const float *ot, int G, int ldt, float *out, int ldo);
    /* Maps n stored rows back to the original space (decode, tests, prefill):
     * which = 0 keys (dim_k -> head_dim), 1 values (dim_v -> head_dim). */
    void (*restore)(const kvc_xform *x, int which, const float *xt, int n, int ldt, float *out,
                    int ld);
    /* Optional: maps n rows of the original space into the stored one (which =
     * 0 keys, 1 values); in and out may be the same rows. A transform with it
     * can be a whole stream's space (kvc_stream.xf: keys and values mapped as
     * they enter the cache). */
    void (*apply)(const kvc_xform *x, int which, const float *in, int n, int ldin, float *out,
                  int ldout);
    /* Optional: fits the map to the first rows a stream receives, before any
     * is stored: the cache calls it once per stream, at a prefill into the
     * empty stream, with its queries q (n tokens at stride ldq, G rows of
     * head_dim each) and keys k (n rows at stride ldk), original space. The
     * transform may ignore too few rows. A stream that begins with a decode
     * append is never fitted. */
    void (*calibrate)(kvc_xform *x, const float *q, int ldq, int G, const float *k, int ldk, int n);
    /* Optional: a hint that the query map (which = 0) or the output map (1)
     * is used next; no effect on any result. */
    void (*prefetch)(const kvc_xform *x, int which);
    uint64_t (*bytes)(const kvc_xform *x); /* rotation matrices etc.: counted as meta */
    void (*free)(kvc_xform *x);            /* frees state and x itself */
} kvc_xform_ops;

/* Shared by the chunks of one segment; reference counted (kvc_xform_retain /
 * kvc_xform_release), freed with the last chunk. */
struct kvc_xform {
    const kvc_xform_ops *ops;
    atomic_int refs;
    int dim_in;        /* head_dim */
    int dim_k, dim_v;  /* stored dimensions (<= dim_in with channel truncation) */
    void *state;
};

static inline kvc_xform *kvc_xform_retain(kvc_xform *x) {
    if (x) atomic_fetch_add(&x->refs, 1);
    return x;
}
static inline void kvc_xform_prefetch(const kvc_xform *x, int which) {
    if (x->ops->prefetch) x->ops->prefetch(x, which);
}
static inline void kvc_xform_release(kvc_xform *x) {
    if (x && atomic_fetch_sub(&x->refs, 1) == 1) x->ops->free(x);
}

enum kvc_chunk_flags {
    KVC_CHUNK_HOT = 1u << 0,    /* the stream's dense hot window */
    KVC_CHUNK_FAR = 1u << 1,    /* lives in a far tier (SentKV offload): reads are transfers */
    KVC_CHUNK_ALWAYS = 1u << 2, /* attended even if it has a selector (sinks, pivots) */
    KVC_CHUNK_SINK = 1u << 3,   /* the stream's first tokens, dense forever: never evicted or rebuilt */
};

typedef struct kvc_chunk {
    int n;                  /* tokens (including dead ones) */
    int64_t pos0;           /* position of token 0 when pos == NULL (token i is pos0 + i) */
    int32_t *pos;           /* NULL or [n] positions (permuted / gathered tokens); owned */
    kvc_codec kc, vc;       /* codec instances of K and V */
    void *kb, *vb;          /* encoded K and V blobs */
    kvc_xform *xf;          /* NULL or shared transform (one reference held) */
    kvc_select_index sel;   /* sel.ops == NULL: not selectable (always attended) */
    uint64_t *dead;         /* NULL or bitmask [(n+63)/64] of evicted tokens; owned */
    int n_dead;
    uint32_t flags;
    void *user;             /* method's per-chunk data (freed by the method's chunk_free hook) */
} kvc_chunk;

static inline int64_t kvc_chunk_pos(const kvc_chunk *c, int i) {
    return c->pos ? c->pos[i] : c->pos0 + i;
}
static inline int kvc_chunk_is_dead(const kvc_chunk *c, int i) {
    return c->dead && ((c->dead[i >> 6] >> (i & 63)) & 1);
}

/* Builds a chunk by encoding n rows of k and v ([n][ld] each) with the two
 * codecs (k rows must already be in the transform's space if xf != NULL; the
 * chunk takes a new reference to xf). pos may be NULL (consecutive from pos0);
 * it is copied. The chunk has no selector; set c->sel afterwards. */
kvc_status kvc_chunk_encode(const kvc_codec *kc, const kvc_codec *vc, const float *k,
                            const float *v, int n, int ld, int64_t pos0, const int32_t *pos,
                            kvc_xform *xf, kvc_chunk **out);

/* Frees blobs, index, positions, dead mask, releases the transform. The
 * method's per-chunk data (c->user) must have been freed by its owner. */
void kvc_chunk_free(kvc_chunk *c);

/* Marks token i evicted: its score becomes -inf in every later attention. */
kvc_status kvc_chunk_kill(kvc_chunk *c, int i);

/* Dense f32 reconstruction of tokens [begin, end) in the ORIGINAL space (codec
 * decode, then the transform's restore); k and v are [end-begin][ld]; either
 * may be NULL. Scratch is allocated internally. */
kvc_status kvc_chunk_decode(const kvc_chunk *c, int begin, int end, float *k, float *v, int ld);

/* Bytes by kind (added to the totals). */
void kvc_chunk_bytes(const kvc_chunk *c, uint64_t *payload, uint64_t *meta, uint64_t *index);

#endif
