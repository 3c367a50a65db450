/* The string -> id map of the tokenizer's interned strings (struct
 * kvc_tokenizer's smap: open addressing on an FNV-1a hash, a slot holds the id
 * plus one). The loader fills it while interning; the encoders look tokens and
 * merge parts up in it. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "tokenizer/tokenizer_impl.h"

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

int32_t kvc_tok_lookup(const kvc_tokenizer *t, const char *s, size_t len) {
    if (!t->smap) return -1;
    for (uint64_t i = fnv1a(s, len) & t->smap_mask;; i = (i + 1) & t->smap_mask) {
        uint32_t slot = t->smap[i];
        if (slot == 0) return -1;
        uint32_t id = slot - 1;
        if (t->str_len[id] == len && memcmp(t->arena + t->str_off[id], s, len) == 0)
            return (int32_t)id;
    }
}

void kvc_tok_smap_put(kvc_tokenizer *t, uint32_t id) {
    const char *s = t->arena + t->str_off[id];
    size_t len = t->str_len[id];
    for (uint64_t i = fnv1a(s, len) & t->smap_mask;; i = (i + 1) & t->smap_mask) {
        uint32_t slot = t->smap[i];
        if (slot == 0 ||
            (t->str_len[slot - 1] == len && memcmp(t->arena + t->str_off[slot - 1], s, len) == 0)) {
            t->smap[i] = id + 1;
            return;
        }
    }
}

kvc_status kvc_tok_smap_rebuild(kvc_tokenizer *t, size_t want) {
    size_t cap = 1024;
    while (cap < 2 * want)
        cap *= 2;
    uint32_t *m = calloc(cap, sizeof *m);
    if (!m) return kvc_fail(KVC_ERR_NOMEM, "tokenizer: string map of %zu slots", cap);
    free(t->smap);
    t->smap = m;
    t->smap_mask = (uint32_t)(cap - 1);
    for (int i = 0; i < t->n_strings; i++)
        kvc_tok_smap_put(t, (uint32_t)i);
    return KVC_OK;
}
