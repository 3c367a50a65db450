/* libFuzzer target for the tokenizer (untrusted: every prompt, file and chat
 * line goes through it). The first input byte picks a vocabulary (the default
 * model's, and the cut-down fixtures of each pre-tokenizer family and of
 * SentencePiece) and the flags, the rest is the text. Properties:
 *  - every text tokenizes, to ids inside the vocabulary;
 *  - byte-level BPE, text tokenized as text (parse_special = 0): the pieces
 *    spell the text back exactly with control tokens hidden, so user text
 *    never becomes a control token - for well-formed UTF-8 on the default
 *    model's vocabulary, for ASCII on the cut-down fixtures, in both cases
 *    made of bytes the vocabulary has a token for (SmolLM2 has none for some,
 *    e.g. 0x16 and 0xF1, which llama.cpp and kvcomp drop from the text);
 *  - the same with parse_special = 1 and special tokens shown (they are
 *    their own text);
 *  - the incremental detokenizer takes any id sequence (BOS included).
 * Built by `make fuzz`; the committed corpus replays in `make test`. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_vocab.h"

static const char *const k_vocabs[] = {"gpt2-mini",  "default-mini", "smollm-mini", "llama3-mini",
                                       "qwen2-mini", "spm-mini",     "model"};
enum { N_VOCABS = sizeof k_vocabs / sizeof k_vocabs[0], SPM = 5, FULL = 6 };
static kvc_tokenizer *g_tok[N_VOCABS];
static uint8_t g_byte_ok[N_VOCABS][256]; /* the vocabulary has a token for the byte */

/* Strict UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF. */
static int utf8_valid(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (k == 0 || i + k > n) return 0;
        uint32_t cp = k == 1 ? c : c & (0x7f >> k);
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[k] || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000)) return 0;
        i += k;
    }
    return 1;
}

/* The text is one the vocabulary can spell back. */
static int spellable(int v, const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!g_byte_ok[v][s[i]] || (s[i] >= 128 && v != FULL)) return 0;
    return v != FULL || utf8_valid(s, n);
}

/* The pieces of ids concatenated (malloc'd, *n bytes). */
static char *spell(const kvc_tokenizer *t, const int32_t *ids, int n_ids, int show_special,
                   size_t *n) {
    size_t cap = 64, len = 0;
    char *out = malloc(cap);
    for (int i = 0; out && i < n_ids; i++) {
        char piece[512];
        int k = kvc_tokenizer_piece(t, ids[i], show_special, piece, sizeof piece);
        if (k < 0 || k >= (int)sizeof piece) __builtin_trap();
        while (len + (size_t)k > cap) {
            cap *= 2;
            char *o = realloc(out, cap);
            if (!o) __builtin_trap();
            out = o;
        }
        memcpy(out + len, piece, (size_t)k);
        len += (size_t)k;
    }
    if (!out) __builtin_trap();
    *n = len;
    return out;
}

/* The text spells back through the vocabulary. */
static int round_trips(int v, const char *text, size_t len) {
    int n = 0;
    size_t m = 0;
    int32_t *ids = fuzz_tokenize(g_tok[v], text, len, 0, 0, &n);
    char *back = spell(g_tok[v], ids, n, 0, &m);
    int ok = m == len && memcmp(back, text, len) == 0;
    free(back);
    free(ids);
    return ok;
}

/* Which bytes the vocabulary has a token for: each ASCII byte alone, each
 * other byte inside the shortest well-formed character holding it (a
 * continuation byte after C2, a lead byte before the continuations it needs). */
static void find_bytes(int v) {
    for (int b = 0; b < 256; b++) {
        char c[4] = {(char)b, (char)0x80, (char)0x80, (char)0x80};
        size_t len = 1;
        if (b >= 0x80 && b < 0xc0) c[0] = (char)0xc2, c[1] = (char)b, len = 2;
        else if (b >= 0xc2 && b < 0xe0) len = 2;
        else if (b >= 0xe0 && b < 0xf0) c[1] = (char)(b == 0xe0 ? 0xa0 : 0x80), len = 3;
        else if (b >= 0xf0 && b < 0xf5) c[1] = (char)(b == 0xf0 ? 0x90 : 0x80), len = 4;
        else if (b >= 0x80) continue; /* never in well-formed UTF-8 */
        g_byte_ok[v][b] = (uint8_t)round_trips(v, c, len);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    for (int i = 0; i < N_VOCABS; i++) {
        g_tok[i] = fuzz_vocab(k_vocabs[i]);
        find_bytes(i);
    }
    return 0;
}

/* Streams ids through the incremental detokenizer. */
static void check_detok(const kvc_tokenizer *t, const int32_t *ids, int n_ids) {
    kvc_detok *d = NULL;
    if (kvc_detok_create_tok(t, &d) != KVC_OK) __builtin_trap();
    for (int i = 0; i < n_ids; i++) {
        char buf[1024];
        int k = kvc_detok_push(d, ids[i], buf, sizeof buf);
        if (k < 0) __builtin_trap();
    }
    char buf[1024];
    if (kvc_detok_flush(d, buf, sizeof buf) < 0) __builtin_trap();
    kvc_detok_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int v = data[0] % N_VOCABS, add_bos = data[0] >> 4 & 1, parse_special = data[0] >> 5 & 1;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    const kvc_tokenizer *t = g_tok[v];
    int n = 0;
    int32_t *ids = fuzz_tokenize(t, text, len, add_bos, parse_special, &n);
    check_detok(t, ids, n);
    if (add_bos) { /* the round trip is about the text: without BOS */
        free(ids);
        ids = fuzz_tokenize(t, text, len, 0, parse_special, &n);
    }
    if (v != SPM && spellable(v, (const uint8_t *)text, len)) {
        size_t m;
        char *back = spell(t, ids, n, parse_special, &m);
        if (m != len || memcmp(back, text, len) != 0) __builtin_trap();
        free(back);
    }
    free(ids);
    return 0;
}
