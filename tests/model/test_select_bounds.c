/* The min/max bound (select/minmax.h, f16 and q8 formats) on real keys and sentences of real
 * text: the default model reads the start of data/alice.txt, its post-RoPE
 * keys of every layer are taken from the K/V observer, and for pages of 16
 * tokens (quest) and for the sentences the splitter draws from the model's
 * own vocabulary (sentkv) the bound of every unit must be at least q·k for
 * each of its keys, for random queries and for queries made of other real
 * keys (peaked like the model's own). The split of the real text covers every
 * token once, keeps L ± Δ, and most sentences end at a boundary token. Skips
 * without the model. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kv/codec/codec.h"
#include "kv/method/sentence_split.h"
#include "kv/method/sentence_vocab.h"
#include "kv/select/minmax.h"
#include "kvcomp.h"

enum { NTOK = 400, PAGE = 16 };

typedef struct keys {
    int n_kv, d;
    float *k; /* [layer][NTOK][n_kv][d] */
} keys;

static void observe(void *user, int layer, int pos0, int n, const float *k, const float *v) {
    (void)v;
    keys *K = user;
    size_t row = (size_t)K->n_kv * K->d;
    for (int i = 0; i < n && pos0 + i < NTOK; i++)
        memcpy(K->k + ((size_t)layer * NTOK + pos0 + i) * row, k + i * row, row * sizeof(float));
}

static uint64_t rng = 99;
static float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

/* Every key of every unit of x against the unit's bounds; k rows at stride ld. */
static void check_unit_bounds(const kvc_minmax *x, const float *k, size_t ld, int d, const float *q, int G) {
    float b[16];
    int nu = kvc_selector_minmax.n_units(x);
    for (int u = 0; u < nu; u++) {
        kvc_range r = kvc_selector_minmax.unit(x, u);
        kvc_minmax_bounds(x, u, q, G, d, b);
        for (int g = 0; g < G; g++)
            for (int t = r.begin; t < r.end; t++) {
                double dot = 0, mag = 0;
                for (int i = 0; i < d; i++) {
                    dot += (double)q[g * d + i] * k[t * ld + i];
                    mag += fabs((double)q[g * d + i] * k[t * ld + i]);
                }
                if (!(dot <= b[g] + 1e-5 * (1.0 + mag)))
                    fail_msg("unit %d token %d head %d: q.k %g above the bound %g", u, t, g, dot, b[g]);
            }
    }
}

static void test_real_key_bounds(void **state) {
    (void)state;
    if (access(KVC_MODEL_PATH, R_OK) != 0) skip();
    kvc_codecs_init();
    kvc_model *m;
    assert_int_equal(kvc_model_load(KVC_MODEL_PATH, &m), KVC_OK);
    kvc_model_info info;
    kvc_model_info_get(m, &info);
    FILE *f = fopen(KVC_SOURCE_DIR "/data/alice.txt", "rb");
    assert_non_null(f);
    static char text[8192];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    int32_t *tok = malloc(sizeof(int32_t) * 4096);
    int n = 0;
    assert_int_equal(kvc_tokenize(m, text, len, 1, 0, tok, 4096, &n), KVC_OK);
    assert_true(n >= NTOK);
    keys K = {.n_kv = info.n_kv_heads, .d = info.head_dim};
    size_t row = (size_t)K.n_kv * K.d;
    K.k = malloc(sizeof(float) * info.n_layers * NTOK * row);
    kvc_ctx_params p = {.n_ctx = NTOK, .n_threads = 2, .n_batch = 128, .kv_spec = "full:f32"};
    kvc_ctx *c;
    assert_int_equal(kvc_ctx_create(m, &p, &c), KVC_OK);
    kvc_ctx_set_kv_observer(c, observe, &K);
    assert_int_equal(kvc_ctx_prefill(c, tok, NTOK, NULL), KVC_OK);
    /* sentences of the real text, from the model's vocabulary */
    float w[NTOK];
    char piece[256];
    for (int t = 0; t < NTOK; t++) {
        int pn = kvc_token_piece(m, tok[t], 0, piece, (int)sizeof piece);
        w[t] = kvc_sentence_weight(piece, pn > 0 && pn <= (int)sizeof piece ? pn : 0);
    }
    kvc_splitter sp;
    assert_int_equal(kvc_split_init(&sp, 14, 8, 64, KVC_SPLIT_WEIGHTED), KVC_OK);
    assert_int_equal(kvc_split_push(&sp, w, NTOK), KVC_OK);
    assert_int_equal(kvc_split_finish(&sp), KVC_OK);
    int64_t prev = 0, at_boundary = 0;
    for (int64_t i = 0; i < sp.n_ends; i++) {
        int64_t len = sp.ends[i] - prev;
        assert_true(len >= 1);
        if (prev + 14 + 8 <= NTOK) assert_true(len >= 6 && len <= 22);
        at_boundary += w[sp.ends[i] - 1] > 0.0f;
        prev = sp.ends[i];
    }
    assert_int_equal(prev, NTOK);
    printf("real text: %lld sentences of %d tokens, %lld end at a boundary token\n", (long long)sp.n_ends, NTOK,
           (long long)at_boundary);
    assert_true(at_boundary * 2 > sp.n_ends);
    int G = info.n_heads / info.n_kv_heads, d = info.head_dim;
    float *q = malloc(sizeof(float) * G * d);
    for (int l = 0; l < info.n_layers; l++)
        for (int h = 0; h < K.n_kv; h++) {
            const float *kh = K.k + (size_t)l * NTOK * row + (size_t)h * d;
            kvc_minmax *x, *y, *z; /* pages (f16), sentences (f16), sentences (q8, sentkv's default) */
            assert_int_equal(kvc_minmax_create(d, &x), KVC_OK);
            assert_int_equal(kvc_minmax_create(d, &y), KVC_OK);
            assert_int_equal(kvc_minmax_create_fmt(d, KVC_MM_Q8, &z), KVC_OK);
            for (int t = 0; t < NTOK; t += PAGE)
                assert_int_equal(kvc_minmax_add(x, kh + t * row, PAGE < NTOK - t ? PAGE : NTOK - t, (int)row), KVC_OK);
            for (int64_t i = 0, b = 0; i < sp.n_ends; b = sp.ends[i++]) {
                assert_int_equal(kvc_minmax_add(y, kh + b * row, (int)(sp.ends[i] - b), (int)row), KVC_OK);
                assert_int_equal(kvc_minmax_add(z, kh + b * row, (int)(sp.ends[i] - b), (int)row), KVC_OK);
            }
            for (int trial = 0; trial < 4; trial++) {
                for (int g = 0; g < G; g++)
                    for (int i = 0; i < d; i++)
                        q[g * d + i] = trial < 2 ? frand() : kh[((trial * 131 + g * 17) % NTOK) * row + i];
                check_unit_bounds(x, kh, row, d, q, G);
                check_unit_bounds(y, kh, row, d, q, G);
                check_unit_bounds(z, kh, row, d, q, G);
            }
            kvc_selector_minmax.free(x);
            kvc_selector_minmax.free(y);
            kvc_selector_minmax.free(z);
        }
    free(q);
    kvc_split_free(&sp);
    kvc_ctx_free(c);
    kvc_model_free(m);
    free(K.k);
    free(tok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_key_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
