/* Read-bandwidth benchmark (see include/kvcomp/bench_bw.h). The summing loops are the only
 * code that needs an instruction set: the portable one is here, the AVX2 and
 * AVX-512 ones are kernels (src/kernels/<isa>/bw_sum_<isa>.c), picked by
 * kvc_active_isa(), so `bench bw` measures what the attention kernels could
 * reach with the same loads. */
#include "kvcomp/bench_bw.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvcomp/progress.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "eval/bw_kernels.h"

#define TASK_BYTES ((size_t)64 << 20)

typedef uint64_t v2u __attribute__((vector_size(16)));

uint64_t kvc_bw_sum_ref(const char *p, size_t n) {
    v2u a = {0}, b = {0}, c = {0}, d = {0};
    const v2u *v = (const v2u *)p;
    for (size_t i = 0; i < n / 16; i += 4) {
        a += v[i];
        b += v[i + 1];
        c += v[i + 2];
        d += v[i + 3];
    }
    a += b + c + d;
    return a[0] + a[1];
}

typedef struct bw_job {
    const char *buf;
    size_t bytes;
    kvc_bw_sum_fn *fn;
    uint64_t sums[256]; /* per thread, so the loads cannot be optimised away */
} bw_job;

static void bw_task(void *ctx, int task, int thread) {
    bw_job *j = ctx;
    size_t off = (size_t)task * TASK_BYTES;
    size_t n = j->bytes - off < TASK_BYTES ? j->bytes - off : TASK_BYTES;
    j->sums[thread & 255] += j->fn(j->buf + off, n);
}

static void fill_task(void *ctx, int task, int thread) {
    bw_job *j = ctx;
    size_t off = (size_t)task * TASK_BYTES;
    size_t n = j->bytes - off < TASK_BYTES ? j->bytes - off : TASK_BYTES;
    memset((char *)j->buf + off, (task * 37 + 1) & 0xff, n); /* touch every page first */
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

kvc_status kvc_bench_bw(size_t bytes, int runs, int n_threads, int cpu_clock,
                        kvc_bench_bw_result *out) {
    memset(out, 0, sizeof *out);
    if (bytes == 0) bytes = (size_t)1 << 30;
    if (runs <= 0) runs = 7;
    KVC_CHECK(runs <= 1000, KVC_ERR_ARG, "bench bw: %d runs, at most 1000", runs);
    bytes = (bytes + TASK_BYTES - 1) / TASK_BYTES * TASK_BYTES;
    kvc_pool *pool = NULL;
    KVC_TRY(kvc_pool_create(n_threads, &pool));
    bw_job *j = calloc(1, sizeof *j);
    char *buf = aligned_alloc(4096, bytes);
    double *t = malloc(sizeof(double) * (size_t)runs);
    if (!j || !buf || !t) {
        free(j);
        free(buf);
        free(t);
        kvc_pool_free(pool);
        return kvc_fail(KVC_ERR_NOMEM, "bench bw: cannot allocate %zu bytes", bytes);
    }
    kvc_isa isa = kvc_active_isa();
    j->fn = isa == KVC_ISA_AVX512 ? kvc_bw_sum_avx512
            : isa == KVC_ISA_AVX2 ? kvc_bw_sum_avx2
                                  : kvc_bw_sum_ref;
    j->buf = buf;
    j->bytes = bytes;
    int n_tasks = (int)(bytes / TASK_BYTES);
    kvc_pool_run(pool, n_tasks, fill_task, j);
    kvc_pool_run(pool, n_tasks, bw_task, j); /* warm-up */
    for (int r = 0; r < runs; r++) {
        double t0 = cpu_clock ? kvc_cpu_s() : kvc_now_s();
        kvc_pool_run(pool, n_tasks, bw_task, j);
        t[r] = (cpu_clock ? kvc_cpu_s() : kvc_now_s()) - t0;
    }
    qsort(t, (size_t)runs, sizeof(double), cmp_d);
    out->bytes = bytes;
    out->runs = runs;
    out->n_threads = kvc_pool_threads(pool);
    out->best_s = t[0];
    out->best_gbps = (double)bytes / t[0] / 1e9;
    out->median_gbps = (double)bytes / t[runs / 2] / 1e9;
    free(t);
    free(buf);
    free(j);
    kvc_pool_free(pool);
    return KVC_OK;
}
