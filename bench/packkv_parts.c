/* PackKV measurements for docs/benchmarks.md "PackKV" (not a test, not part
 * of the CMake build):
 *
 *   packkv_parts ratio DUMP SPEC...
 *     Stores every layer of a `kvcomp dump-kv` file through each method spec
 *     (the cache's own load path: hot window, sealing, repacking, encoding)
 *     and prints, over the sealed tokens of all layers and KV heads, the bytes
 *     of K and of V (payload + metadata of the codec) and of the chunk
 *     positions (the repacking permutation), as ratios to f16 (2 bytes per
 *     element) and as bits per element.
 *
 *   packkv_parts time DUMP CTX SPEC [REPS]
 *     One layer of the dump repeated to CTX tokens, stored through full:f16
 *     and through SPEC, in as many copies as make 256 MiB of f16 (at most 32;
 *     each timed pass reads the next copy, so passes read memory, not the
 *     CPU cache). Times, with the thread's CPU clock on one thread, the codecs'
 *     q.k alone (every chunk, all KV heads, G query heads each) and p.v alone
 *     (random probabilities), median of REPS passes per copy (default 5), and
 *     prints both methods and their ratios in one table.
 *
 *   packkv_parts hot [REL [grouped]]
 *     The kernels alone in the CPU cache: one blob of 1024 synthetic tokens of
 *     64 channels (K blocks of 64, V blocks of 128, packs of 16, rel REL,
 *     default 0.1; the paper's layout, or the grouped one), G = 3; the best
 *     of 300 runs of q.k and p.v over it, in ns per pack and channel (16
 *     elements, 3 heads), and dense f16's q.k / p.v over the same tokens per
 *     16 elements, thread CPU clock.
 *
 * Build (after `make` / cmake --build build):
 *   gcc -O2 -std=gnu11 -Iinclude -Isrc bench/packkv_parts.c build/libkvcomp.a \
 *       -lopenblas -llapack -lm -lpthread -o /tmp/packkv_parts */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kv/cache_impl.h"
#include "kv/codec/dense.h"
#include "kv/codec/packkv.h"
#include "kv/synth.h"
#include "kvcomp.h"
#include "kvcomp/kvdump.h"

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what) {
    fprintf(stderr, "packkv_parts: %s: %s\n", what, kvc_last_error());
    exit(1);
}

static kvc_cache *make_cache(const kvc_kvdump_header *h, int layers, int max_tokens, const char *spec) {
    kvc_cache_shape sh = {layers, (int)h->n_heads, (int)h->n_kv_heads, (int)h->head_dim, max_tokens};
    kvc_cache *c = NULL;
    if (kvc_cache_create(&sh, spec, NULL, &c) != KVC_OK) die(spec);
    return c;
}

/* ---- ratio ----------------------------------------------------------------------- */

static void ratio(const char *dump, char **specs, int n_specs) {
    kvc_kvdump_header h;
    if (kvc_kvdump_read_header(dump, &h) != KVC_OK) die(dump);
    printf("| spec | sealed tokens | K ratio | V ratio | K bits/el | V bits/el | pos B/token | K+V+pos ratio |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int si = 0; si < n_specs; si++) {
        kvc_cache *c = make_cache(&h, (int)h.n_layers, (int)h.n_tokens + 1, specs[si]);
        uint64_t kb = 0, vb = 0, pb = 0, sealed = 0;
        for (int l = 0; l < (int)h.n_layers; l++) {
            float *k, *v;
            if (kvc_kvdump_load_layer(dump, l, &h, &k, &v) != KVC_OK) die(dump);
            if (kvc_cache_load(c, l, (int)h.n_tokens, k, v) != KVC_OK) die(specs[si]);
            free(k);
            free(v);
            for (int hd = 0; hd < (int)h.n_kv_heads; hd++) {
                kvc_stream *s = kvc_cache_stream(c, l, hd);
                for (int ci = 0; ci < s->n_chunks; ci++) {
                    const kvc_chunk *ch = s->chunks[ci];
                    uint64_t p, m;
                    ch->kc.ops->bytes(&ch->kc, ch->kb, &p, &m);
                    kb += p + m;
                    ch->vc.ops->bytes(&ch->vc, ch->vb, &p, &m);
                    vb += p + m;
                    pb += ch->pos ? (uint64_t)ch->n * sizeof *ch->pos : 0;
                    sealed += (uint64_t)ch->n;
                }
            }
        }
        double f16 = (double)sealed * h.head_dim * 2, els = (double)sealed * h.head_dim;
        printf("| %s | %llu | %.2f | %.2f | %.3f | %.3f | %.2f | %.2f |\n", specs[si],
               (unsigned long long)(sealed / h.n_kv_heads / h.n_layers), f16 / (double)kb,
               f16 / (double)vb, 8.0 * (double)kb / els, 8.0 * (double)vb / els,
               (double)pb / (double)sealed, 2 * f16 / (double)(kb + vb + pb));
        fflush(stdout);
        kvc_cache_free(c);
    }
}

/* ---- time ------------------------------------------------------------------------- */

typedef struct part_times {
    double qk, pv;
    uint64_t bytes_k, bytes_v;
} part_times;

/* One pass of q.k (which = 0) or p.v (1) over every chunk of a layer. */
static void pass(kvc_cache *c, int layer, int nkv, int G, int dim, const float *q, const float *p,
                 float *s, float *o, int which) {
    for (int hd = 0; hd < nkv; hd++) {
        kvc_stream *st = kvc_cache_stream(c, layer, hd);
        int off = 0;
        for (int ci = 0; ci < st->n_chunks; ci++) {
            const kvc_chunk *ch = st->chunks[ci];
            if (which == 0)
                ch->kc.ops->qk(&ch->kc, ch->kb, q, G, dim, 0, ch->n, s + off, 0);
            else
                ch->vc.ops->pv(&ch->vc, ch->vb, p + off, G, 0, 0, ch->n, o, dim);
            off += ch->n;
        }
    }
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static part_times time_spec(const kvc_kvdump_header *h, const float *k, const float *v, int ctx,
                            const char *spec, int layers, int reps) {
    int nkv = (int)h->n_kv_heads, dim = (int)h->head_dim, G = (int)(h->n_heads / h->n_kv_heads);
    kvc_cache *c = make_cache(h, layers, ctx + 1, spec);
    for (int l = 0; l < layers; l++)
        for (int t = 0; t < ctx; t += (int)h->n_tokens) {
            int n = ctx - t < (int)h->n_tokens ? ctx - t : (int)h->n_tokens;
            if (kvc_cache_load(c, l, n, k, v) != KVC_OK) die(spec);
        }
    float *q = malloc(sizeof(float) * G * dim), *o = malloc(sizeof(float) * G * dim);
    /* scores are written with lds = 0 (each token overwrites row 0: the
     * kernels' stores still happen); probabilities read with ldp = 0 */
    float *s = malloc(sizeof(float) * ((size_t)ctx + 16)), *p = malloc(sizeof(float) * ((size_t)ctx + 16));
    for (int i = 0; i < G * dim; i++) q[i] = k[i % (nkv * dim)] * 0.1f, o[i] = 0;
    for (int i = 0; i < ctx + 16; i++) p[i] = (float)((i * 7919) % 1000) / 1000.0f / (float)ctx;
    part_times r = {0};
    double *t = malloc(sizeof(double) * (size_t)reps * layers);
    for (int which = 0; which < 2; which++) {
        int n = 0;
        for (int l = 0; l < layers; l++) pass(c, l, nkv, G, dim, q, p, s, o, which); /* warm-up */
        for (int rep = 0; rep < reps; rep++)
            for (int l = 0; l < layers; l++) {
                double a = cpu_now();
                pass(c, l, nkv, G, dim, q, p, s, o, which);
                t[n++] = cpu_now() - a;
            }
        qsort(t, (size_t)n, sizeof(double), cmp_d);
        if (which == 0) r.qk = t[n / 2];
        else r.pv = t[n / 2];
    }
    for (int hd = 0; hd < nkv; hd++) {
        kvc_stream *st = kvc_cache_stream(c, 0, hd);
        for (int ci = 0; ci < st->n_chunks; ci++) {
            const kvc_chunk *ch = st->chunks[ci];
            uint64_t pp, m;
            ch->kc.ops->bytes(&ch->kc, ch->kb, &pp, &m);
            r.bytes_k += pp + m;
            ch->vc.ops->bytes(&ch->vc, ch->vb, &pp, &m);
            r.bytes_v += pp + m;
        }
    }
    if (fabsf(s[0]) > 1e30f || fabsf(o[0]) > 1e30f) printf("(overflow in the timed sums)\n");
    free(q), free(o), free(s), free(p), free(t);
    kvc_cache_free(c);
    return r;
}

static void time_parts(const char *dump, int ctx, const char *spec, int reps) {
    kvc_kvdump_header h;
    float *k, *v;
    if (kvc_kvdump_read_header(dump, &h) != KVC_OK) die(dump);
    if (kvc_kvdump_load_layer(dump, (int)h.n_layers / 2, &h, &k, &v) != KVC_OK) die(dump);
    double f16_layer = (double)ctx * h.n_kv_heads * h.head_dim * 2 * 2;
    int layers = (int)ceil(256.0 * 1024 * 1024 / f16_layer);
    layers = layers < 1 ? 1 : layers > 32 ? 32 : layers;
    part_times f = time_spec(&h, k, v, ctx, "full:f16", layers, reps);
    part_times pk = time_spec(&h, k, v, ctx, spec, layers, reps);
    printf("ctx %d, %d copies, G %d, head dim %d, %u KV heads, 1 thread, CPU clock, median of %d passes per copy\n",
           ctx, layers, (int)(h.n_heads / h.n_kv_heads), (int)h.head_dim, h.n_kv_heads, reps);
    printf("| part | full:f16 ms | full:f16 MB | %s ms | %s MB | byte ratio | speed-up | speed-up / byte ratio |\n", spec, spec);
    printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    double bk = (double)f.bytes_k / (double)pk.bytes_k, bv = (double)f.bytes_v / (double)pk.bytes_v;
    printf("| q.k | %.3f | %.2f | %.3f | %.2f | %.2f | %.2f | %.2f |\n", f.qk * 1e3, f.bytes_k / 1e6,
           pk.qk * 1e3, pk.bytes_k / 1e6, bk, f.qk / pk.qk, f.qk / pk.qk / bk);
    printf("| p.v | %.3f | %.2f | %.3f | %.2f | %.2f | %.2f | %.2f |\n", f.pv * 1e3, f.bytes_v / 1e6,
           pk.pv * 1e3, pk.bytes_v / 1e6, bv, f.pv / pk.pv, f.pv / pk.pv / bv);
    printf("GB/s: full:f16 q.k %.2f p.v %.2f; %s q.k %.2f p.v %.2f\n", f.bytes_k / f.qk / 1e9,
           f.bytes_v / f.pv / 1e9, spec, pk.bytes_k / pk.qk / 1e9, pk.bytes_v / pk.pv / 1e9);
    free(k);
    free(v);
}

/* ---- hot ------------------------------------------------------------------------- */

static void hot(float rel, int grouped) {
    enum { N = 1024, DIM = 64, GH = 3 };
    kvc_codecs_init();
    float *x = malloc(sizeof(float) * N * DIM);
    for (int i = 0; i < N * DIM; i++) /* a spread of values plus outlier channels */
        x[i] = (float)((i * 2654435761u) >> 8 & 1023) / 512.0f - 1.0f + ((i % DIM) % 13 == 0 ? 3.0f : 0.0f);
    kvc_pk_cfg kcfg = {.rel = rel, .block = 64, .pack = 16, .group = grouped ? KVC_PK_KGROUP : 1};
    kvc_pk_cfg vcfg = {.rel = rel, .block = 128, .pack = 16, .group = grouped ? KVC_PK_VGROUP : 1};
    kvc_codec K = {&kvc_codec_packkv_k, DIM, &kcfg}, V = {&kvc_codec_packkv_v, DIM, &vcfg};
    kvc_codec F = {kvc_codec_dense(KVC_DENSE_F16), DIM, NULL};
    void *kb, *vb, *fb;
    if (K.ops->encode(&K, x, N, DIM, &kb) || V.ops->encode(&V, x, N, DIM, &vb) ||
        F.ops->encode(&F, x, N, DIM, &fb))
        die("hot: encode");
    static float q[GH * DIM], s[GH * N], p[GH * N], o[GH * DIM];
    for (int i = 0; i < GH * DIM; i++) q[i] = x[i] * 0.3f;
    for (int i = 0; i < GH * N; i++) p[i] = 1.0f / N;
    double best[4] = {1e9, 1e9, 1e9, 1e9};
    for (int r = 0; r < 300; r++) {
        double t[5];
        t[0] = cpu_now();
        K.ops->qk(&K, kb, q, GH, DIM, 0, N, s, N);
        t[1] = cpu_now();
        V.ops->pv(&V, vb, p, GH, N, 0, N, o, DIM);
        t[2] = cpu_now();
        F.ops->qk(&F, fb, q, GH, DIM, 0, N, s, N);
        t[3] = cpu_now();
        F.ops->pv(&F, fb, p, GH, N, 0, N, o, DIM);
        t[4] = cpu_now();
        for (int i = 0; i < 4; i++) best[i] = t[i + 1] - t[i] < best[i] ? t[i + 1] - t[i] : best[i];
    }
    uint64_t pk, mk, pv, mv;
    K.ops->bytes(&K, kb, &pk, &mk);
    V.ops->bytes(&V, vb, &pv, &mv);
    double per = 1e9 / ((double)N * DIM / 16);
    printf("hot cache, %d tokens x %d, G %d, rel %g, %s layout: packkv q.k %.2f p.v %.2f ns per "
           "pack and channel; "
           "f16 q.k %.2f p.v %.2f ns per 16 elements; K %.2f V %.2f bits/el\n",
           N, DIM, GH, (double)rel, grouped ? "grouped" : "paper", best[0] * per, best[1] * per,
           best[2] * per, best[3] * per, 8.0 * (double)(pk + mk) / N / DIM,
           8.0 * (double)(pv + mv) / N / DIM);
    K.ops->free(&K, kb), V.ops->free(&V, vb), F.ops->free(&F, fb);
    free(x);
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "hot") == 0) {
        hot(argc > 2 ? (float)atof(argv[2]) : 0.1f, argc > 3 && strcmp(argv[3], "grouped") == 0);
        return 0;
    }
    if (argc >= 4 && strcmp(argv[1], "ratio") == 0) {
        ratio(argv[2], argv + 3, argc - 3);
        return 0;
    }
    if (argc >= 5 && strcmp(argv[1], "time") == 0) {
        time_parts(argv[2], atoi(argv[3]), argv[4], argc > 5 ? atoi(argv[5]) : 5);
        return 0;
    }
    fprintf(stderr, "usage: packkv_parts ratio DUMP SPEC... | time DUMP CTX SPEC [REPS] | hot [REL "
                    "[grouped]]\n");
    return 2;
}
