/* Tokenizer built from GGUF metadata (tokenizer.ggml.*): byte-level BPE (gpt2
 * style, with the pre-tokenizer of each supported family: SmolLM, Llama-3,
 * Qwen2) and SentencePiece BPE (Llama-2, Mistral). The public functions in
 * kvcomp.h (kvc_tokenize, kvc_token_piece, kvc_detok_*, kvc_chat_apply) are
 * thin wrappers over this, reached through kvc_model_tokenizer(). */
#ifndef KVC_MODEL_TOKENIZER_H
#define KVC_MODEL_TOKENIZER_H

#include "gguf/gguf.h"
#include "kvcomp.h"

typedef struct kvc_tokenizer kvc_tokenizer;

/* Builds the tokenizer from the file's metadata; KVC_ERR_UNSUPPORTED names
 * tokenizer.ggml.model / .pre when the kind is not supported. The tokenizer
 * copies what it needs: it does not keep pointers into g. */
kvc_status kvc_tokenizer_load(const kvc_gguf *g, kvc_tokenizer **out);
void kvc_tokenizer_free(kvc_tokenizer *t);
int kvc_tokenizer_n_vocab(const kvc_tokenizer *t);

/* The model's tokenizer (defined with the model, src/model/model_load.c). */
struct kvc_model;
const kvc_tokenizer *kvc_model_tokenizer(const struct kvc_model *m);

#endif
