/* Shared by the tokenizer and chat fuzz targets: the fixture vocabularies of
 * tests/fixtures/tokenizer (cut-down real vocabularies, loaded once: a few ms
 * instead of the default model's 49k tokens on every start), and the helpers
 * both targets' properties use. KVC_SOURCE_DIR is set by the build. */
#ifndef KVC_FUZZ_VOCAB_H
#define KVC_FUZZ_VOCAB_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

/* Loads tests/fixtures/tokenizer/vocab-<name>.gguf, or the default model's
 * vocabulary for "model"; exits when it cannot (a broken set-up, not a finding). */
static inline kvc_tokenizer *fuzz_vocab(const char *name) {
    char path[1024];
    if (strcmp(name, "model") == 0)
        snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", KVC_SOURCE_DIR);
    else
        snprintf(path, sizeof path, "%s/tests/fixtures/tokenizer/vocab-%s.gguf", KVC_SOURCE_DIR,
                 name);
    kvc_gguf *g = NULL;
    kvc_tokenizer *t = NULL;
    if (kvc_gguf_open(path, &g) != KVC_OK || kvc_tokenizer_load(g, &t) != KVC_OK) {
        fprintf(stderr, "fuzz: cannot load %s: %s\n", path, kvc_last_error());
        exit(2);
    }
    kvc_gguf_close(g);
    return t;
}

/* A control token: no text unless special tokens are shown (BOS, <|im_start|>, ...). */
static inline int fuzz_is_control(const kvc_tokenizer *t, int32_t id) {
    char a[8], b[8];
    return kvc_tokenizer_piece(t, id, 0, a, sizeof a) == 0 &&
           kvc_tokenizer_piece(t, id, 1, b, sizeof b) != 0;
}

/* Tokens of text[0..len) in a malloc'd array (*n of them); traps on failure,
 * since any text must tokenize. A second call when the first buffer was short
 * (*n is the full count) checks that contract too. */
static inline int32_t *fuzz_tokenize(const kvc_tokenizer *t, const char *text, size_t len,
                                     int add_bos, int parse_special, int *n) {
    int cap = (int)len / 4 + 2;
    for (int round = 0; round < 2; round++) {
        int32_t *ids = malloc((size_t)cap * sizeof *ids);
        if (!ids) __builtin_trap();
        if (kvc_tokenizer_tokenize(t, text, len, add_bos, parse_special, ids, cap, n) != KVC_OK)
            __builtin_trap();
        if (*n <= cap) {
            int nv = kvc_tokenizer_n_vocab(t);
            for (int i = 0; i < *n; i++)
                if (ids[i] < 0 || ids[i] >= nv) __builtin_trap();
            return ids;
        }
        free(ids);
        if (round == 1) __builtin_trap(); /* the full count did not fit the second time */
        cap = *n;
    }
    return NULL;
}

#endif
