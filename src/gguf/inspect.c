/* kvc_inspect (kvcomp_eval.h) and kvc_gguf_print: a GGUF file's header, metadata and tensor table, as a human
 * table or as one JSON object. Arrays are abbreviated to their first few
 * items plus the count (nested arrays likewise); long strings are cut in the
 * table but kept whole in JSON (written with kvcomp/json.h, so the output always
 * parses, whatever bytes the file holds). Totals: tensors, elements, bytes, and bytes per type. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "gguf/gguf.h"
#include "kvcomp.h"
#include "kvcomp_eval.h"

#define ARRAY_HEAD 5  /* items shown of each array */
#define TEXT_STR   60 /* bytes shown of a string in the table */

/* ---- strings -------------------------------------------------------------- */

/* Quoted, escaped and cut to TEXT_STR bytes for the table. */
static void text_str(FILE *f, const char *p, uint64_t len) {
    const unsigned char *s = (const unsigned char *)p;
    uint64_t shown = len < TEXT_STR ? len : TEXT_STR;
    fputc('"', f);
    for (uint64_t i = 0; i < shown; i++) {
        unsigned c = s[i];
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c < 0x20 || c == 0x7f)
            fprintf(f, "\\x%02x", c);
        else
            fputc((int)c, f);
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
    for (uint64_t i = len; i < (uint64_t)width; i++)
        fputc(' ', f);
}

/* ---- values ---------------------------------------------------------------- */

static void text_value(FILE *f, const kvc_gguf_value *v) {
    switch (v->type) {
    case KVC_GGUF_U8:
    case KVC_GGUF_U16:
    case KVC_GGUF_U32:
    case KVC_GGUF_U64:
        fprintf(f, "%" PRIu64, v->u);
        break;
    case KVC_GGUF_I8:
    case KVC_GGUF_I16:
    case KVC_GGUF_I32:
    case KVC_GGUF_I64:
        fprintf(f, "%" PRId64, v->i);
        break;
    case KVC_GGUF_F32:
        fprintf(f, "%.9g", v->f);
        break;
    case KVC_GGUF_F64:
        fprintf(f, "%.17g", v->f);
        break;
    case KVC_GGUF_BOOL:
        fputs(v->u ? "true" : "false", f);
        break;
    case KVC_GGUF_STRING:
        text_str(f, v->s.ptr, v->s.len);
        break;
    case KVC_GGUF_ARRAY: {
        uint64_t n = v->arr.n, shown = n < ARRAY_HEAD ? n : ARRAY_HEAD;
        fprintf(f, "[%s x %" PRIu64 "] [", kvc_gguf_vtype_name(v->arr.type), n);
        for (uint64_t i = 0; i < shown; i++) {
            if (i) fputs(", ", f);
            text_value(f, &v->arr.items[i]);
        }
        fputs(shown < n ? ", ...]" : "]", f);
        break;
    }
    }
}

/* Arrays become {"type":"array","elem_type":..,"count":..,"head":[first items]}. */
static void json_value(kvc_json *j, const kvc_gguf_value *v) {
    switch (v->type) {
    case KVC_GGUF_U8:
    case KVC_GGUF_U16:
    case KVC_GGUF_U32:
    case KVC_GGUF_U64:
        kvc_json_uint(j, v->u);
        break;
    case KVC_GGUF_I8:
    case KVC_GGUF_I16:
    case KVC_GGUF_I32:
    case KVC_GGUF_I64:
        kvc_json_int(j, v->i);
        break;
    case KVC_GGUF_F32:
        kvc_json_num(j, (float)v->f);
        break;
    case KVC_GGUF_F64:
        kvc_json_num(j, v->f);
        break;
    case KVC_GGUF_BOOL:
        kvc_json_bool(j, v->u != 0);
        break;
    case KVC_GGUF_STRING:
        kvc_json_strn(j, v->s.ptr, (size_t)v->s.len);
        break;
    case KVC_GGUF_ARRAY: {
        uint64_t n = v->arr.n, shown = n < ARRAY_HEAD ? n : ARRAY_HEAD;
        kvc_json_obj_begin(j);
        kvc_json_kv_str(j, "type", "array");
        kvc_json_kv_str(j, "elem_type", kvc_gguf_vtype_name(v->arr.type));
        kvc_json_kv_uint(j, "count", n);
        kvc_json_key(j, "head");
        kvc_json_arr_begin(j);
        for (uint64_t i = 0; i < shown; i++)
            json_value(j, &v->arr.items[i]);
        kvc_json_arr_end(j);
        kvc_json_obj_end(j);
        break;
    }
    }
}

/* ---- totals --------------------------------------------------------------- */

#define N_TYPE_IDS 64

typedef struct totals {
    uint64_t elements, bytes;
    uint64_t type_tensors[N_TYPE_IDS], type_bytes[N_TYPE_IDS];
} totals;

static uint64_t sat_add(uint64_t a, uint64_t b) {
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

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
        text_value(f, &kv->value);
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
    kvc_json j;
    kvc_json_init(&j, f, 0);
    kvc_json_obj_begin(&j);
    kvc_json_kv_str(&j, "path", path);
    kvc_json_kv_uint(&j, "size", g->size);
    kvc_json_kv_uint(&j, "version", g->version);
    kvc_json_kv_uint(&j, "alignment", g->alignment);
    kvc_json_kv_uint(&j, "data_offset", g->data_offset);
    kvc_json_kv_uint(&j, "n_kv", g->n_kv);
    kvc_json_kv_uint(&j, "n_tensors", g->n_tensors);
    kvc_json_key(&j, "metadata");
    kvc_json_arr_begin(&j);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const kvc_gguf_kv *kv = &g->kv[i];
        kvc_json_obj_begin(&j);
        kvc_json_key(&j, "key");
        kvc_json_strn(&j, kv->key.ptr, (size_t)kv->key.len);
        kvc_json_kv_str(&j, "type", kvc_gguf_vtype_name(kv->value.type));
        kvc_json_key(&j, "value");
        json_value(&j, &kv->value);
        kvc_json_obj_end(&j);
    }
    kvc_json_arr_end(&j);
    kvc_json_key(&j, "tensors");
    kvc_json_arr_begin(&j);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kvc_gguf_tensor *x = &g->tensors[i];
        kvc_json_obj_begin(&j);
        kvc_json_key(&j, "name");
        kvc_json_strn(&j, x->name.ptr, (size_t)x->name.len);
        kvc_json_kv_str(&j, "type", kvc_ggml_type_name(x->type));
        kvc_json_key(&j, "shape");
        kvc_json_arr_begin(&j);
        for (uint32_t d = 0; d < x->n_dims; d++)
            kvc_json_uint(&j, x->ne[d]);
        kvc_json_arr_end(&j);
        kvc_json_kv_uint(&j, "offset", x->offset);
        kvc_json_kv_uint(&j, "bytes", x->n_bytes);
        kvc_json_obj_end(&j);
    }
    kvc_json_arr_end(&j);
    kvc_json_key(&j, "totals");
    kvc_json_obj_begin(&j);
    kvc_json_kv_uint(&j, "tensors", g->n_tensors);
    kvc_json_kv_uint(&j, "elements", t.elements);
    kvc_json_kv_uint(&j, "bytes", t.bytes);
    kvc_json_key(&j, "by_type");
    kvc_json_obj_begin(&j);
    for (uint32_t ty = 0; ty < N_TYPE_IDS; ty++) {
        if (!t.type_tensors[ty]) continue;
        kvc_json_key(&j, kvc_ggml_type_name(ty));
        kvc_json_obj_begin(&j);
        kvc_json_kv_uint(&j, "tensors", t.type_tensors[ty]);
        kvc_json_kv_uint(&j, "bytes", t.type_bytes[ty]);
        kvc_json_obj_end(&j);
    }
    kvc_json_obj_end(&j);
    kvc_json_obj_end(&j);
    kvc_json_obj_end(&j);
    kvc_json_finish(&j);
}

void kvc_gguf_print(const kvc_gguf *g, const char *label, FILE *f, int json) {
    if (!f) f = stdout;
    if (label == NULL) label = "";
    if (json)
        print_json(f, label, g);
    else
        print_text(f, label, g);
}

kvc_status kvc_inspect(const char *path, FILE *f, int json) {
    if (!f) f = stdout;
    kvc_gguf *g = NULL;
    KVC_TRY(kvc_gguf_open(path, &g));
    kvc_gguf_print(g, path, f, json);
    kvc_gguf_close(g);
    KVC_CHECK(!ferror(f), KVC_ERR_IO, "%s: writing the inspection failed", path);
    return KVC_OK;
}
