/* Batched quantised matrix products for prefill chunks: m activations through
 * the same weights, in the weights' own format. As in llama.cpp's CPU matmul
 * the activations are quantised (once each, in the type's activation format)
 * and the kernels take integer dot products; a type's dot_batch kernel unpacks
 * each weight row once for all m tokens, which is what makes this faster than
 * m matvecs. Rows are shared out over the pool in tiles, every tile computing
 * all tokens; columns go in pieces of at most MAX_PIECE as in matvec.c, so
 * every (token, row) result is bit-identical to kvc_matvec's. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "base/threadpool.h"
#include "model/wt_kernels.h"

enum { MAX_PIECE = 16384, MAX_OPS = 8 };

typedef struct mm_job {
    const kvc_matmul_op *ops;
    const kvc_wtype *wt[MAX_OPS];
    size_t row_bytes[MAX_OPS];
    size_t col_offset[MAX_OPS];
    const uint8_t *acts[MAX_OPS]; /* activation 0 of op o; activation i at + i*act_stride */
    size_t act_stride[MAX_OPS];
    int first_task[MAX_OPS + 1];
    int64_t chunk; /* rows per task */
    int64_t n, m;  /* columns of this piece, tokens */
    float *tmp;    /* pieces after the first: per thread chunk*m partial sums */
    int accumulate;
} mm_job;

static void mm_task(void *ctx, int task, int thread) {
    const mm_job *j = ctx;
    int o = 0;
    while (task >= j->first_task[o + 1])
        o++;
    const kvc_matmul_op *op = &j->ops[o];
    const kvc_wtype *t = j->wt[o];
    const int64_t r0 = (int64_t)(task - j->first_task[o]) * j->chunk;
    const int64_t nr = op->rows - r0 < j->chunk ? op->rows - r0 : j->chunk;
    const size_t rb = j->row_bytes[o];
    const uint8_t *w = (const uint8_t *)op->w + (size_t)r0 * rb + j->col_offset[o];
    /* results go straight to y, or to a partial-sum tile (ld = nr) that is added after */
    float *dst = j->accumulate ? j->tmp + (size_t)thread * j->chunk * j->m : op->y + r0;
    const int64_t ld = j->accumulate ? nr : op->ldy;
    if (t->dot_batch) {
        t->dot_batch(w, rb, nr, j->acts[o], j->act_stride[o], j->m, j->n, dst, ld);
    } else {
        for (int64_t i = 0; i < j->m; i++) {
            const void *a = j->acts[o] + (size_t)i * j->act_stride[o];
            if (t->dot_rows)
                t->dot_rows(w, rb, nr, a, j->n, dst + i * ld);
            else
                for (int64_t r = 0; r < nr; r++)
                    dst[i * ld + r] = t->dot(w + (size_t)r * rb, a, j->n);
        }
    }
    if (j->accumulate)
        for (int64_t i = 0; i < j->m; i++)
            for (int64_t r = 0; r < nr; r++)
                op->y[i * op->ldy + r0 + r] += dst[i * ld + r];
}

typedef struct prep_job {
    kvc_act_fn fn;
    const float *x;
    int64_t ldx, n;
    uint8_t *buf;
    size_t stride;
} prep_job;

static void prep_task(void *ctx, int task, int thread) {
    (void)thread;
    const prep_job *p = ctx;
    p->fn(p->x + (size_t)task * p->ldx, p->buf + (size_t)task * p->stride, p->n);
}

/* Rows per task: about 8 tasks per thread, 4..64 rows, a multiple of 4. */
static int64_t rows_per_task(int64_t total_rows, int threads) {
    int64_t c = (total_rows + threads * 8 - 1) / (threads * 8);
    c = c < 4 ? 4 : c > 64 ? 64 : c;
    return (c + 3) & ~(int64_t)3;
}

static kvc_status matmul_ops(struct kvc_pool *pool, const kvc_matmul_op *ops, int n_ops, int64_t n,
                             const float *x, int64_t ldx, int64_t m) {
    kvc_wt_init();
    mm_job j = {.ops = ops, .m = m};
    int64_t total_rows = 0;
    for (int o = 0; o < n_ops; o++) {
        j.wt[o] = kvc_wtype_get(ops[o].type);
        j.row_bytes[o] = kvc_wtype_row_bytes(ops[o].type, n);
        KVC_CHECK(j.wt[o] && j.wt[o]->supported && j.row_bytes[o], KVC_ERR_ARG,
                  "matmul: weight type %u with rows of %lld elements", ops[o].type, (long long)n);
        total_rows += ops[o].rows;
    }
    const int threads = kvc_pool_threads(pool);
    j.chunk = rows_per_task(total_rows, threads);
    j.first_task[0] = 0;
    for (int o = 0; o < n_ops; o++)
        j.first_task[o + 1] = j.first_task[o] + (int)((ops[o].rows + j.chunk - 1) / j.chunk);

    const int64_t piece = n < MAX_PIECE ? n : MAX_PIECE;
    const size_t s0 = kvc_act_bytes(KVC_ACT_Q8_0, piece), sk = kvc_act_bytes(KVC_ACT_Q8_K, piece);
    int need0 = 0, needk = 0;
    for (int o = 0; o < n_ops; o++)
        need0 |= j.wt[o]->act == KVC_ACT_Q8_0, needk |= j.wt[o]->act == KVC_ACT_Q8_K;
    uint8_t *buf0 = need0 ? malloc(s0 * (size_t)m) : NULL,
            *bufk = needk ? malloc(sk * (size_t)m) : NULL;
    float *tmp = n > MAX_PIECE ? malloc(sizeof(float) * (size_t)threads * j.chunk * m) : NULL;
    kvc_status st = KVC_OK;
    if ((need0 && !buf0) || (needk && !bufk) || (n > MAX_PIECE && !tmp)) {
        st = kvc_fail(KVC_ERR_NOMEM, "matmul: no memory for %lld activations of %lld elements",
                      (long long)m, (long long)n);
        goto done;
    }
    j.tmp = tmp;
    for (int64_t c0 = 0; c0 < n; c0 += MAX_PIECE) {
        j.n = n - c0 < MAX_PIECE ? n - c0 : MAX_PIECE;
        j.accumulate = c0 > 0;
        if (need0) {
            prep_job p = {kvc_act_q8_0_active, x + c0, ldx, j.n, buf0, s0};
            kvc_pool_run(pool, (int)m, prep_task, &p);
        }
        if (needk) {
            prep_job p = {kvc_act_q8_k_active, x + c0, ldx, j.n, bufk, sk};
            kvc_pool_run(pool, (int)m, prep_task, &p);
        }
        for (int o = 0; o < n_ops; o++) {
            const kvc_wtype *t = j.wt[o];
            j.col_offset[o] = (size_t)(c0 / t->block) * t->block_bytes;
            switch (t->act) {
            case KVC_ACT_F32:
                j.acts[o] = (const uint8_t *)(x + c0),
                j.act_stride[o] = (size_t)ldx * sizeof(float);
                break;
            case KVC_ACT_Q8_0:
                j.acts[o] = buf0, j.act_stride[o] = s0;
                break;
            case KVC_ACT_Q8_K:
                j.acts[o] = bufk, j.act_stride[o] = sk;
                break;
            }
        }
        kvc_pool_run(pool, j.first_task[n_ops], mm_task, &j);
    }
done:
    free(buf0), free(bufk), free(tmp);
    return st;
}

kvc_status kvc_matmul(struct kvc_pool *pool, const kvc_matmul_op *ops, int n_ops, int64_t n,
                      const float *x, int64_t ldx, int64_t m) {
    KVC_CHECK(m >= 0 && m <= 0x7fffffff && n >= 0, KVC_ERR_ARG,
              "matmul: %lld tokens of %lld elements", (long long)m, (long long)n);
    if (m == 0) return KVC_OK;
    for (int o = 0; o < n_ops; o += MAX_OPS)
        KVC_TRY(matmul_ops(pool, ops + o, n_ops - o < MAX_OPS ? n_ops - o : MAX_OPS, n, x, ldx, m));
    return KVC_OK;
}
