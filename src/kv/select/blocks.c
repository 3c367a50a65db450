/* The "blocks" selector (blocks.h): block means of the stored keys,
 * sparsified per vector like the keys, kept channel-major (dot_block.h) and
 * scored by the block-key kernel, best head per block. */
#include "kv/select/blocks.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kv/blob_arena.h"
#include "kv/select/dot_block.h"

typedef struct blocks_index {
    int n, B, nb, dim;
    kvc_f16 *keys; /* kvc_db_elems(nb, dim): the sparsified means, zeros where dropped */
} blocks_index;

/* The mean of keys [t0, t1) of kt, its per-vector top groups kept (the
 * packed codec's choice) and the rest zero: what its packed form decodes to. */
static void sparse_mean(const float *kt, int t0, int t1, int ld, int dim, const kvc_packed_cfg *cfg, float *m) {
    memset(m, 0, (size_t)dim * sizeof *m);
    for (int t = t0; t < t1; t++)
        for (int c = 0; c < dim; c++) m[c] += kt[(size_t)t * ld + c];
    for (int c = 0; c < dim; c++) m[c] /= (float)(t1 - t0);
    uint32_t bits[KVC_PACKED_MAX_D / 32];
    kvc_f16 vals[KVC_PACKED_MAX_D];
    kvc_packed_select(m, dim, cfg->group, cfg->keep, bits);
    kvc_packed_pack(m, bits, dim, cfg->group, vals);
    kvc_packed_unpack(bits, vals, dim, cfg->group, m);
}

kvc_status kvc_blocks_create(const float *kt, int n, int ld, int dim, int B,
                             const kvc_packed_cfg *cfg, kvc_select_index *out) {
    *out = (kvc_select_index){0};
    KVC_CHECK(B >= 1 && B <= 64, KVC_ERR_ARG, "blocks selector: block %d outside [1, 64]", B);
    KVC_CHECK(n >= 1, KVC_ERR_ARG, "blocks selector: %d tokens", n);
    KVC_TRY(kvc_packed_cfg_check(cfg, dim));
    int nb = (n + B - 1) / B;
    size_t ne = kvc_db_elems(nb, dim);
    blocks_index *ix = calloc(1, sizeof *ix);
    kvc_f16 *keys = kvc_blob_calloc(ne * sizeof *keys); /* lanes past nb stay zero */
    if (!ix || !keys) {
        free(ix);
        kvc_blob_free(keys);
        return kvc_fail(KVC_ERR_NOMEM, "blocks selector of %d blocks", nb);
    }
    float m[KVC_PACKED_MAX_D];
    for (int b = 0; b < nb; b++) {
        int t0 = b * B, t1 = t0 + B < n ? t0 + B : n;
        sparse_mean(kt, t0, t1, ld, dim, cfg, m);
        kvc_db_put(keys, dim, b, m);
    }
    *ix = (blocks_index){.n = n, .B = B, .nb = nb, .dim = dim, .keys = keys};
    *out = (kvc_select_index){.ops = &kvc_selector_blocks, .index = ix};
    return KVC_OK;
}

static int bl_n_units(const void *index) { return ((const blocks_index *)index)->nb; }

static kvc_range bl_unit(const void *index, int u) {
    const blocks_index *ix = index;
    int b = u * ix->B, e = b + ix->B < ix->n ? b + ix->B : ix->n;
    return (kvc_range){b, e};
}

static void bl_score(const void *index, const float *q, int G, int ldq, float *scores) {
    const blocks_index *ix = index;
    kvc_db_score(ix->keys, ix->nb, ix->dim, q, G, ldq, scores);
}

static uint64_t bl_bytes(const void *index) {
    const blocks_index *ix = index;
    return sizeof *ix + kvc_db_elems(ix->nb, ix->dim) * sizeof(kvc_f16);
}

static void bl_free(void *index) {
    blocks_index *ix = index;
    if (!ix) return;
    kvc_blob_free(ix->keys);
    free(ix);
}

const kvc_selector_ops kvc_selector_blocks = {
    .name = "blocks",
    .n_units = bl_n_units,
    .unit = bl_unit,
    .score = bl_score,
    .bytes = bl_bytes,
    .free = bl_free,
};
