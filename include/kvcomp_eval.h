/* kvcomp's measuring tools — the eval API, for programs such as the kvcomp
 * command: quality against the dense reference (KL, RULER-style tasks),
 * benchmarks (read bandwidth, decode attention, end-to-end decode), K/V dumps,
 * the KVmix profiler and `kvcomp tune`, GGUF inspection, method listings, and
 * the report pieces they print with (JSON writer, progress line, plots). Built
 * on kvcomp.h; one header per tool under kvcomp/, all included here. */
#ifndef KVCOMP_EVAL_H
#define KVCOMP_EVAL_H

#include <stdio.h>

#include "kvcomp.h"
#include "kvcomp/bench_attn.h"
#include "kvcomp/bench_bw.h"
#include "kvcomp/bench_decode.h"
#include "kvcomp/eval_input.h"
#include "kvcomp/eval_kl.h"
#include "kvcomp/eval_ruler.h"
#include "kvcomp/json.h"
#include "kvcomp/kvdump.h"
#include "kvcomp/metrics.h"
#include "kvcomp/plot.h"
#include "kvcomp/progress.h"
#include "kvcomp/report.h"
#include "kvcomp/ruler.h"
#include "kvcomp/tune.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- GGUF inspection ---------------------------------------------------------- */

/* Prints a GGUF file's header, metadata (arrays abbreviated) and tensor table
 * (name, type, shape, bytes) to `out`, or one JSON object when json != 0.
 * Fails with a message naming the bad field on a malformed file. */
kvc_status kvc_inspect(const char *path, FILE *out, int json);

/* ---- methods ------------------------------------------------------------------ */

/* Prints every method with its parameters, defaults and one-line description. */
void kvc_methods_print(FILE *out);

/* ---- the KVmix profiler ------------------------------------------------------- */

typedef struct kvc_profile_params {
    int n_prompts;      /* prompts sampled from the text; <= 0: 24 */
    int prompt_len;     /* tokens per prompt (BOS included); <= 0: 512 */
    double top_frac;    /* fraction of layers given high bits (K 3, V 4, RPC 0.2); < 0: 0.2 */
    uint64_t seed;      /* prompt positions, and the ranking when `random` */
    int random;         /* non-zero: no gradients; the top layers are drawn at random (ablation) */
    const char *source; /* label written into the profile (e.g. the text's file name); may be NULL */
    int n_threads;      /* OpenBLAS threads of the passes; <= 0: one per CPU */
} kvc_profile_params;

/* The KVmix profiler (the KVmix paper, "KV Importance Analysis"): samples prompts
 * from `text`, runs forward and backward passes of the model in f32 (loss: mean
 * next-token cross-entropy), averages the per-layer Frobenius norms
 * ||dL/dW_k|| and ||dL/dW_v|| over prompts, ranks the layers, gives the top
 * fraction high bits and the rest 2 bits, and writes the profile file that
 * `--kv kvmix:profile=PATH` reads. Prints a progress line on a terminal and,
 * if report is not NULL, the ranking (one JSON object when json != 0).
 * KVC_ERR_ARG when the text is shorter than one prompt. */
kvc_status kvc_profile_kvmix(const kvc_model *m, const char *text, size_t len,
                             const kvc_profile_params *p, const char *out_path, FILE *report,
                             int json);

#ifdef __cplusplus
}
#endif

#endif
