/* kvcomp — long-context LLM inference on the CPU with a compressed KV cache.
 *
 * The public API: opaque handles, one status enum, a doc block per function.
 * The library never exits or aborts on bad input: every function that can fail
 * returns a kvc_status, and kvc_last_error() says what failed (naming the field
 * and the value) on the calling thread. Load a model, create a context with a
 * --kv method spec, tokenize, prefill, decode, sample, read the cache's stats,
 * list the methods. Link with `pkg-config --libs kvcomp`; examples/ shows a
 * whole program. The measuring tools (benchmarks, evaluations, the KVmix
 * profiler, reports) are in kvcomp_eval.h.
 */
#ifndef KVCOMP_H
#define KVCOMP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status ------------------------------------------------------------- */

/* Stable values: never renumber, only append. */
typedef enum kvc_status {
    KVC_OK = 0,
    KVC_ERR_NOMEM = 1,       /* an allocation failed */
    KVC_ERR_IO = 2,          /* a file could not be opened, read, mapped or written */
    KVC_ERR_FORMAT = 3,      /* untrusted input is malformed (GGUF, profile, saved cache) */
    KVC_ERR_UNSUPPORTED = 4, /* well-formed but not supported (architecture, weight type) */
    KVC_ERR_ARG = 5,         /* a caller's argument or a spec/flag value is invalid */
    KVC_ERR_RANGE = 6,       /* a size or count exceeds a limit (context length, ...) */
    KVC_ERR_INTERNAL = 7,    /* a broken internal invariant; a bug in kvcomp */
} kvc_status;

/* A short constant description of a status ("out of memory", ...). */
const char *kvc_status_string(kvc_status s);

/* The detailed message of the last error on this thread, e.g.
 * "tensor blk.3.attn_k.weight: offset 812 past end of file (640)".
 * Empty string when nothing failed. Valid until the next failing call. */
const char *kvc_last_error(void);

/* ---- CPU features and kernel dispatch ------------------------------------ */

typedef enum kvc_isa { KVC_ISA_SCALAR = 0, KVC_ISA_AVX2 = 1, KVC_ISA_AVX512 = 2 } kvc_isa;

/* The instruction set the kernels use: the best the CPU supports, lowered by the
 * environment variable KVC_ISA=scalar|avx2|avx512 (never raised above the CPU). */
kvc_isa kvc_active_isa(void);
const char *kvc_isa_name(kvc_isa isa);


/* ---- threads -------------------------------------------------------------- */

/* Number of worker threads used when a caller passes n_threads <= 0: one per online CPU. */
int kvc_default_threads(void);
/* The thread-count rule of every n_threads parameter: n_threads when > 0,
 * else kvc_default_threads(). */
int kvc_threads_resolve(int n_threads);

/* ---- model ---------------------------------------------------------------- */

typedef struct kvc_model kvc_model;

typedef struct kvc_model_info {
    const char *arch;       /* "llama", "qwen2", ... */
    const char *name;       /* general.name or "" */
    int n_layers, n_heads, n_kv_heads, head_dim, dim, ffn_dim, n_vocab, ctx_train;
    float rope_base;
    uint64_t n_params;
    uint64_t weight_bytes;
} kvc_model_info;

/* Loads a GGUF model of the Llama family (tensors mmap'd). Unsupported
 * architectures and weight types are errors naming the field or tensor. */
kvc_status kvc_model_load(const char *path, kvc_model **out);
void kvc_model_free(kvc_model *m);
void kvc_model_info_get(const kvc_model *m, kvc_model_info *out);

/* ---- tokenizer ------------------------------------------------------------ */

/* Encodes UTF-8 text (invalid bytes are handled, never fatal). add_bos adds the
 * model's BOS token when its metadata asks for one. Special-token text such as
 * "<|im_start|>" becomes a control token only when parse_special != 0.
 * Writes at most cap tokens; *n_out is the full count (call again with a larger
 * buffer if *n_out > cap). */
kvc_status kvc_tokenize(const kvc_model *m, const char *text, size_t len, int add_bos,
                        int parse_special, int32_t *tokens, int cap, int *n_out);

/* The raw bytes of one token (may be a partial UTF-8 sequence). Control tokens
 * give their text only when show_special != 0. Returns the byte count written
 * (at most cap), or -1 for an out-of-range id. */
int kvc_token_piece(const kvc_model *m, int32_t token, int show_special, char *buf, int cap);

/* Special tokens; -1 when the model has none. */
int32_t kvc_token_bos(const kvc_model *m);
int32_t kvc_token_eos(const kvc_model *m);
/* Whether a token ends a turn or the text (EOS, EOT, <|im_end|> ...). */
int kvc_token_is_end(const kvc_model *m, int32_t token);

/* Incremental detokenisation for streamed output: feed tokens, get back only
 * complete UTF-8 (a multi-byte character split across tokens is held back). */
typedef struct kvc_detok kvc_detok;
kvc_status kvc_detok_create(const kvc_model *m, kvc_detok **out);
void kvc_detok_free(kvc_detok *d);
/* Appends the printable text of `token` to buf (NUL-terminated, at most cap-1
 * bytes) and returns the number of bytes; 0 when bytes are held back. */
int kvc_detok_push(kvc_detok *d, int32_t token, char *buf, int cap);
/* At the end of a stream: writes what is still held back (an incomplete
 * character becomes U+FFFD) and returns its byte count. */
int kvc_detok_flush(kvc_detok *d, char *buf, int cap);

/* Chat template of the model (ChatML for SmolLM2/Qwen2, Llama-3 headers, Llama-2
 * [INST]) chosen from tokenizer.chat_template. Returns a malloc'd string the
 * caller frees with free(). */
typedef struct kvc_chat_msg {
    const char *role;    /* "system", "user", "assistant" */
    const char *content;
} kvc_chat_msg;
kvc_status kvc_chat_apply(const kvc_model *m, const kvc_chat_msg *msgs, int n_msgs,
                          int add_assistant_prompt, char **out);
/* The conversation as tokens, BOS as the model asks: only the template's own
 * markers become control tokens; messages are tokenized as text whatever they
 * spell (a user line "<|im_end|><|im_start|>system ..." cannot open a system
 * turn). Tokenizing kvc_chat_apply's text with parse_special would let it.
 * Output contract as kvc_tokenize. */
kvc_status kvc_chat_tokenize(const kvc_model *m, const kvc_chat_msg *msgs, int n_msgs,
                             int add_assistant_prompt, int32_t *tokens, int cap, int *n_out);

/* ---- KV cache ------------------------------------------------------------- */

/* A cache is chosen by a method spec "name[:key=value,...]", e.g.
 * "full:f16" or "kivi:bits=2,group=32,window=32". */

/* Checks a spec without building a cache; the error lists valid names/keys. */
kvc_status kvc_method_validate(const char *spec);

/* The methods a spec can name, with their parameters (what `kvcomp methods`
 * prints). Strings are static. */
typedef struct kvc_method_info {
    const char *name;    /* "kivi" */
    const char *summary; /* one line */
    const char *paper;   /* "KIVI (Liu et al., ICML 2024)"; "" for none */
    int base;            /* may start a spec */
    int modifier;        /* may follow '+' */
    int n_params;
    int positional;      /* index of the parameter a bare value sets (full:f16); -1: none */
} kvc_method_info;

typedef struct kvc_method_param {
    const char *key;     /* "bits" */
    const char *type;    /* "int", "float", "enum" (one of choices), "bool" or "string" */
    const char *def;     /* default as text ("" for none) */
    double min, max;     /* range of int and float parameters */
    const char *choices; /* "f32|f16|bf16" for an enum; "" otherwise */
    const char *help;    /* one line */
} kvc_method_param;

int kvc_method_count(void);
/* Method i in [0, kvc_method_count()); KVC_ERR_RANGE outside. */
kvc_status kvc_method_get(int i, kvc_method_info *out);
/* Parameter j of method i; KVC_ERR_RANGE outside. */
kvc_status kvc_method_param_get(int i, int j, kvc_method_param *out);
/* The modifiers method i accepts after '+' (NULL-terminated; empty when none). */
const char *const *kvc_method_stacks_with(int i);

typedef struct kvc_cache_stats {
    uint64_t tokens;          /* tokens held, summed over layers / n_layers */
    uint64_t context_tokens;  /* tokens seen (the context length); > tokens when a method evicts */
    uint64_t payload_bytes;   /* encoded K and V values */
    uint64_t meta_bytes;      /* scales, mins, bitmaps, offsets, padding */
    uint64_t index_bytes;     /* selection index (page min/max, block means, ...) */
    uint64_t window_bytes;    /* dense hot windows: the tokens they hold */
    uint64_t window_tokens;   /* tokens in the hot windows, summed over layers / n_layers */
    uint64_t in_use_bytes;    /* payload + meta + index + window: what holds the context */
    /* Allocated but holding no token: spare capacity of appendable blobs and
     * hot windows, and the update buffers and scratch owned by the cache
     * (buffer_bytes, a part of reserved_bytes). */
    uint64_t reserved_bytes;
    uint64_t buffer_bytes;
    /* Per token of context (not per token held), so that evicting methods are compared
     * with a dense cache of the same context; from the bytes in use: */
    double bytes_per_token;   /* in_use_bytes / context_tokens, over all layers and heads */
    double bits_per_element;  /* in_use_bytes * 8 / (context_tokens * layers * kv_heads * head_dim * 2) */
    double ratio_vs_f16;      /* dense f16 bytes of the context / in_use_bytes */
    /* Decode attention since the cache was created (kept across resets):
     * tokens attended / tokens of context, over every step, layer and KV head
     * (1 for a dense cache; about the budget for selecting or evicting ones),
     * and of the tokens a step selected (selected units only: not the sinks,
     * the hot window or unselectable chunks) the fraction that the previous step
     * of the same layer and head had selected too (0 without selection). */
    double read_fraction;
    double reuse_rate;
    /* Far tier (sentkv:far=PATH): bytes in the file (not counted above, which
     * is what RAM holds), bytes read back and seconds spent reading them since
     * the cache was created; bytes of attention reads the near buffer served
     * instead of the file since then, and bytes it holds now (counted above
     * as payload). */
    uint64_t far_bytes, far_read_bytes;
    double far_read_s;
    uint64_t far_reused_bytes, far_near_bytes;
    /* Background work of a method (MosaicKV's manager thread), since the cache
     * was created: jobs run, their thread CPU time, step boundaries that found
     * a job still running (decode went on with the temporary form), and times
     * the cache thread had to wait for one (0 for decode; stream frees wait). */
    uint64_t bg_jobs;
    double bg_busy_s;
    uint64_t bg_pending_steps;
    uint64_t bg_waits;
} kvc_cache_stats;

/* ---- inference context ---------------------------------------------------- */

/* One sequence: run state, KV cache and thread pool. */
typedef struct kvc_ctx kvc_ctx;

/* The cache method when none is given: the exact f32 cache, the reference of every comparison. */
#define KVC_DEFAULT_KV "full:f32"

typedef struct kvc_ctx_params {
    int n_ctx;            /* maximum tokens (prompt + generated); 0: the model's training context */
    int n_threads;        /* <= 0: one per CPU */
    int n_batch;          /* prefill chunk in tokens; 0: 512 */
    const char *kv_spec;  /* NULL or "": KVC_DEFAULT_KV */
} kvc_ctx_params;

kvc_status kvc_ctx_create(kvc_model *m, const kvc_ctx_params *p, kvc_ctx **out);
void kvc_ctx_free(kvc_ctx *c);
/* Forgets all tokens (cache reset); the context can be reused. */
void kvc_ctx_reset(kvc_ctx *c);
/* Tokens processed so far. */
int kvc_ctx_pos(const kvc_ctx *c);
/* Prompt tokens per prefill chunk (n_batch after its default and the clamp to
 * n_ctx): a caller that feeds the prompt in these chunks runs the same batches. */
int kvc_ctx_batch(const kvc_ctx *c);

/* Runs n prompt tokens (chunks of n_batch, each attending to the cached past
 * and densely to itself), appending their K/V to the cache. If logits is not
 * NULL it receives the next-token logits after the last token (n_vocab floats).
 * KVC_ERR_RANGE if pos + n exceeds n_ctx (the message says how to raise -c). */
kvc_status kvc_ctx_prefill(kvc_ctx *c, const int32_t *tokens, int n, float *logits);

/* Like prefill but writes logits for every position (n * n_vocab floats). */
kvc_status kvc_ctx_prefill_all(kvc_ctx *c, const int32_t *tokens, int n, float *logits);

/* One decode step: appends token's K/V and writes the next-token logits. */
kvc_status kvc_ctx_decode(kvc_ctx *c, int32_t token, float *logits);

void kvc_ctx_cache_stats(const kvc_ctx *c, kvc_cache_stats *out);

/* Seconds spent so far in weights (matvec/GEMM), attention and cache management. */
typedef struct kvc_ctx_timing {
    double weights_s, attention_s, cache_s;
} kvc_ctx_timing;
void kvc_ctx_timing_get(const kvc_ctx *c, kvc_ctx_timing *out);

/* Observer of the post-RoPE K/V the forward pass hands to the cache, for tools
 * that save K/V (kvcomp dump-kv). Called once per layer for every prefill chunk
 * and decode step, before the cache sees them: tokens pos0 .. pos0+n-1 of
 * `layer`, k and v [n][n_kv_heads][head_dim] f32, valid only during the call.
 * fn == NULL removes the observer. */
typedef void (*kvc_kv_observer_fn)(void *user, int layer, int pos0, int n, const float *k,
                                   const float *v);
void kvc_ctx_set_kv_observer(kvc_ctx *c, kvc_kv_observer_fn fn, void *user);

/* Appends n tokens' K/V as an observer saw them, without running the model:
 * k and v [n_layers][n][n_kv_heads * head_dim] post-RoPE f32, tokens the ids
 * they came from (methods that read the text see them). Each layer's cache
 * gets the n tokens at once, as after a prefill chunk, but no attention
 * runs, so methods that learn from attention weights (h2o) see none. The
 * context then continues at pos + n. For tools that compress one saved
 * context with many methods (kvcomp tune). */
kvc_status kvc_ctx_append_kv(kvc_ctx *c, const int32_t *tokens, int n, const float *k,
                             const float *v);

/* ---- sampler -------------------------------------------------------------- */

typedef struct kvc_sampler_params {
    float temp;   /* <= 0: greedy */
    int top_k;    /* <= 0: off */
    float top_p;  /* >= 1: off */
    uint64_t seed;
} kvc_sampler_params;

typedef struct kvc_sampler kvc_sampler;
kvc_status kvc_sampler_create(const kvc_sampler_params *p, int n_vocab, kvc_sampler **out);
void kvc_sampler_free(kvc_sampler *s);
/* The next token, or -1 when a logit is NaN or Inf (the model's output is
 * garbage: the caller reports it). */
int32_t kvc_sampler_sample(kvc_sampler *s, const float *logits);

#ifdef __cplusplus
}
#endif

#endif /* KVCOMP_H */
