/* A small streaming JSON writer (RFC 8259) for the `--json` output of every
 * measuring command. It tracks nesting and commas so callers only say what to
 * write; strings are escaped and always come out as valid UTF-8 (invalid input
 * bytes become U+FFFD); non-finite numbers are written as null, since JSON has
 * no NaN or infinity. Misuse (a value where a key is due, unbalanced ends) is a
 * bug in the caller and is caught by assert. */
#ifndef KVCOMP_JSON_H
#define KVCOMP_JSON_H

#include <stdint.h>
#include <stdio.h>

#define KVC_JSON_MAX_DEPTH 32

typedef struct kvc_json {
    FILE *f;
    int pretty;                        /* newlines and two-space indentation */
    int depth;                         /* open objects/arrays */
    char kind[KVC_JSON_MAX_DEPTH];     /* '{' or '[' per open level */
    int count[KVC_JSON_MAX_DEPTH];     /* members written per open level */
    int key_pending;                   /* a key was written, its value is due */
} kvc_json;

void kvc_json_init(kvc_json *j, FILE *f, int pretty);

void kvc_json_obj_begin(kvc_json *j);
void kvc_json_obj_end(kvc_json *j);
void kvc_json_arr_begin(kvc_json *j);
void kvc_json_arr_end(kvc_json *j);

/* Inside an object: the key of the next value. */
void kvc_json_key(kvc_json *j, const char *key);

void kvc_json_str(kvc_json *j, const char *s); /* NULL writes null */
void kvc_json_strn(kvc_json *j, const char *s, size_t n);
void kvc_json_num(kvc_json *j, double v); /* shortest form that reads back exactly */
void kvc_json_int(kvc_json *j, int64_t v);
void kvc_json_uint(kvc_json *j, uint64_t v);
void kvc_json_bool(kvc_json *j, int v);
void kvc_json_null(kvc_json *j);

/* key + value in one call. */
void kvc_json_kv_str(kvc_json *j, const char *key, const char *s);
void kvc_json_kv_num(kvc_json *j, const char *key, double v);
void kvc_json_kv_int(kvc_json *j, const char *key, int64_t v);
void kvc_json_kv_uint(kvc_json *j, const char *key, uint64_t v);
void kvc_json_kv_bool(kvc_json *j, const char *key, int v);

/* Ends the document: a final newline (all levels must be closed). */
void kvc_json_finish(kvc_json *j);

#endif
