/* Per-token pruning of MUSTAFAR (MUSTAFAR §2; docs/methods.md): each K or V vector keeps
 * exactly round((1 - s) * D) of its D elements, chosen by magnitude (§2.1, §2.2)
 * or, for K, by the output-aware score |k| ⊙ Σ|q| (§2.1, Figure 3). The result
 * is a bitmap of kept channels, the input of the bitmap tile codec. */
#ifndef KVC_KV_CODEC_PRUNE_H
#define KVC_KV_CODEC_PRUNE_H

#include <stdint.h>

/* Largest head size the pruning and the bitmap codec accept. */
#define KVC_PRUNE_MAX_D 1024

/* Elements kept per vector at sparsity s in [0, 1]: round((1 - s) * d), halves
 * rounded up, computed so that (1 - 0.7) * 64 = 19.2 gives 19 and not 19.19999 -> 19
 * by luck. Always in [0, d]. */
int kvc_prune_keep_count(double sparsity, int d);

/* Marks in mask (ceil(d/64) words, bit c%64 of word c/64 for channel c) the
 * `keep` channels with the largest |score[c]|. Ties go to the lower channel
 * index; NaN ranks above +inf (the order of the IEEE bit patterns of |x|), so
 * the result is a pure function of the input. Exactly `keep` bits are set.
 * d <= KVC_PRUNE_MAX_D, 0 <= keep <= d. */
void kvc_prune_topk(const float *score, int d, int keep, uint64_t *mask);

/* The scalar reference (quickselect on 64-bit keys) and the AVX2 / AVX-512
 * variants (src/kernels/<isa>/kv_bitmap_<isa>.c). kvc_prune_topk calls
 * kvc_prune_topk_k: the reference until kvc_codecs_init() registers the
 * machine's variant over it (codec_registry.c). */
typedef void (*kvc_prune_topk_fn)(const float *score, int d, int keep, uint64_t *mask);
void kvc_prune_topk_scalar(const float *score, int d, int keep, uint64_t *mask);
void kvc_prune_topk_avx2(const float *score, int d, int keep, uint64_t *mask);
void kvc_prune_topk_avx512(const float *score, int d, int keep, uint64_t *mask);
extern kvc_prune_topk_fn kvc_prune_topk_k;
void kvc_prune_register_avx2(kvc_prune_topk_fn *k);
void kvc_prune_register_avx512(kvc_prune_topk_fn *k);

/* The last step of the SIMD top-k variants: given the channels whose |score|
 * is above the keep-th largest (gt, n_gt of them) and those equal to it (eq),
 * nw words each, sets gt and the lowest-index ties until `keep` in mask. */
static inline void kvc_prune_mask_from_threshold(const uint64_t *gt, const uint64_t *eq, int n_gt,
                                                 int keep, int nw, uint64_t *mask) {
    int need = keep - n_gt;
    for (int w = 0; w < nw; w++) {
        uint64_t e = eq[w], sel = 0;
        for (; need > 0 && e; need--, e &= e - 1) sel |= e & (~e + 1); /* the lowest tie left */
        mask[w] = gt[w] | sel;
    }
}

/* Output-aware score of one key (Figure 3): score[c] = |k[c]| * qsum[c], where
 * qsum is the element-wise sum of |q| over the queries (all heads of the GQA
 * group) that attended while the key sat in the local window. */
void kvc_prune_outaware_score(const float *k, const float *qsum, int d, float *score);

/* Adds |q| of g query heads (g rows of d) into acc[d]. */
void kvc_prune_accumulate_absq(const float *q, int g, int d, float *acc);

#endif
