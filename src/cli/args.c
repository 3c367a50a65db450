/* The flag parser (see args.h): one table-driven loop for every subcommand,
 * checked values, the llama.cpp-style shared flags and their --help text. */
#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvcomp.h"
#include "kvcomp_eval.h"

/* ---- values ------------------------------------------------------------------ */

static int parse_int(const char *cmd, const char *flag, const char *val, long long lo, long long hi,
                     long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(val, &end, 10);
    if (*val == '\0' || *end != '\0' || errno == ERANGE) {
        fprintf(stderr, "kvcomp %s: %s: '%s' is not an integer\n", cmd, flag, val);
        return -1;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "kvcomp %s: %s: %lld is outside [%lld, %lld]\n", cmd, flag, v, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_num(const char *cmd, const char *flag, const char *val, double lo, double hi,
                     double *out) {
    char *end;
    errno = 0;
    double v = strtod(val, &end);
    if (*val == '\0' || *end != '\0' || errno == ERANGE || !isfinite(v)) {
        fprintf(stderr, "kvcomp %s: %s: '%s' is not a number\n", cmd, flag, val);
        return -1;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "kvcomp %s: %s: %g is outside [%g, %g]\n", cmd, flag, v, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* Stores val (given as `flag`) into o->dst; 0 or -1 after a message. */
static int store(const char *cmd, const kvc_opt *o, const char *flag, const char *val) {
    long long iv;
    switch (o->kind) {
    case KVC_OPT_STR:
        *(const char **)o->dst = val;
        return 0;
    case KVC_OPT_INT:
        if (parse_int(cmd, flag, val, (long long)o->lo, (long long)o->hi, &iv)) return -1;
        *(int *)o->dst = (int)iv;
        return 0;
    case KVC_OPT_NUM:
        return parse_num(cmd, flag, val, o->lo, o->hi, o->dst);
    case KVC_OPT_SEED:
        if (parse_int(cmd, flag, val, 0, INT64_MAX, &iv)) return -1;
        *(uint64_t *)o->dst = (uint64_t)iv;
        return 0;
    case KVC_OPT_SWITCH:
        *(int *)o->dst = 1;
        return 0;
    }
    return -1;
}

/* The option arg names, and where its value is: after '=' in arg, or NULL (the next argument). */
static const kvc_opt *find_opt(const kvc_opt *opts, int n, const char *arg, const char **inline_val) {
    *inline_val = NULL;
    for (int k = 0; k < n; k++) {
        const kvc_opt *o = &opts[k];
        if ((o->s && strcmp(arg, o->s) == 0) || (o->l && strcmp(arg, o->l) == 0)) return o;
        size_t ll = o->l ? strlen(o->l) : 0;
        if (o->l && o->kind != KVC_OPT_SWITCH && strncmp(arg, o->l, ll) == 0 && arg[ll] == '=') {
            *inline_val = arg + ll + 1;
            return o;
        }
    }
    return NULL;
}

int kvc_opts_parse(const char *cmd, const kvc_opt *opts, int n_opts, int argc, char **argv,
                   char **pos, int max_pos, int *n_pos) {
    if (n_pos) *n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val;
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) return KVC_ARGS_HELP;
        const kvc_opt *o = find_opt(opts, n_opts, arg, &val);
        if (!o && arg[0] == '-' && arg[1] != '\0') {
            fprintf(stderr, "kvcomp %s: unknown option '%s' (see kvcomp %s --help)\n", cmd, arg,
                    cmd);
            return KVC_ARGS_ERROR;
        }
        if (!o) {
            if (!pos || !n_pos || *n_pos >= max_pos) {
                fprintf(stderr, "kvcomp %s: unexpected argument '%s' (see kvcomp %s --help)\n", cmd,
                        arg, cmd);
                return KVC_ARGS_ERROR;
            }
            pos[(*n_pos)++] = argv[i];
            continue;
        }
        if (!val && o->kind != KVC_OPT_SWITCH) {
            if (i + 1 >= argc) {
                fprintf(stderr, "kvcomp %s: %s needs a value\n", cmd, arg);
                return KVC_ARGS_ERROR;
            }
            val = argv[++i];
        }
        const char *typed = o->s && strcmp(arg, o->s) == 0 ? o->s : o->l;
        if (store(cmd, o, typed, val) != 0) return KVC_ARGS_ERROR;
        if (o->seen) *o->seen = 1;
    }
    return KVC_ARGS_OK;
}

int kvc_opts_exit(int rc, const char *usage) {
    if (rc != KVC_ARGS_HELP) return 2;
    fputs(usage, stdout);
    return 0;
}

/* ---- the shared flags --------------------------------------------------------- */

typedef struct shared_flag {
    unsigned mask;
    kvc_opt opt;
} shared_flag;

typedef struct flag_doc {
    unsigned mask;
    const char *text;
} flag_doc;

static const flag_doc k_docs[] = {
    {KVC_F_MODEL, "  -m, --model FILE       GGUF model (default " KVC_DEFAULT_MODEL ")"},
    {KVC_F_PROMPT, "  -p, --prompt TEXT      prompt text"},
    {KVC_F_FILE, "  -f, --file FILE        read the prompt from a file\n"
                 "      --max-file-mb N    refuse a larger prompt file (default 64)"},
    {KVC_F_NPRED, "  -n, --n-predict N      tokens to generate (default 128; -1: until end or context full)"},
    {KVC_F_CTX, "  -c, --ctx-size N       context size in tokens (default: the model's training context)"},
    {KVC_F_THREADS, "  -t, --threads N        worker threads (default: one per CPU)"},
    {KVC_F_BATCH, "  -b, --batch-size N     prefill chunk in tokens (default 512)"},
    {KVC_F_SAMPLE, "      --temp T           temperature, 0 = greedy (default 0.8)\n"
                   "      --top-k K          keep the K most likely tokens, 0 = off (default 40)\n"
                   "      --top-p P          nucleus sampling, 1 = off (default 0.95)\n"
                   "      --seed S           random seed (default: from the clock)"},
    {KVC_F_KV, "      --kv SPEC          KV cache method, e.g. full:f16, kivi:bits=2 (default " KVC_DEFAULT_KV ";\n"
               "                         `kvcomp methods` lists them)"},
    {KVC_F_CHAT, "      --raw              do not apply the model's chat template to the prompt\n"
                 "      --system TEXT      system message for the chat template"},
    {KVC_F_JSON, "      --json             print the result as one JSON object"},
};

void kvc_args_help(const kvc_cmd_help *cmd, FILE *f) {
    fprintf(f, "usage: kvcomp %s %s\n\n%s\n\noptions:\n", cmd->name, cmd->usage, cmd->summary);
    for (size_t i = 0; i < sizeof k_docs / sizeof k_docs[0]; i++)
        if (cmd->flags & k_docs[i].mask) fprintf(f, "%s\n", k_docs[i].text);
    fprintf(f, "  -h, --help             show this help\n");
}

int kvc_args_parse(int argc, char **argv, const kvc_cmd_help *cmd, kvc_args *a) {
    memset(a, 0, sizeof *a);
    a->n_predict = 128;
    a->temp = 0.8;
    a->top_k = 40;
    a->top_p = 0.95;
    a->max_file_mb = 64;
    const shared_flag all[] = {
        {KVC_F_MODEL, KVC_STR_OPT("-m", "--model", &a->model)},
        {KVC_F_PROMPT, KVC_STR_OPT("-p", "--prompt", &a->prompt)},
        {KVC_F_FILE, KVC_STR_OPT("-f", "--file", &a->file)},
        {KVC_F_FILE, KVC_INT_OPT(NULL, "--max-file-mb", &a->max_file_mb, 1, 1 << 20)},
        {KVC_F_NPRED, KVC_INT_OPT("-n", "--n-predict", &a->n_predict, -1, 1 << 24)},
        {KVC_F_CTX, KVC_INT_OPT("-c", "--ctx-size", &a->n_ctx, 0, 1 << 24)},
        {KVC_F_THREADS, KVC_INT_OPT("-t", "--threads", &a->n_threads, 1, KVC_MAX_THREADS)},
        {KVC_F_BATCH, KVC_INT_OPT("-b", "--batch-size", &a->n_batch, 1, 65536)},
        {KVC_F_SAMPLE, KVC_NUM_OPT(NULL, "--temp", &a->temp, 0.0, 100.0)},
        {KVC_F_SAMPLE, KVC_INT_OPT(NULL, "--top-k", &a->top_k, 0, 1 << 24)},
        {KVC_F_SAMPLE, KVC_NUM_OPT(NULL, "--top-p", &a->top_p, 1e-6, 1.0)},
        {KVC_F_SAMPLE, KVC_SEED_OPT(NULL, "--seed", &a->seed, &a->seed_set)},
        {KVC_F_KV, KVC_STR_OPT(NULL, "--kv", &a->kv)},
        {KVC_F_CHAT, KVC_STR_OPT(NULL, "--system", &a->system)},
        {KVC_F_CHAT, KVC_SWITCH_OPT("--raw", &a->raw)},
        {KVC_F_JSON, KVC_SWITCH_OPT("--json", &a->json)},
    };
    enum { N_ALL = sizeof all / sizeof all[0] };
    kvc_opt opts[N_ALL];
    int n = 0;
    for (int k = 0; k < N_ALL; k++)
        if (cmd->flags & all[k].mask) opts[n++] = all[k].opt;
    int max_pos = cmd->flags & KVC_F_POSITIONAL ? (int)(sizeof a->pos / sizeof a->pos[0]) : 0;
    int rc = kvc_opts_parse(cmd->name, opts, n, argc, argv, a->pos, max_pos, &a->n_pos);
    if (rc == KVC_ARGS_HELP) kvc_args_help(cmd, stdout);
    return rc;
}

/* ---- files ------------------------------------------------------------------------ */

char *kvc_read_text_file(const char *path, int max_mb) {
    char *buf = NULL;
    size_t len = 0;
    kvc_status st = kvc_eval_read_file(path, (size_t)max_mb << 20, &buf, &len);
    if (st != KVC_OK) { /* regular files only: a FIFO or /dev/zero is refused */
        fprintf(stderr, "kvcomp: %s%s\n", kvc_last_error(),
                st == KVC_ERR_RANGE ? " (raise it with --max-file-mb)" : "");
        return NULL;
    }
    const char *nul = memchr(buf, '\0', len); /* C strings would end the text there */
    if (nul) {
        fprintf(stderr, "kvcomp: %s: NUL byte at offset %zu (a binary file?)\n", path,
                (size_t)(nul - buf));
        free(buf);
        return NULL;
    }
    return buf;
}
