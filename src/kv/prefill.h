/* Chunked prefill attention of one stream (see prefill.c): n queries of a
 * prompt chunk over the stream's past (decoded) plus the chunk itself (causal). */
#ifndef KVC_KV_PREFILL_H
#define KVC_KV_PREFILL_H

#include "kv/stream.h"

typedef struct kvc_prefill_ws kvc_prefill_ws;
kvc_status kvc_prefill_ws_create(kvc_prefill_ws **out);
void kvc_prefill_ws_free(kvc_prefill_ws *w);
uint64_t kvc_prefill_ws_bytes(const kvc_prefill_ws *w);

/* Query tokens are processed in spans of this many (each decoded key tile of
 * the past serves a whole span); spans are independent. */
enum { KVC_PREFILL_QTILE = 256 };

/* q: query i, head g at q[i*ldq + g*dim]; k, v: token i at k[i*ldkv]; out like q
 * (ldo). Past = everything the stream holds now (the chunk is not yet appended).
 * Computes the outputs of query tokens [t_begin, t_end) only (any split of
 * [0, n) at multiples of KVC_PREFILL_QTILE may run in parallel, one ws each). */
kvc_status kvc_prefill_attend(const kvc_stream *s, int G, int n, const float *q, int ldq,
                              const float *k, const float *v, int ldkv, float *out, int ldo,
                              int t_begin, int t_end, kvc_prefill_ws *w);

#endif
