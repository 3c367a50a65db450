/* A fork-join thread pool for data-parallel kernels (matvec rows, KV heads,
 * token splits). The calling thread takes part as thread 0. Workers spin
 * briefly between jobs (decode issues hundreds of small jobs per token, so a
 * condition-variable wake-up per job would cost more than the job) and then
 * sleep. One job runs at a time per pool. */
#ifndef KVC_BASE_THREADPOOL_H
#define KVC_BASE_THREADPOOL_H

#include "kvcomp.h"

typedef struct kvc_pool kvc_pool;

/* fn(ctx, task, thread): run task `task` in [0, n_tasks) on thread `thread`
 * in [0, kvc_pool_threads(pool)). Tasks are handed out dynamically, in
 * increasing order: when a task starts, every lower-numbered one has started
 * (so a task may wait for lower-numbered ones to finish; the attention driver
 * starts a KV head's top-k as soon as its scoring tasks are done). */
typedef void (*kvc_task_fn)(void *ctx, int task, int thread);

/* n_threads <= 0 means one per online CPU. */
kvc_status kvc_pool_create(int n_threads, kvc_pool **out);
void kvc_pool_free(kvc_pool *pool);
int kvc_pool_threads(const kvc_pool *pool);

/* Runs all tasks and returns when every one has finished. A NULL pool runs
 * them serially on the caller (thread 0). */
void kvc_pool_run(kvc_pool *pool, int n_tasks, kvc_task_fn fn, void *ctx);

#endif
