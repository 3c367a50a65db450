/* `kvcomp bench bw`: the machine's measured read bandwidth, the yardstick for
 * the attention benchmark (docs/design.md §6). A buffer (1 GiB by default, far
 * beyond the last-level cache) is summed by all threads of a pool, each task a
 * contiguous 64 MiB stretch, with the widest loads the CPU has (AVX-512, AVX2,
 * or portable 128-bit vectors; KVC_ISA lowers it like every kernel); the best
 * of several runs counts. */
#ifndef KVCOMP_BENCH_BW_H
#define KVCOMP_BENCH_BW_H

#include <stddef.h>

#include "kvcomp.h"

typedef struct kvc_bench_bw_result {
    double best_gbps;   /* bytes / best time / 1e9 */
    double median_gbps; /* over the runs */
    double best_s;
    size_t bytes;
    int runs, n_threads;
} kvc_bench_bw_result;

/* bytes: buffer size (0: 1 GiB); runs: repetitions (0: 7); n_threads <= 0:
 * one per CPU. cpu_clock: time with the process CPU clock instead of the wall
 * clock (meaningful with one thread on a shared machine). */
kvc_status kvc_bench_bw(size_t bytes, int runs, int n_threads, int cpu_clock,
                        kvc_bench_bw_result *out);

#endif
