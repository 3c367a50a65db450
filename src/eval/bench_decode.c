/* End-to-end decode benchmark (see include/kvcomp/bench_decode.h), public API only. */
#include "kvcomp/bench_decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rss.h"
#include "kvcomp/progress.h"
#include "base/status.h"

static kvc_status run_one(kvc_model *m, const int32_t *seq, const kvc_bench_decode_params *p,
                          const char *spec, float *logits, kvc_progress *prog, int64_t done0,
                          kvc_bench_decode_row *r) {
    kvc_ctx_params cp = {0};
    cp.n_ctx = p->n_ctx + p->n_gen;
    cp.n_threads = p->n_threads;
    cp.n_batch = p->n_batch;
    cp.kv_spec = spec;
    kvc_ctx *ctx = NULL;
    KVC_TRY(kvc_ctx_create(m, &cp, &ctx));
    int batch = p->n_batch > 0 ? p->n_batch : 512;
    kvc_status st = KVC_OK;
    double t0 = kvc_now_s();
    for (int i = 0; st == KVC_OK && i < p->n_ctx; i += batch) {
        int n = p->n_ctx - i < batch ? p->n_ctx - i : batch;
        st = kvc_ctx_prefill(ctx, seq + i, n, NULL);
        kvc_progress_update(prog, done0 + i + n);
    }
    r->prefill_s = kvc_now_s() - t0;
    kvc_ctx_timing a, b;
    kvc_ctx_timing_get(ctx, &a);
    kvc_cache_stats before;
    kvc_ctx_cache_stats(ctx, &before);
    t0 = kvc_now_s();
    for (int i = 0; st == KVC_OK && i < p->n_gen; i++) {
        st = kvc_ctx_decode(ctx, seq[p->n_ctx + i], logits);
        kvc_progress_update(prog, done0 + p->n_ctx + i + 1);
    }
    r->decode_s = kvc_now_s() - t0;
    kvc_ctx_timing_get(ctx, &b);
    if (st == KVC_OK) {
        r->prefill_tok_s = p->n_ctx / r->prefill_s;
        r->decode_tok_s = p->n_gen / r->decode_s;
        r->weights_s = b.weights_s - a.weights_s;
        r->attention_s = b.attention_s - a.attention_s;
        r->cache_s = b.cache_s - a.cache_s;
        r->other_s = r->decode_s - r->weights_s - r->attention_s - r->cache_s;
        kvc_ctx_cache_stats(ctx, &r->stats);
        r->far_read_bytes = r->stats.far_read_bytes - before.far_read_bytes;
        r->far_read_s = r->stats.far_read_s - before.far_read_s;
        r->far_reused_bytes = r->stats.far_reused_bytes - before.far_reused_bytes;
    }
    kvc_ctx_free(ctx);
    return st;
}

kvc_status kvc_bench_decode_run(kvc_model *m, const int32_t *tokens, int n_tokens,
                                const kvc_bench_decode_params *p, char *const *specs, int n_specs,
                                kvc_bench_decode_row *rows) {
    KVC_CHECK(n_tokens >= 1, KVC_ERR_ARG, "bench decode: empty text");
    KVC_CHECK(p->n_ctx >= 1 && p->n_gen >= 1 && (int64_t)p->n_ctx + p->n_gen <= (1 << 24),
              KVC_ERR_ARG, "bench decode: --ctx %d and -n %d must be >= 1", p->n_ctx, p->n_gen);
    kvc_model_info info;
    kvc_model_info_get(m, &info);
    int total = p->n_ctx + p->n_gen;
    int32_t *seq = malloc(sizeof(int32_t) * (size_t)total);
    float *logits = malloc(sizeof(float) * (size_t)info.n_vocab);
    if (!seq || !logits) {
        free(seq);
        free(logits);
        return kvc_fail(KVC_ERR_NOMEM, "bench decode: %d tokens", total);
    }
    for (int i = 0; i < total; i++) seq[i] = tokens[i % n_tokens];
    kvc_progress prog;
    kvc_progress_begin(&prog, "bench decode", (int64_t)total * n_specs);
    for (int k = 0; k < n_specs; k++) {
        kvc_bench_decode_row *r = &rows[k];
        memset(r, 0, sizeof *r);
        r->spec = specs[k];
        kvc_clear_error();
        kvc_peak_rss_reset();
        r->status = run_one(m, seq, p, specs[k], logits, &prog, (int64_t)k * total, r);
        r->peak_rss = kvc_peak_rss_bytes();
        if (r->status != KVC_OK) snprintf(r->error, sizeof r->error, "%s", kvc_last_error());
    }
    kvc_progress_end(&prog);
    free(seq);
    free(logits);
    return KVC_OK;
}
