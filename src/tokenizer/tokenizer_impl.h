/* Internals shared by the tokenizer's files (not part of any other module's
 * contract): the vocabulary tables, the pre-tokenizer kinds, the Unicode
 * category table and the per-algorithm encoders. Behaviour follows llama.cpp's
 * llama-vocab.cpp / unicode.cpp (the GGUF reference), re-implemented in C.
 *
 *   load.c               metadata -> struct kvc_tokenizer (vocab, merges, pieces)
 *   strmap.c             string -> id map of the interned strings
 *   special.c            end-of-generation and other special tokens
 *   unicode.c            generated category table (scripts/gen_tokenizer_unicode.py)
 *   utf8.c               llama.cpp-compatible UTF-8 decoding, category lookup
 *   pretok.c             GPT-2 / Llama-3 / Qwen2 / SmolLM / default split patterns
 *   bpe.c                byte-level BPE (rank-ordered merges with a binary heap)
 *   spm.c                SentencePiece BPE (score-ordered merges, byte fallback)
 *   heap.c               the merge queue both of them use (a binary heap)
 *   tokbuf.c             the growable token buffer of the encoders
 *   encode.c             special-token partition, BOS/EOS, kvc_tokenizer_tokenize
 *   decode.c             token pieces, incremental detokenizer */
#ifndef KVC_TOKENIZER_TOKENIZER_IMPL_H
#define KVC_TOKENIZER_TOKENIZER_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

/* ---- Unicode categories (one flag per code point, as llama.cpp groups them) */
enum {
    KVC_UCAT_UNDEFINED = 0x01, /* Cn */
    KVC_UCAT_NUMBER = 0x02,    /* \p{N} */
    KVC_UCAT_LETTER = 0x04,    /* \p{L} */
    KVC_UCAT_SEPARATOR = 0x08, /* \p{Z} */
    KVC_UCAT_MARK = 0x10,      /* \p{M} */
    KVC_UCAT_PUNCT = 0x20,     /* \p{P} */
    KVC_UCAT_SYMBOL = 0x40,    /* \p{S} */
    KVC_UCAT_CONTROL = 0x80,   /* \p{C} */
    KVC_UCAT_SPACE = 0x100,    /* \s: the White_Space property (added on top of the category) */
};
extern const uint8_t kvc_ucat_latin1[256];
extern const uint32_t kvc_ucat_ranges[];
extern const int kvc_ucat_n_ranges;

/* Category flags of a code point (0 for values past U+10FFFF is never
 * returned: those are KVC_UCAT_UNDEFINED). */
unsigned kvc_ucat(uint32_t cp);

/* Decodes UTF-8 the way llama.cpp does (unicode_cpts_from_utf8): a bad lead
 * byte or a truncated/ill-formed sequence gives U+FFFD and consumes one byte;
 * overlong forms and surrogates decode to their value. Values above U+10FFFF
 * (on which llama.cpp throws) also give U+FFFD for one byte. Returns the
 * number of code points written to out (which holds at least len entries). */
size_t kvc_utf8_decode(const uint8_t *s, size_t len, uint32_t *out);
/* Encodes one code point (<= U+10FFFF); returns its byte count (1..4). */
int kvc_utf8_encode(uint32_t cp, uint8_t out[4]);
/* Length of the sequence a lead byte announces (1 for ASCII and stray bytes). */
int kvc_utf8_lead_len(uint8_t b);

/* ---- pre-tokenizers ------------------------------------------------------ */
typedef enum kvc_pretok {
    KVC_PRETOK_DEFAULT = 0, /* llama.cpp's fallback: punctuation runs, GPT-2, \p{N}+, [0-9]{3} */
    KVC_PRETOK_GPT2,        /* GPT-2 pattern */
    KVC_PRETOK_SMOLLM,      /* \p{N} isolated, then GPT-2 (also starcoder, refact) */
    KVC_PRETOK_LLAMA3,      /* Llama-3 pattern (\p{N}{1,3}), whole-word lookup first */
    KVC_PRETOK_QWEN2,       /* Qwen2 pattern (\p{N} single digits) */
} kvc_pretok;

/* Splits cps[0..n) into words; writes their lengths (in code points) to
 * lens (room for n entries) and their count to *n_words (at most n). */
kvc_status kvc_pretokenize(kvc_pretok kind, const uint32_t *cps, size_t n, size_t *lens,
                           size_t *n_words);

/* ---- vocabulary ----------------------------------------------------------- */
typedef enum kvc_tok_kind { KVC_TOK_SPM = 1, KVC_TOK_BPE = 2 } kvc_tok_kind;

/* Token attributes (llama.cpp's llama_token_attr bits). */
enum {
    KVC_TATTR_UNKNOWN = 1 << 0,
    KVC_TATTR_UNUSED = 1 << 1,
    KVC_TATTR_NORMAL = 1 << 2,
    KVC_TATTR_CONTROL = 1 << 3,
    KVC_TATTR_USER_DEFINED = 1 << 4,
    KVC_TATTR_BYTE = 1 << 5,
};

struct kvc_tokenizer {
    kvc_tok_kind kind;
    kvc_pretok pre;
    int n_vocab;       /* tokens 0..n_vocab-1 */
    int n_strings;     /* interned strings: the tokens, then merge parts that are not tokens */
    char *arena;       /* all string bytes (each NUL-terminated) */
    uint32_t *str_off; /* [n_strings] */
    uint32_t *str_len; /* [n_strings] */
    float *score;      /* [n_vocab] SentencePiece scores (0 when absent) */
    uint16_t *attr;    /* [n_vocab] KVC_TATTR_* */
    int max_token_len; /* bytes */

    /* string -> id (open addressing, slot holds id+1, 0 = empty) */
    uint32_t *smap;
    uint32_t smap_mask;

    /* BPE merges: (left id, right id) -> rank, merged id (open addressing) */
    uint64_t *mkey; /* (left << 32 | right) + 1; 0 = empty */
    uint32_t *mrank;
    int32_t *mres;
    uint32_t mmask;
    int n_merges;

    char bchar[256][2]; /* BPE: GPT-2's printable spelling of each byte (UTF-8) */
    uint8_t bchar_len[256];
    int32_t byte_sid[256];    /* BPE: id of the byte-char string of each byte (-1: none) */
    int32_t byte_single[256]; /* BPE fallback: token whose text is that single raw byte */
    int32_t byte_tok[256];    /* SPM: <0xXX> token (or the raw byte's token), -1 if none */

    int32_t *specials; /* tokens matched in the text before the algorithm runs, longest first */
    int n_specials;

    int32_t bos, eos, eot, eom, unk, pad;
    uint8_t *eog; /* [n_vocab] ends a turn or the text */
    int add_bos, add_eos, add_space_prefix, ignore_merges;

    /* token -> piece bytes (as shown with show_special = 1) */
    char *piece_arena;
    uint32_t *piece_off, *piece_len;

    char *chat_template; /* tokenizer.chat_template or NULL */
};

/* String map (strmap.c). Id of the string s[0..len) or -1. */
int32_t kvc_tok_lookup(const kvc_tokenizer *t, const char *s, size_t len);
/* Points the slot of the string `id` at it (replacing an equal string: the
 * last token with a given text wins, as in llama.cpp). */
void kvc_tok_smap_put(kvc_tokenizer *t, uint32_t id);
/* Rebuilds the map with room for `want` strings (all n_strings re-inserted). */
kvc_status kvc_tok_smap_rebuild(kvc_tokenizer *t, size_t want);

/* Load steps (special.c): find end-of-turn / FIM tokens by text
 * (fim[6]: pre, suf, mid, pad, rep, sep ids or -1), fill eog[] and the
 * attributes; then build the longest-first partition list. */
void kvc_tok_detect_specials(kvc_tokenizer *t, int32_t fim[6]);
kvc_status kvc_tok_list_specials(kvc_tokenizer *t);

/* ---- encoders (append to a growable token buffer) ------------------------- */
typedef struct kvc_tokbuf {
    int32_t *v;
    size_t n, cap;
} kvc_tokbuf;
kvc_status kvc_tokbuf_push(kvc_tokbuf *b, int32_t tok);

/* Byte-level BPE of one raw-text fragment (pre-tokenized inside). */
kvc_status kvc_bpe_encode(const kvc_tokenizer *t, const char *text, size_t len, kvc_tokbuf *out);
/* SentencePiece BPE of one fragment already escaped (spaces as U+2581). */
kvc_status kvc_spm_encode(const kvc_tokenizer *t, const char *text, size_t len, kvc_tokbuf *out);

/* Full encode into a growable buffer (the public kvc_tokenize wraps this). */
/* As kvc_tokenizer_encode; with parse_special, a control token's text becomes
 * the token only where mask (NULL: everywhere) is 1 on all its bytes. */
kvc_status kvc_tokenizer_encode_masked(const kvc_tokenizer *t, const char *text, size_t len,
                                       int add_bos, int parse_special, const uint8_t *mask,
                                       kvc_tokbuf *out);
kvc_status kvc_tokenizer_encode(const kvc_tokenizer *t, const char *text, size_t len, int add_bos,
                                int parse_special, kvc_tokbuf *out);

#endif
