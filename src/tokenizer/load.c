/* Builds the tokenizer from GGUF metadata (tokenizer.ggml.*; GGUF spec
 * "Tokenizer" section), with llama.cpp's llama_vocab::load as the reference for
 * defaults and the handling of odd files:
 *   model "llama" -> SentencePiece BPE (scores, <0xXX> byte tokens, add_space_prefix)
 *   model "gpt2"  -> byte-level BPE (merges; pre-tokenizer chosen by tokenizer.ggml.pre)
 * Token types give attributes (normal, unknown, control, user-defined, unused,
 * byte); end-of-turn tokens are found by id keys and by their text; special
 * tokens (control, user-defined, unknown) are listed longest first for the
 * partition step; the piece (bytes) of every token is precomputed.
 * Every string is interned (tokens first, then merge parts that are not
 * tokens) so that BPE works on integer ids. Metadata is untrusted: types and
 * counts are checked and errors name the key. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "tokenizer/tokenizer_impl.h"

/* ---- interned strings ------------------------------------------------------ */

typedef struct builder {
    kvc_tokenizer *t;
    size_t arena_len, arena_cap;
    size_t cap_strings;
} builder;

/* Appends a string (not looked up first); returns its id in *id. */
static kvc_status add_string(builder *b, const char *s, size_t len, int32_t *id) {
    kvc_tokenizer *t = b->t;
    if (len > UINT32_MAX / 2 || b->arena_len + len + 1 > UINT32_MAX)
        return kvc_fail(KVC_ERR_RANGE, "tokenizer: strings exceed 4 GiB (string of %zu bytes)",
                        len);
    if (b->arena_len + len + 1 > b->arena_cap) {
        size_t cap = b->arena_cap ? b->arena_cap : 4096;
        while (cap < b->arena_len + len + 1)
            cap *= 2;
        char *a = realloc(t->arena, cap);
        if (!a) return kvc_fail(KVC_ERR_NOMEM, "tokenizer: string arena of %zu bytes", cap);
        t->arena = a;
        b->arena_cap = cap;
    }
    if ((size_t)t->n_strings == b->cap_strings) {
        size_t cap = b->cap_strings ? 2 * b->cap_strings : 1024;
        uint32_t *o = realloc(t->str_off, cap * sizeof *o);
        if (!o) return kvc_fail(KVC_ERR_NOMEM, "tokenizer: %zu strings", cap);
        t->str_off = o;
        uint32_t *l = realloc(t->str_len, cap * sizeof *l);
        if (!l) return kvc_fail(KVC_ERR_NOMEM, "tokenizer: %zu strings", cap);
        t->str_len = l;
        b->cap_strings = cap;
    }
    if (len) memcpy(t->arena + b->arena_len, s, len);
    t->arena[b->arena_len + len] = 0;
    t->str_off[t->n_strings] = (uint32_t)b->arena_len;
    t->str_len[t->n_strings] = (uint32_t)len;
    b->arena_len += len + 1;
    *id = t->n_strings++;
    if ((size_t)t->n_strings * 2 > (size_t)t->smap_mask + 1)
        return kvc_tok_smap_rebuild(t, (size_t)t->n_strings);
    kvc_tok_smap_put(t, (uint32_t)*id);
    return KVC_OK;
}

/* Id of s, interning it if new. The string may point into the arena. */
static kvc_status intern(builder *b, const char *s, size_t len, int32_t *id) {
    *id = kvc_tok_lookup(b->t, s, len);
    if (*id >= 0) return KVC_OK;
    return add_string(b, s, len, id);
}

/* ---- metadata access ----------------------------------------------------------- */

static const kvc_gguf_value *find_val(const kvc_gguf *g, const char *key) {
    const kvc_gguf_kv *kv = kvc_gguf_find(g, key);
    return kv ? &kv->value : NULL;
}

static int is_int_type(kvc_gguf_vtype ty) {
    return ty == KVC_GGUF_U8 || ty == KVC_GGUF_I8 || ty == KVC_GGUF_U16 || ty == KVC_GGUF_I16 ||
           ty == KVC_GGUF_U32 || ty == KVC_GGUF_I32 || ty == KVC_GGUF_U64 || ty == KVC_GGUF_I64;
}
static int is_signed_type(kvc_gguf_vtype ty) {
    return ty == KVC_GGUF_I8 || ty == KVC_GGUF_I16 || ty == KVC_GGUF_I32 || ty == KVC_GGUF_I64;
}

/* Optional integer key: 1 if present (value in *out), 0 if absent. */
static kvc_status get_int(const kvc_gguf *g, const char *key, int64_t *out, int *present) {
    const kvc_gguf_value *v = find_val(g, key);
    *present = 0;
    if (!v) return KVC_OK;
    if (!is_int_type(v->type))
        return kvc_fail(KVC_ERR_FORMAT, "%s: expected an integer, found %s", key,
                        kvc_gguf_vtype_name(v->type));
    if (is_signed_type(v->type))
        *out = v->i;
    else
        *out = v->u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v->u;
    *present = 1;
    return KVC_OK;
}

static kvc_status get_bool(const kvc_gguf *g, const char *key, int *out) {
    const kvc_gguf_value *v = find_val(g, key);
    if (!v) return KVC_OK;
    if (v->type == KVC_GGUF_BOOL)
        *out = v->u != 0;
    else if (is_int_type(v->type))
        *out = is_signed_type(v->type) ? v->i != 0 : v->u != 0;
    else
        return kvc_fail(KVC_ERR_FORMAT, "%s: expected a bool, found %s", key,
                        kvc_gguf_vtype_name(v->type));
    return KVC_OK;
}

static kvc_status get_str(const kvc_gguf *g, const char *key, const kvc_gguf_str **out) {
    const kvc_gguf_value *v = find_val(g, key);
    *out = NULL;
    if (!v) return KVC_OK;
    if (v->type != KVC_GGUF_STRING)
        return kvc_fail(KVC_ERR_FORMAT, "%s: expected a string, found %s", key,
                        kvc_gguf_vtype_name(v->type));
    *out = &v->s;
    return KVC_OK;
}

static int str_eq(const kvc_gguf_str *s, const char *lit) {
    size_t n = strlen(lit);
    return s && s->len == n && memcmp(s->ptr, lit, n) == 0;
}

static kvc_status get_arr(const kvc_gguf *g, const char *key, const kvc_gguf_value **out) {
    const kvc_gguf_value *v = find_val(g, key);
    *out = NULL;
    if (!v) return KVC_OK;
    if (v->type != KVC_GGUF_ARRAY)
        return kvc_fail(KVC_ERR_FORMAT, "%s: expected an array, found %s", key,
                        kvc_gguf_vtype_name(v->type));
    if (v->arr.n && !v->arr.items)
        return kvc_fail(KVC_ERR_FORMAT, "%s: array of %llu items has no data", key,
                        (unsigned long long)v->arr.n);
    *out = v;
    return KVC_OK;
}

/* ---- pre-tokenizer names ------------------------------------------------------- */

static int name_in(const kvc_gguf_str *s, const char *const *names) {
    for (; *names; names++)
        if (str_eq(s, *names)) return 1;
    return 0;
}

static kvc_status choose_pretok(kvc_tokenizer *t, const kvc_gguf_str *pre) {
    static const char *const llama3[] = {"llama3",  "llama-v3", "llama-bpe", "falcon3", "falcon-h1",
                                         "pixtral", "midm-2.0", "lfm2",      NULL};
    static const char *const llama3_plain[] = {"dbrx", "smaug-bpe", NULL};
    static const char *const gpt2[] = {"gpt-2",    "phi-2",       "jina-es",    "jina-de",
                                       "gigachat", "jina-v2-es",  "jina-v2-de", "a.x-4.0",
                                       "mellum",   "modern-bert", "mpt",        "olmo",
                                       "jais",     "trillion",    "exaone4",    NULL};
    static const char *const smollm[] = {"smollm",     "starcoder", "refact",
                                         "command-r",  "codeshell", "exaone",
                                         "minerva-7b", "mellum2",   NULL};
    static const char *const qwen2[] = {"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2", NULL};
    if (!pre || str_eq(pre, "default")) {
        t->pre = KVC_PRETOK_DEFAULT;
    } else if (name_in(pre, llama3)) {
        t->pre = KVC_PRETOK_LLAMA3;
        t->ignore_merges = 1;
        t->add_bos = 1;
    } else if (name_in(pre, llama3_plain)) {
        t->pre = KVC_PRETOK_LLAMA3;
    } else if (name_in(pre, gpt2)) {
        t->pre = KVC_PRETOK_GPT2;
    } else if (name_in(pre, smollm)) {
        t->pre = KVC_PRETOK_SMOLLM;
    } else if (name_in(pre, qwen2)) {
        t->pre = KVC_PRETOK_QWEN2;
    } else {
        int n = pre->len > 64 ? 64 : (int)pre->len;
        return kvc_fail(
            KVC_ERR_UNSUPPORTED,
            "tokenizer.ggml.pre: '%.*s' is not supported (supported: default, gpt-2, smollm, "
            "llama-bpe/llama3, qwen2 and their aliases)",
            n, pre->ptr);
    }
    return KVC_OK;
}

/* ---- byte-level spelling ------------------------------------------------------- */

static int printable_byte(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the other
 * 68 map to U+0100.. in byte order. cp_to_byte is the inverse (-1: none). */
static void byte_chars(kvc_tokenizer *t, int16_t cp_to_byte[324]) {
    unsigned k = 0;
    for (int i = 0; i < 324; i++)
        cp_to_byte[i] = -1;
    for (unsigned b = 0; b < 256; b++) {
        uint32_t cp = printable_byte(b) ? b : 256 + k++;
        uint8_t u[4];
        int n = kvc_utf8_encode(cp, u);
        t->bchar_len[b] = (uint8_t)n;
        t->bchar[b][0] = (char)u[0];
        t->bchar[b][1] = n > 1 ? (char)u[1] : 0;
        cp_to_byte[cp] = (int16_t)b;
    }
}

/* ---- pieces ------------------------------------------------------------------- */

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The byte of a <0xXX> token (strtol of the two characters after "<0x", as
 * llama.cpp reads it: a bad digit ends the number). */
static uint8_t byte_token_value(const char *s, size_t len) {
    int v = 0;
    for (size_t i = 3; i < 5 && i < len; i++) {
        int h = hexval(s[i]);
        if (h < 0) break;
        v = v * 16 + h;
    }
    return (uint8_t)v;
}

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static int sbuf_put(sbuf *b, const void *s, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) return -1;
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

/* Piece of token id as shown with show_special = 1 (llama.cpp token_to_piece). */
static int build_piece(const kvc_tokenizer *t, int32_t id, const int16_t cp_to_byte[324], sbuf *b,
                       uint32_t *scratch) {
    const char *s = t->arena + t->str_off[id];
    size_t len = t->str_len[id];
    unsigned a = t->attr[id];
    if (a & (KVC_TATTR_UNKNOWN | KVC_TATTR_CONTROL | KVC_TATTR_USER_DEFINED))
        return sbuf_put(b, s, len);
    if (a & KVC_TATTR_NORMAL) {
        if (t->kind == KVC_TOK_SPM) { /* U+2581 -> space */
            for (size_t i = 0; i < len; i++) {
                if (i + 2 < len && (uint8_t)s[i] == 0xE2 && (uint8_t)s[i + 1] == 0x96 &&
                    (uint8_t)s[i + 2] == 0x81) {
                    if (sbuf_put(b, " ", 1)) return -1;
                    i += 2;
                } else if (sbuf_put(b, s + i, 1)) {
                    return -1;
                }
            }
            return 0;
        }
        size_t n = kvc_utf8_decode((const uint8_t *)s, len, scratch);
        for (size_t i = 0; i < n; i++) {
            uint32_t cp = scratch[i];
            if (cp < 324 && cp_to_byte[cp] >= 0) {
                char c = (char)cp_to_byte[cp];
                if (sbuf_put(b, &c, 1)) return -1;
            } else { /* not a byte-char: llama.cpp writes this marker */
                uint8_t u[4];
                int m = kvc_utf8_encode(cp, u);
                char hex[16];
                if (sbuf_put(b, "[UNK_BYTE_0x", 12)) return -1;
                for (int j = 0; j < m; j++) {
                    snprintf(hex, sizeof hex, "%02x", u[j]);
                    if (sbuf_put(b, hex, 2)) return -1;
                }
                if (sbuf_put(b, s, len) || sbuf_put(b, "]", 1)) return -1;
            }
        }
        return 0;
    }
    if (a & KVC_TATTR_BYTE) {
        char c = (char)byte_token_value(s, len);
        return sbuf_put(b, &c, 1);
    }
    return 0; /* unused / undefined: nothing */
}

/* ---- load --------------------------------------------------------------------- */

static kvc_status load_vocab(builder *bld, const kvc_gguf *g) {
    kvc_tokenizer *t = bld->t;
    const kvc_gguf_value *toks, *scores, *types;
    KVC_TRY(get_arr(g, "tokenizer.ggml.tokens", &toks));
    KVC_CHECK(toks, KVC_ERR_FORMAT,
              "tokenizer.ggml.tokens: missing key (the file has no vocabulary)");
    KVC_CHECK(toks->arr.type == KVC_GGUF_STRING, KVC_ERR_FORMAT,
              "tokenizer.ggml.tokens: expected an array of string, found array of %s",
              kvc_gguf_vtype_name(toks->arr.type));
    KVC_CHECK(toks->arr.n > 0 && toks->arr.n <= (1u << 24), KVC_ERR_FORMAT,
              "tokenizer.ggml.tokens: %llu tokens (expected 1..16777216)",
              (unsigned long long)toks->arr.n);
    uint64_t n = toks->arr.n;
    KVC_TRY(get_arr(g, "tokenizer.ggml.scores", &scores));
    if (scores) {
        KVC_CHECK(scores->arr.type == KVC_GGUF_F32 || scores->arr.type == KVC_GGUF_I32,
                  KVC_ERR_FORMAT,
                  "tokenizer.ggml.scores: expected an array of f32, found array of %s",
                  kvc_gguf_vtype_name(scores->arr.type));
        KVC_CHECK(scores->arr.n >= n, KVC_ERR_FORMAT,
                  "tokenizer.ggml.scores: %llu scores for %llu tokens",
                  (unsigned long long)scores->arr.n, (unsigned long long)n);
    }
    KVC_TRY(get_arr(g, "tokenizer.ggml.token_type", &types));
    if (types) {
        KVC_CHECK(types->arr.type == KVC_GGUF_I32, KVC_ERR_FORMAT,
                  "tokenizer.ggml.token_type: expected an array of i32, found array of %s",
                  kvc_gguf_vtype_name(types->arr.type));
        KVC_CHECK(types->arr.n >= n, KVC_ERR_FORMAT,
                  "tokenizer.ggml.token_type: %llu types for %llu tokens",
                  (unsigned long long)types->arr.n, (unsigned long long)n);
    }
    t->n_vocab = (int)n;
    t->score = calloc(n, sizeof *t->score);
    t->attr = calloc(n, sizeof *t->attr);
    t->eog = calloc(n, 1);
    if (!t->score || !t->attr || !t->eog)
        return kvc_fail(KVC_ERR_NOMEM, "tokenizer: %llu tokens", (unsigned long long)n);
    KVC_TRY(kvc_tok_smap_rebuild(t, n + 256));
    for (uint64_t i = 0; i < n; i++) {
        const kvc_gguf_value *v = &toks->arr.items[i];
        KVC_CHECK(v->type == KVC_GGUF_STRING, KVC_ERR_FORMAT,
                  "tokenizer.ggml.tokens[%llu]: not a string", (unsigned long long)i);
        char empty[32];
        const char *s = v->s.ptr;
        size_t len = v->s.len;
        if (len == 0) { /* llama.cpp renames empty tokens */
            len = (size_t)snprintf(empty, sizeof empty, "[EMPTY_%llu]", (unsigned long long)i);
            s = empty;
        }
        KVC_CHECK(s != NULL, KVC_ERR_FORMAT, "tokenizer.ggml.tokens[%llu]: no data",
                  (unsigned long long)i);
        int32_t id;
        KVC_TRY(add_string(bld, s, len, &id));
        if ((int)len > t->max_token_len) t->max_token_len = (int)len;
        if (scores) {
            const kvc_gguf_value *sv = &scores->arr.items[i];
            t->score[i] = sv->type == KVC_GGUF_I32 ? (float)sv->i : (float)sv->f;
        }
        unsigned a = KVC_TATTR_NORMAL;
        if (types) {
            switch (types->arr.items[i].i) {
            case 1:
                a = KVC_TATTR_NORMAL;
                break;
            case 2:
                a = KVC_TATTR_UNKNOWN;
                break;
            case 3:
                a = KVC_TATTR_CONTROL;
                break;
            case 4:
                a = KVC_TATTR_USER_DEFINED;
                break;
            case 5:
                a = KVC_TATTR_UNUSED;
                break;
            case 6:
                a = KVC_TATTR_BYTE;
                break;
            default:
                a = 0;
                break; /* undefined */
            }
        }
        t->attr[i] = (uint16_t)a;
    }
    return KVC_OK;
}

static kvc_status load_merges(builder *bld, const kvc_gguf *g) {
    kvc_tokenizer *t = bld->t;
    const kvc_gguf_value *m;
    KVC_TRY(get_arr(g, "tokenizer.ggml.merges", &m));
    KVC_CHECK(m, KVC_ERR_FORMAT,
              "tokenizer.ggml.merges: missing key (a gpt2 tokenizer needs its merges)");
    KVC_CHECK(m->arr.type == KVC_GGUF_STRING, KVC_ERR_FORMAT,
              "tokenizer.ggml.merges: expected an array of string, found array of %s",
              kvc_gguf_vtype_name(m->arr.type));
    KVC_CHECK(m->arr.n <= (1u << 24), KVC_ERR_FORMAT,
              "tokenizer.ggml.merges: %llu merges (at most 16777216)",
              (unsigned long long)m->arr.n);
    size_t cap = 1024;
    while (cap < 2 * m->arr.n)
        cap *= 2;
    t->mkey = calloc(cap, sizeof *t->mkey);
    t->mrank = malloc(cap * sizeof *t->mrank);
    t->mres = malloc(cap * sizeof *t->mres);
    if (!t->mkey || !t->mrank || !t->mres)
        return kvc_fail(KVC_ERR_NOMEM, "tokenizer: merge table of %zu slots", cap);
    t->mmask = (uint32_t)(cap - 1);
    sbuf cat = {0};
    kvc_status st = KVC_OK;
    for (uint64_t r = 0; r < m->arr.n && st == KVC_OK; r++) {
        const kvc_gguf_value *v = &m->arr.items[r];
        if (v->type != KVC_GGUF_STRING || !v->s.ptr) {
            st = kvc_fail(KVC_ERR_FORMAT, "tokenizer.ggml.merges[%llu]: not a string",
                          (unsigned long long)r);
            break;
        }
        const char *s = v->s.ptr, *sp = v->s.len > 1 ? memchr(s + 1, ' ', v->s.len - 1) : NULL;
        if (!sp) continue; /* no separator: llama.cpp keys it ("", ""), which never matches */
        size_t n1 = (size_t)(sp - s), n2 = v->s.len - n1 - 1;
        int32_t a, b, res;
        cat.n = 0;
        if (sbuf_put(&cat, s, n1) || sbuf_put(&cat, sp + 1, n2)) {
            st = kvc_fail(KVC_ERR_NOMEM, "tokenizer: merge %llu", (unsigned long long)r);
            break;
        }
        if ((st = intern(bld, s, n1, &a)) || (st = intern(bld, sp + 1, n2, &b)) ||
            (st = intern(bld, cat.p, cat.n, &res)))
            break;
        uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
        uint64_t x = key;
        x ^= x >> 33;
        x *= 0xff51afd7ed558ccdull;
        x ^= x >> 33;
        x *= 0xc4ceb9fe1a85ec53ull;
        x ^= x >> 33;
        for (uint64_t i = x & t->mmask;; i = (i + 1) & t->mmask) {
            if (t->mkey[i] == key) break; /* duplicate pair: the first rank stays */
            if (t->mkey[i] == 0) {
                t->mkey[i] = key;
                t->mrank[i] = (uint32_t)r;
                t->mres[i] = res;
                t->n_merges++;
                break;
            }
        }
    }
    free(cat.p);
    return st;
}

static kvc_status load_special_ids(kvc_tokenizer *t, const kvc_gguf *g, int32_t fim[6]) {
    struct {
        const char *key;
        int32_t *id;
    } keys[] = {
        {"tokenizer.ggml.bos_token_id", &t->bos},     {"tokenizer.ggml.eos_token_id", &t->eos},
        {"tokenizer.ggml.eot_token_id", &t->eot},     {"tokenizer.ggml.eom_token_id", &t->eom},
        {"tokenizer.ggml.unknown_token_id", &t->unk}, {"tokenizer.ggml.padding_token_id", &t->pad},
        {"tokenizer.ggml.fim_pre_token_id", &fim[0]}, {"tokenizer.ggml.fim_suf_token_id", &fim[1]},
        {"tokenizer.ggml.fim_mid_token_id", &fim[2]}, {"tokenizer.ggml.fim_pad_token_id", &fim[3]},
        {"tokenizer.ggml.fim_rep_token_id", &fim[4]}, {"tokenizer.ggml.fim_sep_token_id", &fim[5]},
        {"tokenizer.ggml.prefix_token_id", &fim[0]},  {"tokenizer.ggml.suffix_token_id", &fim[1]},
        {"tokenizer.ggml.middle_token_id", &fim[2]},
    };
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        int32_t *id = keys[k].id;
        if (*id >= t->n_vocab) *id = -1; /* a default out of range is disabled */
        int64_t v;
        int present;
        KVC_TRY(get_int(g, keys[k].key, &v, &present));
        if (present && v >= 0 && v < t->n_vocab)
            *id = (int32_t)v; /* out of range: keep the default */
    }
    return KVC_OK;
}

kvc_status kvc_tokenizer_load(const kvc_gguf *g, kvc_tokenizer **out) {
    *out = NULL;
    kvc_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return kvc_fail(KVC_ERR_NOMEM, "tokenizer");
    builder bld = {.t = t};
    kvc_status st = KVC_OK;
    int32_t fim[6] = {-1, -1, -1, -1, -1, -1};
    int16_t cp_to_byte[324];
    const kvc_gguf_str *model, *pre, *tmpl;
    sbuf pieces = {0};
    uint32_t *scratch = NULL;

    t->bos = t->eos = t->eot = t->eom = t->unk = t->pad = -1;
    if ((st = get_str(g, "tokenizer.ggml.model", &model))) goto fail;
    if (!model) {
        st = kvc_fail(KVC_ERR_FORMAT, "tokenizer.ggml.model: missing key");
        goto fail;
    }
    if ((st = get_str(g, "tokenizer.ggml.pre", &pre))) goto fail;
    if (str_eq(model, "llama")) {
        t->kind = KVC_TOK_SPM;
        t->pre = KVC_PRETOK_DEFAULT;
        t->bos = 1, t->eos = 2, t->unk = 0;
        t->add_bos = 1;
        t->add_space_prefix = 1;
    } else if (str_eq(model, "gpt2")) {
        t->kind = KVC_TOK_BPE;
        t->bos = 11, t->eos = 11; /* llama.cpp's defaults for gpt2 vocabularies */
        if ((st = choose_pretok(t, pre))) goto fail;
    } else {
        int n = model->len > 64 ? 64 : (int)model->len;
        st = kvc_fail(KVC_ERR_UNSUPPORTED,
                      "tokenizer.ggml.model: '%.*s' is not supported (supported: llama "
                      "(SentencePiece), gpt2 (byte-level BPE))",
                      n, model->ptr);
        goto fail;
    }
    if ((st = get_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix))) goto fail;
    if ((st = load_vocab(&bld, g))) goto fail;
    byte_chars(t, cp_to_byte);
    if (t->kind == KVC_TOK_BPE && (st = load_merges(&bld, g))) goto fail;
    if ((st = load_special_ids(t, g, fim))) goto fail;
    if ((st = get_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos))) goto fail;
    if ((st = get_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos))) goto fail;
    kvc_tok_detect_specials(t, fim);

    for (int b = 0; b < 256; b++) {
        char one = (char)b, hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        int32_t id = kvc_tok_lookup(t, hex, 6);
        if (id < 0 || id >= t->n_vocab) id = kvc_tok_lookup(t, &one, 1);
        t->byte_tok[b] = id < t->n_vocab ? id : -1;
        id = kvc_tok_lookup(t, &one, 1);
        t->byte_single[b] = id < t->n_vocab ? id : -1;
        t->byte_sid[b] = kvc_tok_lookup(t, t->bchar[b], t->bchar_len[b]);
    }

    if ((st = kvc_tok_list_specials(t))) goto fail;

    /* pieces */
    t->piece_off = malloc((size_t)t->n_vocab * sizeof *t->piece_off);
    t->piece_len = malloc((size_t)t->n_vocab * sizeof *t->piece_len);
    scratch = malloc(((size_t)t->max_token_len + 1) * sizeof *scratch);
    if (!t->piece_off || !t->piece_len || !scratch) {
        st = kvc_fail(KVC_ERR_NOMEM, "tokenizer: piece table");
        goto fail;
    }
    for (int i = 0; i < t->n_vocab; i++) {
        size_t before = pieces.n;
        if (build_piece(t, i, cp_to_byte, &pieces, scratch) || pieces.n > UINT32_MAX) {
            st = kvc_fail(KVC_ERR_NOMEM, "tokenizer: pieces");
            goto fail;
        }
        t->piece_off[i] = (uint32_t)before;
        t->piece_len[i] = (uint32_t)(pieces.n - before);
    }
    t->piece_arena = pieces.p;
    pieces.p = NULL;
    if (!t->piece_arena) t->piece_arena = calloc(1, 1);

    if ((st = get_str(g, "tokenizer.chat_template", &tmpl))) goto fail;
    if (tmpl && tmpl->ptr) {
        t->chat_template = malloc(tmpl->len + 1);
        if (!t->chat_template) {
            st = kvc_fail(KVC_ERR_NOMEM, "tokenizer: chat template of %llu bytes",
                          (unsigned long long)tmpl->len);
            goto fail;
        }
        memcpy(t->chat_template, tmpl->ptr, tmpl->len);
        t->chat_template[tmpl->len] = 0;
    }
    free(scratch);
    *out = t;
    return KVC_OK;
fail:
    free(pieces.p);
    free(scratch);
    kvc_tokenizer_free(t);
    return st;
}

void kvc_tokenizer_free(kvc_tokenizer *t) {
    if (!t) return;
    free(t->arena);
    free(t->str_off);
    free(t->str_len);
    free(t->score);
    free(t->attr);
    free(t->smap);
    free(t->mkey);
    free(t->mrank);
    free(t->mres);
    free(t->specials);
    free(t->eog);
    free(t->piece_arena);
    free(t->piece_off);
    free(t->piece_len);
    free(t->chat_template);
    free(t);
}

int kvc_tokenizer_n_vocab(const kvc_tokenizer *t) {
    return t ? t->n_vocab : 0;
}
