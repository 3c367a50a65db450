/* The KVmix profiler (the KVmix paper, "KV Importance Analysis", steps 1-3 and eq.
 * 10-11; entry kvc_profile_kvmix in kvcomp_eval.h): prompts sampled from a
 * text (one random window per equal slice of the text, so prompts do not
 * overlap), forward + backward passes (backward.c) giving per-layer gradient
 * norms of W_k and W_v, averaged over prompts, ranked, turned into a profile
 * by the paper's rule (kvmix_profile.c) and written to a file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/blas.h"
#include "base/rng.h"
#include "base/status.h"
#include "kv/method/kvmix_profile.h"
#include "kvcomp/json.h"
#include "kvcomp/progress.h"
#include "kvcomp_eval.h"
#include "profile/backward.h"

static const double *rank_key;
static int by_desc(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    if (rank_key[i] != rank_key[j]) return rank_key[i] > rank_key[j] ? -1 : 1;
    return i - j;
}

static void report_text(FILE *f, const kvc_kvmix_profile *p, int n_prompts, int len, double loss,
                        double secs, const char *path) {
    int n = p->n_layers;
    int *ko = malloc(sizeof(int) * n), *vo = malloc(sizeof(int) * n);
    double *ks = malloc(sizeof(double) * n), *vs = malloc(sizeof(double) * n);
    if (!ko || !vo || !ks || !vs) goto done;
    for (int i = 0; i < n; i++) ko[i] = vo[i] = i, ks[i] = p->layer[i].k_score, vs[i] = p->layer[i].v_score;
    rank_key = ks;
    qsort(ko, (size_t)n, sizeof(int), by_desc);
    rank_key = vs;
    qsort(vo, (size_t)n, sizeof(int), by_desc);
    if (n_prompts > 0)
        fprintf(f, "KVmix profile of %s: %d prompts x %d tokens, mean loss %.4f, %.1f s\n", p->model,
                n_prompts, len, loss, secs);
    else fprintf(f, "KVmix profile of %s: %s\n", p->model, p->source);
    fprintf(f, "%4s  %7s %12s %4s %5s   %7s %12s %4s %5s\n", "rank", "K layer", "||dL/dWk||", "bits",
            "rpc", "V layer", "||dL/dWv||", "bits", "rpc");
    for (int r = 0; r < n; r++) {
        const kvc_kvmix_layer *K = &p->layer[ko[r]], *V = &p->layer[vo[r]];
        fprintf(f, "%4d  %7d %12.4e %4d %5.2f   %7d %12.4e %4d %5.2f\n", r + 1, ko[r], K->k_score,
                K->k_bits, (double)K->k_rpc, vo[r], V->v_score, V->v_bits, (double)V->v_rpc);
    }
    double kb, vb;
    kvc_kvmix_profile_avg_bits(p, &kb, &vb);
    fprintf(f, "average bits: K %.4f, V %.4f; wrote %s\n", kb, vb, path);
done:
    free(ko), free(vo), free(ks), free(vs);
}

static void report_json(FILE *f, const kvc_kvmix_profile *p, int n_prompts, int len, double loss,
                        double secs, const char *path) {
    kvc_json j;
    kvc_json_init(&j, f, 1);
    kvc_json_obj_begin(&j);
    kvc_json_kv_str(&j, "model", p->model);
    kvc_json_kv_str(&j, "source", p->source);
    kvc_json_kv_int(&j, "prompts", n_prompts);
    kvc_json_kv_int(&j, "prompt_tokens", len);
    kvc_json_kv_num(&j, "mean_loss", loss);
    kvc_json_kv_num(&j, "seconds", secs);
    kvc_json_kv_str(&j, "profile", path);
    double kb, vb;
    kvc_kvmix_profile_avg_bits(p, &kb, &vb);
    kvc_json_kv_num(&j, "avg_k_bits", kb);
    kvc_json_kv_num(&j, "avg_v_bits", vb);
    kvc_json_key(&j, "layers");
    kvc_json_arr_begin(&j);
    for (int i = 0; i < p->n_layers; i++) {
        const kvc_kvmix_layer *L = &p->layer[i];
        kvc_json_obj_begin(&j);
        kvc_json_kv_int(&j, "layer", i);
        kvc_json_kv_num(&j, "k_score", L->k_score);
        kvc_json_kv_num(&j, "v_score", L->v_score);
        kvc_json_kv_int(&j, "k_bits", L->k_bits);
        kvc_json_kv_int(&j, "v_bits", L->v_bits);
        kvc_json_kv_num(&j, "k_rpc", L->k_rpc);
        kvc_json_kv_num(&j, "v_rpc", L->v_rpc);
        kvc_json_obj_end(&j);
    }
    kvc_json_arr_end(&j);
    kvc_json_obj_end(&j);
    kvc_json_finish(&j);
}

kvc_status kvc_profile_kvmix(const kvc_model *m, const char *text, size_t len,
                             const kvc_profile_params *pp, const char *out_path, FILE *report,
                             int json) {
    KVC_CHECK(m && text && pp && out_path, KVC_ERR_ARG, "kvmix profile: NULL argument");
    int n_prompts = pp->n_prompts > 0 ? pp->n_prompts : 24;
    int plen = pp->prompt_len > 0 ? pp->prompt_len : 512;
    double top = pp->top_frac < 0 ? 0.2 : pp->top_frac;
    KVC_CHECK(top <= 1.0, KVC_ERR_ARG, "kvmix profile: top fraction %g above 1", top);
    KVC_CHECK(plen >= 8 && plen <= 8192, KVC_ERR_ARG,
              "kvmix profile: prompt length %d outside [8, 8192]", plen);
    KVC_CHECK(n_prompts <= 100000, KVC_ERR_ARG, "kvmix profile: %d prompts is too many", n_prompts);
    kvc_kvmix_rule rule = kvc_kvmix_rule_default(top);
    const kvc_config *c = &m->cfg;
    double t0 = kvc_now_s(), loss_sum = 0;
    kvc_kvmix_profile *prof = NULL;
    kvc_status st = KVC_OK;

    if (pp->random) {
        KVC_TRY(kvc_kvmix_profile_random(c->n_layers, &rule, pp->seed, m->name, &prof));
        n_prompts = 0;
    } else {
        KVC_CHECK(len <= (size_t)1 << 30, KVC_ERR_ARG, "kvmix profile: text of %zu bytes is too long", len);
        int n_tok = 0;
        KVC_TRY(kvc_tokenize(m, text, len, 0, 0, NULL, 0, &n_tok));
        int32_t bos = kvc_token_bos(m);
        int body = bos >= 0 ? plen - 1 : plen;
        KVC_CHECK(n_tok >= body, KVC_ERR_ARG,
                  "kvmix profile: the text has %d tokens, fewer than one prompt of %d (lower "
                  "--prompt-len or use a longer text)",
                  n_tok, plen);
        int32_t *toks = malloc(sizeof(int32_t) * (size_t)(n_tok > 0 ? n_tok : 1));
        int32_t *prompt = malloc(sizeof(int32_t) * (size_t)plen);
        double *ks = calloc((size_t)c->n_layers, sizeof(double)), *vs = calloc((size_t)c->n_layers, sizeof(double));
        double *kn = malloc(sizeof(double) * c->n_layers), *vn = malloc(sizeof(double) * c->n_layers);
        kvc_bwd *b = NULL;
        if (!toks || !prompt || !ks || !vs || !kn || !vn) st = kvc_fail(KVC_ERR_NOMEM, "kvmix profile");
        int got = 0;
        if (st == KVC_OK) st = kvc_tokenize(m, text, len, 0, 0, toks, n_tok, &got);
        if (st == KVC_OK) st = kvc_bwd_create(m, plen, &b);
        kvc_blas_set_threads(pp->n_threads); /* the passes are large sgemms */
        kvc_progress prog;
        kvc_progress_begin(&prog, "kvmix profile", n_prompts);
        uint64_t seed0 = pp->seed ? pp->seed : 0x6b766d6978ull, seed = seed0;
        for (int i = 0; st == KVC_OK && i < n_prompts; i++) {
            /* one window inside slice i of the text (slices overlap only when the text is short) */
            int64_t span = (int64_t)n_tok - body; /* possible starts: [0, span] */
            int64_t lo = span * i / n_prompts, hi = span * (i + 1) / n_prompts;
            int64_t off = lo + (int64_t)(kvc_rng_next(&seed) % (uint64_t)(hi - lo + 1));
            int np = 0;
            if (bos >= 0) prompt[np++] = bos;
            memcpy(prompt + np, toks + off, sizeof(int32_t) * (size_t)body);
            double loss;
            st = kvc_bwd_run(b, prompt, plen, &loss, kn, vn, -1, NULL, NULL);
            for (int l = 0; st == KVC_OK && l < c->n_layers; l++) ks[l] += kn[l], vs[l] += vn[l];
            loss_sum += loss;
            kvc_progress_update(&prog, i + 1);
        }
        kvc_progress_end(&prog);
        if (st == KVC_OK) {
            for (int l = 0; l < c->n_layers; l++) ks[l] /= n_prompts, vs[l] /= n_prompts;
            char src[KVC_KVMIX_TEXT_MAX];
            snprintf(src, sizeof src, "%s, %d prompts x %d tokens, seed %llu, mean loss %.4f",
                     pp->source ? pp->source : "text", n_prompts, plen, (unsigned long long)seed0,
                     loss_sum / n_prompts);
            st = kvc_kvmix_profile_from_scores(c->n_layers, ks, vs, &rule, m->name, src, &prof);
        }
        kvc_bwd_free(b);
        free(toks), free(prompt), free(ks), free(vs), free(kn), free(vn);
        if (st != KVC_OK) return st;
    }
    st = kvc_kvmix_profile_save(prof, out_path);
    double secs = kvc_now_s() - t0;
    if (st == KVC_OK && report) {
        double loss = n_prompts ? loss_sum / n_prompts : 0;
        if (json) report_json(report, prof, n_prompts, plen, loss, secs, out_path);
        else report_text(report, prof, n_prompts, plen, loss, secs, out_path);
    }
    kvc_kvmix_profile_free(prof);
    return st;
}
