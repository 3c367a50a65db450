/* Modifier `rot` (docs/methods.md "rot"): the cache of any quantizing or
 * pruning method in a randomized Hadamard space. Keys, values and queries are
 * mapped by x -> H·(s ⊙ x) (src/kv/xform/hadamard.c; H the orthonormal
 * Walsh-Hadamard matrix, block-diagonal when head_dim is not a power of two,
 * s random signs drawn per layer from `seed`) as they enter the cache, and
 * the attention output is mapped back once per step and head. Since the map
 * is orthonormal, attention is unchanged when the codec loses nothing; what
 * changes is what the codec sees: a channel outlier is spread over the whole
 * head, so per-group ranges are tighter (QuaRot, Ashkboos et al., NeurIPS
 * 2024, rotates its 4-bit KV cache the same way).
 *
 * With `smooth` > 0 (by default for kivi, kvmix and tuned) each KV head's
 * keys are also divided, and its queries multiplied, by per-channel weights
 * fitted to the stream's first prefill (hadamard.h): the spread of a key
 * channel is moved onto the query before the rotation mixes the channels.
 * Each (layer, KV head) has its own transform; the heads of a layer share
 * the signs.
 *
 * The whole stream lives in the rotated space (kvc_stream.xf), the dense hot
 * window included: every hook of the base method (ThinK's and MUSTAFAR's
 * per-channel query statistics among them) sees keys and queries in the one
 * space its chunks store. The seed is a parameter, so it is part of the
 * canonical spec of a run. */
#include <stddef.h>
#include <stdlib.h>

#include "base/status.h"
#include "kv/method/method.h"
#include "kv/xform/hadamard.h"

typedef struct rot_cfg {
    int seed;
    int sides;    /* index into "kv|k|v" */
    float smooth; /* exponent of the key weights fitted at the first prefill; 0: plain rotation; -1: by the base */
} rot_cfg;

/* smooth is -1 (the base decides) or an exponent in [0, 1]. */
static kvc_status rot_check(const void *cfgp) {
    const rot_cfg *cfg = cfgp;
    KVC_CHECK(cfg->smooth == -1.0f || cfg->smooth >= 0, KVC_ERR_ARG,
              "rot: smooth=%g is neither -1 (by the base method) nor in [0, 1]", (double)cfg->smooth);
    return KVC_OK;
}

/* The default exponent: 0.5 where the base quantizes keys per channel. A
 * per-token codec (MUSTAFAR's pruning, PackKV's token-wise codes) pays for a
 * key channel's constant offset, which the weights (fitted to the spread)
 * can enlarge: mustafar+rot with a = 0.5 had 10x the KL of the plain
 * rotation on SmolLM2-135M (docs/benchmarks.md "Smoothed rotation"). */
static float smooth_exponent(const rot_cfg *cfg, const kvc_method *base) {
    if (cfg->smooth >= 0) return cfg->smooth;
    return (base->flags & KVC_METHOD_KEYS_PER_CHANNEL) ? 0.5f : 0.0f;
}

static const kvc_param rot_params[] = {
    {.key = "seed", .type = KVC_PARAM_INT, .offset = offsetof(rot_cfg, seed), .def = "1", .min = 0,
     .max = 2147483647, .help = "seed of the random signs (drawn per layer)"},
    {.key = "sides", .type = KVC_PARAM_ENUM, .offset = offsetof(rot_cfg, sides), .def = "kv", .choices = "kv|k|v",
     .help = "what is rotated: keys and values, keys (and queries) only, values (and outputs) only"},
    {.key = "smooth", .type = KVC_PARAM_FLOAT, .offset = offsetof(rot_cfg, smooth), .def = "-1", .min = -1,
     .max = 1,
     .help = "exponent of the per-channel key weights (std(k)/rms(q))^a fitted to each stream's first prefill; "
             "0: none; -1: 0.5 for bases that quantize keys per channel (kivi, kvmix, tuned), else 0"},
};

/* The "kv|k|v" choice as the transform's side mask. */
static unsigned side_mask(int choice) {
    static const unsigned mask[] = {KVC_HADAMARD_K | KVC_HADAMARD_V, KVC_HADAMARD_K, KVC_HADAMARD_V};
    return mask[choice];
}

typedef struct rot_state {
    int n_layers, n_kv_heads;
    kvc_xform **xf; /* [n_layers][n_kv_heads]: the signs of the layer, the weights of the head */
} rot_state;

static void rot_destroy(void *state) {
    rot_state *st = state;
    if (!st) return;
    for (int i = 0; st->xf && i < st->n_layers * st->n_kv_heads; i++) kvc_xform_release(st->xf[i]);
    free(st->xf);
    free(st);
}

static kvc_status rot_create(const kvc_method_env *env, void **state) {
    const rot_cfg *cfg = env->cfg;
    rot_state *st = calloc(1, sizeof *st);
    if (!st) return kvc_fail(KVC_ERR_NOMEM, "rot state");
    st->n_layers = env->n_layers;
    st->n_kv_heads = env->n_kv_heads;
    int n = env->n_layers * env->n_kv_heads;
    st->xf = calloc((size_t)n, sizeof *st->xf);
    kvc_status s = st->xf ? KVC_OK : kvc_fail(KVC_ERR_NOMEM, "rot: %d rotations", n);
    for (int i = 0; i < n && s == KVC_OK; i++)
        s = kvc_hadamard_create(env->head_dim, side_mask(cfg->sides), (uint64_t)cfg->seed,
                                (uint64_t)(i / env->n_kv_heads), smooth_exponent(cfg, env->stack[0]), &st->xf[i]);
    if (s != KVC_OK) {
        rot_destroy(st);
        return s;
    }
    *state = st;
    return KVC_OK;
}

static kvc_xform *rot_stream_xform(void *state, int layer, int head) {
    const rot_state *st = state;
    if (layer < 0 || layer >= st->n_layers || head < 0 || head >= st->n_kv_heads) return NULL;
    return st->xf[layer * st->n_kv_heads + head];
}

const kvc_method kvc_method_rot = {
    .name = "rot",
    .summary = "randomized Hadamard rotation of K, V and queries (outliers spread before a codec)",
    .paper = "QuaRot (Ashkboos et al., NeurIPS 2024): Hadamard rotation before quantization",
    .flags = KVC_METHOD_MODIFIER,
    .params = rot_params,
    .n_params = (int)(sizeof rot_params / sizeof rot_params[0]),
    .positional = 0,
    .cfg_size = sizeof(rot_cfg),
    .check = rot_check,
    .ops = {
        .create = rot_create,
        .destroy = rot_destroy,
        .stream_xform = rot_stream_xform,
    },
};
