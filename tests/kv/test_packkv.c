/* The PackKV codecs and method (src/kv/codec/packkv.c, src/kv/method/packkv.c,
 * packkv_repack.c):
 *  - quantization error of every element within rel/2 of its token's range
 *    (plus 2 ulp of the element for the f32 reconstruction), codes <= 252;
 *  - bit-packing round-trips exactly: decode equals min + code * scale of the
 *    quantizer's own codes, for both layouts, packs of 8 and 16, ragged
 *    blocks, appends, widths 0..8;
 *  - a block of identical tokens, constant tokens (range 0) and a block with
 *    one huge outlier;
 *  - channel centers (center=k|v|kv): decode equals center + the quantizer's
 *    reconstruction of the centered token, the bound holds for the centered
 *    range, the centers are the f16 block medians of offset channels only;
 *    a bias channel (Qwen2's keys) no longer sets the error of the other
 *    channels, and one outlier token does not move its channel's center;
 *  - repacking returns a permutation, and the method applies the same one to
 *    K and V: decoded K row i and V row i are both token pos[i]'s;
 *  - greedy repacking never needs more residual bits than none on
 *    clustered tokens (it puts tokens of one cluster in one pack);
 *  - decode attention through the method equals the reference attention over
 *    the decoded cache, alone and with +h2o: relative L1 error of the whole
 *    output <= 1e-3 (the AVX-512 p.v rounds the weights to int16, 1/65534 of
 *    a block's largest; the other kernels differ in f32 sums only; a lost or
 *    misplaced token or block gives O(1e-1));
 *  - bad parameters are refused with messages that name them.
 * Kernel-by-kernel agreement of the SIMD kernels: test_packkv_kernels.c. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/f16.h"
#include "base/threadpool.h"
#include "kv/attend.h"
#include "kv/cache_impl.h"
#include "kv/codec/packkv.h"
#include "kv/method/packkv_repack.h"
#include "kv/synth.h"
#include "kvcomp.h"

#include "test_rng.h"
static float frand(void) { return (float)rnd() / 4294967296.0f * 2.0f - 1.0f; }

static float ulp(float x) { return nextafterf(fabsf(x), INFINITY) - fabsf(x); }

/* Every element of x within rel/2 of its token's range of its reconstruction. */
static void check_bound(const float *x, const float *y, int n, int dim, float rel) {
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * dim;
        float lo = xt[0], hi = xt[0];
        for (int c = 1; c < dim; c++) lo = fminf(lo, xt[c]), hi = fmaxf(hi, xt[c]);
        for (int c = 0; c < dim; c++) {
            double e = fabs((double)xt[c] - y[(size_t)t * dim + c]);
            double bound = rel / 2.0 * ((double)hi - lo) + 2.0 * ulp(xt[c]) + 2.0 * ulp(lo);
            if (!(e <= bound))
                fail_msg("token %d channel %d: %g vs %g, error %g > bound %g", t, c, xt[c],
                         y[(size_t)t * dim + c], e, bound);
        }
    }
}

static void test_quantization_bound(void **state) {
    (void)state;
    const float rels[] = {KVC_PK_MIN_REL, 0.01f, 0.1f, 0.2f, 0.37f, 1.0f};
    float x[96], y[96];
    uint8_t codes[96];
    for (int r = 0; r < 6; r++)
        for (int rep = 0; rep < 400; rep++) {
            float off = rep % 4 == 0 ? 1000.0f : rep % 4 == 1 ? -3e-3f : 0.0f;
            float mag = rep % 5 == 0 ? 1e-6f : rep % 5 == 1 ? 1e6f : 1.0f;
            for (int c = 0; c < 96; c++) x[c] = off + mag * frand() * (c == rep % 96 ? 50.0f : 1.0f);
            float mn;
            uint16_t sc;
            kvc_pk_quantize(x, 96, rels[r], &mn, &sc, codes);
            for (int c = 0; c < 96; c++) {
                assert_true(codes[c] <= 252);
                y[c] = fmaf((float)codes[c], kvc_bf16_to_f32(sc), mn);
            }
            check_bound(x, y, 1, 96, rels[r]);
        }
}

/* The rows of x minus their block's channel centers (a copy); centers_of
 * gets the centers of token t's block at [t * dim], has[t] whether the block
 * stores centers (cfg centers and some channel is an offset channel). */
static float *centered_copy(const kvc_pk_cfg *cfg, const float *x, int n, int dim, float *centers_of,
                            int *has) {
    float *y = malloc(sizeof(float) * (size_t)(n ? n : 1) * dim);
    uint16_t centers[KVC_PK_MAX_DIM];
    for (int t0 = 0; t0 < n; t0 += cfg->block) {
        int nb = n - t0 < cfg->block ? n - t0 : cfg->block;
        int h = cfg->center && kvc_pk_centers(x + (size_t)t0 * dim, nb, dim, dim, centers) > 0;
        for (int t = t0; t < t0 + nb; t++) {
            has[t] = h;
            for (int c = 0; c < dim; c++) {
                float m = h ? kvc_f16_to_f32(centers[c]) : 0.0f, xv = x[(size_t)t * dim + c];
                y[(size_t)t * dim + c] = h ? xv - m : xv;
                centers_of[(size_t)t * dim + c] = m;
            }
        }
    }
    return y;
}

/* Encodes x with one codec, checks decode == the quantizer's reconstruction
 * (of the centered rows, plus the centers, when cfg centers). */
static void roundtrip(const kvc_codec_ops *ops, const kvc_pk_cfg *cfg, const float *x, int n, int dim,
                      int split) {
    kvc_codec c = {.ops = ops, .dim = dim, .cfg = cfg};
    void *blob = NULL;
    int first = split < n ? split : n;
    assert_int_equal(ops->encode(&c, x, first, dim, &blob), KVC_OK);
    if (first < n) assert_int_equal(ops->append(&c, blob, x + (size_t)first * dim, n - first, dim), KVC_OK);
    assert_int_equal(ops->count(&c, blob), n);
    float *y = malloc(sizeof(float) * (size_t)(n ? n : 1) * dim);
    uint8_t *codes = malloc((size_t)dim);
    ops->decode(&c, blob, 0, n, y, dim);
    float *mid = malloc(sizeof(float) * (size_t)(n ? n : 1) * dim);
    int *has = malloc(sizeof(int) * (size_t)(n ? n : 1)), centered = 0;
    float *xc = centered_copy(cfg, x, n, dim, mid, has);
    float *r = calloc((size_t)(n ? n : 1) * dim, sizeof(float)); /* the quantizer's reconstruction */
    for (int t = 0; t < n; t++) {
        float mn;
        uint16_t sc;
        kvc_pk_quantize(xc + (size_t)t * dim, dim, cfg->rel, &mn, &sc, codes);
        for (int d = 0; d < dim; d++) {
            r[(size_t)t * dim + d] = fmaf((float)codes[d], kvc_bf16_to_f32(sc), mn);
            float want = r[(size_t)t * dim + d];
            if (has[t]) want += mid[(size_t)t * dim + d];
            if (memcmp(&want, &y[(size_t)t * dim + d], 4) != 0)
                fail_msg("%s n=%d dim=%d pack=%d block=%d: token %d channel %d: %g != %g", ops->name, n,
                         dim, cfg->pack, cfg->block, t, d, y[(size_t)t * dim + d], want);
        }
    }
    check_bound(xc, r, n, dim, cfg->rel); /* the bound holds for the centered values */
    free(r);
    if (n > 3) { /* a range inside */
        int b0 = n / 3, b1 = n - 1;
        ops->decode(&c, blob, b0, b1, y, dim);
        float *all = malloc(sizeof(float) * (size_t)n * dim);
        ops->decode(&c, blob, 0, n, all, dim);
        assert_memory_equal(y, all + (size_t)b0 * dim, sizeof(float) * (size_t)(b1 - b0) * dim);
        free(all);
    }
    uint64_t pay = 0, meta = 0;
    ops->bytes(&c, blob, &pay, &meta);
    assert_true(meta > 0);
    ops->free(&c, blob);
    free(y);
    free(codes);
    for (int t = 0; t < n; t++) centered += has[t];
    if (cfg->center && n && x[0] > 40.0f) assert_true(centered > 0); /* the offset test data */
    free(mid);
    free(xc);
    free(has);
}

static void test_bitpacking_roundtrip(void **state) {
    (void)state;
    const int dims[] = {1, 7, 64, 80, 128};
    const int ns[] = {0, 1, 15, 16, 64, 100, 257};
    const float rels[] = {KVC_PK_MIN_REL, 0.1f, 0.5f};
    for (int di = 0; di < 5; di++)
        for (int ni = 0; ni < 7; ni++)
            for (int pk = 8; pk <= 16; pk += 8) {
                int dim = dims[di], n = ns[ni];
                float *x = malloc(sizeof(float) * (size_t)(n ? n : 1) * dim);
                for (int i = 0; i < n * dim; i++) x[i] = frand() * ((i % 11) ? 1.0f : 9.0f) + 0.1f * (i / dim % 7);
                kvc_pk_cfg cfg = {.rel = rels[(di + ni) % 3], .block = pk * (1 + ni % 4), .pack = pk};
                for (cfg.center = 0; cfg.center <= 1; cfg.center++) {
                    roundtrip(&kvc_codec_packkv_k, &cfg, x, n, dim, n);
                    roundtrip(&kvc_codec_packkv_k, &cfg, x, n, dim, cfg.block); /* encode + append */
                    roundtrip(&kvc_codec_packkv_v, &cfg, x, n, dim, n);
                    roundtrip(&kvc_codec_packkv_v, &cfg, x, n, dim, cfg.block);
                    if (pk == 16 && dim % KVC_PK_KGROUP == 0) { /* grouped keys */
                        cfg.group = KVC_PK_KGROUP;
                        roundtrip(&kvc_codec_packkv_k, &cfg, x, n, dim, n);
                        roundtrip(&kvc_codec_packkv_k, &cfg, x, n, dim, cfg.block);
                        cfg.group = 1;
                    }
                    if (pk == 16 && dim % KVC_PK_VGROUP == 0) { /* grouped values */
                        cfg.group = KVC_PK_VGROUP;
                        roundtrip(&kvc_codec_packkv_v, &cfg, x, n, dim, n);
                        roundtrip(&kvc_codec_packkv_v, &cfg, x, n, dim, cfg.block);
                        cfg.group = 1;
                    }
                }
                for (int i = 0; i < n * dim; i++) /* offset channels: every third, from 50 up */
                    x[i] += i % dim % 3 ? 0.0f : 50.0f * (float)(1 + i % dim);
                for (cfg.center = 0; cfg.center <= 1; cfg.center++) {
                    roundtrip(&kvc_codec_packkv_k, &cfg, x, n, dim, cfg.block);
                    roundtrip(&kvc_codec_packkv_v, &cfg, x, n, dim, n);
                }
                free(x);
            }
}

/* Identical tokens, constant tokens, one huge outlier. */
static void test_degenerate_blocks(void **state) {
    (void)state;
    enum { N = 64, DIM = 48 };
    float x[N * DIM];
    kvc_pk_cfg cfg = {.rel = 0.1f, .block = 64, .pack = 16};
    for (int t = 0; t < N; t++) /* identical tokens: every pack has width 0 */
        for (int c = 0; c < DIM; c++) x[t * DIM + c] = sinf((float)c);
    roundtrip(&kvc_codec_packkv_k, &cfg, x, N, DIM, N);
    kvc_codec c = {.ops = &kvc_codec_packkv_k, .dim = DIM, .cfg = &cfg};
    void *blob;
    assert_int_equal(c.ops->encode(&c, x, N, DIM, &blob), KVC_OK);
    uint64_t pay, meta;
    c.ops->bytes(&c, blob, &pay, &meta);
    assert_int_equal(pay, 0);
    c.ops->free(&c, blob);
    for (int t = 0; t < N; t++) /* constant tokens (range 0): exact */
        for (int c2 = 0; c2 < DIM; c2++) x[t * DIM + c2] = 0.3f * t - 7.0f;
    float y[N * DIM];
    assert_int_equal(c.ops->encode(&c, x, N, DIM, &blob), KVC_OK);
    c.ops->decode(&c, blob, 0, N, y, DIM);
    assert_memory_equal(x, y, sizeof x);
    c.ops->free(&c, blob);
    for (int i = 0; i < N * DIM; i++) x[i] = frand();
    x[17 * DIM + 5] = 3e30f; /* one huge outlier: only its token's scale grows */
    x[40 * DIM + 9] = -FLT_MAX;
    roundtrip(&kvc_codec_packkv_v, &cfg, x, N, DIM, N);
    roundtrip(&kvc_codec_packkv_k, &cfg, x, N, DIM, N);
    assert_int_equal(c.ops->encode(&c, x, N, DIM, &blob), KVC_OK);
    c.ops->decode(&c, blob, 0, N, y, DIM);
    float e = 0;
    for (int i = 0; i < N * DIM; i++)
        if (i / DIM != 17 && i / DIM != 40) e = fmaxf(e, fabsf(x[i] - y[i]));
    assert_true(e <= 0.1f / 2 * 2.0f + 1e-6f); /* the other tokens keep their range of 2 */
    c.ops->free(&c, blob);
}

/* The centers are the f16 lower medians of the offset channels (|median| >
 * 2 x their spread) and 0 elsewhere; NaN counts as 0, magnitudes beyond f16
 * clamp, and an outlier token's spread keeps its channel uncentered. */
static void test_centers_of_offset_channels(void **state) {
    (void)state;
    enum { N = 9, DIM = 6 };
    float x[N * DIM];
    for (int t = 0; t < N; t++) {
        x[t * DIM + 0] = 100.0f + (float)((t * 5) % N); /* 100..108 shuffled: median 104 */
        x[t * DIM + 1] = t == 3 ? 1e30f : 100.0f + 0.25f * t; /* the outlier's spread */
        x[t * DIM + 2] = 1e6f + t;                    /* clamps to 65504 */
        x[t * DIM + 3] = t < 6 ? NAN : -2.0f;         /* six NaN (as 0), three -2: median 0 */
        x[t * DIM + 4] = 600.3f - 0.001f * t;         /* a bias: f16 of the median */
        x[t * DIM + 5] = (float)((t * 5) % N);        /* median 4, spread 8: not an offset */
    }
    uint16_t c[DIM];
    assert_int_equal(kvc_pk_centers(x, N, DIM, DIM, c), 3);
    assert_true(kvc_f16_to_f32(c[0]) == 104.0f);
    assert_true(c[1] == 0);
    assert_true(kvc_f16_to_f32(c[2]) == 65504.0f);
    assert_true(c[3] == 0);
    assert_true(c[4] == kvc_f32_to_f16(x[4 * DIM + 4]));
    assert_true(c[5] == 0);
    kvc_pk_centers(x, 2, DIM, DIM, c); /* even count: the lower of the two */
    assert_true(kvc_f16_to_f32(c[0]) == 100.0f);
}

/* Largest |x - decoded| over the channels c != skip of tokens t != skip_t. */
static float max_error(const kvc_pk_cfg *cfg, const float *x, int n, int dim, int skip_t) {
    kvc_codec c = {.ops = &kvc_codec_packkv_k, .dim = dim, .cfg = cfg};
    void *blob = NULL;
    float *y = malloc(sizeof(float) * (size_t)n * dim), e = 0;
    assert_int_equal(c.ops->encode(&c, x, n, dim, &blob), KVC_OK);
    c.ops->decode(&c, blob, 0, n, y, dim);
    for (int i = 0; i < n * dim; i++)
        if (i / dim != skip_t) e = fmaxf(e, fabsf(x[i] - y[i]));
    c.ops->free(&c, blob);
    free(y);
    return e;
}

/* Qwen2's layer-0 keys: one channel near 600 in every token, the others vary
 * by about 1. Token-wise scales without centers lose the small channels;
 * with centers the error follows their spread. One huge outlier token does
 * not move the centers the other tokens are coded against. */
static void test_centers_fix_a_bias_channel(void **state) {
    (void)state;
    enum { N = 128, DIM = 64 };
    float *x = malloc(sizeof(float) * N * DIM);
    for (int t = 0; t < N; t++)
        for (int c = 0; c < DIM; c++) x[t * DIM + c] = c == 7 ? 600.0f + 0.5f * frand() : frand();
    kvc_pk_cfg plain = {.rel = 0.1f, .block = 64, .pack = 16}, cen = plain;
    cen.center = 1;
    float e_plain = max_error(&plain, x, N, DIM, -1), e_cen = max_error(&cen, x, N, DIM, -1);
    assert_true(e_plain > 1.0f);           /* steps of 0.1 * 600: the small channels are lost */
    assert_true(e_cen <= 0.1f / 2 * 4.0f); /* centered ranges stay within 4 */
    x[17 * DIM + 3] = 3e30f;
    assert_true(max_error(&cen, x, N, DIM, 17) <= 0.1f / 2 * 4.0f);
    free(x);
}

static void check_perm(const int32_t *perm, int n) {
    uint8_t *seen = calloc((size_t)n + 1, 1);
    for (int i = 0; i < n; i++) {
        assert_true(perm[i] >= 0 && perm[i] < n);
        assert_false(seen[perm[i]]);
        seen[perm[i]] = 1;
    }
    free(seen);
}

static long packed_bits(const uint8_t *x, const int32_t *perm, int n, int d, int pack) {
    long bits = 0;
    for (int p0 = 0; p0 < n; p0 += pack)
        for (int k = 0; k < d; k++) {
            int lo = 255, hi = 0;
            for (int i = p0; i < p0 + pack && i < n; i++) {
                int v = x[(size_t)perm[i] * d + k];
                lo = v < lo ? v : lo;
                hi = v > hi ? v : hi;
            }
            bits += (long)pack * kvc_pk_width((unsigned)(hi - lo));
        }
    return bits;
}

static void test_repack_is_permutation(void **state) {
    (void)state;
    enum { D = 40 };
    uint8_t *x = malloc(256 * D);
    int32_t perm[256], ident[256];
    for (int i = 0; i < 256; i++) ident[i] = i;
    for (int n = 0; n <= 256; n += 37) {
        for (int t = 0; t < n; t++) /* 4 interleaved clusters */
            for (int k = 0; k < D; k++) x[t * D + k] = (uint8_t)(40 * (t % 4) + rnd() % 6);
        for (int how = KVC_PK_NONE; how <= KVC_PK_GREEDY; how++) {
            assert_int_equal(kvc_pk_repack_perm((kvc_pk_repack)how, x, n, D, D / 2, 16, perm), KVC_OK);
            check_perm(perm, n);
            if (how == KVC_PK_NONE) assert_memory_equal(perm, ident, sizeof(int32_t) * (size_t)n);
            if (how == KVC_PK_GREEDY && n >= 64)
                assert_true(packed_bits(x, perm, n, D, 16) < packed_bits(x, ident, n, D, 16));
        }
    }
    assert_int_equal(kvc_pk_repack_perm(KVC_PK_NONE, x, -1, D, 0, 16, perm), KVC_ERR_ARG);
    free(x);
}

enum { NL = 2, NH = 6, NKV = 2, D = 64, G = NH / NKV };

static kvc_cache *make(const char *spec, int max_tokens, kvc_pool *pool) {
    kvc_cache_shape sh = {.n_layers = NL, .n_heads = NH, .n_kv_heads = NKV, .head_dim = D,
                          .max_tokens = max_tokens};
    kvc_cache *c = NULL;
    if (kvc_cache_create(&sh, spec, pool, &c) != KVC_OK) fail_msg("%s: %s", spec, kvc_last_error());
    return c;
}

/* Decoded K row i and V row i of every chunk are token pos[i]'s reconstruction. */
static void test_same_permutation_for_k_and_v(void **state) {
    (void)state;
    /* no centers: the expected rows below are the quantizer's of the raw tokens
     * (centered chunks: test_attention_matches_reference) */
    const char *specs[] = {"packkv:repack=greedy,center=none",
                           "packkv:repack=vmedian,kblock=32,vblock=128,pack=8,center=none",
                           "packkv:repack=greedy,kblock=128,vblock=64,window=0,center=none"};
    int n = 700;
    float *k = malloc(sizeof(float) * n * NKV * D), *v = malloc(sizeof(float) * n * NKV * D);
    kvc_synth_kv(NKV, D, 0, n, 3, k, v);
    for (int si = 0; si < 3; si++) {
        kvc_cache *c = make(specs[si], n, NULL);
        assert_int_equal(kvc_cache_load(c, 0, n, k, v), KVC_OK);
        for (int h = 0; h < NKV; h++) {
            kvc_stream *s = kvc_cache_stream(c, 0, h);
            int permuted = 0;
            for (int ci = 0; ci < s->n_chunks; ci++) {
                kvc_chunk *ch = s->chunks[ci];
                assert_non_null(ch->pos);
                float *kd = malloc(sizeof(float) * ch->n * D), *vd = malloc(sizeof(float) * ch->n * D);
                assert_int_equal(kvc_chunk_decode(ch, 0, ch->n, kd, vd, D), KVC_OK);
                int32_t *perm = malloc(sizeof(int32_t) * ch->n);
                for (int i = 0; i < ch->n; i++) {
                    perm[i] = (int32_t)(ch->pos[i] - ch->pos0);
                    permuted += ch->pos[i] != ch->pos0 + i;
                    uint8_t codes[D];
                    float mn, want;
                    uint16_t sc;
                    float ko[D], vo[D]; /* the tokens as the f16 hot window held them */
                    for (int d = 0; d < D; d++) {
                        ko[d] = kvc_f16_to_f32(kvc_f32_to_f16(k[((size_t)ch->pos[i] * NKV + h) * D + d]));
                        vo[d] = kvc_f16_to_f32(kvc_f32_to_f16(v[((size_t)ch->pos[i] * NKV + h) * D + d]));
                    }
                    kvc_pk_quantize(ko, D, ((const kvc_pk_cfg *)ch->kc.cfg)->rel, &mn, &sc, codes);
                    for (int d = 0; d < D; d++) {
                        want = fmaf((float)codes[d], kvc_bf16_to_f32(sc), mn);
                        assert_memory_equal(&want, &kd[(size_t)i * D + d], 4);
                    }
                    kvc_pk_quantize(vo, D, ((const kvc_pk_cfg *)ch->vc.cfg)->rel, &mn, &sc, codes);
                    for (int d = 0; d < D; d++) {
                        want = fmaf((float)codes[d], kvc_bf16_to_f32(sc), mn);
                        assert_memory_equal(&want, &vd[(size_t)i * D + d], 4);
                    }
                }
                check_perm(perm, ch->n);
                free(perm);
                free(kd);
                free(vd);
            }
            assert_true(permuted > 0);
        }
        kvc_cache_free(c);
    }
    free(k);
    free(v);
}

static void expect_close(const float *a, const float *ref, int n, const char *what) {
    double e = 0, m = 0;
    for (int i = 0; i < n; i++) e += fabs((double)a[i] - ref[i]), m += fabs(ref[i]);
    if (!(e <= 1e-3 * m)) fail_msg("%s: mean error %g of mean magnitude %g", what, e / n, m / n);
}

static void check_matches_reference(const char *spec, int n_prefill, int n_decode) {
    kvc_pool *pool = NULL;
    assert_int_equal(kvc_pool_create(2, &pool), KVC_OK);
    int n = n_prefill + n_decode;
    kvc_cache *c = make(spec, n + 8, pool);
    float *k = malloc(sizeof(float) * n * NKV * D), *v = malloc(sizeof(float) * n * NKV * D);
    kvc_synth_kv(NKV, D, 0, n, 5, k, v);
    for (int i = 0; i < n * NKV * D; i++) /* offset channels, as Qwen2's biases give */
        k[i] += 30.0f * sinf((float)(i % D)), v[i] += 10.0f * cosf((float)(i % D));
    for (int layer = 0; layer < NL; layer++) {
        assert_int_equal(kvc_cache_load(c, layer, n_prefill, k, v), KVC_OK);
        for (int t = n_prefill; t < n; t++) {
            assert_int_equal(kvc_cache_append(c, layer, k + (size_t)t * NKV * D, v + (size_t)t * NKV * D), KVC_OK);
            if (t % 61 == 0 || t == n - 1) {
                float q[NH * D], o[NH * D], ref[NH * D];
                for (int i = 0; i < NH * D; i++) q[i] = frand() * 2.0f;
                for (int split = 0; split <= 3; split += 3) {
                    assert_int_equal(kvc_cache_attend_opts(c, layer, q, o, split), KVC_OK);
                    for (int h = 0; h < NKV; h++)
                        assert_int_equal(kvc_attend_reference(kvc_cache_stream(c, layer, h), q + h * G * D, G,
                                                              ref + h * G * D),
                                         KVC_OK);
                    expect_close(o, ref, NH * D, spec);
                }
            }
        }
    }
    kvc_cache_free(c);
    kvc_pool_free(pool);
    free(k);
    free(v);
}

static void test_attention_matches_reference(void **state) {
    (void)state;
    check_matches_reference("packkv", 700, 150);
    check_matches_reference("packkv:repack=none,pack=8,kblock=64,vblock=64", 333, 100);
    check_matches_reference("packkv:repack=greedy,krel=0.02,vrel=0.5,window=0", 400, 80);
    check_matches_reference("packkv:krel=1,vrel=0.004,kblock=128,vblock=32,pack=8", 500, 60);
    check_matches_reference("packkv+h2o:budget=0.5", 600, 100);
    check_matches_reference("packkv:center=k", 700, 150);
    check_matches_reference("packkv:layout=grouped", 700, 150);
    check_matches_reference("packkv:layout=grouped,repack=greedy,kblock=128,vblock=64,center=kv",
                            400, 80);
    check_matches_reference("packkv:layout=grouped,kblock=1024,vblock=512,window=0", 1100, 40);
    check_matches_reference("packkv:center=kv,repack=greedy,kblock=128,vblock=64,pack=8", 400, 80);
    check_matches_reference("packkv:center=v,window=0+h2o:budget=0.5", 600, 100);
}

static void expect_refused(const char *spec, const char *needle) {
    kvc_cache_shape sh = {.n_layers = 1, .n_heads = 2, .n_kv_heads = 1, .head_dim = D, .max_tokens = 64};
    kvc_cache *c = NULL;
    assert_int_equal(kvc_cache_create(&sh, spec, NULL, &c), KVC_ERR_ARG);
    assert_null(c);
    if (!strstr(kvc_last_error(), needle)) fail_msg("%s: message '%s' lacks '%s'", spec, kvc_last_error(), needle);
}

static void test_bad_parameters(void **state) {
    (void)state;
    expect_refused("packkv:pack=12", "pack=12");
    expect_refused("packkv:pack=4", "pack=4");
    expect_refused("packkv:kblock=40", "kblock=40");
    expect_refused("packkv:kblock=48,vblock=128", "multiple of the smaller");
    expect_refused("packkv:krel=0.001", "krel=0.001");
    expect_refused("packkv:vrel=1.5", "vrel=1.5");
    expect_refused("packkv:vrel=nan", "vrel=nan");
    expect_refused("packkv:repack=sorted", "none|vmedian|greedy");
    expect_refused("packkv:center=q", "none|k|v|kv");
    expect_refused("packkv:vblock=2048", "vblock=2048");
    expect_refused("packkv+kivi", "cannot be stacked");
    expect_refused("packkv:layout=packs", "paper|grouped");
    expect_refused("packkv:layout=grouped,pack=8", "layout=grouped needs pack=16");
    kvc_pk_cfg bad = {.rel = 0.1f, .block = 24, .pack = 16};
    kvc_codec c = {.ops = &kvc_codec_packkv_k, .dim = D, .cfg = &bad};
    void *blob = NULL;
    float x[D] = {0};
    assert_int_equal(c.ops->encode(&c, x, 1, D, &blob), KVC_ERR_ARG);
    assert_non_null(strstr(kvc_last_error(), "block=24"));
    bad.block = 32;
    assert_int_equal(c.ops->encode(&c, x, 1, D, &blob), KVC_OK);
    assert_int_equal(c.ops->append(&c, blob, x, 1, D), KVC_ERR_ARG); /* after a ragged block */
    assert_non_null(strstr(kvc_last_error(), "ragged"));
    c.ops->free(&c, blob);
    kvc_pk_cfg grouped = {.rel = 0.1f, .block = 32, .pack = 16, .group = KVC_PK_KGROUP};
    kvc_codec v = {.ops = &kvc_codec_packkv_v, .dim = D, .cfg = &grouped};
    assert_int_equal(v.ops->encode(&v, x, 1, D, &blob), KVC_ERR_ARG); /* values group 16 channels */
    assert_non_null(strstr(kvc_last_error(), "group=4"));
    kvc_codec odd = {.ops = &kvc_codec_packkv_k, .dim = 6, .cfg = &grouped};
    /* dim not a multiple of 4 */
    assert_int_equal(odd.ops->encode(&odd, x, 1, 6, &blob), KVC_ERR_ARG);
    assert_non_null(strstr(kvc_last_error(), "dim 6"));
    grouped.pack = 8;
    kvc_codec narrow = {.ops = &kvc_codec_packkv_k, .dim = D, .cfg = &grouped};
    assert_int_equal(narrow.ops->encode(&narrow, x, 1, D, &blob), KVC_ERR_ARG);
    assert_non_null(strstr(kvc_last_error(), "group=4"));
}

int main(void) {
    kvc_codecs_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantization_bound),
        cmocka_unit_test(test_bitpacking_roundtrip),
        cmocka_unit_test(test_degenerate_blocks),
        cmocka_unit_test(test_centers_of_offset_channels),
        cmocka_unit_test(test_centers_fix_a_bias_channel),
        cmocka_unit_test(test_repack_is_permutation),
        cmocka_unit_test(test_same_permutation_for_k_and_v),
        cmocka_unit_test(test_attention_matches_reference),
        cmocka_unit_test(test_bad_parameters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
