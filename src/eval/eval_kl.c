/* `kvcomp eval kl`: teacher-forced continuation after a long real context,
 * every method against the full:f32 reference computed once (see include/kvcomp/eval_kl.h;
 * metrics as llama.cpp's perplexity --kl-divergence). */
#include "kvcomp/eval_kl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rss.h"
#include "eval/kl_ref.h"
#include "kvcomp/progress.h"
#include "base/status.h"

typedef struct kl_job {
    kvc_model *m;
    const int32_t *tokens;
    const kvc_eval_kl_params *p;
    int n_vocab;
    kvc_progress *prog;
    int64_t done; /* tokens processed over all runs, for the progress line */
} kl_job;

/* Called with the logits of scored position i (predicting tokens[n_ctx + 1 + i]). */
typedef void (*logits_fn)(void *user, int i, const float *logits);

static kvc_status make_ctx(kl_job *job, const char *spec, kvc_ctx **ctx) {
    kvc_ctx_params cp = {0};
    cp.n_ctx = job->p->n_ctx + job->p->n_cont;
    cp.n_threads = job->p->n_threads;
    cp.n_batch = job->p->n_batch;
    cp.kv_spec = spec;
    return kvc_ctx_create(job->m, &cp, ctx);
}

static kvc_status prefill_context(kl_job *job, kvc_ctx *ctx) {
    const int batch = kvc_ctx_batch(ctx);
    for (int i = 0; i < job->p->n_ctx; i += batch) {
        int n = job->p->n_ctx - i < batch ? job->p->n_ctx - i : batch;
        KVC_TRY(kvc_ctx_prefill(ctx, job->tokens + i, n, NULL));
        job->done += n;
        kvc_progress_update(job->prog, job->done);
    }
    return KVC_OK;
}

/* One run of a method: prefill, then n_cont teacher-forced decode steps. */
static kvc_status run_one(kl_job *job, const char *spec, float *logits, logits_fn fn, void *user,
                          kvc_cache_stats *stats, double *seconds) {
    kvc_ctx *ctx = NULL;
    double t0 = kvc_now_s();
    KVC_TRY(make_ctx(job, spec, &ctx));
    kvc_status st = prefill_context(job, ctx);
    for (int i = 0; st == KVC_OK && i < job->p->n_cont; i++) {
        st = kvc_ctx_decode(ctx, job->tokens[job->p->n_ctx + i], logits);
        if (st != KVC_OK) break;
        fn(user, i, logits);
        job->done++;
        kvc_progress_update(job->prog, job->done);
    }
    if (st == KVC_OK && stats) kvc_ctx_cache_stats(ctx, stats);
    *seconds = kvc_now_s() - t0;
    kvc_ctx_free(ctx);
    return st;
}

/* ---- the reference: keep its raw logits ---------------------------------------- */

typedef struct ref_store {
    float *ref; /* [n_cont][n_vocab] */
    size_t n_vocab;
} ref_store;

static void store_ref(void *user, int i, const float *logits) {
    ref_store *r = user;
    memcpy(r->ref + (size_t)i * r->n_vocab, logits, sizeof(float) * r->n_vocab);
}

/* ---- a method: per-position metrics against the stored reference --------------- */

typedef struct cmp_state {
    const float *ref;
    const int32_t *truth; /* truth[i]: the token predicted at scored position i */
    size_t n_vocab;
    float *ref_lp, *scratch;
    kvc_kl_pos *pos;
    double max_abs;
} cmp_state;

static void compare(void *user, int i, const float *logits) {
    cmp_state *c = user;
    const float *r = c->ref + (size_t)i * c->n_vocab;
    for (size_t v = 0; v < c->n_vocab; v++) {
        double d = fabs((double)logits[v] - (double)r[v]);
        if (d > c->max_abs || isnan(d)) c->max_abs = isnan(d) ? INFINITY : d;
    }
    kvc_log_softmax(r, (int)c->n_vocab, c->ref_lp);
    kvc_kl_position(c->ref_lp, logits, (int)c->n_vocab, c->truth[i], c->scratch, &c->pos[i]);
}

/* max |a - b| and mean KL(softmax a || softmax b) over n rows of nv logits. */
static void compare_rows(const float *a, const float *b, int n, size_t nv, float *la, float *lb,
                         double *max_abs, double *kl_mean) {
    double mx = 0, kl = 0;
    for (int i = 0; i < n; i++) {
        const float *x = a + (size_t)i * nv, *y = b + (size_t)i * nv;
        for (size_t v = 0; v < nv; v++) {
            double d = fabs((double)x[v] - (double)y[v]);
            mx = isnan(d) ? INFINITY : d > mx ? d : mx;
        }
        kvc_log_softmax(x, (int)nv, la);
        kvc_log_softmax(y, (int)nv, lb);
        kl += kvc_kl_logprobs(la, lb, (int)nv);
    }
    *max_abs = mx;
    *kl_mean = kl / n;
}

/* Dense checks with full:f32 (see eval_kl.h). */
static kvc_status dense_check(kl_job *job, const float *ref, kvc_eval_kl_report *rep, float *la,
                              float *lb) {
    const int n_ctx = job->p->n_ctx, n_cont = job->p->n_cont, total = n_ctx + n_cont;
    const size_t nv = (size_t)job->n_vocab;
    float *chunk = malloc(sizeof(float) * nv * (size_t)n_cont);
    float *all = malloc(sizeof(float) * nv * (size_t)total);
    kvc_status st = chunk && all ? KVC_OK
                                 : kvc_fail(KVC_ERR_NOMEM, "dense check: no memory for %d x %zu "
                                                           "logits", total, nv);
    kvc_ctx *ctx = NULL;
    if (st == KVC_OK) st = make_ctx(job, "full:f32", &ctx);
    if (st == KVC_OK) st = prefill_context(job, ctx);
    if (st == KVC_OK) st = kvc_ctx_prefill_all(ctx, job->tokens + n_ctx, n_cont, chunk);
    kvc_ctx_free(ctx);
    ctx = NULL;
    if (st == KVC_OK) { /* one dense chunk over everything */
        kvc_ctx_params cp = {0};
        cp.n_ctx = total;
        cp.n_threads = job->p->n_threads;
        cp.n_batch = total;
        cp.kv_spec = "full:f32";
        st = kvc_ctx_create(job->m, &cp, &ctx);
        if (st == KVC_OK) st = kvc_ctx_prefill_all(ctx, job->tokens, total, all);
        kvc_ctx_free(ctx);
    }
    if (st == KVC_OK) {
        double ml = 0;
        for (size_t i = 0; i < nv * (size_t)n_cont; i++) ml = fabs(ref[i]) > ml ? fabs(ref[i]) : ml;
        rep->dense_max_abs_logit = ml;
        compare_rows(ref, chunk, n_cont, nv, la, lb, &rep->decode_max_abs_dlogit,
                     &rep->decode_kl_mean);
        compare_rows(chunk, all + (size_t)n_ctx * nv, n_cont, nv, la, lb,
                     &rep->chunked_max_abs_dlogit, &rep->chunked_kl_mean);
        rep->dense_checked = 1;
        job->done += (int64_t)n_cont + total;
        kvc_progress_update(job->prog, job->done);
    }
    free(chunk);
    free(all);
    return st;
}

void kvc_eval_kl_report_free(kvc_eval_kl_report *rep) {
    for (int k = 0; rep->methods && k < rep->n_methods; k++)
        free(rep->methods[k].win);
    free(rep->methods);
    free(rep->window_start);
    free(rep->window_ref_ppl);
    memset(rep, 0, sizeof *rep);
}

/* Window starts spread evenly over the text; the scored continuations must not overlap. */
static kvc_status place_windows(const kvc_eval_kl_params *p, int n_tokens, int n_windows,
                                int *start) {
    const int64_t need = (int64_t)p->n_ctx + p->n_cont + 1;
    KVC_CHECK(need <= n_tokens, KVC_ERR_RANGE,
              "eval kl: the text has %d tokens; --ctx %d + --cont %d needs %lld", n_tokens, p->n_ctx,
              p->n_cont, (long long)need);
    const int64_t span = n_tokens - need;
    KVC_CHECK(n_windows == 1 || span / (n_windows - 1) >= p->n_cont, KVC_ERR_RANGE,
              "eval kl: the text has %d tokens; --windows %d of --ctx %d + --cont %d with "
              "continuations that do not overlap need %lld",
              n_tokens, n_windows, p->n_ctx, p->n_cont,
              (long long)(need + (int64_t)(n_windows - 1) * p->n_cont));
    for (int w = 0; w < n_windows; w++)
        start[w] = n_windows == 1 ? 0 : (int)(span * w / (n_windows - 1));
    return KVC_OK;
}

/* The reference's perplexity on one window, from its logits; adds its NLL to *nll_sum. */
static double reference_ppl(kl_job *job, const float *ref, float *lp, double *nll_sum) {
    const kvc_eval_kl_params *p = job->p;
    const size_t nv = (size_t)job->n_vocab;
    double nll = 0;
    for (int i = 0; i < p->n_cont; i++) {
        kvc_log_softmax(ref + (size_t)i * nv, (int)nv, lp);
        nll -= lp[job->tokens[p->n_ctx + 1 + i]];
    }
    *nll_sum += nll;
    return exp(nll / p->n_cont);
}

/* The reference on window w: its logits into ref, its row into rep; run with
 * full:f32, or read from the reference file. A run written to a file puts
 * the window there. */
static kvc_status reference_window(kl_job *job, int w, kvc_kl_ref_file *in, kvc_kl_ref_file *out,
                                   float *ref, float *logits, float *lp, kvc_eval_kl_report *rep,
                                   double *nll_sum) {
    kvc_kl_ref_window rw = {0};
    if (in) {
        KVC_TRY(kvc_kl_ref_get(in, w, &rw, ref));
        KVC_CHECK(rw.start == rep->window_start[w], KVC_ERR_FORMAT,
                  "--ref '%s': window %d starts at token %d in the file, %d in this run",
                  job->p->ref_in, w, rw.start, rep->window_start[w]);
    } else {
        ref_store rs = {ref, (size_t)job->n_vocab};
        kvc_peak_rss_reset();
        KVC_TRY(run_one(job, "full:f32", logits, store_ref, &rs, &rw.stats, &rw.seconds));
        rw.peak_rss = kvc_peak_rss_bytes();
        rw.start = rep->window_start[w];
        if (out) KVC_TRY(kvc_kl_ref_put(out, w, &rw, ref));
    }
    rep->ref_stats = rw.stats;
    rep->ref_peak_rss = rw.peak_rss > rep->ref_peak_rss ? rw.peak_rss : rep->ref_peak_rss;
    rep->ref_seconds += rw.seconds;
    rep->window_ref_ppl[w] = reference_ppl(job, ref, lp, nll_sum);
    return KVC_OK;
}

/* What a reference file must match: the model, the windows' tokens, the sizes. */
static void reference_id(const kvc_model_info *info, const int32_t *tokens, int n_tokens,
                         const kvc_eval_kl_params *p, int n_windows, const int *start,
                         kvc_kl_ref_id *id) {
    memset(id, 0, sizeof *id);
    snprintf(id->arch, sizeof id->arch, "%s", info->arch);
    id->n_params = info->n_params;
    id->weight_bytes = info->weight_bytes;
    id->n_layers = info->n_layers;
    id->dim = info->dim;
    id->n_vocab = info->n_vocab;
    id->n_text_tokens = n_tokens;
    id->n_ctx = p->n_ctx;
    id->n_cont = p->n_cont;
    id->n_windows = n_windows;
    id->n_batch = p->n_batch > 0 ? p->n_batch : 512;
    id->n_threads = kvc_threads_resolve(p->n_threads);
    id->tokens_hash = kvc_kl_ref_tokens_hash(tokens, start, n_windows, p->n_ctx + p->n_cont + 1);
    id->build_hash = kvc_kl_ref_build_hash();
    id->isa = (int32_t)kvc_active_isa();
}

/* Opens the reference file to read (ref_in) or to write (ref_out), if any. */
static kvc_status reference_file(const kvc_model_info *info, const int32_t *tokens, int n_tokens,
                                 const kvc_eval_kl_params *p, int n_windows, const int *start,
                                 kvc_kl_ref_file **in, kvc_kl_ref_file **out) {
    *in = *out = NULL;
    KVC_CHECK(!(p->ref_in && p->ref_out), KVC_ERR_ARG,
              "eval kl: --ref and --ref-out together (read one or write one)");
    if (!p->ref_in && !p->ref_out) return KVC_OK;
    kvc_kl_ref_id id;
    reference_id(info, tokens, n_tokens, p, n_windows, start, &id);
    return p->ref_in ? kvc_kl_ref_open(p->ref_in, &id, p->ref_any_build, in)
                     : kvc_kl_ref_create(p->ref_out, &id, out);
}

/* Method k on one window: its positions go to pos, its window summary to r->win[w]. */
static void method_window(kl_job *job, kvc_eval_kl_method *r, int w, const float *ref,
                          float *logits, float *ref_lp, float *scratch, kvc_kl_pos *pos,
                          double *dscratch) {
    const kvc_eval_kl_params *p = job->p;
    cmp_state cs = {ref, job->tokens + p->n_ctx + 1, (size_t)job->n_vocab, ref_lp, scratch, pos, 0};
    double seconds = 0;
    kvc_clear_error();
    kvc_peak_rss_reset();
    r->status = run_one(job, r->spec, logits, compare, &cs, &r->stats, &seconds);
    int64_t rss = kvc_peak_rss_bytes();
    r->peak_rss = rss > r->peak_rss ? rss : r->peak_rss;
    r->seconds += seconds;
    if (r->status != KVC_OK) {
        snprintf(r->error, sizeof r->error, "%s", kvc_last_error());
        return;
    }
    if (cs.max_abs > r->max_abs_dlogit) r->max_abs_dlogit = cs.max_abs;
    kvc_kl_summarize(pos, p->n_cont, dscratch, &r->win[w]);
}

kvc_status kvc_eval_kl_run(kvc_model *m, const int32_t *tokens, int n_tokens,
                           const kvc_eval_kl_params *p, char *const *specs, int n_specs,
                           kvc_eval_kl_report *rep) {
    memset(rep, 0, sizeof *rep);
    KVC_CHECK(p->n_ctx >= 1 && p->n_cont >= 1, KVC_ERR_ARG,
              "eval kl: --ctx %d and --cont %d must both be >= 1", p->n_ctx, p->n_cont);
    const int W = p->n_windows > 1 ? p->n_windows : 1;
    kvc_model_info info;
    kvc_model_info_get(m, &info);
    const size_t nv = (size_t)info.n_vocab, npos = (size_t)W * (size_t)p->n_cont;
    rep->n_ctx = p->n_ctx;
    rep->n_cont = p->n_cont;
    rep->n_vocab = info.n_vocab;
    rep->n_windows = W;
    rep->n_threads = kvc_threads_resolve(p->n_threads);
    rep->window_start = malloc(sizeof(int) * (size_t)W);
    rep->window_ref_ppl = malloc(sizeof(double) * (size_t)W);
    rep->methods = calloc((size_t)(n_specs > 0 ? n_specs : 1), sizeof *rep->methods);
    rep->n_methods = rep->methods ? n_specs : 0;
    float *ref = malloc(sizeof(float) * nv * (size_t)p->n_cont);
    float *logits = malloc(sizeof(float) * nv);
    float *ref_lp = malloc(sizeof(float) * nv);
    float *scratch = malloc(sizeof(float) * nv);
    kvc_kl_pos *pos = malloc(sizeof(kvc_kl_pos) * npos * (size_t)(n_specs > 0 ? n_specs : 1));
    double *dscratch = malloc(sizeof(double) * (npos > (size_t)W ? npos : (size_t)W));
    int ok = rep->window_start && rep->window_ref_ppl && rep->methods && ref && logits &&
             ref_lp && scratch && pos && dscratch;
    for (int k = 0; ok && k < n_specs; k++) {
        rep->methods[k].spec = specs[k];
        ok = (rep->methods[k].win = calloc((size_t)W, sizeof(kvc_kl_summary))) != NULL;
    }
    kvc_status st = ok ? place_windows(p, n_tokens, W, rep->window_start)
                       : kvc_fail(KVC_ERR_NOMEM, "eval kl: no memory for %d x %zu reference logits",
                                  p->n_cont, nv);

    kvc_kl_ref_file *ref_in = NULL, *ref_out = NULL;
    if (st == KVC_OK)
        st = reference_file(&info, tokens, n_tokens, p, W, rep->window_start, &ref_in, &ref_out);
    rep->ref_loaded = ref_in != NULL;

    kvc_progress prog;
    const int64_t per_run = (int64_t)p->n_ctx + p->n_cont;
    const int ref_runs = ref_in ? 0 : 1; /* a read reference costs no run */
    const int64_t per_window = per_run * (n_specs + ref_runs);
    const int64_t dense = p->dense_check ? 2 * per_run : 0;
    kvc_progress_begin(&prog, "eval kl", per_window * W + dense);
    kl_job job = {m, tokens, p, info.n_vocab, &prog, 0};
    double nll = 0;
    for (int w = 0; st == KVC_OK && w < W; w++) {
        job.tokens = tokens + rep->window_start[w];
        st = reference_window(&job, w, ref_in, ref_out, ref, logits, ref_lp, rep, &nll);
        /* the file is whole after the last window's reference: finish it before that window's
         * methods, so a long run stopped during them still leaves the reference behind */
        if (st == KVC_OK && ref_out && w == W - 1) st = kvc_kl_ref_finish(ref_out);
        if (st == KVC_OK && p->dense_check && w == 0)
            st = dense_check(&job, ref, rep, ref_lp, scratch);
        for (int k = 0; st == KVC_OK && k < n_specs; k++) {
            kvc_eval_kl_method *r = &rep->methods[k];
            if (r->status == KVC_OK)
                method_window(&job, r, w, ref, logits, ref_lp, scratch,
                              pos + (size_t)k * npos + (size_t)w * p->n_cont, dscratch);
            job.done = per_window * w + per_run * (k + 1 + ref_runs) + dense;
        }
    }
    kvc_kl_ref_close(ref_in);
    kvc_kl_ref_close(ref_out);
    if (st == KVC_OK) rep->ref_ppl = exp(nll / (double)npos);
    for (int k = 0; st == KVC_OK && k < n_specs; k++) { /* pooled, and the interval */
        kvc_eval_kl_method *r = &rep->methods[k];
        if (r->status != KVC_OK) continue;
        kvc_kl_summarize(pos + (size_t)k * npos, (int)npos, dscratch, &r->q);
        for (int w = 0; w < W; w++)
            dscratch[w] = r->win[w].kl.mean;
        kvc_mean_ci95(dscratch, W, &r->kl_ci95_lo, &r->kl_ci95_hi);
    }
    kvc_progress_end(&prog);
    free(ref);
    free(logits);
    free(ref_lp);
    free(scratch);
    free(pos);
    free(dscratch);
    if (st != KVC_OK) {
        kvc_eval_kl_report_free(rep);
        return st;
    }
    return KVC_OK;
}
