/* AVX-512 (VNNI) kernels for Q5_K weights (a fifth bit per value from qh): the
 * dot with a Q8_K-prepared activation (decode) and kvc_matmul's dot_batch
 * (prefill: tiles of 16 rows, one row per lane), both in wt_kquant_avx512.h;
 * this file supplies the block unpacking. Reference: src/model/wt_q5_k.c. */
#include "kernels/avx512/wt_kquant_avx512.h"

KVC_AINLINE void unpack_q5_k(const void *row, int64_t i, kq_sb *u) {
    kq_unpack_q5_k((const kvc_blk_q5_k *)row + i, u);
}

static float dot_q5_k_q8_k_avx512(const void *row, const void *act, int64_t n) {
    return kq_dot(KQ_MINS, unpack_q5_k, row, act, n);
}

static void dot_batch_q5_k_q8_k_avx512(const void *w, size_t stride, int64_t nrows,
                                        const void *acts, size_t act_stride, int64_t m, int64_t n,
                                        float *y, int64_t ldy) {
    kq_batch(KQ_MINS, unpack_q5_k, sizeof(kvc_blk_q5_k), offsetof(kvc_blk_q5_k, scales), w, stride,
             nrows, acts, act_stride, m, n, y, ldy);
}

void kvc_wt_register_q5_k_avx512(kvc_wtype *table) {
    table[KVC_WT_Q5_K].dot = dot_q5_k_q8_k_avx512;
    table[KVC_WT_Q5_K].dot_batch = dot_batch_q5_k_q8_k_avx512;
}
