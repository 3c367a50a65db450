/* Quantization math and bit packing for the quant codec (see quant_pack.h): f16
 * min/scale with directed rounding, per-row asymmetric quantization at 1-4
 * bits, the 3-bit "11 values per word" packing of KVmix (eq. 12), the scalar
 * reference of the fused dequantise-and-multiply kernel, and its dispatch. */
#include "kv/codec/quant_pack.h"

#include <assert.h>
#include <math.h>


#define F16_MAX 65504.0f

void kvc_quant_pack(int bits, const uint8_t *codes, int n, uint32_t *words) {
    int vpw = kvc_quant_vpw(bits), nw = kvc_quant_words(bits, n);
    assert(vpw > 0);
    for (int w = 0; w < nw; w++) {
        uint32_t word = 0;
        for (int s = 0; s < vpw; s++) {
            int i = w * vpw + s;
            if (i >= n) break;
            assert(codes[i] <= kvc_quant_qmax(bits, i));
            word |= (uint32_t)codes[i] << (s * bits);
        }
        words[w] = word;
    }
}

void kvc_quant_unpack(int bits, const uint32_t *words, int n, uint8_t *codes) {
    int vpw = kvc_quant_vpw(bits);
    uint32_t mask = (1u << bits) - 1;
    assert(vpw > 0);
    for (int i = 0; i < n; i++) codes[i] = (uint8_t)((words[i / vpw] >> ((i % vpw) * bits)) & mask);
}

static float clamp_f16_range(float x) { return x > F16_MAX ? F16_MAX : x < -F16_MAX ? -F16_MAX : x; }

kvc_f16 kvc_f16_round_down(float x) {
    x = clamp_f16_range(x);
    kvc_f16 h = kvc_f32_to_f16(x);
    if (kvc_f16_to_f32(h) > x) {
        if (h == 0x0000 || h == 0x8000) h = 0x8001; /* below zero: -smallest subnormal */
        else if (h & 0x8000) h++;                   /* negative: larger magnitude */
        else h--;                                   /* positive: smaller magnitude */
    }
    return h;
}

kvc_f16 kvc_f16_round_up(float x) {
    x = clamp_f16_range(x);
    kvc_f16 h = kvc_f32_to_f16(x);
    if (kvc_f16_to_f32(h) < x) {
        if (h == 0x8000 || h == 0x0000) h = 0x0001;
        else if (h & 0x8000) h--; /* negative: smaller magnitude */
        else h++;
    }
    return h;
}

void kvc_quant_params(float mn, float mx, int bits, kvc_f16 *min_out, kvc_f16 *scale_out) {
    if (mn > mx) mn = mx = 0.0f; /* all NaN */
    mn = clamp_f16_range(mn);
    mx = clamp_f16_range(mx);
    kvc_f16 min_h = kvc_f16_round_down(mn);
    float minf = kvc_f16_to_f32(min_h);
    int qmax = bits == 3 ? 7 : (1 << bits) - 1;
    kvc_f16 scale_h = 0;
    if (mx > minf) {
        double sd = ((double)mx - (double)minf) / qmax;
        float sf = (float)sd;
        if ((double)sf < sd) sf = nextafterf(sf, INFINITY);
        scale_h = kvc_f16_round_up(sf);
    }
    *min_out = min_h;
    *scale_out = scale_h;
}

/* One row: min/max, f16 params, codes. */
static void encode_row(const float *x, ptrdiff_t stride, int n, int bits, kvc_f16 *min_out,
                       kvc_f16 *scale_out, uint32_t *words) {
    float mn = INFINITY, mx = -INFINITY;
    for (int i = 0; i < n; i++) {
        float v = x[i * stride];
        if (v < mn) mn = v; /* NaN compares false: ignored */
        if (v > mx) mx = v;
    }
    kvc_quant_params(mn, mx, bits, min_out, scale_out);
    float minf = kvc_f16_to_f32(*min_out), scalef = kvc_f16_to_f32(*scale_out);
    uint8_t codes[KVC_QUANT_MAX_N];
    for (int i = 0; i < n; i++) codes[i] = (uint8_t)kvc_quant_code(x[i * stride], minf, scalef, kvc_quant_qmax(bits, i));
    kvc_quant_pack(bits, codes, n, words);
}

void kvc_quant_encode(const float *x, ptrdiff_t row_stride, ptrdiff_t val_stride, int rows, int n,
                      int bits, kvc_f16 *mins, kvc_f16 *scales, uint32_t *words) {
    assert(kvc_quant_vpw(bits) > 0 && n >= 1 && n <= KVC_QUANT_MAX_N);
    int wpr = kvc_quant_words(bits, n);
    for (int r = 0; r < rows; r++)
        encode_row(x + r * row_stride, val_stride, n, bits, &mins[r], &scales[r],
                   words + (size_t)r * wpr);
}

void kvc_quant_decode(const kvc_qtile *t, float *out, ptrdiff_t ldo) {
    int wpr = kvc_quant_words(t->bits, t->n);
    uint8_t codes[KVC_QUANT_MAX_N];
    for (int r = 0; r < t->rows; r++) {
        float s = kvc_f16_to_f32(t->scales[r]), m = kvc_f16_to_f32(t->mins[r]);
        kvc_quant_unpack(t->bits, t->words + (size_t)r * wpr, t->n, codes);
        for (int i = 0; i < t->n; i++) out[r * ldo + i] = (float)codes[i] * s + m;
    }
}

void kvc_quant_wsum_scalar(const kvc_qtile *t, const float *w, ptrdiff_t ldw, int nw, float *out,
                           ptrdiff_t ldo) {
    int wpr = kvc_quant_words(t->bits, t->n), n = t->n;
    uint8_t codes[KVC_QUANT_MAX_N];
    for (int h = 0; h < nw; h++) {
        float acc[KVC_QUANT_MAX_N] = {0};
        float msum = 0.0f;
        for (int r = 0; r < t->rows; r++) {
            float wr = w[h * ldw + r];
            float ws = wr * kvc_f16_to_f32(t->scales[r]);
            msum += wr * kvc_f16_to_f32(t->mins[r]);
            kvc_quant_unpack(t->bits, t->words + (size_t)r * wpr, n, codes);
            for (int i = 0; i < n; i++) acc[i] += ws * (float)codes[i];
        }
        for (int i = 0; i < n; i++) out[h * ldo + i] += acc[i] + msum;
    }
}

kvc_quant_wsum_fn kvc_quant_wsum_k = kvc_quant_wsum_scalar;
