/* Method `packkv` (PackKV, Jiang et al., docs/methods.md): token-wise
 * quantization of K and V with relative scales krel / vrel, encode-aware
 * repacking of each sealed unit of tokens (packkv_repack.h) with ONE
 * permutation for K and V, and bit-packing in packs of `pack` tokens per
 * channel (codecs packkv_k / packkv_v, src/kv/codec/packkv.c) in independent
 * blocks of kblock (K) and vblock (V) tokens.
 *
 * Window policy (PackKV's fixed-size buffer): the newest tokens stay dense in
 * the hot window; once more than `window` are hot, whole units of
 * max(kblock, vblock) tokens leave it, so the window holds `window` to
 * `window + unit - 1` tokens. A unit is repacked as a whole (the larger block
 * size is a multiple of the smaller: a V block of 128 is two K blocks of 64
 * under the same permutation); the chunk's positions record the permutation
 * (none when repack=none). `center` subtracts the block medians of offset
 * channels before the token-wise quantization (packkv.h: a bias channel of
 * the keys otherwise sets every token's range); `layout=grouped` shares one
 * pack width among 4 key / 16 value channels for the integer byte kernels
 * (packkv.h). As a base it stacks with +h2o
 * (eviction; compaction re-encodes decoded rows, which re-quantizes them). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kv/codec/packkv.h"
#include "kv/method/method.h"
#include "kv/method/packkv_repack.h"

typedef struct packkv_cfg {
    float krel, vrel;
    int kblock, vblock;
    int pack;
    int repack; /* kvc_pk_repack */
    int window;
    int center; /* bit 0: keys centered, bit 1: values (none|k|v|kv) */
    int layout; /* LAYOUT_PAPER: a width per pack and channel, LAYOUT_GROUPED: per unit */
} packkv_cfg;

enum { CENTER_K = 1, CENTER_V = 2 }; /* the bits of `center` (none|k|v|kv) */
enum { LAYOUT_PAPER, LAYOUT_GROUPED };

typedef struct packkv_state {
    packkv_cfg cfg;
    kvc_pk_cfg k, v; /* codec parameters shared by every chunk */
    int unit;        /* tokens repacked together: max(kblock, vblock) */
} packkv_state;

static const kvc_param packkv_params[] = {
    {.key = "krel", .type = KVC_PARAM_FLOAT, .offset = offsetof(packkv_cfg, krel), .def = "0.1",
     .min = 0.004, .max = 1, .help = "K scale = krel * token range (error <= krel/2 of it)"},
    {.key = "vrel", .type = KVC_PARAM_FLOAT, .offset = offsetof(packkv_cfg, vrel), .def = "0.2",
     .min = 0.004, .max = 1, .help = "V scale = vrel * token range (error <= vrel/2 of it)"},
    {.key = "kblock", .type = KVC_PARAM_INT, .offset = offsetof(packkv_cfg, kblock), .def = "64",
     .min = 8, .max = KVC_PK_MAX_BLOCK, .help = "tokens per independent K block (multiple of pack)"},
    {.key = "vblock", .type = KVC_PARAM_INT, .offset = offsetof(packkv_cfg, vblock), .def = "128",
     .min = 8, .max = KVC_PK_MAX_BLOCK, .help = "tokens per independent V block (multiple of pack)"},
    {.key = "pack", .type = KVC_PARAM_INT, .offset = offsetof(packkv_cfg, pack), .def = "16",
     .min = 8, .max = 16, .help = "tokens per bit-packed pack of one channel: 8 or 16"},
    {.key = "repack", .type = KVC_PARAM_ENUM, .offset = offsetof(packkv_cfg, repack), .def = "none",
     .choices = "none|vmedian|greedy",
     .help = "token order inside a unit: none, V-median sort, greedy (Algorithm 1)"},
    {.key = "window", .type = KVC_PARAM_INT, .offset = offsetof(packkv_cfg, window), .def = "32",
     .min = 0, .max = 1 << 20, .help = "newest tokens kept dense (the buffer before sealing)"},
    {.key = "center", .type = KVC_PARAM_ENUM, .offset = offsetof(packkv_cfg, center), .def = "k",
     .choices = "none|k|v|kv",
     .help = "subtract the block medians of offset channels (f16) before quantizing: none, k, v, kv"},
    {.key = "layout", .type = KVC_PARAM_ENUM, .offset = offsetof(packkv_cfg, layout), .def = "paper",
     .choices = "paper|grouped",
     .help = "pack widths per pack and channel (paper), or per 4 key / 16 value channels (grouped: "
             "the integer byte kernels of AVX-512; pack=16)"},
};

static kvc_status packkv_check(const void *cfgp) {
    const packkv_cfg *c = cfgp;
    KVC_CHECK(c->pack == 8 || c->pack == 16, KVC_ERR_ARG, "method packkv: pack=%d (allowed 8 or 16)",
              c->pack);
    KVC_CHECK(c->kblock % c->pack == 0, KVC_ERR_ARG,
              "method packkv: kblock=%d is not a multiple of pack=%d", c->kblock, c->pack);
    KVC_CHECK(c->vblock % c->pack == 0, KVC_ERR_ARG,
              "method packkv: vblock=%d is not a multiple of pack=%d", c->vblock, c->pack);
    KVC_CHECK(c->layout == LAYOUT_PAPER || c->pack == 16, KVC_ERR_ARG,
              "method packkv: layout=grouped needs pack=16 (pack=%d)", c->pack);
    int lo = c->kblock < c->vblock ? c->kblock : c->vblock, hi = c->kblock ^ c->vblock ^ lo;
    KVC_CHECK(hi % lo == 0, KVC_ERR_ARG,
              "method packkv: kblock=%d and vblock=%d: the larger must be a multiple of the smaller "
              "(K and V share one permutation per unit)",
              c->kblock, c->vblock);
    return KVC_OK;
}

static kvc_status packkv_create(const kvc_method_env *env, void **state) {
    KVC_TRY(packkv_check(env->cfg));
    int grouped = ((const packkv_cfg *)env->cfg)->layout == LAYOUT_GROUPED;
    KVC_CHECK(!grouped || env->head_dim % KVC_PK_VGROUP == 0, KVC_ERR_ARG,
              "method packkv: layout=grouped needs a head dim that is a multiple of %d (head dim %d)",
              KVC_PK_VGROUP, env->head_dim);
    packkv_state *st = calloc(1, sizeof *st);
    if (!st) return kvc_fail(KVC_ERR_NOMEM, "packkv state");
    st->cfg = *(const packkv_cfg *)env->cfg;
    st->k = (kvc_pk_cfg){.rel = st->cfg.krel, .block = st->cfg.kblock, .pack = st->cfg.pack,
                         .center = (st->cfg.center & CENTER_K) != 0,
                         .group = grouped ? KVC_PK_KGROUP : 1};
    st->v = (kvc_pk_cfg){.rel = st->cfg.vrel, .block = st->cfg.vblock, .pack = st->cfg.pack,
                         .center = (st->cfg.center & CENTER_V) != 0,
                         .group = grouped ? KVC_PK_VGROUP : 1};
    st->unit = st->cfg.kblock > st->cfg.vblock ? st->cfg.kblock : st->cfg.vblock;
    kvc_status s = kvc_pk_cfg_check(&st->k, "method packkv (K)");
    if (s == KVC_OK) s = kvc_pk_cfg_check(&st->v, "method packkv (V)");
    if (s != KVC_OK) {
        free(st);
        return s;
    }
    *state = st;
    return KVC_OK;
}

static void packkv_destroy(void *state) { free(state); }

static int packkv_hot_leave(void *state, kvc_stream *s, void *sstate) {
    (void)sstate;
    const packkv_state *st = state;
    int excess = s->hot->n - st->cfg.window;
    return excess >= st->unit ? excess - excess % st->unit : 0;
}

/* The permutation of the n tokens of one unit from their K and V codes (each
 * side centered over the whole unit when its codec centers). */
static kvc_status unit_perm(const packkv_state *st, const float *k, const float *v, int n, int dim,
                            uint8_t *codes, int32_t *perm) {
    int d = 2 * dim;
    uint16_t centers[KVC_PK_MAX_DIM];
    kvc_pk_quantize_block(&st->k, k, n, dim, dim, centers, NULL, NULL, codes, d);
    kvc_pk_quantize_block(&st->v, v, n, dim, dim, centers, NULL, NULL, codes + dim, d);
    return kvc_pk_repack_perm((kvc_pk_repack)st->cfg.repack, codes, n, d, dim, st->cfg.pack, perm);
}

/* Permutes the tokens of every unit; pos gets their positions. */
static kvc_status repack_units(const packkv_state *st, const float *k, const float *v, int n, int dim,
                               int64_t pos0, float *kp, float *vp, int32_t *pos) {
    uint8_t *codes = malloc((size_t)st->unit * 2 * dim);
    int32_t *perm = malloc(sizeof *perm * (size_t)st->unit);
    kvc_status s = codes && perm ? KVC_OK : kvc_fail(KVC_ERR_NOMEM, "packkv: repack scratch (%d tokens)", st->unit);
    for (int u0 = 0; u0 < n && s == KVC_OK; u0 += st->unit) {
        int nu = n - u0 < st->unit ? n - u0 : st->unit;
        s = unit_perm(st, k + (size_t)u0 * dim, v + (size_t)u0 * dim, nu, dim, codes, perm);
        for (int i = 0; i < nu && s == KVC_OK; i++) {
            int src = u0 + perm[i];
            memcpy(kp + (size_t)(u0 + i) * dim, k + (size_t)src * dim, sizeof(float) * (size_t)dim);
            memcpy(vp + (size_t)(u0 + i) * dim, v + (size_t)src * dim, sizeof(float) * (size_t)dim);
            pos[u0 + i] = (int32_t)(pos0 + src);
        }
    }
    free(codes);
    free(perm);
    return s;
}

static kvc_status packkv_build_chunk(void *state, kvc_stream *s, void *sstate, const float *k,
                                     const float *v, int n, int64_t pos0, kvc_chunk **out) {
    (void)sstate;
    const packkv_state *st = state;
    kvc_codec kc = {.ops = &kvc_codec_packkv_k, .dim = s->dim, .cfg = &st->k};
    kvc_codec vc = {.ops = &kvc_codec_packkv_v, .dim = s->dim, .cfg = &st->v};
    if (st->cfg.repack == KVC_PK_NONE)
        return kvc_chunk_encode(&kc, &vc, k, v, n, s->dim, pos0, NULL, NULL, out);
    KVC_CHECK(pos0 + n <= INT32_MAX, KVC_ERR_RANGE, "packkv: position %lld beyond 32 bits",
              (long long)(pos0 + n));
    float *kp = malloc(sizeof(float) * (size_t)n * s->dim * 2);
    int32_t *pos = malloc(sizeof *pos * (size_t)(n ? n : 1));
    kvc_status r = kp && pos ? KVC_OK : kvc_fail(KVC_ERR_NOMEM, "packkv: %d permuted tokens", n);
    if (r == KVC_OK) r = repack_units(st, k, v, n, s->dim, pos0, kp, kp + (size_t)n * s->dim, pos);
    if (r == KVC_OK) r = kvc_chunk_encode(&kc, &vc, kp, kp + (size_t)n * s->dim, n, s->dim, pos0, pos, NULL, out);
    free(kp);
    free(pos);
    return r;
}

static const char *const packkv_stacks[] = {"h2o", "rot", "sinks", NULL};

const kvc_method kvc_method_packkv = {
    .name = "packkv",
    .summary = "token-wise relative quantization, repacking, bit-packing in packs; fused kernels",
    .paper = "PackKV (Jiang et al., LLM-aware lossy compression of the KV cache)",
    .flags = KVC_METHOD_BASE,
    .params = packkv_params,
    .n_params = (int)(sizeof packkv_params / sizeof packkv_params[0]),
    .positional = -1,
    .cfg_size = sizeof(packkv_cfg),
    .check = packkv_check,
    .stacks_with = packkv_stacks,
    .ops = {
        .create = packkv_create,
        .destroy = packkv_destroy,
        .hot_leave = packkv_hot_leave,
        .build_chunk = packkv_build_chunk,
    },
};
