/* MUSTAFAR's bitmap kernels (kv/codec/bitmap.h) alone in the CPU cache, for
 * measuring a kernel change without the memory system's noise
 * (docs/benchmarks.md "Bitmap kernels on AVX2: a piece index"). Not a test,
 * not part of the CMake build:
 *
 *   bitmap_hot [KEEP [BF16 [G [DIM [TOKENS [ROUNDS]]]]]]   (defaults 19 1 3 64 4096 400)
 *
 * TOKENS random vectors of DIM channels pruned to their KEEP largest
 * magnitudes and packed as bitmap tiles (bf16 values when BF16 is 1, else
 * f16), and the same vectors as dense f16 rows for scale; q.k and p.v over
 * all tokens for G query heads with the active ISA's kernels (KVC_ISA lowers
 * it); prints the best of ROUNDS calls of each in ns per token (all G heads),
 * thread CPU clock. 4096 tokens of 64 channels stay in the L2 cache.
 * Compare two builds by linking the program against each library.
 *
 * Build (after `make` / cmake --build build):
 *   gcc -O2 -std=gnu11 -Iinclude -Isrc bench/bitmap_hot.c build/libkvcomp.a \
 *       -lopenblas -llapack -lm -lpthread -o /tmp/bitmap_hot */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/cpu.h"
#include "kv/codec/bitmap.h"
#include "kv/codec/codec.h"
#include "kv/codec/dense.h"
#include "kv/codec/prune.h"

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float next_sym(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)(rng >> 40) / 8388608.0f - 1.0f;
}

/* Best time in seconds of `rounds` runs of the statement `call`. */
#define BEST_OF(rounds, call)                                                                      \
    ({                                                                                             \
        double best_ = 1e30;                                                                       \
        for (int r_ = 0; r_ < (rounds); r_++) {                                                    \
            double t0_ = cpu_now();                                                                \
            call;                                                                                  \
            double t_ = cpu_now() - t0_;                                                           \
            if (t_ > 0 && t_ < best_) best_ = t_;                                                  \
        }                                                                                          \
        best_;                                                                                     \
    })

int main(int argc, char **argv) {
    int keep = argc > 1 ? atoi(argv[1]) : 19, bf16 = argc > 2 ? atoi(argv[2]) : 1;
    int G = argc > 3 ? atoi(argv[3]) : 3, dim = argc > 4 ? atoi(argv[4]) : 64;
    int n = argc > 5 ? atoi(argv[5]) : 4096, rounds = argc > 6 ? atoi(argv[6]) : 400;
    if (dim < 1 || dim > KVC_BITMAP_MAX_D || keep < 0 || keep > dim || (bf16 != 0 && bf16 != 1) ||
        G < 1 || G > 16 || n < 1 || n > 1 << 20 || rounds < 1) {
        fprintf(stderr, "bitmap_hot: want KEEP 0..DIM, BF16 0|1, G 1..16, DIM 1..%d, TOKENS 1..2^20, "
                        "ROUNDS >= 1\n", KVC_BITMAP_MAX_D);
        return 2;
    }
    kvc_codecs_init();
    int nt = kvc_bitmap_tiles(dim);
    float *x = malloc(sizeof(float) * dim), *mag = malloc(sizeof(float) * dim);
    uint64_t *bits = malloc(sizeof(uint64_t) * (size_t)n * nt);
    uint16_t *vals = malloc(sizeof(uint16_t) * (size_t)n * keep + KVC_BITMAP_PAD);
    kvc_f16 *rows = malloc(sizeof(kvc_f16) * (size_t)n * dim);
    float *q = malloc(sizeof(float) * G * dim), *s = malloc(sizeof(float) * G * n);
    float *p = malloc(sizeof(float) * G * n), *o = calloc((size_t)G * dim, sizeof(float));
    int rc = 0;
    if (!x || !mag || !bits || !vals || !rows || !q || !s || !p || !o) {
        fprintf(stderr, "bitmap_hot: out of memory\n");
        rc = 1;
        goto done;
    }
    for (int i = 0; i < n; i++) {
        uint64_t mask[KVC_BITMAP_MAX_D / 64];
        for (int c = 0; c < dim; c++) x[c] = next_sym(), mag[c] = fabsf(x[c]);
        kvc_prune_topk(mag, dim, keep, mask);
        kvc_bitmap_pack(x, mask, dim, bf16, bits + (size_t)i * nt, vals + (size_t)i * keep);
        kvc_bitmap_unpack(bits + (size_t)i * nt, vals + (size_t)i * keep, dim, bf16, x);
        for (int c = 0; c < dim; c++) rows[(size_t)i * dim + c] = kvc_f32_to_f16(x[c]);
    }
    for (int i = 0; i < G * dim; i++) q[i] = next_sym();
    for (int i = 0; i < G * n; i++) p[i] = (next_sym() + 1.0f) / (float)n;
    kvc_bitmap_view v = {bits, vals, dim, keep, bf16};
    double bqk = BEST_OF(rounds, kvc_bitmap_k.qk(&v, n, q, G, dim, s, n));
    double bpv = BEST_OF(rounds, kvc_bitmap_k.pv(&v, n, p, G, n, o, dim));
    double dqk = BEST_OF(rounds, kvc_dense_k.qk[KVC_DENSE_F16](rows, n, dim, q, G, dim, s, n));
    double dpv = BEST_OF(rounds, kvc_dense_k.pv[KVC_DENSE_F16](rows, n, dim, p, G, n, o, dim));
    printf("isa %s keep %d/%d %s G %d tokens %d: bitmap q.k %.2f p.v %.2f ns/token; "
           "dense f16 q.k %.2f p.v %.2f ns/token\n",
           kvc_isa_name(kvc_active_isa()), keep, dim, bf16 ? "bf16" : "f16", G, n,
           bqk * 1e9 / n, bpv * 1e9 / n, dqk * 1e9 / n, dpv * 1e9 / n);
done:
    free(x), free(mag), free(bits), free(vals), free(rows);
    free(q), free(s), free(p), free(o);
    return rc;
}
