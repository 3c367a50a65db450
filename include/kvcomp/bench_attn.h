/* `kvcomp bench attn`: decode attention of one layer (all heads) at long
 * contexts, every method of --kv in the same run (docs/design.md §6). For each
 * context length and method: a cache of L layers is filled through the
 * method's normal append path (synthetic K/V from kv/synth.h, or a layer of a
 * K/V dump tiled to the length), then decode attention of a fixed query (or
 * one that drifts from round to round, `drift`) is timed per layer, cycling over the L layers so that each step reads a cache
 * that is not in the CPU's caches — as in a real decode step, where 30 layers
 * each read their own cache. The methods of one context are timed in rounds
 * (one sweep over the layers each, the order reversed every other round), so
 * that a shared machine's slow phases fall on all of them alike. Reported:
 * median and best time per layer step, the bytes the method's chunks hold
 * per layer (payload, metadata, selection index: what a step reads),
 * effective GB/s (bytes / median time), the fraction of the measured read
 * bandwidth, the time ratio to the first method (of the medians, and paired
 * per round), and the mean time split into unit scoring, top-k selection and
 * attention (MosaicKV Fig. 8). */
#ifndef KVCOMP_BENCH_ATTN_H
#define KVCOMP_BENCH_ATTN_H

#include <stdint.h>

#include "kvcomp.h"

typedef struct kvc_bench_attn_params {
    int n_heads, n_kv_heads, head_dim; /* replaced by the dump's shape when dump is set */
    const int *ctxs;
    int n_ctxs;
    int n_threads;       /* <= 0: one per CPU */
    int n_layers;        /* layers cycled; 0: enough for 1 GiB of f16 K/V, 1..32 */
    int min_reps;        /* at least this many timed steps per layer (0: 5) */
    double min_seconds;  /* and at least this long (0: 0.5 s) */
    uint64_t seed;
    const char *dump;    /* K/V dump file, or NULL for synthetic K/V */
    int dump_layer;      /* the dump's layer to use; -1: the middle one */
    double bw_gbps;      /* measured read bandwidth for the fraction; <= 0: not reported */
    int cpu_clock;       /* time steps with the process CPU clock (for one thread) */
    /* 0: every step of a layer asks the same query. > 0: each round's query
     * is the layer's query with every element scaled by 1 + drift * u, u
     * uniform in [-1/2, 1/2) and new each round (the same for every method),
     * so that selecting methods choose a little differently from step to step
     * as in decode (the stats' reuse_rate says how much) */
    double drift;
} kvc_bench_attn_params;

typedef struct kvc_bench_attn_row {
    int ctx;
    const char *spec;    /* borrowed */
    kvc_status status;
    char error[256];
    int n_layers, reps;
    double median_s, best_s; /* per layer step */
    double held_bytes;       /* bytes read per step for one layer: the bytes in use */
    double gbps;             /* held_bytes / median_s / 1e9 */
    double frac_bw;          /* gbps / bw_gbps, or NAN */
    double ratio;            /* median_s / median_s of the first method at this ctx */
    /* The methods of a ctx are timed in rounds, one sweep over the layers
     * each per round: per round this method's sweep time over the first
     * method's, its median and quartiles over the rounds (NAN if the first
     * method failed). Slow phases of a shared machine fall on both sides of
     * each ratio, so these move less between runs than ratio does. */
    int rounds;
    double paired_ratio, paired_p25, paired_p75;
    double fill_s;           /* time to fill the cache */
    /* Mean per timed layer step: scoring the selectable units, choosing the
     * top ones (thread time summed over the threads, 0 without selection),
     * the wall time of the whole selection, and the rest of the attention's
     * wall time (kv/attend.h kvc_attend_times). */
    double score_s, topk_s, select_wall_s, attn_s;
    /* top-k over the timed steps: candidates kept by the sampled threshold
     * per unit ranked, and the share of selections that went on below it */
    double topk_cand_frac, topk_cont_frac;
    kvc_cache_stats stats;
} kvc_bench_attn_row;

/* rows: [n_ctxs][n_specs], filled in that order. Fails only on bad
 * parameters or an unreadable dump; a method failing is recorded in its row. */
kvc_status kvc_bench_attn_run(const kvc_bench_attn_params *p, char *const *specs, int n_specs,
                              kvc_bench_attn_row *rows);

#endif
