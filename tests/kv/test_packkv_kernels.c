/* The PackKV fused kernels (src/kernels/<isa>/kv_packkv_<isa>.c) against the
 * scalar reference (src/kv/codec/packkv_ref.c), and the reference against
 * q.k / p.v over the decoded block in double. Both sides unpack the same
 * integer residuals; the float kernels differ only in the order of f32 sums,
 * per score / output |a - b| <= 4e-6 * magnitude (+1e-30), magnitude = sum of
 * |terms| (q.k: sum_c |q_c| (|m_t| + |x_tc - m_t|); p.v: sum_t p_t (|m_t| +
 * |x_tc - m_t|) + |o|). The AVX-512 p.v rounds the weights p_t s_t to int16
 * (beta = the block's max / 32767), so it may differ by a further beta/2
 * sum_t code_tc per output. Cases: packs of 8 and 16, head dims 1..256 (odd ones too), G = 1..10
 * (more heads than a pass takes), ragged blocks (n not a multiple of the
 * pack) and ragged ranges [j0, j1), and adversarial blocks: every width 0
 * (identical tokens), every width 8 (rel = 1/250, spread codes), a huge
 * outlier token, tokens at a large offset. Both sides also in the grouped
 * layout (packs of 16; dims that are multiples of 4 for keys, of 16 for
 * values), whose AVX-512 kernels round the query to 15 bits (a further
 * qmax/32766 sum_c |x_tc - m_t| per score) and the weights p_t s_t to 15 bits
 * (wmax/32766 sum_t code_tc per output). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/f16.h"
#include "kv/codec/packkv.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float frand(void) { return (float)rnd() / 4294967296.0f * 2.0f - 1.0f; }

enum { MAXG = 10, KIND_RANDOM, KIND_SAME, KIND_WIDE, KIND_OUTLIER, KIND_OFFSET };

static float *make(int n, int dim, int kind) {
    float *x = malloc(sizeof(float) * (size_t)(n ? n : 1) * dim);
    for (int t = 0; t < n; t++)
        for (int c = 0; c < dim; c++) {
            float v = frand() * (c % 13 == 0 ? 6.0f : 1.0f) + 0.2f * (t % 7);
            if (kind == KIND_SAME) v = cosf((float)c);
            if (kind == KIND_OFFSET) v += 700.0f;
            if (kind == KIND_OUTLIER && t == n / 2 && c == dim / 3) v = 1e9f;
            x[(size_t)t * dim + c] = v;
        }
    return x;
}

static void close_enough(double a, double b, double mag, const char *what, int i, int j) {
    if (!(fabs(a - b) <= 4e-6 * mag + 1e-30))
        fail_msg("%s [%d][%d]: %.9g vs %.9g (magnitude %g)", what, i, j, a, b, mag);
}

typedef struct kcase {
    int pack, dim, n, G, kind;
    float rel;
} kcase;

static void run_case(const kcase *k) {
    kvc_pk_cfg cfg = {.rel = k->rel, .block = k->n < 16 ? 16 : (k->n + 15) / 16 * 16, .pack = k->pack};
    float *x = make(k->n, k->dim, k->kind);
    float *xd = malloc(sizeof(float) * (size_t)k->n * k->dim);
    float *q = malloc(sizeof(float) * MAXG * k->dim), *p = malloc(sizeof(float) * MAXG * k->n);
    for (int i = 0; i < MAXG * k->dim; i++) q[i] = frand() * 2.0f;
    for (int i = 0; i < MAXG * k->n; i++) p[i] = (float)(rnd() % 1000) / 1000.0f * (i % 5 ? 1.0f : 0.0f);
    float *sa = malloc(sizeof(float) * MAXG * k->n), *sr = malloc(sizeof(float) * MAXG * k->n);
    float *oa = malloc(sizeof(float) * MAXG * k->dim), *or_ = malloc(sizeof(float) * MAXG * k->dim);
    for (int layout = 0; layout < 4; layout++) { /* keys, values, grouped keys, grouped values */
        int grouped = layout >= 2, values = layout & 1;
        cfg.group = !grouped ? 1 : values ? KVC_PK_VGROUP : KVC_PK_KGROUP;
        if (grouped && (k->pack != 16 || k->dim % cfg.group)) continue;
        const kvc_codec_ops *ops = values ? &kvc_codec_packkv_v : &kvc_codec_packkv_k;
        kvc_codec c = {.ops = ops, .dim = k->dim, .cfg = &cfg};
        void *blob;
        assert_int_equal(ops->encode(&c, x, k->n, k->dim, &blob), KVC_OK);
        ops->decode(&c, blob, 0, k->n, xd, k->dim);
        kvc_pk_block b = kvc_pk_block_of(blob, 0);
        for (int rep = 0; rep < 4; rep++) {
            int j0 = rep ? (int)(rnd() % (unsigned)k->n) : 0;
            int j1 = rep ? j0 + 1 + (int)(rnd() % (unsigned)(k->n - j0)) : k->n;
            if (!values) {
                kvc_pk_ref.qk(&b, q, k->dim, k->G, j0, j1, sr, k->n);
                kvc_pk_k.qk(&b, q, k->dim, k->G, j0, j1, sa, k->n);
                for (int h = 0; h < k->G; h++) {
                    /* grouped keys: the SIMD kernel rounds the query to steps of qmax/16383 */
                    double qmax = 0;
                    for (int d = 0; d < k->dim; d++)
                        qmax = fmax(qmax, fabs(q[h * k->dim + d]));
                    for (int j = j0; j < j1; j++) {
                        double exact = 0, mag = 0, spread = 0;
                        for (int d = 0; d < k->dim; d++) {
                            double qd = q[h * k->dim + d], xv = xd[(size_t)j * k->dim + d], m = b.mins[j];
                            exact += qd * xv;
                            mag += fabs(qd) * (fabs(m) + fabs(xv - m));
                            spread += fabs(xv - m);
                        }
                        close_enough(sr[h * k->n + j - j0], exact, mag, "qk ref vs exact", h, j);
                        double a = sa[h * k->n + j - j0], r = sr[h * k->n + j - j0];
                        double qround = grouped ? qmax / 32766.0 * spread * 1.0001 : 0.0;
                        if (!(fabs(a - r) <= 4e-6 * mag + qround + 1e-30))
                            fail_msg("qk simd vs ref%s [%d][%d]: %.9g vs %.9g (magnitude %g)",
                                     grouped ? " (grouped)" : "", h, j, a, r, mag);
                    }
                }
            } else {
                for (int i = 0; i < MAXG * k->dim; i++) oa[i] = or_[i] = frand();
                kvc_pk_ref.pv(&b, p + j0, k->n, k->G, j0, j1, or_, k->dim);
                kvc_pk_k.pv(&b, p + j0, k->n, k->G, j0, j1, oa, k->dim);
                for (int h = 0; h < k->G; h++) {
                    double wmax = 0;
                    for (int j = j0; j < j1; j++) wmax = fmax(wmax, (double)p[h * k->n + j] * kvc_bf16_to_f32(b.scales[j]));
                    for (int d = 0; d < k->dim; d++) {
                        double mag = 0, codes = 0;
                        for (int j = j0; j < j1; j++) {
                            double pj = p[h * k->n + j], xv = xd[(size_t)j * k->dim + d], m = b.mins[j];
                            double sj = kvc_bf16_to_f32(b.scales[j]);
                            mag += pj * (fabs(m) + fabs(xv - m));
                            codes += sj > 0 ? (xv - m) / sj : 0;
                        }
                        double o0 = oa[h * k->dim + d], r0 = or_[h * k->dim + d];
                        double wround = wmax / (grouped ? 32766.0 : 65534.0) * codes * 1.0001;
                        if (!(fabs(o0 - r0) <= 4e-6 * (mag + fabs(r0)) + wround + 1e-30))
                            fail_msg("pv simd vs ref%s [%d][%d]: %.9g vs %.9g (magnitude %g)",
                                     grouped ? " (grouped)" : "", h, d, o0, r0, mag);
                    }
                }
            }
        }
        ops->free(&c, blob);
    }
    free(x), free(xd), free(q), free(p), free(sa), free(sr), free(oa), free(or_);
}

/* p.v of the reference against the exact sum over the decoded block. */
static void test_pv_ref_exact(void **state) {
    (void)state;
    enum { N = 77, DIM = 40, GG = 3 };
    kvc_pk_cfg cfg = {.rel = 0.1f, .block = 80, .pack = 16};
    float *x = make(N, DIM, KIND_RANDOM), xd[N * DIM], p[GG * N], o[GG * DIM] = {0};
    kvc_codec c = {.ops = &kvc_codec_packkv_v, .dim = DIM, .cfg = &cfg};
    void *blob;
    assert_int_equal(c.ops->encode(&c, x, N, DIM, &blob), KVC_OK);
    c.ops->decode(&c, blob, 0, N, xd, DIM);
    for (int i = 0; i < GG * N; i++) p[i] = (float)(rnd() % 100) / 100.0f;
    kvc_pk_block b = kvc_pk_block_of(blob, 0);
    kvc_pk_ref.pv(&b, p + 5, N, GG, 5, 70, o, DIM);
    for (int h = 0; h < GG; h++)
        for (int d = 0; d < DIM; d++) {
            double exact = 0, mag = 0;
            for (int j = 5; j < 70; j++) {
                exact += (double)p[h * N + j] * xd[j * DIM + d];
                mag += p[h * N + j] * (fabs(b.mins[j]) + fabs(xd[j * DIM + d] - b.mins[j]));
            }
            close_enough(o[h * DIM + d], exact, mag, "pv ref vs exact", h, d);
        }
    c.ops->free(&c, blob);
    free(x);
}

static void test_kernels_all_shapes(void **state) {
    (void)state;
    const int dims[] = {1, 3, 16, 17, 64, 80, 128, 256};
    const int ns[] = {1, 8, 13, 16, 40, 64, 128, 300}; /* 300: AVX-512 p.v's float path (> 256) */
    const int kinds[] = {KIND_RANDOM, KIND_SAME, KIND_WIDE, KIND_OUTLIER, KIND_OFFSET};
    for (int pk = 8; pk <= 16; pk += 8)
        for (int di = 0; di < 8; di++)
            for (int ni = 0; ni < 8; ni++)
                for (int ki = 0; ki < 5; ki++) {
                    kcase k = {.pack = pk, .dim = dims[di], .n = ns[ni], .G = 1 + (di + ni + ki) % MAXG,
                               .kind = kinds[ki], .rel = kinds[ki] == KIND_WIDE ? KVC_PK_MIN_REL : 0.1f};
                    run_case(&k);
                }
}

static void test_every_gqa_group(void **state) {
    (void)state;
    for (int G = 1; G <= MAXG; G++)
        for (int pk = 8; pk <= 16; pk += 8) {
            kcase k = {.pack = pk, .dim = 64, .n = 128, .G = G, .kind = KIND_RANDOM, .rel = 0.05f};
            run_case(&k);
        }
}

/* The grouped key kernel keeps the last query's fixed-point planes per
 * thread: a query rewritten in place (one element, the sign of another, all
 * of it scaled) must be rounded afresh, never served from the old planes. */
static void test_query_rewritten_in_place(void **state) {
    (void)state;
    enum { N = 64, DIM = 64, GG = 3 };
    kvc_pk_cfg cfg = {.rel = 0.1f, .block = 64, .pack = 16, .group = KVC_PK_KGROUP};
    float *x = make(N, DIM, KIND_RANDOM), q[GG * DIM], sa[GG * N], sr[GG * N];
    kvc_codec c = {.ops = &kvc_codec_packkv_k, .dim = DIM, .cfg = &cfg};
    void *blob;
    assert_int_equal(c.ops->encode(&c, x, N, DIM, &blob), KVC_OK);
    kvc_pk_block b = kvc_pk_block_of(blob, 0);
    for (int i = 0; i < GG * DIM; i++) q[i] = frand();
    for (int round = 0; round < 4; round++) {
        if (round == 1) q[5] += 0.25f;
        if (round == 2) q[DIM + 7] = -q[DIM + 7];
        if (round == 3)
            for (int i = 0; i < GG * DIM; i++) q[i] *= 3.0f;
        kvc_pk_k.qk(&b, q, DIM, GG, 0, N, sa, N);
        kvc_pk_ref.qk(&b, q, DIM, GG, 0, N, sr, N);
        for (int h = 0; h < GG; h++)
            for (int j = 0; j < N; j++) {
                double mag = 0;
                for (int d = 0; d < DIM; d++)
                    mag += fabs(q[h * DIM + d]) * (fabs(b.mins[j]) + fabs(x[j * DIM + d] - b.mins[j]) + 1.0);
                /* the 15-bit rounding: at most 1e-4 of the magnitude here */
                if (!(fabs(sa[h * N + j] - sr[h * N + j]) <= 1e-4 * mag))
                    fail_msg("round %d [%d][%d]: %.9g vs %.9g", round, h, j, sa[h * N + j], sr[h * N + j]);
            }
    }
    c.ops->free(&c, blob);
    free(x);
}

int main(void) {
    kvc_codecs_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pv_ref_exact),
        cmocka_unit_test(test_kernels_all_shapes),
        cmocka_unit_test(test_every_gqa_group),
        cmocka_unit_test(test_query_rewritten_in_place),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
