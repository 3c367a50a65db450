/* Decode-attention benchmark of one layer at up to 1M tokens (see
 * include/kvcomp/bench_attn.h). Uses the cache's internal interface (kv/cache.h) directly:
 * no model, only the cache, its driver and kernels. */
#include "kvcomp/bench_attn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcomp/progress.h"
#include "base/blas.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "kvcomp/kvdump.h"
#include "kvcomp/report.h"
#include "kv/attend.h"
#include "kv/cache.h"
#include "kv/synth.h"

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct dump_kv {
    float *k, *v; /* [n][n_kv][dim] */
    int64_t n;
} dump_kv;

/* Fills a layer with ctx tokens: synthetic, or the dump's tokens repeated. */
static kvc_status fill_layer(kvc_cache *c, int layer, int ctx, const dump_kv *d, uint64_t seed) {
    if (!d) return kvc_cache_load_random(c, layer, ctx, seed);
    for (int64_t t = 0; t < ctx; t += d->n) {
        int64_t n = ctx - t < d->n ? ctx - t : d->n;
        KVC_TRY(kvc_cache_load(c, layer, n, d->k, d->v));
    }
    return KVC_OK;
}

/* Queries [n_layers][n_heads][dim]: each head's query is a key of its group
 * (from the synthetic sequence past the cached tokens, or a random dump
 * token) plus noise, so scores are as peaked as real ones. */
static kvc_status make_queries(const kvc_bench_attn_params *p, const dump_kv *d, int n_layers,
                               float *q) {
    int G = p->n_heads / p->n_kv_heads, dim = p->head_dim;
    size_t row = (size_t)p->n_kv_heads * dim;
    float *k = malloc(sizeof(float) * row);
    if (!k) return kvc_fail(KVC_ERR_NOMEM, "bench attn: query scratch of %zu floats", row);
    uint64_t r = p->seed * 0x9e3779b97f4a7c15ull + 12345;
    for (int l = 0; l < n_layers; l++) {
        for (int h = 0; h < p->n_heads; h++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            const float *src;
            if (d) {
                src = d->k + (size_t)(r % (uint64_t)d->n) * row;
            } else {
                kvc_synth_kv(p->n_kv_heads, dim, (int64_t)(1u << 30) + l * 64 + h, 1, p->seed, k,
                             NULL);
                src = k;
            }
            const float *kh = src + (size_t)(h / G) * dim;
            for (int j = 0; j < dim; j++) {
                r ^= r << 13, r ^= r >> 7, r ^= r << 17;
                float noise = ((float)(r >> 40) / (float)(1 << 24) - 0.5f) * 0.5f;
                q[((size_t)l * p->n_heads + h) * dim + j] = kh[j] * (1.0f + noise);
            }
        }
    }
    free(k);
    return KVC_OK;
}

static int auto_layers(const kvc_bench_attn_params *p, int ctx) {
    if (p->n_layers > 0) return p->n_layers;
    double f16_layer = (double)ctx * p->n_kv_heads * p->head_dim * 2 * 2;
    int l = (int)ceil(256.0 * 1024 * 1024 / f16_layer);
    return l < 1 ? 1 : l > 32 ? 32 : l;
}

static void run_one(const kvc_bench_attn_params *p, const char *spec, int ctx, const dump_kv *d,
                    kvc_pool *pool, kvc_bench_attn_row *row) {
    int L = auto_layers(p, ctx);
    row->n_layers = L;
    kvc_cache_shape shape = {L, p->n_heads, p->n_kv_heads, p->head_dim, ctx + 1};
    kvc_cache *c = NULL;
    float *q = malloc(sizeof(float) * (size_t)L * p->n_heads * p->head_dim);
    float *out = malloc(sizeof(float) * (size_t)p->n_heads * p->head_dim);
    int min_reps = p->min_reps > 0 ? p->min_reps : 5;
    double min_s = p->min_seconds > 0 ? p->min_seconds : 0.5;
    int cap = 100000;
    double *t = malloc(sizeof(double) * (size_t)cap);
    kvc_clear_error();
    kvc_status st = q && out && t ? KVC_OK : kvc_fail(KVC_ERR_NOMEM, "bench attn: buffers");
    if (st == KVC_OK) st = kvc_cache_create(&shape, spec, pool, &c);
    double t0 = kvc_now_s();
    for (int l = 0; st == KVC_OK && l < L; l++)
        st = fill_layer(c, l, ctx, d, p->seed + (uint64_t)l);
    row->fill_s = kvc_now_s() - t0;
    if (st == KVC_OK) st = make_queries(p, d, L, q);
    if (st == KVC_OK) {
        size_t qs = (size_t)p->n_heads * p->head_dim;
        for (int l = 0; st == KVC_OK && l < L; l++) st = kvc_cache_attend(c, l, q + l * qs, out);
        int n = 0;
        kvc_attend_times t_before, t_after;
        kvc_cache_attend_times(c, &t_before);
        double start = kvc_now_s();
        while (st == KVC_OK && n < cap && (n < min_reps * L || kvc_now_s() - start < min_s)) {
            for (int l = 0; st == KVC_OK && l < L && n < cap; l++) {
                double a = p->cpu_clock ? kvc_cpu_s() : kvc_now_s();
                st = kvc_cache_attend(c, l, q + l * qs, out);
                t[n++] = (p->cpu_clock ? kvc_cpu_s() : kvc_now_s()) - a;
            }
        }
        kvc_cache_attend_times(c, &t_after);
        if (st == KVC_OK) {
            row->score_s = (t_after.score_s - t_before.score_s) / n;
            row->topk_s = (t_after.topk_s - t_before.topk_s) / n;
            row->select_wall_s = (t_after.select_wall_s - t_before.select_wall_s) / n;
            uint64_t tu = t_after.topk_units - t_before.topk_units, tc = t_after.topk_calls - t_before.topk_calls;
            row->topk_cand_frac = tu ? (double)(t_after.topk_candidates - t_before.topk_candidates) / tu : NAN;
            row->topk_cont_frac = tc ? (double)(t_after.topk_continued - t_before.topk_continued) / tc : NAN;
            row->attn_s = (t_after.attn_s - t_before.attn_s) / n;
            qsort(t, (size_t)n, sizeof(double), cmp_d);
            row->reps = n;
            row->best_s = t[0];
            row->median_s = t[n / 2];
            kvc_cache_stats_get(c, &row->stats);
            /* bytes read per step: the bytes in use (encoded chunks and the live
             * tokens of the hot window; kvmix's recent-context window holds 10-20%
             * of the tokens; spare capacity is not read) of one layer */
            row->held_bytes = (double)row->stats.in_use_bytes / L;
            row->gbps = row->held_bytes / row->median_s / 1e9;
            row->frac_bw = p->bw_gbps > 0 ? row->gbps / p->bw_gbps : NAN;
        }
    }
    row->status = st;
    if (st != KVC_OK) snprintf(row->error, sizeof row->error, "%s", kvc_last_error());
    kvc_cache_free(c);
    free(q);
    free(out);
    free(t);
}

kvc_status kvc_bench_attn_run(const kvc_bench_attn_params *pin, char *const *specs, int n_specs,
                              kvc_bench_attn_row *rows) {
    kvc_bench_attn_params p = *pin;
    KVC_CHECK(p.n_ctxs >= 1 && n_specs >= 1, KVC_ERR_ARG, "bench attn: no contexts or methods");
    dump_kv d = {0}, *dp = NULL;
    if (p.dump) {
        kvc_kvdump_header h;
        KVC_TRY(kvc_kvdump_read_header(p.dump, &h));
        int layer = p.dump_layer >= 0 ? p.dump_layer : (int)h.n_layers / 2;
        KVC_TRY(kvc_kvdump_load_layer(p.dump, layer, &h, &d.k, &d.v));
        d.n = h.n_tokens;
        dp = &d;
        p.n_heads = (int)h.n_heads;
        p.n_kv_heads = (int)h.n_kv_heads;
        p.head_dim = (int)h.head_dim;
        p.dump_layer = layer;
    }
    kvc_status st = KVC_OK;
    if (p.n_heads <= 0 || p.n_kv_heads <= 0 || p.head_dim <= 0 || p.n_heads % p.n_kv_heads)
        st = kvc_fail(KVC_ERR_ARG, "bench attn: %d heads, %d kv heads, head dim %d", p.n_heads,
                      p.n_kv_heads, p.head_dim);
    for (int i = 0; st == KVC_OK && i < p.n_ctxs; i++)
        if (p.ctxs[i] < 1 || p.ctxs[i] > (1 << 24))
            st = kvc_fail(KVC_ERR_ARG, "bench attn: --ctx %d outside [1, 16777216]", p.ctxs[i]);
    kvc_pool *pool = NULL;
    /* as in inference (model/llama.c): the pool owns the threads, the cache's
     * BLAS calls (MosaicKV's rotations, eigensolver) run single-threaded
     * instead of leaving OpenBLAS threads spinning beside the timed steps */
    kvc_blas_set_threads(1);
    if (st == KVC_OK) st = kvc_pool_create(p.n_threads, &pool);
    kvc_progress prog;
    kvc_progress_begin(&prog, "bench attn", (int64_t)p.n_ctxs * n_specs);
    for (int i = 0; st == KVC_OK && i < p.n_ctxs; i++) {
        for (int k = 0; k < n_specs; k++) {
            kvc_bench_attn_row *row = &rows[i * n_specs + k];
            memset(row, 0, sizeof *row);
            row->ctx = p.ctxs[i];
            row->spec = specs[k];
            run_one(&p, specs[k], p.ctxs[i], dp, pool, row);
            const kvc_bench_attn_row *first = &rows[i * n_specs];
            row->ratio = first->status == KVC_OK && row->status == KVC_OK
                             ? row->median_s / first->median_s
                             : NAN;
            kvc_progress_update(&prog, (int64_t)i * n_specs + k + 1);
        }
    }
    kvc_progress_end(&prog);
    kvc_pool_free(pool);
    free(d.k);
    free(d.v);
    return st;
}
