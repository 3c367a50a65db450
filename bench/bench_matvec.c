/* Weight matvec benchmark (not a test): GB/s of kvc_matvec for each weight
 * type on the default model's shapes, and a whole-model sweep that replays
 * one decode token's matvecs of SmolLM2-135M (30 layers: q/k/v and gate/up
 * fused with kvc_matvec_multi, o, down; then the 49152 x 576 output matrix)
 * over weights laid out like the real file (98 MB, larger than the L3), so
 * the figure is memory-bound the way decode is. The ISA comes from KVC_ISA.
 *
 *   bench_matvec [-t threads] [-r reps] [-w q4_1|q8_0|...] [-c] [-p]
 *   -w: the layers' weight type (default q4_1); -c: time with the process CPU
 *   clock instead of the wall clock (meaningful with -t 1 on a shared machine);
 *   -p: instead, prefill-style products (kvc_matmul against dequant + sgemm); with -w
 *   only that type
 *
 * Build: see docs/benchmarks.md ("Weight matvec").
 * Prints one line per measurement: isa, case, type, shape, threads, MB, us, GB/s.
 * GB/s counts weight bytes only (the activation is a few KB). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cblas.h>
#include <immintrin.h>

#include "base/threadpool.h"
#include "model/wtype.h"

/* Wall-clock time; with -c, process CPU time instead (for one thread on a
 * shared machine: time the scheduler gave to other processes is left out). */
static int use_cpu_clock;
static double now(void) {
    struct timespec t;
    clock_gettime(use_cpu_clock ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t rs = 88172645463325252ull;
static float rnd(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((rs >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static void *make_matrix(uint32_t type, int64_t rows, int64_t n) {
    size_t rb = kvc_wtype_row_bytes(type, n);
    uint8_t *w = aligned_alloc(64, (rb * rows + 63) / 64 * 64);
    float *src = malloc(n * sizeof(float));
    if (!w || !src) exit(1);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < n; i++)
            src[i] = rnd();
        kvc_wtype_ref(type)->quantize(src, w + r * rb, n);
    }
    free(src);
    return w;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void bench_one(kvc_pool *pool, int threads, uint32_t type, int64_t rows, int64_t n,
                      int reps) {
    void *w = make_matrix(type, rows, n);
    float *x = malloc(n * sizeof(float)), *y = malloc(rows * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = rnd();
    double *t = malloc(reps * sizeof(double));
    for (int i = 0; i < 10; i++)
        kvc_matvec(pool, type, w, rows, n, x, y);
    for (int i = 0; i < reps; i++) {
        double t0 = now();
        kvc_matvec(pool, type, w, rows, n, x, y);
        t[i] = now() - t0;
    }
    qsort(t, reps, sizeof(double), cmp_d);
    double bytes = (double)kvc_wtype_row_bytes(type, n) * rows, med = t[reps / 2];
    printf("%-7s single  %-5s %6lldx%-5lld t=%d %8.3f MB %9.1f us %7.1f GB/s\n",
           kvc_isa_name(kvc_active_isa()), kvc_wtype_ref(type)->name, (long long)rows, (long long)n,
           threads, bytes / 1e6, med * 1e6, bytes / med / 1e9);
    free(w), free(x), free(y), free(t);
}

/* Read bandwidth reference: the pool sums a buffer of the model's size in
 * 1 MB slices (AVX2 loads), measured in the same run as the model sweep. */
typedef struct bw_job {
    const uint8_t *buf;
    size_t slice;
    uint64_t sums[64];
} bw_job;

__attribute__((target("avx2"))) static void bw_task(void *ctx, int task, int thread) {
    bw_job *j = ctx;
    const __m256i *p = (const __m256i *)(j->buf + (size_t)task * j->slice);
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i < j->slice / 32; i += 4) {
        s0 = _mm256_add_epi64(s0, _mm256_load_si256(p + i));
        s1 = _mm256_add_epi64(s1, _mm256_load_si256(p + i + 1));
        s2 = _mm256_add_epi64(s2, _mm256_load_si256(p + i + 2));
        s3 = _mm256_add_epi64(s3, _mm256_load_si256(p + i + 3));
    }
    __m256i s = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
    j->sums[thread & 63] +=
        (uint64_t)_mm256_extract_epi64(s, 0) + (uint64_t)_mm256_extract_epi64(s, 3);
}

/* One decode token's matvecs of SmolLM2-135M. */
enum { LAYERS = 30, DIM = 576, KV = 192, FFN = 1536, VOCAB = 49152 };
typedef struct layer {
    void *q, *k, *v, *o, *gate, *up, *down;
} layer;

static void bench_model(kvc_pool *pool, int threads, uint32_t type, int reps) {
    layer L[LAYERS];
    for (int l = 0; l < LAYERS; l++) {
        L[l].q = make_matrix(type, DIM, DIM);
        L[l].k = make_matrix(type, KV, DIM);
        L[l].v = make_matrix(type, KV, DIM);
        L[l].o = make_matrix(type, DIM, DIM);
        L[l].gate = make_matrix(type, FFN, DIM);
        L[l].up = make_matrix(type, FFN, DIM);
        L[l].down = make_matrix(type, DIM, FFN);
    }
    void *out = make_matrix(KVC_WT_Q8_0, VOCAB, DIM);
    double layer_bytes =
        (double)LAYERS * (kvc_wtype_row_bytes(type, DIM) * (2 * DIM + 2 * KV + 2 * FFN) +
                          kvc_wtype_row_bytes(type, FFN) * DIM);
    double out_bytes = (double)kvc_wtype_row_bytes(KVC_WT_Q8_0, DIM) * VOCAB;
    float *x = malloc(FFN * sizeof(float)), *y = malloc(VOCAB * sizeof(float));
    float *yq = malloc(DIM * 4), *yk = malloc(KV * 4), *yv = malloc(KV * 4), *yg = malloc(FFN * 4),
          *yu = malloc(FFN * 4);
    for (int i = 0; i < FFN; i++)
        x[i] = rnd();
    double *tl = malloc(reps * sizeof(double)), *to = malloc(reps * sizeof(double));
    double *tb = malloc(reps * sizeof(double));
    const size_t slice = 1 << 20, n_slices = 96;
    bw_job bj = {.buf = aligned_alloc(64, slice * n_slices), .slice = slice};
    memset((void *)bj.buf, 1, slice * n_slices);
    for (int rep = -2; rep < reps; rep++) {
        double tb0 = now();
        kvc_pool_run(pool, (int)n_slices, bw_task, &bj);
        if (rep >= 0) tb[rep] = now() - tb0;
        double t0 = now();
        for (int l = 0; l < LAYERS; l++) {
            kvc_matvec_op qkv[3] = {
                {type, L[l].q, DIM, yq}, {type, L[l].k, KV, yk}, {type, L[l].v, KV, yv}};
            kvc_matvec_multi(pool, qkv, 3, DIM, x);
            kvc_matvec(pool, type, L[l].o, DIM, DIM, x, y);
            kvc_matvec_op gu[2] = {{type, L[l].gate, FFN, yg}, {type, L[l].up, FFN, yu}};
            kvc_matvec_multi(pool, gu, 2, DIM, x);
            kvc_matvec(pool, type, L[l].down, DIM, FFN, x, y);
        }
        double t1 = now();
        kvc_matvec(pool, KVC_WT_Q8_0, out, VOCAB, DIM, x, y);
        double t2 = now();
        if (rep >= 0) tl[rep] = t1 - t0, to[rep] = t2 - t1;
    }
    qsort(tb, reps, sizeof(double), cmp_d);
    double bw = slice * n_slices / tb[reps / 2] / 1e9;
    qsort(tl, reps, sizeof(double), cmp_d);
    qsort(to, reps, sizeof(double), cmp_d);
    double ml = tl[reps / 2], mo = to[reps / 2];
    const char *isa = kvc_isa_name(kvc_active_isa());
    printf("%-7s model   %-5s layers (210 matvecs)  t=%d %8.3f MB %9.1f us %7.1f GB/s\n", isa,
           kvc_wtype_ref(type)->name, threads, layer_bytes / 1e6, ml * 1e6, layer_bytes / ml / 1e9);
    printf("%-7s model   q8_0  output 49152x576     t=%d %8.3f MB %9.1f us %7.1f GB/s\n", isa,
           threads, out_bytes / 1e6, mo * 1e6, out_bytes / mo / 1e9);
    printf("%-7s model   all   one token            t=%d %8.3f MB %9.1f us %7.1f GB/s\n", isa,
           threads, (layer_bytes + out_bytes) / 1e6, (ml + mo) * 1e6,
           (layer_bytes + out_bytes) / (ml + mo) / 1e9);
    printf("%-7s model   best  one token (fastest rep)  t=%d %8.3f MB %9.1f us %7.1f GB/s  (read: "
           "%.1f GB/s)\n",
           isa, threads, (layer_bytes + out_bytes) / 1e6, (tl[0] + to[0]) * 1e6,
           (layer_bytes + out_bytes) / (tl[0] + to[0]) / 1e9, slice * n_slices / tb[0] / 1e9);
    printf("%-7s read    bandwidth reference        t=%d %8.3f MB %9.1f us %7.1f GB/s  (matvec at "
           "%.0f%%)\n",
           isa, threads, slice * n_slices / 1e6, tb[reps / 2] * 1e6, bw,
           100.0 * (layer_bytes + out_bytes) / (ml + mo) / 1e9 / bw);
    free((void *)bj.buf), free(tb);
    for (int l = 0; l < LAYERS; l++) {
        free(L[l].q), free(L[l].k), free(L[l].v), free(L[l].o), free(L[l].gate), free(L[l].up),
            free(L[l].down);
    }
    free(out), free(x), free(y), free(yq), free(yk), free(yv), free(yg), free(yu), free(tl),
        free(to);
}

/* Prefill-style products of m tokens through one matrix: kvc_matmul (int8,
 * weights unpacked once per row) against dequantised 64-row tiles + sgemm, the
 * way the forward pass did prefill (single-threaded BLAS per tile). */
typedef struct sg_job {
    uint32_t type;
    const void *w;
    int64_t rows, n, m;
    const float *x;
    float *y, *tiles;
} sg_job;

static void sg_task(void *ctx, int task, int thread) {
    sg_job *j = ctx;
    int64_t r0 = (int64_t)task * 64, nr = j->rows - r0 < 64 ? j->rows - r0 : 64;
    float *t = j->tiles + (size_t)thread * 64 * j->n;
    kvc_dequant_rows(j->type, j->w, r0, nr, j->n, t);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)j->m, (int)nr, (int)j->n, 1.0f, j->x,
                (int)j->n, t, (int)j->n, 0.0f, j->y + r0, (int)j->rows);
}

static void bench_matmul(kvc_pool *pool, int threads, uint32_t type, int64_t rows, int64_t n,
                         int64_t m, int reps) {
    void *w = make_matrix(type, rows, n);
    float *x = malloc(m * n * sizeof(float)), *y = malloc(m * rows * sizeof(float));
    float *tiles = malloc((size_t)threads * 64 * n * sizeof(float));
    for (int64_t i = 0; i < m * n; i++)
        x[i] = rnd();
    double *tq = malloc(reps * sizeof(double)), *ts = malloc(reps * sizeof(double));
    kvc_matmul_op op = {type, w, rows, y, rows};
    sg_job j = {type, w, rows, n, m, x, y, tiles};
    for (int rep = -2; rep < reps; rep++) {
        double t0 = now();
        if (kvc_matmul(pool, &op, 1, n, x, n, m) != KVC_OK) exit(1);
        double t1 = now();
        kvc_pool_run(pool, (int)((rows + 63) / 64), sg_task, &j);
        double t2 = now();
        if (rep >= 0) tq[rep] = t1 - t0, ts[rep] = t2 - t1;
    }
    qsort(tq, reps, sizeof(double), cmp_d);
    qsort(ts, reps, sizeof(double), cmp_d);
    double flop = 2.0 * rows * n * m;
    printf(
        "%-7s matmul  %-5s %6lldx%-5lld m=%-4lld t=%d  int8 %8.1f us %6.1f GOP/s | dequant+sgemm "
        "%8.1f us %6.1f GFLOP/s\n",
        kvc_isa_name(kvc_active_isa()), kvc_wtype_ref(type)->name, (long long)rows, (long long)n,
        (long long)m, threads, tq[reps / 2] * 1e6, flop / tq[reps / 2] / 1e9, ts[reps / 2] * 1e6,
        flop / ts[reps / 2] / 1e9);
    free(w), free(x), free(y), free(tiles), free(tq), free(ts);
}

int main(int argc, char **argv) {
    int threads = 0, reps = 50, matmul_only = 0, layer_given = 0;
    uint32_t layer_type = KVC_WT_Q4_1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-c"))
            use_cpu_clock = 1;
        else if (!strcmp(argv[i], "-p"))
            matmul_only = 1;
        else if (!strcmp(argv[i], "-w") && i + 1 < argc) {
            const char *name = argv[++i];
            int found = 0;
            for (uint32_t t = 0; t < KVC_WT_COUNT; t++) {
                const kvc_wtype *wt = kvc_wtype_ref(t);
                if (wt && wt->supported && !strcmp(wt->name, name))
                    layer_type = t, found = 1, layer_given = 1;
            }
            if (!found) return fprintf(stderr, "unknown weight type %s\n", name), 2;
        } else {
            fprintf(stderr, "usage: %s [-t threads] [-r reps] [-w layer_type] [-c] [-p]\n",
                    argv[0]);
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    kvc_pool *pool;
    if (kvc_pool_create(threads, &pool) != KVC_OK) return 1;
    threads = kvc_pool_threads(pool);
    if (use_cpu_clock && threads > 1) return fprintf(stderr, "-c needs -t 1\n"), 2;
    openblas_set_num_threads(1);
    if (matmul_only) {
        /* -w: only that type; k-quants on a 1536-column matrix (Qwen2.5-1.5B's width) */
        const uint32_t mt[] = {KVC_WT_Q4_1, KVC_WT_Q8_0, KVC_WT_Q6_K};
        const int n_mt = layer_given ? 1 : (int)(sizeof mt / sizeof mt[0]);
        for (int i = 0; i < n_mt; i++)
            for (int64_t m = 8; m <= 512; m *= 4) {
                const uint32_t t = layer_given ? layer_type : mt[i];
                int64_t n = kvc_wtype_ref(t)->block == 256 ? 1536 : 576;
                bench_matmul(pool, threads, t, FFN, n, m, reps < 5 ? reps : 5);
            }
        kvc_pool_free(pool);
        return 0;
    }
    const uint32_t types[] = {KVC_WT_Q4_1, KVC_WT_Q8_0, KVC_WT_Q4_0, KVC_WT_Q4_K, KVC_WT_Q5_K,
                              KVC_WT_Q6_K, KVC_WT_F16,  KVC_WT_BF16, KVC_WT_F32};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        int64_t n1 =
            kvc_wtype_row_bytes(types[i], 576) ? 576 : 768; /* k-quants need multiples of 256 */
        bench_one(pool, threads, types[i], FFN, n1, reps * 4);
        bench_one(pool, threads, types[i], DIM, n1 == 576 ? FFN : 1536, reps * 4);
    }
    bench_model(pool, threads, layer_type, reps);
    kvc_pool_free(pool);
    return 0;
}
