/* A tiny GGUF writer for tests: builds handcrafted files byte by byte
 * (little-endian, ggml docs/gguf.md layout) so tests can make good files of
 * every value type and bad files with exactly one field wrong. Header-only,
 * static functions; aborts on out-of-memory (test code only). */
#ifndef KVC_TEST_GGUF_WRITER_H
#define KVC_TEST_GGUF_WRITER_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct gw {
    uint8_t *p;
    size_t n, cap;
} gw;

static void gw_bytes(gw *w, const void *src, size_t n) {
    if (w->n + n > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->n + n)
            cap *= 2;
        uint8_t *p = realloc(w->p, cap);
        if (!p) abort();
        w->p = p;
        w->cap = cap;
    }
    if (n) memcpy(w->p + w->n, src, n);
    w->n += n;
}

static void gw_le(gw *w, uint64_t v, int n) {
    uint8_t b[8];
    for (int i = 0; i < n; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    gw_bytes(w, b, (size_t)n);
}
static void gw_u8(gw *w, uint8_t v) {
    gw_le(w, v, 1);
}
static void gw_u16(gw *w, uint16_t v) {
    gw_le(w, v, 2);
}
static void gw_u32(gw *w, uint32_t v) {
    gw_le(w, v, 4);
}
static void gw_u64(gw *w, uint64_t v) {
    gw_le(w, v, 8);
}
static void gw_f32(gw *w, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    gw_u32(w, u);
}
static void gw_f64(gw *w, double f) {
    uint64_t u;
    memcpy(&u, &f, 8);
    gw_u64(w, u);
}
static void gw_strn(gw *w, const char *s, size_t n) {
    gw_u64(w, n);
    gw_bytes(w, s, n);
}
static void gw_str(gw *w, const char *s) {
    gw_strn(w, s, strlen(s));
}

static void gw_header(gw *w, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gw_bytes(w, "GGUF", 4);
    gw_u32(w, version);
    gw_u64(w, n_tensors);
    gw_u64(w, n_kv);
}

/* key + value type; the caller writes the value */
static void gw_key(gw *w, const char *key, uint32_t vtype) {
    gw_str(w, key);
    gw_u32(w, vtype);
}
static void gw_kv_u32(gw *w, const char *key, uint32_t v) {
    gw_key(w, key, 4);
    gw_u32(w, v);
}
static void gw_kv_str(gw *w, const char *key, const char *v) {
    gw_key(w, key, 8);
    gw_str(w, v);
}
/* array header; the caller writes n items */
static void gw_arr(gw *w, uint32_t elem_type, uint64_t n) {
    gw_u32(w, elem_type);
    gw_u64(w, n);
}

static void gw_tensor(gw *w, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                      uint64_t offset) {
    gw_str(w, name);
    gw_u32(w, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        gw_u64(w, ne[d]);
    gw_u32(w, type);
    gw_u64(w, offset);
}

static void gw_pad(gw *w, size_t align) {
    static const uint8_t zero[64] = {0};
    while (w->n % align)
        gw_bytes(w, zero, align - w->n % align < 64 ? align - w->n % align : 64);
}

/* n bytes of a recognisable pattern (byte i of the data = seed + i) */
static void gw_data(gw *w, size_t n, uint8_t seed) {
    for (size_t i = 0; i < n; i++)
        gw_u8(w, (uint8_t)(seed + i));
}

static void gw_free(gw *w) {
    free(w->p);
    w->p = NULL;
    w->n = w->cap = 0;
}

#endif
