/* Non-uniform 2-bit levels for KIVI, fitted on real K/V (docs/benchmarks.md
 * "Tuned with rot, and non-uniform levels"; not a test, not part of the CMake
 * build).
 *
 *   fit_levels DUMP [GROUP] [ROT_SEED]
 *
 * Reads a `kvcomp dump-kv` file and forms KIVI's groups: keys per channel over
 * GROUP tokens (default 32), values per token over GROUP channels; with
 * ROT_SEED (>= 0) every K and V row is first rotated as `+rot:seed=ROT_SEED`
 * rotates it (kvc_hadamard_create(head_dim, both sides, seed, layer, 0)). Each
 * value becomes its position u = (x - min) / (max - min) in its group's
 * range, weighted by (max - min)^2, so the weighted squared error in u is the
 * squared error of the decoded values. Lloyd-Max then fits four levels of u,
 * separately for K and V, twice: with the end levels fixed at 0 and 1 (min
 * and max stay representable, as in kivi) and with all four free. Printed:
 * the levels, and the mean squared error of each level set relative to
 * uniform {0,1/3,2/3,1} (nearest-level coding throughout).
 *
 * Build (after cmake --build build):
 *   gcc -O2 -std=gnu11 -Iinclude -Isrc bench/fit_levels.c build/libkvcomp.a \
 *       -lopenblas -llapack -lm -lpthread -o /tmp/fit_levels */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/xform/hadamard.h"
#include "kvcomp.h"
#include "kvcomp/kvdump.h"

enum { NB = 4096 }; /* histogram bins of u: Lloyd runs on the histogram */

typedef struct hist {
    double w[NB], wu[NB], wuu[NB]; /* per bin: sum of weights, of w*u, of w*u^2 */
} hist;

static void add_group(hist *h, const float *x, int n, int stride) {
    float mn = INFINITY, mx = -INFINITY;
    for (int i = 0; i < n; i++) {
        float v = x[(size_t)i * stride];
        if (v < mn) mn = v;
        if (v > mx) mx = v;
    }
    double r = (double)mx - mn;
    if (!(r > 0)) return;
    for (int i = 0; i < n; i++) {
        double u = ((double)x[(size_t)i * stride] - mn) / r;
        int b = (int)(u * NB);
        if (b >= NB) b = NB - 1;
        if (b < 0) b = 0;
        h->w[b] += r * r, h->wu[b] += r * r * u, h->wuu[b] += r * r * u * u;
    }
}

/* The index of the level of l[4] nearest to u (the lower one on a tie). */
static int nearest_level(const double *l, double u) {
    int best = 0;
    for (int j = 1; j < 4; j++)
        if (fabs(u - l[j]) < fabs(u - l[best])) best = j;
    return best;
}

/* Weighted squared error of coding with levels l[4] (nearest level), using
 * each bin's moments: sum w (u - l)^2 = wuu - 2 l wu + l^2 w. */
static double cost(const hist *h, const double *l) {
    double e = 0;
    for (int b = 0; b < NB; b++) {
        if (h->w[b] == 0) continue;
        double u = h->wu[b] / h->w[b];
        int best = nearest_level(l, u);
        e += h->wuu[b] - 2 * l[best] * h->wu[b] + l[best] * l[best] * h->w[b];
    }
    return e;
}

/* Lloyd-Max: levels <- weighted centroids of their cells; fixed ends stay. */
static void lloyd(const hist *h, double *l, int fixed_ends) {
    for (int it = 0; it < 500; it++) {
        double sw[4] = {0}, swu[4] = {0};
        for (int b = 0; b < NB; b++) {
            if (h->w[b] == 0) continue;
            double u = h->wu[b] / h->w[b];
            int best = nearest_level(l, u);
            sw[best] += h->w[b], swu[best] += h->wu[b];
        }
        for (int j = 0; j < 4; j++) {
            if (fixed_ends && (j == 0 || j == 3)) continue;
            if (sw[j] > 0) l[j] = swu[j] / sw[j];
        }
    }
}

static void report(const char *what, const hist *h) {
    const double uni[4] = {0, 1.0 / 3, 2.0 / 3, 1};
    double fixed[4] = {0, 1.0 / 3, 2.0 / 3, 1}, free_[4] = {0, 1.0 / 3, 2.0 / 3, 1};
    lloyd(h, fixed, 1);
    lloyd(h, free_, 0);
    double e0 = cost(h, uni);
    printf("%s: fixed ends  %.4f %.4f %.4f %.4f  mse/uniform %.4f\n", what, fixed[0], fixed[1], fixed[2],
           fixed[3], cost(h, fixed) / e0);
    printf("%s: free ends   %.4f %.4f %.4f %.4f  mse/uniform %.4f\n", what, free_[0], free_[1], free_[2],
           free_[3], cost(h, free_) / e0);
    /* symmetric sweep of the inner level a: {0, a, 1-a, 1} */
    printf("%s: symmetric {0,a,1-a,1} mse/uniform:", what);
    for (double a = 0.30; a < 0.46; a += 0.02) {
        double l[4] = {0, a, 1 - a, 1};
        printf(" a=%.2f:%.4f", a, cost(h, l) / e0);
    }
    printf("\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: fit_levels DUMP [GROUP] [ROT_SEED]\n");
        return 2;
    }
    int group = argc > 2 ? atoi(argv[2]) : 32, seed = argc > 3 ? atoi(argv[3]) : -1;
    kvc_kvdump_header h;
    if (kvc_kvdump_read_header(argv[1], &h) != KVC_OK) {
        fprintf(stderr, "%s\n", kvc_last_error());
        return 1;
    }
    int d = (int)h.head_dim, nkv = (int)h.n_kv_heads, n = (int)h.n_tokens;
    hist *hk = calloc(1, sizeof *hk), *hv = calloc(1, sizeof *hv);
    for (int l = 0; l < (int)h.n_layers; l++) {
        float *k, *v;
        if (kvc_kvdump_load_layer(argv[1], l, &h, &k, &v) != KVC_OK) {
            fprintf(stderr, "%s\n", kvc_last_error());
            return 1;
        }
        if (seed >= 0) {
            kvc_xform *x;
            if (kvc_hadamard_create(d, KVC_HADAMARD_K | KVC_HADAMARD_V, (uint64_t)seed, (uint64_t)l, 0, &x) != KVC_OK)
                return 1;
            x->ops->apply(x, 0, k, n * nkv, d, k, d);
            x->ops->apply(x, 1, v, n * nkv, d, v, d);
            kvc_xform_release(x);
        }
        const int ld = nkv * d;
        for (int hh = 0; hh < nkv; hh++) {
            for (int t0 = 0; t0 + group <= n; t0 += group) /* K: per channel over tokens */
                for (int c = 0; c < d; c++) add_group(hk, k + (size_t)t0 * ld + hh * d + c, group, ld);
            for (int t = 0; t < n; t++) /* V: per token over channels */
                for (int c0 = 0; c0 < d; c0 += group)
                    add_group(hv, v + (size_t)t * ld + hh * d + c0, d - c0 < group ? d - c0 : group, 1);
        }
        free(k);
        free(v);
    }
    printf("dump %s: %d layers, %d kv heads, head dim %d, %d tokens, group %d, rotation %s\n", argv[1],
           (int)h.n_layers, nkv, d, n, group, seed >= 0 ? "yes" : "no");
    report("K", hk);
    report("V", hv);
    free(hk);
    free(hv);
    return 0;
}
