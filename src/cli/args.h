/* Shared flag parsing for the kvcomp subcommands. Flags follow llama.cpp where
 * they mean the same thing (-m -p -f -n -c -t -b --temp --top-k --top-p
 * --seed); each subcommand says which flags it accepts (a mask of KVC_F_*),
 * and gets `--help` generated from its usage line plus those flags. Bad values
 * are errors that name the flag, the value and the accepted range. Subcommands
 * with flags of their own can reuse kvc_arg_int / kvc_arg_float. */
#ifndef KVC_CLI_ARGS_H
#define KVC_CLI_ARGS_H

#include <stddef.h>
#include <stdint.h>

/* Used when -m is not given (relative to the working directory, as `make run` sets up). */
#define KVC_DEFAULT_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"

enum {
    KVC_F_MODEL = 1u << 0,   /* -m, --model FILE */
    KVC_F_PROMPT = 1u << 1,  /* -p, --prompt TEXT */
    KVC_F_FILE = 1u << 2,    /* -f, --file FILE */
    KVC_F_NPRED = 1u << 3,   /* -n, --n-predict N */
    KVC_F_CTX = 1u << 4,     /* -c, --ctx-size N */
    KVC_F_THREADS = 1u << 5, /* -t, --threads N */
    KVC_F_BATCH = 1u << 6,   /* -b, --batch-size N */
    KVC_F_SAMPLE = 1u << 7,  /* --temp --top-k --top-p --seed */
    KVC_F_KV = 1u << 8,      /* --kv SPEC */
    KVC_F_JSON = 1u << 9,    /* --json */
    KVC_F_CHAT = 1u << 10,   /* --raw, --system TEXT */
    KVC_F_POSITIONAL = 1u << 11, /* accepts positional arguments */
};

typedef struct kvc_args {
    const char *model;  /* -m (or first positional for commands that take a path) */
    const char *prompt; /* -p */
    const char *file;   /* -f */
    int n_predict;      /* -n: tokens to generate; -1 until an end token or the context is full */
    int n_ctx;          /* -c: 0 = the model's training context */
    int n_threads;      /* -t: 0 = one per CPU */
    int n_batch;        /* -b: prefill chunk, 0 = 512 */
    float temp;         /* --temp: <= 0 greedy */
    int top_k;          /* --top-k: <= 0 off */
    float top_p;        /* --top-p: >= 1 off */
    uint64_t seed;      /* --seed */
    int seed_set;
    const char *kv;     /* --kv: cache method spec */
    int json;           /* --json */
    int raw;            /* --raw: no chat template */
    const char *system; /* --system: system message for the chat template */
    int n_pos;
    char **pos;         /* positional arguments (points into argv) */
} kvc_args;

typedef struct kvc_cmd_help {
    const char *name;    /* "run" */
    const char *usage;   /* "-m MODEL -p PROMPT [options]" */
    const char *summary; /* one paragraph */
    unsigned flags;      /* KVC_F_* accepted */
} kvc_cmd_help;

enum { KVC_ARGS_OK = 0, KVC_ARGS_HELP = 1, KVC_ARGS_ERROR = 2 };

/* Fills defaults, then parses argv[1..argc) (argv[0] is the subcommand name).
 * KVC_ARGS_HELP: help was printed to stdout (exit 0). KVC_ARGS_ERROR: a message
 * naming the flag was printed to stderr (exit 2). */
int kvc_args_parse(int argc, char **argv, const kvc_cmd_help *cmd, kvc_args *a);
void kvc_args_help(const kvc_cmd_help *cmd, void *out /* FILE* */);

/* Parse a whole decimal/float value of flag `flag` within [lo, hi]; on failure
 * print "kvcomp: FLAG: ..." to stderr and return -1. */
int kvc_arg_int(const char *flag, const char *val, long long lo, long long hi, long long *out);
int kvc_arg_float(const char *flag, const char *val, double lo, double hi, double *out);

/* Reads a whole file into a malloc'd NUL-terminated buffer; NULL with a
 * message on stderr when it cannot. */
char *kvc_read_file(const char *path, size_t *len);

#endif
