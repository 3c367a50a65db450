/* `kvcomp profile`: the KVmix profiler (the KVmix paper, "KV Importance Analysis";
 * kvc_profile_kvmix in kvcomp_eval.h). Ranks the layers of a model by the mean
 * gradient norms of their key and value projections over prompts from a text
 * and writes the profile that `--kv kvmix:profile=FILE` reads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "kvcomp.h"
#include "kvcomp_eval.h"

static const char k_usage[] =
    "usage: kvcomp profile [-m MODEL] [--text FILE] -o FILE [--prompts N] [--prompt-len N]\n"
    "                      [--top F] [--seed N] [--random] [-t N] [--json]\n\n"
    "KVmix layer-importance profile: forward and backward passes of the model over --prompts\n"
    "prompts of --prompt-len tokens sampled from --text (default " KVC_DEFAULT_TEXT "; 24 x 512),\n"
    "per layer the mean Frobenius norms of dLoss/dW_k and dLoss/dW_v; the top --top fraction\n"
    "of layers (default 0.2) get K 3 / V 4 bits and a recent-context ratio of 0.2, the rest\n"
    "2 bits and 0.1. Prints the ranking and writes FILE. --random skips the gradients and\n"
    "draws the high-bit layers at random (same average bits; the paper's ablation).\n"
    "-t sets the threads of the passes (default: one per CPU).\n";

int kvc_cli_profile(int argc, char **argv) {
    const char *model = KVC_DEFAULT_MODEL, *text_path = KVC_DEFAULT_TEXT, *out = NULL;
    kvc_profile_params p = {.n_prompts = 0, .prompt_len = 0, .top_frac = -1, .seed = 0};
    int json = 0;
    const kvc_opt opts[] = {
        KVC_STR_OPT("-m", "--model", &model),
        KVC_STR_OPT("-f", "--text", &text_path),
        KVC_STR_OPT("-o", "--output", &out),
        KVC_INT_OPT(NULL, "--prompts", &p.n_prompts, 1, 100000),
        KVC_INT_OPT(NULL, "--prompt-len", &p.prompt_len, 8, 8192),
        KVC_NUM_OPT(NULL, "--top", &p.top_frac, 0.0, 1.0),
        KVC_SEED_OPT(NULL, "--seed", &p.seed, NULL),
        KVC_INT_OPT("-t", "--threads", &p.n_threads, 1, KVC_MAX_THREADS),
        KVC_SWITCH_OPT("--random", &p.random),
        KVC_SWITCH_OPT("--json", &json),
    };
    int rc = kvc_opts_parse("profile", KVC_OPTS(opts), argc, argv, NULL, 0, NULL);
    if (rc != KVC_ARGS_OK) return kvc_opts_exit(rc, k_usage);
    if (!out) {
        fprintf(stderr, "kvcomp profile: give the output file with -o FILE\n");
        return 2;
    }
    kvc_model *m = NULL;
    char *text = NULL;
    size_t len = 0;
    rc = 1;
    if (!p.random) {
        text = kvc_read_text_file(text_path, 64);
        if (!text) return 1;
        len = strlen(text);
    }
    const char *slash = strrchr(text_path, '/');
    p.source = slash ? slash + 1 : text_path;
    if (kvc_model_load(model, &m) != KVC_OK) {
        fprintf(stderr, "kvcomp profile: %s\n", kvc_last_error());
        goto done;
    }
    if (kvc_profile_kvmix(m, text ? text : "", len, &p, out, stdout, json) != KVC_OK) {
        fprintf(stderr, "kvcomp profile: %s\n", kvc_last_error());
        goto done;
    }
    rc = 0;
done:
    kvc_model_free(m);
    free(text);
    return rc;
}
