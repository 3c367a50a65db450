/* Text generation with a compressed KV cache through libkvcomp's public API
 * (kvcomp.h) alone: load a model, create a context whose cache is a --kv
 * method spec, wrap the prompt in the model's chat template, prefill, then
 * sample and decode token by token, and print the cache's size at the end.
 *
 *   cc generate.c $(pkg-config --cflags --libs kvcomp) -o generate
 *   ./generate MODEL.gguf [SPEC] [PROMPT]      (SPEC default kivi:bits=4) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvcomp.h>

static int fail(const char *what) {
    fprintf(stderr, "generate: %s: %s\n", what, kvc_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: generate MODEL.gguf [SPEC] [PROMPT]\n");
        return 2;
    }
    const char *spec = argc > 2 ? argv[2] : "kivi:bits=4";
    const char *prompt = argc > 3 ? argv[3] : "Name three colours of the rainbow.";
    enum { N_CTX = 512, N_GEN = 32 };

    kvc_model *model = NULL;
    if (kvc_model_load(argv[1], &model) != KVC_OK) return fail(argv[1]);
    kvc_model_info info;
    kvc_model_info_get(model, &info);

    kvc_ctx_params cp = {.n_ctx = N_CTX, .n_threads = 0, .n_batch = 0, .kv_spec = spec};
    kvc_sampler_params sp = {.temp = 0, .top_k = 0, .top_p = 1, .seed = 1}; /* greedy */
    kvc_ctx *ctx = NULL;
    kvc_sampler *smp = NULL;
    kvc_detok *detok = NULL;
    char *text = NULL;
    int32_t tokens[N_CTX];
    float *logits = malloc(sizeof(float) * (size_t)info.n_vocab);
    int n = 0, rc = 1;
    kvc_chat_msg msg = {"user", prompt};
    if (!logits) goto done;
    if (kvc_ctx_create(model, &cp, &ctx) != KVC_OK) { rc = fail(spec); goto done; }
    if (kvc_sampler_create(&sp, info.n_vocab, &smp) != KVC_OK ||
        kvc_detok_create(model, &detok) != KVC_OK ||
        kvc_chat_apply(model, &msg, 1, 1, &text) != KVC_OK ||
        kvc_tokenize(model, text, strlen(text), 1, 1, tokens, N_CTX, &n) != KVC_OK ||
        n > N_CTX || kvc_ctx_prefill(ctx, tokens, n, logits) != KVC_OK) {
        rc = fail("prompt");
        goto done;
    }
    for (int i = 0; i < N_GEN && kvc_ctx_pos(ctx) < N_CTX; i++) {
        int32_t tok = kvc_sampler_sample(smp, logits);
        if (kvc_token_is_end(model, tok)) break;
        char piece[256];
        int len = kvc_detok_push(detok, tok, piece, sizeof piece);
        fwrite(piece, 1, (size_t)(len > 0 ? len : 0), stdout);
        if (kvc_ctx_decode(ctx, tok, logits) != KVC_OK) { rc = fail("decode"); goto done; }
    }
    char rest[64];
    int len = kvc_detok_flush(detok, rest, sizeof rest);
    fwrite(rest, 1, (size_t)(len > 0 ? len : 0), stdout);
    kvc_cache_stats st;
    kvc_ctx_cache_stats(ctx, &st);
    printf("\n[%s: %llu tokens, %.2f bits per element, %.2fx dense f16]\n", spec,
           (unsigned long long)st.context_tokens, st.bits_per_element, st.ratio_vs_f16);
    rc = 0;
done:
    free(text);
    free(logits);
    kvc_detok_free(detok);
    kvc_sampler_free(smp);
    kvc_ctx_free(ctx);
    kvc_model_free(model);
    return rc;
}
