/* Sentence splitting over a token stream (SentKVCompress §4.1.1, Algorithm 2),
 * online. Each token carries a boundary weight S (0: not a boundary; see
 * sentence_vocab.h). From the start `current` of the open sentence, with
 * ideal = current + L, the sentence ends after the boundary token that
 * maximises
 *
 *     Score(e) = 0.7 · S(token e-1) + 0.3 · (1 − |ideal − e| / Δ)
 *
 * over the ends e in [max(ideal − Δ, current + 1), ideal + Δ]; without a
 * boundary in that window it ends at ideal (the fall-back to length for code,
 * digits, tables). Ties go to the end nearest ideal, then the earlier one.
 * The paper writes the chunk as (current, best_split) with the boundary at
 * best_split; we end the sentence after its boundary token, so that a period
 * belongs to the sentence it closes.
 *
 * Online: a sentence is decided as soon as the tokens up to ideal + Δ are
 * known, which is exactly the information the offline algorithm uses, so
 * pushing the tokens in any batches gives the offline split; finish() closes
 * the tail as the offline algorithm does at the end of the text (ideal and
 * the window clipped to n). Every step scans at most 2Δ + 1 weights and
 * advances by at least one token, L − Δ on average when boundaries are
 * regular: O(n · Δ) overall, O(n) for fixed Δ.
 *
 * Modes (the ablations of SentKVCompress §5.4): weighted (Algorithm 2),
 * flat (every boundary weighs 1: no punctuation weights), length (no
 * punctuation: every sentence is L tokens), punct (no length control: a
 * sentence ends at every boundary token, and at `cap` tokens without one). */
#ifndef KVC_KV_METHOD_SENTENCE_SPLIT_H
#define KVC_KV_METHOD_SENTENCE_SPLIT_H

#include <stdint.h>

#include "base/status.h"

typedef enum kvc_split_mode {
    KVC_SPLIT_WEIGHTED = 0,
    KVC_SPLIT_FLAT = 1,
    KVC_SPLIT_LENGTH = 2,
    KVC_SPLIT_PUNCT = 3,
} kvc_split_mode;

typedef struct kvc_splitter {
    int L, delta, cap;   /* target length, window, longest sentence in punct mode */
    kvc_split_mode mode;
    int64_t total;       /* tokens pushed */
    int64_t current;     /* start of the open sentence */
    float *w;            /* weights of tokens [current, total) from w[head] */
    int head, n_w, cap_w;
    int64_t *ends;       /* closed sentence ends (exclusive), increasing */
    int64_t n_ends, cap_ends;
} kvc_splitter;

/* L >= 1, 1 <= delta; cap (punct mode) >= 1. */
kvc_status kvc_split_init(kvc_splitter *sp, int L, int delta, int cap, kvc_split_mode mode);
void kvc_split_free(kvc_splitter *sp);
/* Forgets every token (a new sequence). */
void kvc_split_reset(kvc_splitter *sp);
/* Appends the weights of the next n tokens and closes the sentences they decide. */
kvc_status kvc_split_push(kvc_splitter *sp, const float *w, int n);
/* End of the text: closes the remaining sentences (the last ends at total). */
kvc_status kvc_split_finish(kvc_splitter *sp);

#endif
