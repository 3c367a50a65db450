/* AVX-512 dot kernels for the float weight types F32, F16 and BF16 against an
 * f32 activation (masked tails, so any length); references in
 * src/model/wt_float.c. */
#include "kernels/avx512/wt_avx512_util.h"
#include "model/wt_kernels.h"

KVC_AINLINE __m512 ld_f32(const void *p, __mmask16 k) {
    return _mm512_maskz_loadu_ps(k, p);
}
KVC_AINLINE __m512 ld_f16(const void *p, __mmask16 k) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, p));
}
KVC_AINLINE __m512 ld_bf16(const void *p, __mmask16 k) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, p)), 16));
}

/* one body per weight format; `ld` and the element size are compile-time constants */
KVC_AINLINE float dot_float(const uint8_t *w, const float *a, int64_t n, int esize,
                            __m512 (*ld)(const void *, __mmask16)) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    const __mmask16 all = 0xffff;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_fmadd_ps(ld(w + i * esize, all), _mm512_loadu_ps(a + i), s0);
        s1 = _mm512_fmadd_ps(ld(w + (i + 16) * esize, all), _mm512_loadu_ps(a + i + 16), s1);
        s2 = _mm512_fmadd_ps(ld(w + (i + 32) * esize, all), _mm512_loadu_ps(a + i + 32), s2);
        s3 = _mm512_fmadd_ps(ld(w + (i + 48) * esize, all), _mm512_loadu_ps(a + i + 48), s3);
    }
    for (; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? all : kvc_mask16((int)(n - i));
        s0 = _mm512_fmadd_ps(ld(w + i * esize, k), _mm512_maskz_loadu_ps(k, a + i), s0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

static float dot_f32_f32_avx512(const void *row, const void *act, int64_t n) {
    return dot_float(row, act, n, 4, ld_f32);
}
static float dot_f16_f32_avx512(const void *row, const void *act, int64_t n) {
    return dot_float(row, act, n, 2, ld_f16);
}
static float dot_bf16_f32_avx512(const void *row, const void *act, int64_t n) {
    return dot_float(row, act, n, 2, ld_bf16);
}

static void dequant_f16_avx512(const void *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? 0xffff : kvc_mask16((int)(n - i));
        _mm512_mask_storeu_ps(y + i, k, ld_f16((const uint16_t *)x + i, k));
    }
}
static void dequant_bf16_avx512(const void *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? 0xffff : kvc_mask16((int)(n - i));
        _mm512_mask_storeu_ps(y + i, k, ld_bf16((const uint16_t *)x + i, k));
    }
}

void kvc_wt_register_float_avx512(kvc_wtype *table) {
    table[KVC_WT_F32].dot = dot_f32_f32_avx512;
    table[KVC_WT_F16].dot = dot_f16_f32_avx512;
    table[KVC_WT_F16].dequant = dequant_f16_avx512;
    table[KVC_WT_BF16].dot = dot_bf16_f32_avx512;
    table[KVC_WT_BF16].dequant = dequant_bf16_avx512;
}
