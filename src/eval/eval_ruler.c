/* `kvcomp eval ruler`: generate RULER-style samples, run them through each
 * cache method with greedy decoding, score with string_match_all (see
 * include/kvcomp/eval_ruler.h and ruler.h). */
#include "kvcomp/eval_ruler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcomp/progress.h"
#include "base/status.h"
#include "kvcomp/metrics.h"

/* The exact text the model sees: chat template around the prompt, then the
 * answer prefix as the start of the assistant's reply. */
static kvc_status full_prompt(const kvc_model *m, const char *prompt, const char *prefix,
                              char **out) {
    kvc_chat_msg msg = {"user", prompt};
    char *t = NULL;
    KVC_TRY(kvc_chat_apply(m, &msg, 1, 1, &t));
    size_t a = strlen(t), b = strlen(prefix);
    char *r = realloc(t, a + b + 1);
    if (!r) {
        free(t);
        return kvc_fail(KVC_ERR_NOMEM, "no memory for a prompt of %zu bytes", a + b);
    }
    memcpy(r + a, prefix, b + 1);
    *out = r;
    return KVC_OK;
}

typedef struct tok_buf {
    const kvc_model *m;
    int32_t *t;
    int n, cap;
} tok_buf;

static kvc_status tokenize_into(tok_buf *tb, const char *text) {
    int n = 0;
    for (;;) {
        KVC_TRY(kvc_tokenize(tb->m, text, strlen(text), 1, 1, tb->t, tb->cap, &n));
        if (n <= tb->cap) break;
        int32_t *nt = realloc(tb->t, sizeof(int32_t) * (size_t)n);
        KVC_CHECK(nt, KVC_ERR_NOMEM, "no memory for %d tokens", n);
        tb->t = nt;
        tb->cap = n;
    }
    tb->n = n;
    return KVC_OK;
}

static kvc_status count_tokens(void *user, const char *prompt, const char *prefix, int *n) {
    tok_buf *tb = user;
    char *text = NULL;
    KVC_TRY(full_prompt(tb->m, prompt, prefix, &text));
    kvc_status st = tokenize_into(tb, text);
    free(text);
    *n = tb->n;
    return st;
}

/* Tokens done over the whole run, for the progress line (a 16K prompt is
 * minutes of prefill on a small machine). */
typedef struct ruler_progress {
    kvc_progress line;
    int64_t done;
} ruler_progress;

static void count_done(ruler_progress *rp, int n) {
    rp->done += n;
    kvc_progress_update(&rp->line, rp->done);
}

/* Greedy generation of up to max_new tokens after the prompt; the output text
 * is appended to out (cap bytes, NUL-terminated). The prompt goes in the
 * context's own chunks, so the progress line moves during the prefill. */
static kvc_status generate(kvc_model *m, kvc_ctx *ctx, const int32_t *prompt, int n_prompt,
                           int max_new, float *logits, char *out, size_t cap,
                           ruler_progress *rp) {
    out[0] = '\0';
    kvc_ctx_reset(ctx);
    const int batch = kvc_ctx_batch(ctx);
    for (int i = 0; i < n_prompt; i += batch) {
        int n = n_prompt - i < batch ? n_prompt - i : batch;
        KVC_TRY(kvc_ctx_prefill(ctx, prompt + i, n, i + n == n_prompt ? logits : NULL));
        count_done(rp, n);
    }
    kvc_model_info info;
    kvc_model_info_get(m, &info);
    kvc_detok *dt = NULL;
    KVC_TRY(kvc_detok_create(m, &dt));
    size_t len = 0;
    kvc_status st = KVC_OK;
    char piece[256];
    for (int i = 0; i < max_new; i++) {
        int32_t tok = kvc_argmax(logits, info.n_vocab);
        if (kvc_token_is_end(m, tok)) break;
        int k = kvc_detok_push(dt, tok, piece, sizeof piece);
        if (k > 0 && len + (size_t)k < cap) {
            memcpy(out + len, piece, (size_t)k);
            len += (size_t)k;
            out[len] = '\0';
        }
        if (i + 1 == max_new) break;
        st = kvc_ctx_decode(ctx, tok, logits);
        if (st != KVC_OK) break;
        count_done(rp, 1);
    }
    kvc_detok_free(dt);
    return st;
}

void kvc_eval_ruler_report_free(kvc_eval_ruler_report *rep) {
    free(rep->methods);
    free(rep->cells);
    memset(rep, 0, sizeof *rep);
}

kvc_status kvc_eval_ruler_run(kvc_model *m, const char *haystack, size_t haystack_len,
                              const kvc_eval_ruler_params *p, char *const *specs, int n_specs,
                              kvc_eval_ruler_report *rep) {
    memset(rep, 0, sizeof *rep);
    KVC_CHECK(p->n_tasks >= 1 && p->n_tasks <= KVC_RULER_N_TASKS, KVC_ERR_ARG,
              "eval ruler: %d tasks", p->n_tasks);
    KVC_CHECK(p->samples >= 1, KVC_ERR_ARG, "eval ruler: --samples %d must be >= 1", p->samples);
    KVC_CHECK(p->len >= 64, KVC_ERR_ARG, "eval ruler: --len %d must be >= 64", p->len);
    KVC_CHECK(n_specs >= 1, KVC_ERR_ARG, "eval ruler: no methods");
    KVC_CHECK(p->n_depths >= 0 && p->n_depths <= KVC_RULER_MAX_DEPTHS && (p->depths || !p->n_depths),
              KVC_ERR_ARG, "eval ruler: %d depths (at most %d)", p->n_depths, KVC_RULER_MAX_DEPTHS);
    kvc_model_info info;
    kvc_model_info_get(m, &info);
    rep->len = p->len;
    rep->samples = p->samples;
    rep->seed = p->seed;
    rep->n_depths = p->n_depths;
    for (int i = 0; i < p->n_depths; i++) rep->depths[i] = p->depths[i];
    rep->n_threads = kvc_threads_resolve(p->n_threads);
    rep->n_tasks = p->n_tasks;
    rep->n_methods = n_specs;
    memcpy(rep->tasks, p->tasks, sizeof(kvc_ruler_task) * (size_t)p->n_tasks);
    rep->methods = calloc((size_t)n_specs, sizeof *rep->methods);
    rep->cells = calloc((size_t)n_specs * (size_t)p->n_tasks, sizeof *rep->cells);
    kvc_ctx **ctx = calloc((size_t)n_specs, sizeof *ctx);
    float *logits = malloc(sizeof(float) * (size_t)info.n_vocab);
    tok_buf tb = {m, NULL, 0, 0};
    kvc_ruler_haystack hay = {0};
    char out[1024];
    kvc_status st = KVC_OK;
    if (!rep->methods || !rep->cells || !ctx || !logits)
        st = kvc_fail(KVC_ERR_NOMEM, "eval ruler: no memory");
    if (st == KVC_OK) st = kvc_ruler_haystack_init(&hay, haystack, haystack_len);

    /* one context per method, reused (reset) for every sample */
    for (int k = 0; st == KVC_OK && k < n_specs; k++) {
        rep->methods[k].spec = specs[k];
        kvc_ctx_params cp = {0};
        cp.n_ctx = p->len;
        cp.n_threads = p->n_threads;
        cp.n_batch = p->n_batch;
        cp.kv_spec = specs[k];
        kvc_clear_error();
        rep->methods[k].status = kvc_ctx_create(m, &cp, &ctx[k]);
        if (rep->methods[k].status != KVC_OK)
            snprintf(rep->methods[k].error, sizeof rep->methods[k].error, "%s", kvc_last_error());
    }

    /* in tokens: each sample and method counts as len tokens (its prompt and
     * answer, then a jump over what it left of the budget) */
    ruler_progress rp = {0};
    kvc_progress_begin(&rp.line, "eval ruler", (int64_t)p->n_tasks * p->samples * n_specs * p->len);
    int64_t unit = 0;
    for (int ti = 0; st == KVC_OK && ti < p->n_tasks; ti++) {
        double tok_sum = 0;
        for (int si = 0; st == KVC_OK && si < p->samples; si++) {
            kvc_ruler_sample s;
            /* the prompt budget leaves room for the answer (at most 48 tokens) */
            double depth = p->n_depths ? p->depths[si % p->n_depths] : -1;
            st = kvc_ruler_make(&hay, p->tasks[ti], p->len - 64, p->seed, si, depth, count_tokens,
                                &tb, &s);
            if (st != KVC_OK) break;
            char *text = NULL;
            st = full_prompt(m, s.prompt, s.answer_prefix, &text);
            if (st == KVC_OK) st = tokenize_into(&tb, text);
            free(text);
            int max_new = s.max_new_tokens;
            if (st == KVC_OK && tb.n + max_new > p->len) max_new = p->len - tb.n;
            tok_sum += tb.n;
            for (int k = 0; st == KVC_OK && k < n_specs; k++) {
                kvc_eval_ruler_method *r = &rep->methods[k];
                rp.done = unit++ * p->len;
                if (r->status != KVC_OK) continue;
                double t0 = kvc_now_s();
                kvc_clear_error();
                r->status = generate(m, ctx[k], tb.t, tb.n, max_new, logits, out, sizeof out, &rp);
                r->seconds += kvc_now_s() - t0;
                if (r->status != KVC_OK) {
                    snprintf(r->error, sizeof r->error, "%s", kvc_last_error());
                    continue;
                }
                kvc_ctx_cache_stats(ctx[k], &r->stats);
                double score = kvc_ruler_score(&s, out);
                kvc_eval_ruler_cell *c = &rep->cells[ti * n_specs + k];
                c->score += score;
                c->n++;
                c->n_perfect += score >= 1.0;
                if (p->on_sample) p->on_sample(p->user, p->tasks[ti], si, specs[k], &s, out, score);
            }
            kvc_ruler_sample_free(&s);
        }
        rep->mean_prompt_tokens[ti] = tok_sum / p->samples;
    }
    kvc_progress_end(&rp.line);
    for (int i = 0; rep->cells && i < p->n_tasks * n_specs; i++)
        if (rep->cells[i].n > 0) rep->cells[i].score /= rep->cells[i].n;
    for (int k = 0; ctx && k < n_specs; k++) kvc_ctx_free(ctx[k]);
    free(ctx);
    free(logits);
    free(tb.t);
    kvc_ruler_haystack_free(&hay);
    if (st != KVC_OK) {
        kvc_eval_ruler_report_free(rep);
        return st;
    }
    return KVC_OK;
}
