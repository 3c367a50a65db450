/* Quantised matrix-vector products for decode (y = W x, W row-major in its
 * GGUF weight type). As in llama.cpp, the activation is prepared once per
 * matvec in the format the weight type's dot kernel takes (int8 blocks for
 * the quantised types, so the kernels use integer dot products), then rows
 * are shared out over the thread pool in tasks of a few dozen rows.
 * kvc_matvec_multi runs several matrices over one activation in a single
 * dispatch (q, k, v; gate, up) to save pool round-trips and act preparation.
 * Columns are processed in pieces of at most MAX_PIECE elements (dot products
 * are sums over blocks), so the prepared activation always fits a fixed stack
 * buffer and matvec never allocates. */
#include <string.h>

#include "base/threadpool.h"
#include "model/wt_kernels.h"

enum {
    MAX_PIECE = 16384, /* multiple of every block size (256) */
    MAX_OPS = 8,
    ACT_BUF_BYTES = MAX_PIECE + MAX_PIECE / KVC_QK * 8 + 64, /* largest quantised layout */
};

typedef struct mv_job {
    const kvc_matvec_op *ops;
    int n_ops;
    const kvc_wtype *wt[MAX_OPS];
    size_t row_bytes[MAX_OPS];
    size_t col_offset[MAX_OPS]; /* bytes into each row where this piece starts */
    const void *act[MAX_OPS];
    int64_t chunk; /* rows per task */
    int first_task[MAX_OPS + 1];
    int64_t n;      /* columns in this piece */
    int accumulate; /* add to y instead of storing (pieces after the first) */
} mv_job;

static void mv_task(void *ctx, int task, int thread) {
    (void)thread;
    const mv_job *j = ctx;
    int o = 0;
    while (task >= j->first_task[o + 1])
        o++;
    const kvc_matvec_op *op = &j->ops[o];
    int64_t r0 = (int64_t)(task - j->first_task[o]) * j->chunk;
    int64_t nr = op->rows - r0 < j->chunk ? op->rows - r0 : j->chunk;
    const kvc_wtype *t = j->wt[o];
    const uint8_t *w = (const uint8_t *)op->w + (size_t)r0 * j->row_bytes[o] + j->col_offset[o];
    float tmp[256];
    float *y = op->y + r0;
    for (int64_t r = 0; r < nr; r += 256) {
        int64_t m = nr - r < 256 ? nr - r : 256;
        float *dst = j->accumulate ? tmp : y + r;
        const uint8_t *wr = w + (size_t)r * j->row_bytes[o];
        if (t->dot_rows) {
            t->dot_rows(wr, j->row_bytes[o], m, j->act[o], j->n, dst);
        } else { /* software prefetch about 4 KB ahead (see the SIMD dot_rows kernels) */
            const size_t rb = j->row_bytes[o], ahead = rb >= 4096 ? rb : (4096 / rb) * rb;
            for (int64_t i = 0; i < m; i++) {
                const uint8_t *row = wr + (size_t)i * rb;
                for (size_t b = 0; b < rb; b += 64)
                    __builtin_prefetch(row + ahead + b);
                dst[i] = t->dot(row, j->act[o], j->n);
            }
        }
        if (j->accumulate)
            for (int64_t i = 0; i < m; i++)
                y[r + i] += tmp[i];
    }
}

/* Rows per task: about 8 tasks per thread for load balance, 8..64 rows, a multiple of 4. */
static int64_t rows_per_task(int64_t total_rows, int threads) {
    int64_t c = (total_rows + threads * 8 - 1) / (threads * 8);
    c = c < 8 ? 8 : c > 64 ? 64 : c;
    return (c + 3) & ~(int64_t)3;
}

static void matvec_ops(struct kvc_pool *pool, const kvc_matvec_op *ops, int n_ops, int64_t n,
                       const float *x) {
    kvc_wt_init();
    mv_job j = {.ops = ops, .n_ops = n_ops};
    int64_t total_rows = 0;
    for (int o = 0; o < n_ops; o++) {
        j.wt[o] = kvc_wtype_get(ops[o].type);
        j.row_bytes[o] = kvc_wtype_row_bytes(ops[o].type, n);
        /* the loader checks types and shapes; a bad call is a programming error */
        if (!j.wt[o] || !j.wt[o]->supported || j.row_bytes[o] == 0) return;
        total_rows += ops[o].rows;
    }
    j.chunk = rows_per_task(total_rows, kvc_pool_threads(pool));
    j.first_task[0] = 0;
    for (int o = 0; o < n_ops; o++)
        j.first_task[o + 1] = j.first_task[o] + (int)((ops[o].rows + j.chunk - 1) / j.chunk);

    _Alignas(64) uint8_t buf_q8_0[ACT_BUF_BYTES], buf_q8_k[ACT_BUF_BYTES];
    for (int64_t c0 = 0; c0 < n; c0 += MAX_PIECE) {
        j.n = n - c0 < MAX_PIECE ? n - c0 : MAX_PIECE;
        j.accumulate = c0 > 0;
        int have_q8_0 = 0, have_q8_k = 0;
        for (int o = 0; o < n_ops; o++) {
            const kvc_wtype *t = j.wt[o];
            j.col_offset[o] = (size_t)(c0 / t->block) * t->block_bytes;
            switch (t->act) {
            case KVC_ACT_F32:
                j.act[o] = x + c0;
                break;
            case KVC_ACT_Q8_0:
                if (!have_q8_0) kvc_act_q8_0_active(x + c0, buf_q8_0, j.n), have_q8_0 = 1;
                j.act[o] = buf_q8_0;
                break;
            case KVC_ACT_Q8_K:
                if (!have_q8_k) kvc_act_q8_k_active(x + c0, buf_q8_k, j.n), have_q8_k = 1;
                j.act[o] = buf_q8_k;
                break;
            }
        }
        kvc_pool_run(pool, j.first_task[n_ops], mv_task, &j);
    }
}

void kvc_matvec_multi(struct kvc_pool *pool, const kvc_matvec_op *ops, int n_ops, int64_t n,
                      const float *x) {
    for (int o = 0; o < n_ops; o += MAX_OPS)
        matvec_ops(pool, ops + o, n_ops - o < MAX_OPS ? n_ops - o : MAX_OPS, n, x);
}

void kvc_matvec(struct kvc_pool *pool, uint32_t type, const void *w, int64_t rows, int64_t n,
                const float *x, float *y) {
    kvc_matvec_op op = {.type = type, .w = w, .rows = rows, .y = y};
    matvec_ops(pool, &op, 1, n, x);
}
