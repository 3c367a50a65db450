/* A one-line progress indicator for long runs (eval, bench, dump-kv): on a
 * terminal it redraws "label  done/total  pct  rate/s  elapsed  eta" in place
 * on stderr at most ten times a second; when stderr is not a terminal (a log
 * file, CI) it prints that line plainly every 30 seconds, so short runs stay
 * quiet and a long evaluation's log shows how far it got. KVC_PROGRESS=0
 * silences it, KVC_PROGRESS=1 forces the redrawn line (for testing the drawing). */
#ifndef KVCOMP_PROGRESS_H
#define KVCOMP_PROGRESS_H

#include <stdint.h>

typedef struct kvc_progress {
    int active;       /* 0 silent, 1 redrawn line, 2 a plain line now and then */
    int drawn;        /* something is on the line (needs clearing) */
    int64_t total;    /* <= 0: unknown, no percentage or eta */
    double t0, last;  /* start and last draw, seconds */
    char label[96];
} kvc_progress;

/* Starts a progress line; label is copied (truncated to fit). */
void kvc_progress_begin(kvc_progress *p, const char *label, int64_t total);
/* Reports `done` units finished; redraws if 0.1 s passed since the last draw. */
void kvc_progress_update(kvc_progress *p, int64_t done);
/* Clears the line so the caller's next output starts on a clean line. */
void kvc_progress_end(kvc_progress *p);

/* Monotonic wall-clock seconds (also used by benchmarks). */
double kvc_now_s(void);
/* CPU seconds used by this process, all threads (benchmarks on a shared
 * machine: time the scheduler gives to other processes is left out). */
double kvc_cpu_s(void);
/* CPU seconds used by the calling thread (a background thread's busy time). */
double kvc_thread_cpu_s(void);

#endif
