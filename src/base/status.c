/* Status strings and the thread-local last-error message (zstd-style: the
 * library reports, never exits). */
#include "base/status.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[512];

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

const char *kvc_last_error(void) { return last_error; }

void kvc_clear_error(void) { last_error[0] = '\0'; }

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
    return s;
}
