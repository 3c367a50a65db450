/* Shared flag parsing (see args.h): one table of flags with llama.cpp's
 * spellings, checked values, and --help text generated per subcommand. */
#include "cli/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct flag_doc {
    unsigned mask;
    const char *text;
} flag_doc;

static const flag_doc k_docs[] = {
    {KVC_F_MODEL, "  -m, --model FILE       GGUF model (default models/SmolLM2-135M-Instruct.Q4_1.gguf)"},
    {KVC_F_PROMPT, "  -p, --prompt TEXT      prompt text"},
    {KVC_F_FILE, "  -f, --file FILE        read the prompt from a file"},
    {KVC_F_NPRED, "  -n, --n-predict N      tokens to generate (default 128; -1: until end or context full)"},
    {KVC_F_CTX, "  -c, --ctx-size N       context size in tokens (default: the model's training context)"},
    {KVC_F_THREADS, "  -t, --threads N        worker threads (default: one per CPU)"},
    {KVC_F_BATCH, "  -b, --batch-size N     prefill chunk in tokens (default 512)"},
    {KVC_F_SAMPLE, "      --temp T           temperature, 0 = greedy (default 0.8)\n"
                   "      --top-k K          keep the K most likely tokens, 0 = off (default 40)\n"
                   "      --top-p P          nucleus sampling, 1 = off (default 0.95)\n"
                   "      --seed S           random seed (default: from the clock)"},
    {KVC_F_KV, "      --kv SPEC          KV cache method, e.g. full:f16, kivi:bits=2 (default full:f32;\n"
               "                         `kvcomp methods` lists them)"},
    {KVC_F_CHAT, "      --raw              do not apply the model's chat template to the prompt\n"
                 "      --system TEXT      system message for the chat template"},
    {KVC_F_JSON, "      --json             print the result as one JSON object"},
};

void kvc_args_help(const kvc_cmd_help *cmd, void *out) {
    FILE *f = out;
    fprintf(f, "usage: kvcomp %s %s\n\n%s\n\noptions:\n", cmd->name, cmd->usage, cmd->summary);
    for (size_t i = 0; i < sizeof k_docs / sizeof k_docs[0]; i++)
        if (cmd->flags & k_docs[i].mask) fprintf(f, "%s\n", k_docs[i].text);
    fprintf(f, "  -h, --help             show this help\n");
}

int kvc_arg_int(const char *flag, const char *val, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(val, &end, 10);
    if (*val == '\0' || *end != '\0' || errno == ERANGE) {
        fprintf(stderr, "kvcomp: %s: '%s' is not an integer\n", flag, val);
        return -1;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "kvcomp: %s: %lld is outside [%lld, %lld]\n", flag, v, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int kvc_arg_float(const char *flag, const char *val, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(val, &end);
    if (*val == '\0' || *end != '\0' || errno == ERANGE || !isfinite(v)) {
        fprintf(stderr, "kvcomp: %s: '%s' is not a number\n", flag, val);
        return -1;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "kvcomp: %s: %g is outside [%g, %g]\n", flag, v, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

char *kvc_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "kvcomp: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        fprintf(stderr, "kvcomp: cannot read %s\n", path);
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

/* Matches argv[*i] against a short and a long spelling; "--long=value" is accepted too. */
static int is_flag(char **argv, int argc, int *i, const char *s, const char *l, const char **val,
                   int *err) {
    const char *a = argv[*i];
    size_t ll = l ? strlen(l) : 0;
    if (l && strncmp(a, l, ll) == 0 && a[ll] == '=') {
        *val = a + ll + 1;
        return 1;
    }
    if (!((s && strcmp(a, s) == 0) || (l && strcmp(a, l) == 0))) return 0;
    if (!val) return 1;
    if (*i + 1 >= argc) {
        fprintf(stderr, "kvcomp: %s needs a value\n", a);
        *err = 1;
        return 1;
    }
    *val = argv[++*i];
    return 1;
}

int kvc_args_parse(int argc, char **argv, const kvc_cmd_help *cmd, kvc_args *a) {
    memset(a, 0, sizeof *a);
    a->n_predict = 128;
    a->temp = 0.8f;
    a->top_k = 40;
    a->top_p = 0.95f;
    static char *pos_buf[64];
    a->pos = pos_buf;
    unsigned fl = cmd->flags;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL, *arg = argv[i];
        int err = 0;
        long long iv;
        double fv;
#define FLAG(mask, s, l) ((fl & (mask)) && is_flag(argv, argc, &i, s, l, &v, &err))
#define SWITCH(mask, l) ((fl & (mask)) && strcmp(arg, l) == 0)
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            kvc_args_help(cmd, stdout);
            return KVC_ARGS_HELP;
        } else if (FLAG(KVC_F_MODEL, "-m", "--model")) {
            if (!err) a->model = v;
        } else if (FLAG(KVC_F_PROMPT, "-p", "--prompt")) {
            if (!err) a->prompt = v;
        } else if (FLAG(KVC_F_FILE, "-f", "--file")) {
            if (!err) a->file = v;
        } else if (FLAG(KVC_F_NPRED, "-n", "--n-predict")) {
            if (!err && !(err = kvc_arg_int("-n", v, -1, 1 << 24, &iv))) a->n_predict = (int)iv;
        } else if (FLAG(KVC_F_CTX, "-c", "--ctx-size")) {
            if (!err && !(err = kvc_arg_int("-c", v, 0, 1 << 24, &iv))) a->n_ctx = (int)iv;
        } else if (FLAG(KVC_F_THREADS, "-t", "--threads")) {
            if (!err && !(err = kvc_arg_int("-t", v, 1, 1024, &iv))) a->n_threads = (int)iv;
        } else if (FLAG(KVC_F_BATCH, "-b", "--batch-size")) {
            if (!err && !(err = kvc_arg_int("-b", v, 1, 65536, &iv))) a->n_batch = (int)iv;
        } else if (FLAG(KVC_F_SAMPLE, NULL, "--temp")) {
            if (!err && !(err = kvc_arg_float("--temp", v, 0.0, 100.0, &fv))) a->temp = (float)fv;
        } else if (FLAG(KVC_F_SAMPLE, NULL, "--top-k")) {
            if (!err && !(err = kvc_arg_int("--top-k", v, 0, 1 << 24, &iv))) a->top_k = (int)iv;
        } else if (FLAG(KVC_F_SAMPLE, NULL, "--top-p")) {
            if (!err && !(err = kvc_arg_float("--top-p", v, 1e-6, 1.0, &fv))) a->top_p = (float)fv;
        } else if (FLAG(KVC_F_SAMPLE, NULL, "--seed")) {
            if (!err && !(err = kvc_arg_int("--seed", v, 0, INT64_MAX, &iv))) {
                a->seed = (uint64_t)iv;
                a->seed_set = 1;
            }
        } else if (FLAG(KVC_F_KV, NULL, "--kv")) {
            if (!err) a->kv = v;
        } else if (FLAG(KVC_F_CHAT, NULL, "--system")) {
            if (!err) a->system = v;
        } else if (SWITCH(KVC_F_CHAT, "--raw")) {
            a->raw = 1;
        } else if (SWITCH(KVC_F_JSON, "--json")) {
            a->json = 1;
        } else if (arg[0] == '-' && arg[1] != '\0') {
            fprintf(stderr, "kvcomp %s: unknown option %s (see kvcomp %s --help)\n", cmd->name, arg,
                    cmd->name);
            return KVC_ARGS_ERROR;
        } else if ((fl & KVC_F_POSITIONAL) && a->n_pos < 64) {
            a->pos[a->n_pos++] = argv[i];
        } else {
            fprintf(stderr, "kvcomp %s: unexpected argument '%s' (see kvcomp %s --help)\n",
                    cmd->name, arg, cmd->name);
            return KVC_ARGS_ERROR;
        }
#undef FLAG
#undef SWITCH
        if (err) return KVC_ARGS_ERROR;
    }
    return KVC_ARGS_OK;
}
