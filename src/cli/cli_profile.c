/* `kvcomp profile`: the KVmix profiler (the KVmix paper, "KV Importance Analysis";
 * kvc_profile_kvmix in kvcomp.h). Ranks the layers of a model by the mean
 * gradient norms of their key and value projections over prompts from a text
 * and writes the profile that `--kv kvmix:profile=FILE` reads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "kvcomp.h"

static const char k_usage[] =
    "usage: kvcomp profile [-m MODEL] [--text FILE] -o FILE [--prompts N] [--prompt-len N]\n"
    "                      [--top F] [--seed N] [--random] [--json]\n\n"
    "KVmix layer-importance profile: forward and backward passes of the model over --prompts\n"
    "prompts of --prompt-len tokens sampled from --text (default data/alice.txt; 24 x 512),\n"
    "per layer the mean Frobenius norms of dLoss/dW_k and dLoss/dW_v; the top --top fraction\n"
    "of layers (default 0.2) get K 3 / V 4 bits and a recent-context ratio of 0.2, the rest\n"
    "2 bits and 0.1. Prints the ranking and writes FILE. --random skips the gradients and\n"
    "draws the high-bit layers at random (same average bits; the paper's ablation).\n";

int kvc_cli_profile(int argc, char **argv) {
    const char *model = KVC_DEFAULT_MODEL, *text_path = "data/alice.txt", *out = NULL;
    kvc_profile_params p = {.n_prompts = 0, .prompt_len = 0, .top_frac = -1, .seed = 0};
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long long x;
        double f;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(k_usage, stdout);
            return 0;
        }
        if (!strcmp(a, "--random")) {
            p.random = 1;
            continue;
        }
        if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "kvcomp profile: %s needs a value (or is unknown; see --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--text") || !strcmp(a, "-f")) text_path = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) out = v;
        else if (!strcmp(a, "--prompts")) {
            if (kvc_arg_int("--prompts", v, 1, 100000, &x)) return 2;
            p.n_prompts = (int)x;
        } else if (!strcmp(a, "--prompt-len")) {
            if (kvc_arg_int("--prompt-len", v, 8, 8192, &x)) return 2;
            p.prompt_len = (int)x;
        } else if (!strcmp(a, "--top")) {
            if (kvc_arg_float("--top", v, 0.0, 1.0, &f)) return 2;
            p.top_frac = f;
        } else if (!strcmp(a, "--seed")) {
            if (kvc_arg_int("--seed", v, 0, (long long)(~0ull >> 1), &x)) return 2;
            p.seed = (uint64_t)x;
        } else {
            fprintf(stderr, "kvcomp profile: unknown option '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!out) {
        fprintf(stderr, "kvcomp profile: give the output file with -o FILE\n");
        return 2;
    }
    kvc_model *m = NULL;
    char *text = NULL;
    size_t len = 0;
    int rc = 1;
    if (!p.random) {
        text = kvc_read_file(text_path, &len);
        if (!text) return 1;
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
