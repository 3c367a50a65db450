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

/* Layers cycled by default: 1 GiB of f16 K/V, so that what a selecting
 * method reads per sweep (a tenth of it, and a near buffer holding that
 * tenth, kv/near.h) is several times the CPU's last-level cache (32 MiB on
 * the machines of docs/benchmarks.md): a real decode step reads each of 30
 * layers' caches once. */
static int auto_layers(const kvc_bench_attn_params *p, int ctx) {
    if (p->n_layers > 0) return p->n_layers;
    double f16_layer = (double)ctx * p->n_kv_heads * p->head_dim * 2 * 2;
    int l = (int)ceil(1024.0 * 1024 * 1024 / f16_layer);
    return l < 1 ? 1 : l > 32 ? 32 : l;
}

enum { STEP_CAP = 100000 }; /* timed steps per method and context, at most */

/* One method at one context: its cache, queries and timed steps. The methods
 * of a context are timed in rounds, one sweep over the L layers each per
 * round, so that a slow minute of a shared machine falls on all of them
 * alike instead of on whichever method was running then. */
typedef struct bench_case {
    kvc_bench_attn_row *row;
    kvc_cache *c;
    float *q;
    double *t;     /* step times, [STEP_CAP] */
    double *sweep; /* per round: the sum of the sweep's L step times, [STEP_CAP / L + 1] */
    int n, n_sweeps, L;
    kvc_attend_times before;
    kvc_status st;
} bench_case;

static void case_open(const kvc_bench_attn_params *p, const dump_kv *d, kvc_pool *pool,
                      kvc_bench_attn_row *row, bench_case *bc, float *out) {
    int L = auto_layers(p, row->ctx);
    *bc = (bench_case){.row = row, .L = L};
    row->n_layers = L;
    kvc_cache_shape shape = {L, p->n_heads, p->n_kv_heads, p->head_dim, row->ctx + 1};
    bc->q = malloc(sizeof(float) * (size_t)L * p->n_heads * p->head_dim);
    bc->t = malloc(sizeof(double) * STEP_CAP);
    bc->sweep = malloc(sizeof(double) * (size_t)(STEP_CAP / L + 1));
    kvc_clear_error();
    kvc_status st = bc->q && bc->t && bc->sweep ? KVC_OK : kvc_fail(KVC_ERR_NOMEM, "bench attn: buffers");
    if (st == KVC_OK) st = kvc_cache_create(&shape, row->spec, pool, &bc->c);
    double t0 = kvc_now_s();
    for (int l = 0; st == KVC_OK && l < L; l++)
        st = fill_layer(bc->c, l, row->ctx, d, p->seed + (uint64_t)l);
    row->fill_s = kvc_now_s() - t0;
    if (st == KVC_OK) st = make_queries(p, d, L, bc->q);
    size_t qs = (size_t)p->n_heads * p->head_dim;
    for (int l = 0; st == KVC_OK && l < L; l++) st = kvc_cache_attend(bc->c, l, bc->q + l * qs, out); /* warm-up */
    if (st == KVC_OK) kvc_cache_attend_times(bc->c, &bc->before);
    bc->st = st;
    if (st != KVC_OK) snprintf(row->error, sizeof row->error, "%s", kvc_last_error());
}

/* Layer l's query for this round (params.drift): the fixed one, or it with
 * noise that depends only on the seed, the round, the layer and the element,
 * so every method is asked the same queries. */
static const float *round_query(const kvc_bench_attn_params *p, const bench_case *bc, int l, float *qd) {
    size_t qs = (size_t)p->n_heads * p->head_dim;
    const float *q = bc->q + l * qs;
    if (p->drift <= 0) return q;
    uint64_t r = (p->seed + 1) * 0x9e3779b97f4a7c15ull ^ ((uint64_t)bc->n_sweeps << 20) ^ (uint64_t)l;
    for (size_t i = 0; i < qs; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        float u = (float)(r >> 40) / (float)(1 << 24) - 0.5f;
        qd[i] = q[i] * (1.0f + (float)p->drift * u);
    }
    return qd;
}

/* One timed step per layer; the sweep's time goes to the round's slot. */
static void case_sweep(const kvc_bench_attn_params *p, bench_case *bc, float *out, float *qd) {
    double sum = 0.0;
    kvc_clear_error();
    for (int l = 0; bc->st == KVC_OK && l < bc->L; l++) {
        const float *q = round_query(p, bc, l, qd);
        double a = p->cpu_clock ? kvc_cpu_s() : kvc_now_s();
        bc->st = kvc_cache_attend(bc->c, l, q, out);
        double dt = (p->cpu_clock ? kvc_cpu_s() : kvc_now_s()) - a;
        bc->t[bc->n++] = dt;
        sum += dt;
    }
    if (bc->st == KVC_OK) bc->sweep[bc->n_sweeps++] = sum;
    else snprintf(bc->row->error, sizeof bc->row->error, "%s", kvc_last_error());
}

/* Quantile of sorted x[n] (nearest rank). */
static double quantile(const double *x, int n, double f) {
    int i = (int)(f * (n - 1) + 0.5);
    return x[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* The row's figures from the timed steps; frees the case. */
static void case_close(const kvc_bench_attn_params *p, bench_case *bc, const bench_case *first) {
    kvc_bench_attn_row *row = bc->row;
    int n = bc->n;
    if (bc->st == KVC_OK && n > 0) {
        kvc_attend_times after;
        kvc_cache_attend_times(bc->c, &after);
        const kvc_attend_times *b = &bc->before;
        row->score_s = (after.score_s - b->score_s) / n;
        row->topk_s = (after.topk_s - b->topk_s) / n;
        row->select_wall_s = (after.select_wall_s - b->select_wall_s) / n;
        uint64_t tu = after.topk_units - b->topk_units, tc = after.topk_calls - b->topk_calls;
        row->topk_cand_frac = tu ? (double)(after.topk_candidates - b->topk_candidates) / tu : NAN;
        row->topk_cont_frac = tc ? (double)(after.topk_continued - b->topk_continued) / tc : NAN;
        row->attn_s = (after.attn_s - b->attn_s) / n;
        qsort(bc->t, (size_t)n, sizeof(double), cmp_d);
        row->reps = n;
        row->best_s = bc->t[0];
        row->median_s = bc->t[n / 2];
        kvc_cache_stats_get(bc->c, &row->stats);
        /* bytes read per step: the bytes in use (encoded chunks and the live
         * tokens of the hot window; kvmix's recent-context window holds 10-20%
         * of the tokens; spare capacity is not read) of one layer */
        row->held_bytes = (double)row->stats.in_use_bytes / bc->L;
        row->gbps = row->held_bytes / row->median_s / 1e9;
        row->frac_bw = p->bw_gbps > 0 ? row->gbps / p->bw_gbps : NAN;
        row->rounds = bc->n_sweeps;
        row->paired_ratio = row->paired_p25 = row->paired_p75 = NAN;
        if (first->st == KVC_OK && first->n_sweeps == bc->n_sweeps) {
            /* the first case's sweeps are still in round order: it closes last */
            for (int r = 0; r < bc->n_sweeps; r++) bc->sweep[r] /= first->sweep[r];
            qsort(bc->sweep, (size_t)bc->n_sweeps, sizeof(double), cmp_d);
            row->paired_ratio = quantile(bc->sweep, bc->n_sweeps, 0.5);
            row->paired_p25 = quantile(bc->sweep, bc->n_sweeps, 0.25);
            row->paired_p75 = quantile(bc->sweep, bc->n_sweeps, 0.75);
        }
    } else if (bc->st == KVC_OK) {
        bc->st = kvc_fail(KVC_ERR_ARG, "bench attn: no timed steps");
        snprintf(row->error, sizeof row->error, "%s", kvc_last_error());
    }
    row->status = bc->st;
    kvc_cache_free(bc->c);
    free(bc->q);
    free(bc->t);
    free(bc->sweep);
}

/* Every method at one context: open all, time them in rounds (the order
 * reversed every other round), close all. */
static void run_ctx(const kvc_bench_attn_params *p, int n_specs, const dump_kv *d, kvc_pool *pool,
                    kvc_bench_attn_row *rows, bench_case *cases) {
    float *out = malloc(sizeof(float) * (size_t)p->n_heads * p->head_dim);
    float *qd = malloc(sizeof(float) * (size_t)p->n_heads * p->head_dim);
    if (!out || !qd) {
        free(out);
        free(qd);
        kvc_fail(KVC_ERR_NOMEM, "bench attn: output of %d floats", p->n_heads * p->head_dim);
        for (int k = 0; k < n_specs; k++) {
            rows[k].status = KVC_ERR_NOMEM;
            rows[k].ratio = NAN;
            snprintf(rows[k].error, sizeof rows[k].error, "%s", kvc_last_error());
        }
        return;
    }
    int open = 0;
    for (int k = 0; k < n_specs; k++) {
        case_open(p, d, pool, &rows[k], &cases[k], out);
        open += cases[k].st == KVC_OK;
    }
    int L = cases[0].L, min_steps = (p->min_reps > 0 ? p->min_reps : 5) * L;
    double min_s = (p->min_seconds > 0 ? p->min_seconds : 0.5) * (open > 0 ? open : 1);
    double start = kvc_now_s();
    for (int round = 0; open > 0; round++) {
        int below = 0, full = 0, ran = 0;
        for (int i = 0; i < n_specs; i++) {
            bench_case *bc = &cases[round % 2 ? n_specs - 1 - i : i];
            if (bc->st != KVC_OK) continue;
            case_sweep(p, bc, out, qd);
            ran++;
            below |= bc->n < min_steps;
            full |= bc->n + L > STEP_CAP;
        }
        if (!ran || full || (!below && kvc_now_s() - start >= min_s)) break;
    }
    free(out);
    free(qd);
    for (int k = n_specs - 1; k >= 0; k--) case_close(p, &cases[k], &cases[0]);
    for (int k = 0; k < n_specs; k++)
        rows[k].ratio = rows[0].status == KVC_OK && rows[k].status == KVC_OK
                            ? rows[k].median_s / rows[0].median_s
                            : NAN;
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
    bench_case *cases = st == KVC_OK ? calloc((size_t)n_specs, sizeof *cases) : NULL;
    if (st == KVC_OK && !cases) st = kvc_fail(KVC_ERR_NOMEM, "bench attn: %d methods", n_specs);
    kvc_progress prog;
    kvc_progress_begin(&prog, "bench attn", p.n_ctxs);
    for (int i = 0; st == KVC_OK && i < p.n_ctxs; i++) {
        kvc_bench_attn_row *row = &rows[i * n_specs];
        for (int k = 0; k < n_specs; k++) {
            memset(&row[k], 0, sizeof row[k]);
            row[k].ctx = p.ctxs[i];
            row[k].spec = specs[k];
        }
        run_ctx(&p, n_specs, dp, pool, row, cases);
        kvc_progress_update(&prog, i + 1);
    }
    kvc_progress_end(&prog);
    free(cases);
    kvc_pool_free(pool);
    free(d.k);
    free(d.v);
    return st;
}
