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
