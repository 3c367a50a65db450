/* A one-line progress indicator for long runs (eval, bench, dump-kv): on a
 * terminal it redraws "label  done/total  pct  elapsed  eta" in place on
 * stderr at most ten times a second; when stderr is not a terminal (piped,
 * redirected, CI) it prints nothing. KVC_PROGRESS=0 silences it on a terminal
 * too, KVC_PROGRESS=1 forces it (for testing the drawing). */
#ifndef KVCOMP_PROGRESS_H
#define KVCOMP_PROGRESS_H

#include <stdint.h>

typedef struct kvc_progress {
    int active;       /* drawing at all */
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

#endif
