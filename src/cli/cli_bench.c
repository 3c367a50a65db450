/* `kvcomp bench bw | attn | decode` (docs/design.md §6: speed is measured by
 * benchmarks, never by timed tests): flags, tables and --json. The work is in
 * src/eval (bench_bw.c, bench_attn.c, bench_decode.c). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "kvcomp.h"
#include "kvcomp_eval.h"

#define MAX_SPECS 32
#define MAX_CTXS 32

/* "4096,64k,1M" -> token counts (k = 1024, M = 1048576). Returns 0 or 2. */
static int parse_ctx_list(const char *list, int *ctxs, int *n) {
    *n = 0;
    const char *p = list;
    while (*p) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p) goto bad;
        if (*end == 'k' || *end == 'K') v *= 1024, end++;
        else if (*end == 'm' || *end == 'M') v *= 1024 * 1024, end++;
        if (v < 1 || v > (1 << 24) || (*end != ',' && *end != '\0') || *n == MAX_CTXS) goto bad;
        ctxs[(*n)++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    if (*n > 0) return 0;
bad:
    fprintf(stderr,
            "kvcomp bench: --ctx '%s': expected up to %d comma-separated token counts in "
            "[1, 16M] (suffix k or M allowed)\n",
            list, MAX_CTXS);
    return 2;
}

static int split_specs(const char *cmd, const char *list, char **specs, int *n) {
    if (kvc_spec_list_split(list, specs, MAX_SPECS, n) != KVC_OK) {
        fprintf(stderr, "kvcomp bench %s: %s\n", cmd, kvc_last_error());
        return 2;
    }
    for (int i = 0; i < *n; i++) {
        if (kvc_method_validate(specs[i]) != KVC_OK) {
            fprintf(stderr, "kvcomp bench %s: --kv '%s': %s\n", cmd, specs[i], kvc_last_error());
            kvc_spec_list_free(specs, *n);
            return 2;
        }
    }
    return 0;
}

/* --kv-mem BYTES: "" (none) or digits with an optional K, M or G (powers of
 * 1024) into *bytes; 0 if it is not a size. */
static int parse_kv_mem(const char *t, long long *bytes) {
    char *end;
    errno = 0;
    long long v = strtoll(t, &end, 10), mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1LL << 10, end++;
    else if (*end == 'M' || *end == 'm') mul = 1LL << 20, end++;
    else if (*end == 'G' || *end == 'g') mul = 1LL << 30, end++;
    if (end == t || *end || errno || v < 1 || v > LLONG_MAX / mul) return 0;
    *bytes = v * mul;
    return 1;
}

/* Gives every method of specs that has a memory limit (`mem`: sentkv) the
 * limit; the others keep their whole cache in RAM (said on stderr). */
static int apply_kv_mem(const char *cmd, const char *kv_mem, char **specs, int n) {
    long long bytes;
    if (!parse_kv_mem(kv_mem, &bytes)) {
        fprintf(stderr, "kvcomp bench %s: --kv-mem '%s' is not a size (bytes, or a number with K, M or G)\n", cmd,
                kv_mem);
        return 2;
    }
    for (int i = 0; i < n; i++) {
        size_t len = strlen(specs[i]) + 48;
        char *with = malloc(len);
        if (!with) {
            fprintf(stderr, "kvcomp bench %s: no memory\n", cmd);
            return 1;
        }
        snprintf(with, len, "%s%smem=%lld", specs[i], strchr(specs[i], ':') ? "," : ":", bytes);
        if (kvc_method_validate(with) == KVC_OK) {
            free(specs[i]);
            specs[i] = with;
        } else {
            fprintf(stderr, "kvcomp bench %s: --kv-mem: '%s' has no memory limit and keeps its cache in RAM\n", cmd,
                    specs[i]);
            free(with);
        }
    }
    return 0;
}

/* ---- bench bw ------------------------------------------------------------------- */

static const char k_bw_usage[] =
    "usage: kvcomp bench bw [--size MIB] [--runs N] [-t N] [--cpu-clock] [--json]\n\n"
    "Measured read bandwidth: all threads sum a buffer (default 1024 MiB) with\n"
    "the widest vector loads of the active ISA; the best of --runs (default 7).\n"
    "--cpu-clock times with the process CPU clock (use with -t 1 on a loaded\n"
    "machine: time given to other processes is left out).\n";

static int bench_bw(int argc, char **argv) {
    int mib = 1024, runs = 7, threads = 0, json = 0, cpu_clock = 0;
    const kvc_opt opts[] = {
        KVC_INT_OPT(NULL, "--size", &mib, 64, 1 << 16),
        KVC_INT_OPT(NULL, "--runs", &runs, 1, 1000),
        KVC_INT_OPT("-t", "--threads", &threads, 1, KVC_MAX_THREADS),
        KVC_SWITCH_OPT("--json", &json),
        KVC_SWITCH_OPT("--cpu-clock", &cpu_clock),
    };
    int rc = kvc_opts_parse("bench bw", KVC_OPTS(opts), argc, argv, NULL, 0, NULL);
    if (rc != KVC_ARGS_OK) return kvc_opts_exit(rc, k_bw_usage);
    kvc_bench_bw_result r;
    if (kvc_bench_bw((size_t)mib << 20, runs, threads, cpu_clock, &r) != KVC_OK) {
        fprintf(stderr, "kvcomp bench bw: %s\n", kvc_last_error());
        return 1;
    }
    if (json) {
        kvc_json j;
        kvc_json_init(&j, stdout, 1);
        kvc_json_obj_begin(&j);
        kvc_json_kv_str(&j, "command", "bench bw");
        kvc_report_machine_json(&j, r.n_threads);
        kvc_json_kv_uint(&j, "bytes", r.bytes);
        kvc_json_kv_int(&j, "runs", r.runs);
        kvc_json_kv_str(&j, "clock", cpu_clock ? "process cpu" : "wall");
        kvc_json_kv_num(&j, "best_gbps", r.best_gbps);
        kvc_json_kv_num(&j, "median_gbps", r.median_gbps);
        kvc_json_obj_end(&j);
        kvc_json_finish(&j);
    } else {
        char cpu[256];
        kvc_report_cpu_name(cpu, sizeof cpu);
        printf("bench bw: %s, %d threads, %s loads, %zu MiB x %d runs\n", cpu, r.n_threads,
               kvc_isa_name(kvc_active_isa()), r.bytes >> 20, r.runs);
        printf("read bandwidth: best %.2f GB/s, median %.2f GB/s%s\n", r.best_gbps, r.median_gbps,
               cpu_clock ? " (process CPU clock)" : "");
    }
    return 0;
}

/* ---- bench attn ------------------------------------------------------------------- */

static const char k_attn_usage[] =
    "usage: kvcomp bench attn [--ctx LIST] [--kv LIST] [-m MODEL | --heads Q --kv-heads K\n"
    "                         --head-dim D] [--dump FILE [--dump-layer L]] [--layers N]\n"
    "                         [--reps N] [--min-time S] [--seed S] [--drift F] [-t N]\n"
    "                         [--cpu-clock] [--no-bw] [--json]\n\n"
    "Decode attention of one layer, all heads, at each --ctx, for every method of --kv in\n"
    "the same run (put the baseline first: ratios are against it). K/V are synthetic, or\n"
    "one layer of a `kvcomp dump-kv` file repeated to the length. The cache is filled through\n"
    "the method's append path; each timed step reads one of --layers caches in turn, so that\n"
    "steps read memory, not the CPU cache. The methods of a context take turns, one sweep\n"
    "over the layers each per round, so that a busy machine's slow phases fall on all of them\n"
    "(all the methods' caches of one context are in memory together).\n"
    "Reports time per step (median, best), the bytes the method holds per layer, effective\n"
    "GB/s, the fraction of the read bandwidth measured by `bench bw` at the start and end of\n"
    "the run (the larger), the time ratio to the first method (x first: of the medians;\n"
    "paired: the median over the rounds of the round's ratio, with its quartiles), and the\n"
    "mean time per step: unit scoring and top-k selection (thread time summed over the\n"
    "threads), the selection's wall time and the rest of the attention's wall time, and for\n"
    "selecting methods the share of each step's selection the previous step had selected.\n\n"
    "options:\n"
    "      --ctx LIST     token counts, k/M suffixes (default 4k,16k,64k,256k,1M)\n"
    "      --kv LIST      methods (default full:f16,full:bf16,full:f32)\n"
    "  -m, --model FILE   take the head shape from a model (default shape: 9 q heads,\n"
    "                     3 kv heads, head dim 64, as SmolLM2-135M)\n"
    "      --heads Q, --kv-heads K, --head-dim D   the shape by hand\n"
    "      --dump FILE    K/V from a dump (its shape wins); --dump-layer L (default middle)\n"
    "      --layers N     caches cycled per step (default: 1 GiB of f16 K/V, 1..32)\n"
    "      --reps N       at least N timed steps per layer (default 5)\n"
    "      --min-time S   and at least S seconds per method and ctx (default 0.5)\n"
    "      --seed S       synthetic K/V seed (default 1)\n"
    "      --drift F      a new query every round: each element scaled by 1 + F*u, u uniform\n"
    "                     in [-1/2, 1/2) (default 0: the same query every step, so selecting\n"
    "                     methods choose the same units every step)\n"
    "  -t, --threads N    worker threads (default: one per CPU)\n"
    "      --cpu-clock    time steps (and bench bw) with the process CPU clock: with -t 1 on\n"
    "                     a shared machine, leaves out time given to other processes\n"
    "      --no-bw        skip the bandwidth measurement (no %bw column)\n"
    "      --json         print one JSON object instead of the table\n";

static int bench_attn(int argc, char **argv) {
    const char *ctx_list = "4k,16k,64k,256k,1M", *kv = "full:f16,full:bf16,full:f32";
    const char *model = NULL, *dump = NULL;
    int heads = 9, kv_heads = 3, head_dim = 64, dump_layer = -1, layers = 0, reps = 0;
    int threads = 0, no_bw = 0, json = 0, cpu_clock = 0;
    uint64_t seed = 1;
    double min_time = 0, drift = 0;
    const kvc_opt opts[] = {
        KVC_STR_OPT(NULL, "--ctx", &ctx_list),
        KVC_STR_OPT(NULL, "--kv", &kv),
        KVC_STR_OPT("-m", "--model", &model),
        KVC_INT_OPT(NULL, "--heads", &heads, 1, 1024),
        KVC_INT_OPT(NULL, "--kv-heads", &kv_heads, 1, 1024),
        KVC_INT_OPT(NULL, "--head-dim", &head_dim, 1, 1024),
        KVC_STR_OPT(NULL, "--dump", &dump),
        KVC_INT_OPT(NULL, "--dump-layer", &dump_layer, 0, 1023),
        KVC_INT_OPT(NULL, "--layers", &layers, 1, 1024),
        KVC_INT_OPT(NULL, "--reps", &reps, 1, 100000),
        KVC_NUM_OPT(NULL, "--min-time", &min_time, 0.0, 3600.0),
        KVC_SEED_OPT(NULL, "--seed", &seed, NULL),
        KVC_NUM_OPT(NULL, "--drift", &drift, 0.0, 100.0),
        KVC_INT_OPT("-t", "--threads", &threads, 1, KVC_MAX_THREADS),
        KVC_SWITCH_OPT("--no-bw", &no_bw),
        KVC_SWITCH_OPT("--cpu-clock", &cpu_clock),
        KVC_SWITCH_OPT("--json", &json),
    };
    int rc = kvc_opts_parse("bench attn", KVC_OPTS(opts), argc, argv, NULL, 0, NULL);
    if (rc != KVC_ARGS_OK) return kvc_opts_exit(rc, k_attn_usage);
    if (heads % kv_heads != 0) {
        fprintf(stderr, "kvcomp bench attn: --heads %d is not a multiple of --kv-heads %d\n",
                heads, kv_heads);
        return 2;
    }
    int ctxs[MAX_CTXS], n_ctxs = 0, n_specs = 0;
    char *specs[MAX_SPECS];
    if (parse_ctx_list(ctx_list, ctxs, &n_ctxs) || split_specs("attn", kv, specs, &n_specs))
        return 2;
    if (model) {
        kvc_model *m = NULL;
        if (kvc_model_load(model, &m) != KVC_OK) {
            fprintf(stderr, "kvcomp bench attn: %s: %s\n", model, kvc_last_error());
            kvc_spec_list_free(specs, n_specs);
            return 1;
        }
        kvc_model_info info;
        kvc_model_info_get(m, &info);
        heads = info.n_heads, kv_heads = info.n_kv_heads, head_dim = info.head_dim;
        kvc_model_free(m);
    }
    kvc_kvdump_header dh = {0};
    if (dump) {
        if (kvc_kvdump_read_header(dump, &dh) != KVC_OK) {
            fprintf(stderr, "kvcomp bench attn: --dump: %s\n", kvc_last_error());
            kvc_spec_list_free(specs, n_specs);
            return 1;
        }
        heads = (int)dh.n_heads, kv_heads = (int)dh.n_kv_heads, head_dim = (int)dh.head_dim;
        if (dump_layer < 0) dump_layer = (int)dh.n_layers / 2;
    }
    kvc_bench_bw_result bw = {0};
    if (!no_bw && kvc_bench_bw(0, 5, threads, cpu_clock, &bw) != KVC_OK) {
        fprintf(stderr, "kvcomp bench attn: bandwidth: %s\n", kvc_last_error());
        kvc_spec_list_free(specs, n_specs);
        return 1;
    }
    kvc_bench_attn_params p = {heads, kv_heads, head_dim, ctxs, n_ctxs, threads, layers, reps,
                               min_time, seed, dump, dump_layer, bw.best_gbps,
                               cpu_clock, drift};
    kvc_bench_attn_row *rows = calloc((size_t)n_ctxs * n_specs, sizeof *rows);
    if (!rows || kvc_bench_attn_run(&p, specs, n_specs, rows) != KVC_OK) {
        fprintf(stderr, "kvcomp bench attn: %s\n", rows ? kvc_last_error() : "no memory");
        free(rows);
        kvc_spec_list_free(specs, n_specs);
        return 1;
    }
    /* Measured again at the end: on a shared or virtual machine the read bandwidth
     * changes between runs (two vCPUs on one physical core read about half as fast);
     * %bw is against the larger of the two, the conservative choice. */
    kvc_bench_bw_result bw_end = {0};
    if (!no_bw && kvc_bench_bw(0, 5, threads, cpu_clock, &bw_end) != KVC_OK) {
        fprintf(stderr, "kvcomp bench attn: bandwidth: %s\n", kvc_last_error());
        free(rows);
        kvc_spec_list_free(specs, n_specs);
        return 1;
    }
    double bw_ref = bw_end.best_gbps > bw.best_gbps ? bw_end.best_gbps : bw.best_gbps;
    for (int i = 0; i < n_ctxs * n_specs && !no_bw; i++) rows[i].frac_bw = rows[i].gbps / bw_ref;
    int n_threads = kvc_threads_resolve(threads);
    if (json) {
        kvc_json j;
        kvc_json_init(&j, stdout, 1);
        kvc_json_obj_begin(&j);
        kvc_json_kv_str(&j, "command", "bench attn");
        kvc_report_machine_json(&j, n_threads);
        kvc_json_kv_int(&j, "n_heads", heads);
        kvc_json_kv_int(&j, "n_kv_heads", kv_heads);
        kvc_json_kv_int(&j, "head_dim", head_dim);
        kvc_json_kv_str(&j, "kv_source", dump ? dump : "synthetic");
        kvc_json_kv_str(&j, "clock", cpu_clock ? "process cpu" : "wall");
        kvc_json_kv_num(&j, "drift", drift);
        if (dump) kvc_json_kv_int(&j, "dump_layer", dump_layer);
        if (no_bw) {
            kvc_json_key(&j, "bw_gbps");
            kvc_json_null(&j);
        } else {
            kvc_json_kv_num(&j, "bw_gbps", bw_ref);
            kvc_json_kv_num(&j, "bw_start_gbps", bw.best_gbps);
            kvc_json_kv_num(&j, "bw_end_gbps", bw_end.best_gbps);
        }
        kvc_json_key(&j, "rows");
        kvc_json_arr_begin(&j);
        for (int i = 0; i < n_ctxs * n_specs; i++) {
            const kvc_bench_attn_row *r = &rows[i];
            kvc_json_obj_begin(&j);
            kvc_json_kv_int(&j, "ctx", r->ctx);
            kvc_json_kv_str(&j, "spec", r->spec);
            kvc_json_kv_bool(&j, "ok", r->status == KVC_OK);
            if (r->status != KVC_OK) kvc_json_kv_str(&j, "error", r->error);
            kvc_json_kv_int(&j, "layers", r->n_layers);
            kvc_json_kv_int(&j, "steps", r->reps);
            kvc_json_kv_num(&j, "median_us", r->median_s * 1e6);
            kvc_json_kv_num(&j, "best_us", r->best_s * 1e6);
            kvc_json_kv_num(&j, "bytes_per_layer", r->held_bytes);
            kvc_json_kv_num(&j, "gbps", r->gbps);
            kvc_json_kv_num(&j, "frac_bw", r->frac_bw);
            kvc_json_kv_num(&j, "ratio_vs_first", r->ratio);
            kvc_json_kv_int(&j, "rounds", r->rounds);
            kvc_json_kv_num(&j, "paired_ratio", r->paired_ratio);
            kvc_json_kv_num(&j, "paired_ratio_p25", r->paired_p25);
            kvc_json_kv_num(&j, "paired_ratio_p75", r->paired_p75);
            kvc_json_kv_num(&j, "fill_s", r->fill_s);
            kvc_json_kv_num(&j, "score_us", r->score_s * 1e6);
            kvc_json_kv_num(&j, "topk_us", r->topk_s * 1e6);
            kvc_json_kv_num(&j, "select_wall_us", r->select_wall_s * 1e6);
            kvc_json_kv_num(&j, "topk_candidate_fraction", r->topk_cand_frac);
            kvc_json_kv_num(&j, "topk_continued_fraction", r->topk_cont_frac);
            kvc_json_kv_num(&j, "attn_us", r->attn_s * 1e6);
            kvc_report_stats_json(&j, "cache", &r->stats);
            kvc_json_obj_end(&j);
        }
        kvc_json_arr_end(&j);
        kvc_json_obj_end(&j);
        kvc_json_finish(&j);
    } else {
        char cpu[256];
        kvc_report_cpu_name(cpu, sizeof cpu);
        printf("bench attn: one layer, %d q heads / %d kv heads x %d, %s K/V | %s, %d threads, "
               "%s\n",
               heads, kv_heads, head_dim, dump ? dump : "synthetic", cpu, n_threads,
               kvc_isa_name(kvc_active_isa()));
        if (!no_bw)
            printf("read bandwidth (bench bw, this run): %.2f GB/s before, %.2f GB/s after; "
                   "%%bw is against %.2f%s\n",
                   bw.best_gbps, bw_end.best_gbps, bw_ref, cpu_clock ? " (process CPU clock)" : "");
        if (drift > 0) printf("queries: new every round, elements scaled by 1 + %g*u\n", drift);
        printf("\n%9s  %-22s %6s %6s %11s %11s %10s %7s %6s %8s %17s %9s %9s %9s %9s %6s\n", "ctx",
               "method", "layers", "steps", "median us", "best us", "MiB/layer", "GB/s", "%bw",
               "x first", "paired (p25-p75)", "score us", "topk us", "select us", "rest us", "reuse%");
        for (int i = 0; i < n_ctxs * n_specs; i++) {
            const kvc_bench_attn_row *r = &rows[i];
            if (r->status != KVC_OK) {
                printf("%9d  %-22s failed: %s\n", r->ctx, r->spec, r->error);
                continue;
            }
            printf("%9d  %-22s %6d %6d %11.1f %11.1f %10.2f %7.2f %6.1f %8.3f %5.3f (%.2f-%.2f) %9.1f "
                   "%9.1f %9.1f %9.1f %6.1f\n",
                   r->ctx, r->spec, r->n_layers, r->reps, r->median_s * 1e6, r->best_s * 1e6,
                   r->held_bytes / (1024.0 * 1024.0), r->gbps,
                   isnan(r->frac_bw) ? NAN : 100 * r->frac_bw, r->ratio, r->paired_ratio,
                   r->paired_p25, r->paired_p75, r->score_s * 1e6,
                   r->topk_s * 1e6, r->select_wall_s * 1e6, r->attn_s * 1e6, 100 * r->stats.reuse_rate);
        }
    }
    int failed = 0;
    for (int i = 0; i < n_ctxs * n_specs; i++) failed |= rows[i].status != KVC_OK;
    free(rows);
    kvc_spec_list_free(specs, n_specs);
    return failed;
}

/* ---- bench decode ------------------------------------------------------------------ */

static const char k_decode_usage[] =
    "usage: kvcomp bench decode [-m MODEL] [--ctx N] [-n N] [--kv LIST] [--text FILE]\n"
    "                           [--kv-mem BYTES] [-t N] [-b N] [--json]\n\n"
    "End-to-end speed: prefill --ctx tokens of a text (repeated if short), then -n decode\n"
    "steps; decode tokens/s with the time split into weights, attention, cache management\n"
    "and the rest, and the peak RSS of the process during the run, for every method of --kv.\n\n"
    "options:\n"
    "  -m, --model FILE   GGUF model (default " KVC_DEFAULT_MODEL ")\n"
    "      --ctx N        context tokens before decoding (default 8192)\n"
    "  -n, --n-gen N      decode steps timed (default 64)\n"
    "      --kv LIST      methods (default full:f16,full:bf16,full:f32)\n"
    "      --text FILE    text for the tokens (default " KVC_DEFAULT_TEXT ")\n"
    "      --kv-mem BYTES RAM for the sealed context of methods that have a limit (sentkv:\n"
    "                     mem=), e.g. 256M; what does not fit goes to the far tier\n"
    "  -t, --threads N    worker threads (default: one per CPU)\n"
    "  -b, --batch-size N prefill chunk (default 512)\n"
    "      --json         print one JSON object instead of the table\n";

static int bench_decode(int argc, char **argv) {
    const char *model = KVC_DEFAULT_MODEL, *kv = "full:f16,full:bf16,full:f32";
    const char *text_path = KVC_DEFAULT_TEXT, *kv_mem = NULL;
    int n_ctx = 8192, n_gen = 64, threads = 0, batch = 0, json = 0;
    const kvc_opt opts[] = {
        KVC_STR_OPT("-m", "--model", &model),
        KVC_INT_OPT("-c", "--ctx", &n_ctx, 1, 1 << 23),
        KVC_INT_OPT("-n", "--n-gen", &n_gen, 1, 1 << 20),
        KVC_STR_OPT(NULL, "--kv", &kv),
        KVC_STR_OPT(NULL, "--text", &text_path),
        KVC_STR_OPT(NULL, "--kv-mem", &kv_mem),
        KVC_INT_OPT("-t", "--threads", &threads, 1, KVC_MAX_THREADS),
        KVC_INT_OPT("-b", "--batch-size", &batch, 1, 65536),
        KVC_SWITCH_OPT("--json", &json),
    };
    int rc = kvc_opts_parse("bench decode", KVC_OPTS(opts), argc, argv, NULL, 0, NULL);
    if (rc != KVC_ARGS_OK) return kvc_opts_exit(rc, k_decode_usage);
    char *specs[MAX_SPECS];
    int n_specs = 0;
    if (split_specs("decode", kv, specs, &n_specs)) return 2;
    if (kv_mem && (rc = apply_kv_mem("decode", kv_mem, specs, n_specs)) != 0) {
        kvc_spec_list_free(specs, n_specs);
        return rc;
    }
    kvc_model *m = NULL;
    char *text = NULL;
    size_t text_len = 0;
    int32_t *toks = NULL;
    int n_toks = 0;
    rc = 1;
    kvc_bench_decode_row *rows = calloc((size_t)n_specs, sizeof *rows);
    kvc_bench_decode_params p = {n_ctx, n_gen, threads, batch};
    if (!rows) {
        fprintf(stderr, "kvcomp bench decode: no memory\n");
    } else if (kvc_eval_read_file(text_path, (size_t)64 << 20, &text, &text_len) != KVC_OK ||
               kvc_model_load(model, &m) != KVC_OK ||
               kvc_tokenize_all(m, text, text_len, &toks, &n_toks) != KVC_OK ||
               kvc_bench_decode_run(m, toks, n_toks, &p, specs, n_specs, rows) != KVC_OK) {
        fprintf(stderr, "kvcomp bench decode: %s\n", kvc_last_error());
    } else {
        rc = 0;
    }
    if (rc == 0) {
        kvc_model_info info;
        kvc_model_info_get(m, &info);
        int n_threads = kvc_threads_resolve(threads);
        if (json) {
            kvc_json j;
            kvc_json_init(&j, stdout, 1);
            kvc_json_obj_begin(&j);
            kvc_json_kv_str(&j, "command", "bench decode");
            kvc_json_kv_str(&j, "model", model);
            kvc_json_kv_str(&j, "model_name", info.name);
            kvc_report_machine_json(&j, n_threads);
            kvc_json_kv_int(&j, "ctx", n_ctx);
            kvc_json_kv_int(&j, "n_gen", n_gen);
            kvc_json_key(&j, "rows");
            kvc_json_arr_begin(&j);
            for (int k = 0; k < n_specs; k++) {
                const kvc_bench_decode_row *r = &rows[k];
                kvc_json_obj_begin(&j);
                kvc_json_kv_str(&j, "spec", r->spec);
                kvc_json_kv_bool(&j, "ok", r->status == KVC_OK);
                if (r->status != KVC_OK) kvc_json_kv_str(&j, "error", r->error);
                kvc_json_kv_num(&j, "prefill_tok_s", r->prefill_tok_s);
                kvc_json_kv_num(&j, "decode_tok_s", r->decode_tok_s);
                kvc_json_kv_num(&j, "decode_s", r->decode_s);
                kvc_json_kv_num(&j, "weights_s", r->weights_s);
                kvc_json_kv_num(&j, "attention_s", r->attention_s);
                kvc_json_kv_num(&j, "cache_s", r->cache_s);
                kvc_json_kv_num(&j, "other_s", r->other_s);
                kvc_json_kv_int(&j, "peak_rss_bytes", r->peak_rss);
                kvc_json_kv_uint(&j, "far_read_bytes", r->far_read_bytes);
                kvc_json_kv_num(&j, "far_read_s", r->far_read_s);
                kvc_json_kv_uint(&j, "far_reused_bytes", r->far_reused_bytes);
                kvc_report_stats_json(&j, "cache", &r->stats);
                kvc_json_obj_end(&j);
            }
            kvc_json_arr_end(&j);
            kvc_json_obj_end(&j);
            kvc_json_finish(&j);
        } else {
            printf("bench decode: %s | ctx %d, %d decode steps | %d threads, %s\n",
                   *info.name ? info.name : model, n_ctx, n_gen, n_threads,
                   kvc_isa_name(kvc_active_isa()));
            printf("\n%-22s %10s %10s %10s %10s %10s %10s %10s %10s %10s %11s %11s %11s\n", "method", "prefill t/s",
                   "decode t/s", "ms/token", "weights%", "attn%", "cache%", "other%", "RSS MiB", "cache MiB",
                   "far KB/tok", "near KB/tok", "far ms/tok");
            for (int k = 0; k < n_specs; k++) {
                const kvc_bench_decode_row *r = &rows[k];
                if (r->status != KVC_OK) {
                    printf("%-22s failed: %s\n", r->spec, r->error);
                    continue;
                }
                double d = r->decode_s;
                printf("%-22s %10.1f %10.2f %10.2f %10.1f %10.1f %10.1f %10.1f %10.0f %10.1f %11.1f %11.1f %11.3f\n",
                       r->spec, r->prefill_tok_s, r->decode_tok_s, 1e3 * d / n_gen,
                       100 * r->weights_s / d, 100 * r->attention_s / d, 100 * r->cache_s / d,
                       100 * r->other_s / d, r->peak_rss / 1048576.0, r->stats.in_use_bytes / 1048576.0,
                       r->far_read_bytes / 1024.0 / n_gen, r->far_reused_bytes / 1024.0 / n_gen,
                       1e3 * r->far_read_s / n_gen);
            }
            for (int k = 0; k < n_specs; k++) { /* methods with a background thread */
                const kvc_bench_decode_row *r = &rows[k];
                if (r->status != KVC_OK || !r->stats.bg_jobs) continue;
                printf("%s: background thread: %llu jobs, %.3f ms CPU per decode token; %llu step "
                       "boundaries found a job running (decode went on), %llu waits\n",
                       r->spec, (unsigned long long)r->stats.bg_jobs, 1e3 * r->stats.bg_busy_s / n_gen,
                       (unsigned long long)r->stats.bg_pending_steps,
                       (unsigned long long)r->stats.bg_waits);
            }
        }
        for (int k = 0; k < n_specs; k++) rc |= rows[k].status != KVC_OK;
    }
    free(rows);
    free(toks);
    free(text);
    kvc_model_free(m);
    kvc_spec_list_free(specs, n_specs);
    return rc;
}

int kvc_cli_bench(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "bw") == 0) return bench_bw(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "attn") == 0) return bench_attn(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "decode") == 0) return bench_decode(argc - 1, argv + 1);
    int help = argc >= 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0);
    FILE *f = help ? stdout : stderr;
    if (argc >= 2 && !help) fprintf(stderr, "kvcomp bench: unknown benchmark '%s'\n\n", argv[1]);
    fprintf(f, "usage: kvcomp bench bw|attn|decode [options]   (kvcomp bench attn --help)\n"
               "  bw      measured read bandwidth of the machine\n"
               "  attn    decode attention of one layer at up to 1M tokens, per method\n"
               "  decode  end-to-end decode tokens/s at a context length, per method\n");
    return help ? 0 : 2;
}
