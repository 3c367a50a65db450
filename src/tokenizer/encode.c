/* Text -> tokens (llama.cpp llama_vocab::impl::tokenize): special tokens are
 * cut out of the text first (longest first; control and unknown tokens only
 * when the caller asks for parse_special, user-defined tokens always), then
 * each remaining fragment goes through the vocabulary's algorithm: byte-level
 * BPE, or SentencePiece with spaces escaped to U+2581 and a leading space
 * before the first fragment and after each special token (add_space_prefix).
 * BOS (and EOS when the metadata says add_eos_token) are added when the
 * caller asks and the metadata wants them. Also the special-token
 * queries (the public kvc_tokenize wraps this in src/model/tokens.c). */
#define _GNU_SOURCE /* memmem */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "tokenizer/tokenizer_impl.h"

typedef struct frag {
    int32_t tok; /* -1: raw text [off, off + len) */
    size_t off, len;
} frag;

typedef struct fraglist {
    frag *v;
    size_t n, cap;
} fraglist;

static int frag_push(fraglist *l, frag f) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        frag *v = realloc(l->v, cap * sizeof *v);
        if (!v) return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = f;
    return 0;
}

/* A control token's text at [at, at + n) may become the token: with
 * parse_special, and when a mask is given only where every byte of the match
 * is template text (mask 1), never where user text spells it. */
static int special_allowed(int parse_special, const uint8_t *mask, size_t at, size_t n) {
    if (!parse_special) return 0;
    for (size_t i = 0; mask && i < n; i++)
        if (!mask[at + i]) return 0;
    return 1;
}

/* Cuts every occurrence of each special token out of the raw fragments. */
static kvc_status partition(const kvc_tokenizer *t, const char *text, size_t len, int parse_special,
                            const uint8_t *mask, fraglist *out) {
    fraglist cur = {0}, next = {0};
    if (frag_push(&cur, (frag){-1, 0, len})) goto nomem;
    for (int k = 0; k < t->n_specials; k++) {
        int32_t id = t->specials[k];
        if (!parse_special && (t->attr[id] & (KVC_TATTR_CONTROL | KVC_TATTR_UNKNOWN))) continue;
        const char *s = t->arena + t->str_off[id];
        size_t slen = t->str_len[id];
        int found = 0;
        next.n = 0;
        for (size_t i = 0; i < cur.n; i++) {
            frag f = cur.v[i];
            if (f.tok >= 0 || f.len < slen) {
                if (frag_push(&next, f)) goto nomem;
                continue;
            }
            int control = (t->attr[id] & (KVC_TATTR_CONTROL | KVC_TATTR_UNKNOWN)) != 0;
            size_t pos = f.off, from = f.off, end = f.off + f.len;
            const char *p;
            while (from < end && (p = memmem(text + from, end - from, s, slen)) != NULL) {
                size_t at = (size_t)(p - text);
                if (control && !special_allowed(parse_special, mask, at, slen)) {
                    from = at + 1; /* user text: stays text */
                    continue;
                }
                if (at > pos && frag_push(&next, (frag){-1, pos, at - pos})) goto nomem;
                if (frag_push(&next, (frag){id, at, slen})) goto nomem;
                pos = from = at + slen;
                found = 1;
            }
            if (pos < end && frag_push(&next, (frag){-1, pos, end - pos})) goto nomem;
        }
        if (found) {
            fraglist tmp = cur;
            cur = next;
            next = tmp;
        }
    }
    free(next.v);
    *out = cur;
    return KVC_OK;
nomem:
    free(cur.v);
    free(next.v);
    return kvc_fail(KVC_ERR_NOMEM, "tokenizer: special-token fragments of a %zu-byte text", len);
}

static kvc_status spm_fragment(const kvc_tokenizer *t, const char *s, size_t len, int prefix,
                               kvc_tokbuf *out) {
    size_t spaces = 0; /* each space becomes 3 bytes, the prefix adds 3 */
    for (size_t i = 0; i < len; i++)
        spaces += s[i] == ' ';
    if (len > SIZE_MAX / 4) return kvc_fail(KVC_ERR_RANGE, "tokenizer: text of %zu bytes", len);
    size_t n = len + 2 * spaces + (prefix ? 3 : 0);
    char *e = malloc(n ? n : 1), *w = e;
    if (!e) return kvc_fail(KVC_ERR_NOMEM, "tokenizer: text of %zu bytes", len);
    if (prefix) {
        memcpy(w, "\xe2\x96\x81", 3);
        w += 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ') {
            memcpy(w, "\xe2\x96\x81", 3);
            w += 3;
        } else {
            *w++ = s[i];
        }
    }
    kvc_status st = kvc_spm_encode(t, e, n, out);
    free(e);
    return st;
}

kvc_status kvc_tokenizer_encode(const kvc_tokenizer *t, const char *text, size_t len, int add_bos,
                                int parse_special, kvc_tokbuf *out) {
    return kvc_tokenizer_encode_masked(t, text, len, add_bos, parse_special, NULL, out);
}

kvc_status kvc_tokenizer_encode_masked(const kvc_tokenizer *t, const char *text, size_t len,
                                       int add_bos, int parse_special, const uint8_t *mask,
                                       kvc_tokbuf *out) {
    fraglist frags = {0};
    kvc_status st = KVC_OK;
    if (len > 0) KVC_TRY(partition(t, text, len, parse_special, mask, &frags));
    int add_special = add_bos != 0;
    if (add_special && t->add_bos && t->bos >= 0) st = kvc_tokbuf_push(out, t->bos);
    int prev_special = 1; /* SentencePiece: a leading space before the first fragment */
    for (size_t i = 0; st == KVC_OK && i < frags.n; i++) {
        const frag *f = &frags.v[i];
        if (f->tok >= 0) {
            st = kvc_tokbuf_push(out, f->tok);
            prev_special = 1;
        } else if (t->kind == KVC_TOK_SPM) {
            st = spm_fragment(t, text + f->off, f->len, t->add_space_prefix && prev_special, out);
            prev_special = 0;
        } else {
            st = kvc_bpe_encode(t, text + f->off, f->len, out);
        }
    }
    if (st == KVC_OK && add_special && t->add_eos && t->eos >= 0) st = kvc_tokbuf_push(out, t->eos);
    free(frags.v);
    return st;
}

static kvc_status copy_out(kvc_tokbuf *bp, kvc_status st, int32_t *tokens, int cap, int *n_out);

kvc_status kvc_tokenizer_tokenize(const kvc_tokenizer *t, const char *text, size_t len, int add_bos,
                                  int parse_special, int32_t *tokens, int cap, int *n_out) {
    if (n_out) *n_out = 0;
    KVC_CHECK(t, KVC_ERR_ARG, "tokenize: no tokenizer (model not loaded?)");
    KVC_CHECK(n_out, KVC_ERR_ARG, "tokenize: n_out is NULL");
    KVC_CHECK(text || len == 0, KVC_ERR_ARG, "tokenize: text is NULL but len is %zu", len);
    KVC_CHECK(cap >= 0 && (tokens || cap == 0), KVC_ERR_ARG, "tokenize: bad output buffer (cap %d)",
              cap);
    kvc_tokbuf b = {0};
    kvc_status st = kvc_tokenizer_encode(t, text, len, add_bos, parse_special, &b);
    return copy_out(&b, st, tokens, cap, n_out);
}

/* Copies b to the caller's buffer (at most cap tokens, *n_out the full count) and frees it. */
static kvc_status copy_out(kvc_tokbuf *bp, kvc_status st, int32_t *tokens, int cap, int *n_out) {
    kvc_tokbuf b = *bp;
    if (st == KVC_OK && b.n > (size_t)INT_MAX)
        st = kvc_fail(KVC_ERR_RANGE, "tokenize: %zu tokens exceed the int range", b.n);
    if (st == KVC_OK) {
        size_t n = b.n < (size_t)cap ? b.n : (size_t)cap;
        if (n) memcpy(tokens, b.v, n * sizeof *tokens);
        *n_out = (int)b.n;
    }
    free(b.v);
    return st;
}

kvc_status kvc_tokenizer_chat_tokenize(const kvc_tokenizer *t, const kvc_chat_msg *msgs, int n_msgs,
                                       int add_assistant_prompt, int32_t *tokens, int cap,
                                       int *n_out) {
    KVC_CHECK(t, KVC_ERR_ARG, "chat_tokenize: no tokenizer (model not loaded?)");
    return kvc_chat_tokenize_tmpl(t, t->chat_template, msgs, n_msgs, add_assistant_prompt, tokens,
                                  cap, n_out);
}

kvc_status kvc_chat_tokenize_tmpl(const kvc_tokenizer *t, const char *tmpl, const kvc_chat_msg *msgs,
                                  int n_msgs, int add_assistant_prompt, int32_t *tokens, int cap,
                                  int *n_out) {
    if (n_out) *n_out = 0;
    KVC_CHECK(t, KVC_ERR_ARG, "chat_tokenize: no tokenizer (model not loaded?)");
    KVC_CHECK(n_out, KVC_ERR_ARG, "chat_tokenize: n_out is NULL");
    KVC_CHECK(cap >= 0 && (tokens || cap == 0), KVC_ERR_ARG,
              "chat_tokenize: bad output buffer (cap %d)", cap);
    char *text = NULL;
    uint8_t *mask = NULL;
    KVC_TRY(kvc_chat_format_masked(tmpl, msgs, n_msgs, add_assistant_prompt, &text, &mask));
    kvc_tokbuf b = {0};
    kvc_status st = kvc_tokenizer_encode_masked(t, text, strlen(text), 1, 1, mask, &b);
    free(text);
    free(mask);
    return copy_out(&b, st, tokens, cap, n_out);
}

int32_t kvc_tokenizer_bos(const kvc_tokenizer *t) {
    return t ? t->bos : -1;
}
int32_t kvc_tokenizer_eos(const kvc_tokenizer *t) {
    return t ? t->eos : -1;
}
int kvc_tokenizer_is_end(const kvc_tokenizer *t, int32_t tok) {
    return t && tok >= 0 && tok < t->n_vocab && t->eog[tok];
}
