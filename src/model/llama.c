/* The Llama-family forward pass (llama2.c style): embedding, then per block
 * RMSNorm -> Q/K/V projections (+ qwen2 biases) -> RoPE -> attention through
 * the KV cache (kvc_cache_prefill / append / attend, never a branch on the
 * method) -> output projection -> residual; RMSNorm -> SwiGLU FFN -> residual;
 * final RMSNorm and the output projection to logits.
 *
 * Decode multiplies by the quantised weights directly (kvc_matvec). Prefill
 * chunks go through kvc_matmul (quantised weights, SIMD kernels) or OpenBLAS
 * sgemm (float weights, or KVC_ISA=scalar): each thread of the pool
 * dequantises a tile of weight rows to f32 and multiplies the whole chunk of
 * activations by it (single-threaded BLAS per tile, so BLAS threads never
 * compete with the pool's).
 *
 * RoPE: GGUF files of the llama architecture store Q/K rows permuted so that
 * rotation pairs are adjacent, (x[2i], x[2i+1]) ("normal" rope in llama.cpp);
 * qwen2 rotates halves (x[i], x[i + rope_dim/2]) ("neox"). The angle of pair i
 * at position p is p * base^(-2i/rope_dim) (divided by rope_freqs[i] when the
 * file has that tensor). */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/blas.h"
#include "kvcomp/progress.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "kv/cache.h"
#include "model/model.h"
#include "model/wtype.h"


/* Prefill tiles: at most TILE_ROWS weight rows (256 x 1536 f32 = 1.5 MiB per
 * thread), at least one tile per thread. Measured on the default model, 2048
 * prompt tokens, one thread: 32 rows 6.6 s, 64 6.3 s, 128 6.3 s, 256 6.1 s,
 * whole matrices 6.4 s of CPU time (larger tiles re-pack the activations less). */
enum { TILE_ROWS = 256, GEMM_MIN_BATCH = 3 };

/* ---- run state ------------------------------------------------------------ */

void kvc_run_free(kvc_run *r) {
    if (!r) return;
    free(r->x);
    free(r->xb);
    free(r->q);
    free(r->k);
    free(r->v);
    free(r->att);
    free(r->xb2);
    free(r->hb);
    free(r->hb2);
    free(r->inv_freq);
    free(r->rope_cs);
    free(r->tiles);
    free(r);
}

static float *alloc_f(size_t n) { return malloc((n ? n : 1) * sizeof(float)); }

kvc_status kvc_run_create(const kvc_model *m, int max_batch, int n_threads, kvc_run **out) {
    *out = NULL;
    const kvc_config *c = &m->cfg;
    KVC_CHECK(max_batch >= 1 && max_batch <= (1 << 16), KVC_ERR_ARG,
              "batch size %d outside [1, 65536]", max_batch);
    kvc_run *r = calloc(1, sizeof *r);
    KVC_CHECK(r != NULL, KVC_ERR_NOMEM, "cannot allocate the run state");
    size_t b = (size_t)max_batch, qd = (size_t)c->n_heads * c->head_dim;
    size_t kvd = (size_t)c->n_kv_heads * c->head_dim;
    r->max_batch = max_batch;
    r->x = alloc_f(b * c->dim);
    r->xb = alloc_f(b * c->dim);
    r->xb2 = alloc_f(b * c->dim);
    r->q = alloc_f(b * qd);
    r->k = alloc_f(b * kvd);
    r->v = alloc_f(b * kvd);
    r->att = alloc_f(b * qd);
    r->hb = alloc_f(b * c->ffn_dim);
    r->hb2 = alloc_f(b * c->ffn_dim);
    r->inv_freq = alloc_f((size_t)c->rope_dim / 2);
    r->rope_cs = alloc_f(b * (size_t)c->rope_dim);
    size_t max_cols = (size_t)c->dim;
    if ((size_t)c->ffn_dim > max_cols) max_cols = (size_t)c->ffn_dim;
    if (qd > max_cols) max_cols = qd;
    r->tile_rows = TILE_ROWS;
    r->n_tiles_threads = n_threads < 1 ? 1 : n_threads;
    r->tile_stride = (size_t)r->tile_rows * max_cols;
    r->tiles = max_batch >= GEMM_MIN_BATCH ? alloc_f(r->tile_stride * r->n_tiles_threads) : NULL;
    if (!r->x || !r->xb || !r->xb2 || !r->q || !r->k || !r->v || !r->att || !r->hb || !r->hb2 ||
        !r->inv_freq || !r->rope_cs || (max_batch >= GEMM_MIN_BATCH && !r->tiles)) {
        kvc_run_free(r);
        return kvc_fail(KVC_ERR_NOMEM, "cannot allocate run state for batch %d", max_batch);
    }
    for (int i = 0; i < c->rope_dim / 2; i++) {
        double f = pow((double)c->rope_base, -2.0 * i / c->rope_dim);
        if (m->w.rope_freqs) f /= m->w.rope_freqs[i];
        r->inv_freq[i] = (float)f;
    }
    kvc_blas_set_threads(1); /* the pool owns the threads; BLAS runs per tile */
    *out = r;
    return KVC_OK;
}

/* ---- blocks --------------------------------------------------------------- */

/* o = x / rms(x) * w over n elements */
static void rmsnorm(float *o, const float *x, const float *w, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float s = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) o[i] = x[i] * s * w[i];
}

static void add_into(float *x, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

/* cs[i] = (cos, sin) of pair i's angle at position pos. */
static void rope_angles(const kvc_config *c, const float *inv_freq, int pos, float *cs) {
    for (int i = 0; i < c->rope_dim / 2; i++) {
        double a = (double)pos * inv_freq[i];
        cs[2 * i] = (float)cos(a);
        cs[2 * i + 1] = (float)sin(a);
    }
}

/* Rotates n_heads heads of vec [n_heads][head_dim] by the angles cs. */
static void rope(const kvc_config *c, const float *cs, float *vec, int n_heads) {
    const int half = c->rope_dim / 2, neox = c->rope_layout == KVC_ROPE_NEOX;
    for (int h = 0; h < n_heads; h++) {
        float *x = vec + (size_t)h * c->head_dim;
        for (int i = 0; i < half; i++) {
            int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
            float a = x[i0], b = x[i1], co = cs[2 * i], si = cs[2 * i + 1];
            x[i0] = a * co - b * si;
            x[i1] = a * si + b * co;
        }
    }
}

/* h = silu(h) * u */
static void swiglu(float *h, const float *u, size_t n) {
    for (size_t i = 0; i < n; i++) h[i] = h[i] / (1.0f + expf(-h[i])) * u[i];
}

static kvc_status embed(const kvc_model *m, int32_t token, float *x) {
    const kvc_wmat *e = &m->w.tok_embd;
    KVC_CHECK(token >= 0 && token < e->rows, KVC_ERR_ARG, "token id %d outside [0, %lld)", token,
              (long long)e->rows);
    kvc_wtype_get(e->type)->dequant((const char *)e->data + (size_t)token * e->row_bytes, x,
                                    e->cols);
    return KVC_OK;
}

/* ---- weight products ------------------------------------------------------ */

typedef struct gemm_job {
    const kvc_wmat *w;
    const float *x; /* [n][cols] */
    float *y;       /* [n][ldy], columns [0, rows) written */
    int n, ldy;
    int64_t tile_rows;
    float *tiles;
    size_t tile_stride;
} gemm_job;

static void gemm_task(void *ctx, int task, int thread) {
    gemm_job *j = ctx;
    const kvc_wmat *w = j->w;
    int64_t r0 = (int64_t)task * j->tile_rows;
    int64_t nr = w->rows - r0 < j->tile_rows ? w->rows - r0 : j->tile_rows;
    float *t = j->tiles + (size_t)thread * j->tile_stride;
    kvc_dequant_rows(w->type, w->data, r0, nr, w->cols, t);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->n, (int)nr, (int)w->cols, 1.0f, j->x,
                (int)w->cols, t, (int)w->cols, 0.0f, j->y + r0, j->ldy);
}

/* One weight product of a block: y[i][0..w->rows) = W x[i], y rows ldy apart. */
typedef struct wprod {
    const kvc_wmat *w;
    float *y;
    int ldy;
} wprod;

/* Quantised weights with a batch kernel (dot_batch) take kvc_matmul (int8
 * activations and integer dot products as in llama.cpp, each weight row
 * unpacked once for the whole chunk: 1.5-3x the dequantise + sgemm path,
 * docs/benchmarks.md "Prefill-style products"); float weights, types without
 * one (a dot per token and row is slower than sgemm: q5_0 under AVX2 35 against
 * 88 GOP/s), and every type under KVC_ISA=scalar take dequantised tiles and
 * OpenBLAS sgemm. */
static int use_int_matmul(const kvc_wmat *w) {
    const kvc_wtype *t = kvc_wtype_get(w->type);
    return t && t->block > 1 && t->dot_batch;
}

static void gemm_tiles(kvc_run *r, kvc_pool *pool, const wprod *p, const float *x, int n) {
    const kvc_wmat *w = p->w;
    /* a multiple of the thread count of tasks, each of at most tile_rows rows */
    int64_t nt = kvc_pool_threads(pool), tasks = (w->rows + r->tile_rows - 1) / r->tile_rows;
    tasks = (tasks + nt - 1) / nt * nt;
    int64_t rows = ((w->rows + tasks - 1) / tasks + 15) / 16 * 16;
    if (rows > r->tile_rows) rows = r->tile_rows;
    gemm_job j = {w, x, p->y, n, p->ldy, rows, r->tiles, r->tile_stride};
    int n_tasks = (int)((w->rows + rows - 1) / rows);
    kvc_pool_run(pool, n_tasks, gemm_task, &j);
}

/* The products in ps[0..n_ps) share the input x [n][cols]. A few tokens go
 * through the quantised matvec (all products in one pool dispatch); a chunk
 * through kvc_matmul or sgemm (see use_int_matmul). */
static kvc_status matmul(kvc_run *r, kvc_pool *pool, const wprod *ps, int n_ps, const float *x, int n) {
    double t0 = kvc_now_s();
    const int64_t cols = ps[0].w->cols;
    kvc_status st = KVC_OK;
    if (n < GEMM_MIN_BATCH || !r->tiles) {
        kvc_matvec_op ops[4];
        for (int i = 0; i < n; i++) {
            for (int p = 0; p < n_ps; p++)
                ops[p] = (kvc_matvec_op){ps[p].w->type, ps[p].w->data, ps[p].w->rows,
                                         ps[p].y + (size_t)i * ps[p].ldy};
            kvc_matvec_multi(pool, ops, n_ps, cols, x + (size_t)i * cols);
        }
    } else {
        kvc_matmul_op ops[4];
        int n_int = 0;
        for (int p = 0; p < n_ps; p++) {
            if (use_int_matmul(ps[p].w))
                ops[n_int++] = (kvc_matmul_op){ps[p].w->type, ps[p].w->data, ps[p].w->rows, ps[p].y, ps[p].ldy};
            else
                gemm_tiles(r, pool, &ps[p], x, n);
        }
        if (n_int) st = kvc_matmul(pool, ops, n_int, cols, x, cols, n);
    }
    r->t.weights_s += kvc_now_s() - t0;
    return st;
}

/* ---- forward -------------------------------------------------------------- */

kvc_status kvc_forward_batch(const kvc_model *m, kvc_run *r, kvc_cache *cache, kvc_pool *pool,
                             const int32_t *tokens, int n, int pos, float *logits,
                             int all_logits) {
    const kvc_config *c = &m->cfg;
    const int dim = c->dim, ffn = c->ffn_dim;
    const int qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    KVC_CHECK(n >= 1 && n <= r->max_batch, KVC_ERR_ARG, "batch of %d tokens outside [1, %d]", n,
              r->max_batch);

    kvc_cache_observe_tokens(cache, tokens, n); /* methods that read the text (sentkv) */
    for (int i = 0; i < n; i++) {
        KVC_TRY(embed(m, tokens[i], r->x + (size_t)i * dim));
        rope_angles(c, r->inv_freq, pos + i, r->rope_cs + (size_t)i * c->rope_dim);
    }

    for (int l = 0; l < c->n_layers; l++) {
        const kvc_layer *L = &m->w.layers[l];

        /* attention block */
        for (int i = 0; i < n; i++)
            rmsnorm(r->xb + (size_t)i * dim, r->x + (size_t)i * dim, L->attn_norm, dim,
                    c->norm_eps);
        wprod qkv[3] = {{&L->wq, r->q, qd}, {&L->wk, r->k, kvd}, {&L->wv, r->v, kvd}};
        KVC_TRY(matmul(r, pool, qkv, 3, r->xb, n));
        for (int i = 0; i < n; i++) {
            float *q = r->q + (size_t)i * qd, *k = r->k + (size_t)i * kvd;
            if (L->bq) add_into(q, L->bq, qd);
            if (L->bk) add_into(k, L->bk, kvd);
            if (L->bv) add_into(r->v + (size_t)i * kvd, L->bv, kvd);
            rope(c, r->rope_cs + (size_t)i * c->rope_dim, q, c->n_heads);
            rope(c, r->rope_cs + (size_t)i * c->rope_dim, k, c->n_kv_heads);
        }
        if (r->kv_obs) r->kv_obs(r->kv_obs_user, l, pos, n, r->k, r->v);
        double t0 = kvc_now_s();
        if (n == 1) {
            KVC_TRY(kvc_cache_append(cache, l, r->k, r->v));
            double t1 = kvc_now_s();
            r->t.cache_s += t1 - t0;
            KVC_TRY(kvc_cache_attend(cache, l, r->q, r->att));
            r->t.attention_s += kvc_now_s() - t1;
        } else {
            KVC_TRY(kvc_cache_prefill(cache, l, n, r->q, r->k, r->v, r->att));
            r->t.attention_s += kvc_now_s() - t0;
        }
        wprod o = {&L->wo, r->xb2, dim};
        KVC_TRY(matmul(r, pool, &o, 1, r->att, n));
        add_into(r->x, r->xb2, (size_t)n * dim);

        /* feed-forward block */
        for (int i = 0; i < n; i++)
            rmsnorm(r->xb + (size_t)i * dim, r->x + (size_t)i * dim, L->ffn_norm, dim,
                    c->norm_eps);
        wprod gate_up[2] = {{&L->w_gate, r->hb, ffn}, {&L->w_up, r->hb2, ffn}};
        KVC_TRY(matmul(r, pool, gate_up, 2, r->xb, n));
        swiglu(r->hb, r->hb2, (size_t)n * ffn);
        wprod down = {&L->w_down, r->xb2, dim};
        KVC_TRY(matmul(r, pool, &down, 1, r->hb, n));
        add_into(r->x, r->xb2, (size_t)n * dim);
    }

    if (!logits) return KVC_OK;
    int first = all_logits ? 0 : n - 1;
    for (int i = first; i < n; i++)
        rmsnorm(r->xb + (size_t)i * dim, r->x + (size_t)i * dim, m->w.out_norm, dim, c->norm_eps);
    wprod out = {&m->w.output, logits, c->n_vocab};
    KVC_TRY(matmul(r, pool, &out, 1, r->xb + (size_t)first * dim, n - first));
    return KVC_OK;
}

kvc_status kvc_forward_token(const kvc_model *m, kvc_run *r, kvc_cache *cache, kvc_pool *pool,
                             int32_t token, int pos, float *logits) {
    return kvc_forward_batch(m, r, cache, pool, &token, 1, pos, logits, 0);
}
