/* AVX2 kernels for Q5_K weights (fifth bit from qh): dot with a Q8_K-prepared
 * activation and the batched dot of kvc_matmul, both over the unpacked super-
 * blocks of wt_kquant_avx2.h (maddubs of the unsigned values with the int8
 * activation, madd with the int16 scales, integer accumulation over the super-
 * block). Reference: src/model/wt_q5_k.c. */
#include "kernels/avx2/wt_kquant_avx2.h"

KVC_AINLINE void unpack_q5_k(const void *row, int64_t i, kq2_sb *u) {
    kq2_unpack_q5_k((const kvc_blk_q5_k *)row + i, u);
}

static float dot_q5_k_q8_k_avx2(const void *row, const void *act, int64_t n) {
    return kq2_dot(KQ2_MINS, unpack_q5_k, row, act, n);
}

static void dot_batch_q5_k_q8_k_avx2(const void *w, size_t stride, int64_t nrows,
                                      const void *acts, size_t act_stride, int64_t m, int64_t n,
                                      float *y, int64_t ldy) {
    kq2_batch(KQ2_MINS, unpack_q5_k, w, stride, nrows, acts, act_stride, m, n, y, ldy);
}

void kvc_wt_register_q5_k_avx2(kvc_wtype *table) {
    table[KVC_WT_Q5_K].dot = dot_q5_k_q8_k_avx2;
    table[KVC_WT_Q5_K].dot_batch = dot_batch_q5_k_q8_k_avx2;
}
