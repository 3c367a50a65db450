/* Internal error helpers over the public kvc_status: a thread-local message
 * buffer that names the field and the value, and early-return macros. In debug
 * builds (KVC_DEBUG) the message is prefixed with the file:line that set it. */
#ifndef KVC_BASE_STATUS_H
#define KVC_BASE_STATUS_H

#include "kvcomp.h"

/* Records a formatted message for kvc_last_error() and returns `s`, so that
 * `return kvc_fail(KVC_ERR_FORMAT, "tensor %s: ...", name);` reads naturally. */
kvc_status kvc_fail_at(const char *file, int line, kvc_status s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define kvc_fail(s, ...) kvc_fail_at(__FILE__, __LINE__, (s), __VA_ARGS__)

/* Clears the message (a successful public call need not do this). */
void kvc_clear_error(void);

/* Propagate a failure: evaluates `expr` once, returns its status if not OK. */
#define KVC_TRY(expr)                                                                              \
    do {                                                                                           \
        kvc_status kvc_try_s_ = (expr);                                                            \
        if (kvc_try_s_ != KVC_OK) return kvc_try_s_;                                               \
    } while (0)

/* Check an untrusted condition: on failure record the message and return. */
#define KVC_CHECK(cond, s, ...)                                                                    \
    do {                                                                                           \
        if (!(cond)) return kvc_fail((s), __VA_ARGS__);                                            \
    } while (0)

#endif
