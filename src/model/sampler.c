/* Token sampler (kvc_sampler_* in kvcomp.h): greedy when temp <= 0, otherwise
 * the llama.cpp chain top-k -> top-p (on the temperature-1 distribution) ->
 * temperature -> draw. Top-p first drops tokens whose probability is below
 * (1 - top_p) / (n - 1), which can never be inside the nucleus (llama2.c's
 * trick), so only a handful of candidates get sorted. The random source is
 * splitmix64 from the seed, so a seed reproduces a run. */
#include <math.h>
#include <stdlib.h>

#include "base/rng.h"
#include "base/status.h"
#include "kvcomp.h"

typedef struct cand {
    float logit;
    int32_t id;
} cand;

struct kvc_sampler {
    kvc_sampler_params p;
    int n_vocab;
    uint64_t rng;
    cand *c; /* [n_vocab] scratch */
};

kvc_status kvc_sampler_create(const kvc_sampler_params *p, int n_vocab, kvc_sampler **out) {
    KVC_CHECK(p != NULL && out != NULL, KVC_ERR_ARG, "kvc_sampler_create: NULL argument");
    *out = NULL;
    KVC_CHECK(n_vocab >= 1, KVC_ERR_ARG, "vocabulary size %d < 1", n_vocab);
    KVC_CHECK(isfinite(p->temp), KVC_ERR_ARG, "temperature %g is not finite", (double)p->temp);
    KVC_CHECK(!(p->top_p <= 0.0f) && !isnan(p->top_p), KVC_ERR_ARG,
              "top-p %g must be in (0, 1] (>= 1: off)", (double)p->top_p);
    kvc_sampler *s = calloc(1, sizeof *s);
    KVC_CHECK(s != NULL, KVC_ERR_NOMEM, "cannot allocate the sampler");
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    if (!s->c) {
        free(s);
        return kvc_fail(KVC_ERR_NOMEM, "cannot allocate sampler scratch for %d tokens", n_vocab);
    }
    s->p = *p;
    s->n_vocab = n_vocab;
    s->rng = p->seed;
    *out = s;
    return KVC_OK;
}

void kvc_sampler_free(kvc_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s);
}

static int by_logit_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id - y->id;
}

static int32_t argmax(const float *logits, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* Min-heap on logit of the k best candidates; returns the count kept (<= k). */
static void sift_down(cand *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && h[l].logit < h[m].logit) m = l;
        if (r < n && h[r].logit < h[m].logit) m = r;
        if (m == i) return;
        cand t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static int top_k(cand *c, const float *logits, int n, int k) {
    for (int i = 0; i < k; i++) c[i] = (cand){logits[i], i};
    for (int i = k / 2 - 1; i >= 0; i--) sift_down(c, k, i);
    for (int i = k; i < n; i++) {
        if (logits[i] > c[0].logit) {
            c[0] = (cand){logits[i], i};
            sift_down(c, k, 0);
        }
    }
    qsort(c, (size_t)k, sizeof *c, by_logit_desc);
    return k;
}

/* NaN or Inf logits (a corrupt model) would leave no candidate, and every
 * ordering below assumes finite values: they are refused before sampling. */
static int all_finite(const float *logits, int n) {
    for (int i = 0; i < n; i++)
        if (!isfinite(logits[i])) return 0;
    return 1;
}

int32_t kvc_sampler_sample(kvc_sampler *s, const float *logits) {
    const int n = s->n_vocab;
    if (!all_finite(logits, n)) return -1;
    if (s->p.temp <= 0.0f) return argmax(logits, n);

    int nc;
    if (s->p.top_k > 0 && s->p.top_k < n) {
        nc = top_k(s->c, logits, n, s->p.top_k);
    } else {
        float mx = logits[argmax(logits, n)];
        double sum = 0.0;
        for (int i = 0; i < n; i++) sum += exp((double)logits[i] - mx);
        nc = 0;
        /* with top-p, tokens below (1-p)/(n-1) of the mass cannot be in the nucleus */
        double cut = s->p.top_p < 1.0f && n > 1 ? (1.0 - s->p.top_p) / (n - 1) : 0.0;
        for (int i = 0; i < n; i++)
            if (exp((double)logits[i] - mx) / sum >= cut) s->c[nc++] = (cand){logits[i], i};
        qsort(s->c, (size_t)nc, sizeof *s->c, by_logit_desc);
    }

    /* probabilities at temperature 1 over the candidates, for top-p */
    cand *c = s->c;
    double sum = 0.0;
    for (int i = 0; i < nc; i++) sum += exp((double)c[i].logit - c[0].logit);
    if (s->p.top_p < 1.0f) {
        double acc = 0.0;
        int keep = nc;
        for (int i = 0; i < nc; i++) {
            acc += exp((double)c[i].logit - c[0].logit) / sum;
            if (acc >= s->p.top_p) {
                keep = i + 1;
                break;
            }
        }
        nc = keep;
    }

    /* temperature, then draw */
    double z = 0.0;
    for (int i = 0; i < nc; i++) z += exp(((double)c[i].logit - c[0].logit) / s->p.temp);
    double u = kvc_rng_unit(&s->rng) * z;
    double acc = 0.0;
    for (int i = 0; i < nc; i++) {
        acc += exp(((double)c[i].logit - c[0].logit) / s->p.temp);
        if (u < acc) return c[i].id;
    }
    return c[nc - 1].id;
}
