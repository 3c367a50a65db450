/* GGUF reader (versions 2 and 3): header, metadata key/values of every type
 * (nested arrays included), tensor infos, general.alignment, and the tensor
 * data mmap'd read-only. The file is untrusted: every count, length, dimension,
 * type, offset and size is checked with overflow-safe arithmetic against the
 * bytes that remain before anything is allocated or read; a bad file gives
 * KVC_ERR_FORMAT with a message naming the field and the value.
 * Spec: ggml/docs/gguf.md. */
#ifndef KVC_GGUF_H
#define KVC_GGUF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvcomp.h"

typedef enum kvc_gguf_vtype {
    KVC_GGUF_U8 = 0, KVC_GGUF_I8 = 1, KVC_GGUF_U16 = 2, KVC_GGUF_I16 = 3,
    KVC_GGUF_U32 = 4, KVC_GGUF_I32 = 5, KVC_GGUF_F32 = 6, KVC_GGUF_BOOL = 7,
    KVC_GGUF_STRING = 8, KVC_GGUF_ARRAY = 9, KVC_GGUF_U64 = 10, KVC_GGUF_I64 = 11,
    KVC_GGUF_F64 = 12,
} kvc_gguf_vtype;

typedef struct kvc_gguf_str {
    const char *ptr; /* not NUL-terminated in the file; the reader keeps a NUL-terminated copy */
    uint64_t len;
} kvc_gguf_str;

typedef struct kvc_gguf_value kvc_gguf_value;
struct kvc_gguf_value {
    kvc_gguf_vtype type;
    union {
        uint64_t u;  /* U8..U64, BOOL */
        int64_t i;   /* I8..I64 */
        double f;    /* F32, F64 */
        kvc_gguf_str s;
        struct {
            kvc_gguf_vtype type; /* element type */
            uint64_t n;
            const kvc_gguf_value *items; /* n values (nested arrays allowed) */
        } arr;
    };
};

typedef struct kvc_gguf_kv {
    kvc_gguf_str key;
    kvc_gguf_value value;
} kvc_gguf_kv;

typedef struct kvc_gguf_tensor {
    kvc_gguf_str name;
    uint32_t n_dims;      /* 1..4 */
    uint64_t ne[4];       /* ne[0] is the contiguous (row) dimension; unused dims are 1 */
    uint32_t type;        /* ggml type id (see model/wtype.h) */
    uint64_t offset;      /* relative to the data section, aligned */
    uint64_t n_bytes;     /* checked against the file */
    const void *data;     /* into the mapping */
    uint64_t n_elements;  /* ne[0]*ne[1]*ne[2]*ne[3], checked not to overflow */
} kvc_gguf_tensor;

typedef struct kvc_gguf {
    uint32_t version;
    uint64_t n_kv;
    kvc_gguf_kv *kv;
    uint64_t n_tensors;
    kvc_gguf_tensor *tensors;
    uint64_t alignment;
    const uint8_t *base; /* whole file mapping */
    size_t size;
    void *priv;          /* reader-owned allocations */
    uint64_t data_offset; /* file offset of the tensor data section (aligned) */
} kvc_gguf;

/* Map and parse a file. On failure *out is NULL and nothing leaks. */
kvc_status kvc_gguf_open(const char *path, kvc_gguf **out);
/* Parse an in-memory buffer (not copied; must outlive the result). For tests and fuzzing. */
kvc_status kvc_gguf_parse(const void *buf, size_t size, kvc_gguf **out);
void kvc_gguf_close(kvc_gguf *g);

/* Lookups: NULL when absent. */
const kvc_gguf_kv *kvc_gguf_find(const kvc_gguf *g, const char *key);
const kvc_gguf_tensor *kvc_gguf_tensor_find(const kvc_gguf *g, const char *name);

/* Typed getters: KVC_ERR_FORMAT naming the key if present with the wrong type
 * (integers of any width convert when the value fits); absent keys return
 * KVC_ERR_FORMAT "missing key ..." unless the caller pre-checks with find. */
kvc_status kvc_gguf_get_u64(const kvc_gguf *g, const char *key, uint64_t *out);
kvc_status kvc_gguf_get_f32(const kvc_gguf *g, const char *key, float *out);
kvc_status kvc_gguf_get_str(const kvc_gguf *g, const char *key, const char **out);

/* Name of a value type ("u32", "string", ...). */
const char *kvc_gguf_vtype_name(kvc_gguf_vtype t);

/* More typed getters, same rules as above. get_i64 converts any integer that
 * fits; get_bool wants a bool; get_arr wants an array whose elements have type
 * `elem` and returns the array value (v->arr.n items in v->arr.items). */
kvc_status kvc_gguf_get_i64(const kvc_gguf *g, const char *key, int64_t *out);
kvc_status kvc_gguf_get_bool(const kvc_gguf *g, const char *key, int *out);
kvc_status kvc_gguf_get_arr(const kvc_gguf *g, const char *key, kvc_gguf_vtype elem,
                            const kvc_gguf_value **out);

/* ggml tensor types as GGUF stores them: every id ggml defines, whether or not
 * kvcomp has kernels for it (model/wtype.h covers the supported ones). Name
 * ("q4_1"), elements per block and bytes per block; NULL / 0 for an unknown or
 * removed id. */
const char *kvc_ggml_type_name(uint32_t type);
int kvc_ggml_type_block(uint32_t type, uint32_t *block, uint32_t *block_bytes);

/* What kvc_inspect (kvcomp_eval.h) prints, for an already parsed file (out:
 * NULL for stdout; label names the file in the output). Also lets the fuzz
 * target print every parse. */
void kvc_gguf_print(const kvc_gguf *g, const char *label, FILE *out, int json);

/* Limits the reader enforces (beyond "fits in the file"). */
#define KVC_GGUF_MAX_ALIGNMENT (1u << 20)
#define KVC_GGUF_MAX_KEY_LEN   65535u /* spec: keys are at most 2^16-1 bytes */
#define KVC_GGUF_MAX_NAME_LEN  64u    /* spec: tensor names are at most 64 bytes */
#define KVC_GGUF_MAX_DEPTH     8      /* nesting depth of arrays of arrays */

#endif
