/* RULER-style task generation and scoring (see include/kvcomp/ruler.h; templates follow
 * RULER's synthetic task configs: niah, variable tracking, and the passkey
 * retrieval task of Mohtashami & Jaggi 2023 that RULER's niah_single_1 is). */
#include "kvcomp/ruler.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "base/status.h"

static const char *const task_names[KVC_RULER_N_TASKS] = {
    "niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery", "passkey", "vt",
};

const char *kvc_ruler_task_name(kvc_ruler_task t) {
    return (unsigned)t < KVC_RULER_N_TASKS ? task_names[t] : "?";
}

kvc_status kvc_ruler_task_parse(const char *name, kvc_ruler_task *out) {
    for (int i = 0; i < KVC_RULER_N_TASKS; i++) {
        if (strcmp(name, task_names[i]) == 0) {
            *out = (kvc_ruler_task)i;
            return KVC_OK;
        }
    }
    return kvc_fail(KVC_ERR_ARG,
                    "--task '%s': unknown; valid: niah_single, niah_multikey, niah_multivalue, "
                    "niah_multiquery, passkey, vt, all",
                    name);
}

/* ---- random numbers (base/rng.h) -------------------------------------------- */

static uint64_t rng_below(uint64_t *s, uint64_t n) { return kvc_rng_next(s) % n; }

/* ---- a growable string -------------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}
static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* ---- haystack ------------------------------------------------------------------- */

void kvc_ruler_haystack_free(kvc_ruler_haystack *h) {
    free(h->text);
    free(h->para);
    memset(h, 0, sizeof *h);
}

kvc_status kvc_ruler_haystack_init(kvc_ruler_haystack *h, const char *text, size_t len) {
    memset(h, 0, sizeof *h);
    char *t = malloc(len + 1);
    KVC_CHECK(t, KVC_ERR_NOMEM, "no memory for a haystack of %zu bytes", len);
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        if (!isspace((unsigned char)text[i])) {
            t[n++] = text[i++] == '\0' ? ' ' : text[i - 1];
            continue;
        }
        int newlines = 0;
        while (i < len && isspace((unsigned char)text[i])) newlines += text[i++] == '\n';
        if (n == 0 || i == len) continue; /* no leading or trailing whitespace */
        t[n++] = newlines >= 2 ? '\n' : ' ';
    }
    t[n] = '\0';
    int n_para = 1;
    for (size_t i = 0; i < n; i++) n_para += t[i] == '\n';
    size_t *para = malloc(sizeof(size_t) * (size_t)n_para);
    if (!para || n < 64) {
        free(t);
        free(para);
        return para ? kvc_fail(KVC_ERR_ARG, "haystack text: %zu characters, need at least 64", n)
                    : kvc_fail(KVC_ERR_NOMEM, "no memory for the haystack index");
    }
    int k = 0;
    para[k++] = 0;
    for (size_t i = 0; i < n; i++)
        if (t[i] == '\n') para[k++] = i + 1;
    h->text = t;
    h->len = n;
    h->para = para;
    h->n_para = n_para;
    return KVC_OK;
}

/* ---- one sample's plan: everything drawn from the seed, independent of size ---- */

#define N_MULTI 4 /* needles / values / queries in the multi-* tasks (RULER's default) */
#define VT_HOPS 4

int kvc_ruler_task_needles(kvc_ruler_task t) {
    static const int needles[KVC_RULER_N_TASKS] = {1, N_MULTI, N_MULTI, N_MULTI, 1, VT_HOPS + 1};
    return (unsigned)t < KVC_RULER_N_TASKS ? needles[t] : 0;
}

typedef struct plan {
    kvc_ruler_task task;
    size_t start; /* haystack start offset */
    int n_needles;
    char needle[KVC_RULER_MAX_NEEDLES][256];
    double depth[KVC_RULER_MAX_NEEDLES]; /* sorted ascending before placement for vt */
    char head[512], question[512];       /* text before and after the haystack */
} plan;

static const char *const adjectives[] = {
    "amber",   "brave",   "calm",    "dusty",   "eager",   "fancy",   "gentle",  "hollow",
    "icy",     "jolly",   "keen",    "lively",  "mellow",  "noble",   "odd",     "plain",
    "quiet",   "rapid",   "silent",  "tidy",    "upbeat",  "vivid",   "wary",    "young",
    "zesty",   "bitter",  "clever",  "distant", "early",   "fierce",  "golden",  "humble",
    "idle",    "jagged",  "kind",    "lucky",   "modest",  "narrow",  "orange",  "proud",
    "rustic",  "scarlet", "tender",  "urban",   "velvet",  "wild",    "ancient", "bold",
};
static const char *const nouns[] = {
    "harbor", "lantern", "meadow",  "violin", "pepper",  "glacier", "falcon", "teapot",
    "canyon", "ribbon",  "compass", "marble", "orchard", "pebble",  "quilt",  "saddle",
    "thistle", "umbrella", "walnut", "anchor", "blanket", "candle", "dragon", "engine",
    "feather", "garden",  "hammer",  "island", "jacket",  "kettle",  "ladder", "mirror",
    "needle", "oyster",  "parcel",  "rabbit", "satchel", "tunnel",  "valley", "wagon",
    "basket", "cactus",  "dolphin", "fiddle", "goblet",  "helmet",  "igloo",  "jigsaw",
};
#define N_ADJ (sizeof adjectives / sizeof adjectives[0])
#define N_NOUN (sizeof nouns / sizeof nouns[0])

/* Distinct "adjective-noun" keys. */
static void draw_keys(uint64_t *rng, int n, char keys[][32]) {
    for (int i = 0; i < n; i++) {
        for (;;) {
            snprintf(keys[i], 32, "%s-%s", adjectives[rng_below(rng, N_ADJ)],
                     nouns[rng_below(rng, N_NOUN)]);
            int dup = 0;
            for (int j = 0; j < i; j++) dup |= strcmp(keys[i], keys[j]) == 0;
            if (!dup) break;
        }
    }
}

/* Distinct numbers of `digits` digits (no leading zero). */
static void draw_numbers(uint64_t *rng, int n, int digits, char out[][16]) {
    uint64_t lo = 1;
    for (int d = 1; d < digits; d++) lo *= 10;
    for (int i = 0; i < n; i++) {
        for (;;) {
            snprintf(out[i], 16, "%llu", (unsigned long long)(lo + rng_below(rng, 9 * lo)));
            int dup = 0;
            for (int j = 0; j < i; j++) dup |= strcmp(out[i], out[j]) == 0;
            if (!dup) break;
        }
    }
}

/* Distinct five-letter upper-case variable names. */
static void draw_names(uint64_t *rng, int n, char out[][16]) {
    for (int i = 0; i < n; i++) {
        for (;;) {
            for (int c = 0; c < 5; c++) out[i][c] = (char)('A' + rng_below(rng, 26));
            out[i][5] = '\0';
            int dup = 0;
            for (int j = 0; j < i; j++) dup |= strcmp(out[i], out[j]) == 0;
            if (!dup) break;
        }
    }
}

/* "a, b, c and d" */
static void join_list(char *dst, size_t cap, char items[][32], int n) {
    dst[0] = '\0';
    for (int i = 0; i < n; i++) {
        size_t l = strlen(dst);
        snprintf(dst + l, cap - l, "%s%s", i == 0 ? "" : (i == n - 1 ? " and " : ", "), items[i]);
    }
}

static const char niah_head[] =
    "Some special magic numbers are hidden within the following text. Make sure to memorize "
    "it. I will quiz you about the numbers afterwards.\n";

static void make_plan(const kvc_ruler_haystack *h, kvc_ruler_task task, uint64_t seed, int index,
                      plan *p, kvc_ruler_sample *s) {
    uint64_t rng = seed * 0x2545f4914f6cdd1dull ^ ((uint64_t)task << 56) ^ (uint64_t)index;
    kvc_rng_next(&rng);
    memset(p, 0, sizeof *p);
    p->task = task;
    p->n_needles = kvc_ruler_task_needles(task);
    p->start = h->para[rng_below(&rng, (uint64_t)h->n_para)];
    char keys[N_MULTI][32], vals[N_MULTI][16], query[160];
    switch (task) {
    case KVC_RULER_NIAH_SINGLE:
    case KVC_RULER_NIAH_MULTIKEY:
    case KVC_RULER_NIAH_MULTIVALUE:
    case KVC_RULER_NIAH_MULTIQUERY: {
        int n_keys = task == KVC_RULER_NIAH_SINGLE || task == KVC_RULER_NIAH_MULTIVALUE ? 1
                                                                                          : N_MULTI;
        int n_vals = task == KVC_RULER_NIAH_SINGLE ? 1 : N_MULTI;
        draw_keys(&rng, n_keys, keys);
        draw_numbers(&rng, n_vals, 7, vals);
        for (int i = 0; i < n_vals; i++)
            snprintf(p->needle[i], sizeof p->needle[i],
                     "One of the special magic numbers for %s is: %s.", keys[n_keys == 1 ? 0 : i],
                     vals[i]);
        int n_query = task == KVC_RULER_NIAH_MULTIQUERY ? N_MULTI : 1;
        join_list(query, sizeof query, keys, n_query);
        if (task == KVC_RULER_NIAH_MULTIVALUE || task == KVC_RULER_NIAH_MULTIQUERY) {
            s->n_answers = N_MULTI;
            for (int i = 0; i < N_MULTI; i++) memcpy(s->answers[i], vals[i], 16);
        } else {
            s->n_answers = 1; /* multikey: needle 0 is asked for, the others distract */
            memcpy(s->answers[0], vals[0], 16);
        }
        snprintf(p->head, sizeof p->head, "%s", niah_head);
        snprintf(p->question, sizeof p->question,
                 "\nWhat are all the special magic numbers for %s mentioned in the provided text?",
                 query);
        snprintf(s->answer_prefix, sizeof s->answer_prefix,
                 "The special magic numbers for %s mentioned in the provided text are", query);
        s->max_new_tokens = s->n_answers == 1 ? 16 : 48;
        break;
    }
    case KVC_RULER_PASSKEY: {
        draw_numbers(&rng, 1, 5, vals);
        snprintf(p->needle[0], sizeof p->needle[0],
                 "The pass key is %s. Remember it. %s is the pass key.", vals[0], vals[0]);
        s->n_answers = 1;
        memcpy(s->answers[0], vals[0], 16);
        snprintf(p->head, sizeof p->head,
                 "There is an important info hidden inside a lot of irrelevant text. Find it and "
                 "memorize it. I will quiz you about the important information there.\n\n");
        snprintf(p->question, sizeof p->question, "\n\nWhat is the pass key?");
        snprintf(s->answer_prefix, sizeof s->answer_prefix, "The pass key is");
        s->max_new_tokens = 12;
        break;
    }
    case KVC_RULER_VT:
    default: {
        char names[VT_HOPS + 1][16];
        draw_names(&rng, VT_HOPS + 1, names);
        draw_numbers(&rng, 1, 5, vals);
        snprintf(p->needle[0], sizeof p->needle[0], "VAR %s = %s.", names[0], vals[0]);
        for (int i = 1; i <= VT_HOPS; i++)
            snprintf(p->needle[i], sizeof p->needle[i], "VAR %s = VAR %s.", names[i],
                     names[i - 1]);
        s->n_answers = VT_HOPS + 1;
        for (int i = 0; i <= VT_HOPS; i++) memcpy(s->answers[i], names[i], 16);
        snprintf(p->head, sizeof p->head,
                 "Memorize and track the chain(s) of variable assignment hidden in the following "
                 "text.\n\n");
        snprintf(p->question, sizeof p->question,
                 "\nQuestion: Find all variables that are assigned the value %s in the text above.",
                 vals[0]);
        snprintf(s->answer_prefix, sizeof s->answer_prefix,
                 "Answer: According to the chain(s) of variable assignment in the text above, %d "
                 "variables are assigned the value %s, they are:",
                 VT_HOPS + 1, vals[0]);
        s->max_new_tokens = 40;
        break;
    }
    }
    for (int i = 0; i < p->n_needles; i++) p->depth[i] = kvc_rng_unit(&rng);
    if (task == KVC_RULER_VT) { /* the chain reads in order: sort depths ascending */
        for (int i = 1; i < p->n_needles; i++)
            for (int j = i; j > 0 && p->depth[j] < p->depth[j - 1]; j--) {
                double t = p->depth[j];
                p->depth[j] = p->depth[j - 1];
                p->depth[j - 1] = t;
            }
    }
}

/* ---- assembling a prompt for a haystack of `chars` characters ---------------- */

static const char noise[] =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";

/* Filler text of about `chars` characters ending at a sentence end (or a word). */
static void filler(const kvc_ruler_haystack *h, const plan *p, size_t chars, sbuf *out) {
    if (p->task == KVC_RULER_PASSKEY) {
        size_t nl = sizeof noise - 1;
        while (out->n + nl <= chars && !out->oom) sb_put(out, noise, nl);
    } else {
        size_t pos = p->start;
        while (out->n < chars && !out->oom) {
            size_t take = h->len - pos;
            if (take > chars - out->n) take = chars - out->n;
            sb_put(out, h->text + pos, take);
            pos += take;
            if (pos == h->len) {
                pos = 0;
                if (out->n < chars) sb_put(out, "\n", 1);
            }
        }
    }
    if (out->oom || out->n == 0) return;
    /* cut back to a sentence end (or paragraph break) in the last 300
     * characters, else to the last space (a poem or a long sentence) */
    size_t cut = 0, floor_at = out->n > 300 ? out->n - 300 : 0;
    for (size_t i = out->n; i > floor_at; i--) {
        char c = out->p[i - 1];
        if (c == '.' || c == '!' || c == '?' || c == '\n') {
            cut = i;
            break;
        }
    }
    if (cut == 0) {
        cut = out->n;
        while (cut > 0 && out->p[cut - 1] != ' ' && out->p[cut - 1] != '\n') cut--;
    }
    while (cut > 0 && (out->p[cut - 1] == ' ' || out->p[cut - 1] == '\n')) cut--;
    out->n = cut;
    out->p[cut] = '\0';
}

/* Sentence boundaries of the filler: 0, positions after ".!?" (and closing
 * quotes) followed by whitespace, and the end. */
static size_t *boundaries(const char *t, size_t n, int *n_b) {
    size_t cap = 64, k = 0;
    size_t *b = malloc(sizeof(size_t) * cap);
    if (!b) return NULL;
    b[k++] = 0;
    for (size_t i = 1; i < n; i++) {
        if (!(t[i] == ' ' || t[i] == '\n')) continue;
        size_t j = i;
        while (j > 0 && (t[j - 1] == '\'' || t[j - 1] == '"' || t[j - 1] == ')')) j--;
        if (j == 0 || !(t[j - 1] == '.' || t[j - 1] == '!' || t[j - 1] == '?')) continue;
        if (k + 1 >= cap) {
            size_t *nb = realloc(b, sizeof(size_t) * cap * 2);
            if (!nb) {
                free(b);
                return NULL;
            }
            b = nb;
            cap *= 2;
        }
        b[k++] = i;
    }
    b[k++] = n;
    *n_b = (int)k;
    return b;
}

/* Builds the prompt for a haystack budget of `chars`; records needle depths. */
static kvc_status build(const kvc_ruler_haystack *h, const plan *p, size_t chars,
                        kvc_ruler_sample *s, char **prompt) {
    sbuf f = {0}, out = {0};
    filler(h, p, chars, &f);
    KVC_CHECK(!f.oom, KVC_ERR_NOMEM, "no memory for a haystack of %zu characters", chars);
    const char *ft = f.p ? f.p : "";
    int n_b = 0;
    size_t *b = boundaries(ft, f.n, &n_b);
    if (!b) {
        free(f.p);
        return kvc_fail(KVC_ERR_NOMEM, "no memory for sentence boundaries");
    }
    size_t at[KVC_RULER_MAX_NEEDLES];
    for (int i = 0; i < p->n_needles; i++) { /* the boundary nearest the needle's depth */
        double want = p->depth[i] * (double)f.n;
        int best = 0;
        for (int k = 1; k < n_b; k++)
            if (fabs((double)b[k] - want) < fabs((double)b[best] - want)) best = k;
        at[i] = b[best];
        s->depth[i] = f.n ? (double)at[i] / (double)f.n : 0;
    }
    free(b);
    /* needles in order of position (ties keep needle order) */
    int order[KVC_RULER_MAX_NEEDLES];
    for (int i = 0; i < p->n_needles; i++) {
        int j = i;
        while (j > 0 && at[order[j - 1]] > at[i]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    sb_str(&out, p->head);
    size_t pos = 0;
    for (int k = 0; k < p->n_needles; k++) {
        int i = order[k];
        sb_put(&out, ft + pos, at[i] - pos);
        pos = at[i];
        if (out.n > 0 && out.p[out.n - 1] != ' ' && out.p[out.n - 1] != '\n') sb_put(&out, " ", 1);
        sb_str(&out, p->needle[i]);
        if (pos < f.n && ft[pos] != ' ' && ft[pos] != '\n') sb_put(&out, " ", 1);
    }
    sb_put(&out, ft + pos, f.n - pos);
    sb_str(&out, p->question);
    free(f.p);
    KVC_CHECK(!out.oom, KVC_ERR_NOMEM, "no memory for a prompt");
    *prompt = out.p;
    return KVC_OK;
}

void kvc_ruler_sample_free(kvc_ruler_sample *s) {
    free(s->prompt);
    s->prompt = NULL;
}

kvc_status kvc_ruler_make(const kvc_ruler_haystack *h, kvc_ruler_task task, int budget_tokens,
                          uint64_t seed, int index, double depth, kvc_ruler_count_fn count,
                          void *user, kvc_ruler_sample *out) {
    memset(out, 0, sizeof *out);
    KVC_CHECK((unsigned)task < KVC_RULER_N_TASKS, KVC_ERR_ARG, "ruler task %d: unknown", task);
    KVC_CHECK(budget_tokens > 0, KVC_ERR_ARG, "ruler budget %d tokens: must be > 0",
              budget_tokens);
    KVC_CHECK(depth < 0 || depth <= 1, KVC_ERR_ARG, "ruler depth %g: must be in [0, 1]", depth);
    KVC_CHECK(depth < 0 || kvc_ruler_task_needles(task) == 1, KVC_ERR_ARG,
              "ruler %s: a depth is for tasks of one needle (niah_single, passkey), this one has %d",
              kvc_ruler_task_name(task), kvc_ruler_task_needles(task));
    plan p;
    make_plan(h, task, seed, index, &p, out);
    if (depth >= 0) p.depth[0] = depth; /* after every draw: the sample is the same but for this */
    out->task = task;
    out->n_needles = p.n_needles;

    /* Largest haystack (in characters) whose prompt fits the budget: grow until
     * a size does not fit, then narrow the bracket [lo fits, hi does not] by
     * interpolation kept away from its ends. */
    size_t lo = 0, hi = 0; /* hi == 0: no failing size known yet */
    int lo_n = 0, hi_n = 0, n0 = 0;
    size_t guess = 0;
    for (int iter = 0; iter < 48; iter++) {
        char *prompt = NULL;
        int n = 0;
        kvc_status st = build(h, &p, guess, out, &prompt);
        if (st == KVC_OK) st = count(user, prompt, out->answer_prefix, &n);
        free(prompt);
        if (st != KVC_OK) return st;
        if (iter == 0) {
            if (n > budget_tokens)
                return kvc_fail(KVC_ERR_RANGE,
                                "ruler %s: the prompt without haystack takes %d tokens, more "
                                "than the budget of %d; raise --len",
                                kvc_ruler_task_name(task), n, budget_tokens);
            n0 = lo_n = n;
        } else if (n <= budget_tokens) {
            lo = guess;
            lo_n = n;
        } else {
            hi = guess;
            hi_n = n;
        }
        if (hi != 0 && hi - lo <= 16) break;
        size_t next;
        if (hi == 0) { /* grow: chars per token so far, 5% past the budget */
            double per_token = lo > 0 && lo_n > n0 ? (double)lo / (lo_n - n0) : 4.0;
            next = lo + (size_t)(per_token * (budget_tokens - lo_n) * 1.05) + 64;
            if (iter > 24) next = lo * 2 + 64;
        } else {
            double t = (budget_tokens - lo_n + 0.5) / (double)(hi_n - lo_n);
            size_t span = hi - lo, margin = span / 8 ? span / 8 : 1;
            next = lo + (size_t)(t * (double)span);
            if (next < lo + margin) next = lo + margin;
            if (next > hi - margin) next = hi - margin;
        }
        if (next > ((size_t)1 << 31)) next = (size_t)1 << 31; /* a count that never grows */
        guess = next;
    }
    KVC_TRY(build(h, &p, lo, out, &out->prompt)); /* the chosen size, with its depths */
    out->n_tokens = lo_n;
    return KVC_OK;
}

static int contains_ci(const char *hay, const char *needle) {
    size_t nl = strlen(needle);
    if (nl == 0) return 1;
    for (const char *p = hay; *p; p++) {
        size_t i = 0;
        while (i < nl && p[i] && tolower((unsigned char)p[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == nl) return 1;
    }
    return 0;
}

double kvc_ruler_score(const kvc_ruler_sample *s, const char *output) {
    if (s->n_answers <= 0) return 0;
    int found = 0;
    for (int i = 0; i < s->n_answers; i++) found += contains_ci(output, s->answers[i]);
    return (double)found / s->n_answers;
}
