/* The kvcomp command: one entry point per subcommand, each in its own file
 * (cli_<name>.c), dispatched by main.c. Each returns the process exit code
 * (0 ok, 1 failure with a message on stderr, 2 bad usage). The CLI uses only
 * the public API (kvcomp.h) and the eval API (kvcomp_eval.h). */
#ifndef KVC_CLI_H
#define KVC_CLI_H

int kvc_cli_run(int argc, char **argv);     /* cli_run.c: prompt -> streamed text + summary */
int kvc_cli_chat(int argc, char **argv);    /* cli_chat.c: interactive chat */
int kvc_cli_inspect(int argc, char **argv); /* cli_inspect.c: GGUF metadata and tensors */
int kvc_cli_methods(int argc, char **argv); /* cli_methods.c: list cache methods */
int kvc_cli_eval(int argc, char **argv);    /* cli_eval.c: eval kl | eval ruler */
int kvc_cli_bench(int argc, char **argv);   /* cli_bench.c: bench bw | attn | decode */
int kvc_cli_dump_kv(int argc, char **argv); /* cli_dump_kv.c: save a model's K/V for a text */
int kvc_cli_profile(int argc, char **argv); /* cli_profile.c: KVmix layer-importance profile */
int kvc_cli_tune(int argc, char **argv);    /* cli_tune.c: per-layer K/V codecs for a budget */

#endif
