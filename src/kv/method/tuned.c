/* Method `tuned`: a different codec per layer and per K/V side, read from a
 * profile that `kvcomp tune` chose for a byte budget (format in
 * tuned_profile.h, the choice in src/eval/tune.c, docs/methods.md "tuned").
 *
 * Each side of a layer is dense (f32, f16) or KIVI's asymmetric quantization
 * at its own bits and group; the hot-window policy is KIVI's: the newest
 * `window` tokens stay dense (f16; `hot=f32` for tune's probes), older ones leave in whole key groups of
 * the stream's layer (the V group when the layer's keys are dense). So a
 * profile with every side q<b>g<g> is kivi:bits=<b>,group=<g> exactly: the
 * same codecs (integer kernels where kivi has them), the same chunks, the
 * same logits (tests/kv/test_tuned.c). Why a per-layer codec table and not a
 * sub-method per layer: every candidate is a codec on the shared
 * window policy, so one build_chunk choosing the codecs by s->layer is the
 * whole difference (docs/design-kv.md, "Per-layer codecs"). */
#include <stddef.h>
#include <stdlib.h>

#include "base/status.h"
#include "kv/codec/dense.h"
#include "kv/codec/iquant.h"
#include "kv/method/method.h"
#include "kv/method/tuned_profile.h"

typedef struct tuned_cfg {
    char profile[KVC_PARAM_STR_MAX];
    int window;
    int hot; /* enum index: f32, f16 (KVC_DENSE_F32, KVC_DENSE_F16) */
} tuned_cfg;

/* One side of one layer: a dense type or a quant cfg (chunks point into it). */
typedef struct side {
    int dense; /* 0: quantized; else KVC_DENSE_F32 + 1 or KVC_DENSE_F16 + 1 */
    kvc_quant_cfg q;
} side;

typedef struct tuned_state {
    int n_layers, window, hot;
    side *k, *v;  /* [n_layers] */
    int *leave;   /* [n_layers] tokens leave the window in multiples of this */
} tuned_state;

static const kvc_param tuned_params[] = {
    {.key = "profile", .type = KVC_PARAM_STRING, .offset = offsetof(tuned_cfg, profile), .def = "",
     .help = "per-layer K/V codec profile from `kvcomp tune` (required)"},
    {.key = "window", .type = KVC_PARAM_INT, .offset = offsetof(tuned_cfg, window), .def = "32",
     .min = 0, .max = 1 << 20, .help = "newest tokens kept dense (as kivi's window)"},
    {.key = "hot", .type = KVC_PARAM_ENUM, .offset = offsetof(tuned_cfg, hot), .def = "f16",
     .choices = "f32|f16", .help = "type of the dense window (f32: tune's probes, exact but for the probed side)"},
};

static kvc_status tuned_check(const void *cfg) {
    const tuned_cfg *c = cfg;
    KVC_CHECK(c->profile[0] != '\0', KVC_ERR_ARG,
              "method tuned: profile=PATH is required (make one with `kvcomp tune -m MODEL "
              "--text FILE --budget BITS -o PATH`)");
    return KVC_OK;
}

static void tuned_destroy(void *state) {
    tuned_state *st = state;
    if (!st) return;
    free(st->k);
    free(st->v);
    free(st->leave);
    free(st);
}

static side side_of(kvc_tuned_codec c) {
    side s = {0, {c.bits, c.group, 0}}; /* KIVI's plain codes */
    if (c.bits == 32) s.dense = KVC_DENSE_F32 + 1;
    else if (c.bits == 16) s.dense = KVC_DENSE_F16 + 1;
    return s;
}

static kvc_status tuned_create(const kvc_method_env *env, void **state) {
    const tuned_cfg *cfg = env->cfg;
    KVC_TRY(tuned_check(cfg));
    kvc_tuned_profile *p;
    KVC_TRY(kvc_tuned_profile_load(cfg->profile, &p));
    if (p->n_layers != env->n_layers) {
        kvc_status s = kvc_fail(KVC_ERR_ARG,
                                "method tuned: profile %s has %d layers, the model has %d (profile "
                                "made for model '%s')",
                                cfg->profile, p->n_layers, env->n_layers, p->model);
        kvc_tuned_profile_free(p);
        return s;
    }
    const int n = env->n_layers;
    tuned_state *st = calloc(1, sizeof *st);
    if (st) {
        st->k = calloc((size_t)n, sizeof *st->k);
        st->v = calloc((size_t)n, sizeof *st->v);
        st->leave = calloc((size_t)n, sizeof *st->leave);
    }
    if (!st || !st->k || !st->v || !st->leave) {
        tuned_destroy(st);
        kvc_tuned_profile_free(p);
        return kvc_fail(KVC_ERR_NOMEM, "tuned state (%d layers)", n);
    }
    st->n_layers = n;
    st->window = cfg->window;
    st->hot = cfg->hot;
    for (int i = 0; i < n; i++) {
        st->k[i] = side_of(p->layer[i].k);
        st->v[i] = side_of(p->layer[i].v);
        st->leave[i] = !st->k[i].dense ? st->k[i].q.group : !st->v[i].dense ? st->v[i].q.group : 32;
    }
    kvc_tuned_profile_free(p);
    *state = st;
    return KVC_OK;
}

static int tuned_hot_type(void *state) { return ((const tuned_state *)state)->hot; }

static int tuned_hot_leave(void *state, kvc_stream *s, void *sstate) {
    (void)sstate;
    const tuned_state *st = state;
    int g = st->leave[s->layer], excess = s->hot->n - st->window;
    return excess >= g ? excess - excess % g : 0;
}

/* The codec of one side: kivi's choice (integer layouts where they apply). */
static kvc_codec side_codec(const side *sd, int dim, int is_v) {
    if (sd->dense) return (kvc_codec){.ops = kvc_codec_dense((kvc_dense_type)(sd->dense - 1)), .dim = dim};
    kvc_codec k, v;
    kvc_quant_codecs(&sd->q, dim, &k, &v);
    return is_v ? v : k;
}

static kvc_status tuned_build_chunk(void *state, kvc_stream *s, void *sstate, const float *k,
                                    const float *v, int n, int64_t pos0, kvc_chunk **out) {
    (void)sstate;
    const tuned_state *st = state;
    kvc_codec kc = side_codec(&st->k[s->layer], s->dim, 0);
    kvc_codec vc = side_codec(&st->v[s->layer], s->dim, 1);
    KVC_TRY(kvc_chunk_encode(&kc, &vc, k, v, n, s->dim, pos0, NULL, NULL, out));
    if (st->k[s->layer].dense) kvc_dense_trim(&(*out)->kc, (*out)->kb); /* sealed: no spare rows */
    if (st->v[s->layer].dense) kvc_dense_trim(&(*out)->vc, (*out)->vb);
    return KVC_OK;
}

static const char *const tuned_stacks[] = {"rot", NULL};

const kvc_method kvc_method_tuned = {
    .name = "tuned",
    .summary = "a codec per layer and K/V side (dense, or KIVI at 1-4 bits and any group) from `kvcomp tune`",
    .paper = "",
    .flags = KVC_METHOD_BASE | KVC_METHOD_KEYS_PER_CHANNEL,
    .params = tuned_params,
    .n_params = (int)(sizeof tuned_params / sizeof tuned_params[0]),
    .positional = 0,
    .cfg_size = sizeof(tuned_cfg),
    .check = tuned_check,
    .stacks_with = tuned_stacks,
    .ops = {
        .create = tuned_create,
        .destroy = tuned_destroy,
        .hot_type = tuned_hot_type,
        .hot_leave = tuned_hot_leave,
        .build_chunk = tuned_build_chunk,
    },
};
