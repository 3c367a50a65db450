/* The kvcomp command: dispatches the first argument to a subcommand entry
 * point (cli.h). One row per command in k_cmds; a command's file adds its
 * row here. No subcommand or an unknown one prints the usage and exits 2. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "kvcomp.h"

typedef struct cmd {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} cmd;

static const cmd k_cmds[] = {
    {"run", kvc_cli_run, "generate text from a prompt, then print speed and cache size"},
    {"chat", kvc_cli_chat, "interactive chat with the model (reads stdin)"},
    {"inspect", kvc_cli_inspect, "print a GGUF file's metadata and tensors"},
    {"methods", kvc_cli_methods, "list the KV cache methods for --kv with their parameters"},
    {"eval", kvc_cli_eval, "quality against full:f32: eval kl (KL, top-1, ppl) | eval ruler"},
    {"bench", kvc_cli_bench, "speed: bench bw | attn (one layer, up to 1M tokens) | decode"},
    {"dump-kv", kvc_cli_dump_kv, "save a model's post-RoPE K/V for a text (for bench attn)"},
    {"profile", kvc_cli_profile, "KVmix layer importance: gradient profile -> kvmix profile file"},
    {"tune", kvc_cli_tune, "per-layer K/V codecs for a bit budget -> tuned profile file"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: kvcomp <command> [options]   (kvcomp <command> --help for its options)\n\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
        fprintf(f, "  %-10s %s\n", k_cmds[i].name, k_cmds[i].summary);
    fprintf(f, "\nCPU kernels: %s (force a lower level with KVC_ISA=scalar|avx2|avx512)\n",
            kvc_isa_name(kvc_active_isa()));
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0 || strcmp(name, "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
        if (strcmp(name, k_cmds[i].name) == 0) return k_cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "kvcomp: unknown command '%s'\n\n", name);
    usage(stderr);
    return 2;
}
