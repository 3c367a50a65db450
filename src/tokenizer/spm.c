/* SentencePiece BPE (Llama-2, Mistral), as llama.cpp's llm_tokenizer_spm_session:
 * the fragment (spaces already escaped to U+2581, the leading space added by
 * the caller) starts as one symbol per UTF-8 character; the adjacent pair
 * whose concatenation is a token with the highest score merges first (the
 * leftmost among equal scores), until no pair is a token. A symbol that is not
 * a token is written as byte tokens <0xXX> (byte fallback). Symbols are
 * contiguous in the text, so a pair is looked up as one substring, and a
 * binary heap keeps long inputs at O(n log n). */
#include <stdlib.h>

#include "base/status.h"
#include "tokenizer/heap.h"
#include "tokenizer/tokenizer_impl.h"

typedef struct sym {
    int32_t prev, next;
    size_t start, n; /* bytes; n == 0: merged away */
} sym;

typedef struct bigram {
    float score;
    int32_t left, right;
    size_t size;
} bigram;

static int before(const void *pa, const void *pb) {
    const bigram *a = pa, *b = pb;
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static int try_add(const kvc_tokenizer *t, const char *text, sym *syms, kvc_heap *h, int32_t l,
                   int32_t r) {
    if (l < 0 || r < 0) return 0;
    size_t size = syms[l].n + syms[r].n;
    if (size > (size_t)t->max_token_len) return 0;
    int32_t id = kvc_tok_lookup(t, text + syms[l].start, size);
    if (id < 0 || id >= t->n_vocab) return 0;
    bigram b = {.score = t->score[id], .left = l, .right = r, .size = size};
    return kvc_heap_push(h, &b);
}

kvc_status kvc_spm_encode(const kvc_tokenizer *t, const char *text, size_t len, kvc_tokbuf *out) {
    if (len == 0) return KVC_OK;
    if (len > (size_t)INT32_MAX - 1)
        return kvc_fail(KVC_ERR_RANGE, "tokenizer: fragment of %zu bytes", len);
    sym *syms = malloc(len * sizeof *syms);
    kvc_heap h = kvc_heap_make(sizeof(bigram), before);
    kvc_status st = KVC_OK;
    if (!syms) return kvc_fail(KVC_ERR_NOMEM, "tokenizer: text of %zu bytes", len);
    int32_t n = 0;
    for (size_t off = 0; off < len; n++) {
        size_t c = (size_t)kvc_utf8_lead_len((uint8_t)text[off]);
        if (c > len - off) c = len - off;
        syms[n] = (sym){.prev = n - 1, .next = off + c == len ? -1 : n + 1, .start = off, .n = c};
        off += c;
    }
    for (int32_t i = 1; i < n; i++)
        if (try_add(t, text, syms, &h, i - 1, i)) goto nomem;
    while (h.n) {
        bigram b;
        kvc_heap_pop(&h, &b);
        sym *l = &syms[b.left], *r = &syms[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) syms[r->next].prev = b.left;
        if (try_add(t, text, syms, &h, l->prev, b.left) ||
            try_add(t, text, syms, &h, b.left, l->next))
            goto nomem;
    }
    for (int32_t i = 0; i >= 0 && st == KVC_OK; i = syms[i].next) {
        int32_t id = syms[i].n <= (size_t)t->max_token_len
                         ? kvc_tok_lookup(t, text + syms[i].start, syms[i].n)
                         : -1;
        if (id >= 0 && id < t->n_vocab) {
            st = kvc_tokbuf_push(out, id);
            continue;
        }
        for (size_t k = 0; k < syms[i].n && st == KVC_OK; k++) {
            int32_t b = t->byte_tok[(uint8_t)text[syms[i].start + k]];
            if (b < 0) b = t->unk; /* no byte token either: llama.cpp would throw here */
            if (b >= 0) st = kvc_tokbuf_push(out, b);
        }
    }
    free(syms);
    kvc_heap_free(&h);
    return st;
nomem:
    free(syms);
    kvc_heap_free(&h);
    return kvc_fail(KVC_ERR_NOMEM, "tokenizer: merge queue for %zu bytes", len);
}
