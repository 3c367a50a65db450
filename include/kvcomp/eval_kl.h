/* `kvcomp eval kl`: quality of cache methods against the dense f32 cache
 * (docs/design.md §6), the way llama.cpp's perplexity tool judges quantization.
 *
 * For each method (and once for the reference full:f32): a fresh context,
 * prefill of n_ctx tokens of the text in chunks of n_batch (each chunk attends
 * to the cached — so compressed — past and densely to itself; the chunk's K/V
 * are then handed to the cache), then n_cont tokens teacher-forced through
 * decode. The scored positions are the n_cont predictions made by those decode
 * steps, so every scored logit comes from attention over the cache. The text
 * must hold n_ctx + n_cont + 1 tokens.
 *
 * With n_windows > 1 all of that runs once per window: windows of n_ctx +
 * n_cont tokens whose starts are spread evenly from the beginning to the end of
 * the text (their scored continuations must not overlap). Each method gets its
 * summary per window and pooled over all scored positions, and a 95% Student-t
 * interval for the mean KL over the windows' means (kvc_mean_ci95: windows far
 * apart are close to independent samples, the tokens of one window are not).
 * Peak RSS is measured per method (over its windows), with the peak reset
 * before each of its runs where the kernel allows it.
 *
 * The reference can be kept in a file (ref_out) and read back by a later run
 * with the same model, text and sizes (ref_in), which then runs only the
 * methods: at 32K tokens the reference alone is half an hour here.
 *
 * Optionally (dense_check) the cache is checked against dense attention with
 * full:f32, two ways, each as max |Δlogit| and mean KL over the scored
 * positions:
 *   decode:  the reference decode logits against the same continuation run as
 *            one prompt chunk after the same prefill (prefill_all). This also
 *            includes the difference between the decode matvec (int8
 *            activations, as llama.cpp) and the prefill GEMM (f32).
 *   chunked: that chunked run against one single dense chunk over all
 *            n_ctx + n_cont tokens (no attention through the cache at all);
 *            both use the GEMM path, so this isolates the cache's attention
 *            over the compressed-past path. Needs (n_ctx + n_cont) x n_vocab
 *            logits of memory. */
#ifndef KVCOMP_EVAL_KL_H
#define KVCOMP_EVAL_KL_H

#include <stdint.h>

#include "kvcomp/metrics.h"
#include "kvcomp.h"

typedef struct kvc_eval_kl_params {
    int n_ctx;     /* context tokens prefilled */
    int n_cont;    /* scored continuation tokens */
    int n_threads; /* <= 0: one per CPU */
    int n_batch;   /* prefill chunk; 0: 512 */
    int dense_check; /* on the first window */
    int n_windows;   /* <= 1: one window at the start of the text */
    /* The reference's logits: read from ref_in instead of running full:f32,
     * or written to ref_out after running it (src/eval/kl_ref.h; NULL: neither).
     * A file made by another model, text, ctx, cont, windows, batch, thread
     * count, kernel ISA or kvcomp build is refused; ref_any_build accepts one
     * from another build or ISA (to measure how far the kernels move the logits). */
    const char *ref_in, *ref_out;
    int ref_any_build;
} kvc_eval_kl_params;

typedef struct kvc_eval_kl_method {
    const char *spec;      /* borrowed from the caller */
    kvc_status status;     /* a method that failed is reported, the others still run */
    char error[256];
    kvc_kl_summary q;      /* quality against the reference, all windows pooled */
    kvc_kl_summary *win;   /* [n_windows]: per window */
    double kl_ci95_lo, kl_ci95_hi; /* 95% interval of the mean KL over windows (NAN: one) */
    double max_abs_dlogit; /* max |logit - reference logit| over all scored positions */
    kvc_cache_stats stats; /* after the last decode step */
    double seconds;        /* prefill + decode wall time, all windows */
    int64_t peak_rss;      /* bytes, the largest over its windows */
} kvc_eval_kl_method;

typedef struct kvc_eval_kl_report {
    int n_ctx, n_cont, n_vocab, n_threads;
    int n_windows;
    int *window_start;             /* [n_windows]: first context token of each window */
    double *window_ref_ppl;        /* [n_windows] */
    double ref_ppl;                /* perplexity of full:f32 over the continuations */
    double ref_seconds;            /* with ref_in: the seconds recorded in the file */
    int64_t ref_peak_rss;
    int ref_loaded;                /* the reference came from ref_in */
    kvc_cache_stats ref_stats;
    int dense_checked;             /* the dense check ran */
    double dense_max_abs_logit;    /* largest |reference logit|, for scale */
    double decode_max_abs_dlogit, decode_kl_mean;   /* decode vs one prompt chunk */
    double chunked_max_abs_dlogit, chunked_kl_mean; /* chunked prefill vs one dense chunk */
    int n_methods;
    kvc_eval_kl_method *methods;   /* malloc'd; free with kvc_eval_kl_report_free */
} kvc_eval_kl_report;

/* Runs the reference and every spec. Fails only on errors that stop the whole
 * evaluation (too few tokens, the reference failing, no memory). */
kvc_status kvc_eval_kl_run(kvc_model *m, const int32_t *tokens, int n_tokens,
                           const kvc_eval_kl_params *p, char *const *specs, int n_specs,
                           kvc_eval_kl_report *rep);
void kvc_eval_kl_report_free(kvc_eval_kl_report *rep);

#endif
