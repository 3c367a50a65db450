/* Blob memory for sealed chunk blobs (docs/design-kv.md, "Blob memory"): a
 * process-wide arena that hands out 64-byte-aligned blocks from 2 MiB-aligned
 * anonymous mappings advised for transparent huge pages (MADV_HUGEPAGE), so
 * that the blobs the attention streams through sit on 2 MiB pages instead of
 * the heap's 4 KiB ones, and the blobs of consecutive chunks lie next to each
 * other in the order they were sealed (the order the driver walks them).
 *
 * Codecs whose blobs are written once and never resized (iq_k / iq_v,
 * quant_k / quant_v, bitmap, bitmap_quant, packed) allocate with
 * kvc_blob_alloc in encode and release with kvc_blob_free in their free op.
 * Appendable blobs (the dense codecs' hot windows and chunks) keep malloc:
 * they grow in place. Thread-safe (one mutex; encode runs on background
 * threads for some methods). */
#ifndef KVC_KV_BLOB_ARENA_H
#define KVC_KV_BLOB_ARENA_H

#include <stddef.h>
#include <stdint.h>

/* Slab size and alignment: one x86-64 huge page. */
#define KVC_BLOB_SLAB ((size_t)2 << 20)

/* A block of at least `bytes` bytes, 64-byte aligned, contents undefined;
 * NULL when out of memory. bytes == 0 gives a valid (minimal) block. */
void *kvc_blob_alloc(size_t bytes);

/* Same, zero-filled. */
void *kvc_blob_calloc(size_t bytes);

/* Releases a block of kvc_blob_alloc (NULL: nothing). */
void kvc_blob_free(void *p);

/* What the arena holds now (tests; the fragmentation check). */
typedef struct kvc_blob_arena_stats {
    uint64_t mapped_bytes; /* slabs and large mappings, including the spare slab */
    uint64_t live_blocks;  /* blocks handed out and not freed */
    uint64_t slabs;        /* 2 MiB slabs mapped (with the spare) */
    uint64_t large;        /* blocks too large for a slab, each its own mapping */
} kvc_blob_arena_stats;

void kvc_blob_arena_stats_get(kvc_blob_arena_stats *s);

#endif
