/* `kvcomp tune`: per-layer, per-K/V codecs for a byte budget (src/eval/tune.c,
 * docs/methods.md "tuned"). A sensitivity pass measures, on a calibration
 * window of a text, the KL against the exact cache when only one side (K or
 * V) of one layer is compressed with one candidate codec; a multiple-choice
 * knapsack then picks per side the candidate that minimises the summed
 * (predicted) KL within the budget, and the profile is written for
 * `--kv tuned:profile=FILE`. */
#ifndef KVCOMP_TUNE_H
#define KVCOMP_TUNE_H

#include <stdint.h>
#include <stdio.h>

#include "kvcomp.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvc_tune_params {
    int n_ctx;              /* calibration context tokens (one saved prefill); <= 0: 1024 */
    int n_cont;             /* scored tokens after it, one chunk through the cache; <= 0: 64 */
    int offset;             /* first token of the calibration window in the text */
    const char *candidates; /* comma list of codecs (tuned_profile.h); NULL: the default */
    const double *budgets;  /* mean bits per K/V element over all layers and sides, each > 0 */
    int n_budgets;          /* one profile per budget (a single sensitivity pass) */
    int window;             /* tuned's dense window (tokens); < 0: 32 */
    int n_threads, n_batch; /* <= 0: one per CPU, 512 */
    const char *source;     /* label written into the profile (the text's file name); may be NULL */
    int rot;                /* != 0: probes in rot's space (+rot, seed 1): a profile for tuned:...+rot */
} kvc_tune_params;

/* The default candidates. */
#define KVC_TUNE_CANDIDATES "q1g128,q2g128,q2g32,q4g128"

/* Runs the sensitivity pass on tokens[offset ..], then the choice for each
 * budget; writes the profile to out_path (one budget) or to out_path with
 * "-<budget>" before its extension (several), and a report (the
 * sensitivity table with the choices; one JSON object when json != 0). */
kvc_status kvc_tune(kvc_model *m, const int32_t *tokens, int n_tokens, const kvc_tune_params *p,
                    const char *out_path, FILE *report, int json);

/* The choice alone (exposed for tests): n_items sides, n_cand candidates,
 * kl[i * n_cand + c] the sensitivity of item i under candidate c, bits[i *
 * n_cand + c] its bits per element; picks choice[i] minimising the sum of kl
 * with mean bits <= budget_bits (exact over costs rounded up to 1/64 bit).
 * KVC_ERR_RANGE naming the smallest feasible budget if there is none. */
kvc_status kvc_tune_choose(int n_items, int n_cand, const double *kl, const double *bits,
                           double budget_bits, int *choice);

#ifdef __cplusplus
}
#endif

#endif
