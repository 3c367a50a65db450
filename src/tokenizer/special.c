/* Special tokens (llama.cpp llama_vocab::load, "special tokens" part): ids
 * the metadata does not give are found by their text (end of turn, end of
 * message, fill-in-the-middle), those texts are forced to control tokens,
 * control tokens named "unused" are marked unused, and the end-of-generation
 * set is EOS, EOT, EOM, FIM pad/repo/separator and every token whose text is
 * a known end marker. The partition list holds the control, user-defined and
 * unknown tokens, longest text first (ties by id). */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "tokenizer/tokenizer_impl.h"

static int32_t find_text(const kvc_tokenizer *t, const char *const *texts) {
    int32_t best = -1; /* lowest id among the matches (llama.cpp's pick depends on hash order) */
    for (; *texts; texts++) {
        int32_t id = kvc_tok_lookup(t, *texts, strlen(*texts));
        if (id >= 0 && id < t->n_vocab && (best < 0 || id < best)) best = id;
    }
    return best;
}

static void mark_eog(kvc_tokenizer *t, int32_t id) {
    if (id >= 0 && id < t->n_vocab) t->eog[id] = 1;
}

void kvc_tok_detect_specials(kvc_tokenizer *t, int32_t fim[6]) {
    static const char *const eot[] = {"<|eot_id|>",
                                      "<|im_end|>",
                                      "<|end|>",
                                      "<end_of_turn>",
                                      "<|endoftext|>",
                                      "<|end_of_text|>",
                                      "<EOT>",
                                      "_<EOT>",
                                      "[EOT]",
                                      "<\xef\xbd\x9c"
                                      "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                      "<end_of_utterance>",
                                      NULL};
    static const char *const eom[] = {"<|eom_id|>", NULL};
    static const char *const fim_texts[6][9] = {
        {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
         "<\xef\xbd\x9c"
         "fim\xe2\x96\x81"
         "begin\xef\xbd\x9c>",
         "<PRE>", "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL},
        {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
         "<\xef\xbd\x9c"
         "fim\xe2\x96\x81hole\xef\xbd\x9c>",
         "<SUF>", "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL},
        {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
         "<\xef\xbd\x9c"
         "fim\xe2\x96\x81"
         "end\xef\xbd\x9c>",
         "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL},
        {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL},
        {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL},
        {"<|file_sep|>", NULL},
    };
    static const char *const eog_texts[] = {"<|eot_id|>",
                                            "<|im_end|>",
                                            "<|end|>",
                                            "<|return|>",
                                            "<|call|>",
                                            "<|flush|>",
                                            "<|calls|>",
                                            "<end_of_turn>",
                                            "<|endoftext|>",
                                            "</s>",
                                            "<|eom_id|>",
                                            "<EOT>",
                                            "_<EOT>",
                                            "[EOT]",
                                            "[EOS]",
                                            "<|end_of_text|>",
                                            "<end_of_utterance>",
                                            "<eos>",
                                            "<turn|>",
                                            "<|tool_response>",
                                            "<\xef\xbd\x9c"
                                            "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                            "[e~[",
                                            NULL};
    if (t->eot < 0 && (t->eot = find_text(t, eot)) >= 0) t->attr[t->eot] |= KVC_TATTR_CONTROL;
    if (t->eom < 0 && (t->eom = find_text(t, eom)) >= 0) t->attr[t->eom] |= KVC_TATTR_CONTROL;
    for (int k = 0; k < 6; k++)
        if (fim[k] < 0 && (fim[k] = find_text(t, fim_texts[k])) >= 0)
            t->attr[fim[k]] |= KVC_TATTR_CONTROL;
    /* control tokens whose text says "unused" */
    for (int i = 0; i < t->n_vocab; i++)
        if ((t->attr[i] & KVC_TATTR_CONTROL) && strstr(t->arena + t->str_off[i], "unused"))
            t->attr[i] |= KVC_TATTR_UNUSED;
    /* end of generation: FIM pad/repo/sep, the known texts, EOS, EOT, EOM */
    mark_eog(t, fim[3]);
    mark_eog(t, fim[4]);
    mark_eog(t, fim[5]);
    for (const char *const *s = eog_texts; *s; s++) {
        int32_t id = kvc_tok_lookup(t, *s, strlen(*s));
        if (id >= 0 && id < t->n_vocab) {
            t->eog[id] = 1;
            t->attr[id] |= KVC_TATTR_CONTROL;
        }
    }
    mark_eog(t, t->eos);
    mark_eog(t, t->eot);
    mark_eog(t, t->eom);
    /* gpt-oss: always rendered */
    static const char *const shown[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>",
                                        NULL};
    for (const char *const *s = shown; *s; s++) {
        int32_t id = kvc_tok_lookup(t, *s, strlen(*s));
        if (id >= 0 && id < t->n_vocab) t->attr[id] = KVC_TATTR_USER_DEFINED;
    }
}

static _Thread_local const kvc_tokenizer *tl_sort_tok; /* qsort context */

static int cmp_special(const void *a, const void *b) {
    const kvc_tokenizer *t = tl_sort_tok;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->str_len[x] != t->str_len[y]) return t->str_len[x] > t->str_len[y] ? -1 : 1;
    return (x > y) - (x < y);
}

kvc_status kvc_tok_list_specials(kvc_tokenizer *t) {
    t->specials = malloc((size_t)t->n_vocab * sizeof *t->specials);
    if (!t->specials) return kvc_fail(KVC_ERR_NOMEM, "tokenizer: special token list");
    t->n_specials = 0;
    for (int i = 0; i < t->n_vocab; i++)
        if (t->attr[i] & (KVC_TATTR_CONTROL | KVC_TATTR_USER_DEFINED | KVC_TATTR_UNKNOWN))
            t->specials[t->n_specials++] = i;
    tl_sort_tok = t;
    qsort(t->specials, (size_t)t->n_specials, sizeof *t->specials, cmp_special);
    tl_sort_tok = NULL;
    return KVC_OK;
}
