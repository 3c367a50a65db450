/* MosaicKV strategies (mosaic_strategy.h): the rotation from the segment's
 * second moments, the rate and group choice by loss (§5.5: "the highest
 * compression rate and largest group size whose loss remains below a
 * threshold"), the block size by intra-block key variance (§5.5), and the
 * encoding of a segment into its packed chunk with a block index. */
#include "kv/method/mosaic_strategy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kv/codec/dense.h"
#include "kv/codec/prune.h"
#include "kv/select/blocks.h"

enum { LOSS_SAMPLES = 256 }; /* tokens of a segment the rate / group choice looks at */

/* Channels kept after truncating a fraction of d (a multiple of 4, >= 4). */
static int truncated_dim(float trunc, int d) {
    int dk = d - (int)lround((double)trunc * d);
    dk -= dk % 4;
    return dk < 4 ? 4 : dk;
}

/* Elements kept per vector at retention frac (of head_dim d), as groups of g
 * inside dk channels: at least one group, at most all of them. */
static int keep_groups(double frac, int d, int dk, int g) {
    int r = kvc_prune_keep_count(1.0 - frac, d);
    int kg = (int)lround((double)r / g);
    if (kg < 1) kg = 1;
    if (kg > dk / g) kg = dk / g;
    return kg;
}

/* Loss of cfg over the sampled rotated rows xt [ns][dk] whose original
 * energies are e[ns]: the fraction of the total energy not kept. */
static double sample_loss(const float *xt, const double *e, int ns, int dk, const kvc_packed_cfg *cfg) {
    double kept = 0.0, total = 0.0;
    uint32_t bits[KVC_PACKED_MAX_D / 32];
    for (int i = 0; i < ns; i++) {
        kept += kvc_packed_select(xt + (size_t)i * dk, dk, cfg->group, cfg->keep, bits);
        total += e[i];
    }
    return total > 0.0 ? 1.0 - kept / total : 0.0;
}

/* The per-vector selection of one side (K or V): candidates from the most
 * compressive rate and the largest group; the first under the loss threshold. */
static kvc_status choose_rate(const kvc_mosaic_opts *o, int d, const kvc_xform *xf, int which,
                              const float *x, int n, int ld, kvc_packed_cfg *out) {
    int dk = which ? xf->dim_v : xf->dim_k;
    if (!o->dynamic) {
        int g = o->group ? o->group : 1;
        *out = (kvc_packed_cfg){.group = g, .keep = keep_groups(o->keep, d, dk, g)};
        return KVC_OK;
    }
    int ns = n < LOSS_SAMPLES ? n : LOSS_SAMPLES;
    float *xs = malloc((size_t)ns * d * sizeof *xs), *xt = malloc((size_t)ns * dk * sizeof *xt);
    double *e = malloc((size_t)ns * sizeof *e);
    if (!xs || !xt || !e) {
        free(xs); free(xt); free(e);
        return kvc_fail(KVC_ERR_NOMEM, "mosaic: loss samples (%d x %d)", ns, d);
    }
    for (int i = 0; i < ns; i++) { /* evenly spaced tokens of the segment */
        const float *src = x + (size_t)((int64_t)i * n / ns) * ld;
        memcpy(xs + (size_t)i * d, src, (size_t)d * sizeof *xs);
        double s = 0.0;
        for (int c = 0; c < d; c++) s += (double)src[c] * src[c];
        e[i] = s;
    }
    kvc_rotation_apply(xf, which, xs, ns, d, xt, dk);
    const double fracs[3] = {o->keep - 0.125, o->keep, o->keep + 0.125};
    const int groups_all[3] = {4, 2, 1};
    int n_groups = o->group ? 1 : 3;
    const int *groups = o->group ? &o->group : groups_all;
    kvc_packed_cfg best = {0};
    for (int f = 0; f < 3 && !best.group; f++) {
        if (fracs[f] <= 0.0 || fracs[f] > 1.0) continue;
        for (int gi = 0; gi < n_groups && !best.group; gi++) {
            int g = groups[gi];
            if (dk % g) continue;
            kvc_packed_cfg c = {.group = g, .keep = keep_groups(fracs[f], d, dk, g)};
            if (sample_loss(xt, e, ns, dk, &c) <= o->loss) best = c;
        }
    }
    if (!best.group) { /* nothing under the threshold: the least compressive candidate */
        int g = o->group ? o->group : 1;
        double f = o->keep + 0.125 > 1.0 ? 1.0 : o->keep + 0.125;
        best = (kvc_packed_cfg){.group = g, .keep = keep_groups(f, d, dk, g)};
    }
    free(xs); free(xt); free(e);
    *out = best;
    return KVC_OK;
}

/* Largest block size (16, 8, 4) whose intra-block key variance, relative to
 * the segment's key variance, stays under the threshold; 4 otherwise. */
static int choose_block(const float *kt, int n, int ld, int dk, float thr) {
    double mu[KVC_PACKED_MAX_D] = {0}, tot = 0.0;
    for (int t = 0; t < n; t++)
        for (int c = 0; c < dk; c++) mu[c] += kt[(size_t)t * ld + c];
    for (int c = 0; c < dk; c++) mu[c] /= n > 0 ? n : 1;
    for (int t = 0; t < n; t++)
        for (int c = 0; c < dk; c++) {
            double x = kt[(size_t)t * ld + c] - mu[c];
            tot += x * x;
        }
    static const int sizes[3] = {16, 8, 4};
    for (int si = 0; si < 3; si++) {
        int B = sizes[si];
        double intra = 0.0;
        for (int b0 = 0; b0 < n; b0 += B) {
            int b1 = b0 + B < n ? b0 + B : n;
            double m[KVC_PACKED_MAX_D] = {0};
            for (int t = b0; t < b1; t++)
                for (int c = 0; c < dk; c++) m[c] += kt[(size_t)t * ld + c];
            for (int c = 0; c < dk; c++) m[c] /= b1 - b0;
            for (int t = b0; t < b1; t++)
                for (int c = 0; c < dk; c++) {
                    double x = kt[(size_t)t * ld + c] - m[c];
                    intra += x * x;
                }
        }
        if (tot <= 0.0 || intra <= thr * tot) return B;
    }
    return 4;
}

kvc_status kvc_mosaic_strategy_make(const kvc_mosaic_opts *o, int d, const kvc_cov *ck,
                                    const kvc_cov *cv, const float *k, const float *v, int n,
                                    int ld, kvc_mosaic_strategy *out) {
    *out = (kvc_mosaic_strategy){0};
    KVC_CHECK(n >= 1, KVC_ERR_ARG, "mosaic: a strategy needs tokens (%d)", n);
    float *rk = malloc((size_t)d * d * sizeof *rk), *rv = malloc((size_t)d * d * sizeof *rv);
    kvc_status st = rk && rv ? KVC_OK : kvc_fail(KVC_ERR_NOMEM, "mosaic: bases %d x %d", d, d);
    if (st == KVC_OK && o->rotate) {
        st = kvc_cov_eigen(ck, rk, NULL);
        if (st == KVC_OK) st = kvc_cov_eigen(cv, rv, NULL);
    } else if (st == KVC_OK) {
        kvc_cov_channel_order(ck, rk);
        kvc_cov_channel_order(cv, rv);
    }
    int dk = o->pervector ? truncated_dim(o->trunc, d) : keep_groups(o->keep, d, d, 1);
    if (st == KVC_OK) st = kvc_rotation_create(d, rk, dk, rv, dk, &out->xf);
    free(rk);
    free(rv);
    if (st == KVC_OK && o->pervector) {
        st = choose_rate(o, d, out->xf, 0, k, n, ld, &out->kcfg);
        if (st == KVC_OK) st = choose_rate(o, d, out->xf, 1, v, n, ld, &out->vcfg);
    } else if (st == KVC_OK) { /* uniform top-r: every rotated channel kept */
        out->dense = 1;
        out->kcfg = out->vcfg = (kvc_packed_cfg){.group = 1, .keep = dk};
    }
    if (st == KVC_OK) {
        if (o->block) out->block = o->block;
        else if (!o->dynamic) out->block = 8;
        else {
            float *kt = malloc((size_t)n * dk * sizeof *kt);
            if (!kt) st = kvc_fail(KVC_ERR_NOMEM, "mosaic: rotated keys (%d x %d)", n, dk);
            else {
                kvc_rotation_apply(out->xf, 0, k, n, ld, kt, dk);
                out->block = choose_block(kt, n, dk, dk, o->var);
                free(kt);
            }
        }
    }
    if (st != KVC_OK) kvc_mosaic_strategy_clear(out);
    return st;
}

void kvc_mosaic_strategy_clear(kvc_mosaic_strategy *s) {
    kvc_xform_release(s->xf);
    *s = (kvc_mosaic_strategy){0};
}

kvc_mosaic_strategy kvc_mosaic_strategy_share(const kvc_mosaic_strategy *s) {
    kvc_mosaic_strategy c = *s;
    kvc_xform_retain(c.xf);
    return c;
}

kvc_status kvc_mosaic_encode(const kvc_mosaic_strategy *s, const float *k, const float *v, int n,
                             int ld, int64_t pos0, kvc_chunk **out) {
    *out = NULL;
    const kvc_xform *xf = s->xf;
    int d = xf->dim_in;
    float *kt = malloc((size_t)(n ? n : 1) * d * sizeof *kt), *vt = malloc((size_t)(n ? n : 1) * d * sizeof *vt);
    kvc_status st = kt && vt ? KVC_OK : kvc_fail(KVC_ERR_NOMEM, "mosaic: rotated segment (%d tokens)", n);
    if (st == KVC_OK) {
        kvc_rotation_apply(xf, 0, k, n, ld, kt, d);
        kvc_rotation_apply(xf, 1, v, n, ld, vt, d);
        kvc_codec kc, vc;
        if (s->dense) {
            kc = (kvc_codec){.ops = &kvc_codec_f16, .dim = xf->dim_k};
            vc = (kvc_codec){.ops = &kvc_codec_f16, .dim = xf->dim_v};
        } else {
            kc = (kvc_codec){.ops = &kvc_codec_packed_f16, .dim = xf->dim_k, .cfg = &s->kcfg};
            vc = (kvc_codec){.ops = &kvc_codec_packed_f16, .dim = xf->dim_v, .cfg = &s->vcfg};
        }
        st = kvc_chunk_encode(&kc, &vc, kt, vt, n, d, pos0, NULL, s->xf, out);
    }
    if (st == KVC_OK) {
        /* the packed blobs describe themselves: the cfg is not read after encode */
        (*out)->kc.cfg = (*out)->vc.cfg = NULL;
        st = kvc_blocks_create(kt, n, d, xf->dim_k, s->block, &s->kcfg, &(*out)->sel);
        if (st != KVC_OK) {
            kvc_chunk_free(*out);
            *out = NULL;
        }
    }
    free(kt);
    free(vt);
    return st;
}

double kvc_mosaic_vector_loss(const kvc_mosaic_strategy *s, int which, const float *x) {
    const kvc_xform *xf = s->xf;
    int d = xf->dim_in, dk = which ? xf->dim_v : xf->dim_k;
    float xt[KVC_PACKED_MAX_D];
    uint32_t bits[KVC_PACKED_MAX_D / 32];
    double e = 0.0, kept = 0.0;
    for (int c = 0; c < d; c++) e += (double)x[c] * x[c];
    if (e <= 0.0) return 0.0;
    kvc_rotation_apply(xf, which, x, 1, d, xt, dk);
    const kvc_packed_cfg *cfg = which ? &s->vcfg : &s->kcfg;
    if (s->dense)
        for (int c = 0; c < dk; c++) kept += (double)xt[c] * xt[c];
    else
        kept = kvc_packed_select(xt, dk, cfg->group, cfg->keep, bits);
    return 1.0 - kept / e;
}
