/* The integer quant codecs iq_k / iq_v (src/kv/codec/iquant.c) and their
 * kernels (src/kernels/<isa>/kv_iquant_<isa>.c):
 *  - the codes, mins and scales equal quant_k / quant_v's (same encoder), so
 *    decode agrees with the float codecs exactly;
 *  - the scalar reference agrees with q.k and p.v over the decoded cache in
 *    double within the 15-bit query / u8 weight rounding: per token
 *    |s - q.k| <= alpha/2 * sum_c code_tc (alpha = max_c |q_c| / 32512 * max_c s_c) and
 *    per channel |o - p.v| <= sum_t beta_b(t)/2 * code_tc (beta = the block's
 *    max p_t s_t / 255), plus 1e-5 of the magnitudes for f32 sums;
 *  - the active (SIMD) kernels agree with the scalar reference: the integer
 *    parts are exact, only the order of the f32 constant-term sums differs
 *    (1e-5 of sum |q_c m_c| / sum |p_t m_t|), and a call over several tiles
 *    gives each tile's single-tile scores;
 * over bits 1/2/4, groups 16-128, head dims 16-256, G = 1..8, ragged tails
 * (n not a multiple of anything) and ragged ranges [j0, j1); with zero mins
 * (no constant terms) the active kernels equal the reference bit for bit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kv/codec/iquant.h"
#include "kv/codec/quant.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float frand(void) { return (float)rnd() / 4294967296.0f * 2.0f - 1.0f; }

/* K/V with a few outlier channels (as real keys have) and a per-token offset. */
static float *make_kv(int n, int dim) {
    float *x = malloc(sizeof(float) * (size_t)(n ? n : 1) * dim);
    for (int t = 0; t < n; t++)
        for (int c = 0; c < dim; c++) x[(size_t)t * dim + c] = frand() * (c % 13 == 0 ? 8.0f : 1.0f) + 0.3f * (t % 5);
    return x;
}

typedef struct kcase {
    int bits, group, dim, n, G;
} kcase;

static void check_qk(const kcase *k, void *kb, const float *q) {
    const kvc_iq_kernels *act = &kvc_iq_k;
    int ntiles = (k->n + k->group - 1) / k->group;
    float *s_ref = malloc(sizeof(float) * 8 * KVC_QUANT_MAX_N), *s_act = malloc(sizeof(float) * 8 * KVC_QUANT_MAX_N);
    for (int ti = 0; ti < ntiles; ti++) {
        kvc_iq_ktile t = kvc_iq_ktile_of(kb, ti);
        int j0 = (int)(rnd() % (unsigned)t.n), j1 = j0 + 1 + (int)(rnd() % (unsigned)(t.n - j0));
        if (ti % 2 == 0) j0 = 0, j1 = t.n;
        kvc_iq_ref.qk(&t, 1, q, k->dim, k->G, j0, j1, s_ref, KVC_QUANT_MAX_N);
        act->qk(&t, 1, q, k->dim, k->G, j0, j1, s_act, KVC_QUANT_MAX_N);
        double smax = 0;
        for (int c = 0; c < k->dim; c++)
            if (kvc_f16_to_f32(t.scales[c]) > smax) smax = kvc_f16_to_f32(t.scales[c]);
        for (int h = 0; h < k->G; h++) {
            const float *qh = q + (size_t)h * k->dim;
            double qmax = 0, cmag = 0;
            for (int c = 0; c < k->dim; c++) {
                if (fabs(qh[c]) > qmax) qmax = fabs(qh[c]);
                cmag += fabs(qh[c] * kvc_f16_to_f32(t.mins[c]));
            }
            for (int j = j0; j < j1; j++) {
                double exact = 0, codes = 0, mag = cmag;
                for (int c = 0; c < k->dim; c++) {
                    int code = kvc_iq_kcode(&t, j, c);
                    double kv = (double)code * kvc_f16_to_f32(t.scales[c]) + kvc_f16_to_f32(t.mins[c]);
                    exact += qh[c] * kv;
                    codes += code;
                    mag += fabs(qh[c] * kv);
                }
                float r = s_ref[h * KVC_QUANT_MAX_N + j - j0], a = s_act[h * KVC_QUANT_MAX_N + j - j0];
                double bound = qmax * smax / kvc_iq_query_max(k->bits) / 2.0 * codes * 1.0001 + 1e-5 * mag + 1e-6;
                if (fabs(r - exact) > bound || fabs(a - r) > 1e-5 * cmag + 1e-6 * fabs(r) + 1e-6)
                    fail_msg("qk bits %d group %d dim %d n %d G %d tile %d [%d,%d) head %d token %d: "
                             "ref %g exact %g (bound %g) active %g",
                             k->bits, k->group, k->dim, k->n, k->G, ti, j0, j1, h, j, r, exact, bound, a);
            }
        }
    }
    /* one call over several tiles (a ragged range across tile edges) gives each tile's own scores */
    enum { MAXT = 16 };
    kvc_iq_ktile tiles[MAXT];
    int nt = ntiles < MAXT ? ntiles : MAXT, len = 0;
    for (int i = 0; i < nt; i++) tiles[i] = kvc_iq_ktile_of(kb, i), len += tiles[i].n;
    int j0 = (int)(rnd() % (unsigned)len), j1 = j0 + 1 + (int)(rnd() % (unsigned)(len - j0));
    float *s_all = malloc(sizeof(float) * (size_t)k->G * len);
    act->qk(tiles, nt, q, k->dim, k->G, j0, j1, s_all, len);
    for (int i = 0; i < nt; i++) {
        int tb = i * k->group, a = j0 > tb ? j0 : tb, e = j1 < tb + tiles[i].n ? j1 : tb + tiles[i].n;
        if (a >= e) continue;
        act->qk(&tiles[i], 1, q, k->dim, k->G, a - tb, e - tb, s_act, KVC_QUANT_MAX_N);
        for (int h = 0; h < k->G; h++)
            for (int j = a; j < e; j++)
                if (s_all[(size_t)h * len + j - j0] != s_act[h * KVC_QUANT_MAX_N + j - a])
                    fail_msg("qk over %d tiles, bits %d group %d dim %d G %d [%d,%d) head %d token %d: %g vs %g",
                             nt, k->bits, k->group, k->dim, k->G, j0, j1, h, j, s_all[(size_t)h * len + j - j0],
                             s_act[h * KVC_QUANT_MAX_N + j - a]);
    }
    free(s_all);
    free(s_ref);
    free(s_act);
}

static void check_pv(const kcase *k, void *vb) {
    kvc_iq_vblob v = kvc_iq_vblob_of(vb);
    int n = k->n, dim = k->dim, G = k->G;
    for (int trial = 0; trial < 3; trial++) {
        int j0 = trial == 0 ? 0 : (int)(rnd() % (unsigned)n);
        int j1 = trial == 0 ? n : j0 + 1 + (int)(rnd() % (unsigned)(n - j0));
        int len = j1 - j0;
        float *p = malloc(sizeof(float) * (size_t)G * len);
        for (int i = 0; i < G * len; i++) { /* peaked and flat rows, some exact zeros */
            float u = (float)rnd() / 4294967296.0f;
            p[i] = (i % 7 == 0) ? 0.0f : (i / len) % 2 ? u : expf(8.0f * (u - 1.0f));
        }
        float *o_ref = calloc((size_t)G * dim, sizeof(float)), *o_act = calloc((size_t)G * dim, sizeof(float));
        for (int i = 0; i < G * dim; i++) o_ref[i] = o_act[i] = frand();
        float *o0 = malloc(sizeof(float) * (size_t)G * dim);
        memcpy(o0, o_ref, sizeof(float) * (size_t)G * dim);
        kvc_iq_ref.pv(&v, p, len, G, j0, j1, o_ref, dim);
        kvc_iq_k.pv(&v, p, len, G, j0, j1, o_act, dim);
        for (int h = 0; h < G; h++)
            for (int c = 0; c < dim; c++) {
                size_t pi0 = (size_t)(c / v.group) * v.npad;
                double exact = o0[h * dim + c], bound = 0, mag = fabs(o0[h * dim + c]), mmag = 0;
                for (int b0 = j0 - j0 % KVC_IQ_VBLOCK; b0 < j1; b0 += KVC_IQ_VBLOCK) {
                    int lo = b0 > j0 ? b0 : j0, hi = b0 + KVC_IQ_VBLOCK < j1 ? b0 + KVC_IQ_VBLOCK : j1;
                    double wmax = 0, codes = 0;
                    for (int t = lo; t < hi; t++) {
                        double pt = p[(size_t)h * len + t - j0];
                        double sc = kvc_f16_to_f32(v.scales[pi0 + t]), mn = kvc_f16_to_f32(v.mins[pi0 + t]);
                        int code = kvc_iq_vcode(&v, t, c);
                        if (pt * sc > wmax) wmax = pt * sc;
                        codes += code;
                        exact += pt * (code * sc + mn);
                        mag += fabs(pt * (code * sc + mn));
                        mmag += fabs(pt * mn);
                    }
                    bound += wmax / 255.0 / 2.0 * codes * 1.0001;
                }
                bound += 1e-5 * mag + 1e-6;
                float r = o_ref[h * dim + c], a = o_act[h * dim + c];
                if (fabs(r - exact) > bound || fabs(a - r) > 1e-5 * mag + 1e-6)
                    fail_msg("pv bits %d group %d dim %d n %d G %d [%d,%d) head %d channel %d: ref %g "
                             "exact %g (bound %g) active %g",
                             k->bits, k->group, dim, n, G, j0, j1, h, c, r, exact, bound, a);
                (void)mmag;
            }
        free(p); free(o_ref); free(o_act); free(o0);
    }
}

/* Plain 3-bit codes (kvmix3 = 0) decode at least as close to every value as
 * KVmix's clamped ones, and closer somewhere on random data. */
static void check_plain3(const kcase *k, const float *kx, const float *vx, const float *kmix, const float *vmix) {
    kvc_quant_cfg plain = {3, k->group, 0};
    kvc_codec pk, pv;
    kvc_quant_codecs(&plain, k->dim, &pk, &pv);
    const float *x[2] = {kx, vx}, *mix[2] = {kmix, vmix};
    const kvc_codec *c[2] = {&pk, &pv};
    size_t n = (size_t)k->n * k->dim;
    float *dec = malloc(sizeof(float) * n);
    for (int side = 0; side < 2; side++) {
        void *blob = NULL;
        assert_int_equal(c[side]->ops->encode(c[side], x[side], k->n, k->dim, &blob), KVC_OK);
        c[side]->ops->decode(c[side], blob, 0, k->n, dec, k->dim);
        double e_plain = 0, e_mix = 0;
        for (size_t i = 0; i < n; i++) {
            double a = fabs((double)dec[i] - x[side][i]), b = fabs((double)mix[side][i] - x[side][i]);
            if (!(a <= b + 1e-6 * (1 + fabs(x[side][i]))))
                fail_msg("plain 3-bit %s value %zu: error %g, clamped %g", side ? "V" : "K", i, a, b);
            e_plain += a, e_mix += b;
        }
        if (k->n >= 11 && !(e_plain < e_mix)) fail_msg("plain 3-bit %s: error %g not below %g", side ? "V" : "K", e_plain, e_mix);
        c[side]->ops->free(c[side], blob);
    }
    free(dec);
}

static void run_case(const kcase *k) {
    /* kvmix3: the same codes as the float codecs, which pack 11 per word */
    kvc_quant_cfg cfg = {k->bits, k->group, 1};
    kvc_codec kc, vc;
    kvc_quant_codecs(&cfg, k->dim, &kc, &vc);
    assert_ptr_equal(kc.ops, &kvc_codec_iq_k);
    assert_ptr_equal(vc.ops, &kvc_codec_iq_v);
    float *kx = make_kv(k->n, k->dim), *vx = make_kv(k->n, k->dim);
    void *kb = NULL, *vb = NULL;
    assert_int_equal(kc.ops->encode(&kc, kx, k->n, k->dim, &kb), KVC_OK);
    assert_int_equal(vc.ops->encode(&vc, vx, k->n, k->dim, &vb), KVC_OK);
    assert_int_equal(kc.ops->count(&kc, kb), k->n);

    /* decode equals the float codecs' decode (same encoder) */
    kvc_codec fk = {&kvc_codec_quant_k, k->dim, &cfg}, fv = {&kvc_codec_quant_v, k->dim, &cfg};
    void *fkb = NULL, *fvb = NULL;
    assert_int_equal(fk.ops->encode(&fk, kx, k->n, k->dim, &fkb), KVC_OK);
    assert_int_equal(fv.ops->encode(&fv, vx, k->n, k->dim, &fvb), KVC_OK);
    size_t sz = sizeof(float) * (size_t)k->n * k->dim;
    float *a = malloc(sz), *b = malloc(sz);
    kc.ops->decode(&kc, kb, 0, k->n, a, k->dim);
    fk.ops->decode(&fk, fkb, 0, k->n, b, k->dim);
    assert_memory_equal(a, b, sz);
    vc.ops->decode(&vc, vb, 0, k->n, a, k->dim);
    fv.ops->decode(&fv, fvb, 0, k->n, b, k->dim);
    assert_memory_equal(a, b, sz);
    if (k->bits == 3) {
        kc.ops->decode(&kc, kb, 0, k->n, b, k->dim);
        check_plain3(k, kx, vx, b, a);
    }

    float *q = malloc(sizeof(float) * (size_t)k->G * k->dim);
    for (int i = 0; i < k->G * k->dim; i++) q[i] = frand();
    check_qk(k, kb, q);
    check_pv(k, vb);

    /* through the codec: a list of ranges, scores in range order */
    kvc_range r[2] = {{1, k->n / 2}, {k->n / 2 + 1, k->n}};
    int nr = k->n >= 4 ? 2 : 0, cols = nr ? k->n - 2 : 0;
    if (nr) {
        float *s = malloc(sizeof(float) * (size_t)k->G * cols), *dec = malloc(sz);
        kvc_codec_qk_ranges(&kc, kb, q, k->G, k->dim, r, nr, s, cols);
        kc.ops->decode(&kc, kb, 0, k->n, dec, k->dim);
        for (int h = 0; h < k->G; h++) {
            int col = 0;
            for (int i = 0; i < nr; i++)
                for (int t = r[i].begin; t < r[i].end; t++, col++) {
                    double e = 0, m = 0;
                    for (int c = 0; c < k->dim; c++) {
                        e += q[h * k->dim + c] * dec[(size_t)t * k->dim + c];
                        m += fabs(q[h * k->dim + c] * dec[(size_t)t * k->dim + c]);
                    }
                    if (!(fabs(s[h * cols + col] - e) <= 0.05 * m + 1e-4))
                        fail_msg("ranges: bits %d group %d dim %d n %d G %d head %d token %d: %g vs %g (m %g)", k->bits,
                                 k->group, k->dim, k->n, k->G, h, t, s[h * cols + col], e, m);
                }
        }
        free(s);
        free(dec);
    }
    uint64_t pay, meta;
    kc.ops->bytes(&kc, kb, &pay, &meta);
    assert_true(pay > 0 && meta > 0);
    kc.ops->free(&kc, kb); vc.ops->free(&vc, vb);
    fk.ops->free(&fk, fkb); fv.ops->free(&fv, fvb);
    free(kx); free(vx); free(a); free(b); free(q);
}

static void test_kernels_all_shapes(void **state) {
    (void)state;
    const int bits[] = {1, 2, 3, 4}, groups[] = {16, 32, 64, 128}, dims[] = {16, 48, 64, 128, 256};
    const int ns[] = {1, 15, 33, 100, 261};
    int i = 0;
    for (int bi = 0; bi < 3; bi++)
        for (int gi = 0; gi < 4; gi++)
            for (int di = 0; di < 5; di++)
                for (int ni = 0; ni < 5; ni++, i++) {
                    kcase k = {bits[bi], groups[gi], dims[di], ns[ni], 1 + i % 8};
                    if (k.group > 32 && dims[di] < k.group && k.bits == 1) continue;
                    run_case(&k);
                }
}

static void test_every_gqa_group(void **state) {
    (void)state;
    for (int G = 1; G <= 8; G++)
        for (int d = 64; d <= 128; d += 64) {
            kcase k4 = {4, 32, d, 200, G}, k2 = {2, 32, d, 77, G};
            run_case(&k4);
            run_case(&k2);
        }
}

/* With every min zero (keys and values >= 0, a zero in every channel of a
 * key tile and in every channel group of a value token) the constant terms
 * vanish, so the active kernels must give the scalar reference's results bit
 * for bit: the integer query and weights, their dot products and the f32
 * scaling (alpha * dot; per block o = fma(beta, acc, o)) are exact or done in
 * the same order. This catches an integer query or weight that is off by one,
 * which the tolerance of check_qk / check_pv (1e-5 of the constant term) could
 * hide. */
static void exact_case(int bits, int group, int dim, int n, int G) {
    kvc_quant_cfg cfg = {bits, group, 0};
    kvc_codec kc, vc;
    kvc_quant_codecs(&cfg, dim, &kc, &vc);
    float *x = malloc(sizeof(float) * (size_t)n * dim);
    for (int t = 0; t < n; t++)
        for (int c = 0; c < dim; c++)
            x[(size_t)t * dim + c] = (t % group == 0 || c % group == 0) ? 0.0f
                                     : fabsf(frand()) * (c % 13 == 1 ? 8.0f : 1.0f);
    void *kb = NULL, *vb = NULL;
    assert_int_equal(kc.ops->encode(&kc, x, n, dim, &kb), KVC_OK);
    assert_int_equal(vc.ops->encode(&vc, x, n, dim, &vb), KVC_OK);
    float *q = malloc(sizeof(float) * (size_t)G * dim);
    for (int i = 0; i < G * dim; i++) q[i] = frand() * (i % 7 == 3 ? 6.0f : 1.0f);
    enum { MAXT = 16 };
    kvc_iq_ktile tiles[MAXT];
    int ntiles = (n + group - 1) / group, nt = ntiles < MAXT ? ntiles : MAXT, len = 0;
    for (int i = 0; i < nt; i++) tiles[i] = kvc_iq_ktile_of(kb, i), len += tiles[i].n;
    for (int trial = 0; trial < 3; trial++) {
        int j0 = trial == 0 ? 0 : (int)(rnd() % (unsigned)len);
        int j1 = trial == 0 ? len : j0 + 1 + (int)(rnd() % (unsigned)(len - j0));
        float *sr = malloc(sizeof(float) * (size_t)G * len), *sa = malloc(sizeof(float) * (size_t)G * len);
        kvc_iq_ref.qk(tiles, nt, q, dim, G, j0, j1, sr, len);
        kvc_iq_k.qk(tiles, nt, q, dim, G, j0, j1, sa, len);
        for (int h = 0; h < G; h++)
            for (int j = j0; j < j1; j++)
                if (memcmp(&sr[(size_t)h * len + j - j0], &sa[(size_t)h * len + j - j0], sizeof(float)))
                    fail_msg("exact qk bits %d group %d dim %d n %d G %d [%d,%d) head %d token %d: ref %.9g active %.9g",
                             bits, group, dim, n, G, j0, j1, h, j, sr[(size_t)h * len + j - j0],
                             sa[(size_t)h * len + j - j0]);
        free(sr);
        free(sa);
        kvc_iq_vblob v = kvc_iq_vblob_of(vb);
        int b0 = trial == 0 ? 0 : (int)(rnd() % (unsigned)n);
        int b1 = trial == 0 ? n : b0 + 1 + (int)(rnd() % (unsigned)(n - b0)), plen = b1 - b0;
        float *p = malloc(sizeof(float) * (size_t)G * plen);
        for (int i = 0; i < G * plen; i++) {
            float u = (float)rnd() / 4294967296.0f;
            p[i] = (i % 5 == 0) ? 0.0f : expf(6.0f * (u - 1.0f));
        }
        float *orf = malloc(sizeof(float) * (size_t)G * dim), *oa = malloc(sizeof(float) * (size_t)G * dim);
        for (int i = 0; i < G * dim; i++) orf[i] = oa[i] = frand();
        kvc_iq_ref.pv(&v, p, plen, G, b0, b1, orf, dim);
        kvc_iq_k.pv(&v, p, plen, G, b0, b1, oa, dim);
        for (int i = 0; i < G * dim; i++)
            if (memcmp(&orf[i], &oa[i], sizeof(float)))
                fail_msg("exact pv bits %d group %d dim %d n %d G %d [%d,%d) head %d channel %d: ref %.9g active %.9g",
                         bits, group, dim, n, G, b0, b1, i / dim, i % dim, orf[i], oa[i]);
        free(p);
        free(orf);
        free(oa);
    }
    kc.ops->free(&kc, kb);
    vc.ops->free(&vc, vb);
    free(x);
    free(q);
}

static void test_integer_parts_exact(void **state) {
    (void)state;
    const int bits[] = {1, 2, 3, 4}, dims[] = {16, 48, 64, 128, 256}, ns[] = {1, 31, 100, 261};
    for (int bi = 0; bi < 3; bi++)
        for (int di = 0; di < 5; di++)
            for (int ni = 0; ni < 4; ni++)
                for (int G = 1; G <= 8; G++) exact_case(bits[bi], 16 << (ni % 2), dims[di], ns[ni], G);
}

static void test_unsupported_falls_back(void **state) {
    (void)state;
    kvc_quant_cfg g8 = {4, 8, 0}, ok = {4, 32, 0};
    kvc_codec k, v;
    kvc_quant_codecs(&g8, 64, &k, &v);
    assert_ptr_equal(v.ops, &kvc_codec_quant_v);
    kvc_quant_codecs(&ok, 40, &k, &v);
    assert_ptr_equal(k.ops, &kvc_codec_quant_k);
    kvc_codec bad = {&kvc_codec_iq_k, 64, &g8};
    void *blob = NULL;
    float x[64] = {0};
    assert_int_equal(bad.ops->encode(&bad, x, 1, 64, &blob), KVC_ERR_ARG);
}

int main(void) {
    kvc_codecs_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernels_all_shapes),
        cmocka_unit_test(test_every_gqa_group),
        cmocka_unit_test(test_integer_parts_exact),
        cmocka_unit_test(test_unsupported_falls_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
