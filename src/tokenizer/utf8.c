/* UTF-8 decoding and Unicode category lookup for the tokenizer. Decoding
 * mirrors llama.cpp's unicode_cpts_from_utf8 (the GGUF reference) so that
 * invalid input splits into the same words: a byte that does not start a
 * complete sequence becomes U+FFFD and consumes one byte; overlong forms and
 * surrogates are not rejected. Categories come from the generated table in
 * unicode.c; White_Space (Unicode PropList) is the fixed set below. */
#include "tokenizer/tokenizer_impl.h"

static int is_white_space(uint32_t cp) {
    if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
    switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
        return 1;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

unsigned kvc_ucat(uint32_t cp) {
    unsigned f;
    if (cp < 256) {
        f = kvc_ucat_latin1[cp];
    } else if (cp > 0x10FFFF) {
        return KVC_UCAT_UNDEFINED;
    } else {
        int lo = 0, hi = kvc_ucat_n_ranges - 1; /* last range with start <= cp */
        while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if ((kvc_ucat_ranges[mid] >> 8) <= cp)
                lo = mid;
            else
                hi = mid - 1;
        }
        f = kvc_ucat_ranges[lo] & 0xFF;
    }
    if (is_white_space(cp)) f |= KVC_UCAT_SPACE;
    return f;
}

int kvc_utf8_lead_len(uint8_t b) {
    static const uint8_t len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len[b >> 4];
}

static int is_cont(uint8_t b) {
    return (b & 0xC0) == 0x80;
}

size_t kvc_utf8_decode(const uint8_t *s, size_t len, uint32_t *out) {
    size_t i = 0, n = 0;
    while (i < len) {
        uint8_t b = s[i];
        uint32_t cp = 0xFFFD;
        size_t used = 1;
        if (b < 0x80) {
            cp = b;
        } else if ((b & 0xE0) == 0xC0) {
            if (i + 1 < len && is_cont(s[i + 1])) {
                cp = ((uint32_t)(b & 0x1F) << 6) | (s[i + 1] & 0x3F);
                used = 2;
            }
        } else if ((b & 0xF0) == 0xE0) {
            if (i + 2 < len && is_cont(s[i + 1]) && is_cont(s[i + 2])) {
                cp = ((uint32_t)(b & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) |
                     (s[i + 2] & 0x3F);
                used = 3;
            }
        } else if ((b & 0xF8) == 0xF0) {
            if (i + 3 < len && is_cont(s[i + 1]) && is_cont(s[i + 2]) && is_cont(s[i + 3])) {
                uint32_t v = ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
                             ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
                if (v <= 0x10FFFF) {
                    cp = v;
                    used = 4;
                }
            }
        } /* else: stray continuation byte or 0xF8..0xFF */
        out[n++] = cp;
        i += used;
    }
    return n;
}

int kvc_utf8_encode(uint32_t cp, uint8_t o[4]) {
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | ((cp >> 18) & 0x07));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}
