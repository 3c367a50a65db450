/* The Llama-family model as the forward pass sees it (llama2.c style): a
 * config read from GGUF metadata, the weights (pointers into the mmap'd file,
 * norms and biases converted to f32 copies), and the run state of one
 * sequence. model_load.c fills config and weights; llama.c is the forward pass;
 * ctx.c wraps it behind the public kvc_ctx_* API.
 *
 * Weight matrices follow GGUF/ggml: ne[0] is the input dimension (contiguous
 * within a row), ne[1] the number of rows (outputs), so y = W x is a matvec
 * over rows. Supported architectures: llama (and same-shape families such as
 * mistral), qwen2 (Q/K/V biases, NEOX rope). */
#ifndef KVC_MODEL_MODEL_H
#define KVC_MODEL_MODEL_H

#include <stdint.h>

#include "gguf/gguf.h"
#include "kvcomp.h"
#include "tokenizer/tokenizer.h"

struct kvc_pool;
struct kvc_cache;

typedef enum kvc_rope_layout {
    KVC_ROPE_NORM = 0, /* rotate adjacent pairs (x[2i], x[2i+1]): llama arch in GGUF */
    KVC_ROPE_NEOX = 2, /* rotate halves (x[i], x[i + rope_dim/2]): qwen2 */
} kvc_rope_layout;

typedef struct kvc_config {
    char arch[32];      /* general.architecture */
    int dim;            /* embedding_length */
    int ffn_dim;        /* feed_forward_length */
    int n_layers;       /* block_count */
    int n_heads;        /* attention.head_count */
    int n_kv_heads;     /* attention.head_count_kv (defaults to n_heads) */
    int head_dim;       /* dim / n_heads (or attention.key_length) */
    int n_vocab;        /* rows of token_embd */
    int ctx_train;      /* context_length */
    int rope_dim;       /* rope.dimension_count (<= head_dim; defaults to head_dim) */
    kvc_rope_layout rope_layout;
    float rope_base;    /* rope.freq_base (default 10000) */
    float norm_eps;     /* attention.layer_norm_rms_epsilon */
} kvc_config;

/* One weight matrix: rows x cols elements of a ggml type, row-major. */
typedef struct kvc_wmat {
    const void *data;  /* into the mapping */
    uint32_t type;     /* ggml type id, checked supported at load */
    int64_t rows, cols;
    size_t row_bytes;
} kvc_wmat;

typedef struct kvc_layer {
    float *attn_norm;   /* [dim] */
    kvc_wmat wq;        /* [n_heads*head_dim rows][dim] */
    kvc_wmat wk;        /* [n_kv_heads*head_dim][dim] */
    kvc_wmat wv;        /* [n_kv_heads*head_dim][dim] */
    float *bq, *bk, *bv; /* qwen2 biases [q_dim], [kv_dim], [kv_dim]; NULL for llama */
    kvc_wmat wo;        /* [dim][n_heads*head_dim] */
    float *ffn_norm;    /* [dim] */
    kvc_wmat w_gate;    /* [ffn_dim][dim] */
    kvc_wmat w_up;      /* [ffn_dim][dim] */
    kvc_wmat w_down;    /* [dim][ffn_dim] */
} kvc_layer;

typedef struct kvc_weights {
    kvc_wmat tok_embd;  /* [n_vocab][dim] */
    kvc_layer *layers;  /* [n_layers] */
    float *out_norm;    /* [dim] */
    kvc_wmat output;    /* [n_vocab][dim]; = tok_embd when tied */
    int tied;           /* output reuses token_embd */
    float *rope_freqs;  /* [rope_dim/2] frequency divisors (rope_freqs.weight) or NULL */
} kvc_weights;

struct kvc_model {
    kvc_gguf *gguf;     /* owns the mapping */
    kvc_config cfg;
    kvc_weights w;
    kvc_tokenizer *tok;
    char name[128];
    uint64_t n_params, weight_bytes;
};

/* The model's tokenizer (model_load.c), for tools and tests that work on the
 * tokenizer itself. */
const kvc_tokenizer *kvc_model_tokenizer(const struct kvc_model *m);

/* ---- forward pass (llama.c) ---------------------------------------------- */

/* Timers the forward pass adds to (seconds). */
typedef struct kvc_fwd_timing {
    double weights_s, attention_s, cache_s;
} kvc_fwd_timing;

/* Run state of one sequence: activation buffers for one decode step and for a
 * prefill chunk of up to max_batch tokens, plus per-thread dequant tiles. */
typedef struct kvc_run {
    int max_batch;
    float *x;        /* [max_batch][dim] residual stream */
    float *xb;       /* [max_batch][dim] normed input of a block */
    float *q;        /* [max_batch][n_heads*head_dim] */
    float *k;        /* [max_batch][n_kv_heads*head_dim] */
    float *v;        /* [max_batch][n_kv_heads*head_dim] */
    float *att;      /* [max_batch][n_heads*head_dim] attention output */
    float *xb2;      /* [max_batch][dim] block output before the residual add */
    float *hb;       /* [max_batch][ffn_dim] gate, then silu(gate)*up */
    float *hb2;      /* [max_batch][ffn_dim] up */
    float *inv_freq; /* [rope_dim/2] rope angle per position */
    float *rope_cs;  /* [max_batch][rope_dim/2][2] cos, sin of the chunk's positions (all layers) */
    float *tiles;    /* [n_threads][tile_rows * max(dim, ffn_dim, q_dim)] dequantised weight rows */
    int tile_rows, n_tiles_threads;
    size_t tile_stride; /* floats per thread in tiles */
    kvc_fwd_timing t;
    kvc_kv_observer_fn kv_obs; /* optional: sees each layer's post-RoPE K/V (kvc_ctx_set_kv_observer) */
    void *kv_obs_user;
} kvc_run;

kvc_status kvc_run_create(const kvc_model *m, int max_batch, int n_threads, kvc_run **out);
void kvc_run_free(kvc_run *r);

/* Decode one token at position pos: appends its K/V to the cache and writes
 * the next-token logits [n_vocab]. */
kvc_status kvc_forward_token(const kvc_model *m, kvc_run *r, struct kvc_cache *cache,
                             struct kvc_pool *pool, int32_t token, int pos, float *logits);

/* Prefill n (<= max_batch) tokens starting at position pos. logits: NULL, the
 * last token's [n_vocab] (all_logits == 0) or every token's [n][n_vocab]. */
kvc_status kvc_forward_batch(const kvc_model *m, kvc_run *r, struct kvc_cache *cache,
                             struct kvc_pool *pool, const int32_t *tokens, int n, int pos,
                             float *logits, int all_logits);

#endif
