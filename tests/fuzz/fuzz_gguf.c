/* libFuzzer target for the GGUF reader (untrusted input): parse the bytes with
 * kvc_gguf_parse; when they parse, read everything the result points at, look
 * every key and tensor up, and print the file both ways (table and JSON) to
 * /dev/null. Built by `make fuzz` (clang, -fsanitize=fuzzer,address,undefined);
 * seeds in tests/fuzz/corpus_gguf/. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gguf/gguf.h"

static unsigned sink;

static void touch(const kvc_gguf_value *v) {
    if (v->type == KVC_GGUF_STRING) {
        for (uint64_t i = 0; i <= v->s.len; i++)
            sink += (unsigned char)v->s.ptr[i];
    } else if (v->type == KVC_GGUF_ARRAY) {
        for (uint64_t i = 0; i < v->arr.n; i++)
            touch(&v->arr.items[i]);
    } else {
        sink += (unsigned)v->u;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static FILE *devnull;
    if (!devnull) devnull = fopen("/dev/null", "w");
    kvc_gguf *g = NULL;
    if (kvc_gguf_parse(data, size, &g) != KVC_OK) return 0;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        if (kvc_gguf_find(g, g->kv[i].key.ptr) != &g->kv[i]) __builtin_trap();
        touch(&g->kv[i].value);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kvc_gguf_tensor *t = &g->tensors[i];
        if (kvc_gguf_tensor_find(g, t->name.ptr) != t) __builtin_trap();
        const uint8_t *d = t->data;
        if (d < g->base || t->n_bytes > g->size || d + t->n_bytes > g->base + g->size)
            __builtin_trap();
        sink += d[0] + d[t->n_bytes - 1];
    }
    uint64_t u;
    float f;
    const char *s;
    (void)kvc_gguf_get_u64(g, "general.alignment", &u);
    (void)kvc_gguf_get_f32(g, "general.alignment", &f);
    (void)kvc_gguf_get_str(g, "general.architecture", &s);
    if (devnull) {
        kvc_gguf_print(g, "fuzz", devnull, 0);
        kvc_gguf_print(g, "fuzz", devnull, 1);
    }
    kvc_gguf_close(g);
    return 0;
}
