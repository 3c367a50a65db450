/* Filling a cache without the model (synth.h): blocks of up to 4096 tokens
 * through the normal append path (hot window, method hooks) without attention,
 * and a deterministic synthetic K/V generator for benchmarks and tests. */
#include "kv/synth.h"

#include <math.h>
#include <stdlib.h>

#include "base/rng.h"
#include "base/status.h"
#include "kv/cache_impl.h"

enum { BLOCK = 4096 };

kvc_status kvc_cache_load(kvc_cache *c, int layer, int64_t n, const float *k, const float *v) {
    size_t row = (size_t)c->shape.n_kv_heads * c->shape.head_dim;
    for (int64_t t = 0; t < n; t += BLOCK) {
        int b = n - t < BLOCK ? (int)(n - t) : BLOCK;
        KVC_TRY(kvc_cache_append_n(c, layer, b, k + (size_t)t * row, v + (size_t)t * row, NULL));
    }
    return KVC_OK;
}

kvc_status kvc_cache_load_random(kvc_cache *c, int layer, int64_t n, uint64_t seed) {
    int nkv = c->shape.n_kv_heads, d = c->shape.head_dim;
    size_t row = (size_t)nkv * d;
    float *k = malloc((size_t)BLOCK * row * sizeof *k), *v = malloc((size_t)BLOCK * row * sizeof *v);
    kvc_status st = k && v ? KVC_OK : kvc_fail(KVC_ERR_NOMEM, "synthetic K/V block");
    int64_t t0 = kvc_cache_tokens(c, layer);
    for (int64_t t = 0; t < n && st == KVC_OK; t += BLOCK) {
        int b = n - t < BLOCK ? (int)(n - t) : BLOCK;
        kvc_synth_kv(nkv, d, t0 + t, b, seed ^ ((uint64_t)layer * 0x9E3779B97F4A7C15ull), k, v);
        st = kvc_cache_append_n(c, layer, b, k, v, NULL);
    }
    free(k);
    free(v);
    return st;
}

/* Approximately standard normal from one 64-bit draw (sum of 4 uniforms, scaled). */
static float gauss(uint64_t r) {
    float s = 0.0f;
    for (int i = 0; i < 4; i++) s += (float)((r >> (16 * i)) & 0xffff) * (1.0f / 65536.0f);
    return (s - 2.0f) * 1.7320508f;
}

void kvc_synth_kv(int n_kv, int dim, int64_t t0, int64_t n, uint64_t seed, float *k, float *v) {
    for (int64_t t = 0; t < n; t++)
        for (int h = 0; h < n_kv; h++)
            for (int j = 0; j < dim; j++) {
                uint64_t base = kvc_rng_mix(seed ^ kvc_rng_mix(((uint64_t)(t0 + t) << 20) ^ ((uint64_t)h << 12) ^ (uint64_t)j));
                /* per-channel scale: a few outlier channels in K (as KIVI observes) */
                uint64_t ch = kvc_rng_mix(seed ^ 0x5bd1e995u ^ ((uint64_t)h << 12) ^ (uint64_t)j);
                float kscale = (ch & 15) == 0 ? 8.0f : 0.5f + (float)(ch >> 60) * 0.1f;
                size_t at = ((size_t)t * n_kv + h) * dim + j;
                if (k) k[at] = kscale * gauss(base);
                if (v) v[at] = gauss(kvc_rng_mix(base));
            }
}
