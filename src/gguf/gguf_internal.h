/* Reader-private state behind kvc_gguf.priv: an arena that owns every
 * allocation of one parse (so any failure path frees everything with one call),
 * the file mapping when the file was opened with kvc_gguf_open, and the hash
 * indexes of keys and tensor names (duplicate detection while parsing, O(1)
 * lookups afterwards). Shared by the files of src/gguf only. */
#ifndef KVC_GGUF_INTERNAL_H
#define KVC_GGUF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

typedef struct gguf_arena_block gguf_arena_block;

typedef struct gguf_name_index {
    uint64_t *slots; /* stored index + 1; 0 is an empty slot */
    uint64_t mask;   /* capacity - 1 (capacity a power of two) */
} gguf_name_index;

typedef struct gguf_priv {
    gguf_arena_block *blocks;
    void *map; /* mmap'd file or NULL */
    size_t map_size;
    gguf_name_index kv_index, tensor_index;
} gguf_priv;

/* Frees g, its arena, indexes and mapping. NULL is fine. */
void kvc_gguf_free_all(kvc_gguf *g);

#endif
