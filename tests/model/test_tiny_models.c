/* Tiny random f32 models of the llama and qwen2 architectures (committed,
 * made by scripts/fixtures/make_tiny_models.py) against the reference
 * llama.cpp's logits for the same token ids. With f32 weights neither engine
 * quantises activations, so the logits agree to rounding; this pins down what
 * differs between the architectures: RoPE pairs (adjacent for llama, halves
 * for qwen2), Q/K/V biases (qwen2), tied (llama) or separate (qwen2) output
 * matrix, grouped-query attention (4 query heads over 2 KV heads).
 *
 * Tolerance: llama.cpp keeps its KV cache in f16 (relative rounding 2^-11 on
 * every K and V element), kvcomp's full:f32 keeps them exact; over 2 layers
 * with logits of magnitude <= ~17 that gives differences of order 1e-2
 * (measured maximum printed below). MAX_DLOGIT = 0.05 is about 3-5x that;
 * a wrong RoPE layout, a missing bias or a wrong head grouping moves logits
 * by whole units. Prefill (sgemm on dequantised tiles, chunks of 5 tokens) and
 * decode (matvec) are both checked. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvcomp.h"
#include "logits_fixture.h"

#define MAX_DLOGIT 0.05f

static float max_diff(const logits_fixture *f, const float *lg, int p) {
    float m = 0.0f;
    const int32_t *ids = f->top_id + (size_t)p * f->top_n;
    const float *ref = f->top_logit + (size_t)p * f->top_n;
    for (uint32_t t = 0; t < f->top_n; t++) {
        float d = fabsf(lg[ids[t]] - ref[t]);
        if (!(d <= m)) m = isnan(d) ? INFINITY : d;
    }
    for (uint32_t k = 0; k < f->n_full; k++) {
        if ((int)f->full_pos[k] != p) continue;
        for (uint32_t v = 0; v < f->n_vocab; v++) {
            float d = fabsf(lg[v] - f->full[(size_t)k * f->n_vocab + v]);
            if (!(d <= m)) m = isnan(d) ? INFINITY : d;
        }
    }
    return m;
}

static void run_arch(const char *arch, const char *want_arch) {
    char path[1024], name[64];
    snprintf(path, sizeof path, "%s/tests/fixtures/models/tiny_%s.gguf", KVC_SOURCE_DIR, arch);
    snprintf(name, sizeof name, "tiny_%s", arch);
    logits_fixture f;
    assert_int_equal(logits_fixture_load(name, &f), 0);
    kvc_model *m = NULL;
    if (kvc_model_load(path, &m) != KVC_OK) fprintf(stderr, "%s: %s\n", path, kvc_last_error());
    assert_non_null(m);
    kvc_model_info info;
    kvc_model_info_get(m, &info);
    assert_string_equal(info.arch, want_arch);
    assert_int_equal(info.n_vocab, (int)f.n_vocab);
    assert_int_equal(info.n_kv_heads * 2, info.n_heads);

    const int n = (int)f.n_tokens;
    float *all = malloc((size_t)n * f.n_vocab * sizeof *all);
    assert_non_null(all);
    kvc_ctx_params p = {.n_ctx = 128, .n_threads = 2, .n_batch = 5, .kv_spec = "full:f32"};
    kvc_ctx *c = NULL;
    assert_int_equal(kvc_ctx_create(m, &p, &c), KVC_OK);
    assert_int_equal(kvc_ctx_prefill_all(c, f.tokens, n, all), KVC_OK);
    float worst_prefill = 0.0f, worst_decode = 0.0f;
    for (int i = 0; i < n; i++) {
        float d = max_diff(&f, all + (size_t)i * f.n_vocab, i);
        if (!(d <= worst_prefill)) worst_prefill = d;
    }
    kvc_ctx_reset(c);
    for (int i = 0; i < n; i++) {
        assert_int_equal(kvc_ctx_decode(c, f.tokens[i], all), KVC_OK);
        float d = max_diff(&f, all, i);
        if (!(d <= worst_decode)) worst_decode = d;
    }
    /* greedy continuation: the same tokens as the reference wherever its choice is clear */
    int matched = 0;
    for (uint32_t g = 0; g < f.n_gen; g++) {
        int best = 0;
        for (uint32_t v = 1; v < f.n_vocab; v++)
            if (all[v] > all[best]) best = (int)v;
        if (best != f.gen[g]) {
            assert_true(f.gen_margin[g] < 4 * MAX_DLOGIT);
            break;
        }
        matched++;
        assert_int_equal(kvc_ctx_decode(c, best, all), KVC_OK);
    }
    printf("%s: max |dlogit| prefill %.5f decode %.5f; greedy matches %d/%u\n", arch,
           (double)worst_prefill, (double)worst_decode, matched, f.n_gen);
    assert_true(worst_prefill <= MAX_DLOGIT);
    assert_true(worst_decode <= MAX_DLOGIT);
    kvc_ctx_free(c);
    free(all);
    kvc_model_free(m);
    logits_fixture_free(&f);
}

static void test_tiny_llama(void **state) { (void)state; run_arch("llama", "llama"); }
static void test_tiny_qwen2(void **state) { (void)state; run_arch("qwen2", "qwen2"); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_llama),
        cmocka_unit_test(test_tiny_qwen2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
