/* `kvcomp bench decode`: end-to-end decode speed at a context length
 * (docs/design.md §6). Per method: a context of n_ctx + n_gen tokens, n_ctx tokens
 * of a text prefilled (the text repeated if short), then n_gen decode steps fed
 * the text's next tokens; tokens/s over those steps and the time split into
 * weights (matvec), attention and cache management from kvc_ctx_timing_get,
 * with the rest (norms, RoPE, sampling-free glue) as "other". */
#ifndef KVCOMP_BENCH_DECODE_H
#define KVCOMP_BENCH_DECODE_H

#include <stdint.h>

#include "kvcomp.h"

typedef struct kvc_bench_decode_params {
    int n_ctx, n_gen;
    int n_threads, n_batch;
} kvc_bench_decode_params;

typedef struct kvc_bench_decode_row {
    const char *spec;
    kvc_status status;
    char error[256];
    double prefill_s, prefill_tok_s;
    double decode_s, decode_tok_s;
    double weights_s, attention_s, cache_s, other_s; /* decode steps only */
    kvc_cache_stats stats;
    uint64_t far_read_bytes;  /* decode steps only: bytes read from the far tier */
    double far_read_s;        /* decode steps only: seconds reading them (summed over threads) */
    uint64_t far_reused_bytes; /* decode steps only: bytes the near buffer served instead of the file */
    int64_t peak_rss; /* bytes, the process's peak during this method's run (base/rss.h) */
} kvc_bench_decode_row;

/* tokens: the text (at least 1 token), cycled to n_ctx + n_gen. */
kvc_status kvc_bench_decode_run(kvc_model *m, const int32_t *tokens, int n_tokens,
                                const kvc_bench_decode_params *p, char *const *specs, int n_specs,
                                kvc_bench_decode_row *rows);

#endif
