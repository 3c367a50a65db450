/* The integer KIVI / KVmix kernels (kv/codec/iquant.h) alone in the CPU
 * cache, for measuring a kernel change without the memory system's noise
 * (docs/benchmarks.md "Masked stores and PDEP"). Not a test, not part of the
 * CMake build:
 *
 *   iquant_hot [BITS [G [DIM [TOKENS [ROUNDS [SPAN]]]]]]   (defaults 2 3 64 2048 400 0)
 *
 * Random codes in key tiles of 32 tokens (the KIVI group, each with its own
 * scales and mins) and one value blob of DIM-channel groups; q.k over all
 * tiles and p.v over all tokens for G query heads, the active ISA's kernels
 * (KVC_ISA lowers it); prints the best of ROUNDS calls of each in ns per
 * token (all G heads), thread CPU clock. A few thousand tokens stay in the
 * L2 cache; a million (about 45 MB at 2 bits, d 64) read memory. SPAN > 0
 * calls the kernels span by span, q.k then p.v, as the attention driver does
 * with its tiles of 256 tokens (the clock is read around each call).
 * Compare two builds by linking the program against each library.
 *
 * Build (after `make` / cmake --build build):
 *   gcc -O2 -std=gnu11 -Iinclude -Isrc bench/iquant_hot.c build/libkvcomp.a \
 *       -lopenblas -llapack -lm -lpthread -o /tmp/iquant_hot */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/cpu.h"
#include "kv/codec/codec.h"
#include "kv/codec/iquant.h"

enum { GROUP = 32 };

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float next_unit(void) { return (float)(next_u32() & 0xffffff) / 16777216.0f; }

static kvc_f16 *f16_array(size_t n, float lo, float hi) {
    kvc_f16 *a = malloc(n * sizeof *a);
    for (size_t i = 0; a && i < n; i++) a[i] = kvc_f32_to_f16(lo + (hi - lo) * next_unit());
    return a;
}

/* 64-byte aligned, as the codecs' blobs are (blob_arena.h): the AVX-512
 * kernels read code blocks with aligned loads. */
static uint32_t *random_words(size_t n) {
    uint32_t *w = aligned_alloc(64, (n * sizeof *w + 63) / 64 * 64);
    for (size_t i = 0; w && i < n; i++) w[i] = next_u32();
    return w;
}

int main(int argc, char **argv) {
    int bits = argc > 1 ? atoi(argv[1]) : 2, G = argc > 2 ? atoi(argv[2]) : 3;
    int dim = argc > 3 ? atoi(argv[3]) : 64, n = argc > 4 ? atoi(argv[4]) : 2048;
    int rounds = argc > 5 ? atoi(argv[5]) : 400, span = argc > 6 ? atoi(argv[6]) : 0;
    if (!(bits >= 1 && bits <= 4) || G < 1 || G > 8 || dim < 16 || dim > KVC_IQ_MAX_DIM ||
        dim % 16 || n < GROUP || n % GROUP || n > 1 << 20 || rounds < 1 || span < 0 || span % GROUP) {
        fprintf(stderr, "iquant_hot: want BITS 1..4, G 1..8, DIM a multiple of 16 up to %d, TOKENS a "
                        "multiple of %d up to 2^20, ROUNDS >= 1, SPAN a multiple of %d\n", KVC_IQ_MAX_DIM, GROUP, GROUP);
        return 2;
    }
    kvc_codecs_init();
    const int nt = n / GROUP, kw = kvc_iq_kwords(bits, dim), npad = n, tpw = 32 / bits;
    kvc_f16 *kscale = f16_array((size_t)nt * dim, 0.01f, 0.1f), *kmin = f16_array((size_t)nt * dim, -0.6f, -0.4f);
    uint32_t *kcodes = random_words((size_t)n * kw);
    kvc_iq_ktile *tiles = malloc((size_t)nt * sizeof *tiles);
    kvc_f16 *vscale = f16_array((size_t)npad, 0.04f, 0.06f), *vmin = f16_array((size_t)npad, -0.2f, 0.0f);
    uint32_t *vcodes = random_words((size_t)(npad / tpw) * dim);
    float *q = malloc(sizeof(float) * G * dim), *s = malloc(sizeof(float) * G * n);
    float *p = malloc(sizeof(float) * G * n), *o = calloc((size_t)G * dim, sizeof(float));
    int rc = 0;
    if (!kscale || !kmin || !kcodes || !tiles || !vscale || !vmin || !vcodes || !q || !s || !p || !o) {
        fprintf(stderr, "iquant_hot: out of memory\n");
        rc = 1;
        goto done;
    }
    for (int i = 0; i < nt; i++) {
        const kvc_f16 *sc = kscale + (size_t)i * dim;
        float smax = kvc_iq_tile_smax(sc, dim);
        tiles[i] = (kvc_iq_ktile){.mins = kmin + (size_t)i * dim, .scales = sc, .codes = kcodes + (size_t)i * GROUP * kw,
                                  .n = GROUP, .dim = dim, .bits = bits, .smax = smax, .inv_smax = 1.0f / smax};
    }
    for (int i = 0; i < G * dim; i++) q[i] = 4.0f * next_unit() - 2.0f;
    for (int i = 0; i < G * n; i++) p[i] = next_unit() / (float)n;
    kvc_iq_vblob v = {.mins = vmin, .scales = vscale, .codes = vcodes, .n = n, .npad = npad, .dim = dim,
                      .group = dim, .bits = bits};
    double best_qk = 1e30, best_pv = 1e30;
    for (int r = 0; r < rounds && !span; r++) {
        double t0 = cpu_now();
        kvc_iq_k.qk(tiles, nt, q, dim, G, 0, n, s, n);
        double t1 = cpu_now();
        kvc_iq_k.pv(&v, p, n, G, 0, n, o, dim);
        double t2 = cpu_now();
        if (t1 - t0 > 0 && t1 - t0 < best_qk) best_qk = t1 - t0;
        if (t2 - t1 > 0 && t2 - t1 < best_pv) best_pv = t2 - t1;
    }
    double best_span = 1e30;
    for (int r = 0; r < rounds && span; r++) { /* as the attention driver calls them: span by span */
        double t0 = cpu_now();
        for (int j0 = 0; j0 < n; j0 += span) {
            int j1 = j0 + span < n ? j0 + span : n;
            kvc_iq_k.qk(tiles + j0 / GROUP, (j1 - j0) / GROUP, q, dim, G, 0, j1 - j0, s + j0, n);
            kvc_iq_k.pv(&v, p + j0, n, G, j0, j1, o, dim);
        }
        double t = cpu_now() - t0;
        if (t > 0 && t < best_span) best_span = t;
    }
    if (span)
        printf("isa %s bits %d G %d dim %d tokens %d: q.k + p.v in spans of %d: %.2f ns/token\n",
               kvc_isa_name(kvc_active_isa()), bits, G, dim, n, span, best_span * 1e9 / n);
    else
        printf("isa %s bits %d G %d dim %d tokens %d: q.k %.2f ns/token, p.v %.2f ns/token\n",
               kvc_isa_name(kvc_active_isa()), bits, G, dim, n, best_qk * 1e9 / n, best_pv * 1e9 / n);
done:
    free(kscale), free(kmin), free(kcodes), free(tiles), free(vscale), free(vmin), free(vcodes);
    free(q), free(s), free(p), free(o);
    return rc;
}
