/* The one flag parser of the kvcomp subcommands. A subcommand describes its
 * options as a table (kvc_opt: spellings, kind, destination, range) and
 * kvc_opts_parse reads argv against it: "-s V", "--long V", "--long=V",
 * switches, positional arguments, -h/--help. Bad values are errors that name
 * the flag as typed, the value and the accepted range. The flags shared with
 * llama.cpp (-m -p -f -n -c -t -b --temp --top-k --top-p --seed --kv ...) are
 * one such table behind kvc_args_parse, with --help generated from it. The
 * defaults every subcommand uses are defined here once. */
#ifndef KVC_CLI_ARGS_H
#define KVC_CLI_ARGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Used when -m is not given (relative to the working directory, as `make run` sets up). */
#define KVC_DEFAULT_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"
/* Used when --text is not given (the development text, public domain). */
#define KVC_DEFAULT_TEXT "data/alice.txt"
/* -t accepts 1..KVC_MAX_THREADS; not given (0) means one thread per CPU. */
#define KVC_MAX_THREADS 1024

/* ---- option tables ----------------------------------------------------------- */

typedef enum kvc_opt_kind {
    KVC_OPT_STR,    /* dst: const char **, the value as given */
    KVC_OPT_INT,    /* dst: int *, a whole number in [lo, hi] */
    KVC_OPT_NUM,    /* dst: double *, a finite number in [lo, hi] */
    KVC_OPT_SEED,   /* dst: uint64_t *, a whole number in [0, 2^63 - 1] */
    KVC_OPT_SWITCH, /* dst: int *, set to 1; takes no value */
} kvc_opt_kind;

typedef struct kvc_opt {
    const char *s, *l; /* short and long spelling ("-t", "--threads"); either may be NULL */
    kvc_opt_kind kind;
    void *dst;
    double lo, hi; /* range of KVC_OPT_INT / KVC_OPT_NUM */
    int *seen;     /* optional: set to 1 when the option is given */
} kvc_opt;

/* Table rows: KVC_INT_OPT("-t", "--threads", &threads, 1, KVC_MAX_THREADS). */
#define KVC_STR_OPT(s_, l_, dst_) {.s = (s_), .l = (l_), .kind = KVC_OPT_STR, .dst = (dst_)}
#define KVC_INT_OPT(s_, l_, dst_, lo_, hi_)                                                       \
    {.s = (s_), .l = (l_), .kind = KVC_OPT_INT, .dst = (dst_), .lo = (lo_), .hi = (hi_)}
#define KVC_NUM_OPT(s_, l_, dst_, lo_, hi_)                                                       \
    {.s = (s_), .l = (l_), .kind = KVC_OPT_NUM, .dst = (dst_), .lo = (lo_), .hi = (hi_)}
#define KVC_SEED_OPT(s_, l_, dst_, seen_)                                                         \
    {.s = (s_), .l = (l_), .kind = KVC_OPT_SEED, .dst = (dst_), .seen = (seen_)}
#define KVC_SWITCH_OPT(l_, dst_) {.l = (l_), .kind = KVC_OPT_SWITCH, .dst = (dst_)}

enum { KVC_ARGS_OK = 0, KVC_ARGS_HELP = 1, KVC_ARGS_ERROR = 2 };

/* Parses argv[1..argc) (argv[0] is the subcommand) against opts[0..n_opts).
 * Arguments that are not options go to pos (at most max_pos; more, or any when
 * pos is NULL, are an error), their count to *n_pos. KVC_ARGS_HELP: -h or
 * --help was given (nothing printed: the caller prints its usage).
 * KVC_ARGS_ERROR: a message "kvcomp CMD: ..." naming the flag went to stderr
 * (exit 2). cmd is the subcommand as the user typed it ("eval kl"). */
int kvc_opts_parse(const char *cmd, const kvc_opt *opts, int n_opts, int argc, char **argv,
                   char **pos, int max_pos, int *n_pos);
/* The table and its length, for kvc_opts_parse(cmd, KVC_OPTS(opts), ...). */
#define KVC_OPTS(opts) (opts), (int)(sizeof(opts) / sizeof((opts)[0]))
/* The exit code of a parse that did not return KVC_ARGS_OK: 0 after printing
 * usage for --help, 2 for an error (already reported). */
int kvc_opts_exit(int rc, const char *usage);

/* ---- the flags shared with llama.cpp ----------------------------------------- */

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
    int max_file_mb;    /* --max-file-mb: the -f size limit (default 64) */
    int n_predict;      /* -n: tokens to generate; -1 until an end token or the context is full */
    int n_ctx;          /* -c: 0 = the model's training context */
    int n_threads;      /* -t: 0 = one per CPU */
    int n_batch;        /* -b: prefill chunk, 0 = 512 */
    double temp;        /* --temp: <= 0 greedy */
    int top_k;          /* --top-k: <= 0 off */
    double top_p;       /* --top-p: >= 1 off */
    uint64_t seed;      /* --seed */
    int seed_set;
    const char *kv;     /* --kv: cache method spec */
    int json;           /* --json */
    int raw;            /* --raw: no chat template */
    const char *system; /* --system: system message for the chat template */
    int n_pos;
    char *pos[64];      /* positional arguments (point into argv) */
} kvc_args;

typedef struct kvc_cmd_help {
    const char *name;    /* "run" */
    const char *usage;   /* "-m MODEL -p PROMPT [options]" */
    const char *summary; /* one paragraph */
    unsigned flags;      /* KVC_F_* accepted */
} kvc_cmd_help;

/* Fills defaults, then parses argv[1..argc) (argv[0] is the subcommand name).
 * KVC_ARGS_HELP: help was printed to stdout (exit 0). KVC_ARGS_ERROR: a message
 * naming the flag was printed to stderr (exit 2). */
int kvc_args_parse(int argc, char **argv, const kvc_cmd_help *cmd, kvc_args *a);
void kvc_args_help(const kvc_cmd_help *cmd, FILE *out);

/* Reads a text file (a regular file of at most max_mb MiB, without NUL bytes,
 * which would cut the text short) into a malloc'd NUL-terminated buffer; NULL
 * with a message on stderr naming the limit or the NUL's offset. */
char *kvc_read_text_file(const char *path, int max_mb);

#endif
