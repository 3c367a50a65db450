/* A generation session shared by `run` and `chat`: model, context, sampler
 * and streaming detokeniser set up from the parsed flags, with messages for
 * every failure (missing/corrupt model, bad --kv, prompt longer than the
 * context), and the prefill/decode loop with its timing. */
#ifndef KVC_CLI_SESSION_H
#define KVC_CLI_SESSION_H

#include <stdio.h>

#include "args.h"
#include "kvcomp.h"
#include "kvcomp_eval.h"

typedef struct kvc_session {
    const kvc_args *a;
    const char *cmd;      /* "run", "chat": prefix of messages */
    kvc_model *m;
    kvc_ctx *ctx;
    kvc_sampler *smp;
    kvc_detok *detok;
    float *logits;        /* [n_vocab] next-token logits */
    int n_vocab, n_ctx;
    uint64_t seed;
    int have_logits;      /* logits hold the prediction after the last token fed */
    /* tokens fed to the context so far (the chat reuses a common prefix) */
    int32_t *hist;
    int n_hist, cap_hist;
    /* totals for the summary */
    double prefill_s, decode_s;         /* wall clock */
    double prefill_cpu_s, decode_cpu_s; /* process CPU time (all threads) */
    int n_prefill, n_decode, n_gen;
} kvc_session;

/* Loads the model and builds the context; returns 0, or the exit code (1: a
 * runtime failure, 2: a bad flag value) after printing the reason. */
int kvc_session_open(kvc_session *s, const kvc_args *a, const char *cmd);
void kvc_session_close(kvc_session *s);

/* Tokenises text into a malloc'd array; returns 0 or 1 after a message. */
/* The conversation in the chat template, with the assistant prompt: only the
 * template's markers become control tokens (kvc_chat_tokenize). */
int kvc_session_tokenize_chat(kvc_session *s, const kvc_chat_msg *msgs, int n_msgs, int32_t **toks,
                              int *n);
int kvc_session_tokenize(kvc_session *s, const char *text, int add_bos, int parse_special,
                         int32_t **toks, int *n);

/* Feeds tokens to the context (after the history); returns 0, or 1 after a
 * message (the prompt-too-long message says how to raise -c). */
int kvc_session_feed(kvc_session *s, const int32_t *toks, int n);

/* Samples up to n_predict tokens (-1: until an end token or the context is
 * full), streaming text to out (NULL: silent) and appending it to *text when
 * text != NULL (malloc'd). Returns 0 or 1 after a message. */
int kvc_session_generate(kvc_session *s, int n_predict, FILE *out, char **text);

/* The one summary line: prompt and decode tokens/s, KV bytes and bits/element. */
void kvc_session_summary(const kvc_session *s, FILE *out);
/* The same as members of an open JSON object. */
void kvc_session_summary_json(const kvc_session *s, kvc_json *j);

#endif
