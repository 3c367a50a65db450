/* The block pool (block_pool.h): a new slab when the free list is empty, its
 * blocks pushed on the free list in reverse so ids come out in order. */
#include "kv/codec/block_pool.h"

#include <stdlib.h>

enum { SLAB_BLOCKS = 256 };

void kvc_block_pool_init(kvc_block_pool *p, size_t block) { *p = (kvc_block_pool){.block = block}; }

static int add_slab(kvc_block_pool *p) {
    if (p->n_slabs >= INT32_MAX / SLAB_BLOCKS - 1) return 0;
    if (p->n_slabs == p->cap_slabs) {
        int cap = p->cap_slabs ? p->cap_slabs * 2 : 16;
        char **s = realloc(p->slabs, (size_t)cap * sizeof *s);
        if (!s) return 0;
        p->slabs = s;
        p->cap_slabs = cap;
    }
    int need = (p->n_slabs + 1) * SLAB_BLOCKS; /* every id may be free at once */
    if (need > p->cap_free) {
        int cap = p->cap_free ? p->cap_free * 2 : SLAB_BLOCKS;
        while (cap < need) cap *= 2;
        int32_t *f = realloc(p->free_ids, (size_t)cap * sizeof *f);
        if (!f) return 0;
        p->free_ids = f;
        p->cap_free = cap;
    }
    char *slab = malloc(SLAB_BLOCKS * p->block);
    if (!slab) return 0;
    int32_t first = (int32_t)p->n_slabs * SLAB_BLOCKS;
    p->slabs[p->n_slabs++] = slab;
    for (int i = SLAB_BLOCKS - 1; i >= 0; i--) p->free_ids[p->n_free++] = first + i;
    return 1;
}

int32_t kvc_block_pool_get(kvc_block_pool *p) {
    if (p->n_free == 0 && !add_slab(p)) return -1;
    p->used++;
    return p->free_ids[--p->n_free];
}

void kvc_block_pool_put(kvc_block_pool *p, int32_t id) {
    p->free_ids[p->n_free++] = id; /* room: every id came from a slab that reserved its slot */
    p->used--;
}

void *kvc_block_pool_at(const kvc_block_pool *p, int32_t id) {
    return p->slabs[id / SLAB_BLOCKS] + (size_t)(id % SLAB_BLOCKS) * p->block;
}

void kvc_block_pool_free(kvc_block_pool *p) {
    for (int i = 0; i < p->n_slabs; i++) free(p->slabs[i]);
    free(p->slabs);
    free(p->free_ids);
    *p = (kvc_block_pool){.block = p->block};
}
