/* A pool of fixed-size memory blocks named by int32 ids: slabs of 256 blocks
 * that never move (so a block's address stays valid while it is held) and a
 * free list. The far tier's near buffer keeps the file blocks of the last
 * selection in it. Not thread-safe: the owner locks. */
#ifndef KVC_KV_CODEC_BLOCK_POOL_H
#define KVC_KV_CODEC_BLOCK_POOL_H

#include <stddef.h>
#include <stdint.h>

typedef struct kvc_block_pool {
    size_t block;          /* bytes per block */
    char **slabs;
    int n_slabs, cap_slabs;
    int32_t *free_ids;     /* stack of free block ids */
    int n_free, cap_free;
    int64_t used;          /* blocks held */
} kvc_block_pool;

/* An empty pool of blocks of `block` bytes. */
void kvc_block_pool_init(kvc_block_pool *p, size_t block);

/* A free block's id, or -1 when memory ran out. */
int32_t kvc_block_pool_get(kvc_block_pool *p);

/* Gives block id back. */
void kvc_block_pool_put(kvc_block_pool *p, int32_t id);

/* The block's memory (valid until the pool is freed). */
void *kvc_block_pool_at(const kvc_block_pool *p, int32_t id);

void kvc_block_pool_free(kvc_block_pool *p);

#endif
