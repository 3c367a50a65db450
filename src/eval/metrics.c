/* KL divergence, top-token agreement, Δp and perplexity of a method against the
 * dense reference (definitions as in llama.cpp's perplexity --kl-divergence;
 * see include/kvcomp/metrics.h). */
#include "kvcomp/metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void kvc_log_softmax(const float *x, int n, float *out) {
    float mx = x[0];
    for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)x[i] - mx);
    double lse = mx + log(sum);
    for (int i = 0; i < n; i++) out[i] = (float)((double)x[i] - lse);
}

int kvc_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

double kvc_kl_logprobs(const float *lp, const float *lq, int n) {
    double kl = 0;
    for (int i = 0; i < n; i++) {
        double p = exp((double)lp[i]);
        if (p > 0) kl += p * ((double)lp[i] - (double)lq[i]);
    }
    return kl;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double kvc_percentile_sorted(const double *s, int n, double p) {
    double r = p * (n - 1);
    int lo = (int)floor(r);
    if (lo >= n - 1) return s[n - 1];
    if (lo < 0) return s[0];
    double f = r - lo;
    return s[lo] + f * (s[lo + 1] - s[lo]);
}

void kvc_summarize(const double *x, int n, kvc_summary *out) {
    memset(out, 0, sizeof *out);
    out->n = n;
    if (n <= 0) return;
    double *s = malloc(sizeof(double) * (size_t)n);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += x[i];
    out->mean = sum / n;
    if (!s) { /* no memory for the order statistics: report the mean only */
        out->median = out->p99 = out->min = out->max = NAN;
        return;
    }
    memcpy(s, x, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp_double);
    out->min = s[0];
    out->max = s[n - 1];
    out->median = kvc_percentile_sorted(s, n, 0.5);
    out->p99 = kvc_percentile_sorted(s, n, 0.99);
    free(s);
}

void kvc_kl_position(const float *ref_lp, const float *logits, int n, int32_t true_token,
                     float *scratch, kvc_kl_pos *out) {
    kvc_log_softmax(logits, n, scratch);
    out->kl = kvc_kl_logprobs(ref_lp, scratch, n);
    out->same_top = kvc_argmax(ref_lp, n) == kvc_argmax(scratch, n);
    out->nll_ref = -(double)ref_lp[true_token];
    out->nll_method = -(double)scratch[true_token];
    out->p_ref = exp(-out->nll_ref);
    out->p_method = exp(-out->nll_method);
}

void kvc_kl_summarize(const kvc_kl_pos *pos, int n, double *scratch, kvc_kl_summary *out) {
    memset(out, 0, sizeof *out);
    out->n = n;
    if (n <= 0) return;
    double same = 0, dp = 0, dp2 = 0, nll_r = 0, nll_m = 0;
    for (int i = 0; i < n; i++) {
        scratch[i] = pos[i].kl;
        same += pos[i].same_top;
        double d = pos[i].p_method - pos[i].p_ref;
        dp += d;
        dp2 += d * d;
        nll_r += pos[i].nll_ref;
        nll_m += pos[i].nll_method;
    }
    kvc_summarize(scratch, n, &out->kl);
    out->same_top = same / n;
    out->dp_mean = dp / n;
    out->dp_rms = sqrt(dp2 / n);
    out->ppl_ref = exp(nll_r / n);
    out->ppl_method = exp(nll_m / n);
    out->ppl_ratio = exp((nll_m - nll_r) / n);
}

double kvc_t975(int df) {
    /* exact to 3 decimals for df <= 30 (standard tables); beyond, the Cornish-Fisher
     * expansion around the normal quantile (error below 1e-4 there) */
    static const double tab[31] = {NAN,   12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365,
                                   2.306, 2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
                                   2.120, 2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069,
                                   2.064, 2.060,  2.056, 2.052, 2.048, 2.045, 2.042};
    if (df < 1) return NAN;
    if (df <= 30) return tab[df];
    const double z = 1.959963984540054, v = df;
    return z + (z * z * z + z) / (4 * v) + (5 * pow(z, 5) + 16 * z * z * z + 3 * z) / (96 * v * v);
}

void kvc_mean_ci95(const double *x, int n, double *lo, double *hi) {
    *lo = *hi = NAN;
    if (n < 2) return;
    double mean = 0, ss = 0;
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= n;
    for (int i = 0; i < n; i++) ss += (x[i] - mean) * (x[i] - mean);
    double half = kvc_t975(n - 1) * sqrt(ss / (n - 1) / n);
    *lo = mean - half;
    *hi = mean + half;
}
