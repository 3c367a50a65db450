/* Randomized Hadamard rotation (hadamard.h): the fast Walsh-Hadamard
 * transform, and the kvc_xform whose maps are H·(s ⊙ x) forward and s ⊙ H·y
 * back, with keys divided and queries multiplied by per-channel weights
 * fitted to a stream's first rows when smoothing. Scalar: a head vector of
 * 64 costs 384 additions, a few per decode step and layer against attention
 * over thousands of tokens (docs/benchmarks.md "Rotations and sinks" has the
 * decode speed with and without it). */
#include "kv/xform/hadamard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "base/status.h"

/* Unnormalized transform of one power-of-two block of n. */
static void fwht_block(float *x, int n) {
    for (int h = 1; h < n; h <<= 1)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
}

void kvc_fwht(float *x, int d) {
    int off = 0;
    for (int bit = 30; bit >= 0; bit--) {
        int n = 1 << bit;
        if (!(d & n)) continue;
        fwht_block(x + off, n);
        float scale = 1.0f / sqrtf((float)n);
        for (int j = off; j < off + n; j++) x[j] *= scale;
        off += n;
    }
}

typedef struct hadamard_state {
    unsigned sides; /* KVC_HADAMARD_K | KVC_HADAMARD_V: which sides are rotated */
    float smooth;   /* exponent of the key weights; 0: none (w = 1) */
    /* Per-channel factors applied before the transform (and after its
     * inverse): s for values, s / w for keys, s ⊙ w for queries (and to
     * restore keys: k = w ⊙ s ⊙ H·y). */
    float sign[KVC_HADAMARD_MAX_D], key_in[KVC_HADAMARD_MAX_D], query_in[KVC_HADAMARD_MAX_D];
} hadamard_state;

/* Whether side `which` (0 keys and queries, 1 values and outputs) is rotated. */
static int rotates(const kvc_xform *x, int which) {
    const hadamard_state *h = x->state;
    return (h->sides & (which ? KVC_HADAMARD_V : KVC_HADAMARD_K)) != 0;
}

/* The identity map of a side left unrotated: n rows copied (in place: nothing). */
static void copy_rows(const kvc_xform *x, const float *in, int n, int ldin, float *out, int ldout) {
    for (int r = 0; r < n; r++) {
        float *o = out + (size_t)r * ldout;
        const float *i = in + (size_t)r * ldin;
        if (o != i) memmove(o, i, (size_t)x->dim_in * sizeof *o);
    }
}

/* y = H·(f ⊙ x) for n rows (in place allowed). */
static void forward_rows(const kvc_xform *x, const float *f, const float *in, int n, int ldin, float *out,
                         int ldout) {
    int d = x->dim_in;
    for (int r = 0; r < n; r++) {
        float *o = out + (size_t)r * ldout;
        const float *i = in + (size_t)r * ldin;
        for (int c = 0; c < d; c++) o[c] = f[c] * i[c];
        kvc_fwht(o, d);
    }
}

/* x = f ⊙ H·y for n rows (in place allowed). */
static void inverse_rows(const kvc_xform *x, const float *f, const float *in, int n, int ldin, float *out,
                         int ldout) {
    int d = x->dim_in;
    for (int r = 0; r < n; r++) {
        float *o = out + (size_t)r * ldout;
        if (o != in + (size_t)r * ldin) memcpy(o, in + (size_t)r * ldin, (size_t)d * sizeof *o);
        kvc_fwht(o, d);
        for (int c = 0; c < d; c++) o[c] *= f[c];
    }
}

/* Queries take the keys' map with w multiplied in (q'·k' = q·k), outputs the
 * inverse of the values' map. */
static void had_prepare_q(const kvc_xform *x, const float *q, int G, int ldq, float *qt, int ldt) {
    const hadamard_state *h = x->state;
    if (rotates(x, 0)) forward_rows(x, h->query_in, q, G, ldq, qt, ldt);
    else copy_rows(x, q, G, ldq, qt, ldt);
}

static void had_finish_out(const kvc_xform *x, const float *ot, int G, int ldt, float *out, int ldo) {
    const hadamard_state *h = x->state;
    if (rotates(x, 1)) inverse_rows(x, h->sign, ot, G, ldt, out, ldo);
    else copy_rows(x, ot, G, ldt, out, ldo);
}

static void had_restore(const kvc_xform *x, int which, const float *xt, int n, int ldt, float *out, int ld) {
    const hadamard_state *h = x->state;
    if (rotates(x, which)) inverse_rows(x, which ? h->sign : h->query_in, xt, n, ldt, out, ld);
    else copy_rows(x, xt, n, ldt, out, ld);
}

static void had_apply(const kvc_xform *x, int which, const float *in, int n, int ldin, float *out, int ldout) {
    const hadamard_state *h = x->state;
    if (rotates(x, which)) forward_rows(x, which ? h->sign : h->key_in, in, n, ldin, out, ldout);
    else copy_rows(x, in, n, ldin, out, ldout);
}

/* Per channel c: the keys' spread around their mean, and the queries' root
 * mean square over the G heads (the error a key code makes in a score is
 * multiplied by the query's channel; a constant key offset costs a per-group
 * quantizer nothing). */
static void channel_stats(int d, const float *q, int ldq, int G, const float *k, int ldk, int n,
                          double *k_std, double *q_rms) {
    for (int c = 0; c < d; c++) {
        double sum = 0, sq = 0, qq = 0;
        for (int t = 0; t < n; t++) {
            double v = k[(size_t)t * ldk + c];
            sum += v;
            sq += v * v;
            for (int g = 0; g < G; g++) {
                double u = q[(size_t)t * ldq + (size_t)g * d + c];
                qq += u * u;
            }
        }
        double mean = sum / n, var = sq / n - mean * mean;
        k_std[c] = sqrt(var > 0 ? var : 0);
        q_rms[c] = sqrt(qq / ((double)n * G));
    }
}

/* The mean of v [d], times 1e-3: a floor that keeps a channel that is
 * constant (or silent) in the fitted rows from a zero or infinite weight. */
static double floor_of(const double *v, int d) {
    double m = 0;
    for (int c = 0; c < d; c++) m += v[c];
    return 1e-3 * m / d + 1e-12;
}

/* Key weights w_c = (std(k_c) / rms(q_c))^smooth, scaled to a geometric mean
 * of 1 and clamped to [1/KVC_HADAMARD_MAX_W, KVC_HADAMARD_MAX_W]. With a =
 * 1/2 this balances the two factors of a rotated, quantized score's error:
 * the quantizer's step after the rotation follows Σ_c std(k_c / w_c)^2 and the
 * error is multiplied by Σ_c (q_c w_c)^2, whose product is smallest when
 * w_c^2 = std(k_c) / rms(q_c) (Cauchy-Schwarz). */
static void had_calibrate(kvc_xform *x, const float *q, int ldq, int G, const float *k, int ldk, int n) {
    hadamard_state *h = x->state;
    int d = x->dim_in;
    if (h->smooth <= 0 || !(h->sides & KVC_HADAMARD_K) || n < KVC_HADAMARD_MIN_FIT || G < 1) return;
    double k_std[KVC_HADAMARD_MAX_D], q_rms[KVC_HADAMARD_MAX_D], w[KVC_HADAMARD_MAX_D], log_mean = 0;
    channel_stats(d, q, ldq, G, k, ldk, n, k_std, q_rms);
    double k_floor = floor_of(k_std, d), q_floor = floor_of(q_rms, d);
    for (int c = 0; c < d; c++) {
        w[c] = pow((k_std[c] + k_floor) / (q_rms[c] + q_floor), h->smooth);
        log_mean += log(w[c]) / d;
    }
    for (int c = 0; c < d; c++) {
        double wc = w[c] / exp(log_mean);
        wc = fmin(fmax(wc, 1.0 / KVC_HADAMARD_MAX_W), KVC_HADAMARD_MAX_W);
        h->key_in[c] = (float)(h->sign[c] / wc);
        h->query_in[c] = (float)(h->sign[c] * wc);
    }
}

/* The signs (one byte each would do) and, when smoothing, the weights as
 * floats: counted as stored. */
static uint64_t had_bytes(const kvc_xform *x) {
    const hadamard_state *h = x->state;
    return sizeof *x + (uint64_t)x->dim_in * (h->smooth > 0 ? 1 + sizeof(float) : 1);
}

static void had_free(kvc_xform *x) {
    free(x->state);
    free(x);
}

static const kvc_xform_ops hadamard_ops = {
    .name = "hadamard",
    .prepare_q = had_prepare_q,
    .calibrate = had_calibrate,
    .finish_out = had_finish_out,
    .restore = had_restore,
    .apply = had_apply,
    .bytes = had_bytes,
    .free = had_free,
};

kvc_status kvc_hadamard_create(int d, unsigned sides, uint64_t seed, uint64_t stream, float smooth,
                               kvc_xform **out) {
    *out = NULL;
    KVC_CHECK(d >= 1 && d <= KVC_HADAMARD_MAX_D, KVC_ERR_ARG, "hadamard rotation: head_dim %d outside [1, %d]",
              d, KVC_HADAMARD_MAX_D);
    KVC_CHECK(sides >= 1 && sides <= (KVC_HADAMARD_K | KVC_HADAMARD_V), KVC_ERR_ARG,
              "hadamard rotation: sides %u is not keys (1), values (2) or both (3)", sides);
    KVC_CHECK(smooth >= 0 && smooth <= 1, KVC_ERR_ARG, "hadamard rotation: smooth %g outside [0, 1]",
              (double)smooth);
    kvc_xform *x = calloc(1, sizeof *x);
    hadamard_state *h = calloc(1, sizeof *h);
    if (!x || !h) {
        free(x);
        free(h);
        return kvc_fail(KVC_ERR_NOMEM, "hadamard rotation of %d", d);
    }
    /* counter-based: sign c depends only on (seed, stream, c) */
    uint64_t base = kvc_rng_mix(seed ^ kvc_rng_mix(stream));
    for (int c = 0; c < d; c++) {
        h->sign[c] = (kvc_rng_mix(base ^ (uint64_t)c) >> 63) ? -1.0f : 1.0f;
        h->key_in[c] = h->query_in[c] = h->sign[c]; /* w = 1 until fitted */
    }
    h->sides = sides;
    h->smooth = smooth;
    x->ops = &hadamard_ops;
    atomic_init(&x->refs, 1);
    x->dim_in = x->dim_k = x->dim_v = d;
    x->state = h;
    *out = x;
    return KVC_OK;
}
