/* What decode attention reads, per stream (reported in kvc_cache_stats):
 * the tokens each step attends against the context, and how much of a
 * step's selection the previous step of the same stream had selected too —
 * the part a near buffer holding the last selection would not fetch again
 * (SentKVCompress §4.2.2 reports about 70% reused). Selections are compared
 * by token positions, so chunks being appended or replaced between steps do
 * not matter. Only selected units count (not the sinks, the hot window or
 * unselectable chunks, which are always attended). */
#ifndef KVC_KV_SELECT_USAGE_H
#define KVC_KV_SELECT_USAGE_H

#include <stdint.h>

#include "kv/stream.h"

typedef struct kvc_sel_usage {
    int64_t *iv;       /* previous selection: n position intervals [iv[2i], iv[2i+1]) sorted */
    int n, cap, have_prev;
    int64_t *tmp;      /* the new selection being built */
    int tmp_cap;
    uint64_t read, context;      /* tokens attended / tokens of context, summed over steps */
    uint64_t selected, reused;   /* selected tokens / of them selected by the previous step */
} kvc_sel_usage;

/* A decode step of stream s attended n_read tokens. */
void kvc_sel_usage_read(kvc_sel_usage *u, const kvc_stream *s, int64_t n_read);

/* The units the step selected (chunk indices of s and token ranges inside
 * them). Out of memory: the step is left out of the reuse statistics. */
void kvc_sel_usage_select(kvc_sel_usage *u, const kvc_stream *s, int n_units, const int32_t *chunk_idx,
                          const kvc_range *units);

/* A new sequence (cache reset): the next step has no previous selection. */
void kvc_sel_usage_forget(kvc_sel_usage *u);

void kvc_sel_usage_free(kvc_sel_usage *u);

#endif
