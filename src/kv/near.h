/* The near buffer of a stream (SentKVCompress §4.2.2, "reuse"): the units
 * (sentences) the last decode step selected from dense f16 chunks, their K
 * and V rows copied side by side into one dense chunk, so that the attention
 * streams them in long runs instead of reading each unit where it lies in a
 * cache of hundreds of megabytes (a 14-token sentence is 28 cache lines of K
 * and 28 of V at head dim 64: from memory such short reads cost about twice
 * a streamed token, docs/benchmarks.md "SentKV on the AMD VM: where the
 * scattered reads go").
 *
 * Each step the units still selected stay in their rows, those no longer
 * selected leave holes, and only the newly selected ones are copied: into a
 * hole of their length or longer, else at the end. The copies are made by
 * the attention (kvc_near_fill), each just before the work item that reads
 * its rows, so the rows are read from the CPU's cache right after they are
 * written, and the copies are spread over the threads with the attention
 * instead of waiting in the planning of one KV head after another; a copy
 * the attention did not finish (it failed) is made again next time. When
 * the end would pass twice the rows the selection needs (it grew, or
 * shrank), the buffer is rebuilt in position order. Consecutive decode
 * steps select mostly the same sentences (a reuse rate of 80-87% on real
 * text), so a step copies a fifth of its selection or less. Units are known
 * by their first token's position, which the stream never gives to another
 * token while its chunks are only appended to; kvc_stream_replace,
 * kvc_stream_clear and a stream reset drop the buffer (kvc_near_free).
 * Owned by the decode driver (kv/attend_plan.c). */
#ifndef KVC_KV_NEAR_H
#define KVC_KV_NEAR_H

#include <stdint.h>

#include "kv/chunk.h"

typedef struct kvc_near kvc_near;

/* A selected unit: tokens r of chunk c. */
typedef struct kvc_near_unit {
    const kvc_chunk *c;
    kvc_range r;
} kvc_near_unit;

/* Whether the near buffer can hold units of chunk c (dense f16 K and V of
 * dim elements, consecutive positions, no transform, no evicted tokens). */
int kvc_near_eligible(const kvc_chunk *c, int dim);

/* Makes *nb (created on first use) hold exactly the units u[0..n) (eligible
 * chunks, in increasing position order, none overlapping), placing those it
 * does not hold yet, whose rows kvc_near_fill copies. Gives the rows the
 * units occupy as ranges of kvc_near_chunk(*nb), in row order with adjacent
 * ones merged, in *ranges (owned by the buffer, valid until the next call)
 * and their count in *n_ranges; *copied: tokens to copy. The chunks of u
 * must stay unchanged until the fills are done. */
kvc_status kvc_near_update(kvc_near **nb, int dim, const kvc_near_unit *u, int n, const kvc_range **ranges,
                           int *n_ranges, int64_t *copied);

/* Copies the rows of range r (inside the ranges kvc_near_update gave) that
 * are still to be copied; before they are attended. Calls for disjoint
 * ranges may run on different threads at once. */
void kvc_near_fill(kvc_near *nb, kvc_range r);

/* Asks for the source rows of the copies into range r to be loaded (a
 * range filled next). */
void kvc_near_prefetch(const kvc_near *nb, kvc_range r);

/* The buffer's rows as a chunk (dense f16 K and V; rows outside the ranges
 * kvc_near_update gave are holes: stale, not to be attended). */
const kvc_chunk *kvc_near_chunk(const kvc_near *nb);

/* Bytes the buffer holds (rows up to its end, spare capacity, bookkeeping). */
uint64_t kvc_near_bytes(const kvc_near *nb);

void kvc_near_free(kvc_near *nb);

#endif
