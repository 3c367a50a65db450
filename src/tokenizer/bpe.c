/* Byte-level BPE (GPT-2 style, as llama.cpp's llm_tokenizer_bpe_session): the
 * text is decoded, split into words by the family's pre-tokenizer, and each
 * word's UTF-8 bytes become symbols (one per byte, named by the printable
 * "byte-char" GPT-2 maps each byte to). Adjacent symbols merge in order of
 * merge rank (lowest first, leftmost first among equal ranks) until no pair
 * has a rank. Symbols and merge parts are interned string ids, so a merge is a
 * hash lookup of two integers; a binary heap keeps a word of n bytes at
 * O(n log n), so long words (MBs without a space) stay fast. A final symbol
 * that is not a token falls back to single-byte tokens, as llama.cpp does. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "tokenizer/heap.h"
#include "tokenizer/tokenizer_impl.h"

typedef struct sym {
    int32_t prev, next;
    uint32_t start, n; /* bytes of the word; n == 0: merged away */
    int32_t sid;       /* interned string id, -1 when the text is not interned */
} sym;

typedef struct bigram {
    uint32_t rank;
    int32_t left, right;
    int32_t lsid, rsid, res;
} bigram;

static int before(const void *pa, const void *pb) {
    const bigram *a = pa, *b = pb;
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* Merge of (l, r): its rank and merged id, or 0 when the pair has no merge. */
static int find_merge(const kvc_tokenizer *t, int32_t l, int32_t r, uint32_t *rank, int32_t *res) {
    if (l < 0 || r < 0 || !t->mkey) return 0;
    uint64_t key = (((uint64_t)(uint32_t)l << 32) | (uint32_t)r) + 1;
    for (uint64_t i = mix64(key) & t->mmask;; i = (i + 1) & t->mmask) {
        if (t->mkey[i] == 0) return 0;
        if (t->mkey[i] == key) {
            *rank = t->mrank[i];
            *res = t->mres[i];
            return 1;
        }
    }
}

typedef struct work {
    sym *syms;
    size_t cap_syms;
    kvc_heap h;
    uint8_t *bytes; /* the word's raw bytes */
    size_t cap_bytes;
    char *enc; /* the word as byte-chars (for the whole-word lookup) */
    size_t cap_enc;
} work;

static int add_bigram(const kvc_tokenizer *t, work *w, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return 0;
    bigram b = {.left = l, .right = r, .lsid = w->syms[l].sid, .rsid = w->syms[r].sid};
    if (!find_merge(t, b.lsid, b.rsid, &b.rank, &b.res)) return 0;
    return kvc_heap_push(&w->h, &b);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* The byte-char spelling of byte b, as stored in the vocabulary. */
static int byte_char(const kvc_tokenizer *t, uint8_t b, char out[2]) {
    out[0] = t->bchar[b][0];
    out[1] = t->bchar[b][1];
    return t->bchar_len[b];
}

static kvc_status encode_word(const kvc_tokenizer *t, work *w, const uint8_t *bytes, size_t n,
                              kvc_tokbuf *out) {
    if (t->ignore_merges) {
        if (grow((void **)&w->enc, &w->cap_enc, 2 * n, 1))
            return kvc_fail(KVC_ERR_NOMEM, "tokenizer: word of %zu bytes", n);
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            m += (size_t)byte_char(t, bytes[i], w->enc + m);
        int32_t id = kvc_tok_lookup(t, w->enc, m);
        if (id >= 0 && id < t->n_vocab) return kvc_tokbuf_push(out, id);
    }
    if (n > (size_t)INT32_MAX - 1)
        return kvc_fail(KVC_ERR_RANGE, "tokenizer: word of %zu bytes", n);
    if (grow((void **)&w->syms, &w->cap_syms, n, sizeof(sym)))
        return kvc_fail(KVC_ERR_NOMEM, "tokenizer: word of %zu bytes", n);
    for (size_t i = 0; i < n; i++) {
        w->syms[i] = (sym){.prev = (int32_t)i - 1,
                           .next = i + 1 == n ? -1 : (int32_t)i + 1,
                           .start = (uint32_t)i,
                           .n = 1,
                           .sid = t->byte_sid[bytes[i]]};
    }
    w->h.n = 0;
    for (size_t i = 1; i < n; i++)
        if (add_bigram(t, w, (int32_t)i - 1, (int32_t)i)) goto nomem;
    while (w->h.n) {
        bigram b;
        kvc_heap_pop(&w->h, &b);
        sym *l = &w->syms[b.left], *r = &w->syms[b.right];
        if (l->n == 0 || r->n == 0 || l->sid != b.lsid || r->sid != b.rsid || l->next != b.right)
            continue; /* stale: one side changed since the pair was queued */
        l->n += r->n;
        l->sid = b.res;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) w->syms[r->next].prev = b.left;
        if (add_bigram(t, w, l->prev, b.left) || add_bigram(t, w, b.left, l->next)) goto nomem;
    }
    for (int32_t i = 0; i >= 0; i = w->syms[i].next) {
        const sym *s = &w->syms[i];
        if (s->sid >= 0 && s->sid < t->n_vocab) {
            KVC_TRY(kvc_tokbuf_push(out, s->sid));
            continue;
        }
        /* not a token: each byte of its byte-char spelling, if that is a token */
        for (uint32_t k = 0; k < s->n; k++) {
            char bc[2];
            int m = byte_char(t, bytes[s->start + k], bc);
            for (int j = 0; j < m; j++) {
                int32_t id = t->byte_single[(uint8_t)bc[j]];
                if (id >= 0) KVC_TRY(kvc_tokbuf_push(out, id));
            }
        }
    }
    return KVC_OK;
nomem:
    return kvc_fail(KVC_ERR_NOMEM, "tokenizer: merge queue for a word of %zu bytes", n);
}

kvc_status kvc_bpe_encode(const kvc_tokenizer *t, const char *text, size_t len, kvc_tokbuf *out) {
    if (len == 0) return KVC_OK;
    kvc_status st = KVC_OK;
    uint32_t *cps = malloc(len * sizeof *cps);
    size_t *lens = malloc(len * sizeof *lens);
    work w = {.h = kvc_heap_make(sizeof(bigram), before)};
    if (!cps || !lens) {
        st = kvc_fail(KVC_ERR_NOMEM, "tokenizer: text of %zu bytes", len);
        goto done;
    }
    size_t n = kvc_utf8_decode((const uint8_t *)text, len, cps), n_words = 0;
    st = kvc_pretokenize(t->pre, cps, n, lens, &n_words);
    size_t at = 0;
    for (size_t wi = 0; st == KVC_OK && wi < n_words; wi++) {
        /* re-encode the word's code points (invalid input became U+FFFD) */
        if (grow((void **)&w.bytes, &w.cap_bytes, 4 * lens[wi], 1)) {
            st = kvc_fail(KVC_ERR_NOMEM, "tokenizer: word of %zu code points", lens[wi]);
            break;
        }
        size_t nb = 0;
        for (size_t k = 0; k < lens[wi]; k++)
            nb += (size_t)kvc_utf8_encode(cps[at + k], w.bytes + nb);
        at += lens[wi];
        st = encode_word(t, &w, w.bytes, nb, out);
    }
done:
    free(cps);
    free(lens);
    free(w.syms);
    kvc_heap_free(&w.h);
    free(w.bytes);
    free(w.enc);
    return st;
}
