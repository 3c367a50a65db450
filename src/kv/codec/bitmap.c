/* Bitmap tile codec (MUSTAFAR §3, Figure 5b, Appendix C): packing of pruned
 * tokens into 64-channel tiles (64-bit bitmap + f16 kept values), unpacking,
 * and the scalar reference kernels that compute q·k and p·v directly on the
 * tiles. Layout and its justification: docs/formats.md "Bitmap tiles". */
#include "kv/codec/bitmap.h"

#include <assert.h>
#include <pthread.h>

#include "base/cpu.h"

void kvc_bitmap_pack(const float *x, const uint64_t *mask, int d, uint64_t *bits, kvc_f16 *vals) {
    int nt = kvc_bitmap_tiles(d), w = 0;
    for (int t = 0; t < nt; t++) {
        uint64_t m = mask[t];
        if (t == nt - 1 && (d & 63)) m &= (1ull << (d & 63)) - 1; /* never bits past d */
        bits[t] = m;
        while (m) {
            int c = t * 64 + __builtin_ctzll(m);
            vals[w++] = kvc_f32_to_f16(x[c]);
            m &= m - 1;
        }
    }
}

void kvc_bitmap_unpack(const uint64_t *bits, const kvc_f16 *vals, int d, float *x) {
    int nt = kvc_bitmap_tiles(d), r = 0;
    for (int c = 0; c < d; c++) x[c] = 0.0f;
    for (int t = 0; t < nt; t++) {
        uint64_t m = bits[t];
        while (m) {
            x[t * 64 + __builtin_ctzll(m)] = kvc_f16_to_f32(vals[r++]);
            m &= m - 1;
        }
    }
}

void kvc_qk_bitmap_f16_scalar(const kvc_bitmap_view *k, int n, const float *q, int g, int ldq,
                              float *s, int lds) {
    int d = k->d, nt = kvc_bitmap_tiles(d);
    assert(g <= KVC_BITMAP_MAX_G);
    for (int i = 0; i < n; i++) {
        const uint64_t *bits = k->bits + (size_t)i * nt;
        const kvc_f16 *vals = k->vals + (size_t)i * k->keep;
        float acc[KVC_BITMAP_MAX_G] = {0};
        for (int t = 0; t < nt; t++) {
            uint64_t m = bits[t];
            while (m) {
                int c = t * 64 + __builtin_ctzll(m);
                float x = kvc_f16_to_f32(*vals++);
                for (int h = 0; h < g; h++) acc[h] += q[(size_t)h * ldq + c] * x;
                m &= m - 1;
            }
        }
        for (int h = 0; h < g; h++) s[(size_t)h * lds + i] = acc[h];
    }
}

void kvc_pv_bitmap_f16_scalar(const kvc_bitmap_view *v, int n, const float *p, int g, int ldp,
                              float *o, int ldo) {
    int d = v->d, nt = kvc_bitmap_tiles(d);
    for (int i = 0; i < n; i++) {
        const uint64_t *bits = v->bits + (size_t)i * nt;
        const kvc_f16 *vals = v->vals + (size_t)i * v->keep;
        for (int t = 0; t < nt; t++) {
            uint64_t m = bits[t];
            while (m) {
                int c = t * 64 + __builtin_ctzll(m);
                float x = kvc_f16_to_f32(*vals++);
                for (int h = 0; h < g; h++) o[(size_t)h * ldo + c] += p[(size_t)h * ldp + i] * x;
                m &= m - 1;
            }
        }
    }
}

static kvc_bitmap_kernels active_kernels = {kvc_qk_bitmap_f16_scalar, kvc_pv_bitmap_f16_scalar};
static pthread_once_t kernels_once = PTHREAD_ONCE_INIT;

static void kernels_init(void) {
    kvc_isa isa = kvc_active_isa();
    if (isa >= KVC_ISA_AVX512) {
        active_kernels.qk = kvc_qk_bitmap_f16_avx512;
        active_kernels.pv = kvc_pv_bitmap_f16_avx512;
    } else if (isa >= KVC_ISA_AVX2) {
        active_kernels.qk = kvc_qk_bitmap_f16_avx2;
        active_kernels.pv = kvc_pv_bitmap_f16_avx2;
    }
}

const kvc_bitmap_kernels *kvc_bitmap_kernels_get(void) {
    pthread_once(&kernels_once, kernels_init);
    return &active_kernels;
}
