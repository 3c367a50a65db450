/* The reference file of `kvcomp eval kl` (--ref-out writes it, --ref reads
 * it; byte layout in docs/formats.md "eval kl reference file"): the full:f32
 * reference's logits of every scored position of every window, with what
 * identifies the run they belong to (model, text, sizes) and the reference's
 * own row (seconds, peak RSS, cache stats). At 32K context on a 1.5B model
 * the reference is half an hour of prefill; with the file, later runs compare
 * more methods against the same reference without recomputing it (llama.cpp's
 * perplexity tool has --kl-divergence-base for the same reason).
 *
 * The file is untrusted input when read: the header must match the run field
 * by field (the message names the field and both values), its size must be
 * what the header implies, and every window carries a checksum that is
 * verified before its logits are used. Writing goes to PATH.tmp and is
 * renamed to PATH only when every window is in, so an interrupted run never
 * leaves a file that looks whole. */
#ifndef KVC_EVAL_KL_REF_H
#define KVC_EVAL_KL_REF_H

#include <stdint.h>

#include "kvcomp.h"

/* What must be the same for a reference to serve a run. The logits depend on
 * the model, the tokens, the window placement (text length, ctx, cont,
 * windows), the prefill chunking (batch) and the thread count: the threads
 * split some sums differently, and the rounding differences grow through the
 * layers (full:f32 at -t 1 against -t 2 on SmolLM2, 256 tokens: KL 0.0026,
 * max |dlogit| 1.06; each thread count alone is deterministic). */
typedef struct kvc_kl_ref_id {
    char arch[16];
    uint64_t n_params, weight_bytes;
    int32_t n_layers, dim, n_vocab;
    int32_t n_text_tokens, n_ctx, n_cont, n_windows, n_batch, n_threads;
    uint64_t tokens_hash; /* kvc_kl_ref_tokens_hash of the windows' tokens */
    uint64_t build_hash;  /* kvc_kl_ref_build_hash: which kvcomp binary made it */
    int32_t isa;          /* kvc_active_isa(): which kernels */
} kvc_kl_ref_id;

/* The reference's row for one window, stored beside its logits. */
typedef struct kvc_kl_ref_window {
    int32_t start; /* first context token of the window */
    double seconds;
    int64_t peak_rss;
    kvc_cache_stats stats;
} kvc_kl_ref_window;

typedef struct kvc_kl_ref_file kvc_kl_ref_file;

/* The checksum of the tokens the windows read: n_windows ranges of len tokens
 * from start[w]. */
uint64_t kvc_kl_ref_tokens_hash(const int32_t *tokens, const int *start, int n_windows, int len);

/* A checksum of the running executable (/proc/self/exe; 0 if unreadable).
 * Two builds round differently (the order of a kernel's sums), and that moves
 * the logits as much as a method can: another build's reference is refused
 * unless the caller accepts it (any_build in kvc_kl_ref_open). */
uint64_t kvc_kl_ref_build_hash(void);

/* Writing: create PATH.tmp with the header, put every window in order, then
 * finish (renames to PATH). close without finish removes PATH.tmp. */
kvc_status kvc_kl_ref_create(const char *path, const kvc_kl_ref_id *id, kvc_kl_ref_file **out);
kvc_status kvc_kl_ref_put(kvc_kl_ref_file *f, int w, const kvc_kl_ref_window *win,
                          const float *logits);
kvc_status kvc_kl_ref_finish(kvc_kl_ref_file *f);

/* Reading: open checks the header against want and the file's size; get reads
 * window w (n_cont x n_vocab logits) and checks its checksum and start. */
kvc_status kvc_kl_ref_open(const char *path, const kvc_kl_ref_id *want, int any_build,
                           kvc_kl_ref_file **out);
kvc_status kvc_kl_ref_get(kvc_kl_ref_file *f, int w, kvc_kl_ref_window *win, float *logits);

void kvc_kl_ref_close(kvc_kl_ref_file *f);

#endif
