/* Randomized Hadamard rotation (hadamard.h): the fast Walsh-Hadamard
 * transform, and the kvc_xform whose maps are H·(s ⊙ x) forward and s ⊙ H·y
 * back. Scalar: a head vector of 64 costs 384 additions, a few per decode step
 * and layer against attention over thousands of tokens (docs/benchmarks.md
 * "Rotations and sinks" has the decode speed with and without it). */
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
    float sign[KVC_HADAMARD_MAX_D];
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

/* y = H·(s ⊙ x) for n rows. */
static void forward_rows(const kvc_xform *x, const float *in, int n, int ldin, float *out, int ldout) {
    const hadamard_state *h = x->state;
    int d = x->dim_in;
    for (int r = 0; r < n; r++) {
        float *o = out + (size_t)r * ldout;
        const float *i = in + (size_t)r * ldin;
        for (int c = 0; c < d; c++) o[c] = h->sign[c] * i[c];
        kvc_fwht(o, d);
    }
}

/* x = s ⊙ H·y for n rows. */
static void inverse_rows(const kvc_xform *x, const float *in, int n, int ldin, float *out, int ldout) {
    const hadamard_state *h = x->state;
    int d = x->dim_in;
    for (int r = 0; r < n; r++) {
        float *o = out + (size_t)r * ldout;
        if (o != in + (size_t)r * ldin) memcpy(o, in + (size_t)r * ldin, (size_t)d * sizeof *o);
        kvc_fwht(o, d);
        for (int c = 0; c < d; c++) o[c] *= h->sign[c];
    }
}

/* Queries take the keys' map, outputs the inverse of the values' map. */
static void had_prepare_q(const kvc_xform *x, const float *q, int G, int ldq, float *qt, int ldt) {
    (rotates(x, 0) ? forward_rows : copy_rows)(x, q, G, ldq, qt, ldt);
}

static void had_finish_out(const kvc_xform *x, const float *ot, int G, int ldt, float *out, int ldo) {
    (rotates(x, 1) ? inverse_rows : copy_rows)(x, ot, G, ldt, out, ldo);
}

static void had_restore(const kvc_xform *x, int which, const float *xt, int n, int ldt, float *out, int ld) {
    (rotates(x, which) ? inverse_rows : copy_rows)(x, xt, n, ldt, out, ld);
}

static void had_apply(const kvc_xform *x, int which, const float *in, int n, int ldin, float *out, int ldout) {
    (rotates(x, which) ? forward_rows : copy_rows)(x, in, n, ldin, out, ldout);
}

/* The signs are the whole state: one byte each would do, counted as stored. */
static uint64_t had_bytes(const kvc_xform *x) { return sizeof *x + (uint64_t)x->dim_in; }

static void had_free(kvc_xform *x) {
    free(x->state);
    free(x);
}

static const kvc_xform_ops hadamard_ops = {
    .name = "hadamard",
    .prepare_q = had_prepare_q,
    .finish_out = had_finish_out,
    .restore = had_restore,
    .apply = had_apply,
    .bytes = had_bytes,
    .free = had_free,
};

kvc_status kvc_hadamard_create(int d, unsigned sides, uint64_t seed, uint64_t stream, kvc_xform **out) {
    *out = NULL;
    KVC_CHECK(d >= 1 && d <= KVC_HADAMARD_MAX_D, KVC_ERR_ARG, "hadamard rotation: head_dim %d outside [1, %d]",
              d, KVC_HADAMARD_MAX_D);
    KVC_CHECK(sides >= 1 && sides <= (KVC_HADAMARD_K | KVC_HADAMARD_V), KVC_ERR_ARG,
              "hadamard rotation: sides %u is not keys (1), values (2) or both (3)", sides);
    kvc_xform *x = calloc(1, sizeof *x);
    hadamard_state *h = calloc(1, sizeof *h);
    if (!x || !h) {
        free(x);
        free(h);
        return kvc_fail(KVC_ERR_NOMEM, "hadamard rotation of %d", d);
    }
    /* counter-based: sign c depends only on (seed, stream, c) */
    uint64_t base = kvc_rng_mix(seed ^ kvc_rng_mix(stream));
    for (int c = 0; c < d; c++) h->sign[c] = (kvc_rng_mix(base ^ (uint64_t)c) >> 63) ? -1.0f : 1.0f;
    h->sides = sides;
    x->ops = &hadamard_ops;
    atomic_init(&x->refs, 1);
    x->dim_in = x->dim_k = x->dim_v = d;
    x->state = h;
    *out = x;
    return KVC_OK;
}
