/* `kvcomp tune`: per-layer K/V codecs for a budget (kvc_tune in
 * kvcomp/tune.h). Measures each layer's K and V sensitivity to each
 * candidate codec on a calibration window of a text, picks the codecs that
 * minimise the summed KL within the budget and writes the profile that
 * `--kv tuned:profile=FILE` runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "kvcomp.h"
#include "kvcomp_eval.h"

static const char k_usage[] =
    "usage: kvcomp tune [-m MODEL] [--text FILE] -o FILE (--budget BITS | --budget-bytes B)\n"
    "                   [--ctx 1024] [--cont 64] [--offset 0] [--candidates LIST]\n"
    "                   [--window 32] [--rot] [-t N] [-b 512] [--json]\n\n"
    "Per-layer, per-K/V codecs for a budget. The exact cache prefills --ctx tokens of --text\n"
    "(from token --offset) once and saves their K/V; then for every layer, side (K, V) and\n"
    "candidate codec a cache compressing only that side gets the saved K/V, the next --cont\n"
    "tokens run through it as one chunk, and the mean KL against the exact logits is that\n"
    "side's sensitivity. The choice minimises the summed KL with mean bits per K/V element\n"
    "(codec payload + scales, not the dense window) <= --budget (exact knapsack), or\n"
    "--budget-bytes per token of context over all layers; a comma list of budgets writes one\n"
    "profile per budget (FILE with -<budget> before its extension) from one pass. Candidates: comma list of f32, f16,\n"
    "q<bits>g<group> (KIVI quantization; default " KVC_TUNE_CANDIDATES ").\n"
    "Writes FILE for --kv tuned:profile=FILE and prints the sensitivity table. With --rot the\n"
    "probes run in rot's space (+rot, seed 1): the profile is for --kv tuned:profile=FILE+rot.\n";

enum { MAX_BUDGETS = 16 };

/* A comma list of positive budgets; their count, or 0 after a message. */
static int parse_budgets(const char *list, const char *opt, double *out) {
    int n = 0;
    for (const char *p = list;; p++) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || !(v > 0) || v > 1e9 || (*end && *end != ',') || n == MAX_BUDGETS) {
            fprintf(stderr, "kvcomp tune: %s '%s': expected up to %d positive numbers separated "
                            "by commas\n", opt, list, MAX_BUDGETS);
            return 0;
        }
        out[n++] = v;
        if (!*end) return n;
        p = end;
    }
}

int kvc_cli_tune(int argc, char **argv) {
    const char *model = KVC_DEFAULT_MODEL, *text_path = KVC_DEFAULT_TEXT, *out = NULL;
    kvc_tune_params p = {.window = -1};
    const char *budget = NULL, *budget_bytes = NULL;
    int json = 0;
    const kvc_opt opts[] = {
        KVC_STR_OPT("-m", "--model", &model),
        KVC_STR_OPT("-f", "--text", &text_path),
        KVC_STR_OPT("-o", "--output", &out),
        KVC_STR_OPT(NULL, "--budget", &budget),
        KVC_STR_OPT(NULL, "--budget-bytes", &budget_bytes),
        KVC_INT_OPT(NULL, "--ctx", &p.n_ctx, 1, 1 << 20),
        KVC_INT_OPT(NULL, "--cont", &p.n_cont, 1, 4096),
        KVC_INT_OPT(NULL, "--offset", &p.offset, 0, 1 << 30),
        KVC_STR_OPT(NULL, "--candidates", &p.candidates),
        KVC_INT_OPT(NULL, "--window", &p.window, 0, 1 << 20),
        KVC_INT_OPT("-t", "--threads", &p.n_threads, 1, KVC_MAX_THREADS),
        KVC_INT_OPT("-b", "--batch", &p.n_batch, 1, 65536),
        KVC_SWITCH_OPT("--rot", &p.rot),
        KVC_SWITCH_OPT("--json", &json),
    };
    int rc = kvc_opts_parse("tune", KVC_OPTS(opts), argc, argv, NULL, 0, NULL);
    if (rc != KVC_ARGS_OK) return kvc_opts_exit(rc, k_usage);
    if (!out || !budget == !budget_bytes) {
        fprintf(stderr, "kvcomp tune: give the output file with -o FILE and exactly one of "
                        "--budget BITS (per K/V element) or --budget-bytes B (per token)\n");
        return 2;
    }
    double budgets[MAX_BUDGETS];
    p.budgets = budgets;
    p.n_budgets = parse_budgets(budget ? budget : budget_bytes, budget ? "--budget" : "--budget-bytes", budgets);
    if (p.n_budgets <= 0) return 2;
    kvc_model *m = NULL;
    char *text = NULL;
    int32_t *toks = NULL;
    int n_toks = 0;
    rc = 1;
    if (!(text = kvc_read_text_file(text_path, 64))) return 1;
    const char *slash = strrchr(text_path, '/');
    p.source = slash ? slash + 1 : text_path;
    if (kvc_model_load(model, &m) != KVC_OK ||
        kvc_tokenize_all(m, text, strlen(text), &toks, &n_toks) != KVC_OK) {
        fprintf(stderr, "kvcomp tune: %s\n", kvc_last_error());
        goto done;
    }
    if (budget_bytes) { /* bytes per token of context over all layers -> bits per element */
        kvc_model_info mi;
        kvc_model_info_get(m, &mi);
        for (int b = 0; b < p.n_budgets; b++)
            budgets[b] = budgets[b] * 8 / (2.0 * mi.n_layers * mi.n_kv_heads * mi.head_dim);
    }
    if (kvc_tune(m, toks, n_toks, &p, out, stdout, json) != KVC_OK) {
        fprintf(stderr, "kvcomp tune: %s\n", kvc_last_error());
        goto done;
    }
    rc = 0;
done:
    kvc_model_free(m);
    free(toks);
    free(text);
    return rc;
}
