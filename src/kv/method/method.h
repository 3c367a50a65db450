/* Methods (docs/design.md §4, §5): a row in the method registry names a
 * composition of codecs, a selector, a hot-window policy and background work,
 * declares its parameters in a table (name, type, default, range, one-line
 * description) and implements hooks. Parsing is generic (spec.c): the table
 * says where each parameter lives in the method's cfg struct, so a method
 * never parses strings itself; an optional check hook validates combinations.
 *
 * Spec language (docs/design-kv.md):
 *   spec     := layer ('+' layer)*          base method, then modifiers
 *   layer    := name [':' args]
 *   args     := arg (',' arg)*
 *   arg      := key '=' value | value       a bare value sets the method's
 *                                           positional parameter (full:f16)
 * e.g. "full:f16", "kivi:bits=2,group=32,window=32",
 *      "mustafar:k=0.5,v=0.5+kivi:bits=2", "mustafar:k=0.7+h2o:budget=0.2".
 * The first layer must be a method with role BASE; the others must have role
 * MODIFIER and be named in the base's `stacks_with` list.
 *
 * How a stack runs: every layer is instantiated (create, stream_init), the
 * base's create sees the modifiers' cfgs (so mustafar+kivi can pick a sparse
 * quantized codec), and event hooks (on_append, on_query, on_attn, step) run
 * for each layer in order, base first. Decisions (hot_leave, build_chunk,
 * select) come from the first layer that implements them, base first — so a
 * modifier such as h2o adds eviction to any base that leaves it free.
 *
 * Hooks are called for one stream at a time from the cache's calling thread,
 * except that streams of one layer may be processed in parallel (never two
 * hooks on the same stream at once). NULL hooks are skipped / defaulted. */
#ifndef KVC_KV_METHOD_H
#define KVC_KV_METHOD_H

#include <stddef.h>
#include <stdint.h>

#include "kv/cache.h" /* kvc_token_text_fn */
#include "kv/stream.h"

/* ---- parameters ------------------------------------------------------------ */

typedef enum kvc_param_type {
    KVC_PARAM_INT,    /* int, in [min, max] */
    KVC_PARAM_FLOAT,  /* float, in [min, max] */
    KVC_PARAM_ENUM,   /* int index into `choices` ("f32|f16|bf16"), given by name */
    KVC_PARAM_BOOL,   /* int 0/1: 0,1,true,false,on,off */
    KVC_PARAM_STRING, /* char[KVC_PARAM_STR_MAX] (a path, a profile file) */
} kvc_param_type;

enum { KVC_PARAM_STR_MAX = 256, KVC_MAX_PARAMS = 32 };

typedef struct kvc_param {
    const char *key;      /* "bits" */
    kvc_param_type type;
    size_t offset;        /* offsetof(cfg struct, field) */
    const char *def;      /* default as text: "2", "0.5", "f16", "" */
    double min, max;      /* inclusive range for INT and FLOAT */
    const char *choices;  /* ENUM: "f32|f16|bf16" */
    const char *help;     /* one line */
} kvc_param;

/* ---- hooks ------------------------------------------------------------------ */

typedef struct kvc_method kvc_method;

/* What a method instance knows at create time. */
typedef struct kvc_method_env {
    int n_layers, n_heads, n_kv_heads, head_dim, max_tokens;
    const void *cfg;                 /* this layer's parsed cfg */
    int n_stack;                     /* layers in the spec (1 = no modifiers) */
    const kvc_method *stack[KVC_MAX_STACK];
    const void *stack_cfg[KVC_MAX_STACK]; /* cfgs of every layer, [0] = base */
    struct kvc_pool *pool;           /* borrowed; may be NULL */
} kvc_method_env;

/* Selection plan of one stream for one query. */
typedef struct kvc_select_plan {
    int64_t budget;     /* tokens of selectable chunks to attend; < 0: attend all (no selection) */
    int reuse;          /* non-zero: keep the previous step's selection if the stream is unchanged */
    int near;           /* non-zero: attend the selected units of dense f16 chunks from the stream's
                         * near buffer (kv/near.h), gathering only those the last step did not select */
} kvc_select_plan;

typedef struct kvc_method_ops {
    /* Per-cache state (manager thread, profile, codec cfgs). */
    kvc_status (*create)(const kvc_method_env *env, void **state);
    void (*destroy)(void *state);

    /* Per-stream state of this layer (stored in s->mstate[layer index]; every
     * hook receives it as sstate). */
    kvc_status (*stream_init)(void *state, kvc_stream *s, void **sstate);
    void (*stream_free)(void *state, kvc_stream *s, void *sstate);

    /* Step boundary for a stream, before an append: swap in finished background
     * results here (kvc_stream_replace). */
    kvc_status (*step)(void *state, kvc_stream *s, void *sstate);

    /* n tokens were appended to the hot window (they are its last n rows):
     * k, v [n][dim] of this KV head; q [n][G][dim] the queries of the group that
     * attended them (prefill), or NULL (decode: see on_query). */
    kvc_status (*on_append)(void *state, kvc_stream *s, void *sstate, int n, const float *k,
                            const float *v, const float *q);

    /* Optional (the `rot` modifier): the space stream (layer, head) lives in,
     * a transform with an apply op (kvc_stream.xf). The cache takes its own
     * reference and maps keys, values and queries into it as they arrive,
     * attention outputs back; every hook then sees that space. */
    kvc_xform *(*stream_xform)(void *state, int layer, int head);

    /* Optional (the `sinks` modifier): the first N positions of every stream
     * go to its sink chunk (kvc_stream_sink_push), dense and exact forever,
     * and never reach any layer's on_append, hot_leave or build_chunk. */
    int (*sink_tokens)(void *state);

    /* Optional (base layer): element type of the hot window, a kvc_dense_type;
     * NULL: f16. `full` keeps its own type (f32 stays the exact reference). */
    int (*hot_type)(void *state);

    /* How many of the oldest hot-window tokens leave it now (0..hot->n). NULL
     * in every layer: tokens never leave (the window holds everything). */
    int (*hot_leave)(void *state, kvc_stream *s, void *sstate);

    /* Builds the chunk for n leaving tokens k, v [n][dim] with positions from
     * pos0 (consecutive). The method picks codecs, transform and selector.
     * It may instead store the tokens itself (append them to its last chunk
     * with an appendable codec, insert several chunks with kvc_stream_insert)
     * and set *out = NULL. NULL hook: the cache encodes them as a dense f32 chunk. */
    kvc_status (*build_chunk)(void *state, kvc_stream *s, void *sstate, const float *k,
                              const float *v, int n, int64_t pos0, kvc_chunk **out);

    /* Frees c->user (the method's per-chunk data) before the chunk is freed. */
    void (*chunk_free)(void *state, kvc_chunk *c);

    /* A decode query q [G][dim] (unscaled, original space) is about to attend. */
    kvc_status (*on_query)(void *state, kvc_stream *s, void *sstate, const float *q);

    /* Selection for this query; NULL in every layer: attend all. */
    kvc_select_plan (*select)(void *state, kvc_stream *s, void *sstate);

    /* Attention weights after a decode step, if KVC_METHOD_WANTS_ATTN: for
     * chunk index ci (-1 = hot window) the tokens of ranges r[0..nr) received
     * probabilities p[j] (summed over the G heads of the group). Methods evict here. */
    void (*on_attn)(void *state, kvc_stream *s, void *sstate, int ci, const kvc_range *r,
                    int nr, const float *p);

    /* The units chosen by selection (transfer accounting, reuse statistics). */
    void (*on_select)(void *state, kvc_stream *s, void *sstate, int n_units,
                      const int32_t *chunk_idx, const kvc_range *units);

    /* After each decode attention and prefill of a layer: a failure the
     * method's codecs met while reading (a far-tier block that fails its
     * checksum), reported as the call's error. */
    kvc_status (*after_attend)(void *state);

    /* Far tier (per cache): adds its bytes on disk, bytes read back, seconds
     * reading, bytes served by the near buffer and held in it to out's far_* fields. */
    void (*far_stats)(void *state, kvc_cache_stats *out);

    /* Bytes of method-owned buffers (update buffers, CPU-side copies) for the stats. */
    uint64_t (*buffer_bytes)(const void *state, const kvc_stream *s, const void *sstate);

    /* Optional, per cache: adds the method's background-thread counters
     * (kvc_cache_stats bg_*) into acc. */
    void (*background)(void *state, kvc_cache_stats *acc);

    /* The token ids of positions pos0 .. pos0+n-1, before their K/V arrive in
     * any layer (only if the forward pass calls kvc_cache_observe_tokens);
     * text (may be NULL) gives a token's bytes, e.g. to find punctuation (SentKV). */
    void (*on_tokens)(void *state, const int32_t *tokens, int n, int64_t pos0,
                      kvc_token_text_fn text, void *text_ctx);
} kvc_method_ops;

enum kvc_method_flags {
    KVC_METHOD_BASE = 1u << 0,        /* may be the first layer of a spec */
    KVC_METHOD_MODIFIER = 1u << 1,    /* may follow '+' */
    KVC_METHOD_WANTS_ATTN = 1u << 2,  /* call on_attn after each decode attend */
    /* quantizes keys per channel over groups of tokens, so a constant key
     * offset costs it nothing: `rot` smooths such a base's keys by default */
    KVC_METHOD_KEYS_PER_CHANNEL = 1u << 3,
};

/* A registry row (designated initialisers in method_registry.c). */
struct kvc_method {
    const char *name;        /* "full" */
    const char *summary;     /* one line for `kvcomp methods` */
    const char *paper;       /* "KIVI (Liu et al., ICML 2024)"; "" for none */
    uint32_t flags;
    const kvc_param *params; /* table, n_params rows */
    int n_params;
    int positional;          /* index of the parameter a bare value sets; -1 none */
    size_t cfg_size;         /* bytes of the cfg struct the params are parsed into */
    /* Optional: cross-parameter validation after parsing; message names keys. */
    kvc_status (*check)(const void *cfg);
    const char *const *stacks_with; /* NULL-terminated names of allowed modifiers */
    kvc_method_ops ops;
};

/* The registry (NULL-terminated), and lookup by name. */
extern const kvc_method *const kvc_method_registry[];
const kvc_method *kvc_method_find(const char *name);

/* ---- parsed specs -------------------------------------------------------------- */

typedef struct kvc_spec {
    int n;                                 /* layers: [0] base, [1..] modifiers */
    const kvc_method *m[KVC_MAX_STACK];
    void *cfg[KVC_MAX_STACK];              /* malloc'd cfg structs (cfg_size each) */
} kvc_spec;

/* Parses and validates a spec; on error KVC_ERR_ARG with a message naming the
 * bad name / key / value and listing the valid ones or the allowed range. */
kvc_status kvc_spec_parse(const char *text, kvc_spec *out);
void kvc_spec_free(kvc_spec *s);

/* Writes a canonical spec with every parameter ("kivi:bits=2,group=32,...")
 * into buf; returns the length it needed (snprintf-style). */
int kvc_spec_format(const kvc_spec *s, char *buf, size_t cap);

#endif
