/* MosaicKV's manager thread (mosaic_manager.h): a FIFO of jobs under a mutex,
 * one worker that runs them, counters of jobs and busy time. */
#include "kv/method/mosaic_manager.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kvcomp/progress.h" /* kvc_thread_cpu_s */

struct kvc_mosaic_manager {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    kvc_mosaic_job *head, *tail;
    int stop;
    int64_t jobs;
    double busy_s;
};

void kvc_mosaic_job_run(kvc_mosaic_job *j) {
    kvc_status st = kvc_mosaic_strategy_make(&j->opts, j->d, &j->ck, &j->cv, j->k, j->v, j->n, j->d,
                                             &j->strat);
    if (st == KVC_OK) {
        st = kvc_mosaic_encode(&j->strat, j->k, j->v, j->n, j->d, j->pos0, &j->chunk);
        if (st != KVC_OK) kvc_mosaic_strategy_clear(&j->strat);
    }
    if (st != KVC_OK) snprintf(j->err, sizeof j->err, "%s", kvc_last_error());
    j->st = st;
    atomic_store_explicit(&j->done, 1, memory_order_release);
}

void kvc_mosaic_job_free(kvc_mosaic_job *j) {
    if (!j) return;
    free(j->k);
    free(j->v);
    kvc_cov_free(&j->ck);
    kvc_cov_free(&j->cv);
    kvc_mosaic_strategy_clear(&j->strat);
    kvc_chunk_free(j->chunk);
    free(j);
}

static void *manager_main(void *arg) {
    kvc_mosaic_manager *m = arg;
    pthread_mutex_lock(&m->mu);
    for (;;) {
        while (!m->head && !m->stop) pthread_cond_wait(&m->cv, &m->mu);
        kvc_mosaic_job *j = m->head;
        if (!j) break; /* stopping with an empty queue */
        m->head = j->next_queued;
        if (!m->head) m->tail = NULL;
        pthread_mutex_unlock(&m->mu);
        double t0 = kvc_thread_cpu_s();
        kvc_mosaic_job_run(j); /* j belongs to its stream again once done is set */
        double dt = kvc_thread_cpu_s() - t0;
        pthread_mutex_lock(&m->mu);
        m->jobs++;
        m->busy_s += dt;
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

kvc_status kvc_mosaic_manager_start(kvc_mosaic_manager **out) {
    *out = NULL;
    kvc_mosaic_manager *m = calloc(1, sizeof *m);
    if (!m) return kvc_fail(KVC_ERR_NOMEM, "mosaic manager");
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    if (pthread_create(&m->thread, NULL, manager_main, m) != 0) {
        pthread_mutex_destroy(&m->mu);
        pthread_cond_destroy(&m->cv);
        free(m);
        return kvc_fail(KVC_ERR_INTERNAL, "mosaic: cannot start the manager thread");
    }
    *out = m;
    return KVC_OK;
}

void kvc_mosaic_manager_submit(kvc_mosaic_manager *m, kvc_mosaic_job *j) {
    j->next_queued = NULL;
    pthread_mutex_lock(&m->mu);
    if (m->tail) m->tail->next_queued = j;
    else m->head = j;
    m->tail = j;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

void kvc_mosaic_manager_stop(kvc_mosaic_manager *m) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->stop = 1;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
    pthread_join(m->thread, NULL);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    free(m);
}

void kvc_mosaic_manager_stats(kvc_mosaic_manager *m, int64_t *jobs, double *busy_s) {
    pthread_mutex_lock(&m->mu);
    *jobs = m->jobs;
    *busy_s = m->busy_s;
    pthread_mutex_unlock(&m->mu);
}
