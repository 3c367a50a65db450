/* Boundary weights of token texts (sentence_vocab.h): the token's bytes are
 * decoded as UTF-8 code points and each must be a space, a newline or one of
 * the marks of the table; the weight is the strongest mark's. */
#include "kv/method/sentence_vocab.h"

#include <stdlib.h>

/* Weight of one code point: > 0 a mark, 0 a space (ignored), < 0 anything else. */
static float mark_weight(uint32_t c) {
    switch (c) {
    case ' ': case '\t': case '\r': return 0.0f;
    case '.': case '?': case '!': case 0x2026: case 0x3002: case 0xFF1F: case 0xFF01: return 1.0f;
    case ';': case 0xFF1B: return 0.6f;
    case ':': case 0xFF1A: return 0.5f;
    case '"': case '\'': case ')': case ']': case '}': case 0xBB: case 0x201D: case 0x2019:
    case 0x300D: case 0x300F: case 0xFF09: return 0.4f;
    case ',': case 0xFF0C: case 0x3001: return 0.3f;
    default: return -1.0f;
    }
}

/* Next code point of s[*i..len), or -1 on an invalid or partial sequence. */
static int64_t next_cp(const unsigned char *s, int len, int *i) {
    unsigned c = s[*i];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || *i + n > len) return -1;
    uint32_t cp = n == 1 ? c : c & (0x7Fu >> n);
    for (int k = 1; k < n; k++) {
        if ((s[*i + k] & 0xC0) != 0x80) return -1;
        cp = cp << 6 | (s[*i + k] & 0x3F);
    }
    *i += n;
    return cp;
}

float kvc_sentence_weight(const char *bytes, int len) {
    const unsigned char *s = (const unsigned char *)bytes;
    float best = 0.0f;
    int newlines = 0, i = 0;
    while (i < len) {
        int64_t cp = next_cp(s, len, &i);
        if (cp < 0) return 0.0f;
        if (cp == '\n') {
            newlines++;
            continue;
        }
        float w = mark_weight((uint32_t)cp);
        if (w < 0.0f) return 0.0f;
        if (w > best) best = w;
    }
    if (newlines >= 2 && best < 1.0f) best = 1.0f;
    if (newlines == 1 && best < 0.8f) best = 0.8f;
    return best;
}

float kvc_vocab_weight(kvc_vocab_weights *vw, int32_t id, kvc_token_text_fn text, void *ctx) {
    if (id < 0 || id >= KVC_VOCAB_MAX_ID || !text) return 0.0f;
    if (id >= vw->cap) {
        int cap = vw->cap ? vw->cap : 1024;
        while (cap <= id) cap *= 2;
        float *w = realloc(vw->w, (size_t)cap * sizeof *w);
        if (!w) return 0.0f;
        for (int i = vw->cap; i < cap; i++) w[i] = -1.0f;
        vw->w = w;
        vw->cap = cap;
    }
    if (vw->w[id] < 0.0f) {
        char buf[256];
        int n = text(ctx, id, buf, (int)sizeof buf);
        vw->w[id] = n > 0 && n <= (int)sizeof buf ? kvc_sentence_weight(buf, n) : 0.0f;
    }
    return vw->w[id];
}

void kvc_vocab_weights_free(kvc_vocab_weights *vw) {
    free(vw->w);
    vw->w = NULL;
    vw->cap = 0;
}
