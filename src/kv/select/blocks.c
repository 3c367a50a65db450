/* The "blocks" selector (blocks.h): block means of the stored keys, packed,
 * scored with the packed q·k kernel, best head per block. */
#include "kv/select/blocks.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"

enum { SCORE_TILE = 256 };

typedef struct blocks_index {
    int n, B, nb;
    kvc_codec codec; /* packed_f16 of the block keys (cfg used at encode only) */
    void *keys;
} blocks_index;

kvc_status kvc_blocks_create(const float *kt, int n, int ld, int dim, int B,
                             const kvc_packed_cfg *cfg, kvc_select_index *out) {
    *out = (kvc_select_index){0};
    KVC_CHECK(B >= 1 && B <= 64, KVC_ERR_ARG, "blocks selector: block %d outside [1, 64]", B);
    KVC_CHECK(n >= 1, KVC_ERR_ARG, "blocks selector: %d tokens", n);
    KVC_TRY(kvc_packed_cfg_check(cfg, dim));
    blocks_index *ix = calloc(1, sizeof *ix);
    int nb = (n + B - 1) / B;
    float *mean = malloc((size_t)nb * dim * sizeof *mean);
    if (!ix || !mean) {
        free(ix);
        free(mean);
        return kvc_fail(KVC_ERR_NOMEM, "blocks selector of %d blocks", nb);
    }
    for (int b = 0; b < nb; b++) {
        int t0 = b * B, t1 = t0 + B < n ? t0 + B : n;
        float *m = mean + (size_t)b * dim;
        memset(m, 0, (size_t)dim * sizeof *m);
        for (int t = t0; t < t1; t++)
            for (int c = 0; c < dim; c++) m[c] += kt[(size_t)t * ld + c];
        for (int c = 0; c < dim; c++) m[c] /= (float)(t1 - t0);
    }
    ix->n = n;
    ix->B = B;
    ix->nb = nb;
    ix->codec = (kvc_codec){.ops = &kvc_codec_packed_f16, .dim = dim, .cfg = cfg};
    kvc_status st = ix->codec.ops->encode(&ix->codec, mean, nb, dim, &ix->keys);
    ix->codec.cfg = NULL;
    free(mean);
    if (st != KVC_OK) {
        free(ix);
        return st;
    }
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
    float tmp[KVC_PACKED_MAX_G * SCORE_TILE];
    for (int b0 = 0; b0 < ix->nb; b0 += SCORE_TILE) {
        int nt = ix->nb - b0 < SCORE_TILE ? ix->nb - b0 : SCORE_TILE;
        kvc_packed_view v = kvc_packed_blob_view(ix->keys, b0);
        for (int h0 = 0; h0 < G; h0 += KVC_PACKED_MAX_G) {
            int gb = G - h0 < KVC_PACKED_MAX_G ? G - h0 : KVC_PACKED_MAX_G;
            kvc_packed_k.qk(&v, nt, q + (size_t)h0 * ldq, gb, ldq, tmp, SCORE_TILE);
            for (int u = 0; u < nt; u++) {
                float best = h0 ? scores[b0 + u] : tmp[u];
                for (int h = 0; h < gb; h++)
                    if (tmp[(size_t)h * SCORE_TILE + u] > best) best = tmp[(size_t)h * SCORE_TILE + u];
                scores[b0 + u] = best;
            }
        }
    }
}

static uint64_t bl_bytes(const void *index) {
    const blocks_index *ix = index;
    uint64_t p, m;
    ix->codec.ops->bytes(&ix->codec, ix->keys, &p, &m);
    return sizeof *ix + p + m;
}

static void bl_free(void *index) {
    blocks_index *ix = index;
    if (!ix) return;
    if (ix->keys) ix->codec.ops->free(&ix->codec, ix->keys);
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
