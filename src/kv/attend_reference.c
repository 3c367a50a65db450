/* The plain reference attention (attend.h kvc_attend_reference): every
 * token of a stream decoded to f32 (codec decode + transform restore), dead
 * tokens left out, a softmax in double precision, no selection. The tests
 * hold the driver and every method's kernels against it. */
#include "kv/attend.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/status.h"

static kvc_status reference_in_stream_space(const kvc_stream *s, const float *q, int G, float *out);

kvc_status kvc_attend_reference(const kvc_stream *s, const float *q, int G, float *out) {
    if (!s->xf) return reference_in_stream_space(s, q, G, out);
    size_t n = (size_t)G * s->dim;
    float *qm = malloc(n * sizeof *qm), *om = malloc(n * sizeof *om);
    kvc_status st = qm && om ? KVC_OK : kvc_fail(KVC_ERR_NOMEM, "reference attention (%d heads)", G);
    if (st == KVC_OK) {
        s->xf->ops->prepare_q(s->xf, q, G, s->dim, qm, s->dim);
        st = reference_in_stream_space(s, qm, G, om);
    }
    if (st == KVC_OK) s->xf->ops->finish_out(s->xf, om, G, s->dim, out, s->dim);
    free(qm);
    free(om);
    return st;
}

static kvc_status reference_in_stream_space(const kvc_stream *s, const float *q, int G, float *out) {
    int d = s->dim;
    int64_t n = 0;
    for (int ci = -1; ci < s->n_chunks; ci++) n += (ci < 0 ? s->hot : s->chunks[ci])->n;
    float *k = malloc((size_t)(n ? n : 1) * d * sizeof *k);
    float *v = malloc((size_t)(n ? n : 1) * d * sizeof *v);
    uint8_t *live = malloc((size_t)(n ? n : 1));
    double *sc = malloc((size_t)(n ? n : 1) * sizeof *sc);
    kvc_status st = KVC_OK;
    if (!k || !v || !live || !sc) st = kvc_fail(KVC_ERR_NOMEM, "reference attention (%lld tokens)", (long long)n);
    int64_t off = 0;
    for (int ci = -1; ci < s->n_chunks && st == KVC_OK; ci++) {
        const kvc_chunk *c = (ci < 0 ? s->hot : s->chunks[ci]);
        if (c->n == 0) continue;
        st = kvc_chunk_decode(c, 0, c->n, k + off * d, v + off * d, d);
        for (int i = 0; i < c->n; i++) live[off + i] = !kvc_chunk_is_dead(c, i);
        off += c->n;
    }
    for (int g = 0; g < G && st == KVC_OK; g++) {
        const float *qg = q + (size_t)g * d;
        double m = -INFINITY, l = 0.0;
        for (int64_t i = 0; i < n; i++) {
            if (!live[i]) continue;
            double acc = 0.0;
            for (int j = 0; j < d; j++) acc += (double)qg[j] * k[i * d + j];
            sc[i] = acc / sqrt((double)d);
            if (sc[i] > m) m = sc[i];
        }
        for (int j = 0; j < d; j++) out[(size_t)g * d + j] = 0.0f;
        double *o = calloc((size_t)d, sizeof *o);
        if (!o) { st = kvc_fail(KVC_ERR_NOMEM, "reference output"); break; }
        for (int64_t i = 0; i < n; i++) {
            if (!live[i]) continue;
            double p = exp(sc[i] - m);
            l += p;
            for (int j = 0; j < d; j++) o[j] += p * v[i * d + j];
        }
        for (int j = 0; j < d; j++) out[(size_t)g * d + j] = l > 0 ? (float)(o[j] / l) : 0.0f;
        free(o);
    }
    free(k); free(v); free(live); free(sc);
    return st;
}
