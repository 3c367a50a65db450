/* Method `kvmix` (the KVmix paper): per-layer mixed-precision KV quantization from a
 * gradient-based profile ("KV Importance Analysis"; file format and ranking
 * rule in kvmix_profile.c, profiler in `kvcomp profile`), with the quant
 * codecs of KIVI ("Asymmetric Low-Bit Quantization": K per channel in token
 * groups, V per token in channel groups, 1-4 bits, 3 bits as eq. 12's codes) and
 * the recent pivotal context ("Dynamic Pivotal Context Selection") kept dense.
 *
 * RPC (docs/methods.md, "kvmix"): the paper's num_RPC = floor(r * current_RPC)
 * with current_RPC = new tokens + historical RPC, applied at every decode step
 * as the reference code does, shrinks the dense window geometrically to about
 * group/(1-r) tokens within a few steps whatever r is, so r barely matters.
 * We implement the stated intent, "keep a fraction r of the recent context at
 * full precision, more for important layers": rpc=context keeps the newest
 * floor(r * T) of the T tokens seen dense. rpc=step is the reference's per-step
 * recurrence (window = floor(r * hot tokens) after each append), rpc=none the
 * paper's "w/o RPC" ablation. K and V share the stream's one hot window, so a
 * layer's window uses the larger of its K and V ratios; keys leave in whole
 * groups only (a partial group waits dense in every mode). */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "base/status.h"
#include "kv/codec/iquant.h"
#include "kv/method/kvmix_profile.h"
#include "kv/method/method.h"

enum { RPC_CONTEXT = 0, RPC_STEP = 1, RPC_NONE = 2 };

typedef struct kvmix_cfg {
    char profile[KVC_PARAM_STR_MAX];
    int group;
    int rpc;
} kvmix_cfg;

typedef struct kvmix_state {
    int n_layers, group, rpc;
    kvc_quant_cfg *kq, *vq; /* [n_layers] codec cfgs (chunks point into these) */
    float *ratio;           /* [n_layers] window ratio: max(k_rpc, v_rpc) */
} kvmix_state;

static const kvc_param kvmix_params[] = {
    {.key = "profile", .type = KVC_PARAM_STRING, .offset = offsetof(kvmix_cfg, profile), .def = "",
     .help = "layer profile from `kvcomp profile` (required; default model: profiles/smollm2.kvmix)"},
    {.key = "group", .type = KVC_PARAM_INT, .offset = offsetof(kvmix_cfg, group), .def = "32",
     .min = 1, .max = KVC_QUANT_MAX_N,
     .help = "K: tokens per per-channel group; V: channels per per-token group"},
    {.key = "rpc", .type = KVC_PARAM_ENUM, .offset = offsetof(kvmix_cfg, rpc), .def = "context",
     .choices = "context|step|none",
     .help = "dense recent window: ratio of all tokens | ratio of the window each step | none"},
};

static kvc_status kvmix_check(const void *cfg) {
    const kvmix_cfg *c = cfg;
    KVC_CHECK(c->profile[0] != '\0', KVC_ERR_ARG,
              "method kvmix: profile=PATH is required (make one with `kvcomp profile -m MODEL "
              "--text FILE -o PATH`; the default model's is profiles/smollm2.kvmix)");
    return KVC_OK;
}

static void kvmix_destroy(void *state) {
    kvmix_state *st = state;
    if (!st) return;
    free(st->kq);
    free(st->vq);
    free(st->ratio);
    free(st);
}

static kvc_status kvmix_create(const kvc_method_env *env, void **state) {
    const kvmix_cfg *cfg = env->cfg;
    KVC_TRY(kvmix_check(cfg));
    kvc_kvmix_profile *p;
    KVC_TRY(kvc_kvmix_profile_load(cfg->profile, &p));
    if (p->n_layers != env->n_layers) {
        kvc_status s = kvc_fail(KVC_ERR_ARG,
                                "method kvmix: profile %s has %d layers, the model has %d (profile "
                                "made for model '%s')",
                                cfg->profile, p->n_layers, env->n_layers, p->model);
        kvc_kvmix_profile_free(p);
        return s;
    }
    kvmix_state *st = calloc(1, sizeof *st);
    int n = env->n_layers;
    if (st) {
        st->kq = calloc((size_t)n, sizeof *st->kq);
        st->vq = calloc((size_t)n, sizeof *st->vq);
        st->ratio = calloc((size_t)n, sizeof *st->ratio);
    }
    if (!st || !st->kq || !st->vq || !st->ratio) {
        kvmix_destroy(st);
        kvc_kvmix_profile_free(p);
        return kvc_fail(KVC_ERR_NOMEM, "kvmix state (%d layers)", n);
    }
    st->n_layers = n;
    st->group = cfg->group;
    st->rpc = cfg->rpc;
    for (int i = 0; i < n; i++) {
        st->kq[i].bits = p->layer[i].k_bits;
        st->vq[i].bits = p->layer[i].v_bits;
        st->kq[i].kvmix3 = st->vq[i].kvmix3 = 1; /* eq. 12's 3-bit codes */
        st->kq[i].group = st->vq[i].group = cfg->group;
        st->ratio[i] = fmaxf(p->layer[i].k_rpc, p->layer[i].v_rpc);
    }
    kvc_kvmix_profile_free(p);
    *state = st;
    return KVC_OK;
}

/* Dense window target in tokens for the stream's layer, before group rounding. */
static int64_t window_target(const kvmix_state *st, const kvc_stream *s) {
    double r = st->ratio[s->layer];
    switch (st->rpc) {
    case RPC_CONTEXT: return (int64_t)floor(r * (double)s->n_pos);
    case RPC_STEP: return (int64_t)floor(r * (double)s->hot->n);
    default: return 0;
    }
}

static int kvmix_hot_leave(void *state, kvc_stream *s, void *sstate) {
    (void)sstate;
    const kvmix_state *st = state;
    int64_t excess = s->hot->n - window_target(st, s);
    if (excess < st->group) return 0;
    return (int)(excess - excess % st->group);
}

static kvc_status kvmix_build_chunk(void *state, kvc_stream *s, void *sstate, const float *k,
                                    const float *v, int n, int64_t pos0, kvc_chunk **out) {
    (void)sstate;
    const kvmix_state *st = state;
    kvc_codec kc, vc, unused;
    kvc_quant_codecs(&st->kq[s->layer], s->dim, &kc, &unused);
    kvc_quant_codecs(&st->vq[s->layer], s->dim, &unused, &vc);
    return kvc_chunk_encode(&kc, &vc, k, v, n, s->dim, pos0, NULL, NULL, out);
}

static const char *const kvmix_stacks[] = {"rot", "sinks", NULL};

const kvc_method kvc_method_kvmix = {
    .name = "kvmix",
    .summary = "per-layer K/V bits (1-4) and dense recent-context ratios from a gradient profile",
    .paper = "KVmix (Li et al., AAAI 2026)",
    .flags = KVC_METHOD_BASE | KVC_METHOD_KEYS_PER_CHANNEL,
    .params = kvmix_params,
    .n_params = (int)(sizeof kvmix_params / sizeof kvmix_params[0]),
    .positional = 0,
    .cfg_size = sizeof(kvmix_cfg),
    .stacks_with = kvmix_stacks,
    .check = kvmix_check,
    .ops = {
        .create = kvmix_create,
        .destroy = kvmix_destroy,
        .hot_leave = kvmix_hot_leave,
        .build_chunk = kvmix_build_chunk,
    },
};
