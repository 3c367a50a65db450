/* The public token functions of a loaded model (kvcomp.h: kvc_tokenize,
 * kvc_token_*, kvc_detok_create, kvc_chat_apply): each checks the model and
 * hands its tokenizer to the tokenizer module (src/tokenizer), which knows
 * nothing of models. */
#include "base/status.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

kvc_status kvc_tokenize(const kvc_model *m, const char *text, size_t len, int add_bos,
                        int parse_special, int32_t *tokens, int cap, int *n_out) {
    if (n_out) *n_out = 0;
    KVC_CHECK(m, KVC_ERR_ARG, "tokenize: model is NULL");
    return kvc_tokenizer_tokenize(kvc_model_tokenizer(m), text, len, add_bos, parse_special, tokens,
                                  cap, n_out);
}

int32_t kvc_token_bos(const kvc_model *m) {
    return m ? kvc_tokenizer_bos(kvc_model_tokenizer(m)) : -1;
}
int32_t kvc_token_eos(const kvc_model *m) {
    return m ? kvc_tokenizer_eos(kvc_model_tokenizer(m)) : -1;
}
int kvc_token_is_end(const kvc_model *m, int32_t token) {
    return m ? kvc_tokenizer_is_end(kvc_model_tokenizer(m), token) : 0;
}

int kvc_token_piece(const kvc_model *m, int32_t token, int show_special, char *buf, int cap) {
    return m ? kvc_tokenizer_piece(kvc_model_tokenizer(m), token, show_special, buf, cap) : -1;
}

kvc_status kvc_detok_create(const kvc_model *m, kvc_detok **out) {
    if (out) *out = NULL;
    KVC_CHECK(m, KVC_ERR_ARG, "detok_create: model is NULL");
    return kvc_detok_create_tok(kvc_model_tokenizer(m), out);
}

kvc_status kvc_chat_apply(const kvc_model *m, const kvc_chat_msg *msgs, int n_msgs,
                          int add_assistant_prompt, char **out) {
    if (out) *out = NULL;
    KVC_CHECK(m, KVC_ERR_ARG, "chat_apply: model is NULL");
    return kvc_tokenizer_chat_apply(kvc_model_tokenizer(m), msgs, n_msgs, add_assistant_prompt,
                                    out);
}

kvc_status kvc_chat_tokenize(const kvc_model *m, const kvc_chat_msg *msgs, int n_msgs,
                             int add_assistant_prompt, int32_t *tokens, int cap, int *n_out) {
    if (n_out) *n_out = 0;
    KVC_CHECK(m, KVC_ERR_ARG, "chat_tokenize: model is NULL");
    return kvc_tokenizer_chat_tokenize(kvc_model_tokenizer(m), msgs, n_msgs, add_assistant_prompt,
                                       tokens, cap, n_out);
}
