/* `kvcomp eval ruler`: RULER-style retrieval accuracy of cache methods
 * (docs/design.md §6). Each sample (ruler.h) is wrapped in the model's chat
 * template as one user message, followed by the task's answer prefix as the
 * start of the assistant's turn; the prompt is prefilled (chunks attend to the
 * compressed past, as in eval kl), then a few tokens are decoded greedily and
 * scored by string_match_all. Every method sees the same samples. */
#ifndef KVCOMP_EVAL_RULER_H
#define KVCOMP_EVAL_RULER_H

#include <stdint.h>

#include "kvcomp/ruler.h"
#include "kvcomp.h"

typedef struct kvc_eval_ruler_params {
    int len;        /* prompt + answer budget in tokens */
    int samples;    /* per task */
    uint64_t seed;
    int n_threads;  /* <= 0: one per CPU */
    int n_batch;    /* prefill chunk; 0: 512 */
    const kvc_ruler_task *tasks;
    int n_tasks;
    /* optional: called after every sample and method (for --verbose) */
    void (*on_sample)(void *user, kvc_ruler_task task, int index, const char *spec,
                      const kvc_ruler_sample *s, const char *output, double score);
    void *user;
    /* optional: sample i's needle at depths[i % n_depths] (one-needle tasks
     * only, see kvc_ruler_make); NULL: depths drawn from the seed */
    const double *depths;
    int n_depths;
} kvc_eval_ruler_params;

#define KVC_RULER_MAX_DEPTHS 64

typedef struct kvc_eval_ruler_cell {
    double score;   /* mean string_match_all over samples, in [0, 1] */
    int n;          /* samples scored */
    int n_perfect;  /* samples with every answer found */
} kvc_eval_ruler_cell;

typedef struct kvc_eval_ruler_method {
    const char *spec;      /* borrowed */
    kvc_status status;
    char error[256];
    kvc_cache_stats stats; /* after the last sample */
    double seconds;
} kvc_eval_ruler_method;

typedef struct kvc_eval_ruler_report {
    int len, samples, n_threads;
    uint64_t seed;
    int n_depths;                          /* 0: random depths */
    double depths[KVC_RULER_MAX_DEPTHS];
    int n_tasks, n_methods;
    kvc_ruler_task tasks[KVC_RULER_N_TASKS];
    double mean_prompt_tokens[KVC_RULER_N_TASKS];
    kvc_eval_ruler_method *methods;  /* [n_methods] */
    kvc_eval_ruler_cell *cells;      /* [n_tasks][n_methods] */
} kvc_eval_ruler_report;

/* haystack: the text needles are hidden in (passkey uses its own filler). */
kvc_status kvc_eval_ruler_run(kvc_model *m, const char *haystack, size_t haystack_len,
                              const kvc_eval_ruler_params *p, char *const *specs, int n_specs,
                              kvc_eval_ruler_report *rep);
void kvc_eval_ruler_report_free(kvc_eval_ruler_report *rep);

#endif
