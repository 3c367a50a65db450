/* Every KV method under several threads (the `make test-tsan` suite runs this
 * with ThreadSanitizer): the tiny fixture model prefills and decodes with each
 * method's cache on 1 and on 3 threads, and the logits agree step by step
 * (threads split heads and rows, so only the summation order may differ). The
 * parameters are small so chunks seal, evict and compress within 80 tokens. */
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

#include "kvcomp.h"

#define TINY KVC_SOURCE_DIR "/tests/fixtures/models/tiny_llama.gguf"
enum { N_PROMPT = 60, N_DECODE = 20 };

static char g_profile[64]; /* a kvmix profile for the 2-layer fixture */

/* Logits after the prompt and after each decoded token: [(1 + N_DECODE) * n_vocab]. */
static float *run(kvc_model *m, const char *spec, int threads, int n_vocab) {
    kvc_ctx_params p = {.n_ctx = 128, .n_threads = threads, .n_batch = 7, .kv_spec = spec};
    kvc_ctx *c = NULL;
    if (kvc_ctx_create(m, &p, &c) != KVC_OK) fail_msg("%s: %s", spec, kvc_last_error());
    float *out = malloc((size_t)(1 + N_DECODE) * n_vocab * sizeof *out);
    assert_non_null(out);
    int32_t toks[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++)
        toks[i] = (int32_t)((i * 37 + 11) % n_vocab);
    if (kvc_ctx_prefill(c, toks, N_PROMPT, out) != KVC_OK) fail_msg("%s: %s", spec, kvc_last_error());
    for (int i = 0; i < N_DECODE; i++)
        if (kvc_ctx_decode(c, (int32_t)((i * 53 + 5) % n_vocab), out + (size_t)(i + 1) * n_vocab) !=
            KVC_OK)
            fail_msg("%s: %s", spec, kvc_last_error());
    kvc_ctx_free(c);
    return out;
}

static void test_methods_threads(void **state) {
    (void)state;
    char kvmix[96];
    snprintf(kvmix, sizeof kvmix, "kvmix:%s", g_profile);
    const char *specs[] = {
        "full:f32",           "full:f16,block=16",     "kivi:bits=2,window=8,group=16",
        "kivi:bits=3",        kvmix,                   "mustafar:window=8,block=8",
        "mustafar:window=8,block=8,dtype=f16",         "mustafar:window=8,block=8+kivi:bits=4",       "mustafar:window=8,block=8+h2o:0.5",
        "h2o:0.5,block=8",    "think:0.5,window=8,block=8,obs=4",
        "quest:0.3,page=4,dense=1,block=16", "streaming:0.3,block=8",
        "sentkv:0.3,L=6,delta=3,recent=4,block=16",
        "mosaic:segment=32,maxseg=32,window=16,async=0",
    };
    kvc_model *m = NULL;
    if (kvc_model_load(TINY, &m) != KVC_OK) fail_msg("%s", kvc_last_error());
    kvc_model_info info;
    kvc_model_info_get(m, &info);
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        float *one = run(m, specs[s], 1, info.n_vocab);
        float *three = run(m, specs[s], 3, info.n_vocab);
        float worst = 0.0f;
        for (size_t i = 0; i < (size_t)(1 + N_DECODE) * info.n_vocab; i++) {
            float d = fabsf(one[i] - three[i]);
            if (!(d <= worst)) worst = d;
        }
        printf("%-45s 1 vs 3 threads: max |dlogit| %.2e\n", specs[s], (double)worst);
        if (!(worst <= 1e-3f)) fail_msg("%s: logits differ by %g across thread counts", specs[s], worst);
        free(one);
        free(three);
    }
    kvc_model_free(m);
}

static int write_profile(void **state) {
    (void)state;
    snprintf(g_profile, sizeof g_profile, "/tmp/kvc-threads-%d.kvmix", (int)getpid());
    FILE *f = fopen(g_profile, "w");
    if (!f) return -1;
    fputs("kvmix-profile 1\nlayers 2\nlayer 0 2 4 0.1 0.2\nlayer 1 3 2 0.2 0.1\n", f);
    return fclose(f);
}

static int remove_profile(void **state) {
    (void)state;
    return remove(g_profile);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_methods_threads)};
    return cmocka_run_group_tests(tests, write_profile, remove_profile);
}
