/* Progress line on a terminal; a plain line now and then when logged. See
 * include/kvcomp/progress.h. */
#include "kvcomp/progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double kvc_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double kvc_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double kvc_thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* 0: silent, 1: redrawn line (terminal), 2: a plain line every LOG_EVERY_S (logged). */
enum { LOG_EVERY_S = 30 };
static int progress_mode(void) {
    const char *e = getenv("KVC_PROGRESS");
    if (e && e[0] == '0') return 0;
    if (e && e[0] == '1') return 1;
    return isatty(fileno(stderr)) ? 1 : 2;
}

static void format_secs(char *buf, size_t cap, double s) {
    if (s < 0 || s > 1e7) {
        snprintf(buf, cap, "?");
    } else if (s < 60) {
        snprintf(buf, cap, "%.0fs", s);
    } else if (s < 3600) {
        snprintf(buf, cap, "%dm%02ds", (int)s / 60, (int)s % 60);
    } else {
        snprintf(buf, cap, "%dh%02dm", (int)s / 3600, ((int)s / 60) % 60);
    }
}

static void draw(kvc_progress *p, int64_t done, double now) {
    char el[16], eta[16];
    double elapsed = now - p->t0;
    double rate = elapsed > 0 ? (double)done / elapsed : 0;
    const char *start = p->active == 1 ? "\r\033[K" : "", *end = p->active == 1 ? "" : "\n";
    format_secs(el, sizeof el, elapsed);
    if (p->total > 0) {
        double frac = (double)done / (double)p->total;
        if (frac > 1) frac = 1;
        format_secs(eta, sizeof eta, done > 0 ? elapsed * (1 - frac) / frac : -1);
        fprintf(stderr, "%s%s  %lld/%lld  %3.0f%%  %.1f/s  %s  eta %s%s", start, p->label,
                (long long)done, (long long)p->total, 100 * frac, rate, el, eta, end);
    } else {
        fprintf(stderr, "%s%s  %lld  %.1f/s  %s%s", start, p->label, (long long)done, rate, el,
                end);
    }
    fflush(stderr);
    p->drawn = p->active == 1;
    p->last = now;
}

void kvc_progress_begin(kvc_progress *p, const char *label, int64_t total) {
    memset(p, 0, sizeof *p);
    p->active = progress_mode();
    p->total = total;
    snprintf(p->label, sizeof p->label, "%s", label ? label : "");
    p->t0 = p->last = kvc_now_s();
    if (p->active == 1) draw(p, 0, p->t0);
}

void kvc_progress_update(kvc_progress *p, int64_t done) {
    if (!p->active) return;
    double now = kvc_now_s();
    if (p->active == 2 ? now - p->last < LOG_EVERY_S : now - p->last < 0.1 && done < p->total)
        return;
    draw(p, done, now);
}

void kvc_progress_end(kvc_progress *p) {
    if (p->active && p->drawn) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    p->active = 0;
    p->drawn = 0;
}
