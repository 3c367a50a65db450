/* Tokenizer built from GGUF metadata (tokenizer.ggml.*): byte-level BPE (gpt2
 * style, with the pre-tokenizer of each supported family: SmolLM, Llama-3,
 * Qwen2) and SentencePiece BPE (Llama-2, Mistral). The public functions in
 * kvcomp.h (kvc_tokenize, kvc_token_piece, kvc_detok_*, kvc_chat_apply) are
 * thin wrappers over this in src/model/tokens.c. */
#ifndef KVC_TOKENIZER_TOKENIZER_H
#define KVC_TOKENIZER_TOKENIZER_H

#include "gguf/gguf.h"
#include "kvcomp.h"

typedef struct kvc_tokenizer kvc_tokenizer;

/* Builds the tokenizer from the file's metadata; KVC_ERR_UNSUPPORTED names
 * tokenizer.ggml.model / .pre when the kind is not supported. The tokenizer
 * copies what it needs: it does not keep pointers into g. */
kvc_status kvc_tokenizer_load(const kvc_gguf *g, kvc_tokenizer **out);
void kvc_tokenizer_free(kvc_tokenizer *t);
int kvc_tokenizer_n_vocab(const kvc_tokenizer *t);

/* The same operations as the public kvc_tokenize / kvc_token_* / kvc_detok_* /
 * kvc_chat_apply, on a tokenizer rather than a model (tests build tokenizers
 * from in-memory GGUF files). Contracts are those of kvcomp.h. */
kvc_status kvc_tokenizer_tokenize(const kvc_tokenizer *t, const char *text, size_t len, int add_bos,
                                  int parse_special, int32_t *tokens, int cap, int *n_out);
int kvc_tokenizer_piece(const kvc_tokenizer *t, int32_t token, int show_special, char *buf,
                        int cap);
int32_t kvc_tokenizer_bos(const kvc_tokenizer *t);
int32_t kvc_tokenizer_eos(const kvc_tokenizer *t);
int kvc_tokenizer_is_end(const kvc_tokenizer *t, int32_t token);
kvc_status kvc_detok_create_tok(const kvc_tokenizer *t, kvc_detok **out);
kvc_status kvc_tokenizer_chat_apply(const kvc_tokenizer *t, const kvc_chat_msg *msgs, int n_msgs,
                                    int add_assistant_prompt, char **out);

/* Chat formatting from a template text (NULL or unknown: ChatML). The
 * detected family is one of "chatml", "llama3", "llama2", "llama2-sys",
 * "llama2-sys-bos", "llama2-sys-strip", "mistral-v1", "mistral-v3",
 * "mistral-v3-tekken", "mistral-v7". */
const char *kvc_chat_template_kind(const char *tmpl);
/* As kvc_chat_format, with mask[i] = 1 where the template wrote byte i and 0
 * where a message's role or content did (malloc'd, strlen(*out) bytes). */
kvc_status kvc_chat_format_masked(const char *tmpl, const kvc_chat_msg *msgs, int n_msgs,
                                  int add_assistant_prompt, char **out, uint8_t **mask);
/* The conversation tokenized (BOS as the model asks): the template's markers
 * become control tokens, the messages' text never does, whatever it spells
 * ("<|im_end|><|im_start|>system" in a user line stays text). Output contract
 * as kvc_tokenize. */
kvc_status kvc_tokenizer_chat_tokenize(const kvc_tokenizer *t, const kvc_chat_msg *msgs, int n_msgs,
                                       int add_assistant_prompt, int32_t *tokens, int cap,
                                       int *n_out);
/* The same with a given template text instead of the tokenizer's (tests, fuzzing). */
kvc_status kvc_chat_tokenize_tmpl(const kvc_tokenizer *t, const char *tmpl, const kvc_chat_msg *msgs,
                                  int n_msgs, int add_assistant_prompt, int32_t *tokens, int cap,
                                  int *n_out);
kvc_status kvc_chat_format(const char *tmpl, const kvc_chat_msg *msgs, int n_msgs,
                           int add_assistant_prompt, char **out);

#endif
