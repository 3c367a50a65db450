/* A binary min-heap of fixed-size elements ordered by a caller's "before"
 * relation: the merge queue of both BPE tokenizers (bpe.c orders bigrams by
 * merge rank, spm.c by score), each popping the pair that merges next. The
 * elements are copied in and out by value (bigrams of 16-32 bytes), so the
 * heap needs no per-element allocation; one extra slot past the capacity
 * holds the element being sifted. */
#ifndef KVC_TOKENIZER_HEAP_H
#define KVC_TOKENIZER_HEAP_H

#include <stddef.h>

/* Non-zero when a must leave the heap before b. */
typedef int (*kvc_heap_before_fn)(const void *a, const void *b);

typedef struct kvc_heap {
    unsigned char *v; /* cap + 1 elements of `size` bytes; slot cap is scratch */
    size_t n, cap, size;
    kvc_heap_before_fn before;
} kvc_heap;

/* An empty heap of elements of `size` bytes (no allocation yet). */
kvc_heap kvc_heap_make(size_t size, kvc_heap_before_fn before);
/* Copies *x in; -1 when the storage cannot grow (the heap is unchanged). */
int kvc_heap_push(kvc_heap *h, const void *x);
/* Copies the first element to *out and removes it; h->n must be > 0. */
void kvc_heap_pop(kvc_heap *h, void *out);
void kvc_heap_free(kvc_heap *h);

#endif
