/* The blob arena (blob_arena.h). Memory comes in slabs of 2 MiB, mapped at a
 * 2 MiB-aligned address and advised MADV_HUGEPAGE, so the kernel backs each
 * with one huge page (THP in `madvise` mode, the common default, gives huge
 * pages only to advised ranges; the heap's blobs of 1-130 KB sit on 4 KiB
 * pages, each TLB miss a page walk, nested in a VM).
 *
 * Allocation bumps a pointer in the current slab (blocks rounded to 64
 * bytes), so blobs sealed one after the other are adjacent. A slab's header
 * (its first 64 bytes) counts the live blocks; kvc_blob_free finds it by
 * masking the address down to 2 MiB, so a block carries no header of its
 * own. Freed space is not reused block by block: a slab is recycled when its
 * last block is freed (the current slab restarts at its beginning; another
 * one becomes the single spare slab, or is unmapped). Why this simplest form:
 * sealed blobs die together (a cache destroyed or reset frees all of them;
 * h2o / streaming eviction frees whole chunks, mostly old ones, whose slab
 * empties as its neighbours go), and per-size free lists would need each
 * block's size and would scatter a stream's blobs over old holes, undoing the
 * adjacency. The cost is fragmentation in the worst case: one live block
 * keeps its 2 MiB slab mapped; the stats report mapped against live.
 *
 * Blocks larger than a quarter slab get their own mapping (rounded up to
 * 2 MiB, advised the same way, header in front), unmapped on free: a big
 * blob would otherwise waste most of a slab's tail. The arena is process-
 * wide (one mutex): codecs' encode has no cache at hand, and a per-cache
 * arena would change no layout at the sizes the attention streams.
 *
 * Under AddressSanitizer the arena keeps ASan's checks on blobs: every block
 * gets a 64-byte poisoned header in front that holds its size, only the
 * requested bytes are unpoisoned, and a freed block is poisoned again, so an
 * overrun into the padding or the next block, or a use after free, is
 * reported as it is for malloc. */
#define _DEFAULT_SOURCE
#include "kv/blob_arena.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__)
#define ARENA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ARENA_ASAN 1
#endif
#endif
#ifdef ARENA_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
enum { REDZONE = 64 }; /* the block's size header, poisoned */
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
enum { REDZONE = 0 };
#endif

enum { HDR = 64, ALIGN = 64 };
#define LARGE_MIN (KVC_BLOB_SLAB / 4)
#define MAGIC_SLAB 0x6b76626c61625331ull  /* "kvblabS1" */
#define MAGIC_LARGE 0x6b76626c61624c31ull /* "kvblabL1" */

typedef struct slab_hdr {
    uint64_t magic;
    size_t map_bytes; /* mapping length (KVC_BLOB_SLAB for slabs) */
    size_t top;       /* slabs: next free offset */
    size_t live;      /* slabs: blocks handed out and not freed */
} slab_hdr;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static slab_hdr *cur, *spare;
static kvc_blob_arena_stats st;

/* A 2 MiB-aligned anonymous mapping of `bytes` (a multiple of 2 MiB): map
 * 2 MiB more and unmap the misaligned head and tail. */
static void *map_aligned(size_t bytes) {
    size_t over = bytes + KVC_BLOB_SLAB;
    char *m = mmap(NULL, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED) return NULL;
    uintptr_t a = ((uintptr_t)m + KVC_BLOB_SLAB - 1) & ~(uintptr_t)(KVC_BLOB_SLAB - 1);
    char *p = (char *)a;
    if (p > m) munmap(m, (size_t)(p - m));
    if (p + bytes < m + over) munmap(p + bytes, (size_t)(m + over - (p + bytes)));
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE); /* advice only: no huge page is still correct */
#endif
    UNPOISON(p, HDR); /* the header stays readable (the range may have been poisoned before) */
    POISON(p + HDR, bytes - HDR);
    return p;
}

static slab_hdr *new_slab(void) {
    slab_hdr *s = spare;
    if (s) {
        spare = NULL;
    } else {
        s = map_aligned(KVC_BLOB_SLAB);
        if (!s) return NULL;
        st.slabs++;
        st.mapped_bytes += KVC_BLOB_SLAB;
    }
    *s = (slab_hdr){.magic = MAGIC_SLAB, .map_bytes = KVC_BLOB_SLAB, .top = HDR, .live = 0};
    return s;
}

static void *alloc_large(size_t bytes) {
    size_t map = (HDR + bytes + KVC_BLOB_SLAB - 1) & ~(KVC_BLOB_SLAB - 1);
    slab_hdr *h = map_aligned(map);
    if (!h) return NULL;
    *h = (slab_hdr){.magic = MAGIC_LARGE, .map_bytes = map, .top = 0, .live = 1};
    st.large++;
    st.mapped_bytes += map;
    st.live_blocks++;
    return (char *)h + HDR;
}

static void *alloc_block(size_t need) {
    pthread_mutex_lock(&lock);
    void *p = NULL;
    if (need >= LARGE_MIN) {
        p = alloc_large(need);
    } else {
        if (!cur || cur->top + need > KVC_BLOB_SLAB) {
            slab_hdr *s = new_slab();
            /* The old current slab stays mapped while it holds blocks (it is
             * full, so it holds some); its last free recycles it. */
            if (s) cur = s;
        }
        if (cur && cur->top + need <= KVC_BLOB_SLAB) {
            p = (char *)cur + cur->top;
            cur->top += need;
            cur->live++;
            st.live_blocks++;
        }
    }
    pthread_mutex_unlock(&lock);
    return p;
}

void *kvc_blob_alloc(size_t bytes) {
    size_t need = (bytes + ALIGN - 1) & ~(size_t)(ALIGN - 1);
    if (need == 0) need = ALIGN;
    if (need < bytes || need + REDZONE < need) return NULL; /* overflow */
    char *p = alloc_block(need + REDZONE);
    if (!p || !REDZONE) return p;
    UNPOISON(p, REDZONE);
    memcpy(p, &need, sizeof need);
    POISON(p, REDZONE);
    UNPOISON(p + REDZONE, bytes);
    return p + REDZONE;
}

void *kvc_blob_calloc(size_t bytes) {
    void *p = kvc_blob_alloc(bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

void kvc_blob_free(void *p) {
    if (!p) return;
    if (REDZONE) {
        char *b = (char *)p - REDZONE;
        size_t need;
        UNPOISON(b, REDZONE);
        memcpy(&need, b, sizeof need);
        POISON(b, REDZONE + need);
        p = b;
    }
    slab_hdr *h = (slab_hdr *)((uintptr_t)p & ~(uintptr_t)(KVC_BLOB_SLAB - 1));
    pthread_mutex_lock(&lock);
    st.live_blocks--;
    if (h->magic == MAGIC_LARGE) {
        st.large--;
        st.mapped_bytes -= h->map_bytes;
        size_t map = h->map_bytes;
        UNPOISON(h, map); /* whoever maps this range next must not see it poisoned */
        munmap(h, map);
    } else if (--h->live == 0) {
        if (h == cur) {
            h->top = HDR; /* restart the current slab at its beginning */
        } else if (!spare) {
            spare = h;
        } else {
            st.slabs--;
            st.mapped_bytes -= KVC_BLOB_SLAB;
            UNPOISON(h, KVC_BLOB_SLAB);
            munmap(h, KVC_BLOB_SLAB);
        }
    }
    pthread_mutex_unlock(&lock);
}

void kvc_blob_arena_stats_get(kvc_blob_arena_stats *s) {
    pthread_mutex_lock(&lock);
    *s = st;
    pthread_mutex_unlock(&lock);
}
