/* Fork-join pool: a job is (fn, ctx, n_tasks); workers wait for the job
 * generation to change, grab task indices with an atomic counter, and count
 * themselves done. Waiting spins for a while, then blocks on a condvar. */
#include "base/threadpool.h"
#include "base/status.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

/* Spin this many pauses before yielding the core (waiting for workers) or
 * sleeping (waiting for a job): short enough that an oversubscribed machine
 * (tests run in parallel, other processes) does not burn whole time slices. */
enum { SPIN_ITERS = 1 << 12 };

struct kvc_pool {
    int n_threads;
    pthread_t *workers;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    atomic_int generation;  /* bumped once per job */
    atomic_int sleepers;    /* workers blocked on `wake` */
    atomic_int next_task;
    atomic_int done_workers;
    atomic_bool stop;
    kvc_task_fn fn;
    void *ctx;
    int n_tasks;
};

typedef struct worker_arg {
    kvc_pool *pool;
    int thread;
} worker_arg;

static void run_tasks(kvc_pool *p, int thread) {
    for (;;) {
        int t = atomic_fetch_add_explicit(&p->next_task, 1, memory_order_relaxed);
        if (t >= p->n_tasks) break;
        p->fn(p->ctx, t, thread);
    }
}

static int wait_for_job(kvc_pool *p, int seen) {
    for (int i = 0; i < SPIN_ITERS; i++) {
        int g = atomic_load_explicit(&p->generation, memory_order_acquire);
        if (g != seen || atomic_load(&p->stop)) return g;
        __builtin_ia32_pause(); /* PAUSE: SSE2, every x86-64 */
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);
    int g;
    while ((g = atomic_load(&p->generation)) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->wake, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    kvc_pool *p = wa->pool;
    int thread = wa->thread;
    free(wa);
    int seen = 0;
    for (;;) {
        seen = wait_for_job(p, seen);
        if (atomic_load(&p->stop)) break;
        run_tasks(p, thread);
        atomic_fetch_add_explicit(&p->done_workers, 1, memory_order_release);
    }
    return NULL;
}

kvc_status kvc_pool_create(int n_threads, kvc_pool **out) {
    *out = NULL;
    n_threads = kvc_threads_resolve(n_threads);
    KVC_CHECK(n_threads <= 1024, KVC_ERR_ARG, "threads: %d is more than 1024", n_threads);
    kvc_pool *p = calloc(1, sizeof *p);
    if (!p) return kvc_fail(KVC_ERR_NOMEM, "thread pool: out of memory");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->workers = calloc((size_t)n_threads, sizeof *p->workers);
    if (!p->workers) {
        p->n_threads = 1; /* no worker to join */
        kvc_pool_free(p);
        return kvc_fail(KVC_ERR_NOMEM, "thread pool: out of memory");
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) { /* set before the thread starts: it reads them at once */
            wa->pool = p;
            wa->thread = i;
        }
        if (!wa || pthread_create(&p->workers[i], NULL, worker_main, wa) != 0) {
            free(wa);
            p->n_threads = i; /* only the started ones are joined */
            kvc_pool_free(p);
            return kvc_fail(KVC_ERR_NOMEM, "thread pool: cannot start thread %d", i);
        }
    }
    *out = p;
    return KVC_OK;
}

void kvc_pool_free(kvc_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->workers[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    free(p->workers);
    free(p);
}

int kvc_pool_threads(const kvc_pool *p) { return p ? p->n_threads : 1; }

void kvc_pool_run(kvc_pool *p, int n_tasks, kvc_task_fn fn, void *ctx) {
    if (!p || p->n_threads == 1 || n_tasks <= 1) {
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next_task, 0, memory_order_relaxed);
    atomic_store_explicit(&p->done_workers, 0, memory_order_relaxed);
    atomic_fetch_add(&p->generation, 1); /* seq_cst: pairs with the sleepers check */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
    run_tasks(p, 0);
    for (int spins = 0;
         atomic_load_explicit(&p->done_workers, memory_order_acquire) < p->n_threads - 1; spins++) {
        if (spins < SPIN_ITERS) __builtin_ia32_pause();
        else sched_yield(); /* a worker was descheduled: give it the core */
    }
}

int kvc_default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int kvc_threads_resolve(int n_threads) { return n_threads > 0 ? n_threads : kvc_default_threads(); }
