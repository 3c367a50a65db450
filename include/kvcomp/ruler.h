/* RULER-style synthetic long-context tasks (Hsieh et al., "RULER: What's the
 * Real Context Size of Your Long-Context Language Models?", 2024, §3 and its
 * task templates), generated from a real haystack text with a seed:
 *
 *   niah_single      one needle "One of the special magic numbers for KEY is: N."
 *   niah_multikey    four needles with different keys; one is asked for
 *   niah_multivalue  four needles with the same key; all values are asked for
 *   niah_multiquery  four needles with different keys; all are asked for
 *   passkey          "The pass key is N. Remember it. N is the pass key." in the
 *                    classic repeated filler ("The grass is green. ...")
 *   vt               variable tracking: VAR X1 = N, VAR X2 = VAR X1, ... (4 hops);
 *                    all names bound to N are asked for
 *
 * Needles go at random depths (sentence boundaries; or, for the one needle of
 * niah_single and passkey, at a depth the caller chooses) of a haystack cut from a
 * random paragraph of the text (wrapping around), sized so that the whole
 * prompt — counted by the caller's callback, which applies the chat template —
 * fits a token budget. Scoring is RULER's string_match_all: the fraction of
 * expected strings found (case-insensitively) in the model's output.
 * Everything is a pure function of (text, task, budget, seed, index, depth). */
#ifndef KVCOMP_RULER_H
#define KVCOMP_RULER_H

#include <stddef.h>
#include <stdint.h>

#include "kvcomp.h"

typedef enum kvc_ruler_task {
    KVC_RULER_NIAH_SINGLE = 0,
    KVC_RULER_NIAH_MULTIKEY,
    KVC_RULER_NIAH_MULTIVALUE,
    KVC_RULER_NIAH_MULTIQUERY,
    KVC_RULER_PASSKEY,
    KVC_RULER_VT,
    KVC_RULER_N_TASKS
} kvc_ruler_task;

const char *kvc_ruler_task_name(kvc_ruler_task t);
/* How many needles a sample of the task hides (0 for an unknown task). */
int kvc_ruler_task_needles(kvc_ruler_task t);
/* KVC_ERR_ARG listing the valid names for an unknown one. */
kvc_status kvc_ruler_task_parse(const char *name, kvc_ruler_task *out);

#define KVC_RULER_MAX_ANSWERS 8
#define KVC_RULER_MAX_NEEDLES 8

typedef struct kvc_ruler_sample {
    kvc_ruler_task task;
    char *prompt;              /* user message: instruction, haystack with needles, question */
    char answer_prefix[320];   /* how the assistant's reply starts (RULER's answer prefix) */
    int n_answers;
    char answers[KVC_RULER_MAX_ANSWERS][16]; /* strings expected in the output */
    int n_needles;
    double depth[KVC_RULER_MAX_NEEDLES];     /* needle position / haystack length, in [0, 1] */
    int max_new_tokens;                      /* generation budget for the answer */
    int n_tokens;                            /* prompt tokens as counted by the callback */
} kvc_ruler_sample;

/* A haystack text normalised once: whitespace runs become one space, blank
 * lines separate paragraphs ("\n"). */
typedef struct kvc_ruler_haystack {
    char *text;
    size_t len;
    size_t *para; /* paragraph start offsets */
    int n_para;
} kvc_ruler_haystack;

kvc_status kvc_ruler_haystack_init(kvc_ruler_haystack *h, const char *text, size_t len);
void kvc_ruler_haystack_free(kvc_ruler_haystack *h);

/* Counts the tokens the model sees for a user prompt and answer prefix (the
 * caller applies its chat template). */
typedef kvc_status (*kvc_ruler_count_fn)(void *user, const char *prompt,
                                         const char *answer_prefix, int *n_tokens);

/* Generates sample `index` of `task` whose prompt counts at most
 * `budget_tokens` (and as close to it as the haystack granularity allows).
 * depth: where the needle of a one-needle task (niah_single, passkey) goes, a
 * fraction of the haystack in [0, 1] (the nearest sentence boundary), or < 0
 * for a depth drawn from the seed; everything else of the sample is the same
 * either way. KVC_ERR_ARG for a depth above 1 or with a task of several
 * needles; KVC_ERR_RANGE if even an empty haystack does not fit. */
kvc_status kvc_ruler_make(const kvc_ruler_haystack *h, kvc_ruler_task task, int budget_tokens,
                          uint64_t seed, int index, double depth, kvc_ruler_count_fn count,
                          void *user, kvc_ruler_sample *out);
void kvc_ruler_sample_free(kvc_ruler_sample *s);

/* RULER string_match_all: fraction of answers found in `output`, ignoring case. */
double kvc_ruler_score(const kvc_ruler_sample *s, const char *output);

#endif
