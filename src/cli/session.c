/* Generation session shared by `run` and `chat` (see session.h). */
#include "session.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvcomp_eval.h"

static int fail(const kvc_session *s, const char *what) {
    fprintf(stderr, "kvcomp %s: %s: %s\n", s->cmd, what, kvc_last_error());
    return 1;
}

/* More threads than a few per CPU only add scheduling and per-thread scratch
 * (-t 1024 took 54 s for 2 tokens): cap at 4 per CPU, saying so. */
static int cap_threads(const char *cmd, int n) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int cap = 4 * (int)(cpus > 0 && cpus < 4096 ? cpus : 1);
    if (n <= cap) return n;
    fprintf(stderr, "kvcomp %s: -t %d is more than 4 threads per CPU (%ld CPUs); using %d\n", cmd,
            n, cpus, cap);
    return cap;
}

int kvc_session_open(kvc_session *s, const kvc_args *a, const char *cmd) {
    memset(s, 0, sizeof *s);
    s->a = a;
    s->cmd = cmd;
    const char *spec = a->kv ? a->kv : KVC_DEFAULT_KV;
    if (kvc_method_validate(spec) != KVC_OK) {
        fprintf(stderr, "kvcomp %s: --kv %s: %s\n", cmd, spec, kvc_last_error());
        return 2;
    }
    const char *path = a->model ? a->model : KVC_DEFAULT_MODEL;
    if (kvc_model_load(path, &s->m) != KVC_OK) {
        const char *err = kvc_last_error();
        if (strncmp(err, path, strlen(path)) == 0) /* the message already names the file */
            fprintf(stderr, "kvcomp %s: cannot load model %s\n", cmd, err);
        else
            fprintf(stderr, "kvcomp %s: cannot load model %s: %s\n", cmd, path, err);
        if (!a->model) fprintf(stderr, "  (fetch the default model with scripts/fetch-model, or give one with -m)\n");
        return 1;
    }
    kvc_model_info info;
    kvc_model_info_get(s->m, &info);
    s->n_vocab = info.n_vocab;
    s->n_ctx = a->n_ctx > 0 ? a->n_ctx : info.ctx_train;
    kvc_ctx_params cp = {s->n_ctx, cap_threads(cmd, a->n_threads), a->n_batch, spec};
    if (kvc_ctx_create(s->m, &cp, &s->ctx) != KVC_OK) return fail(s, "cannot create the context");
    s->seed = a->seed_set ? a->seed : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    kvc_sampler_params sp = {a->temp, a->top_k, a->top_p, s->seed};
    if (kvc_sampler_create(&sp, s->n_vocab, &s->smp) != KVC_OK) return fail(s, "sampler");
    if (kvc_detok_create(s->m, &s->detok) != KVC_OK) return fail(s, "detokeniser");
    s->logits = malloc((size_t)s->n_vocab * sizeof *s->logits);
    if (!s->logits) {
        fprintf(stderr, "kvcomp %s: out of memory\n", cmd);
        return 1;
    }
    return 0;
}

void kvc_session_close(kvc_session *s) {
    free(s->logits);
    free(s->hist);
    kvc_detok_free(s->detok);
    kvc_sampler_free(s->smp);
    kvc_ctx_free(s->ctx);
    kvc_model_free(s->m);
    memset(s, 0, sizeof *s);
}

int kvc_session_tokenize(kvc_session *s, const char *text, int add_bos, int parse_special,
                         int32_t **toks, int *n) {
    size_t len = strlen(text);
    int cap = (int)(len < (1u << 30) ? len : (1u << 30)) + 8, got = 0;
    *toks = NULL;
    *n = 0;
    for (int tries = 0; tries < 2; tries++) {
        int32_t *t = realloc(*toks, (size_t)cap * sizeof *t);
        if (!t) {
            fprintf(stderr, "kvcomp %s: out of memory tokenising %zu bytes\n", s->cmd, len);
            return 1;
        }
        *toks = t;
        if (kvc_tokenize(s->m, text, len, add_bos, parse_special, t, cap, &got) != KVC_OK)
            return fail(s, "cannot tokenise the prompt");
        if (got <= cap) break;
        cap = got;
    }
    *n = got;
    return 0;
}

int kvc_session_tokenize_chat(kvc_session *s, const kvc_chat_msg *msgs, int n_msgs, int32_t **toks,
                              int *n) {
    int cap = 256, got = 0;
    *toks = NULL;
    *n = 0;
    for (int tries = 0; tries < 2; tries++) {
        int32_t *t = realloc(*toks, (size_t)cap * sizeof *t);
        if (!t) {
            fprintf(stderr, "kvcomp %s: out of memory tokenising the conversation\n", s->cmd);
            return 1;
        }
        *toks = t;
        if (kvc_chat_tokenize(s->m, msgs, n_msgs, 1, t, cap, &got) != KVC_OK)
            return fail(s, "cannot tokenise the conversation");
        if (got <= cap) break;
        cap = got;
    }
    *n = got;
    return 0;
}

static int push_hist(kvc_session *s, const int32_t *t, int n) {
    if (s->n_hist + n > s->cap_hist) {
        int cap = (s->n_hist + n) * 2 + 64;
        int32_t *h = realloc(s->hist, (size_t)cap * sizeof *h);
        if (!h) return -1;
        s->hist = h;
        s->cap_hist = cap;
    }
    memcpy(s->hist + s->n_hist, t, (size_t)n * sizeof *t);
    s->n_hist += n;
    return 0;
}

int kvc_session_feed(kvc_session *s, const int32_t *toks, int n) {
    if (n <= 0) return 0;
    int pos = kvc_ctx_pos(s->ctx);
    if ((long long)pos + n > s->n_ctx) {
        if (pos == 0)
            fprintf(stderr,
                    "kvcomp %s: the prompt is %d tokens but the context holds %d; raise it with "
                    "-c %d or more\n",
                    s->cmd, n, s->n_ctx, n + (s->a->n_predict > 0 ? s->a->n_predict : 256));
        else
            fprintf(stderr,
                    "kvcomp %s: %d more tokens after %d do not fit the context of %d; raise it "
                    "with -c\n",
                    s->cmd, n, pos, s->n_ctx);
        return 1;
    }
    double t0 = kvc_now_s(), c0 = kvc_cpu_s();
    if (kvc_ctx_prefill(s->ctx, toks, n, s->logits) != KVC_OK) return fail(s, "prefill failed");
    s->prefill_s += kvc_now_s() - t0;
    s->prefill_cpu_s += kvc_cpu_s() - c0;
    s->n_prefill += n;
    s->have_logits = 1;
    if (push_hist(s, toks, n) != 0) {
        fprintf(stderr, "kvcomp %s: out of memory\n", s->cmd);
        return 1;
    }
    return 0;
}

static int append_text(char **text, size_t *len, const char *piece, int n) {
    char *t = realloc(*text, *len + (size_t)n + 1);
    if (!t) return -1;
    memcpy(t + *len, piece, (size_t)n);
    *len += (size_t)n;
    t[*len] = '\0';
    *text = t;
    return 0;
}

static int nonfinite_logits(const kvc_session *s) {
    fprintf(stderr, "\nkvcomp %s: the model produced NaN or Inf logits at token %d (a corrupt "
                    "model file?)\n",
            s->cmd, kvc_ctx_pos(s->ctx));
    return 1;
}

int kvc_session_generate(kvc_session *s, int n_predict, FILE *out, char **text) {
    char piece[1024];
    size_t text_len = 0;
    if (text) {
        *text = calloc(1, 1);
        if (!*text) return 1;
    }
    if (!s->have_logits) return 0;
    for (int i = 0; n_predict < 0 || i < n_predict; i++) {
        int32_t tok = kvc_sampler_sample(s->smp, s->logits);
        if (tok < 0) return nonfinite_logits(s);
        s->n_gen++;
        if (kvc_token_is_end(s->m, tok)) break;
        int n = kvc_detok_push(s->detok, tok, piece, sizeof piece);
        if (n > 0) {
            if (out) {
                fwrite(piece, 1, (size_t)n, out);
                fflush(out);
            }
            if (text && append_text(text, &text_len, piece, n) != 0) return 1;
        }
        if (n_predict >= 0 && i + 1 == n_predict) break; /* its K/V is not needed */
        if (kvc_ctx_pos(s->ctx) >= s->n_ctx) {
            fprintf(stderr, "\nkvcomp %s: context of %d tokens is full (raise it with -c)\n",
                    s->cmd, s->n_ctx);
            s->have_logits = 0;
            break;
        }
        double t0 = kvc_now_s(), c0 = kvc_cpu_s();
        if (kvc_ctx_decode(s->ctx, tok, s->logits) != KVC_OK) return fail(s, "decode failed");
        s->decode_s += kvc_now_s() - t0;
        s->decode_cpu_s += kvc_cpu_s() - c0;
        s->n_decode++;
        if (push_hist(s, &tok, 1) != 0) return 1;
    }
    return 0;
}

static double rate(int n, double t) { return t > 0 ? n / t : 0.0; }

void kvc_session_summary(const kvc_session *s, FILE *out) {
    kvc_cache_stats cs;
    kvc_ctx_cache_stats(s->ctx, &cs);
    kvc_ctx_timing tm;
    kvc_ctx_timing_get(s->ctx, &tm);
    /* the ratio compares the bytes holding the context with dense f16 of the
     * same tokens; reserved capacity and scratch are reported beside it */
    int larger = cs.ratio_vs_f16 > 0.0 && cs.ratio_vs_f16 < 1.0;
    fprintf(out,
            "prompt %d tok %.1f tok/s | decode %d tok %.1f tok/s | KV %s %.2f MiB in use (+%.2f MiB "
            "reserved), %.2f bits/elem, %.2fx %s | weights %.2fs attention %.2fs cache %.2fs\n",
            s->n_prefill, rate(s->n_prefill, s->prefill_s), s->n_decode,
            rate(s->n_decode, s->decode_s), s->a->kv ? s->a->kv : KVC_DEFAULT_KV,
            (double)cs.in_use_bytes / (1024.0 * 1024.0), (double)cs.reserved_bytes / (1024.0 * 1024.0),
            cs.bits_per_element,
            larger ? 1.0 / cs.ratio_vs_f16 : cs.ratio_vs_f16,
            larger ? "larger than dense f16" : "smaller than dense f16",
            tm.weights_s, tm.attention_s, tm.cache_s);
}

void kvc_session_summary_json(const kvc_session *s, kvc_json *j) {
    kvc_cache_stats cs;
    kvc_ctx_cache_stats(s->ctx, &cs);
    kvc_ctx_timing tm;
    kvc_ctx_timing_get(s->ctx, &tm);
    kvc_json_key(j, "kv");
    kvc_json_str(j, s->a->kv ? s->a->kv : KVC_DEFAULT_KV);
    kvc_json_key(j, "seed");
    kvc_json_uint(j, s->seed);
    kvc_json_key(j, "prompt_tokens");
    kvc_json_int(j, s->n_prefill);
    kvc_json_key(j, "prompt_tok_s");
    kvc_json_num(j, rate(s->n_prefill, s->prefill_s));
    kvc_json_key(j, "decode_tokens");
    kvc_json_int(j, s->n_decode);
    kvc_json_key(j, "decode_tok_s");
    kvc_json_num(j, rate(s->n_decode, s->decode_s));
    kvc_json_key(j, "prompt_tok_per_cpu_s");
    kvc_json_num(j, rate(s->n_prefill, s->prefill_cpu_s));
    kvc_json_key(j, "decode_tok_per_cpu_s");
    kvc_json_num(j, rate(s->n_decode, s->decode_cpu_s));
    kvc_json_key(j, "kv_tokens");
    kvc_json_uint(j, cs.tokens);
    kvc_json_key(j, "kv_bytes");
    kvc_json_num(j, (double)cs.in_use_bytes);
    kvc_json_key(j, "kv_reserved_bytes");
    kvc_json_num(j, (double)cs.reserved_bytes);
    kvc_json_key(j, "kv_bits_per_element");
    kvc_json_num(j, cs.bits_per_element);
    kvc_json_key(j, "kv_ratio_vs_f16");
    kvc_json_num(j, cs.ratio_vs_f16);
    kvc_json_key(j, "weights_s");
    kvc_json_num(j, tm.weights_s);
    kvc_json_key(j, "attention_s");
    kvc_json_num(j, tm.attention_s);
    kvc_json_key(j, "cache_s");
    kvc_json_num(j, tm.cache_s);
}
