/* OpenBLAS's own thread count, set in one place. kvcomp's thread pool owns the
 * threads of inference (prefill runs single-threaded sgemm per task, so BLAS
 * gets 1); the KVmix profiler's backward pass is large sgemms and gives BLAS
 * the -t threads instead. */
#ifndef KVC_BASE_BLAS_H
#define KVC_BASE_BLAS_H

/* n_threads follows the usual rule (<= 0: one per CPU, kvc_threads_resolve). */
void kvc_blas_set_threads(int n_threads);

#endif
