/* The tokenizers' merge queue (heap.h): the classic array heap, sift-up on
 * push and sift-down on pop, with elements moved by memcpy. */
#include "tokenizer/heap.h"

#include <stdlib.h>
#include <string.h>

static unsigned char *at(const kvc_heap *h, size_t i) { return h->v + i * h->size; }

kvc_heap kvc_heap_make(size_t size, kvc_heap_before_fn before) {
    return (kvc_heap){.size = size, .before = before};
}

static int reserve_one_more(kvc_heap *h) {
    if (h->n < h->cap) return 0;
    size_t cap = h->cap ? 2 * h->cap : 64;
    unsigned char *v = realloc(h->v, (cap + 1) * h->size);
    if (!v) return -1;
    h->v = v;
    h->cap = cap;
    return 0;
}

int kvc_heap_push(kvc_heap *h, const void *x) {
    if (reserve_one_more(h)) return -1;
    unsigned char *item = at(h, h->cap); /* scratch: the slots below move up */
    memcpy(item, x, h->size);
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!h->before(item, at(h, p))) break;
        memcpy(at(h, i), at(h, p), h->size);
        i = p;
    }
    memcpy(at(h, i), item, h->size);
    return 0;
}

void kvc_heap_pop(kvc_heap *h, void *out) {
    memcpy(out, at(h, 0), h->size);
    /* The last element sinks from the root; its own slot (index n after the
     * decrement) is never written by the sift, which only touches slots < n. */
    const unsigned char *last = at(h, --h->n);
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && h->before(at(h, c + 1), at(h, c))) c++;
        if (!h->before(at(h, c), last)) break;
        memcpy(at(h, i), at(h, c), h->size);
        i = c;
    }
    if (h->n) memcpy(at(h, i), last, h->size);
}

void kvc_heap_free(kvc_heap *h) {
    free(h->v);
    h->v = NULL;
    h->n = h->cap = 0;
}
