/* The codec registry (docs/design.md §4 "Codec"): name → operations table, the
 * one-time kernel dispatch of every codec for the active ISA, and the one loop
 * over lists of token ranges (codecs' qk / pv take one range). Adding a codec
 * = one row in `codecs` and, if it has SIMD kernels, one registration call per
 * ISA in init_all. */
#include "kv/codec/codec.h"

#include <pthread.h>
#include <string.h>

#include "kv/codec/bitmap.h"
#include "kv/codec/bitmap_quant.h"
#include "kv/codec/chanprune.h"
#include "kv/codec/dense.h"
#include "kv/codec/iquant.h"
#include "kv/codec/packkv.h"
#include "kv/codec/packed.h"
#include "kv/codec/prune.h"
#include "kv/codec/quant_pack.h"
#include "kv/select/dot_block.h"
#include "kv/select/minmax_block.h"
#include "kv/softmax.h"
#include "kv/xform/rowmat.h"

static const kvc_codec_ops *const codecs[] = {
    &kvc_codec_f32,
    &kvc_codec_f16,
    &kvc_codec_bf16,
    &kvc_codec_bitmap_f16,
    &kvc_codec_bitmap_bf16,
    &kvc_codec_bitmap_quant_k,
    &kvc_codec_bitmap_quant_v,
    &kvc_codec_chanprune_f16,
    &kvc_codec_iq_k,
    &kvc_codec_iq_v,
    &kvc_codec_packkv_k,
    &kvc_codec_packkv_v,
    &kvc_codec_packed_f16,
    NULL,
};

const kvc_codec_ops *kvc_codec_find(const char *name) {
    for (int i = 0; codecs[i]; i++)
        if (strcmp(codecs[i]->name, name) == 0) return codecs[i];
    return NULL;
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init_all(void) {
    kvc_isa isa = kvc_active_isa();
    if (isa >= KVC_ISA_AVX2) {
        kvc_dense_register_avx2(&kvc_dense_k);
        kvc_softmax_register_avx2(&kvc_softmax_k);
        kvc_minmax_register_avx2(&kvc_minmax_k);
        kvc_db_register_avx2(&kvc_db_score);
        kvc_rowmat_register_avx2(&kvc_rowmat);
        kvc_quant_register_avx2(&kvc_quant_wsum_k);
        kvc_iq_register_avx2(&kvc_iq_k);
        kvc_pk_register_avx2(&kvc_pk_k);
        kvc_packed_register_avx2(&kvc_packed_k);
        kvc_bitmap_register_avx2(&kvc_bitmap_k);
        kvc_prune_register_avx2(&kvc_prune_topk_k);
    }
    if (isa >= KVC_ISA_AVX512) { /* over AVX2: what a file does not implement stays (PackKV's packs of 8, the block keys' scoring) */
        kvc_dense_register_avx512(&kvc_dense_k);
        kvc_softmax_register_avx512(&kvc_softmax_k);
        kvc_minmax_register_avx512(&kvc_minmax_k);
        kvc_rowmat_register_avx512(&kvc_rowmat);
        kvc_quant_register_avx512(&kvc_quant_wsum_k);
        kvc_iq_register_avx512(&kvc_iq_k);
        kvc_pk_register_avx512(&kvc_pk_k);
        kvc_packed_register_avx512(&kvc_packed_k);
        kvc_bitmap_register_avx512(&kvc_bitmap_k);
        kvc_prune_register_avx512(&kvc_prune_topk_k);
    }
}

void kvc_codecs_init(void) { pthread_once(&init_once, init_all); }

void kvc_codec_qk_ranges(const kvc_codec *c, const void *blob, const float *q, int G, int ldq,
                         const kvc_range *r, int nr, float *s, int lds) {
    for (int i = 0; i < nr; s += r[i].end - r[i].begin, i++)
        if (r[i].end > r[i].begin) c->ops->qk(c, blob, q, G, ldq, r[i].begin, r[i].end, s, lds);
}

void kvc_codec_prefetch_ranges(const kvc_codec *c, const void *blob, const kvc_range *r, int nr) {
    if (!c->ops->prefetch) return;
    for (int i = 0; i < nr; i++)
        if (r[i].end > r[i].begin) c->ops->prefetch(c, blob, r[i].begin, r[i].end);
}

void kvc_codec_pv_ranges(const kvc_codec *c, const void *blob, const float *p, int G, int ldp,
                         const kvc_range *r, int nr, float *o, int ldo) {
    for (int i = 0; i < nr; p += r[i].end - r[i].begin, i++)
        if (r[i].end > r[i].begin) c->ops->pv(c, blob, p, G, ldp, r[i].begin, r[i].end, o, ldo);
}
