/* MUSTAFAR pruning and bitmap tiles (the MUSTAFAR paper §2, §3): every vector keeps
 * exactly round((1-s)·D) elements, the largest by |score|, ties to the lower
 * index; packing round-trips the kept values exactly (as f16 or bf16); the active
 * ISA's qk / pv kernels agree with the scalar references on random and
 * adversarial inputs (zeros, huge outliers, head sizes that are not multiples
 * of 64, token counts that are not multiples of 4 or 64, 1..39 query heads).
 *
 * Error budget of the kernels: both sides accumulate in f32 in a different
 * order, so |simd - ref| <= 2e-6 * sum_c |q_c * k_c| (about 16 f32 ulps of the
 * magnitude sum) for qk, and the same per output channel for pv. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "kv/codec/bitmap.h"
#include "kv/codec/codec.h"
#include "kv/codec/prune.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float frand(void) { return (float)(rnd() & 0xffffff) / 16777216.0f * 2.0f - 1.0f; }
static float gauss(void) {
    float s = 0;
    for (int i = 0; i < 4; i++) s += frand();
    return s;
}

static int popcount_mask(const uint64_t *m, int d) {
    int c = 0;
    for (int w = 0; w < (d + 63) / 64; w++) c += __builtin_popcountll(m[w]);
    return c;
}
static int bit(const uint64_t *m, int c) { return (int)(m[c >> 6] >> (c & 63) & 1); }

static void test_keep_count(void **state) {
    (void)state;
    assert_int_equal(kvc_prune_keep_count(0.5, 64), 32);
    assert_int_equal(kvc_prune_keep_count(0.7, 64), 19); /* 19.2 */
    assert_int_equal(kvc_prune_keep_count(0.7, 128), 38); /* 38.4 */
    assert_int_equal(kvc_prune_keep_count(0.5, 65), 33);  /* 32.5 rounds up */
    assert_int_equal(kvc_prune_keep_count(0.0, 64), 64);
    assert_int_equal(kvc_prune_keep_count(1.0, 64), 0);
    assert_int_equal(kvc_prune_keep_count(0.9, 64), 6); /* 6.4 */
    assert_int_equal(kvc_prune_keep_count(0.8, 80), 16);
    for (int d = 1; d <= 300; d++)
        for (int si = 0; si <= 100; si++) {
            int k = kvc_prune_keep_count(si / 100.0, d);
            assert_true(k >= 0 && k <= d);
            assert_true(fabs(k - (1.0 - si / 100.0) * d) <= 0.5 + 1e-9);
        }
}

/* Exactly keep bits; every kept |x| >= every pruned |x|; at equal |x| the
 * kept index is lower than the pruned one. */
static void check_topk(const float *x, int d, int keep, const uint64_t *m) {
    assert_int_equal(popcount_mask(m, d), keep);
    for (int w = 0; w < (d + 63) / 64; w++)
        if (w == (d - 1) / 64 && (d & 63)) assert_int_equal(m[w] >> (d & 63), 0);
    for (int a = 0; a < d; a++) {
        if (!bit(m, a)) continue;
        for (int b = 0; b < d; b++) {
            if (bit(m, b)) continue;
            float fa = fabsf(x[a]), fb = fabsf(x[b]);
            if (isnan(fb)) assert_true(isnan(fa)); /* NaN ranks highest */
            else if (!isnan(fa)) {
                assert_true(fa >= fb);
                if (fa == fb) assert_true(a < b);
            }
        }
    }
}

static void test_topk_random_and_ties(void **state) {
    (void)state;
    const int ds[] = {1, 2, 7, 63, 64, 65, 100, 128, 200, 256};
    float x[256];
    uint64_t m[4];
    for (unsigned di = 0; di < sizeof ds / sizeof ds[0]; di++) {
        int d = ds[di];
        for (int rep = 0; rep < 40; rep++) {
            int kind = rep % 5;
            for (int c = 0; c < d; c++) {
                switch (kind) {
                case 0: x[c] = gauss(); break;
                case 1: x[c] = (float)(int)(frand() * 3); break; /* many ties, signed */
                case 2: x[c] = 0.0f; break;                      /* all zeros */
                case 3: x[c] = (rnd() % 10 == 0) ? 1e30f * frand() : 1e-30f * frand(); break;
                default: x[c] = (rnd() % 17 == 0) ? NAN : gauss(); break;
                }
            }
            for (int keep = 0; keep <= d; keep += (d > 16 ? d / 7 + 1 : 1)) {
                kvc_prune_topk(x, d, keep, m);
                check_topk(x, d, keep, m);
            }
            int keep = kvc_prune_keep_count(0.7, d);
            kvc_prune_topk(x, d, keep, m);
            check_topk(x, d, keep, m);
        }
    }
    /* all equal: the first `keep` channels */
    for (int c = 0; c < 64; c++) x[c] = -2.5f;
    kvc_prune_topk(x, 64, 19, m);
    assert_true(m[0] == (1ull << 19) - 1);
    /* +0 and -0 tie as well */
    for (int c = 0; c < 64; c++) x[c] = (c & 1) ? -0.0f : 0.0f;
    kvc_prune_topk(x, 64, 32, m);
    assert_true(m[0] == (1ull << 32) - 1);
}

/* The SIMD top-k and pack are bit-exact with the references (the mask and
 * the f16 / bf16 values are the format, not an approximation). */
static void test_topk_simd_matches_reference(void **state) {
    (void)state;
    if (kvc_cpu_isa() < KVC_ISA_AVX2) skip();
    const int avx512 = kvc_cpu_isa() >= KVC_ISA_AVX512;
    const int ds[] = {1, 3, 16, 17, 63, 64, 65, 80, 128, 200, 256, 1024};
    static float x[1024];
    uint64_t m1[16], m2[16];
    for (unsigned di = 0; di < sizeof ds / sizeof ds[0]; di++) {
        int d = ds[di];
        for (int rep = 0; rep < 60; rep++) {
            int kind = rep % 6;
            for (int c = 0; c < d; c++) {
                switch (kind) {
                case 0: x[c] = gauss(); break;
                case 1: x[c] = (float)(int)(frand() * 3); break;
                case 2: x[c] = 0.0f; break;
                case 3: x[c] = (rnd() % 10 == 0) ? 1e30f * frand() : 1e-40f * frand(); break; /* subnormals */
                case 4: x[c] = (rnd() % 17 == 0) ? NAN : ((rnd() % 13 == 0) ? INFINITY : gauss()); break;
                default: x[c] = (rnd() & 1) ? -1.5f : 1.5f; break; /* all tie */
                }
            }
            for (int keep = 0; keep <= d; keep += (d > 40 ? d / 13 + 1 : 1)) {
                kvc_prune_topk_scalar(x, d, keep, m1);
                kvc_prune_topk_avx2(x, d, keep, m2);
                assert_memory_equal(m1, m2, sizeof(uint64_t) * ((d + 63) / 64));
                if (!avx512) continue;
                kvc_prune_topk_avx512(x, d, keep, m2);
                assert_memory_equal(m1, m2, sizeof(uint64_t) * ((d + 63) / 64));
                for (int bf16 = 0; bf16 <= 1; bf16++) {
                    if (kind == 4 && !bf16) continue; /* NaN payloads may differ in the packed f16 */
                    static uint16_t v1[1024], v2[1024];
                    uint64_t b1[16], b2[16];
                    kvc_bitmap_pack_scalar(x, m1, d, bf16, b1, v1);
                    kvc_bitmap_pack_avx512(x, m1, d, bf16, b2, v2);
                    assert_memory_equal(b1, b2, sizeof(uint64_t) * ((d + 63) / 64));
                    assert_memory_equal(v1, v2, sizeof(uint16_t) * (size_t)keep);
                }
            }
            kvc_prune_topk_scalar(x, d, d, m1);
            kvc_prune_topk_avx2(x, d, d, m2);
            assert_memory_equal(m1, m2, sizeof(uint64_t) * ((d + 63) / 64));
            if (!avx512) continue;
            kvc_prune_topk_avx512(x, d, d, m2);
            assert_memory_equal(m1, m2, sizeof(uint64_t) * ((d + 63) / 64));
        }
    }
}

static void test_outaware_score(void **state) {
    (void)state;
    float k[8] = {1, -2, 3, -4, 5, -6, 7, -8}, q[2][8], acc[8] = {0}, s[8];
    for (int c = 0; c < 8; c++) q[0][c] = (c == 0) ? 100.0f : -1.0f, q[1][c] = 0.5f;
    kvc_prune_accumulate_absq(&q[0][0], 2, 8, acc);
    assert_true(acc[0] == 100.5f && acc[3] == 1.5f);
    kvc_prune_outaware_score(k, acc, 8, s);
    uint64_t m;
    kvc_prune_topk(s, 8, 2, &m);
    /* channel 0 (|1| * 100.5) and channel 7 (|-8| * 1.5) */
    assert_true(m == ((1ull << 0) | (1ull << 7)));
}

static void test_pack_roundtrip(void **state) {
    (void)state;
    const int ds[] = {1, 5, 64, 65, 96, 128, 130, 256};
    float x[256], y[256];
    uint64_t m[4], bits[4];
    uint16_t vals[256];
    for (unsigned di = 0; di < sizeof ds / sizeof ds[0]; di++) {
        int d = ds[di];
        for (int rep = 0; rep < 100; rep++) {
            int bf16 = rep & 1;
            for (int c = 0; c < d; c++) x[c] = (rep % 3 == 0) ? gauss() * 1000.0f : gauss();
            if (rep % 7 == 0) x[d / 2] = 0.0f;
            int keep = (int)(rnd() % (unsigned)(d + 1));
            kvc_prune_topk(x, d, keep, m);
            kvc_bitmap_pack(x, m, d, bf16, bits, vals);
            assert_int_equal(popcount_mask(bits, d), keep);
            kvc_bitmap_unpack(bits, vals, d, bf16, y);
            for (int c = 0; c < d; c++) {
                float want = bit(m, c) ? kvc_bitmap_widen(kvc_bitmap_narrow(x[c], bf16), bf16) : 0.0f;
                assert_memory_equal(&y[c], &want, sizeof(float));
            }
        }
    }
}

/* n tokens of dimension d pruned to keep, encoded; vals padded. */
typedef struct enc {
    uint64_t *bits;
    uint16_t *vals;
    float *dense; /* decoded (pruned, f16- or bf16-rounded) [n][d] */
} enc;

static void encode_tokens(int n, int d, int keep, int kind, int bf16, enc *e) {
    int nt = kvc_bitmap_tiles(d);
    e->bits = calloc((size_t)n * nt + 1, sizeof(uint64_t));
    e->vals = calloc((size_t)n * keep * 2 + KVC_BITMAP_PAD, 1);
    e->dense = calloc((size_t)n * d + 1, sizeof(float));
    float x[KVC_BITMAP_MAX_D];
    uint64_t m[KVC_BITMAP_MAX_D / 64];
    for (int i = 0; i < n; i++) {
        for (int c = 0; c < d; c++) {
            if (kind == 1) x[c] = 0.0f;
            else if (kind == 2) x[c] = (rnd() % 13 == 0) ? 3e4f * frand() : gauss();
            else x[c] = gauss() * (c % 9 == 0 ? 8.0f : 1.0f);
        }
        kvc_prune_topk(x, d, keep, m);
        kvc_bitmap_pack(x, m, d, bf16, e->bits + (size_t)i * nt, e->vals + (size_t)i * keep);
        kvc_bitmap_unpack(e->bits + (size_t)i * nt, e->vals + (size_t)i * keep, d, bf16,
                          e->dense + (size_t)i * d);
    }
}
static void enc_free(enc *e) {
    free(e->bits);
    free(e->vals);
    free(e->dense);
}

/* Both value types: bf16's AVX-512 kernels reorder the channels of each tile. */
static void kernels_match_reference(const kvc_bitmap_kernels *kk) {
    const int ds[] = {64, 128, 65, 100, 32, 200};
    const int ns[] = {1, 3, 4, 5, 63, 64, 67, 130};
    const double sp[] = {0.0, 0.5, 0.7, 0.9, 1.0};
    for (int bf16 = 0; bf16 <= 1; bf16++)
    for (unsigned di = 0; di < sizeof ds / sizeof ds[0]; di++)
        for (unsigned ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
            for (unsigned si = 0; si < sizeof sp / sizeof sp[0]; si++) {
                int d = ds[di], n = ns[ni], kind = (int)((di + ni + si) % 3);
                int keep = kvc_prune_keep_count(sp[si], d);
                int g = 1 + (int)((di * 7 + ni * 3 + si) % 9) + (si == 2 ? 30 : 0); /* up to 39 heads */
                int ldq = d + 3, lds = n + 5, ldo = d + 1;
                enc e;
                encode_tokens(n, d, keep, kind, bf16, &e);
                kvc_bitmap_view view = {e.bits, e.vals, d, keep, bf16};
                float *q = malloc(sizeof(float) * (size_t)g * ldq);
                float *s1 = malloc(sizeof(float) * (size_t)g * lds);
                float *s2 = malloc(sizeof(float) * (size_t)g * lds);
                for (int i = 0; i < g * ldq; i++) q[i] = kind == 2 ? gauss() * 100.0f : gauss();
                for (int i = 0; i < g * lds; i++) s1[i] = s2[i] = -7.0f;
                kvc_qk_bitmap_scalar(&view, n, q, g, ldq, s1, lds);
                kk->qk(&view, n, q, g, ldq, s2, lds);
                for (int h = 0; h < g; h++) {
                    for (int i = 0; i < n; i++) {
                        double mag = 0, exact = 0;
                        for (int c = 0; c < d; c++) {
                            double t = (double)q[h * ldq + c] * e.dense[(size_t)i * d + c];
                            mag += fabs(t);
                            exact += t;
                        }
                        double tol = 2e-6 * mag + 1e-30;
                        assert_true(fabs(s2[h * lds + i] - s1[h * lds + i]) <= tol);
                        assert_true(fabs(s1[h * lds + i] - exact) <= tol);
                    }
                    for (int i = n; i < lds; i++) assert_true(s2[h * lds + i] == -7.0f);
                }
                /* pv: probabilities-like weights (non-negative, some zero) */
                float *p = malloc(sizeof(float) * (size_t)g * lds);
                float *o1 = malloc(sizeof(float) * (size_t)g * ldo);
                float *o2 = malloc(sizeof(float) * (size_t)g * ldo);
                for (int i = 0; i < g * lds; i++) p[i] = (rnd() % 5 == 0) ? 0.0f : (frand() + 1.0f);
                for (int i = 0; i < g * ldo; i++) o1[i] = o2[i] = frand();
                kvc_pv_bitmap_scalar(&view, n, p, g, lds, o1, ldo);
                kk->pv(&view, n, p, g, lds, o2, ldo);
                for (int h = 0; h < g; h++)
                    for (int c = 0; c < ldo; c++) {
                        if (c >= d) { /* padding columns untouched */
                            assert_true(o1[h * ldo + c] == o2[h * ldo + c]);
                            continue;
                        }
                        double mag = fabs(o1[h * ldo + c]);
                        for (int i = 0; i < n; i++)
                            mag += fabs((double)p[h * lds + i] * e.dense[(size_t)i * d + c]);
                        assert_true(fabs(o2[h * ldo + c] - o1[h * ldo + c]) <= 2e-6 * mag + 1e-30);
                    }
                free(p);
                free(o1);
                free(o2);
                free(q);
                free(s1);
                free(s2);
                enc_free(&e);
            }
}

static kvc_bitmap_kernels registered(void (*reg)(kvc_bitmap_kernels *)) {
    kvc_bitmap_kernels k = kvc_bitmap_ref;
    reg(&k);
    return k;
}

static void test_kernels_avx2(void **state) {
    (void)state;
    if (kvc_active_isa() < KVC_ISA_AVX2) skip();
    kvc_bitmap_kernels k = registered(kvc_bitmap_register_avx2);
    kernels_match_reference(&k);
}

static void test_kernels_avx512(void **state) {
    (void)state;
    if (kvc_active_isa() < KVC_ISA_AVX512) skip();
    kvc_bitmap_kernels k = registered(kvc_bitmap_register_avx512);
    kernels_match_reference(&k);
    /* pack: the same bits and the same f16 / bf16 values as the reference */
    float x[200];
    uint64_t m[4], b1[4], b2[4];
    uint16_t v1[200], v2[200];
    for (int d = 1; d <= 200; d += 13)
        for (int rep = 0; rep < 16; rep++) {
            int bf16 = rep & 1;
            for (int c = 0; c < d; c++) x[c] = rep % 4 < 2 ? gauss() * 1e4f : gauss();
            int keep = (int)(rnd() % (unsigned)(d + 1));
            kvc_prune_topk_scalar(x, d, keep, m);
            kvc_bitmap_pack_scalar(x, m, d, bf16, b1, v1);
            k.pack(x, m, d, bf16, b2, v2);
            assert_memory_equal(b1, b2, sizeof(uint64_t) * (size_t)((d + 63) / 64));
            if (keep) assert_memory_equal(v1, v2, sizeof(uint16_t) * (size_t)keep);
        }
}

/* kvc_codecs_init (called by main) put this ISA's kernels in kvc_bitmap_k. */
static void test_dispatch_follows_isa(void **state) {
    (void)state;
    kvc_bitmap_kernels want = kvc_bitmap_ref;
    kvc_prune_topk_fn topk = kvc_prune_topk_scalar;
    if (kvc_active_isa() >= KVC_ISA_AVX2) {
        kvc_bitmap_register_avx2(&want);
        kvc_prune_register_avx2(&topk);
    }
    if (kvc_active_isa() >= KVC_ISA_AVX512) {
        kvc_bitmap_register_avx512(&want);
        kvc_prune_register_avx512(&topk);
    }
    assert_ptr_equal(kvc_bitmap_k.qk, want.qk);
    assert_ptr_equal(kvc_bitmap_k.pv, want.pv);
    assert_ptr_equal(kvc_bitmap_k.pack, want.pack);
    assert_ptr_equal(kvc_prune_topk_k, topk);
}

int main(void) {
    kvc_codecs_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keep_count),
        cmocka_unit_test(test_topk_random_and_ties),
        cmocka_unit_test(test_topk_simd_matches_reference),
        cmocka_unit_test(test_outaware_score),
        cmocka_unit_test(test_pack_roundtrip),
        cmocka_unit_test(test_kernels_avx2),
        cmocka_unit_test(test_kernels_avx512),
        cmocka_unit_test(test_dispatch_follows_isa),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
