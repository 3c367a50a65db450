/* Tokens -> text: the piece of a token (llama.cpp token_to_piece: byte-chars
 * decoded for BPE, U+2581 -> space and <0xXX> -> the byte for SentencePiece,
 * control and unknown tokens only on request), and the incremental
 * detokenizer for streamed output. The detokenizer concatenates pieces and
 * releases only complete, valid UTF-8: a character split across tokens is
 * held back until its last byte arrives; a byte that can never start or
 * continue a valid character is replaced by U+FFFD, so the stream is always
 * valid UTF-8 (RFC 3629 well-formedness, table 3-7 of the Unicode standard). */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "tokenizer/tokenizer_impl.h"

int kvc_tokenizer_piece(const kvc_tokenizer *t, int32_t token, int show_special, char *buf,
                        int cap) {
    if (!t || token < 0 || token >= t->n_vocab) return -1;
    if (!show_special && (t->attr[token] & (KVC_TATTR_UNKNOWN | KVC_TATTR_CONTROL))) return 0;
    if (!buf || cap <= 0) return 0;
    uint32_t n = t->piece_len[token];
    if (n > (uint32_t)cap) n = (uint32_t)cap;
    memcpy(buf, t->piece_arena + t->piece_off[token], n);
    return (int)n;
}

/* ---- incremental detokenizer ------------------------------------------------- */

struct kvc_detok {
    const kvc_tokenizer *t;
    char *pend; /* bytes received but not yet returned */
    size_t n, cap;
};

kvc_status kvc_detok_create_tok(const kvc_tokenizer *t, kvc_detok **out) {
    KVC_CHECK(out, KVC_ERR_ARG, "detok_create: out is NULL");
    *out = NULL;
    KVC_CHECK(t, KVC_ERR_ARG, "detok_create: no tokenizer (model not loaded?)");
    kvc_detok *d = calloc(1, sizeof *d);
    if (!d) return kvc_fail(KVC_ERR_NOMEM, "detok_create");
    d->t = t;
    /* room for the longest piece after a held-back partial character, so that
     * pushing a token never allocates (a failure there could only drop text) */
    uint32_t longest = 0;
    for (int i = 0; i < t->n_vocab; i++)
        if (t->piece_len[i] > longest) longest = t->piece_len[i];
    d->cap = (size_t)longest + 8;
    d->pend = malloc(d->cap);
    if (!d->pend) {
        free(d);
        return kvc_fail(KVC_ERR_NOMEM, "detok_create: %zu bytes", (size_t)longest + 8);
    }
    *out = d;
    return KVC_OK;
}

void kvc_detok_free(kvc_detok *d) {
    if (!d) return;
    free(d->pend);
    free(d);
}

/* Length of the well-formed UTF-8 character at s[0..n): 1..4; 0 if s is a
 * proper prefix of one (more bytes needed); -1 if s[0] starts no character. */
static int utf8_char(const uint8_t *s, size_t n) {
    uint8_t b = s[0];
    if (b < 0x80) return 1;
    int len;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (b >= 0xC2 && b <= 0xDF)
        len = 2;
    else if (b >= 0xE0 && b <= 0xEF) {
        len = 3;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
    } else {
        return -1;
    }
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) return 0;
        uint8_t c = s[i];
        if (i == 1 ? (c < lo || c > hi) : (c & 0xC0) != 0x80) return -1;
    }
    return len;
}

/* Moves complete characters (and U+FFFD for bad bytes) from the pending
 * bytes to buf, at most cap-1 bytes; with final != 0 an incomplete tail is
 * also flushed as U+FFFD. */
static int drain(kvc_detok *d, char *buf, int cap, int final) {
    size_t i = 0, w = 0, room = cap > 0 ? (size_t)cap - 1 : 0;
    while (i < d->n) {
        int c = utf8_char((const uint8_t *)d->pend + i, d->n - i);
        if (c == 0 && !final) break;
        if (c <= 0) { /* bad byte (or incomplete tail at the end): U+FFFD for one byte */
            if (w + 3 > room) break;
            memcpy(buf + w, "\xef\xbf\xbd", 3);
            w += 3;
            i += 1;
            continue;
        }
        if (w + (size_t)c > room) break;
        memcpy(buf + w, d->pend + i, (size_t)c);
        w += (size_t)c;
        i += (size_t)c;
    }
    if (i > 0 && i < d->n) memmove(d->pend, d->pend + i, d->n - i);
    d->n -= i;
    if (cap > 0) buf[w] = 0;
    return (int)w;
}

int kvc_detok_push(kvc_detok *d, int32_t token, char *buf, int cap) {
    if (!d || !buf || cap <= 0) return 0;
    const kvc_tokenizer *t = d->t;
    if (token >= 0 && token < t->n_vocab &&
        !(t->attr[token] & (KVC_TATTR_UNKNOWN | KVC_TATTR_CONTROL))) {
        size_t n = t->piece_len[token];
        if (n == 0) return drain(d, buf, cap, 0);
        if (d->n + n > d->cap) {
            size_t c = d->cap ? d->cap : 64;
            while (c < d->n + n)
                c *= 2;
            char *p = realloc(d->pend, c);
            if (!p) { /* drop the piece rather than fail mid-stream */
                buf[0] = 0;
                return 0;
            }
            d->pend = p;
            d->cap = c;
        }
        memcpy(d->pend + d->n, t->piece_arena + t->piece_off[token], n);
        d->n += n;
    }
    return drain(d, buf, cap, 0);
}

int kvc_detok_flush(kvc_detok *d, char *buf, int cap) {
    if (!d || !buf || cap <= 0) return 0;
    return drain(d, buf, cap, 1);
}
