/* `kvcomp dump-kv`: runs a model over a text and saves the post-RoPE K/V of
 * every layer (include/kvcomp/kvdump.h documents the file), for kernel benchmarks
 * on real data (`kvcomp bench attn --dump FILE`). The K/V are captured with
 * the context's K/V observer (kvc_ctx_set_kv_observer) as prefill hands them
 * to the cache. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "kvcomp.h"
#include "kvcomp_eval.h"

static const char k_usage[] =
    "usage: kvcomp dump-kv [-m MODEL] [--text FILE] [--ctx N] -o FILE [--f16] [-t N] [-b N]\n\n"
    "Prefills --ctx tokens of a text (default " KVC_DEFAULT_TEXT ", 8192 tokens or the whole text)\n"
    "and writes every layer's post-RoPE K and V to FILE (format: include/kvcomp/kvdump.h; f32, or\n"
    "half precision with --f16). 8192 tokens of SmolLM2-135M take 377 MB in f32.\n";

typedef struct dump_state {
    kvc_kvdump_writer *w;
    kvc_status st;
    char err[256];
} dump_state;

static void observe(void *user, int layer, int pos0, int n, const float *k, const float *v) {
    dump_state *d = user;
    if (d->st != KVC_OK) return;
    d->st = kvc_kvdump_write(d->w, layer, pos0, n, k, v);
    if (d->st != KVC_OK) snprintf(d->err, sizeof d->err, "%s", kvc_last_error());
}

int kvc_cli_dump_kv(int argc, char **argv) {
    const char *model = KVC_DEFAULT_MODEL, *text_path = KVC_DEFAULT_TEXT, *out = NULL;
    int ctx_n = 8192, f16 = 0, threads = 0, batch = 0;
    const kvc_opt opts[] = {
        KVC_STR_OPT("-m", "--model", &model),
        KVC_STR_OPT(NULL, "--text", &text_path),
        KVC_STR_OPT("-o", "--output", &out),
        KVC_INT_OPT("-c", "--ctx", &ctx_n, 1, KVC_KVDUMP_MAX_TOKENS),
        KVC_INT_OPT("-t", "--threads", &threads, 1, KVC_MAX_THREADS),
        KVC_INT_OPT("-b", "--batch-size", &batch, 1, 65536),
        KVC_SWITCH_OPT("--f16", &f16),
    };
    int rc = kvc_opts_parse("dump-kv", KVC_OPTS(opts), argc, argv, NULL, 0, NULL);
    if (rc != KVC_ARGS_OK) return kvc_opts_exit(rc, k_usage);
    if (!out) {
        fprintf(stderr, "kvcomp dump-kv: give the output file with -o FILE\n");
        return 2;
    }
    kvc_model *m = NULL;
    kvc_ctx *ctx = NULL;
    char *text = NULL;
    size_t text_len = 0;
    int32_t *toks = NULL;
    int n_toks = 0;
    rc = 1;
    dump_state d = {NULL, KVC_OK, ""};
    if (kvc_eval_read_file(text_path, (size_t)64 << 20, &text, &text_len) != KVC_OK ||
        kvc_model_load(model, &m) != KVC_OK ||
        kvc_tokenize_all(m, text, text_len, &toks, &n_toks) != KVC_OK) {
        fprintf(stderr, "kvcomp dump-kv: %s\n", kvc_last_error());
        goto done;
    }
    if (n_toks < ctx_n) {
        fprintf(stderr, "kvcomp dump-kv: %s has %d tokens; dumping all of them (--ctx %d)\n",
                text_path, n_toks, ctx_n);
        ctx_n = n_toks;
    }
    kvc_model_info info;
    kvc_model_info_get(m, &info);
    kvc_ctx_params cp = {ctx_n, threads, batch, "full:f32"};
    kvc_kvdump_header h = {1, f16 ? KVC_KVDUMP_F16 : KVC_KVDUMP_F32, (uint32_t)info.n_layers,
                           (uint32_t)info.n_kv_heads, (uint32_t)info.head_dim, (uint32_t)ctx_n,
                           (uint32_t)info.n_heads};
    if (kvc_ctx_create(m, &cp, &ctx) != KVC_OK || kvc_kvdump_create(out, &h, &d.w) != KVC_OK) {
        fprintf(stderr, "kvcomp dump-kv: %s\n", kvc_last_error());
        goto done;
    }
    kvc_ctx_set_kv_observer(ctx, observe, &d);
    kvc_progress prog;
    kvc_progress_begin(&prog, "dump-kv", ctx_n);
    int b = batch > 0 ? batch : 512;
    kvc_status st = KVC_OK;
    for (int i = 0; i < ctx_n && st == KVC_OK && d.st == KVC_OK; i += b) {
        int n = ctx_n - i < b ? ctx_n - i : b;
        st = kvc_ctx_prefill(ctx, toks + i, n, NULL);
        kvc_progress_update(&prog, i + n);
    }
    kvc_progress_end(&prog);
    kvc_ctx_set_kv_observer(ctx, NULL, NULL);
    if (st != KVC_OK || d.st != KVC_OK) {
        fprintf(stderr, "kvcomp dump-kv: %s\n", d.st != KVC_OK ? d.err : kvc_last_error());
        kvc_kvdump_abort(d.w);
        goto done;
    }
    st = kvc_kvdump_close(d.w);
    if (st != KVC_OK) {
        fprintf(stderr, "kvcomp dump-kv: %s\n", kvc_last_error());
        goto done;
    }
    fprintf(stderr, "kvcomp dump-kv: wrote %s: %d layers x %d tokens x %d kv heads x %d (%s), "
                    "%.1f MB\n",
            out, info.n_layers, ctx_n, info.n_kv_heads, info.head_dim, f16 ? "f16" : "f32",
            (double)kvc_kvdump_file_bytes(&h) / 1e6);
    rc = 0;
done:
    kvc_ctx_free(ctx);
    free(toks);
    free(text);
    kvc_model_free(m);
    return rc;
}
