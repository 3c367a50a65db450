/* The direct encoder of the integer layouts (iquant.c encode_k / encode_v)
 * against the path it replaced: each row through the quant codec's row
 * encoder (kvc_quant_encode), unpacked (kvc_quant_unpack) and its codes
 * scattered bit by bit into the layouts. The blobs' mins, scales and code
 * words must be byte-identical, padding included, over bits 1/2/4, groups
 * 16-128, head dims 16-256, ragged token counts, a row stride wider than the
 * head dim, and rows with NaN, signed zeros, constant values and values
 * beyond the f16 range; the key tiles' stored largest scale and its
 * reciprocal equal kvc_iq_tile_smax of the scales. */
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
#include "expect_close.h"

/* 32 random bits from the shared generator's state */
static uint32_t rnd(void) {
    frand();
    return (uint32_t)(rng >> 32);
}

/* n rows of dim values at stride ld: random with outlier channels, and some
 * special rows and channels (kind > 0). */
static float *make_x(int n, int dim, int ld, int kind) {
    float *x = malloc(sizeof(float) * ((size_t)(n ? n : 1) * ld));
    for (int t = 0; t < n; t++)
        for (int c = 0; c < ld; c++) {
            float v = frand() * (c % 13 == 0 ? 8.0f : 1.0f) + 0.3f * (t % 5);
            if (kind) {
                int r = (int)(rnd() % 64);
                if (r == 0) v = NAN;
                else if (r == 1) v = -0.0f;
                else if (r == 2) v = 0.0f;
                else if (r == 3) v = 1e6f * (rnd() & 1 ? 1.0f : -1.0f);
                else if (r == 4) v = 1e-7f;
                if (c % 7 == 3) v = 0.25f;                   /* constant channel: scale 0 */
                if (t % 9 == 4) v = (c & 1) ? -0.0f : 0.0f; /* signed-zero token */
                if (t % 11 == 6 && c % 5 == 0) v = NAN;     /* NaN channel of a token */
            }
            x[(size_t)t * ld + c] = v;
        }
    return x;
}

/* The replaced encoder, kept here as the reference. */
static void old_row(const float *x, ptrdiff_t vs, int n, int bits, kvc_f16 *mn, kvc_f16 *sc, uint8_t *codes) {
    uint32_t words[KVC_QUANT_MAX_N];
    kvc_quant_encode(x, 0, vs, 1, n, bits, mn, sc, words);
    kvc_quant_unpack(bits, words, n, codes);
}

static void check_k(const kvc_quant_cfg *q, int dim, int n, int ld, const float *x, const void *blob) {
    int cpw = kvc_iq_cpw(q->bits), kw = kvc_iq_kwords(q->bits, dim);
    uint8_t code[KVC_QUANT_MAX_N];
    for (int ti = 0; ti * q->group < n; ti++) {
        kvc_iq_ktile t = kvc_iq_ktile_of(blob, ti);
        int tn = n - ti * q->group < q->group ? n - ti * q->group : q->group;
        assert_int_equal(t.n, tn);
        size_t nw = (size_t)(tn + KVC_IQ_KBLOCK - 1) / KVC_IQ_KBLOCK * kw * KVC_IQ_KBLOCK;
        uint32_t *codes = calloc(nw, 4);
        kvc_f16 mins[KVC_IQ_MAX_DIM], scales[KVC_IQ_MAX_DIM];
        const float *xt = x + (size_t)ti * q->group * ld;
        for (int c = 0; c < dim; c++) {
            old_row(xt + c, ld, tn, q->bits, &mins[c], &scales[c], code);
            int w = c / cpw, r = c % cpw, shift = 8 * (r % 4) + q->bits * (r / 4);
            for (int j = 0; j < tn; j++)
                codes[((size_t)(j / KVC_IQ_KBLOCK) * kw + w) * KVC_IQ_KBLOCK + j % KVC_IQ_KBLOCK] |=
                    (uint32_t)code[j] << shift;
        }
        assert_memory_equal(t.mins, mins, (size_t)dim * 2);
        assert_memory_equal(t.scales, scales, (size_t)dim * 2);
        assert_memory_equal(t.codes, codes, nw * 4);
        /* the tile's stored largest scale and reciprocal: the reference's, bit for bit */
        float smax = kvc_iq_tile_smax(scales, dim), inv = 1.0f / smax;
        assert_memory_equal(&t.smax, &smax, sizeof smax);
        assert_memory_equal(&t.inv_smax, &inv, sizeof inv);
        free(codes);
    }
}

static void check_v(const kvc_quant_cfg *q, int dim, int n, int ld, const float *x, const void *blob) {
    kvc_iq_vblob v = kvc_iq_vblob_of(blob);
    int ng = (dim + q->group - 1) / q->group, npad = (n + KVC_IQ_VBLOCK - 1) / KVC_IQ_VBLOCK * KVC_IQ_VBLOCK;
    int tpw = 32 / q->bits;
    assert_int_equal(v.npad, npad);
    kvc_f16 *mins = calloc((size_t)ng * npad + 1, 2), *scales = calloc((size_t)ng * npad + 1, 2);
    size_t nw = (size_t)npad / tpw * dim;
    uint32_t *codes = calloc(nw + 1, 4);
    uint8_t code[KVC_QUANT_MAX_N];
    for (int g = 0; g < ng; g++) {
        int c0 = g * q->group, cw = dim - c0 < q->group ? dim - c0 : q->group;
        for (int t = 0; t < n; t++) {
            size_t pi = (size_t)g * npad + t;
            old_row(x + (size_t)t * ld + c0, 1, cw, q->bits, &mins[pi], &scales[pi], code);
            int r = t % tpw, shift = 8 * (r % 4) + q->bits * (r / 4);
            for (int j = 0; j < cw; j++) codes[(size_t)(t / tpw) * dim + c0 + j] |= (uint32_t)code[j] << shift;
        }
    }
    assert_memory_equal(v.mins, mins, (size_t)ng * npad * 2);
    assert_memory_equal(v.scales, scales, (size_t)ng * npad * 2);
    assert_memory_equal(v.codes, codes, nw * 4);
    free(mins);
    free(scales);
    free(codes);
}

static void run(int bits, int group, int dim, int n, int ld, int kind) {
    kvc_quant_cfg q = {bits, group, 0};
    kvc_codec kc, vc;
    kvc_quant_codecs(&q, dim, &kc, &vc);
    assert_ptr_equal(kc.ops, &kvc_codec_iq_k);
    assert_ptr_equal(vc.ops, &kvc_codec_iq_v);
    float *kx = make_x(n, dim, ld, kind), *vx = make_x(n, dim, ld, kind);
    void *kb = NULL, *vb = NULL;
    assert_int_equal(kc.ops->encode(&kc, kx, n, ld, &kb), KVC_OK);
    assert_int_equal(vc.ops->encode(&vc, vx, n, ld, &vb), KVC_OK);
    check_k(&q, dim, n, ld, kx, kb);
    check_v(&q, dim, n, ld, vx, vb);
    kc.ops->free(&kc, kb);
    vc.ops->free(&vc, vb);
    free(kx);
    free(vx);
}

static void test_same_blob_as_row_encoder(void **state) {
    (void)state;
    const int bits[] = {1, 2, 4}, groups[] = {16, 32, 48, 128}, dims[] = {16, 48, 64, 128, 256};
    const int ns[] = {1, 15, 32, 33, 100, 261};
    for (int bi = 0; bi < 3; bi++)
        for (int gi = 0; gi < 4; gi++)
            for (int di = 0; di < 5; di++)
                for (int ni = 0; ni < 6; ni++)
                    for (int kind = 0; kind < 2; kind++) {
                        int ld = dims[di] + (ni % 2 ? 0 : 8); /* rows wider than the head */
                        run(bits[bi], groups[gi], dims[di], ns[ni], ld, kind);
                    }
}

int main(void) {
    rng = 0x9e3779b97f4a7c15ull;
    kvc_codecs_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_blob_as_row_encoder),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
