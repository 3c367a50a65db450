/* Float weight types F32, F16 (IEEE half) and BF16: scalar references for
 * dequantise, dot with an f32 activation and conversion from f32. The dot
 * accumulates in double so that it is a tight reference for the SIMD variants
 * (src/kernels/<isa>/wt_float_<isa>.c). GGUF spec: ggml type ids 0, 1, 30. */
#include "model/wt_kernels.h"

#include <string.h>

void kvc_dequant_f32_ref(const void *x, float *y, int64_t n) {
    memcpy(y, x, (size_t)n * sizeof(float));
}

float kvc_dot_f32_ref(const void *row, const void *act, int64_t n) {
    const float *w = row, *a = act;
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)w[i] * a[i];
    return (float)s;
}

void kvc_quantize_f32_ref(const float *x, void *y, int64_t n) {
    memcpy(y, x, (size_t)n * sizeof(float));
}

void kvc_dequant_f16_ref(const void *x, float *y, int64_t n) {
    const kvc_f16 *h = x;
    for (int64_t i = 0; i < n; i++)
        y[i] = kvc_f16_to_f32(h[i]);
}

float kvc_dot_f16_ref(const void *row, const void *act, int64_t n) {
    const kvc_f16 *w = row;
    const float *a = act;
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)kvc_f16_to_f32(w[i]) * a[i];
    return (float)s;
}

void kvc_quantize_f16_ref(const float *x, void *y, int64_t n) {
    kvc_f16 *h = y;
    for (int64_t i = 0; i < n; i++)
        h[i] = kvc_f32_to_f16(x[i]);
}

void kvc_dequant_bf16_ref(const void *x, float *y, int64_t n) {
    const kvc_bf16 *h = x;
    for (int64_t i = 0; i < n; i++)
        y[i] = kvc_bf16_to_f32(h[i]);
}

float kvc_dot_bf16_ref(const void *row, const void *act, int64_t n) {
    const kvc_bf16 *w = row;
    const float *a = act;
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)kvc_bf16_to_f32(w[i]) * a[i];
    return (float)s;
}

void kvc_quantize_bf16_ref(const float *x, void *y, int64_t n) {
    kvc_bf16 *h = y;
    for (int64_t i = 0; i < n; i++)
        h[i] = kvc_f32_to_bf16(x[i]);
}
