/* kvc_inspect: a GGUF file's header, metadata and tensor table, as a human
 * table or as one JSON object. Arrays are abbreviated to their first few
 * items plus the count (nested arrays likewise); long strings are cut in the
 * table but kept whole in JSON. Non-UTF-8 bytes become U+FFFD in JSON so the
 * output always parses. Totals: tensors, elements, bytes, and bytes per type. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "gguf/gguf.h"
#include "kvcomp.h"

#define ARRAY_HEAD 5  /* items shown of each array */
#define TEXT_STR   60 /* bytes shown of a string in the table */

/* ---- strings -------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 if invalid. */
static int utf8_len(const unsigned char *s, uint64_t n) {
    unsigned c = s[0];
    int len;
    unsigned min;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) len = 2, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef) len = 3, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, min = 0x10000;
    else return 0;
    if ((uint64_t)len > n) return 0;
    unsigned cp = c & (0x3fu >> (len - 1));
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

static void json_str(FILE *f, const char *p, uint64_t len) {
    const unsigned char *s = (const unsigned char *)p;
    fputc('"', f);
    for (uint64_t i = 0; i < len;) {
        unsigned c = s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c), i++;
        else if (c == '\n') fputs("\\n", f), i++;
        else if (c == '\t') fputs("\\t", f), i++;
        else if (c == '\r') fputs("\\r", f), i++;
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\u%04x", c), i++;
        else {
            int n = utf8_len(s + i, len - i);
            if (n == 0) fputs("\\ufffd", f), i++;
            else fwrite(s + i, 1, (size_t)n, f), i += (uint64_t)n;
        }
    }
    fputc('"', f);
}

/* Quoted, escaped and cut to TEXT_STR bytes for the table. */
static void text_str(FILE *f, const char *p, uint64_t len) {
    const unsigned char *s = (const unsigned char *)p;
    uint64_t shown = len < TEXT_STR ? len : TEXT_STR;
    fputc('"', f);
    for (uint64_t i = 0; i < shown; i++) {
        unsigned c = s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\x%02x", c);
        else fputc((int)c, f);
    }
    fputc('"', f);
    if (shown < len) fprintf(f, "...(%" PRIu64 " bytes)", len);
}

/* A key or tensor name for the table: control bytes shown as '?', padded to width. */
static void text_name(FILE *f, const char *p, uint64_t len, int width) {
    for (uint64_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)p[i];
        fputc(c < 0x20 || c == 0x7f ? '?' : c, f);
    }
    for (uint64_t i = len; i < (uint64_t)width; i++) fputc(' ', f);
}

/* ---- values --------------------------------------------------------------- */

static void put_value(FILE *f, const kvc_gguf_value *v, int json);

static void put_float(FILE *f, double x, int is_f32, int json) {
    if (json && !isfinite(x)) fputs("null", f);
    else fprintf(f, is_f32 ? "%.9g" : "%.17g", x);
}

static void put_array(FILE *f, const kvc_gguf_value *v, int json) {
    uint64_t n = v->arr.n, shown = n < ARRAY_HEAD ? n : ARRAY_HEAD;
    if (json)
        fprintf(f, "{\"type\":\"array\",\"elem_type\":\"%s\",\"count\":%" PRIu64 ",\"head\":[",
                kvc_gguf_vtype_name(v->arr.type), n);
    else
        fprintf(f, "[%s x %" PRIu64 "] [", kvc_gguf_vtype_name(v->arr.type), n);
    for (uint64_t i = 0; i < shown; i++) {
        if (i) fputs(json ? "," : ", ", f);
        put_value(f, &v->arr.items[i], json);
    }
    if (!json && shown < n) fputs(", ...", f);
    fputs(json ? "]}" : "]", f);
}

static void put_value(FILE *f, const kvc_gguf_value *v, int json) {
    switch (v->type) {
    case KVC_GGUF_U8: case KVC_GGUF_U16: case KVC_GGUF_U32: case KVC_GGUF_U64:
        fprintf(f, "%" PRIu64, v->u);
        break;
    case KVC_GGUF_I8: case KVC_GGUF_I16: case KVC_GGUF_I32: case KVC_GGUF_I64:
        fprintf(f, "%" PRId64, v->i);
        break;
    case KVC_GGUF_F32: put_float(f, v->f, 1, json); break;
    case KVC_GGUF_F64: put_float(f, v->f, 0, json); break;
    case KVC_GGUF_BOOL: fputs(v->u ? "true" : "false", f); break;
    case KVC_GGUF_STRING:
        if (json) json_str(f, v->s.ptr, v->s.len);
        else text_str(f, v->s.ptr, v->s.len);
        break;
    case KVC_GGUF_ARRAY: put_array(f, v, json); break;
    }
}

/* ---- totals --------------------------------------------------------------- */

#define N_TYPE_IDS 64

typedef struct totals {
    uint64_t elements, bytes;
    uint64_t type_tensors[N_TYPE_IDS], type_bytes[N_TYPE_IDS];
} totals;

static uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

static void count(const kvc_gguf *g, totals *t) {
    memset(t, 0, sizeof *t);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kvc_gguf_tensor *x = &g->tensors[i];
        t->elements = sat_add(t->elements, x->n_elements);
        t->bytes = sat_add(t->bytes, x->n_bytes);
        if (x->type < N_TYPE_IDS) { /* always: the reader accepts known ids only */
            t->type_tensors[x->type]++;
            t->type_bytes[x->type] = sat_add(t->type_bytes[x->type], x->n_bytes);
        }
    }
}

static void shape_text(FILE *f, const kvc_gguf_tensor *t) {
    char buf[96];
    int n = 0;
    for (uint32_t d = 0; d < t->n_dims; d++)
        n += snprintf(buf + n, sizeof buf - (size_t)n, d ? " x %" PRIu64 : "%" PRIu64, t->ne[d]);
    fprintf(f, "%-24s", buf);
}

/* ---- the two layouts ------------------------------------------------------ */

static void print_text(FILE *f, const char *path, const kvc_gguf *g) {
    totals t;
    count(g, &t);
    fprintf(f, "%s: GGUF version %" PRIu32 ", %zu bytes\n", path, g->version, g->size);
    fprintf(f, "alignment %" PRIu64 ", tensor data at byte %" PRIu64 "\n\n", g->alignment,
            g->data_offset);
    fprintf(f, "metadata: %" PRIu64 " keys\n", g->n_kv);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const kvc_gguf_kv *kv = &g->kv[i];
        const char *tn = kvc_gguf_vtype_name(kv->value.type);
        fputs("  ", f);
        text_name(f, kv->key.ptr, kv->key.len, 44);
        fprintf(f, " %-7s ", tn);
        put_value(f, &kv->value, 0);
        fputc('\n', f);
    }
    fprintf(f, "\ntensors: %" PRIu64 "\n", g->n_tensors);
    fprintf(f, "  %-5s %-36s %-8s %-24s %14s %14s\n", "#", "name", "type", "shape", "offset",
            "bytes");
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kvc_gguf_tensor *x = &g->tensors[i];
        fprintf(f, "  %-5" PRIu64 " ", i);
        text_name(f, x->name.ptr, x->name.len, 36);
        fprintf(f, " %-8s ", kvc_ggml_type_name(x->type));
        shape_text(f, x);
        fprintf(f, " %14" PRIu64 " %14" PRIu64 "\n", x->offset, x->n_bytes);
    }
    fprintf(f, "\ntotal: %" PRIu64 " tensors, %" PRIu64 " elements, %" PRIu64 " bytes (%.2f MiB)\n",
            g->n_tensors, t.elements, t.bytes, (double)t.bytes / (1024.0 * 1024.0));
    for (uint32_t ty = 0; ty < N_TYPE_IDS; ty++)
        if (t.type_tensors[ty])
            fprintf(f, "  %-8s %6" PRIu64 " tensors %14" PRIu64 " bytes (%.2f MiB)\n",
                    kvc_ggml_type_name(ty), t.type_tensors[ty], t.type_bytes[ty],
                    (double)t.type_bytes[ty] / (1024.0 * 1024.0));
}

static void print_json(FILE *f, const char *path, const kvc_gguf *g) {
    totals t;
    count(g, &t);
    fputs("{\"path\":", f);
    json_str(f, path, strlen(path));
    fprintf(f,
            ",\"size\":%zu,\"version\":%" PRIu32 ",\"alignment\":%" PRIu64
            ",\"data_offset\":%" PRIu64 ",\"n_kv\":%" PRIu64 ",\"n_tensors\":%" PRIu64,
            g->size, g->version, g->alignment, g->data_offset, g->n_kv, g->n_tensors);
    fputs(",\"metadata\":[", f);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const kvc_gguf_kv *kv = &g->kv[i];
        fputs(i ? ",{\"key\":" : "{\"key\":", f);
        json_str(f, kv->key.ptr, kv->key.len);
        fprintf(f, ",\"type\":\"%s\",\"value\":", kvc_gguf_vtype_name(kv->value.type));
        put_value(f, &kv->value, 1);
        fputc('}', f);
    }
    fputs("],\"tensors\":[", f);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kvc_gguf_tensor *x = &g->tensors[i];
        fputs(i ? ",{\"name\":" : "{\"name\":", f);
        json_str(f, x->name.ptr, x->name.len);
        fprintf(f, ",\"type\":\"%s\",\"shape\":[", kvc_ggml_type_name(x->type));
        for (uint32_t d = 0; d < x->n_dims; d++) fprintf(f, d ? ",%" PRIu64 : "%" PRIu64, x->ne[d]);
        fprintf(f, "],\"offset\":%" PRIu64 ",\"bytes\":%" PRIu64 "}", x->offset, x->n_bytes);
    }
    fprintf(f, "],\"totals\":{\"tensors\":%" PRIu64 ",\"elements\":%" PRIu64 ",\"bytes\":%" PRIu64
               ",\"by_type\":{",
            g->n_tensors, t.elements, t.bytes);
    int first = 1;
    for (uint32_t ty = 0; ty < N_TYPE_IDS; ty++) {
        if (!t.type_tensors[ty]) continue;
        fprintf(f, "%s\"%s\":{\"tensors\":%" PRIu64 ",\"bytes\":%" PRIu64 "}", first ? "" : ",",
                kvc_ggml_type_name(ty), t.type_tensors[ty], t.type_bytes[ty]);
        first = 0;
    }
    fputs("}}}\n", f);
}

kvc_status kvc_inspect(const char *path, void *out, int json) {
    FILE *f = out ? (FILE *)out : stdout;
    kvc_gguf *g = NULL;
    KVC_TRY(kvc_gguf_open(path, &g));
    if (json) print_json(f, path, g);
    else print_text(f, path, g);
    kvc_gguf_close(g);
    KVC_CHECK(!ferror(f), KVC_ERR_IO, "%s: writing the inspection failed", path);
    return KVC_OK;
}
