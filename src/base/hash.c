/* kvc_hash64 (hash.h). */
#include "base/hash.h"

#include <string.h>

uint64_t kvc_hash64(const void *p, size_t n, uint64_t seed) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull ^ (seed * 0x9E3779B97F4A7C15ull);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) { /* 8 bytes per step: FNV-1a over words */
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 1099511628211ull;
        h ^= h >> 29;
    }
    for (; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}
