/* Status strings and the thread-local last-error message (zstd-style: the
 * library reports, never exits). A failure inside a thread-pool task records
 * its message on the worker thread; the caller on another thread sees only
 * the status. So every message is also copied to one shared slot, which
 * kvc_last_error returns when the calling thread has none of its own. */
#include "base/status.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[512];
static char shared_error[512]; /* the latest message of any thread */
static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;

const char *kvc_status_string(kvc_status s) {
    switch (s) {
    case KVC_OK: return "ok";
    case KVC_ERR_NOMEM: return "out of memory";
    case KVC_ERR_IO: return "i/o error";
    case KVC_ERR_FORMAT: return "malformed input";
    case KVC_ERR_UNSUPPORTED: return "unsupported";
    case KVC_ERR_ARG: return "invalid argument";
    case KVC_ERR_RANGE: return "out of range";
    case KVC_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char *kvc_last_error(void) {
    if (last_error[0] == '\0') {
        pthread_mutex_lock(&shared_mu);
        memcpy(last_error, shared_error, sizeof last_error);
        pthread_mutex_unlock(&shared_mu);
    }
    return last_error;
}

void kvc_clear_error(void) {
    last_error[0] = '\0';
    pthread_mutex_lock(&shared_mu);
    shared_error[0] = '\0';
    pthread_mutex_unlock(&shared_mu);
}

kvc_status kvc_fail_at(const char *file, int line, kvc_status s, const char *fmt, ...) {
    int off = 0;
#ifdef KVC_DEBUG
    off = snprintf(last_error, sizeof last_error, "[%s:%d] ", file, line);
    if (off < 0 || off >= (int)sizeof last_error) off = 0;
#else
    (void)file;
    (void)line;
#endif
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error + off, sizeof last_error - (size_t)off, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&shared_mu);
    memcpy(shared_error, last_error, sizeof shared_error);
    pthread_mutex_unlock(&shared_mu);
    return s;
}
