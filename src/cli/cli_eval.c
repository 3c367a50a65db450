/* `kvcomp eval kl | ruler`: quality of KV cache methods against the dense
 * f32 cache (docs/design.md §6) — flags, the terminal table, --json and --plot.
 * The work itself is in src/eval (eval_kl.c, eval_ruler.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "kvcomp.h"
#include "kvcomp_eval.h"

#define MAX_SPECS 32

typedef struct eval_opts {
    const char *model, *text, *kv, *plot, *task, *ref_in, *ref_out, *depth;
    int ctx, cont, threads, batch, json, dense_check, len, samples, verbose, windows, ref_any_build;
    long long seed;
} eval_opts;

static const char k_kl_usage[] =
    "usage: kvcomp eval kl [-m MODEL] [--text FILE] [--ctx N] [--cont N] [--windows N]\n"
    "                      [--kv A,B,...] [-t N] [-b N] [--dense-check] [--json]\n"
    "                      [--plot OUT.png] [--ref FILE [--ref-any-build] | --ref-out FILE]\n\n"
    "Prefills --ctx tokens of a text (chunks of -b attend to the compressed past), then\n"
    "teacher-forces --cont tokens through decode with every method of --kv and once with\n"
    "full:f32 as the reference. Reports, per method, what llama.cpp's perplexity tool\n"
    "reports for quantization: KL divergence (mean, median, p99, max), same-top-token rate,\n"
    "change of the true token's probability (mean, rms), perplexity ratio; plus bytes per\n"
    "token and bits per element of the cache, and the process's peak RSS during each method.\n"
    "With --windows N the whole evaluation runs on N windows spread evenly over the text:\n"
    "results per window, pooled over all scored tokens, and a 95% t-interval of the mean KL\n"
    "over the windows (the windows are the samples; the tokens of one window are not).\n"
    "--ref-out keeps the reference's logits in a file and --ref reads them back instead of\n"
    "running full:f32 again (as llama.cpp's --kl-divergence-base): a later run compares more\n"
    "methods against the same reference. The file must come from the same model, text,\n"
    "--ctx, --cont, --windows, -b, -t, kernels (ISA) and kvcomp build; anything else is\n"
    "refused, naming what differs (two builds' rounding moves the logits as much as a\n"
    "method can: KL 0.005 on Qwen2.5-Coder-1.5B).\n\n"
    "options:\n"
    "  -m, --model FILE     GGUF model (default " KVC_DEFAULT_MODEL ")\n"
    "      --text FILE      text to evaluate on (default " KVC_DEFAULT_TEXT ")\n"
    "      --ctx N          context tokens (default 8192)\n"
    "      --cont N         scored continuation tokens (default 256)\n"
    "      --windows N      continuation windows spread over the text (default 1)\n"
    "      --kv LIST        methods, comma-separated (default full:f16,full:bf16)\n"
    "  -t, --threads N      worker threads (default: one per CPU)\n"
    "  -b, --batch-size N   prefill chunk (default 512)\n"
    "      --dense-check    also compare the reference decode logits with dense prefill\n"
    "      --json           print one JSON object instead of the table\n"
    "      --plot FILE      PNG of KL mean against bytes per token (gnuplot), the Pareto\n"
    "                       front marked; log scale when KL spans more than 100x\n"
    "      --ref-out FILE   write the reference's logits to FILE (n_cont x n_vocab floats\n"
    "                       per window: 78 MB per window of 128 tokens on a 152K vocabulary)\n"
    "      --ref FILE       read the reference from FILE instead of running full:f32\n"
    "      --ref-any-build  accept a reference from another kvcomp build or ISA (to measure\n"
    "                       how far the kernels move the logits)\n";

static const char k_ruler_usage[] =
    "usage: kvcomp eval ruler [-m MODEL] [--text FILE] [--task T[,T...]|all] [--len N]\n"
    "                         [--samples N] [--seed S] [--depth D[,D...]] [--kv A,B,...]\n"
    "                         [-t N] [-b N] [--json] [--plot OUT.png] [--verbose]\n\n"
    "RULER-style retrieval tasks generated from a haystack text with a seed: needles at\n"
    "random depths, the question at the end, the model's chat template, greedy decoding of\n"
    "a few tokens, exact-match scoring (the fraction of expected values in the output).\n"
    "Every method of --kv sees the same samples.\n\n"
    "options:\n"
    "  -m, --model FILE     GGUF model (default " KVC_DEFAULT_MODEL ")\n"
    "      --text FILE      haystack text (default " KVC_DEFAULT_TEXT ")\n"
    "      --task LIST      niah_single, niah_multikey, niah_multivalue, niah_multiquery,\n"
    "                       passkey, vt, or all (default niah_single)\n"
    "      --len N          tokens per sample: prompt + answer (default 4096)\n"
    "      --samples N      samples per task (default 50)\n"
    "      --seed S         generator seed (default 1)\n"
    "      --depth LIST     needle depths, fractions of the haystack in [0, 1]: sample i's\n"
    "                       needle at the (i mod n)-th (niah_single and passkey, whose one\n"
    "                       needle can be placed; default: drawn from the seed)\n"
    "      --kv LIST        methods, comma-separated (default full:f16,full:bf16)\n"
    "  -t, --threads N      worker threads (default: one per CPU)\n"
    "  -b, --batch-size N   prefill chunk (default 512)\n"
    "      --json           print one JSON object instead of the table\n"
    "      --plot FILE      PNG of mean accuracy against bytes per token (gnuplot)\n"
    "      --verbose        print every sample's answer to stderr\n";

/* Returns 0 to go on, or the exit code (0 after --help, 2 on bad usage). */
static int parse(int argc, char **argv, eval_opts *o, int ruler) {
    const kvc_opt common[] = {
        KVC_STR_OPT("-m", "--model", &o->model),
        KVC_STR_OPT(NULL, "--text", &o->text),
        KVC_STR_OPT(NULL, "--kv", &o->kv),
        KVC_STR_OPT(NULL, "--plot", &o->plot),
        KVC_INT_OPT("-t", "--threads", &o->threads, 1, KVC_MAX_THREADS),
        KVC_INT_OPT("-b", "--batch-size", &o->batch, 1, 65536),
        KVC_SWITCH_OPT("--json", &o->json),
    };
    const kvc_opt kl[] = {
        KVC_INT_OPT("-c", "--ctx", &o->ctx, 1, 1 << 22),
        KVC_INT_OPT(NULL, "--cont", &o->cont, 1, 1 << 16),
        KVC_INT_OPT(NULL, "--windows", &o->windows, 1, 4096),
        KVC_SWITCH_OPT("--dense-check", &o->dense_check),
        KVC_STR_OPT(NULL, "--ref", &o->ref_in),
        KVC_STR_OPT(NULL, "--ref-out", &o->ref_out),
        KVC_SWITCH_OPT("--ref-any-build", &o->ref_any_build),
    };
    const kvc_opt rl[] = {
        KVC_STR_OPT(NULL, "--task", &o->task),
        KVC_INT_OPT(NULL, "--len", &o->len, 128, 1 << 22),
        KVC_INT_OPT(NULL, "--samples", &o->samples, 1, 1 << 20),
        KVC_SEED_OPT(NULL, "--seed", &o->seed, NULL),
        KVC_STR_OPT(NULL, "--depth", &o->depth),
        KVC_SWITCH_OPT("--verbose", &o->verbose),
    };
    enum { N_COMMON = sizeof common / sizeof common[0], N_OWN_MAX = 7 };
    _Static_assert(sizeof kl <= sizeof(kvc_opt) * N_OWN_MAX &&
                       sizeof rl <= sizeof(kvc_opt) * N_OWN_MAX,
                   "room for the subcommand's own options");
    kvc_opt opts[N_COMMON + N_OWN_MAX];
    const kvc_opt *own = ruler ? rl : kl;
    int n_own = ruler ? (int)(sizeof rl / sizeof rl[0]) : (int)(sizeof kl / sizeof kl[0]);
    memcpy(opts, common, sizeof common);
    memcpy(opts + N_COMMON, own, sizeof *own * (size_t)n_own);
    int rc = kvc_opts_parse(ruler ? "eval ruler" : "eval kl", opts, N_COMMON + n_own, argc, argv,
                            NULL, 0, NULL);
    return rc == KVC_ARGS_OK ? -1 : kvc_opts_exit(rc, ruler ? k_ruler_usage : k_kl_usage);
}

/* Model, text and the method list, shared by both subcommands. */
typedef struct eval_setup {
    kvc_model *m;
    kvc_model_info info;
    char *text;
    size_t text_len;
    char *specs[MAX_SPECS];
    int n_specs;
} eval_setup;

static void setup_free(eval_setup *s) {
    kvc_spec_list_free(s->specs, s->n_specs);
    free(s->text);
    kvc_model_free(s->m);
}

static int setup_open(eval_setup *s, const eval_opts *o, const char *cmd) {
    memset(s, 0, sizeof *s);
    if (kvc_spec_list_split(o->kv, s->specs, MAX_SPECS, &s->n_specs) != KVC_OK) {
        fprintf(stderr, "kvcomp eval %s: %s\n", cmd, kvc_last_error());
        return 2;
    }
    for (int i = 0; i < s->n_specs; i++) {
        if (kvc_method_validate(s->specs[i]) != KVC_OK) {
            fprintf(stderr, "kvcomp eval %s: --kv '%s': %s\n", cmd, s->specs[i], kvc_last_error());
            return 2;
        }
    }
    if (kvc_eval_read_file(o->text, (size_t)64 << 20, &s->text, &s->text_len) != KVC_OK) {
        fprintf(stderr, "kvcomp eval %s: --text: %s\n", cmd, kvc_last_error());
        return 1;
    }
    if (kvc_model_load(o->model, &s->m) != KVC_OK) {
        fprintf(stderr, "kvcomp eval %s: %s: %s\n", cmd, o->model, kvc_last_error());
        return 1;
    }
    kvc_model_info_get(s->m, &s->info);
    return 0;
}

static void print_plot(const char *path, const char *title, const char *ylabel,
                       kvc_plot_point *pts, int n, int log_y, int pareto) {
    kvc_plot pl = {title, "cache bytes per token (all layers)", ylabel, log_y, pareto};
    if (kvc_plot_png(path, &pl, pts, n) != KVC_OK)
        fprintf(stderr, "kvcomp eval: %s\n", kvc_last_error());
    else
        fprintf(stderr, "kvcomp eval: wrote %s\n", path);
}

/* ---- eval kl ------------------------------------------------------------------ */

/* KL spread over more than two decades reads better on a log axis. */
static int spans_decades(const kvc_plot_point *pts, int n) {
    double lo = INFINITY, hi = 0;
    for (int i = 0; i < n; i++)
        if (pts[i].y > 0 && isfinite(pts[i].y)) lo = fmin(lo, pts[i].y), hi = fmax(hi, pts[i].y);
    return hi > 100 * lo;
}

static void kl_table(const eval_opts *o, const eval_setup *s, const kvc_eval_kl_report *r) {
    char hb[32];
    kvc_report_human_bytes(kvc_report_held_bytes(&r->ref_stats), hb, sizeof hb);
    printf("eval kl: %s | text %s | ctx %d + cont %d tokens x %d window%s | %d threads, %s\n",
           *s->info.name ? s->info.name : o->model, o->text, r->n_ctx, r->n_cont, r->n_windows,
           r->n_windows > 1 ? "s" : "", r->n_threads, kvc_isa_name(kvc_active_isa()));
    printf("reference full:f32: ppl %.4f | %.0f bytes/token | cache %s | peak RSS %.0f MiB | "
           "%.1f s%s%s\n",
           r->ref_ppl, r->ref_stats.bytes_per_token, hb, r->ref_peak_rss / 1048576.0,
           r->ref_seconds, r->ref_loaded ? " when made | read from " : "",
           r->ref_loaded ? o->ref_in : "");
    if (r->dense_checked) {
        printf("dense check (full:f32, max |logit| %.3g):\n", r->dense_max_abs_logit);
        printf("  decode through the cache vs the same tokens as one prompt chunk: max |dlogit| "
               "%.3g, KL mean %.3g\n",
               r->decode_max_abs_dlogit, r->decode_kl_mean);
        printf("  chunked prefill through the cache vs one dense chunk:            max |dlogit| "
               "%.3g, KL mean %.3g\n",
               r->chunked_max_abs_dlogit, r->chunked_kl_mean);
    }
    printf("\n%-24s %9s %7s %6s %6s %6s %10s %21s %10s %10s %10s %7s %9s %8s %9s %8s %7s\n", "method",
           "bytes/tok", "bits/el", "x f16", "read%", "reuse%", "KL mean", "KL mean 95% CI", "KL median", "KL p99",
           "KL max", "same%", "dp mean", "dp rms", "ppl ratio", "RSS MiB", "time s");
    for (int k = 0; k < r->n_methods; k++) {
        const kvc_eval_kl_method *m = &r->methods[k];
        if (m->status != KVC_OK) {
            printf("%-24s failed: %s\n", m->spec, m->error);
            continue;
        }
        char ci[32] = "-";
        if (!isnan(m->kl_ci95_lo)) snprintf(ci, sizeof ci, "[%.3g, %.3g]", m->kl_ci95_lo, m->kl_ci95_hi);
        printf("%-24s %9.1f %7.2f %6.2f %6.1f %6.1f %10.3g %21s %10.3g %10.3g %10.3g %7.2f %9.2e %8.2e "
               "%9.5f %8.0f %7.1f\n",
               m->spec, m->stats.bytes_per_token, m->stats.bits_per_element,
               m->stats.ratio_vs_f16, 100 * m->stats.read_fraction, 100 * m->stats.reuse_rate, m->q.kl.mean, ci, m->q.kl.median, m->q.kl.p99, m->q.kl.max,
               100 * m->q.same_top, m->q.dp_mean, m->q.dp_rms, m->q.ppl_ratio,
               m->peak_rss / 1048576.0, m->seconds);
    }
    if (r->n_windows < 2) return;
    printf("\nper window: KL mean (same-top %%); reference ppl\n%-24s", "window start (token)");
    for (int w = 0; w < r->n_windows; w++)
        printf(" %18d", r->window_start[w]);
    printf("\n%-24s", "full:f32 ppl");
    for (int w = 0; w < r->n_windows; w++)
        printf(" %18.4f", r->window_ref_ppl[w]);
    printf("\n");
    for (int k = 0; k < r->n_methods; k++) {
        const kvc_eval_kl_method *m = &r->methods[k];
        if (m->status != KVC_OK) continue;
        printf("%-24s", m->spec);
        for (int w = 0; w < r->n_windows; w++)
            printf(" %10.3g (%5.1f)", m->win[w].kl.mean, 100 * m->win[w].same_top);
        printf("\n");
    }
}

/* Opens a method's JSON object: its spec as given and in canonical form,
 * whether it ran, and the error if it did not. */
static void method_json_head(kvc_json *j, const char *spec, kvc_status st, const char *error) {
    char canon[512];
    kvc_report_canonical_spec(spec, canon, sizeof canon);
    kvc_json_obj_begin(j);
    kvc_json_kv_str(j, "spec", spec);
    kvc_json_kv_str(j, "canonical", canon);
    kvc_json_kv_bool(j, "ok", st == KVC_OK);
    if (st != KVC_OK) kvc_json_kv_str(j, "error", error);
}

static void kl_json(const eval_opts *o, const eval_setup *s, const kvc_eval_kl_report *r) {
    kvc_json j;
    kvc_json_init(&j, stdout, 1);
    kvc_json_obj_begin(&j);
    kvc_json_kv_str(&j, "command", "eval kl");
    kvc_json_kv_str(&j, "model", o->model);
    kvc_json_kv_str(&j, "model_name", s->info.name);
    kvc_json_kv_str(&j, "text", o->text);
    kvc_json_kv_int(&j, "ctx", r->n_ctx);
    kvc_json_kv_int(&j, "cont", r->n_cont);
    kvc_json_key(&j, "windows");
    kvc_json_arr_begin(&j);
    for (int w = 0; w < r->n_windows; w++) {
        kvc_json_obj_begin(&j);
        kvc_json_kv_int(&j, "start", r->window_start[w]);
        kvc_json_kv_num(&j, "ref_ppl", r->window_ref_ppl[w]);
        kvc_json_obj_end(&j);
    }
    kvc_json_arr_end(&j);
    kvc_json_kv_int(&j, "batch", o->batch > 0 ? o->batch : 512);
    kvc_report_machine_json(&j, r->n_threads);
    kvc_json_key(&j, "reference");
    kvc_json_obj_begin(&j);
    kvc_json_kv_str(&j, "spec", "full:f32");
    kvc_json_kv_num(&j, "ppl", r->ref_ppl);
    kvc_json_kv_num(&j, "seconds", r->ref_seconds);
    kvc_json_kv_int(&j, "peak_rss_bytes", r->ref_peak_rss);
    kvc_report_stats_json(&j, "cache", &r->ref_stats);
    /* a reference read from a file: its seconds and RSS are those of the run that made it */
    kvc_json_key(&j, "file");
    kvc_json_str(&j, r->ref_loaded ? o->ref_in : o->ref_out);
    kvc_json_kv_bool(&j, "read_from_file", r->ref_loaded);
    kvc_json_obj_end(&j);
    kvc_json_key(&j, "dense_check");
    if (r->dense_checked) {
        kvc_json_obj_begin(&j);
        kvc_json_kv_num(&j, "max_abs_logit", r->dense_max_abs_logit);
        kvc_json_kv_num(&j, "decode_max_abs_dlogit", r->decode_max_abs_dlogit);
        kvc_json_kv_num(&j, "decode_kl_mean", r->decode_kl_mean);
        kvc_json_kv_num(&j, "chunked_max_abs_dlogit", r->chunked_max_abs_dlogit);
        kvc_json_kv_num(&j, "chunked_kl_mean", r->chunked_kl_mean);
        kvc_json_obj_end(&j);
    } else {
        kvc_json_null(&j);
    }
    kvc_json_key(&j, "methods");
    kvc_json_arr_begin(&j);
    for (int k = 0; k < r->n_methods; k++) {
        const kvc_eval_kl_method *m = &r->methods[k];
        method_json_head(&j, m->spec, m->status, m->error);
        if (m->status != KVC_OK) {
            kvc_json_obj_end(&j);
            continue;
        }
        kvc_json_key(&j, "kl");
        kvc_json_obj_begin(&j);
        kvc_json_kv_num(&j, "mean", m->q.kl.mean);
        kvc_json_kv_num(&j, "median", m->q.kl.median);
        kvc_json_kv_num(&j, "p99", m->q.kl.p99);
        kvc_json_kv_num(&j, "max", m->q.kl.max);
        kvc_json_key(&j, "mean_ci95");
        if (isnan(m->kl_ci95_lo)) {
            kvc_json_null(&j);
        } else {
            kvc_json_arr_begin(&j);
            kvc_json_num(&j, m->kl_ci95_lo);
            kvc_json_num(&j, m->kl_ci95_hi);
            kvc_json_arr_end(&j);
        }
        kvc_json_obj_end(&j);
        kvc_json_key(&j, "windows");
        kvc_json_arr_begin(&j);
        for (int w = 0; w < r->n_windows; w++) {
            kvc_json_obj_begin(&j);
            kvc_json_kv_num(&j, "kl_mean", m->win[w].kl.mean);
            kvc_json_kv_num(&j, "same_top", m->win[w].same_top);
            kvc_json_kv_num(&j, "ppl_ratio", m->win[w].ppl_ratio);
            kvc_json_obj_end(&j);
        }
        kvc_json_arr_end(&j);
        kvc_json_kv_int(&j, "peak_rss_bytes", m->peak_rss);
        kvc_json_kv_num(&j, "same_top", m->q.same_top);
        kvc_json_kv_num(&j, "dp_mean", m->q.dp_mean);
        kvc_json_kv_num(&j, "dp_rms", m->q.dp_rms);
        kvc_json_kv_num(&j, "ppl", m->q.ppl_method);
        kvc_json_kv_num(&j, "ppl_ratio", m->q.ppl_ratio);
        kvc_json_kv_num(&j, "max_abs_dlogit", m->max_abs_dlogit);
        kvc_json_kv_num(&j, "seconds", m->seconds);
        kvc_report_stats_json(&j, "cache", &m->stats);
        kvc_json_obj_end(&j);
    }
    kvc_json_arr_end(&j);
    kvc_json_obj_end(&j);
    kvc_json_finish(&j);
}

static int eval_kl(int argc, char **argv) {
    eval_opts o = {.model = KVC_DEFAULT_MODEL, .text = KVC_DEFAULT_TEXT, .kv = "full:f16,full:bf16",
                   .ctx = 8192, .cont = 256};
    int rc = parse(argc, argv, &o, 0);
    if (rc >= 0) return rc;
    if (o.ref_in && o.ref_out) {
        fprintf(stderr,
                "kvcomp eval kl: --ref and --ref-out together: read a reference or write one\n");
        return 2;
    }
    eval_setup s;
    if ((rc = setup_open(&s, &o, "kl")) != 0) {
        setup_free(&s);
        return rc;
    }
    int32_t *toks = NULL;
    int n_toks = 0;
    kvc_eval_kl_report r;
    kvc_eval_kl_params p = {o.ctx,         o.cont,    o.threads, o.batch,          o.dense_check,
                            o.windows,     o.ref_in,  o.ref_out, o.ref_any_build};
    if (kvc_tokenize_all(s.m, s.text, s.text_len, &toks, &n_toks) != KVC_OK ||
        kvc_eval_kl_run(s.m, toks, n_toks, &p, s.specs, s.n_specs, &r) != KVC_OK) {
        fprintf(stderr, "kvcomp eval kl: %s\n", kvc_last_error());
        free(toks);
        setup_free(&s);
        return 1;
    }
    if (o.json) kl_json(&o, &s, &r);
    else kl_table(&o, &s, &r);
    int failed = 0;
    if (o.plot) {
        kvc_plot_point pts[MAX_SPECS];
        int n = 0;
        for (int k = 0; k < r.n_methods; k++) {
            if (r.methods[k].status != KVC_OK) continue;
            pts[n++] = (kvc_plot_point){r.methods[k].spec, r.methods[k].stats.bytes_per_token,
                                        r.methods[k].q.kl.mean};
        }
        char title[256];
        snprintf(title, sizeof title, "eval kl: %s, ctx %d + %d, KL vs full:f32",
                 *s.info.name ? s.info.name : o.model, r.n_ctx, r.n_cont);
        print_plot(o.plot, title, "KL divergence, mean (nats)", pts, n, spans_decades(pts, n), 1);
    }
    for (int k = 0; k < r.n_methods; k++) failed |= r.methods[k].status != KVC_OK;
    kvc_eval_kl_report_free(&r);
    free(toks);
    setup_free(&s);
    return failed;
}

/* ---- eval ruler ----------------------------------------------------------------- */

/* --depth LIST: comma-separated fractions in [0, 1], at most KVC_RULER_MAX_DEPTHS. */
static int parse_depths(const char *list, double *d, int *n) {
    *n = 0;
    for (const char *p = list;;) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || (*end && *end != ',') || !(v >= 0 && v <= 1)) {
            fprintf(stderr, "kvcomp eval ruler: --depth %s: '%.*s' is not a fraction in [0, 1]\n",
                    list, (int)strcspn(p, ","), p);
            return 2;
        }
        if (*n == KVC_RULER_MAX_DEPTHS) {
            fprintf(stderr, "kvcomp eval ruler: --depth: more than %d depths\n",
                    KVC_RULER_MAX_DEPTHS);
            return 2;
        }
        d[(*n)++] = v;
        if (!*end) return 0;
        p = end + 1;
    }
}

static int parse_tasks(const char *list, kvc_ruler_task *tasks, int *n) {
    *n = 0;
    if (strcmp(list, "all") == 0) {
        for (int t = 0; t < KVC_RULER_N_TASKS; t++) tasks[(*n)++] = (kvc_ruler_task)t;
        return 0;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        kvc_ruler_task task;
        if (kvc_ruler_task_parse(t, &task) != KVC_OK) {
            fprintf(stderr, "kvcomp eval ruler: %s\n", kvc_last_error());
            return 2;
        }
        for (int i = 0; i < *n; i++)
            if (tasks[i] == task) {
                fprintf(stderr, "kvcomp eval ruler: --task %s given twice\n", t);
                return 2;
            }
        if (*n == KVC_RULER_N_TASKS) return 2;
        tasks[(*n)++] = task;
    }
    if (*n == 0) {
        fprintf(stderr, "kvcomp eval ruler: --task: empty list\n");
        return 2;
    }
    return 0;
}

static void on_sample(void *user, kvc_ruler_task task, int index, const char *spec,
                      const kvc_ruler_sample *s, const char *output, double score) {
    (void)user;
    fprintf(stderr, "[%s #%d %s] score %.2f, expected", kvc_ruler_task_name(task), index, spec,
            score);
    for (int i = 0; i < s->n_answers; i++) fprintf(stderr, " %s", s->answers[i]);
    fprintf(stderr, " | depth");
    for (int i = 0; i < s->n_needles; i++) fprintf(stderr, " %.2f", s->depth[i]);
    fprintf(stderr, " | output: ");
    kvc_json j; /* the output as a JSON string: newlines escaped, one line per sample */
    kvc_json_init(&j, stderr, 0);
    kvc_json_str(&j, output);
    kvc_json_finish(&j);
}

static double method_mean(const kvc_eval_ruler_report *r, int k) {
    double sum = 0;
    for (int t = 0; t < r->n_tasks; t++) sum += r->cells[t * r->n_methods + k].score;
    return sum / r->n_tasks;
}

static void ruler_table(const eval_opts *o, const eval_setup *s, const kvc_eval_ruler_report *r) {
    printf("eval ruler: %s | haystack %s | len %d | %d samples/task | seed %llu | %d threads",
           *s->info.name ? s->info.name : o->model, o->text, r->len, r->samples,
           (unsigned long long)r->seed, r->n_threads);
    for (int i = 0; i < r->n_depths; i++) printf("%s%g", i ? "," : " | depths ", r->depths[i]);
    printf("\n");
    printf("accuracy %% (string_match_all; perfect samples in parentheses)\n\n%-18s %7s",
           "task", "tokens");
    for (int k = 0; k < r->n_methods; k++) printf(" %20s", r->methods[k].spec);
    printf("\n");
    for (int t = 0; t < r->n_tasks; t++) {
        printf("%-18s %7.0f", kvc_ruler_task_name(r->tasks[t]), r->mean_prompt_tokens[t]);
        for (int k = 0; k < r->n_methods; k++) {
            const kvc_eval_ruler_cell *c = &r->cells[t * r->n_methods + k];
            if (r->methods[k].status != KVC_OK) printf(" %20s", "failed");
            else printf(" %12.1f (%3d/%3d)", 100 * c->score, c->n_perfect, c->n);
        }
        printf("\n");
    }
    printf("%-18s %7s", "mean", "");
    for (int k = 0; k < r->n_methods; k++) printf(" %20.1f", 100 * method_mean(r, k));
    printf("\n%-18s %7s", "bytes/token", "");
    for (int k = 0; k < r->n_methods; k++) printf(" %20.1f", r->methods[k].stats.bytes_per_token);
    printf("\n%-18s %7s", "read % per step", "");
    for (int k = 0; k < r->n_methods; k++) printf(" %20.1f", 100 * r->methods[k].stats.read_fraction);
    printf("\n%-18s %7s", "reuse %", "");
    for (int k = 0; k < r->n_methods; k++) printf(" %20.1f", 100 * r->methods[k].stats.reuse_rate);
    printf("\n%-18s %7s", "bits/element", "");
    for (int k = 0; k < r->n_methods; k++) printf(" %20.2f", r->methods[k].stats.bits_per_element);
    printf("\n%-18s %7s", "time s", "");
    for (int k = 0; k < r->n_methods; k++) printf(" %20.1f", r->methods[k].seconds);
    printf("\n");
    for (int k = 0; k < r->n_methods; k++)
        if (r->methods[k].status != KVC_OK)
            printf("%s failed: %s\n", r->methods[k].spec, r->methods[k].error);
}

static void ruler_json(const eval_opts *o, const eval_setup *s, const kvc_eval_ruler_report *r) {
    kvc_json j;
    kvc_json_init(&j, stdout, 1);
    kvc_json_obj_begin(&j);
    kvc_json_kv_str(&j, "command", "eval ruler");
    kvc_json_kv_str(&j, "model", o->model);
    kvc_json_kv_str(&j, "model_name", s->info.name);
    kvc_json_kv_str(&j, "text", o->text);
    kvc_json_kv_int(&j, "len", r->len);
    kvc_json_kv_int(&j, "samples", r->samples);
    kvc_json_kv_uint(&j, "seed", r->seed);
    kvc_json_key(&j, "depths"); /* [] : drawn from the seed */
    kvc_json_arr_begin(&j);
    for (int i = 0; i < r->n_depths; i++) kvc_json_num(&j, r->depths[i]);
    kvc_json_arr_end(&j);
    kvc_report_machine_json(&j, r->n_threads);
    kvc_json_key(&j, "tasks");
    kvc_json_arr_begin(&j);
    for (int t = 0; t < r->n_tasks; t++) {
        kvc_json_obj_begin(&j);
        kvc_json_kv_str(&j, "task", kvc_ruler_task_name(r->tasks[t]));
        kvc_json_kv_num(&j, "mean_prompt_tokens", r->mean_prompt_tokens[t]);
        kvc_json_obj_end(&j);
    }
    kvc_json_arr_end(&j);
    kvc_json_key(&j, "methods");
    kvc_json_arr_begin(&j);
    for (int k = 0; k < r->n_methods; k++) {
        const kvc_eval_ruler_method *m = &r->methods[k];
        method_json_head(&j, m->spec, m->status, m->error);
        kvc_json_kv_num(&j, "mean_accuracy", method_mean(r, k));
        kvc_json_key(&j, "accuracy");
        kvc_json_obj_begin(&j);
        for (int t = 0; t < r->n_tasks; t++) {
            const kvc_eval_ruler_cell *c = &r->cells[t * r->n_methods + k];
            kvc_json_key(&j, kvc_ruler_task_name(r->tasks[t]));
            kvc_json_obj_begin(&j);
            kvc_json_kv_num(&j, "score", c->score);
            kvc_json_kv_int(&j, "n", c->n);
            kvc_json_kv_int(&j, "perfect", c->n_perfect);
            kvc_json_obj_end(&j);
        }
        kvc_json_obj_end(&j);
        kvc_json_kv_num(&j, "seconds", m->seconds);
        kvc_report_stats_json(&j, "cache", &m->stats);
        kvc_json_obj_end(&j);
    }
    kvc_json_arr_end(&j);
    kvc_json_obj_end(&j);
    kvc_json_finish(&j);
}

static int eval_ruler(int argc, char **argv) {
    eval_opts o = {.model = KVC_DEFAULT_MODEL, .text = KVC_DEFAULT_TEXT, .kv = "full:f16,full:bf16",
                   .task = "niah_single", .len = 4096, .samples = 50, .seed = 1};
    int rc = parse(argc, argv, &o, 1);
    if (rc >= 0) return rc;
    kvc_ruler_task tasks[KVC_RULER_N_TASKS];
    int n_tasks = 0;
    if ((rc = parse_tasks(o.task, tasks, &n_tasks)) != 0) return rc;
    double depths[KVC_RULER_MAX_DEPTHS];
    int n_depths = 0;
    if (o.depth && (rc = parse_depths(o.depth, depths, &n_depths)) != 0) return rc;
    for (int t = 0; t < n_tasks && n_depths; t++)
        if (kvc_ruler_task_needles(tasks[t]) != 1) {
            fprintf(stderr, "kvcomp eval ruler: --depth places the one needle of niah_single and "
                            "passkey; --task %s has several\n",
                    kvc_ruler_task_name(tasks[t]));
            return 2;
        }
    eval_setup s;
    if ((rc = setup_open(&s, &o, "ruler")) != 0) {
        setup_free(&s);
        return rc;
    }
    kvc_eval_ruler_params p = {.len = o.len,
                               .samples = o.samples,
                               .seed = o.seed,
                               .n_threads = o.threads,
                               .n_batch = o.batch,
                               .tasks = tasks,
                               .n_tasks = n_tasks,
                               .on_sample = o.verbose ? on_sample : NULL,
                               .depths = n_depths ? depths : NULL,
                               .n_depths = n_depths};
    kvc_eval_ruler_report r;
    if (kvc_eval_ruler_run(s.m, s.text, s.text_len, &p, s.specs, s.n_specs, &r) != KVC_OK) {
        fprintf(stderr, "kvcomp eval ruler: %s\n", kvc_last_error());
        setup_free(&s);
        return 1;
    }
    if (o.json) ruler_json(&o, &s, &r);
    else ruler_table(&o, &s, &r);
    if (o.plot) {
        kvc_plot_point pts[MAX_SPECS];
        int n = 0;
        for (int k = 0; k < r.n_methods; k++)
            if (r.methods[k].status == KVC_OK)
                pts[n++] = (kvc_plot_point){r.methods[k].spec, r.methods[k].stats.bytes_per_token,
                                            100 * method_mean(&r, k)};
        char title[256];
        snprintf(title, sizeof title, "eval ruler: %s, len %d, %d samples x %d tasks",
                 *s.info.name ? s.info.name : o.model, r.len, r.samples, r.n_tasks);
        print_plot(o.plot, title, "accuracy, mean over tasks (%)", pts, n, 0, 0);
    }
    int failed = 0;
    for (int k = 0; k < r.n_methods; k++) failed |= r.methods[k].status != KVC_OK;
    kvc_eval_ruler_report_free(&r);
    setup_free(&s);
    return failed;
}

int kvc_cli_eval(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "kl") == 0) return eval_kl(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "ruler") == 0) return eval_ruler(argc - 1, argv + 1);
    FILE *f = argc >= 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)
                  ? stdout
                  : stderr;
    if (argc >= 2 && f == stderr) fprintf(stderr, "kvcomp eval: unknown evaluation '%s'\n\n", argv[1]);
    fprintf(f, "usage: kvcomp eval kl|ruler [options]   (kvcomp eval kl --help)\n"
               "  kl     KL divergence, top-1 agreement, perplexity ratio against full:f32\n"
               "  ruler  RULER-style retrieval accuracy (needles, multi-key, variable tracking)\n");
    return f == stdout ? 0 : 2;
}
