/* Boundary weights S(b) of tokens, derived from a token's text, so that any
 * model's vocabulary gives its own boundary set (SentKVCompress §4.1.1 and its
 * appendix list punctuation tokens per model by hand; we classify every
 * token by its bytes). A token is a boundary if, without its spaces and tabs,
 * it is made only of punctuation that can end a phrase and of newlines —
 * which includes the merged tokens BPE vocabularies have ("." + " ", ".\n",
 * ".)", "?\"", "\n\n"). Its weight is that of its strongest mark:
 *
 *   1.0  sentence stops . ? ! … 。 ？ ！ and blank lines (two newlines or more)
 *   0.8  a single newline
 *   0.6  ; ；
 *   0.5  : ：
 *   0.4  closing quotes and brackets alone " ' ) ] } » ” ’ 」 』 ）
 *   0.3  , ， 、
 *
 * Everything else (letters, digits, other symbols, control tokens: empty
 * text) weighs 0. The per-model table is built lazily per token id. */
#ifndef KVC_KV_METHOD_SENTENCE_VOCAB_H
#define KVC_KV_METHOD_SENTENCE_VOCAB_H

#include <stdint.h>

#include "kv/cache.h"

/* S of a token whose text is bytes[0..len). */
float kvc_sentence_weight(const char *bytes, int len);

/* Weights by token id, filled on first use through the cache's text callback. */
typedef struct kvc_vocab_weights {
    float *w;   /* [cap]; < 0: not looked up yet */
    int cap;
} kvc_vocab_weights;

enum { KVC_VOCAB_MAX_ID = 1 << 24 };

/* The weight of token id (0 for ids outside [0, KVC_VOCAB_MAX_ID), without a
 * text callback, or when the table cannot grow). */
float kvc_vocab_weight(kvc_vocab_weights *vw, int32_t id, kvc_token_text_fn text, void *ctx);
void kvc_vocab_weights_free(kvc_vocab_weights *vw);

#endif
