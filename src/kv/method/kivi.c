/* Method `kivi` (KIVI, Liu et al. 2024; the baseline of KVmix, PackKV and
 * MUSTAFAR, docs/methods.md): asymmetric min/scale quantization at `bits` bits, keys per
 * channel in groups of `group` tokens, values per token in groups of `group`
 * channels (codecs quant_k / quant_v, src/kv/codec/quant.c); the newest tokens
 * stay dense in the hot window (KIVI's residual R = `window`).
 *
 * Window policy: tokens leave the hot window in whole key groups once more
 * than `window` tokens are hot, so the dense window holds between `window`
 * and `window + group - 1` tokens (KIVI keeps V's residual at exactly R and
 * K's between 0 and R; here K and V share one window, the larger of the two). */
#include <stddef.h>
#include <stdlib.h>

#include "base/status.h"
#include "kv/codec/iquant.h"
#include "kv/method/method.h"

typedef struct kivi_cfg {
    int bits;
    int group;
    int window;
} kivi_cfg;

typedef struct kivi_state {
    kivi_cfg cfg;
    kvc_quant_cfg q; /* shared by K and V codecs of every chunk */
} kivi_state;

static const kvc_param kivi_params[] = {
    {.key = "bits", .type = KVC_PARAM_INT, .offset = offsetof(kivi_cfg, bits), .def = "2",
     .min = 1, .max = 4, .help = "bits per quantized element (1, 2, 3 or 4)"},
    {.key = "group", .type = KVC_PARAM_INT, .offset = offsetof(kivi_cfg, group), .def = "32",
     .min = 1, .max = KVC_QUANT_MAX_N,
     .help = "K: tokens per per-channel group; V: channels per per-token group"},
    {.key = "window", .type = KVC_PARAM_INT, .offset = offsetof(kivi_cfg, window), .def = "32",
     .min = 0, .max = 1 << 20, .help = "newest tokens kept dense (KIVI's residual R)"},
};

static kvc_status kivi_create(const kvc_method_env *env, void **state) {
    kivi_state *st = calloc(1, sizeof *st);
    if (!st) return kvc_fail(KVC_ERR_NOMEM, "kivi state");
    st->cfg = *(const kivi_cfg *)env->cfg;
    st->q.bits = st->cfg.bits;
    st->q.group = st->cfg.group;
    kvc_status s = kvc_quant_cfg_check(&st->q);
    if (s != KVC_OK) {
        free(st);
        return s;
    }
    *state = st;
    return KVC_OK;
}

static void kivi_destroy(void *state) { free(state); }

static int kivi_hot_leave(void *state, kvc_stream *s, void *sstate) {
    (void)sstate;
    const kivi_state *st = state;
    int excess = s->hot->n - st->cfg.window;
    return excess >= st->cfg.group ? excess - excess % st->cfg.group : 0;
}

static kvc_status kivi_build_chunk(void *state, kvc_stream *s, void *sstate, const float *k,
                                   const float *v, int n, int64_t pos0, kvc_chunk **out) {
    (void)sstate;
    const kivi_state *st = state;
    kvc_codec kc, vc;
    kvc_quant_codecs(&st->q, s->dim, &kc, &vc);
    return kvc_chunk_encode(&kc, &vc, k, v, n, s->dim, pos0, NULL, NULL, out);
}

static const char *const kivi_stacks[] = {"rot", "sinks", NULL};

const kvc_method kvc_method_kivi = {
    .name = "kivi",
    .summary = "2/4-bit asymmetric quantization: K per channel, V per token, recent window dense",
    .paper = "KIVI (Liu et al., ICML 2024; baseline of KVmix, PackKV, MUSTAFAR)",
    /* a modifier too: "mustafar:...+kivi:bits=2" quantizes mustafar's kept values */
    .flags = KVC_METHOD_BASE | KVC_METHOD_MODIFIER | KVC_METHOD_KEYS_PER_CHANNEL,
    .params = kivi_params,
    .n_params = (int)(sizeof kivi_params / sizeof kivi_params[0]),
    .positional = -1,
    .cfg_size = sizeof(kivi_cfg),
    .stacks_with = kivi_stacks,
    .ops = {
        .create = kivi_create,
        .destroy = kivi_destroy,
        .hot_leave = kivi_hot_leave,
        .build_chunk = kivi_build_chunk,
    },
};
