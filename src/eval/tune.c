/* `kvcomp tune` (include/kvcomp/tune.h; docs/methods.md "tuned"): the
 * sensitivity pass and the budgeted choice of per-layer K/V codecs.
 *
 * Sensitivity. The calibration window is n_ctx context tokens and n_cont
 * scored tokens. The exact reference (full:f32) prefills the context once,
 * with an observer saving every layer's post-RoPE K/V, then runs the scored
 * tokens as one chunk and keeps their logits. Each probe (layer, side,
 * candidate) is a `tuned` cache whose sides are all f32 except that one:
 * the saved K/V go in without running the model (kvc_ctx_append_kv), the
 * scored tokens run as one chunk attending to them, and the probe's cost is
 * the mean KL(base || probe) over the scored tokens, where base is the
 * all-f32 tuned cache (dense window f32 too) fed the same way. Not against
 * full:f32's logits: attention over a cache cut into chunks differs from
 * full's one dense block by a KL of 0.004 (SmolLM2) to 0.009 (Qwen2.5-1.5B)
 * here, more than most single-side effects; subtracting it (the first
 * version) hid every effect below it, and the choice then took those sides
 * as free (docs/benchmarks.md, "kvcomp tune and the frontier"). Against the
 * base the path's own difference cancels. So a
 * probe costs one n_cont-token chunk through the model, not a prefill of
 * the context. The saved K/V are the exact ones: what the probe measures is
 * the codec's error as the scored tokens see it, not its accumulation
 * through a compressed prefill (eval kl measures that).
 *
 * Choice. With the KL of the sides taken as additive, minimising the sum
 * within a mean bits-per-element budget is a multiple-choice knapsack: one
 * candidate per side, costs the codec's bits per element. It is solved
 * exactly by dynamic programming over the total cost in 1/64-bit units
 * (costs rounded up, so the budget holds): 2 x layers items x a few
 * candidates x (budget x 2 x layers x 64) states, milliseconds. A Lagrangian
 * (per side argmin kl + lambda x bits, lambda bisected) reaches only the
 * convex hull of the trade-off and may leave budget unused; the exact
 * solution costs nothing more here. */
#define _GNU_SOURCE
#include "kvcomp/tune.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"
#include "kv/method/tuned_profile.h"
#include "kvcomp/json.h"
#include "kvcomp/metrics.h"
#include "kvcomp/progress.h"

enum { MAX_CAND = 16, UNITS_PER_BIT = 64, COST_TOKENS = 4096 };

/* ---- the choice ----------------------------------------------------------------- */

kvc_status kvc_tune_choose(int n_items, int n_cand, const double *kl, const double *bits,
                           double budget_bits, int *choice) {
    KVC_CHECK(n_items >= 1 && n_cand >= 1 && n_cand <= 255, KVC_ERR_ARG,
              "tune: %d sides, %d candidates", n_items, n_cand);
    int min_units = 0;
    int *cost = malloc(sizeof(int) * (size_t)n_items * n_cand);
    KVC_CHECK(cost, KVC_ERR_NOMEM, "tune: costs");
    for (int i = 0; i < n_items; i++) {
        int lo = -1;
        for (int c = 0; c < n_cand; c++) {
            int u = (int)ceil(bits[i * n_cand + c] * UNITS_PER_BIT - 1e-9);
            cost[i * n_cand + c] = u;
            if (lo < 0 || u < lo) lo = u;
        }
        min_units += lo;
    }
    const double cap_d = floor(budget_bits * n_items * UNITS_PER_BIT + 1e-9);
    if (!(cap_d >= min_units)) {
        free(cost);
        return kvc_fail(KVC_ERR_RANGE,
                        "tune: budget %g bits per element is below the cheapest choice of every "
                        "side (%.4f bits per element)",
                        budget_bits, (double)min_units / UNITS_PER_BIT / n_items);
    }
    /* at most what every side's dearest candidate needs */
    int max_units = 0;
    for (int i = 0; i < n_items; i++) {
        int hi = 0;
        for (int c = 0; c < n_cand; c++) hi = cost[i * n_cand + c] > hi ? cost[i * n_cand + c] : hi;
        max_units += hi;
    }
    const int cap = cap_d < max_units ? (int)cap_d : max_units;
    /* dp[u]: least KL of the sides so far within total cost u; pick[i][u] its choice */
    double *dp = malloc(sizeof(double) * (size_t)(cap + 1));
    double *nx = malloc(sizeof(double) * (size_t)(cap + 1));
    unsigned char *pick = malloc((size_t)n_items * (size_t)(cap + 1));
    kvc_status st = dp && nx && pick ? KVC_OK : kvc_fail(KVC_ERR_NOMEM, "tune: knapsack of %d units", cap);
    for (int u = 0; st == KVC_OK && u <= cap; u++) dp[u] = 0;
    for (int i = 0; st == KVC_OK && i < n_items; i++) {
        for (int u = 0; u <= cap; u++) {
            double best = INFINITY;
            int bc = 0;
            for (int c = 0; c < n_cand; c++) {
                int w = cost[i * n_cand + c];
                if (w > u || !isfinite(dp[u - w])) continue;
                double v = dp[u - w] + kl[i * n_cand + c];
                if (v < best) best = v, bc = c;
            }
            nx[u] = best;
            pick[(size_t)i * (cap + 1) + u] = (unsigned char)bc;
        }
        double *t = dp;
        dp = nx, nx = t;
    }
    for (int i = n_items - 1, u = cap; st == KVC_OK && i >= 0; i--) { /* walk back */
        choice[i] = pick[(size_t)i * (cap + 1) + u];
        u -= cost[i * n_cand + choice[i]];
    }
    free(cost), free(dp), free(nx), free(pick);
    return st;
}

/* ---- the sensitivity pass ------------------------------------------------------- */

typedef struct saved_kv {
    float *k, *v; /* [n_layers][n][kvd] */
    int n, kvd;
} saved_kv;

static void save_kv(void *user, int layer, int pos0, int n, const float *k, const float *v) {
    saved_kv *s = user;
    for (int i = 0; i < n; i++) {
        if (pos0 + i >= s->n) continue; /* the scored chunk */
        size_t off = ((size_t)layer * s->n + pos0 + i) * s->kvd;
        memcpy(s->k + off, k + (size_t)i * s->kvd, sizeof(float) * s->kvd);
        memcpy(s->v + off, v + (size_t)i * s->kvd, sizeof(float) * s->kvd);
    }
}

typedef struct tune_run {
    kvc_model *m;
    const kvc_tune_params *p;
    kvc_model_info info;
    const int32_t *ctx_tok, *cont_tok;
    saved_kv kv;
    float *ref_lp, *logits, *lp; /* [n_cont][nv], [n_cont][nv], [nv] */
    char path[64];               /* the probe's profile file */
} tune_run;

static kvc_status make_ctx(const tune_run *r, const char *spec, kvc_ctx **ctx) {
    kvc_ctx_params cp = {.n_ctx = r->p->n_ctx + r->p->n_cont, .n_threads = r->p->n_threads,
                         .n_batch = r->p->n_batch, .kv_spec = spec};
    return kvc_ctx_create(r->m, &cp, ctx);
}

static kvc_status reference(tune_run *r) {
    kvc_ctx *ctx;
    KVC_TRY(make_ctx(r, "full:f32", &ctx));
    kvc_ctx_set_kv_observer(ctx, save_kv, &r->kv);
    kvc_status st = kvc_ctx_prefill(ctx, r->ctx_tok, r->p->n_ctx, NULL);
    if (st == KVC_OK) st = kvc_ctx_prefill_all(ctx, r->cont_tok, r->p->n_cont, r->logits);
    kvc_ctx_free(ctx);
    const size_t nv = (size_t)r->info.n_vocab;
    for (int i = 0; st == KVC_OK && i < r->p->n_cont; i++)
        kvc_log_softmax(r->logits + i * nv, (int)nv, r->ref_lp + i * nv);
    return st;
}

/* Mean KL over the scored tokens of a tuned cache with profile prof. */
static kvc_status probe(tune_run *r, const kvc_tuned_profile *prof, double *kl) {
    KVC_TRY(kvc_tuned_profile_save(prof, r->path));
    char spec[192];
    snprintf(spec, sizeof spec, "tuned:profile=%s,window=%d,hot=f32%s", r->path, r->p->window,
             r->p->rot ? "+rot" : "");
    kvc_ctx *ctx;
    KVC_TRY(make_ctx(r, spec, &ctx));
    kvc_status st = kvc_ctx_append_kv(ctx, r->ctx_tok, r->p->n_ctx, r->kv.k, r->kv.v);
    if (st == KVC_OK) st = kvc_ctx_prefill_all(ctx, r->cont_tok, r->p->n_cont, r->logits);
    kvc_ctx_free(ctx);
    const size_t nv = (size_t)r->info.n_vocab;
    double sum = 0;
    for (int i = 0; st == KVC_OK && i < r->p->n_cont; i++) {
        kvc_log_softmax(r->logits + i * nv, (int)nv, r->lp);
        sum += kvc_kl_logprobs(r->ref_lp + i * nv, r->lp, (int)nv);
    }
    *kl = sum / r->p->n_cont;
    return st;
}

/* kl[(layer * 2 + side) * nc + c] for every probe against the all-f32 cache;
 * *base that cache's KL against full:f32 (reported). */
static kvc_status sensitivity(tune_run *r, const kvc_tuned_codec *cand, int nc, double *kl,
                              double *base) {
    const int L = r->info.n_layers;
    const size_t nv = (size_t)r->info.n_vocab;
    kvc_tuned_profile *prof;
    KVC_TRY(kvc_tuned_profile_uniform(L, (kvc_tuned_codec){32, 0}, &prof));
    kvc_status st = probe(r, prof, base);
    for (int i = 0; st == KVC_OK && i < r->p->n_cont; i++) /* the base becomes the reference */
        kvc_log_softmax(r->logits + i * nv, (int)nv, r->ref_lp + i * nv);
    kvc_progress pg;
    kvc_progress_begin(&pg, "tune", (int64_t)L * 2 * nc * r->p->n_cont);
    for (int l = 0; st == KVC_OK && l < L; l++)
        for (int side = 0; st == KVC_OK && side < 2; side++)
            for (int c = 0; st == KVC_OK && c < nc; c++) {
                kvc_tuned_codec *sd = side ? &prof->layer[l].v : &prof->layer[l].k;
                *sd = cand[c];
                double d = 0;
                st = probe(r, prof, &d);
                *sd = (kvc_tuned_codec){32, 0};
                kl[(l * 2 + side) * nc + c] = d;
                kvc_progress_update(&pg, (int64_t)((l * 2 + side) * nc + c + 1) * r->p->n_cont);
            }
    kvc_progress_end(&pg);
    kvc_tuned_profile_free(prof);
    return st;
}

/* ---- report --------------------------------------------------------------------- */

/* The choice for one budget. */
typedef struct tune_pick {
    double budget, predicted, mean_bits;
    int *choice; /* [2 * layers] */
    char path[1024];
} tune_pick;

typedef struct tune_result {
    const kvc_tuned_codec *cand;
    int nc;
    const double *kl, *bits;
    double base, seconds;
    tune_pick *pick;
    int n_pick;
} tune_result;

static void report_text(FILE *f, const tune_run *r, const tune_result *t) {
    const int L = r->info.n_layers;
    fprintf(f, "kvcomp tune: %s, %d layers; calibration tokens %d..%d (%d context + %d scored); "
               "%d probes in %.1f s\n",
            r->info.name, L, r->p->offset, r->p->offset + r->p->n_ctx + r->p->n_cont - 1,
            r->p->n_ctx, r->p->n_cont, 2 * L * t->nc + 1, t->seconds);
    fprintf(f, "KL of each side alone against the all-f32 cache (which has KL %.3g against "
               "full:f32); the letters mark the choice for budget a, b, ...\n", t->base);
    fprintf(f, "%5s %4s", "layer", "side");
    char nm[KVC_TUNED_CODEC_NAME];
    for (int c = 0; c < t->nc; c++) {
        kvc_tuned_codec_name(t->cand[c], nm);
        fprintf(f, " %10s %-*s", nm, t->n_pick, "");
    }
    fprintf(f, "\n");
    for (int i = 0; i < 2 * L; i++) {
        fprintf(f, "%5d %4s", i / 2, i % 2 ? "V" : "K");
        for (int c = 0; c < t->nc; c++) {
            fprintf(f, " %10.3e ", t->kl[i * t->nc + c]);
            for (int b = 0; b < t->n_pick; b++) fputc(t->pick[b].choice[i] == c ? 'a' + b : ' ', f);
        }
        fprintf(f, "\n");
    }
    for (int b = 0; b < t->n_pick; b++)
        fprintf(f, "%c: budget %.4g bits per element: chosen %.4f (codecs, before the dense "
                   "window), predicted KL %.4g (sum over sides); wrote %s\n",
                'a' + b, t->pick[b].budget, t->pick[b].mean_bits, t->pick[b].predicted,
                t->pick[b].path);
}

static void report_json(FILE *f, const tune_run *r, const tune_result *t) {
    kvc_json j;
    kvc_json_init(&j, f, 1);
    kvc_json_obj_begin(&j);
    kvc_json_kv_str(&j, "model", r->info.name);
    kvc_json_kv_int(&j, "offset", r->p->offset);
    kvc_json_kv_int(&j, "ctx", r->p->n_ctx);
    kvc_json_kv_int(&j, "cont", r->p->n_cont);
    kvc_json_kv_num(&j, "seconds", t->seconds);
    kvc_json_kv_num(&j, "base_kl", t->base);
    kvc_json_key(&j, "candidates");
    kvc_json_arr_begin(&j);
    char nm[KVC_TUNED_CODEC_NAME];
    for (int c = 0; c < t->nc; c++) {
        kvc_tuned_codec_name(t->cand[c], nm);
        kvc_json_str(&j, nm);
    }
    kvc_json_arr_end(&j);
    kvc_json_key(&j, "profiles");
    kvc_json_arr_begin(&j);
    for (int b = 0; b < t->n_pick; b++) {
        kvc_json_obj_begin(&j);
        kvc_json_kv_num(&j, "budget_bits", t->pick[b].budget);
        kvc_json_kv_num(&j, "chosen_bits", t->pick[b].mean_bits);
        kvc_json_kv_num(&j, "predicted_kl", t->pick[b].predicted);
        kvc_json_kv_str(&j, "profile", t->pick[b].path);
        kvc_json_obj_end(&j);
    }
    kvc_json_arr_end(&j);
    kvc_json_key(&j, "sides"); /* the sensitivity matrix: per side, KL and bits per candidate */
    kvc_json_arr_begin(&j);
    for (int i = 0; i < 2 * r->info.n_layers; i++) {
        kvc_json_obj_begin(&j);
        kvc_json_kv_int(&j, "layer", i / 2);
        kvc_json_kv_str(&j, "side", i % 2 ? "v" : "k");
        kvc_json_key(&j, "kl");
        kvc_json_arr_begin(&j);
        for (int c = 0; c < t->nc; c++) kvc_json_num(&j, t->kl[i * t->nc + c]);
        kvc_json_arr_end(&j);
        kvc_json_key(&j, "bits");
        kvc_json_arr_begin(&j);
        for (int c = 0; c < t->nc; c++) kvc_json_num(&j, t->bits[i * t->nc + c]);
        kvc_json_arr_end(&j);
        kvc_json_obj_end(&j);
    }
    kvc_json_arr_end(&j);
    kvc_json_obj_end(&j);
    kvc_json_finish(&j);
}

/* ---- entry ---------------------------------------------------------------------- */

static kvc_status parse_candidates(const char *list, kvc_tuned_codec *cand, int *nc) {
    char buf[512];
    KVC_CHECK(strlen(list) < sizeof buf, KVC_ERR_ARG, "tune: --candidates list too long");
    strcpy(buf, list);
    *nc = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        KVC_CHECK(*nc < MAX_CAND, KVC_ERR_ARG, "tune: more than %d candidates", MAX_CAND);
        KVC_TRY(kvc_tuned_codec_parse(tok, "tune: candidate", &cand[*nc]));
        (*nc)++;
    }
    KVC_CHECK(*nc > 0, KVC_ERR_ARG, "tune: --candidates is empty");
    return KVC_OK;
}

static kvc_status check_params(const kvc_tune_params *p, int n_tokens) {
    KVC_CHECK(p->n_budgets >= 1 && p->budgets, KVC_ERR_ARG, "tune: no budget");
    for (int b = 0; b < p->n_budgets; b++)
        KVC_CHECK(p->budgets[b] > 0 && isfinite(p->budgets[b]), KVC_ERR_ARG,
                  "tune: budget %g bits per element must be positive", p->budgets[b]);
    KVC_CHECK(p->offset >= 0 && (int64_t)p->offset + p->n_ctx + p->n_cont <= n_tokens, KVC_ERR_RANGE,
              "tune: the text has %d tokens; --offset %d + --ctx %d + --cont %d needs %lld",
              n_tokens, p->offset, p->n_ctx, p->n_cont,
              (long long)p->offset + p->n_ctx + p->n_cont);
    return KVC_OK;
}

/* The output file of budget b: out_path itself, or "-<budget>" before its extension. */
static void pick_path(const char *out_path, int several, double budget, char *buf, size_t cap) {
    const char *dot = strrchr(out_path, '.'), *slash = strrchr(out_path, '/');
    if (!several) snprintf(buf, cap, "%s", out_path);
    else if (!dot || (slash && dot < slash)) snprintf(buf, cap, "%s-%g", out_path, budget);
    else snprintf(buf, cap, "%.*s-%g%s", (int)(dot - out_path), out_path, budget, dot);
}

/* The profile of one pick, written to its file. */
static kvc_status write_pick(const tune_run *r, const tune_result *t, tune_pick *pk) {
    const int L = r->info.n_layers;
    kvc_tuned_profile *prof;
    KVC_TRY(kvc_tuned_profile_uniform(L, t->cand[0], &prof));
    for (int i = 0; i < 2 * L; i++) {
        kvc_tuned_layer *Ly = &prof->layer[i / 2];
        int c = pk->choice[i];
        double d = t->kl[i * t->nc + c];
        if (i % 2) Ly->v = t->cand[c], Ly->v_kl = d;
        else Ly->k = t->cand[c], Ly->k_kl = d;
        pk->predicted += d;
        pk->mean_bits += t->bits[i * t->nc + c] / (2 * L);
    }
    snprintf(prof->model, sizeof prof->model, "%s", r->info.name);
    snprintf(prof->source, sizeof prof->source,
             "%s tokens %d-%d (%d+%d),%s budget %g bits/el, predicted KL %.4g",
             r->p->source ? r->p->source : "text", r->p->offset,
             r->p->offset + r->p->n_ctx + r->p->n_cont - 1, r->p->n_ctx, r->p->n_cont,
             r->p->rot ? " probed +rot (run with tuned:...+rot)," : "", pk->budget,
             pk->predicted);
    kvc_status st = kvc_tuned_profile_save(prof, pk->path);
    kvc_tuned_profile_free(prof);
    return st;
}

static kvc_status run_and_choose(tune_run *r, kvc_tuned_codec *cand, int nc, const char *out_path,
                                 FILE *report, int json) {
    const int L = r->info.n_layers, n_items = 2 * L, nb = r->p->n_budgets;
    double *kl = malloc(sizeof(double) * n_items * nc), *bits = malloc(sizeof(double) * n_items * nc);
    tune_pick *pick = calloc((size_t)nb, sizeof *pick);
    int *choice = malloc(sizeof(int) * n_items * nb);
    kvc_status st = kl && bits && pick && choice ? KVC_OK : kvc_fail(KVC_ERR_NOMEM, "tune: tables");
    tune_result t = {cand, nc, kl, bits, 0, 0, pick, nb};
    for (int i = 0; st == KVC_OK && i < n_items; i++)
        for (int c = 0; c < nc; c++)
            bits[i * nc + c] = kvc_tuned_codec_bits(cand[c], i % 2, r->info.head_dim, COST_TOKENS);
    for (int b = 0; st == KVC_OK && b < nb; b++) { /* infeasible budgets fail before the pass */
        pick[b].budget = r->p->budgets[b];
        pick[b].choice = choice + (size_t)b * n_items;
        pick_path(out_path, nb > 1, pick[b].budget, pick[b].path, sizeof pick[b].path);
        st = kvc_tune_choose(n_items, nc, bits, bits, pick[b].budget, pick[b].choice);
    }
    double t0 = kvc_now_s();
    if (st == KVC_OK) st = reference(r);
    if (st == KVC_OK) st = sensitivity(r, cand, nc, kl, &t.base);
    t.seconds = kvc_now_s() - t0;
    for (int b = 0; st == KVC_OK && b < nb; b++) {
        st = kvc_tune_choose(n_items, nc, kl, bits, pick[b].budget, pick[b].choice);
        if (st == KVC_OK) st = write_pick(r, &t, &pick[b]);
    }
    if (st == KVC_OK) (json ? report_json : report_text)(report, r, &t);
    free(kl), free(bits), free(pick), free(choice);
    return st;
}

kvc_status kvc_tune(kvc_model *m, const int32_t *tokens, int n_tokens, const kvc_tune_params *pin,
                    const char *out_path, FILE *report, int json) {
    kvc_tune_params p = *pin;
    if (p.n_ctx <= 0) p.n_ctx = 1024;
    if (p.n_cont <= 0) p.n_cont = 64;
    if (p.window < 0) p.window = 32;
    if (!p.candidates) p.candidates = KVC_TUNE_CANDIDATES;
    KVC_TRY(check_params(&p, n_tokens));
    kvc_tuned_codec cand[MAX_CAND];
    int nc = 0;
    KVC_TRY(parse_candidates(p.candidates, cand, &nc));
    tune_run r = {.m = m, .p = &p};
    kvc_model_info_get(m, &r.info);
    r.ctx_tok = tokens + p.offset;
    r.cont_tok = r.ctx_tok + p.n_ctx;
    r.kv.n = p.n_ctx;
    r.kv.kvd = r.info.n_kv_heads * r.info.head_dim;
    const size_t nv = (size_t)r.info.n_vocab, nkv = (size_t)r.info.n_layers * p.n_ctx * r.kv.kvd;
    r.kv.k = malloc(sizeof(float) * nkv);
    r.kv.v = malloc(sizeof(float) * nkv);
    r.ref_lp = malloc(sizeof(float) * nv * p.n_cont);
    r.logits = malloc(sizeof(float) * nv * p.n_cont);
    r.lp = malloc(sizeof(float) * nv);
    kvc_status st = r.kv.k && r.kv.v && r.ref_lp && r.logits && r.lp
                        ? KVC_OK
                        : kvc_fail(KVC_ERR_NOMEM, "tune: saved K/V of %d tokens", p.n_ctx);
    const char *tmp = getenv("TMPDIR");
    snprintf(r.path, sizeof r.path, "%.40s/kvcomp-tune-XXXXXX", tmp && *tmp && strlen(tmp) < 40 ? tmp : "/tmp");
    int fd = st == KVC_OK ? mkstemp(r.path) : -1;
    if (st == KVC_OK && fd < 0)
        st = kvc_fail(KVC_ERR_IO, "tune: cannot create a temporary file %s: %s", r.path, strerror(errno));
    if (fd >= 0) close(fd);
    if (st == KVC_OK) st = run_and_choose(&r, cand, nc, out_path, report, json);
    if (fd >= 0) unlink(r.path);
    free(r.kv.k), free(r.kv.v), free(r.ref_lp), free(r.logits), free(r.lp);
    return st;
}
