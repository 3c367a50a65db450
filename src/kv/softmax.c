/* Scalar reference softmax kernels of the attention driver (see softmax.h). */
#include "kv/softmax.h"

#include <math.h>

static float max_ref(const float *s, int n) {
    float m = -INFINITY;
    for (int i = 0; i < n; i++)
        if (s[i] > m) m = s[i];
    return m;
}

static float exp_sum_ref(float *s, int n, float m) {
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        s[i] = expf(s[i] - m);
        sum += s[i];
    }
    return sum;
}

const kvc_softmax_kernels kvc_softmax_ref = {.max = max_ref, .exp_sum = exp_sum_ref};
kvc_softmax_kernels kvc_softmax_k = {.max = max_ref, .exp_sum = exp_sum_ref};
