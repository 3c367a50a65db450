/* Token budgets of the selecting and evicting methods (h2o, quest,
 * streaming, sentkv): a value b <= 1 is a fraction of the tokens seen,
 * ceil(b * seen) with b read as the decimal the user wrote (the float 0.3f is
 * 0.30000001, which would round 1200 * 0.3 up to 361); a value above 1 is a
 * token count. */
#ifndef KVC_KV_METHOD_BUDGET_H
#define KVC_KV_METHOD_BUDGET_H

#include <math.h>
#include <stdint.h>

static inline int64_t kvc_budget_tokens(float b, int64_t seen) {
    if (b > 1.0f) return (int64_t)b;
    double f = round((double)b * 1e6) / 1e6;
    return (int64_t)ceil(f * (double)seen - 1e-9);
}

#endif
