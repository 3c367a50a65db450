/* Pre-tokenizers of the byte-level BPE families: the split patterns written by
 * hand over Unicode categories, as llama.cpp does (unicode.cpp), so that the
 * same words come out:
 *
 *   GPT-2   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   Llama-3 (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   Qwen2   as Llama-3 with \p{N} (one digit per word)
 *   SmolLM  \p{N} isolated, then GPT-2 on the rest
 *   default [\p{P}$+<=>^~|]+ isolated, GPT-2, \p{N}+ isolated, [0-9]{3} isolated
 *
 * A pattern pass splits every word of the previous pass: the matches and the
 * gaps between them both become words. Lookahead never crosses a word edge. */
#include <stdlib.h>

#include "base/status.h"
#include "tokenizer/tokenizer_impl.h"

#define OOR 0xFFFFFFFFu /* "no code point here" (outside the current word) */

typedef struct split {
    const uint32_t *cp;
    const uint16_t *cat;
    size_t a, b; /* current word [a, b) */
    size_t prev; /* end of the last emitted piece */
    size_t *out;
    size_t n_out;
} split;

static inline uint32_t cpt(const split *s, size_t i) {
    return i >= s->a && i < s->b ? s->cp[i] : OOR;
}
static inline unsigned cat(const split *s, size_t i) {
    return i >= s->a && i < s->b ? s->cat[i] : 0u;
}

static void emit(split *s, size_t end) {
    if (end > s->prev) s->out[s->n_out++] = end - s->prev;
    s->prev = end;
}

static inline uint32_t ascii_lower(uint32_t c) {
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* 's|'t|'re|'ve|'m|'ll|'d at pos (optionally case-insensitive): length or 0. */
static size_t contraction(const split *s, size_t pos, int icase) {
    if (cpt(s, pos) != '\'' || pos + 1 >= s->b) return 0;
    uint32_t n1 = cpt(s, pos + 1);
    if (icase) n1 = ascii_lower(n1);
    if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') return 2;
    if (pos + 2 < s->b) {
        uint32_t n2 = cpt(s, pos + 2);
        if (icase) n2 = ascii_lower(n2);
        if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l'))
            return 3;
    }
    return 0;
}

#define LNS (KVC_UCAT_LETTER | KVC_UCAT_NUMBER | KVC_UCAT_SPACE)

static void split_gpt2(split *s) {
    size_t pos = s->a;
    while (pos < s->b) {
        uint32_t c = cpt(s, pos);
        unsigned f = cat(s, pos);
        size_t k = contraction(s, pos, 0);
        if (k) {
            pos += k;
            emit(s, pos);
            continue;
        }
        unsigned f2 = c == ' ' ? cat(s, pos + 1) : f;
        if (f2 & KVC_UCAT_LETTER) { /* ' ?\p{L}+' */
            pos += c == ' ';
            while (cat(s, pos) & KVC_UCAT_LETTER)
                pos++;
            emit(s, pos);
            continue;
        }
        if (f2 & KVC_UCAT_NUMBER) { /* ' ?\p{N}+' */
            pos += c == ' ';
            while (cat(s, pos) & KVC_UCAT_NUMBER)
                pos++;
            emit(s, pos);
            continue;
        }
        if (!(f2 & LNS) && f2) { /* ' ?[^\s\p{L}\p{N}]+' */
            pos += c == ' ';
            while (!(cat(s, pos) & LNS) && cat(s, pos))
                pos++;
            emit(s, pos);
            continue;
        }
        size_t nws = 0;
        while (cat(s, pos + nws) & KVC_UCAT_SPACE)
            nws++;
        if (nws > 1 && cpt(s, pos + nws) != OOR) { /* '\s+(?!\S)' */
            pos += nws - 1;
        } else if (nws > 0) { /* '\s+' */
            pos += nws;
        } else {
            pos++;
        }
        emit(s, pos);
    }
}

/* Llama-3 (max_digits 3) and Qwen2 (max_digits 1). */
static void split_llama3(split *s, size_t max_digits) {
    size_t pos = s->a;
    while (pos < s->b) {
        uint32_t c = cpt(s, pos);
        unsigned f = cat(s, pos);
        size_t k = contraction(s, pos, 1);
        if (k) {
            pos += k;
            emit(s, pos);
            continue;
        }
        if (!(c == '\r' || c == '\n' || (f & KVC_UCAT_NUMBER)) &&
            ((f & KVC_UCAT_LETTER) || (cat(s, pos + 1) & KVC_UCAT_LETTER))) {
            /* '[^\r\n\p{L}\p{N}]?\p{L}+' */
            pos++;
            while (cat(s, pos) & KVC_UCAT_LETTER)
                pos++;
            emit(s, pos);
            continue;
        }
        if (f & KVC_UCAT_NUMBER) { /* '\p{N}{1,max}' */
            size_t ini = pos;
            while (cat(s, pos) & KVC_UCAT_NUMBER) {
                if (++pos - ini >= max_digits) {
                    emit(s, pos);
                    ini = pos;
                }
            }
            emit(s, pos);
            continue;
        }
        unsigned f2 = c == ' ' ? cat(s, pos + 1) : f;
        if (!(f2 & LNS) && f) { /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
            pos += c == ' ';
            while (!(cat(s, pos) & LNS) && cat(s, pos))
                pos++;
            while (cpt(s, pos) == '\r' || cpt(s, pos) == '\n')
                pos++;
            emit(s, pos);
            continue;
        }
        size_t nws = 0, last_rn = 0;
        while (cat(s, pos + nws) & KVC_UCAT_SPACE) {
            uint32_t c2 = cpt(s, pos + nws);
            if (c2 == '\r' || c2 == '\n') last_rn = pos + nws + 1;
            nws++;
        }
        if (last_rn > 0) { /* '\s*[\r\n]+' */
            pos = last_rn;
        } else if (nws > 1 && cpt(s, pos + nws) != OOR) { /* '\s+(?!\S)' */
            pos += nws - 1;
        } else if (nws > 0) { /* '\s+' */
            pos += nws;
        } else {
            pos++;
        }
        emit(s, pos);
    }
}

/* Code point classes of the simple patterns (llama.cpp runs these through
 * std::regex on a text where each non-ASCII code point is collapsed to a
 * byte standing for its category, white space first). */
static int is_num(const split *s, size_t i) {
    return (s->cat[i] & (KVC_UCAT_NUMBER | KVC_UCAT_SPACE)) == KVC_UCAT_NUMBER;
}
static int is_punct_default(const split *s, size_t i) { /* [\p{P}\$\+<=>\^~\|] */
    uint32_t c = s->cp[i];
    if (c < 128)
        return (s->cat[i] & KVC_UCAT_PUNCT) || c == '$' || c == '+' || c == '<' || c == '=' ||
               c == '>' || c == '^' || c == '~' || c == '|';
    return (s->cat[i] & (KVC_UCAT_PUNCT | KVC_UCAT_SPACE)) == KVC_UCAT_PUNCT;
}
static int is_ascii_digit(const split *s, size_t i) {
    return s->cp[i] >= '0' && s->cp[i] <= '9';
}

/* Isolates matches of pred (one code point each, or maximal runs). */
static void split_class(split *s, int (*pred)(const split *, size_t), int runs) {
    size_t pos = s->a;
    while (pos < s->b) {
        if (pred(s, pos)) {
            emit(s, pos);
            pos++;
            if (runs)
                while (pos < s->b && pred(s, pos))
                    pos++;
            emit(s, pos);
        } else {
            pos++;
        }
    }
    emit(s, s->b);
}

/* [0-9][0-9][0-9]: leftmost non-overlapping triples of ASCII digits. */
static void split_digit3(split *s) {
    size_t pos = s->a;
    while (pos + 3 <= s->b) {
        if (is_ascii_digit(s, pos) && is_ascii_digit(s, pos + 1) && is_ascii_digit(s, pos + 2)) {
            emit(s, pos);
            pos += 3;
            emit(s, pos);
        } else {
            pos++;
        }
    }
    emit(s, s->b);
}

typedef enum pass { P_GPT2, P_LLAMA3, P_QWEN2, P_NUM1, P_NUMRUN, P_PUNCTRUN, P_DIGIT3 } pass;

static void run_pass(pass p, split *s) {
    switch (p) {
    case P_GPT2:
        split_gpt2(s);
        break;
    case P_LLAMA3:
        split_llama3(s, 3);
        break;
    case P_QWEN2:
        split_llama3(s, 1);
        break;
    case P_NUM1:
        split_class(s, is_num, 0);
        break;
    case P_NUMRUN:
        split_class(s, is_num, 1);
        break;
    case P_PUNCTRUN:
        split_class(s, is_punct_default, 1);
        break;
    case P_DIGIT3:
        split_digit3(s);
        break;
    }
}

kvc_status kvc_pretokenize(kvc_pretok kind, const uint32_t *cps, size_t n, size_t *lens,
                           size_t *n_words) {
    static const pass p_default[] = {P_PUNCTRUN, P_GPT2, P_NUMRUN, P_DIGIT3};
    static const pass p_gpt2[] = {P_GPT2};
    static const pass p_smollm[] = {P_NUM1, P_GPT2};
    static const pass p_llama3[] = {P_LLAMA3};
    static const pass p_qwen2[] = {P_QWEN2};
    const pass *passes;
    size_t n_passes;
    switch (kind) {
    case KVC_PRETOK_GPT2:
        passes = p_gpt2;
        n_passes = 1;
        break;
    case KVC_PRETOK_SMOLLM:
        passes = p_smollm;
        n_passes = 2;
        break;
    case KVC_PRETOK_LLAMA3:
        passes = p_llama3;
        n_passes = 1;
        break;
    case KVC_PRETOK_QWEN2:
        passes = p_qwen2;
        n_passes = 1;
        break;
    default:
        passes = p_default;
        n_passes = 4;
        break;
    }
    *n_words = 0;
    if (n == 0) return KVC_OK;
    uint16_t *catv = malloc(n * sizeof *catv);
    size_t *tmp = malloc(n * sizeof *tmp);
    if (!catv || !tmp) {
        free(catv);
        free(tmp);
        return kvc_fail(KVC_ERR_NOMEM, "tokenizer: pre-tokenizer buffers for %zu code points", n);
    }
    for (size_t i = 0; i < n; i++)
        catv[i] = (uint16_t)kvc_ucat(cps[i]);

    /* Ping-pong between lens and tmp so that the last pass writes lens. */
    size_t *in = (n_passes % 2) ? tmp : lens, *out = (n_passes % 2) ? lens : tmp;
    in[0] = n;
    size_t n_in = 1;
    for (size_t p = 0; p < n_passes; p++) {
        split s = {.cp = cps, .cat = catv, .out = out, .n_out = 0};
        size_t start = 0;
        for (size_t w = 0; w < n_in; w++) {
            s.a = s.prev = start;
            s.b = start + in[w];
            run_pass(passes[p], &s);
            start = s.b;
        }
        n_in = s.n_out;
        size_t *t = in;
        in = out;
        out = t;
    }
    /* after the loop `in` holds the result, which is lens by construction */
    *n_words = n_in;
    free(catv);
    free(tmp);
    return KVC_OK;
}
