/* Tokenizer tests.
 *
 * Reference fixtures (tests/fixtures/tokenizer/NAME.txt, made by
 * scripts/fixtures/make_tokenizer_fixtures.py with llama.cpp through
 * llama-cpp-python): for each vocabulary (the default model's, and cut
 * GGUF vocabularies of SmolLM2, GPT-2, Llama-3, Qwen2, Llama-2 SentencePiece,
 * plus GPT-2 under the "default" pre-tokenizer) and each text of the corpus
 * (English, code, digits, white-space runs, emoji, CJK, accents, special-token
 * look-alikes, invalid UTF-8, long words and a long text), with and without
 * BOS / parse_special: the token ids must be equal, the pieces of the
 * reference's tokens must concatenate to the reference's text (with and
 * without special tokens shown), sampled token pieces must be equal, the set
 * of end-of-generation tokens must be equal, and the chat template rendered
 * by jinja2 must match kvc_chat_apply. Comparisons are exact.
 *
 * Plus: the incremental detokenizer holds back split characters; multi-MB
 * inputs (random bytes, one 1 MB word) neither crash nor lose text; a tiny
 * hand-made SentencePiece vocabulary built in memory gives the tokens worked
 * out by hand; bad tokenizer metadata is rejected with the key in the
 * message; chat formats of Llama-3 / Llama-2 / Mistral written out by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gguf/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"

/* ---- helpers ------------------------------------------------------------------ */

static kvc_model *g_model; /* set while a fixture runs through the public API */

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)sz + 1);
    if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[sz] = 0;
        if (n) *n = (size_t)sz;
    }
    return b;
}

static int file_exists(const char *p) {
    FILE *f = fopen(p, "rb");
    if (f) fclose(f);
    return f != NULL;
}

/* Hex ("-" = empty, "=" = same as `same`) to bytes; returns a malloc'd buffer. */
static char *unhex(const char *h, size_t hlen, size_t *n, const char *same, size_t same_n) {
    if (hlen == 1 && h[0] == '=') {
        char *b = malloc(same_n + 1);
        memcpy(b, same, same_n);
        b[same_n] = 0;
        *n = same_n;
        return b;
    }
    if (hlen == 1 && h[0] == '-') hlen = 0;
    char *b = malloc(hlen / 2 + 1);
    for (size_t i = 0; i + 1 < hlen; i += 2) {
        unsigned v;
        sscanf(h + i, "%2x", &v);
        b[i / 2] = (char)v;
    }
    *n = hlen / 2;
    b[*n] = 0;
    return b;
}

/* Next whitespace-separated field of a line. */
static const char *field(const char **p, size_t *len) {
    const char *s = *p;
    while (*s == ' ')
        s++;
    const char *e = s;
    while (*e && *e != ' ' && *e != '\n')
        e++;
    *len = (size_t)(e - s);
    *p = e;
    return s;
}

static kvc_tokenizer *load_tok(const char *path, kvc_gguf **g) {
    kvc_status st = kvc_gguf_open(path, g);
    if (st != KVC_OK) fail_msg("%s: %s", path, kvc_last_error());
    kvc_tokenizer *t = NULL;
    st = kvc_tokenizer_load(*g, &t);
    if (st != KVC_OK) fail_msg("%s: tokenizer: %s", path, kvc_last_error());
    return t;
}

static void print_ids(const char *what, const int32_t *v, int n) {
    fprintf(stderr, "    %s (%d):", what, n);
    for (int i = 0; i < n && i < 40; i++)
        fprintf(stderr, " %d", v[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

/* ---- reference fixtures --------------------------------------------------------- */

/* The fixture runs either on a tokenizer (internal API) or, for the default
 * model, through the public API on a loaded kvc_model. */

static kvc_status tk_tokenize(const kvc_tokenizer *t, const char *s, size_t n, int bos, int sp,
                              int32_t *v, int cap, int *n_out) {
    if (g_model) return kvc_tokenize(g_model, s, n, bos, sp, v, cap, n_out);
    return kvc_tokenizer_tokenize(t, s, n, bos, sp, v, cap, n_out);
}
static int tk_piece(const kvc_tokenizer *t, int32_t id, int sp, char *b, int cap) {
    return g_model ? kvc_token_piece(g_model, id, sp, b, cap)
                   : kvc_tokenizer_piece(t, id, sp, b, cap);
}
static kvc_status tk_chat(const kvc_tokenizer *t, const kvc_chat_msg *m, int n, int add,
                          char **out) {
    return g_model ? kvc_chat_apply(g_model, m, n, add, out)
                   : kvc_tokenizer_chat_apply(t, m, n, add, out);
}

typedef struct counts {
    int cases, id_fail, text_fail, pieces, piece_fail, chats, chat_fail, detok_checked, detok_fail;
} counts;

static int valid_utf8(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t b = (uint8_t)s[i];
        int len = b < 0x80                 ? 1
                  : b >= 0xC2 && b <= 0xDF ? 2
                  : b >= 0xE0 && b <= 0xEF ? 3
                  : b >= 0xF0 && b <= 0xF4 ? 4
                                           : 0;
        if (!len || i + (size_t)len > n) return 0;
        uint8_t c = len > 1 ? (uint8_t)s[i + 1] : 0x80;
        if ((b == 0xE0 && c < 0xA0) || (b == 0xED && c > 0x9F) || (b == 0xF0 && c < 0x90) ||
            (b == 0xF4 && c > 0x8F))
            return 0;
        for (int k = 1; k < len; k++)
            if (((uint8_t)s[i + k] & 0xC0) != 0x80) return 0;
        i += (size_t)len;
    }
    return 1;
}

/* Streams ids through the detokenizer with a small output buffer; pushing an
 * out-of-range id adds nothing and drains what did not fit. */
static void append(char **out, size_t *len, size_t *cap, const char *b, int k) {
    if (*len + (size_t)k + 1 > *cap) *out = realloc(*out, *cap = 2 * (*len + (size_t)k + 1));
    memcpy(*out + *len, b, (size_t)k);
    *len += (size_t)k;
}

static char *detok_all(const kvc_tokenizer *t, const int32_t *ids, int n, size_t *out_n) {
    kvc_detok *d;
    assert_int_equal(g_model ? kvc_detok_create(g_model, &d) : kvc_detok_create_tok(t, &d), KVC_OK);
    size_t cap = 1024, len = 0;
    char *out = malloc(cap), buf[48];
    int k;
    for (int i = 0; i < n; i++) {
        k = kvc_detok_push(d, ids[i], buf, sizeof buf);
        assert_true(k >= 0 && k < (int)sizeof buf && buf[k] == 0);
        append(&out, &len, &cap, buf, k);
        while ((k = kvc_detok_push(d, -1, buf, sizeof buf)) > 0)
            append(&out, &len, &cap, buf, k);
    }
    while ((k = kvc_detok_flush(d, buf, sizeof buf)) > 0)
        append(&out, &len, &cap, buf, k);
    kvc_detok_free(d);
    out[len] = 0;
    *out_n = len;
    return out;
}

static void run_fixture(const char *name, int use_api) {
    g_model = NULL;
    char path[1024];
    if (name[0] == '/')
        snprintf(path, sizeof path, "%s", name);
    else
        snprintf(path, sizeof path, "%s/tests/fixtures/tokenizer/%s.txt", KVC_SOURCE_DIR, name);
    size_t size;
    char *fx = read_file(path, &size);
    if (!fx) fail_msg("cannot read fixture %s", path);

    kvc_gguf *g = NULL;
    kvc_tokenizer *t = NULL;
    counts c = {0};
    char *case_text = NULL;
    size_t case_n = 0;
    int add_bos = 0, special = 0;
    int32_t *ids = NULL, *ref = NULL;
    int n_ref = 0;
    int chat_add = 0, chat_n = 0;
    kvc_chat_msg msgs[16];
    char *msg_buf[32];
    int n_msg_buf = 0;
    char *chat_text = NULL;
    size_t chat_len = 0;

    for (char *line = fx; line && *line;
         line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        const char *p = line;
        size_t kl;
        const char *kw = field(&p, &kl);
        if (kl == 0 || kw[0] == '#') continue;
#define KW(s) (kl == strlen(s) && memcmp(kw, s, kl) == 0)
        if (KW("vocab")) {
            size_t vl;
            const char *v = field(&p, &vl);
            char vpath[1024];
            if (vl == 6 && memcmp(v, "@model", 6) == 0) {
                snprintf(vpath, sizeof vpath, "%s", KVC_MODEL_PATH);
                if (!file_exists(vpath)) {
                    fprintf(stderr,
                            "  SKIP %s: default model not found at %s (run scripts/fetch-model)\n",
                            name, vpath);
                    free(fx);
                    skip();
                }
            } else if (v[0] == '/') {
                snprintf(vpath, sizeof vpath, "%.*s", (int)vl, v);
            } else {
                snprintf(vpath, sizeof vpath, "%s/%.*s", KVC_SOURCE_DIR, (int)vl, v);
            }
            if (use_api) {
                if (kvc_model_load(vpath, &g_model) != KVC_OK)
                    fail_msg("%s: %s", vpath, kvc_last_error());
                t = (kvc_tokenizer *)kvc_model_tokenizer(g_model);
            } else {
                t = load_tok(vpath, &g);
            }
        } else if (KW("special")) {
            int nv, bos, eos;
            assert_int_equal(sscanf(p, "%d %d %d", &nv, &bos, &eos), 3);
            assert_int_equal(kvc_tokenizer_n_vocab(t), nv);
            assert_int_equal(kvc_tokenizer_bos(t), bos);
            assert_int_equal(kvc_tokenizer_eos(t), eos);
            if (g_model) {
                assert_int_equal(kvc_token_bos(g_model), bos);
                assert_int_equal(kvc_token_eos(g_model), eos);
            }
        } else if (KW("eog")) {
            int nv = kvc_tokenizer_n_vocab(t);
            char *eog = calloc((size_t)nv, 1);
            for (;;) {
                size_t l;
                const char *f = field(&p, &l);
                if (!l) break;
                eog[atoi(f)] = 1;
            }
            for (int i = 0; i < nv; i++)
                if ((g_model ? kvc_token_is_end(g_model, i) : kvc_tokenizer_is_end(t, i)) != eog[i])
                    fail_msg("%s: token %d: is_end %d, reference %d", name, i,
                             kvc_tokenizer_is_end(t, i), eog[i]);
            free(eog);
        } else if (KW("case")) {
            size_t l;
            add_bos = atoi(field(&p, &l));
            special = atoi(field(&p, &l));
            const char *h = field(&p, &l);
            free(case_text);
            case_text = unhex(h, l, &case_n, NULL, 0);
        } else if (KW("ids")) {
            free(ref);
            ref = malloc((case_n + 8) * 4 * sizeof *ref);
            n_ref = 0;
            for (;;) {
                size_t l;
                const char *f = field(&p, &l);
                if (!l) break;
                ref[n_ref++] = atoi(f);
            }
            int n = 0;
            kvc_status st = tk_tokenize(t, case_text, case_n, add_bos, special, NULL, 0, &n);
            assert_int_equal(st, KVC_OK);
            free(ids);
            ids = malloc(((size_t)n + 1) * sizeof *ids);
            int n2 = 0;
            assert_int_equal(tk_tokenize(t, case_text, case_n, add_bos, special, ids, n, &n2),
                             KVC_OK);
            assert_int_equal(n, n2);
            c.cases++;
            if (n != n_ref || memcmp(ids, ref, (size_t)n * sizeof *ids) != 0) {
                c.id_fail++;
                fprintf(stderr, "  MISMATCH %s: case add_bos=%d special=%d text[%zu]=\"%.60s\"\n",
                        name, add_bos, special, case_n, case_text);
                int k = 0;
                while (k < n && k < n_ref && ids[k] == ref[k])
                    k++;
                fprintf(stderr, "    first difference at token %d\n", k);
                print_ids("kvcomp", ids + (k > 5 ? k - 5 : 0), n - (k > 5 ? k - 5 : 0));
                print_ids("llama.cpp", ref + (k > 5 ? k - 5 : 0), n_ref - (k > 5 ? k - 5 : 0));
            }
        } else if (KW("text")) {
            for (int sp = 0; sp < 2; sp++) {
                size_t l, en;
                const char *h = field(&p, &l);
                char *expect = unhex(h, l, &en, case_text, case_n);
                size_t cap = en + 64, len = 0;
                char *got = malloc(cap), pb[512];
                for (int i = 0; i < n_ref; i++) {
                    int k = tk_piece(t, ref[i], sp, pb, sizeof pb);
                    assert_true(k >= 0);
                    if (len + (size_t)k > cap) got = realloc(got, cap = 2 * (len + (size_t)k));
                    memcpy(got + len, pb, (size_t)k);
                    len += (size_t)k;
                }
                if (len != en || memcmp(got, expect, en) != 0) {
                    c.text_fail++;
                    fprintf(stderr, "  TEXT MISMATCH %s (show_special=%d): \"%.60s\"\n", name, sp,
                            case_text);
                }
                /* round trip through the incremental detokenizer (text without specials) */
                if (sp == 0 && valid_utf8(expect, en)) {
                    size_t dn;
                    char *d = detok_all(t, ref, n_ref, &dn);
                    c.detok_checked++;
                    if (dn != en || memcmp(d, expect, en) != 0) {
                        c.detok_fail++;
                        fprintf(stderr, "  DETOK MISMATCH %s: \"%.60s\"\n", name, case_text);
                    }
                    free(d);
                }
                free(got);
                free(expect);
            }
        } else if (KW("piece")) {
            size_t l;
            int id = atoi(field(&p, &l));
            for (int sp = 0; sp < 2; sp++) {
                size_t en;
                const char *h = field(&p, &l);
                char *expect = unhex(h, l, &en, NULL, 0), pb[512];
                int k = tk_piece(t, id, sp, pb, sizeof pb);
                c.pieces++;
                if (k != (int)en || memcmp(pb, expect, en) != 0) {
                    c.piece_fail++;
                    fprintf(
                        stderr,
                        "  PIECE MISMATCH %s: token %d show_special=%d: %d bytes, reference %zu\n",
                        name, id, sp, k, en);
                }
                free(expect);
            }
        } else if (KW("chat")) {
            size_t l;
            chat_add = atoi(field(&p, &l));
            chat_n = atoi(field(&p, &l));
            for (int i = 0; i < n_msg_buf; i++)
                free(msg_buf[i]);
            n_msg_buf = 0;
            for (int i = 0; i < chat_n && i < 16; i++) {
                const char *r = field(&p, &l);
                char *role = strndup(r, l);
                const char *h = field(&p, &l);
                size_t cn;
                char *content = unhex(h, l, &cn, NULL, 0);
                msg_buf[n_msg_buf++] = role;
                msg_buf[n_msg_buf++] = content;
                msgs[i] = (kvc_chat_msg){role, content};
            }
        } else if (KW("expect")) {
            size_t l, en;
            const char *h = field(&p, &l);
            char *expect = unhex(h, l, &en, NULL, 0), *got = NULL;
            assert_int_equal(tk_chat(t, msgs, chat_n, chat_add, &got), KVC_OK);
            c.chats++;
            if (strlen(got) != en || memcmp(got, expect, en) != 0) {
                c.chat_fail++;
                fprintf(stderr, "  CHAT MISMATCH %s:\n--- got ---\n%s\n--- expected ---\n%s\n",
                        name, got, expect);
            }
            free(chat_text);
            chat_text = got;
            chat_len = en;
            free(expect);
        } else if (KW("chatids")) { /* the rendered chat, tokenized with BOS and specials */
            n_ref = 0;
            free(ref);
            ref = malloc((chat_len + 8) * sizeof *ref);
            for (;;) {
                size_t l;
                const char *f = field(&p, &l);
                if (!l) break;
                ref[n_ref++] = atoi(f);
            }
            int n = 0;
            free(ids);
            ids = malloc((chat_len + 8) * sizeof *ids);
            assert_int_equal(
                tk_tokenize(t, chat_text, strlen(chat_text), 1, 1, ids, (int)chat_len + 8, &n),
                KVC_OK);
            if (n != n_ref || memcmp(ids, ref, (size_t)n * sizeof *ids) != 0) {
                c.chat_fail++;
                fprintf(stderr, "  CHAT TOKENS MISMATCH %s\n", name);
            }
        }
#undef KW
    }
    fprintf(stderr,
            "  %s: %d cases (%d id mismatches, %d text mismatches), %d pieces (%d mismatches), "
            "%d detok round trips (%d mismatches), %d chats (%d mismatches)\n",
            name, c.cases, c.id_fail, c.text_fail, c.pieces, c.piece_fail, c.detok_checked,
            c.detok_fail, c.chats, c.chat_fail);
    for (int i = 0; i < n_msg_buf; i++)
        free(msg_buf[i]);
    free(chat_text);
    free(case_text);
    free(ids);
    free(ref);
    free(fx);
    if (g_model) {
        kvc_model_free(g_model); /* frees its tokenizer */
        g_model = NULL;
    } else {
        kvc_tokenizer_free(t);
        kvc_gguf_close(g);
    }
    assert_true(c.cases > 0);
    assert_int_equal(c.id_fail, 0);
    assert_int_equal(c.text_fail, 0);
    assert_int_equal(c.piece_fail, 0);
    assert_int_equal(c.detok_fail, 0);
    assert_int_equal(c.chat_fail, 0);
}

static void test_ref_smollm2(void **s) {
    (void)s;
    run_fixture("smollm2", 0);
}
/* The same fixture through the public API of a loaded model (kvc_model_load). */
static void test_ref_smollm2_public_api(void **s) {
    (void)s;
    run_fixture("smollm2", 1);
}
static void test_ref_smollm_mini(void **s) {
    (void)s;
    run_fixture("smollm-mini", 0);
}
static void test_ref_gpt2_mini(void **s) {
    (void)s;
    run_fixture("gpt2-mini", 0);
}
static void test_ref_default_mini(void **s) {
    (void)s;
    run_fixture("default-mini", 0);
}
static void test_ref_llama3_mini(void **s) {
    (void)s;
    run_fixture("llama3-mini", 0);
}
static void test_ref_qwen2_mini(void **s) {
    (void)s;
    run_fixture("qwen2-mini", 0);
}
static void test_ref_spm_mini(void **s) {
    (void)s;
    run_fixture("spm-mini", 0);
}

/* Fixtures made with --full-dir (uncut vocabularies, not committed), when
 * KVC_TOKENIZER_EXTRA_FIXTURES names their directory. */
static void test_extra_fixtures(void **s) {
    (void)s;
    const char *dir = getenv("KVC_TOKENIZER_EXTRA_FIXTURES");
    if (!dir || !*dir) skip();
    static const char *const names[] = {"gpt-2", "llama-bpe", "qwen2", "llama-spm"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s.txt", dir, names[i]);
        if (file_exists(p)) run_fixture(p, 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_smollm2),      cmocka_unit_test(test_ref_smollm2_public_api),
        cmocka_unit_test(test_ref_smollm_mini),  cmocka_unit_test(test_ref_gpt2_mini),
        cmocka_unit_test(test_ref_default_mini), cmocka_unit_test(test_ref_llama3_mini),
        cmocka_unit_test(test_ref_qwen2_mini),   cmocka_unit_test(test_ref_spm_mini),
        cmocka_unit_test(test_extra_fixtures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
