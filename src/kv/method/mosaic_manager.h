/* MosaicKV's manager thread (MosaicKV §5.4 "Heterogeneous Double Compression
 * Buffering"; docs/methods.md "mosaic"): closing a decode segment — its
 * strategy (eigendecomposition, rate / group / block choice) and its final
 * packed chunk — runs on a background thread while decode goes on with the
 * segment's temporarily compressed chunks; the cache thread swaps the result
 * in at a step boundary (the method's step hook), never waiting for it.
 *
 * A job owns its inputs (the segment's original rows and second moments,
 * moved out of the stream) and, once `done` is set (release), its outputs;
 * the manager touches nothing else, so the stream's chunk list stays the
 * cache thread's alone. One thread per cache serves every stream, jobs in
 * submission order. */
#ifndef KVC_KV_METHOD_MOSAIC_MANAGER_H
#define KVC_KV_METHOD_MOSAIC_MANAGER_H

#include <stdatomic.h>

#include "kv/method/mosaic_strategy.h"

typedef struct kvc_mosaic_job {
    /* inputs (owned) */
    kvc_mosaic_opts opts;
    int d, n;
    int64_t pos0;
    float *k, *v;           /* [n][d] original rows */
    kvc_cov ck, cv;         /* their second moments */
    /* the cache thread's bookkeeping */
    int n_temp;             /* temporary chunks the result replaces */
    uint64_t seq;           /* segment order within the stream */
    struct kvc_mosaic_job *next_pending;
    /* outputs, valid once done */
    kvc_mosaic_strategy strat;
    kvc_chunk *chunk;
    kvc_status st;
    char err[256];
    atomic_int done;
    struct kvc_mosaic_job *next_queued; /* manager's queue */
} kvc_mosaic_job;

/* Computes the job's strategy and chunk (on whichever thread calls it) and
 * sets done. */
void kvc_mosaic_job_run(kvc_mosaic_job *j);
/* Frees the inputs and whatever output was not taken (chunk, strategy). */
void kvc_mosaic_job_free(kvc_mosaic_job *j);

typedef struct kvc_mosaic_manager kvc_mosaic_manager;

kvc_status kvc_mosaic_manager_start(kvc_mosaic_manager **out);
/* Queues a job; the manager runs it and sets its done flag. */
void kvc_mosaic_manager_submit(kvc_mosaic_manager *m, kvc_mosaic_job *j);
/* Finishes the queued jobs, joins the thread, frees the manager. */
void kvc_mosaic_manager_stop(kvc_mosaic_manager *m);

/* Jobs run and the thread time they took (seconds), so far. */
void kvc_mosaic_manager_stats(kvc_mosaic_manager *m, int64_t *jobs, double *busy_s);

#endif
