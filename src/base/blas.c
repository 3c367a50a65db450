/* The one call into OpenBLAS's threading (see blas.h). */
#include "base/blas.h"

#include "kvcomp.h"

void openblas_set_num_threads(int n); /* OpenBLAS; cblas.h does not declare it */

void kvc_blas_set_threads(int n_threads) { openblas_set_num_threads(kvc_threads_resolve(n_threads)); }
