/* Streams (docs/design.md §4): the tokens of one (layer, KV head) as a list of
 * sealed chunks plus the dense hot window holding the newest tokens, in f16
 * (f32 or bf16 when the method stores that type: full:f32 stays exact).
 *
 * Life of a token: the cache appends it to the hot window, calls the method's
 * on_append hook (with the token's k, v and, in prefill, the queries that
 * observed it), then asks the method's hot_leave hook how many of the oldest
 * hot tokens leave now; those are handed to the method's build_chunk hook and
 * the resulting chunk is inserted. Methods evict (kvc_chunk_kill, or
 * kvc_stream_replace with a compacted chunk), and swap in chunks built by a
 * background thread at step boundaries (the method's step hook) with
 * kvc_stream_replace. Nothing else touches the chunk list, and the driver only
 * reads it, so background threads must work on their own copies.
 *
 * Chunks sharing a transform must be contiguous in the list (transform group).
 *
 * A stream may live in a transformed space as a whole (xf, set by the cache
 * from a modifier such as `rot`): the cache maps keys and values into it
 * before they reach the hot window, and queries before attention and the
 * method hooks, and maps attention outputs back. Methods and chunks see only
 * that space; chunk transforms (xf of a chunk) apply on top of it. */
#ifndef KVC_KV_STREAM_H
#define KVC_KV_STREAM_H

#include <stdint.h>

#include "kv/chunk.h"

enum { KVC_MAX_STACK = 4 }; /* layers in a method spec: base + up to 3 modifiers */

typedef struct kvc_stream {
    int layer, head;      /* this stream's layer and KV head */
    int dim;              /* head_dim */
    int64_t n_pos;        /* tokens seen (next position) */
    kvc_chunk **chunks;   /* sealed chunks, oldest first by convention; n_chunks of them */
    int n_chunks, cap_chunks;
    kvc_chunk *hot;       /* dense hot window (KVC_CHUNK_HOT), newest tokens; never NULL */
    kvc_xform *xf;        /* NULL or the space the whole stream lives in (one reference held) */
    uint64_t version;     /* bumped whenever the chunk list or a dead mask changes */
    void *mstate[KVC_MAX_STACK]; /* per-stream state of each method layer (base first) */
    void *sel_cache;      /* driver-owned: previous selection (for reuse) */
    struct kvc_near *near; /* driver-owned: the last selection's units side by side (kv/near.h), or NULL */
    /* Set by the cache: frees chunk->user via the method's chunk_free hooks. */
    void (*chunk_user_free)(void *ctx, kvc_chunk *c);
    void *chunk_user_ctx;
    float *stage;         /* f32 rows of hot tokens handed to hooks (kvc_stream_hot_f32) */
    size_t stage_cap;
} kvc_stream;

/* A stream with an empty hot window of head_dim elements of type hot_type
 * (a kvc_dense_type: 0 f32, 1 f16, 2 bf16). */
kvc_status kvc_stream_create(int layer, int head, int dim, int hot_type, kvc_stream **out);
/* Frees every chunk (method per-stream states must be freed by the caller first). */
void kvc_stream_free(kvc_stream *s);
/* Drops every chunk and empties the hot window (positions restart at 0). */
void kvc_stream_clear(kvc_stream *s);
/* Frees one chunk that belongs (or belonged) to the stream, user data included. */
void kvc_stream_chunk_free(kvc_stream *s, kvc_chunk *c);

/* Tokens held (sealed chunks + hot window, dead ones excluded). */
int64_t kvc_stream_live_tokens(const kvc_stream *s);

/* Inserts a chunk at index `at` (n_chunks: at the end, just before the hot
 * window); the stream takes ownership. */
kvc_status kvc_stream_insert(kvc_stream *s, int at, kvc_chunk *c);

/* Replaces chunks [first, first+count) by new_chunks[0..n_new) (ownership
 * taken; the old ones are freed with the method's chunk_free hook first).
 * count = 0 inserts, n_new = 0 removes (eviction of whole chunks). */
kvc_status kvc_stream_replace(kvc_stream *s, int first, int count, kvc_chunk **new_chunks,
                              int n_new);

/* Appends n tokens k, v [n][ld] to the hot window (positions n_pos..). */
kvc_status kvc_stream_hot_push(kvc_stream *s, const float *k, const float *v, int n, int ld);

/* Moves the oldest n hot tokens out: widens them to f32 rows, encodes them
 * with `build` (NULL: dense f32 chunk), inserts the chunk at the end of the
 * list (unless build stored them itself and returned NULL), drops them from
 * the hot window. */
typedef kvc_status (*kvc_build_fn)(void *ctx, kvc_stream *s, const float *k, const float *v,
                                   int n, int64_t pos0, kvc_chunk **out);
kvc_status kvc_stream_hot_seal(kvc_stream *s, int n, kvc_build_fn build, void *ctx);

/* Appends n tokens k, v [n][ld] (positions n_pos..) to the stream's sink chunk,
 * chunks[0] with KVC_CHUNK_SINK | KVC_CHUNK_ALWAYS, dense in the hot window's
 * type, created on the first call (which must come before any other chunk):
 * the attention sinks a cache with `+sinks` keeps exact and never hands to the
 * method. */
kvc_status kvc_stream_sink_push(kvc_stream *s, const float *k, const float *v, int n, int ld);

/* Hot tokens [begin, end) widened to f32 rows: *k, *v [end-begin][dim] in the
 * stream's staging buffer (valid until the next call for this stream). */
kvc_status kvc_stream_hot_f32(kvc_stream *s, int begin, int end, const float **k, const float **v);

#endif
