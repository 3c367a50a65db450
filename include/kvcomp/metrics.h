/* Quality metrics of a cache method against the dense f32 reference, as
 * llama.cpp's perplexity tool reports them for quantization (its
 * --kl-divergence mode): per position the KL divergence KL(P_ref || P_method)
 * of the next-token distributions, whether the top token agrees, and the
 * change in probability of the true next token; over the positions the mean,
 * median, 99th percentile and maximum of KL, the same-top rate, mean and RMS of
 * Δp, and the perplexity ratio exp(mean NLL_method) / exp(mean NLL_ref).
 * All sums run in double. */
#ifndef KVCOMP_METRICS_H
#define KVCOMP_METRICS_H

#include <stdint.h>

/* out[i] = x[i] - logsumexp(x) (n > 0). out may alias x. */
void kvc_log_softmax(const float *x, int n, float *out);

/* Index of the largest element (the first on ties). */
int kvc_argmax(const float *x, int n);

/* KL(P || Q) = sum_i p_i (log p_i - log q_i) from log-probabilities; >= 0 up to
 * rounding (tiny negative values from rounding are returned as they are). */
double kvc_kl_logprobs(const float *lp, const float *lq, int n);

/* Order statistics of n values (n > 0; the input is not modified). Percentiles
 * interpolate linearly between order statistics at rank p * (n - 1), the
 * numpy default; the median is the 50th percentile. */
typedef struct kvc_summary {
    int n;
    double mean, median, p99, min, max;
} kvc_summary;
void kvc_summarize(const double *x, int n, kvc_summary *out);
double kvc_percentile_sorted(const double *sorted, int n, double p);

/* Per-position quantities of one method against the reference. */
typedef struct kvc_kl_pos {
    double kl;        /* KL(P_ref || P_method) */
    int same_top;     /* argmax agrees */
    double p_ref;     /* reference probability of the true next token */
    double p_method;  /* method probability of the true next token */
    double nll_ref;   /* -log p_ref */
    double nll_method;
} kvc_kl_pos;

/* ref_lp: reference log-probabilities; logits: the method's raw logits;
 * scratch: n floats. */
void kvc_kl_position(const float *ref_lp, const float *logits, int n, int32_t true_token,
                     float *scratch, kvc_kl_pos *out);

typedef struct kvc_kl_summary {
    int n;              /* positions */
    kvc_summary kl;     /* KL over positions */
    double same_top;    /* fraction of positions whose top token agrees */
    double dp_mean;     /* mean of p_method - p_ref for the true token */
    double dp_rms;      /* root mean square of the same */
    double ppl_ref, ppl_method, ppl_ratio;
} kvc_kl_summary;

/* Summarises n positions (n > 0). scratch: n doubles. */
void kvc_kl_summarize(const kvc_kl_pos *pos, int n, double *scratch, kvc_kl_summary *out);

/* Two-sided 95% Student-t interval for the mean of n independent samples
 * (mean -/+ t(0.975, n-1) * sd / sqrt(n), sd with n-1): *lo = *hi = NAN when n < 2.
 * eval kl applies it to the mean KL of continuation windows far apart in a text
 * (tokens within one window are correlated, so they are not the samples). */
void kvc_mean_ci95(const double *x, int n, double *lo, double *hi);
/* The 0.975 quantile of Student's t with df >= 1 degrees of freedom. */
double kvc_t975(int df);

#endif
