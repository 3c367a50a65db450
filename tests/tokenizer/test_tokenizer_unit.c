/* Tokenizer unit tests that need no reference: a tiny SentencePiece
 * vocabulary built in memory with tokens worked out by hand (score order,
 * byte fallback, leading space, special tokens), pre-tokenizer splits worked
 * out by hand from the patterns, the Unicode category table, the incremental
 * detokenizer (split characters held back, invalid bytes replaced), multi-MB
 * inputs (random bytes, a 1 MB word, a long text: no crash, exact round trip),
 * rejected metadata (the message names the key), hand-written chat formats
 * and the public API's argument checks. The comparison against llama.cpp is
 * in test_tokenizer.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"

/* ---- in-memory GGUF (metadata only) -------------------------------------------- */

typedef struct gw {
    uint8_t *p;
    size_t n, cap;
    uint64_t n_kv;
} gw;

static void raw(gw *w, const void *d, size_t n) {
    if (w->n + n > w->cap) {
        w->cap = (w->n + n) * 2 + 64;
        w->p = realloc(w->p, w->cap);
    }
    memcpy(w->p + w->n, d, n);
    w->n += n;
}
static void u32(gw *w, uint32_t v) {
    raw(w, &v, 4);
}
static void u64(gw *w, uint64_t v) {
    raw(w, &v, 8);
}
static void str(gw *w, const char *s) {
    u64(w, strlen(s));
    raw(w, s, strlen(s));
}
static void key(gw *w, const char *k, uint32_t type) {
    str(w, k);
    u32(w, type);
    w->n_kv++;
}
static void kv_str(gw *w, const char *k, const char *v) {
    key(w, k, KVC_GGUF_STRING);
    str(w, v);
}
static void kv_u32(gw *w, const char *k, uint32_t v) {
    key(w, k, KVC_GGUF_U32);
    u32(w, v);
}
static void kv_bool(gw *w, const char *k, int v) {
    key(w, k, KVC_GGUF_BOOL);
    uint8_t b = (uint8_t)v;
    raw(w, &b, 1);
}
static void kv_arr_str(gw *w, const char *k, const char *const *v, size_t n) {
    key(w, k, KVC_GGUF_ARRAY);
    u32(w, KVC_GGUF_STRING);
    u64(w, n);
    for (size_t i = 0; i < n; i++)
        str(w, v[i]);
}
static void kv_arr_f32(gw *w, const char *k, const float *v, size_t n) {
    key(w, k, KVC_GGUF_ARRAY);
    u32(w, KVC_GGUF_F32);
    u64(w, n);
    raw(w, v, 4 * n);
}
static void kv_arr_i32(gw *w, const char *k, const int32_t *v, size_t n) {
    key(w, k, KVC_GGUF_ARRAY);
    u32(w, KVC_GGUF_I32);
    u64(w, n);
    raw(w, v, 4 * n);
}
static void kv_arr_u32(gw *w, const char *k, const uint32_t *v, size_t n) {
    key(w, k, KVC_GGUF_ARRAY);
    u32(w, KVC_GGUF_U32);
    u64(w, n);
    raw(w, v, 4 * n);
}

/* Header + key/values, padded to 32 bytes; the caller frees *buf after the gguf. */
static kvc_status gw_load(gw *w, uint8_t **buf, kvc_gguf **g, kvc_tokenizer **t) {
    gw f = {0};
    u32(&f, 0x46554747u);
    u32(&f, 3);
    u64(&f, 0);
    u64(&f, w->n_kv);
    raw(&f, w->p, w->n);
    static const uint8_t zero[32];
    raw(&f, zero, (32 - f.n % 32) % 32);
    free(w->p);
    *w = (gw){0};
    *buf = f.p;
    *t = NULL;
    kvc_status st = kvc_gguf_parse(f.p, f.n, g);
    if (st != KVC_OK) fail_msg("gguf: %s", kvc_last_error());
    return kvc_tokenizer_load(*g, t);
}

/* ---- a hand-made SentencePiece vocabulary --------------------------------------- */

#define NB 256
enum { T_SP = 259, T_A, T_B, T_AB, T_SPA, T_SPAB, T_C, T_BC, T_USER, N_TOK };

static void spm_vocab(gw *w, int add_space_prefix) {
    static char names[N_TOK][16];
    static const char *tok[N_TOK];
    static float score[N_TOK];
    static int32_t type[N_TOK];
    tok[0] = "<unk>", type[0] = 2;
    tok[1] = "<s>", type[1] = 3;
    tok[2] = "</s>", type[2] = 3;
    for (int b = 0; b < NB; b++) {
        snprintf(names[3 + b], sizeof names[0], "<0x%02X>", b);
        tok[3 + b] = names[3 + b];
        type[3 + b] = 6;
    }
    const char *normal[] = {"\xe2\x96\x81",
                            "a",
                            "b",
                            "ab",
                            "\xe2\x96\x81"
                            "a",
                            "\xe2\x96\x81"
                            "ab",
                            "c",
                            "bc"};
    const float sc[] = {-1.0f, -2.0f, -3.0f, -0.5f, -4.0f, -0.1f, -5.0f, -0.2f};
    for (int i = 0; i < 8; i++) {
        tok[T_SP + i] = normal[i];
        score[T_SP + i] = sc[i];
        type[T_SP + i] = 1;
    }
    tok[T_USER] = "<tool>", type[T_USER] = 4; /* user-defined: matched even without parse_special */
    kv_str(w, "tokenizer.ggml.model", "llama");
    kv_arr_str(w, "tokenizer.ggml.tokens", tok, N_TOK);
    kv_arr_f32(w, "tokenizer.ggml.scores", score, N_TOK);
    kv_arr_i32(w, "tokenizer.ggml.token_type", type, N_TOK);
    kv_u32(w, "tokenizer.ggml.bos_token_id", 1);
    kv_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (!add_space_prefix) kv_bool(w, "tokenizer.ggml.add_space_prefix", 0);
    kv_str(w, "tokenizer.chat_template",
           "{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}");
}

static void expect_tokens(const kvc_tokenizer *t, const char *text, int add_bos, int special,
                          const int32_t *want, int n_want) {
    int32_t got[64];
    int n = -1;
    assert_int_equal(kvc_tokenizer_tokenize(t, text, strlen(text), add_bos, special, got, 64, &n),
                     KVC_OK);
    if (n != n_want || memcmp(got, want, sizeof *got * (size_t)n) != 0) {
        fprintf(stderr, "text \"%s\": got", text);
        for (int i = 0; i < n && i < 64; i++)
            fprintf(stderr, " %d", got[i]);
        fprintf(stderr, ", want");
        for (int i = 0; i < n_want; i++)
            fprintf(stderr, " %d", want[i]);
        fprintf(stderr, "\n");
        fail();
    }
}
#define EXPECT(t, text, bos, sp, ...)                                                              \
    do {                                                                                           \
        const int32_t w_[] = {__VA_ARGS__};                                                        \
        expect_tokens(t, text, bos, sp, w_, (int)(sizeof w_ / sizeof w_[0]));                      \
    } while (0)
#define BYTE(b) (3 + (b))

static void test_spm_by_hand(void **s) {
    (void)s;
    gw w = {0};
    uint8_t *buf;
    kvc_gguf *g;
    kvc_tokenizer *t;
    spm_vocab(&w, 1);
    assert_int_equal(gw_load(&w, &buf, &g, &t), KVC_OK);
    /* "▁abc": pairs ▁a (-4), ab (-0.5), bc (-0.2): bc merges first, which
     * leaves ab stale; then ▁a; "▁abc" is no token. */
    EXPECT(t, "abc", 0, 0, T_SPA, T_BC);
    /* "▁ab": ab (-0.5) first, then ▁ab (-0.1). */
    EXPECT(t, "ab", 0, 0, T_SPAB);
    /* unknown characters fall back to their bytes */
    EXPECT(t, "d", 0, 0, T_SP, BYTE('d'));
    EXPECT(t, "\xc3\xa9", 0, 0, T_SP, BYTE(0xC3), BYTE(0xA9));
    /* BOS on request (add_bos_token defaults to true for SentencePiece) */
    EXPECT(t, "ab", 1, 0, 1, T_SPAB);
    /* "<s>" is text unless parse_special; after a special token the leading space comes back */
    EXPECT(t, "<s>ab", 0, 0, T_SP, BYTE('<'), BYTE('s'), BYTE('>'), T_AB);
    EXPECT(t, "<s>ab", 0, 1, 1, T_SPAB);
    /* user-defined tokens are cut out even without parse_special */
    EXPECT(t, "ab<tool>ab", 0, 0, T_SPAB, T_USER, T_SPAB);
    /* spaces are U+2581 */
    EXPECT(t, "ab ab", 0, 0, T_SPAB, T_SPAB);
    /* pieces */
    char pb[16];
    assert_int_equal(kvc_tokenizer_piece(t, T_SPAB, 0, pb, sizeof pb), 3);
    assert_memory_equal(pb, " ab", 3);
    assert_int_equal(kvc_tokenizer_piece(t, BYTE(0xC3), 0, pb, sizeof pb), 1);
    assert_int_equal((uint8_t)pb[0], 0xC3);
    assert_int_equal(kvc_tokenizer_piece(t, 1, 0, pb, sizeof pb), 0);
    assert_int_equal(kvc_tokenizer_piece(t, 1, 1, pb, sizeof pb), 3);
    assert_int_equal(kvc_tokenizer_piece(t, T_USER, 0, pb, sizeof pb), 6);
    assert_int_equal(kvc_tokenizer_piece(t, N_TOK, 0, pb, sizeof pb), -1);
    assert_int_equal(kvc_tokenizer_piece(t, -1, 0, pb, sizeof pb), -1);
    assert_int_equal(kvc_tokenizer_piece(t, T_SPAB, 0, pb, 2), 2); /* truncated to cap */
    assert_true(kvc_tokenizer_is_end(t, 2));
    assert_false(kvc_tokenizer_is_end(t, 1));
    assert_string_equal(kvc_chat_template_kind(t->chat_template), "llama2");
    kvc_tokenizer_free(t);
    kvc_gguf_close(g);
    free(buf);

    spm_vocab(&w, 0); /* add_space_prefix = false */
    assert_int_equal(gw_load(&w, &buf, &g, &t), KVC_OK);
    EXPECT(t, "ab", 0, 0, T_AB);
    EXPECT(t, " ab", 0, 0, T_SPAB);
    kvc_tokenizer_free(t);
    kvc_gguf_close(g);
    free(buf);
}

/* ---- detokenizer ------------------------------------------------------------------ */

static void test_detok_holds_back(void **s) {
    (void)s;
    gw w = {0};
    uint8_t *buf;
    kvc_gguf *g;
    kvc_tokenizer *t;
    spm_vocab(&w, 1);
    assert_int_equal(gw_load(&w, &buf, &g, &t), KVC_OK);
    kvc_detok *d;
    char out[64];
    assert_int_equal(kvc_detok_create_tok(t, &d), KVC_OK);
    /* " " then "€" (E2 82 AC) in three byte tokens */
    assert_int_equal(kvc_detok_push(d, T_SP, out, sizeof out), 1);
    assert_string_equal(out, " ");
    assert_int_equal(kvc_detok_push(d, BYTE(0xE2), out, sizeof out), 0);
    assert_string_equal(out, "");
    assert_int_equal(kvc_detok_push(d, BYTE(0x82), out, sizeof out), 0);
    assert_int_equal(kvc_detok_push(d, BYTE(0xAC), out, sizeof out), 3);
    assert_string_equal(out, "\xe2\x82\xac");
    /* control tokens print nothing */
    assert_int_equal(kvc_detok_push(d, 2, out, sizeof out), 0);
    /* a bad byte becomes U+FFFD; a lead byte followed by ASCII too */
    assert_int_equal(kvc_detok_push(d, BYTE(0xFF), out, sizeof out), 3);
    assert_string_equal(out, "\xef\xbf\xbd");
    assert_int_equal(kvc_detok_push(d, BYTE(0xC3), out, sizeof out), 0);
    assert_int_equal(kvc_detok_push(d, T_A, out, sizeof out), 4);
    assert_string_equal(out, "\xef\xbf\xbd"
                             "a");
    /* surrogates and overlongs are not let through */
    assert_int_equal(kvc_detok_push(d, BYTE(0xED), out, sizeof out), 0);
    assert_int_equal(kvc_detok_push(d, BYTE(0xA0), out, sizeof out), 6);
    assert_int_equal(kvc_detok_push(d, BYTE(0x80), out, sizeof out), 3);
    /* an incomplete tail comes out at flush */
    assert_int_equal(kvc_detok_push(d, BYTE(0xF0), out, sizeof out), 0);
    assert_int_equal(kvc_detok_push(d, BYTE(0x9F), out, sizeof out), 0);
    assert_int_equal(kvc_detok_flush(d, out, sizeof out), 6);
    assert_int_equal(kvc_detok_flush(d, out, sizeof out), 0);
    /* a small buffer: the rest waits for the next call */
    assert_int_equal(kvc_detok_push(d, T_SPAB, out, 3), 2);
    assert_string_equal(out, " a");
    assert_int_equal(kvc_detok_push(d, -1, out, 3), 1);
    assert_string_equal(out, "b");
    kvc_detok_free(d);
    kvc_tokenizer_free(t);
    kvc_gguf_close(g);
    free(buf);
}

/* ---- pre-tokenizers and Unicode ---------------------------------------------------- */

static void expect_split(kvc_pretok kind, const char *text, const char *const *want,
                         size_t n_want) {
    uint32_t cps[256];
    size_t lens[256], n_words;
    size_t n = kvc_utf8_decode((const uint8_t *)text, strlen(text), cps);
    assert_int_equal(kvc_pretokenize(kind, cps, n, lens, &n_words), KVC_OK);
    size_t at = 0;
    int ok = n_words == n_want;
    for (size_t i = 0; ok && i < n_words; i++) {
        uint32_t wc[64];
        size_t wn = kvc_utf8_decode((const uint8_t *)want[i], strlen(want[i]), wc);
        ok = wn == lens[i] && memcmp(wc, cps + at, wn * sizeof *wc) == 0;
        at += lens[i];
    }
    if (!ok) {
        fprintf(stderr, "split of \"%s\" (kind %d): got %zu words:", text, (int)kind, n_words);
        for (size_t i = 0; i < n_words; i++)
            fprintf(stderr, " %zu", lens[i]);
        fprintf(stderr, "\n");
        fail();
    }
}
#define SPLIT(kind, text, ...)                                                                     \
    do {                                                                                           \
        const char *const w_[] = {__VA_ARGS__};                                                    \
        expect_split(kind, text, w_, sizeof w_ / sizeof w_[0]);                                    \
    } while (0)

static void test_pretokenizers_by_hand(void **s) {
    (void)s;
    SPLIT(KVC_PRETOK_GPT2, "Hello world's  x", "Hello", " world", "'s", " ", " x");
    SPLIT(KVC_PRETOK_GPT2, "a1 22!!\n\n", "a", "1", " 22", "!!", "\n\n");
    SPLIT(KVC_PRETOK_GPT2, "I'M", "I", "'", "M"); /* GPT-2 contractions are lower case only */
    SPLIT(KVC_PRETOK_LLAMA3, "I'M", "I", "'M");
    SPLIT(KVC_PRETOK_LLAMA3, "abc  123456\n\n x", "abc", " ", " ", "123", "456", "\n\n", " x");
    SPLIT(KVC_PRETOK_LLAMA3, "\tword ...\n\nx", "\tword", " ...\n\n", "x");
    SPLIT(KVC_PRETOK_QWEN2, "x 12", "x", " ", "1", "2");
    SPLIT(KVC_PRETOK_SMOLLM, "abc123 x", "abc", "1", "2", "3", " x");
    SPLIT(KVC_PRETOK_DEFAULT, "a,b 12345", "a", ",", "b", " ", "123", "45");
    SPLIT(KVC_PRETOK_GPT2, "\xe4\xbd\xa0\xe5\xa5\xbd \xd9\xa3\xd9\xa4", "\xe4\xbd\xa0\xe5\xa5\xbd",
          " \xd9\xa3\xd9\xa4");
}

static void test_unicode_table(void **s) {
    (void)s;
    assert_int_equal(kvc_ucat('A'), KVC_UCAT_LETTER);
    assert_int_equal(kvc_ucat('7'), KVC_UCAT_NUMBER);
    assert_int_equal(kvc_ucat(' '), KVC_UCAT_SEPARATOR | KVC_UCAT_SPACE);
    assert_int_equal(kvc_ucat('\n'), KVC_UCAT_CONTROL | KVC_UCAT_SPACE);
    assert_int_equal(kvc_ucat('$'), KVC_UCAT_SYMBOL);
    assert_int_equal(kvc_ucat('_'), KVC_UCAT_PUNCT);
    assert_int_equal(kvc_ucat(0x4E00), KVC_UCAT_LETTER); /* CJK */
    assert_int_equal(kvc_ucat(0x0663), KVC_UCAT_NUMBER); /* Arabic-Indic three */
    assert_int_equal(kvc_ucat(0x216B), KVC_UCAT_NUMBER); /* Roman numeral twelve (Nl) */
    assert_int_equal(kvc_ucat(0x0301), KVC_UCAT_MARK);   /* combining acute */
    assert_int_equal(kvc_ucat(0x3000), KVC_UCAT_SEPARATOR | KVC_UCAT_SPACE);
    assert_int_equal(kvc_ucat(0x0085), KVC_UCAT_CONTROL | KVC_UCAT_SPACE);
    assert_int_equal(kvc_ucat(0x1F600), KVC_UCAT_SYMBOL); /* emoji */
    assert_int_equal(kvc_ucat(0xFFFD), KVC_UCAT_SYMBOL);
    assert_int_equal(kvc_ucat(0x0378), KVC_UCAT_UNDEFINED); /* unassigned */
    assert_int_equal(kvc_ucat(0x31EF), KVC_UCAT_SYMBOL);    /* Unicode 15.1, as llama.cpp */
    assert_int_equal(kvc_ucat(0x1E030), KVC_UCAT_LETTER);   /* Unicode 15.0 */
    assert_int_equal(kvc_ucat(0xD800), KVC_UCAT_CONTROL);   /* surrogate */
    assert_int_equal(kvc_ucat(0x10FFFF), KVC_UCAT_UNDEFINED);
    assert_int_equal(kvc_ucat(0x110000), KVC_UCAT_UNDEFINED);
    assert_int_equal(kvc_ucat(0x1C),
                     KVC_UCAT_CONTROL); /* not White_Space (Python's isspace says yes) */
    /* decoding: llama.cpp's rules */
    uint32_t cp[16];
    assert_int_equal(kvc_utf8_decode((const uint8_t *)"\xc3\xa9\xff\xc3", 4, cp), 3);
    assert_int_equal(cp[0], 0xE9);
    assert_int_equal(cp[1], 0xFFFD);
    assert_int_equal(cp[2], 0xFFFD);
    assert_int_equal(kvc_utf8_decode((const uint8_t *)"\xf4\x90\x80\x80", 4, cp),
                     4); /* > U+10FFFF */
    assert_int_equal(cp[0], 0xFFFD);
    assert_int_equal(kvc_utf8_decode((const uint8_t *)"\xed\xa0\x80", 3, cp),
                     1); /* surrogate kept */
    assert_int_equal(cp[0], 0xD800);
}

/* ---- long inputs ---------------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

static kvc_tokenizer *load_fixture_vocab(const char *name, kvc_gguf **g) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/tokenizer/vocab-%s.gguf", KVC_SOURCE_DIR, name);
    if (kvc_gguf_open(path, g) != KVC_OK) fail_msg("%s: %s", path, kvc_last_error());
    kvc_tokenizer *t = NULL;
    if (kvc_tokenizer_load(*g, &t) != KVC_OK) fail_msg("%s: %s", path, kvc_last_error());
    return t;
}

/* Tokenizes text and returns the concatenated pieces (show_special = 0). */
static char *round_trip(const kvc_tokenizer *t, const char *text, size_t len, int special,
                        size_t *out_n, int *n_tok) {
    int n = 0;
    assert_int_equal(kvc_tokenizer_tokenize(t, text, len, 0, special, NULL, 0, &n), KVC_OK);
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    assert_int_equal(kvc_tokenizer_tokenize(t, text, len, 0, special, ids, n, &n), KVC_OK);
    size_t cap = len + 16, w = 0;
    char *out = malloc(cap), pb[512];
    for (int i = 0; i < n; i++) {
        assert_true(ids[i] >= 0 && ids[i] < kvc_tokenizer_n_vocab(t));
        int k = kvc_tokenizer_piece(t, ids[i], 0, pb, sizeof pb);
        assert_true(k >= 0);
        if (w + (size_t)k > cap) out = realloc(out, cap = 2 * (w + (size_t)k));
        memcpy(out + w, pb, (size_t)k);
        w += (size_t)k;
    }
    free(ids);
    *out_n = w;
    *n_tok = n;
    return out;
}

static void test_long_inputs(void **s) {
    (void)s;
    static const char *const vocabs[] = {"smollm-mini", "llama3-mini", "qwen2-mini", "spm-mini"};
    static const char *const pieces[] = {"Hello",
                                         " world",
                                         "\xc3\xa9t\xc3\xa9",
                                         " \xe4\xbd\xa0\xe5\xa5\xbd",
                                         "\xf0\x9f\x91\x8b",
                                         "12345",
                                         "\n",
                                         "\t",
                                         "  ",
                                         "<|im_start|>",
                                         "'s",
                                         "don't",
                                         ".",
                                         "\xd9\xa3"};
    const size_t big = 1u << 20;
    char *text = malloc(big + 64), *rnd_bytes = malloc(big), *word = malloc(big);
    size_t tl = 0;
    while (tl < big) {
        const char *p = pieces[rnd() % (sizeof pieces / sizeof pieces[0])];
        memcpy(text + tl, p, strlen(p));
        tl += strlen(p);
    }
    for (size_t i = 0; i < big; i++)
        rnd_bytes[i] = (char)rnd();
    memset(word, 'a', big);
    for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++) {
        kvc_gguf *g;
        kvc_tokenizer *t = load_fixture_vocab(vocabs[v], &g);
        int spm = t->kind == KVC_TOK_SPM, n;
        size_t on;
        /* a 1 MB text of mixed scripts round-trips exactly (SentencePiece adds one leading space)
         */
        char *o = round_trip(t, text, tl, 0, &on, &n);
        assert_int_equal(on, tl + (size_t)spm);
        assert_memory_equal(o + spm, text, tl);
        assert_true(n > 0 && (size_t)n < tl);
        free(o);
        /* a 1 MB word without a space: one BPE word (the heap keeps it O(n log n)) */
        o = round_trip(t, word, big, 0, &on, &n);
        assert_int_equal(on, big + (size_t)spm);
        assert_memory_equal(o + spm, word, big);
        free(o);
        /* 1 MB of random bytes with parse_special: no crash, every id in range */
        o = round_trip(t, rnd_bytes, big, 1, &on, &n);
        assert_true(n > 0);
        free(o);
        fprintf(stderr, "  %s: long inputs ok\n", vocabs[v]);
        kvc_tokenizer_free(t);
        kvc_gguf_close(g);
    }
    free(text);
    free(rnd_bytes);
    free(word);
}

/* Random byte flips in a vocabulary file: whatever the GGUF reader accepts,
 * the tokenizer either rejects with a message or loads and then tokenizes and
 * detokenizes random text without crashing (run under the sanitizers). */
static void test_mutated_vocab(void **s) {
    (void)s;
    static const char *const names[] = {"smollm-mini", "spm-mini"};
    for (size_t v = 0; v < 2; v++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tests/fixtures/tokenizer/vocab-%s.gguf", KVC_SOURCE_DIR,
                 names[v]);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        fseek(f, 0, SEEK_END);
        size_t n = (size_t)ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *orig = malloc(n), *buf = malloc(n);
        assert_int_equal(fread(orig, 1, n, f), n);
        fclose(f);
        int loaded = 0, rejected = 0;
        for (int it = 0; it < 150; it++) {
            memcpy(buf, orig, n);
            int flips = 1 + (int)(rnd() % 8);
            for (int k = 0; k < flips; k++)
                buf[rnd() % n] ^= (uint8_t)(1u << (rnd() % 8));
            kvc_gguf *g = NULL;
            if (kvc_gguf_parse(buf, n, &g) != KVC_OK) continue;
            kvc_tokenizer *t = NULL;
            if (kvc_tokenizer_load(g, &t) != KVC_OK) {
                assert_true(strlen(kvc_last_error()) > 0);
                rejected++;
                kvc_gguf_close(g);
                continue;
            }
            loaded++;
            char text[2048];
            for (size_t i = 0; i < sizeof text; i++)
                text[i] = (char)(rnd() % 4 ? 'a' + rnd() % 26 : rnd());
            int32_t ids[4096];
            int nt = 0;
            assert_int_equal(kvc_tokenizer_tokenize(t, text, sizeof text, 1, 1, ids, 4096, &nt),
                             KVC_OK);
            kvc_detok *d;
            assert_int_equal(kvc_detok_create_tok(t, &d), KVC_OK);
            char out[256];
            for (int i = 0; i < nt && i < 4096; i++) {
                assert_true(ids[i] >= 0 && ids[i] < kvc_tokenizer_n_vocab(t));
                kvc_detok_push(d, ids[i], out, sizeof out);
            }
            kvc_detok_flush(d, out, sizeof out);
            kvc_detok_free(d);
            kvc_tokenizer_free(t);
            kvc_gguf_close(g);
        }
        fprintf(stderr, "  %s: %d mutants loaded, %d rejected by the tokenizer\n", names[v], loaded,
                rejected);
        free(orig);
        free(buf);
    }
}

/* ---- bad metadata ------------------------------------------------------------------------ */

static void expect_reject(gw *w, kvc_status want, const char *needle) {
    uint8_t *buf;
    kvc_gguf *g;
    kvc_tokenizer *t;
    kvc_status st = gw_load(w, &buf, &g, &t);
    if (st != want || !strstr(kvc_last_error(), needle))
        fail_msg("status %d (want %d), message \"%s\" (want it to name \"%s\")", st, want,
                 kvc_last_error(), needle);
    assert_null(t);
    kvc_gguf_close(g);
    free(buf);
}

static void test_bad_metadata(void **s) {
    (void)s;
    const char *toks[] = {"a", "b", "ab"};
    const float sc[] = {0, 0};
    const int32_t ty[] = {1, 1, 1};
    const uint32_t bad_toks[] = {1, 2, 3};
    gw w = {0};

    kv_arr_str(&w, "tokenizer.ggml.tokens", toks, 3);
    expect_reject(&w, KVC_ERR_FORMAT, "tokenizer.ggml.model");

    kv_str(&w, "tokenizer.ggml.model", "bert");
    kv_arr_str(&w, "tokenizer.ggml.tokens", toks, 3);
    expect_reject(&w, KVC_ERR_UNSUPPORTED, "tokenizer.ggml.model: 'bert'");

    kv_u32(&w, "tokenizer.ggml.model", 7);
    expect_reject(&w, KVC_ERR_FORMAT, "tokenizer.ggml.model");

    kv_str(&w, "tokenizer.ggml.model", "gpt2");
    kv_str(&w, "tokenizer.ggml.pre", "martian");
    kv_arr_str(&w, "tokenizer.ggml.tokens", toks, 3);
    expect_reject(&w, KVC_ERR_UNSUPPORTED, "tokenizer.ggml.pre: 'martian'");

    kv_str(&w, "tokenizer.ggml.model", "gpt2");
    kv_arr_str(&w, "tokenizer.ggml.tokens", toks, 3);
    expect_reject(&w, KVC_ERR_FORMAT, "tokenizer.ggml.merges");

    kv_str(&w, "tokenizer.ggml.model", "llama");
    expect_reject(&w, KVC_ERR_FORMAT, "tokenizer.ggml.tokens");

    kv_str(&w, "tokenizer.ggml.model", "llama");
    kv_arr_u32(&w, "tokenizer.ggml.tokens", bad_toks, 3);
    expect_reject(&w, KVC_ERR_FORMAT, "tokenizer.ggml.tokens");

    kv_str(&w, "tokenizer.ggml.model", "llama");
    kv_arr_str(&w, "tokenizer.ggml.tokens", toks, 3);
    kv_arr_f32(&w, "tokenizer.ggml.scores", sc, 2);
    expect_reject(&w, KVC_ERR_FORMAT, "tokenizer.ggml.scores");

    kv_str(&w, "tokenizer.ggml.model", "llama");
    kv_arr_str(&w, "tokenizer.ggml.tokens", toks, 3);
    kv_arr_f32(&w, "tokenizer.ggml.token_type", sc, 2);
    expect_reject(&w, KVC_ERR_FORMAT, "tokenizer.ggml.token_type");

    kv_str(&w, "tokenizer.ggml.model", "llama");
    kv_arr_str(&w, "tokenizer.ggml.tokens", toks, 0);
    expect_reject(&w, KVC_ERR_FORMAT, "tokenizer.ggml.tokens");

    kv_str(&w, "tokenizer.ggml.model", "gpt2");
    kv_arr_str(&w, "tokenizer.ggml.tokens", toks, 3);
    kv_arr_u32(&w, "tokenizer.ggml.merges", bad_toks, 3);
    expect_reject(&w, KVC_ERR_FORMAT, "tokenizer.ggml.merges");

    kv_str(&w, "tokenizer.ggml.model", "llama");
    kv_arr_str(&w, "tokenizer.ggml.tokens", toks, 3);
    kv_str(&w, "tokenizer.ggml.bos_token_id", "one");
    expect_reject(&w, KVC_ERR_FORMAT, "tokenizer.ggml.bos_token_id");

    /* accepted oddities: out-of-range special ids are ignored, empty tokens renamed,
     * merges without a separator skipped, no token types (all normal) */
    const char *odd[] = {"a", "", "b", "ab"};
    const char *merges[] = {"a b", "ab", "x y"};
    kv_str(&w, "tokenizer.ggml.model", "gpt2");
    kv_arr_str(&w, "tokenizer.ggml.tokens", odd, 4);
    kv_arr_str(&w, "tokenizer.ggml.merges", merges, 3);
    kv_u32(&w, "tokenizer.ggml.bos_token_id", 99);
    kv_arr_i32(&w, "tokenizer.ggml.token_type", ty, 3 > 4 ? 3 : 3);
    uint8_t *buf;
    kvc_gguf *g;
    kvc_tokenizer *t;
    /* token_type shorter than tokens: rejected */
    assert_int_equal(gw_load(&w, &buf, &g, &t), KVC_ERR_FORMAT);
    kvc_gguf_close(g);
    free(buf);
    kv_str(&w, "tokenizer.ggml.model", "gpt2");
    kv_arr_str(&w, "tokenizer.ggml.tokens", odd, 4);
    kv_arr_str(&w, "tokenizer.ggml.merges", merges, 3);
    kv_u32(&w, "tokenizer.ggml.bos_token_id", 99);
    assert_int_equal(gw_load(&w, &buf, &g, &t), KVC_OK);
    assert_int_equal(kvc_tokenizer_bos(t), -1); /* default 11 out of range, 99 ignored */
    EXPECT(t, "abab", 1, 1, 3, 3);              /* pre "default", no BOS for gpt2 by default */
    EXPECT(t, "c", 0, 0);                       /* no token for 'c': nothing (as llama.cpp) */
    char pb[32];
    assert_int_equal(kvc_tokenizer_piece(t, 1, 1, pb, sizeof pb), 9);
    assert_memory_equal(pb, "[EMPTY_1]", 9);
    kvc_tokenizer_free(t);
    kvc_gguf_close(g);
    free(buf);
}

/* ---- chat formats --------------------------------------------------------------------------- */

static void expect_chat(const char *tmpl, const char *kind, int add, const char *want) {
    const kvc_chat_msg msgs[] = {
        {"system", "Be brief."}, {"user", " Hi "}, {"assistant", "Hello."}, {"user", "Bye"}};
    char *got = NULL;
    assert_string_equal(kvc_chat_template_kind(tmpl), kind);
    assert_int_equal(kvc_chat_format(tmpl, msgs, 4, add, &got), KVC_OK);
    assert_string_equal(got, want);
    free(got);
}

static void test_chat_formats(void **s) {
    (void)s;
    expect_chat(NULL, "chatml", 1,
                "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi <|im_end|>\n"
                "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_"
                "start|>assistant\n");
    expect_chat("{{ '<|start_header_id|>' + role + '<|end_header_id|>' }}", "llama3", 1,
                "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n");
    expect_chat("{% if messages[0]['role'] == 'system' %}<<SYS>>{% endif %}[INST]", "llama2-sys", 1,
                "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n Hi  [/INST]Hello.</s>[INST] Bye [/INST]");
    expect_chat("[INST] {{ content.strip() }} <<SYS>>", "llama2-sys-strip", 0,
                "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]Hello.</s>[INST] Bye [/INST]");
    expect_chat("[INST]", "llama2", 0,
                "[INST] Be brief.\n Hi  [/INST]Hello.</s>[INST] Bye [/INST]");
    expect_chat(
        "[SYSTEM_PROMPT] [INST]", "mistral-v7", 1,
        "[SYSTEM_PROMPT] Be brief.[/SYSTEM_PROMPT][INST]  Hi [/INST] Hello.</s>[INST] Bye[/INST]");
    expect_chat("{{ something unknown }}", "chatml", 0,
                "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi <|im_end|>\n"
                "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n");
    /* a ChatML template's literal default system message is added when none is given
     * (escaped \n in the template text works too) */
    const char *tmpl = "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are "
                       "kind.<|im_end|>\\n' }}"
                       "{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] "
                       "+ '<|im_end|>'}}";
    const kvc_chat_msg one[] = {{"user", "Hi"}};
    char *got = NULL;
    assert_int_equal(kvc_chat_format(tmpl, one, 1, 1, &got), KVC_OK);
    assert_string_equal(
        got, "<|im_start|>system\nYou are kind.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
             "<|im_start|>assistant\n");
    free(got);
    assert_int_equal(kvc_chat_format(tmpl, NULL, 0, 1, &got), KVC_OK);
    assert_string_equal(got, "<|im_start|>assistant\n");
    free(got);
    const kvc_chat_msg bad[] = {{NULL, "x"}};
    assert_int_equal(kvc_chat_format(tmpl, bad, 1, 1, &got), KVC_ERR_ARG);
    assert_null(got);
}

/* ---- public API argument checks ----------------------------------------------------------------
 */

static void test_api_args(void **s) {
    (void)s;
    int n = 5;
    int32_t tok[4];
    assert_int_equal(kvc_tokenize(NULL, "x", 1, 0, 0, tok, 4, &n), KVC_ERR_ARG);
    assert_int_equal(n, 0);
    assert_int_equal(kvc_token_piece(NULL, 0, 0, (char *)tok, 4), -1);
    assert_int_equal(kvc_token_bos(NULL), -1);
    assert_int_equal(kvc_token_is_end(NULL, 0), 0);
    kvc_detok *d = (kvc_detok *)1;
    assert_int_equal(kvc_detok_create(NULL, &d), KVC_ERR_ARG);
    assert_null(d);
    char *out = (char *)1;
    assert_int_equal(kvc_chat_apply(NULL, NULL, 0, 1, &out), KVC_ERR_ARG);
    assert_null(out);

    kvc_gguf *g;
    kvc_tokenizer *t = load_fixture_vocab("smollm-mini", &g);
    assert_int_equal(kvc_tokenizer_tokenize(t, NULL, 3, 0, 0, tok, 4, &n), KVC_ERR_ARG);
    assert_int_equal(kvc_tokenizer_tokenize(t, "x", 1, 0, 0, NULL, 4, &n), KVC_ERR_ARG);
    assert_int_equal(kvc_tokenizer_tokenize(t, "x", 1, 0, 0, tok, -1, &n), KVC_ERR_ARG);
    /* cap smaller than the count: the first cap tokens, and the full count */
    const char *text = "one two three four five six";
    int32_t all[16];
    int n_all;
    assert_int_equal(kvc_tokenizer_tokenize(t, text, strlen(text), 0, 0, all, 16, &n_all), KVC_OK);
    assert_int_equal(n_all, 6);
    tok[3] = -7;
    assert_int_equal(kvc_tokenizer_tokenize(t, text, strlen(text), 0, 0, tok, 3, &n), KVC_OK);
    assert_int_equal(n, 6);
    assert_memory_equal(tok, all, 3 * sizeof *tok);
    assert_int_equal(tok[3], -7);
    assert_int_equal(kvc_tokenizer_tokenize(t, "", 0, 0, 0, tok, 4, &n), KVC_OK);
    assert_int_equal(n, 0);
    kvc_tokenizer_free(t);
    kvc_gguf_close(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spm_by_hand),           cmocka_unit_test(test_detok_holds_back),
        cmocka_unit_test(test_pretokenizers_by_hand), cmocka_unit_test(test_unicode_table),
        cmocka_unit_test(test_long_inputs),           cmocka_unit_test(test_bad_metadata),
        cmocka_unit_test(test_chat_formats),          cmocka_unit_test(test_api_args),
        cmocka_unit_test(test_mutated_vocab),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
