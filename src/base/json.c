/* Streaming JSON writer (RFC 8259 §7 string escaping, §6 numbers). See include/kvcomp/json.h. */
#include "kvcomp/json.h"

#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void kvc_json_init(kvc_json *j, FILE *f, int pretty) {
    memset(j, 0, sizeof *j);
    j->f = f;
    j->pretty = pretty;
}

static void newline_indent(kvc_json *j) {
    if (!j->pretty) return;
    fputc('\n', j->f);
    for (int i = 0; i < j->depth; i++) fputs("  ", j->f);
}

/* Called before every value: the comma and indentation an array member needs,
 * or nothing after a key. */
static void before_value(kvc_json *j) {
    if (j->depth == 0) return;
    if (j->kind[j->depth - 1] == '{') {
        assert(j->key_pending && "JSON object member needs a key");
        j->key_pending = 0;
        return;
    }
    if (j->count[j->depth - 1]++ > 0) fputc(',', j->f);
    newline_indent(j);
}

static void open_level(kvc_json *j, char kind) {
    before_value(j);
    assert(j->depth < KVC_JSON_MAX_DEPTH);
    fputc(kind, j->f);
    j->kind[j->depth] = kind;
    j->count[j->depth] = 0;
    j->depth++;
}

static void close_level(kvc_json *j, char kind) {
    assert(j->depth > 0 && j->kind[j->depth - 1] == kind && !j->key_pending);
    int had = j->count[j->depth - 1];
    j->depth--;
    if (had) newline_indent(j);
    fputc(kind == '{' ? '}' : ']', j->f);
}

void kvc_json_obj_begin(kvc_json *j) { open_level(j, '{'); }
void kvc_json_obj_end(kvc_json *j) { close_level(j, '{'); }
void kvc_json_arr_begin(kvc_json *j) { open_level(j, '['); }
void kvc_json_arr_end(kvc_json *j) { close_level(j, '['); }

/* Length of the valid UTF-8 sequence starting at s (n bytes left), or 0 if the
 * bytes there are not one (overlong forms, surrogates and > U+10FFFF rejected). */
static size_t utf8_seq_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) return 0;
    if (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) return 0;
    return len;
}

static void write_string(FILE *f, const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc((int)c, f);
            i++;
        } else if (c < 0x20) {
            switch (c) {
            case '\n': fputs("\\n", f); break;
            case '\r': fputs("\\r", f); break;
            case '\t': fputs("\\t", f); break;
            case '\b': fputs("\\b", f); break;
            case '\f': fputs("\\f", f); break;
            default: fprintf(f, "\\u%04x", c); break;
            }
            i++;
        } else {
            size_t len = utf8_seq_len(s + i, n - i);
            if (len == 0) {
                fputs("\\ufffd", f);
                i++;
            } else {
                fwrite(s + i, 1, len, f);
                i += len;
            }
        }
    }
    fputc('"', f);
}

void kvc_json_key(kvc_json *j, const char *key) {
    assert(j->depth > 0 && j->kind[j->depth - 1] == '{' && !j->key_pending);
    if (j->count[j->depth - 1]++ > 0) fputc(',', j->f);
    newline_indent(j);
    write_string(j->f, key, strlen(key));
    fputs(j->pretty ? ": " : ":", j->f);
    j->key_pending = 1;
}

void kvc_json_strn(kvc_json *j, const char *s, size_t n) {
    before_value(j);
    write_string(j->f, s, n);
}

void kvc_json_str(kvc_json *j, const char *s) {
    if (!s) {
        kvc_json_null(j);
        return;
    }
    kvc_json_strn(j, s, strlen(s));
}

void kvc_json_num(kvc_json *j, double v) {
    if (!isfinite(v)) {
        kvc_json_null(j);
        return;
    }
    before_value(j);
    char buf[32];
    for (int prec = 6; prec <= 17; prec++) { /* shortest that reads back exactly */
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    fputs(buf, j->f);
}

void kvc_json_int(kvc_json *j, int64_t v) {
    before_value(j);
    fprintf(j->f, "%" PRId64, v);
}

void kvc_json_uint(kvc_json *j, uint64_t v) {
    before_value(j);
    fprintf(j->f, "%" PRIu64, v);
}

void kvc_json_bool(kvc_json *j, int v) {
    before_value(j);
    fputs(v ? "true" : "false", j->f);
}

void kvc_json_null(kvc_json *j) {
    before_value(j);
    fputs("null", j->f);
}

void kvc_json_kv_str(kvc_json *j, const char *key, const char *s) {
    kvc_json_key(j, key);
    kvc_json_str(j, s);
}
void kvc_json_kv_num(kvc_json *j, const char *key, double v) {
    kvc_json_key(j, key);
    kvc_json_num(j, v);
}
void kvc_json_kv_int(kvc_json *j, const char *key, int64_t v) {
    kvc_json_key(j, key);
    kvc_json_int(j, v);
}
void kvc_json_kv_uint(kvc_json *j, const char *key, uint64_t v) {
    kvc_json_key(j, key);
    kvc_json_uint(j, v);
}
void kvc_json_kv_bool(kvc_json *j, const char *key, int v) {
    kvc_json_key(j, key);
    kvc_json_bool(j, v);
}

void kvc_json_finish(kvc_json *j) {
    assert(j->depth == 0 && !j->key_pending);
    fputc('\n', j->f);
    fflush(j->f);
}
