/* GGUF parser for versions 2 and 3 (ggml docs/gguf.md): header, metadata
 * key/values of every type (arrays of arrays included), tensor infos,
 * general.alignment and the placement of tensor data. The buffer is untrusted.
 * Every count, length, dimension, type id, offset and size is checked with
 * overflow-safe arithmetic against the bytes that remain before anything is
 * read or allocated: an array of n items needs at least n * (smallest item)
 * bytes left, so no allocation is larger than a small multiple of the input.
 * Errors are KVC_ERR_FORMAT with a message naming the field and the value,
 * e.g. `kv[5] key "general.name": string length 99999 past end of file`.
 * Tensors must not share data bytes (an overlap aliases one weight onto another).
 * All allocations come from one arena owned by the result; a failure frees it. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "gguf/gguf.h"
#include "gguf/gguf_internal.h"

#define GGUF_DEFAULT_ALIGNMENT 32
#define ARENA_BLOCK            (64 * 1024)
#define MIN_KV_BYTES           (8 + 1 + 4 + 1)         /* key len, 1-byte key, type, 1-byte value */
#define MIN_TENSOR_BYTES       (8 + 1 + 4 + 8 + 4 + 8) /* name len, name, n_dims, ne[0], type, offset */

/* ---- arena ---------------------------------------------------------------- */

struct gguf_arena_block {
    gguf_arena_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

/* Zeroed memory owned by the parse; NULL when out of memory. */
static void *arena_alloc(gguf_priv *pv, size_t n) {
    n = (n + 15) & ~(size_t)15;
    gguf_arena_block *b = pv->blocks;
    if (b == NULL || b->cap - b->used < n) {
        size_t cap = n > ARENA_BLOCK / 4 ? n : ARENA_BLOCK;
        if (cap > SIZE_MAX - sizeof *b) return NULL;
        b = calloc(1, sizeof *b + cap);
        if (b == NULL) return NULL;
        b->cap = cap;
        if (n > ARENA_BLOCK / 4 && pv->blocks) { /* big: keep the current block current */
            b->next = pv->blocks->next;
            pv->blocks->next = b;
        } else {
            b->next = pv->blocks;
            pv->blocks = b;
        }
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

/* ---- name index (open addressing, FNV-1a) --------------------------------- */

static uint64_t hash_bytes(const char *s, uint64_t n) {
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static int index_init(gguf_priv *pv, gguf_name_index *ix, uint64_t n) {
    uint64_t cap = 8;
    while (cap < 2 * n)
        cap *= 2; /* n is bounded by the file size, so this terminates */
    ix->slots = arena_alloc(pv, cap * sizeof *ix->slots);
    ix->mask = cap - 1;
    return ix->slots != NULL;
}

/* Index of `name` among the strings names[stride*i], or UINT64_MAX. When absent
 * and insert_at != UINT64_MAX, records insert_at under the name. */
static uint64_t index_probe(gguf_name_index *ix, const kvc_gguf_str *names, size_t stride,
                            const char *name, uint64_t len, uint64_t insert_at) {
    if (ix->slots == NULL) return UINT64_MAX;
    for (uint64_t h = hash_bytes(name, len) & ix->mask;; h = (h + 1) & ix->mask) {
        uint64_t s = ix->slots[h];
        if (s == 0) {
            if (insert_at != UINT64_MAX) ix->slots[h] = insert_at + 1;
            return UINT64_MAX;
        }
        const kvc_gguf_str *o = (const kvc_gguf_str *)((const char *)names + stride * (s - 1));
        if (o->len == len && memcmp(o->ptr, name, len) == 0) return s - 1;
    }
}

#define KV_STRIDE     sizeof(kvc_gguf_kv)
#define TENSOR_STRIDE sizeof(kvc_gguf_tensor)

const kvc_gguf_kv *kvc_gguf_find(const kvc_gguf *g, const char *key) {
    if (g == NULL || key == NULL || g->n_kv == 0) return NULL;
    gguf_priv *pv = g->priv;
    uint64_t i = index_probe(&pv->kv_index, &g->kv[0].key, KV_STRIDE, key, strlen(key), UINT64_MAX);
    return i == UINT64_MAX ? NULL : &g->kv[i];
}

const kvc_gguf_tensor *kvc_gguf_tensor_find(const kvc_gguf *g, const char *name) {
    if (g == NULL || name == NULL || g->n_tensors == 0) return NULL;
    gguf_priv *pv = g->priv;
    uint64_t i = index_probe(&pv->tensor_index, &g->tensors[0].name, TENSOR_STRIDE, name,
                             strlen(name), UINT64_MAX);
    return i == UINT64_MAX ? NULL : &g->tensors[i];
}

/* ---- cursor and error context --------------------------------------------- */

typedef struct parser {
    const uint8_t *p;
    size_t size, pos;
    gguf_priv *pv;
    char where[160];                   /* `kv[5] key "general.name"`, `tensor blk.0.x` */
    uint64_t path[KVC_GGUF_MAX_DEPTH]; /* item index per array level, for messages */
    int depth;
} parser;

static size_t left(const parser *ps) {
    return ps->size - ps->pos;
}

/* Fails with "<where>[i][j]: <message>". */
__attribute__((format(printf, 2, 3))) static kvc_status perr(parser *ps, const char *fmt, ...) {
    char msg[400];
    int n = snprintf(msg, sizeof msg, "%s", ps->where);
    for (int d = 0; d < ps->depth && n >= 0 && (size_t)n < sizeof msg; d++)
        n += snprintf(msg + n, sizeof msg - (size_t)n, "[%" PRIu64 "]", ps->path[d]);
    if (n >= 0 && (size_t)n < sizeof msg - 2) {
        if (n > 0) {
            msg[n++] = ':';
            msg[n++] = ' ';
        }
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return kvc_fail(KVC_ERR_FORMAT, "%s", msg);
}

static kvc_status nomem(parser *ps, const char *what, uint64_t n) {
    return kvc_fail(KVC_ERR_NOMEM, "%s: cannot allocate %s (%" PRIu64 " items)", ps->where, what,
                    n);
}

/* Printable, truncated copy of a file string for messages. */
static void show(char *dst, size_t cap, const char *s, uint64_t len) {
    size_t j = 0, keep = cap - 4; /* room for "..." and the NUL */
    for (uint64_t i = 0; i < len && j < keep; i++) {
        unsigned char c = (unsigned char)s[i];
        dst[j++] = (c >= 0x20 && c < 0x7f && c != '"') ? (char)c : '?';
    }
    if (len > keep) dst[j++] = '.', dst[j++] = '.', dst[j++] = '.';
    dst[j] = '\0';
}

static uint64_t le(const uint8_t *q, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | q[i];
    return v;
}

static kvc_status rd_uint(parser *ps, int n, const char *what, uint64_t *out) {
    *out = 0;
    if (left(ps) < (size_t)n)
        return perr(ps, "%s past end of file (needs %d bytes at byte %zu, file has %zu)", what, n,
                    ps->pos, ps->size);
    *out = le(ps->p + ps->pos, n);
    ps->pos += (size_t)n;
    return KVC_OK;
}

static kvc_status rd_u32(parser *ps, const char *what, uint32_t *out) {
    uint64_t v = 0;
    KVC_TRY(rd_uint(ps, 4, what, &v));
    *out = (uint32_t)v;
    return KVC_OK;
}

/* A length-prefixed string, copied NUL-terminated into the arena. */
static kvc_status rd_str(parser *ps, const char *what, kvc_gguf_str *out) {
    uint64_t len = 0;
    KVC_TRY(rd_uint(ps, 8, what, &len));
    if (len > left(ps))
        return perr(ps, "%s length %" PRIu64 " past end of file (%zu bytes left at byte %zu)", what,
                    len, left(ps), ps->pos);
    char *s = arena_alloc(ps->pv, (size_t)len + 1);
    if (s == NULL) return nomem(ps, what, len);
    memcpy(s, ps->p + ps->pos, (size_t)len);
    s[len] = '\0';
    ps->pos += (size_t)len;
    out->ptr = s;
    out->len = len;
    return KVC_OK;
}

/* ---- metadata values ------------------------------------------------------ */

/* Bytes of a scalar value; 0 for string and array. */
const char *kvc_gguf_vtype_name(kvc_gguf_vtype t) {
    static const char *const names[] = {
        [KVC_GGUF_U8] = "u8",       [KVC_GGUF_I8] = "i8",     [KVC_GGUF_U16] = "u16",
        [KVC_GGUF_I16] = "i16",     [KVC_GGUF_U32] = "u32",   [KVC_GGUF_I32] = "i32",
        [KVC_GGUF_F32] = "f32",     [KVC_GGUF_BOOL] = "bool", [KVC_GGUF_STRING] = "string",
        [KVC_GGUF_ARRAY] = "array", [KVC_GGUF_U64] = "u64",   [KVC_GGUF_I64] = "i64",
        [KVC_GGUF_F64] = "f64",
    };
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

static size_t scalar_bytes(uint32_t t) {
    static const uint8_t sz[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < 13 ? sz[t] : 0;
}

/* Smallest encoding of one value of type t: bounds array counts. */
static size_t min_value_bytes(uint32_t t) {
    if (t == KVC_GGUF_STRING) return 8;
    if (t == KVC_GGUF_ARRAY) return 4 + 8;
    return scalar_bytes(t);
}

static kvc_status rd_scalar(parser *ps, kvc_gguf_vtype t, kvc_gguf_value *v) {
    int n = (int)scalar_bytes(t);
    uint64_t raw = 0;
    KVC_TRY(rd_uint(ps, n, kvc_gguf_vtype_name(t), &raw));
    switch (t) {
    case KVC_GGUF_I8:
        v->i = (int8_t)raw;
        break;
    case KVC_GGUF_I16:
        v->i = (int16_t)raw;
        break;
    case KVC_GGUF_I32:
        v->i = (int32_t)raw;
        break;
    case KVC_GGUF_I64:
        v->i = (int64_t)raw;
        break;
    case KVC_GGUF_F32: {
        uint32_t b = (uint32_t)raw;
        float f;
        memcpy(&f, &b, 4);
        v->f = f;
        break;
    }
    case KVC_GGUF_F64:
        memcpy(&v->f, &raw, 8);
        break;
    case KVC_GGUF_BOOL:
        if (raw > 1) return perr(ps, "bool value %" PRIu64 " (must be 0 or 1)", raw);
        v->u = raw;
        break;
    default:
        v->u = raw;
        break; /* unsigned */
    }
    return KVC_OK;
}

static kvc_status rd_value(parser *ps, kvc_gguf_vtype t, kvc_gguf_value *v);

static kvc_status rd_array(parser *ps, kvc_gguf_value *v) {
    if (ps->depth >= KVC_GGUF_MAX_DEPTH)
        return perr(ps, "arrays nested deeper than %d levels", KVC_GGUF_MAX_DEPTH);
    uint32_t et = 0;
    uint64_t n = 0;
    KVC_TRY(rd_u32(ps, "array element type", &et));
    if (et > KVC_GGUF_F64) return perr(ps, "array element type %" PRIu32 " unknown", et);
    KVC_TRY(rd_uint(ps, 8, "array count", &n));
    size_t min = min_value_bytes(et);
    if (n > left(ps) / min)
        return perr(ps,
                    "array of %s: count %" PRIu64 " past end of file (%zu bytes left, "
                    "%zu per item at least)",
                    kvc_gguf_vtype_name(et), n, left(ps), min);
    v->arr.type = (kvc_gguf_vtype)et;
    v->arr.n = n;
    v->arr.items = NULL;
    if (n == 0) return KVC_OK;
    kvc_gguf_value *items = arena_alloc(ps->pv, (size_t)n * sizeof *items);
    if (items == NULL) return nomem(ps, "array", n);
    v->arr.items = items;
    int d = ps->depth++;
    for (uint64_t i = 0; i < n; i++) {
        ps->path[d] = i;
        KVC_TRY(rd_value(ps, (kvc_gguf_vtype)et, &items[i]));
    }
    ps->depth--;
    return KVC_OK;
}

static kvc_status rd_value(parser *ps, kvc_gguf_vtype t, kvc_gguf_value *v) {
    v->type = t;
    if (t == KVC_GGUF_STRING) return rd_str(ps, "string", &v->s);
    if (t == KVC_GGUF_ARRAY) return rd_array(ps, v);
    return rd_scalar(ps, t, v);
}

/* ---- header, key/values, alignment ---------------------------------------- */

static kvc_status rd_header(parser *ps, kvc_gguf *g) {
    snprintf(ps->where, sizeof ps->where, "header");
    if (ps->size < 4) return perr(ps, "file of %zu bytes is too short for a GGUF header", ps->size);
    if (memcmp(ps->p, "GGUF", 4) != 0)
        return perr(ps, "bad magic %02x %02x %02x %02x (expected \"GGUF\")", ps->p[0], ps->p[1],
                    ps->p[2], ps->p[3]);
    ps->pos = 4;
    KVC_TRY(rd_u32(ps, "version", &g->version));
    if (g->version == 0x02000000u || g->version == 0x03000000u)
        return perr(ps, "big-endian GGUF (version bytes %08" PRIx32 ") not supported", g->version);
    if (g->version != 2 && g->version != 3)
        return perr(ps, "version %" PRIu32 " not supported (2 or 3)", g->version);
    KVC_TRY(rd_uint(ps, 8, "tensor count", &g->n_tensors));
    KVC_TRY(rd_uint(ps, 8, "kv count", &g->n_kv));
    if ((int64_t)g->n_tensors < 0)
        return perr(ps, "tensor count %" PRId64 " is negative", (int64_t)g->n_tensors);
    if ((int64_t)g->n_kv < 0) return perr(ps, "kv count %" PRId64 " is negative", (int64_t)g->n_kv);
    if (g->n_kv > left(ps) / MIN_KV_BYTES)
        return perr(ps, "kv count %" PRIu64 " past end of file (%zu bytes left)", g->n_kv,
                    left(ps));
    if (g->n_tensors > left(ps) / MIN_TENSOR_BYTES ||
        g->n_tensors * MIN_TENSOR_BYTES > left(ps) - g->n_kv * MIN_KV_BYTES)
        return perr(ps, "tensor count %" PRIu64 " past end of file (%zu bytes left)", g->n_tensors,
                    left(ps));
    return KVC_OK;
}

static kvc_status rd_kvs(parser *ps, kvc_gguf *g) {
    if (g->n_kv == 0) return KVC_OK;
    g->kv = arena_alloc(ps->pv, (size_t)g->n_kv * sizeof *g->kv);
    snprintf(ps->where, sizeof ps->where, "metadata");
    if (g->kv == NULL) return nomem(ps, "key/values", g->n_kv);
    if (!index_init(ps->pv, &ps->pv->kv_index, g->n_kv)) return nomem(ps, "key index", g->n_kv);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        kvc_gguf_kv *kv = &g->kv[i];
        snprintf(ps->where, sizeof ps->where, "kv[%" PRIu64 "] key", i);
        KVC_TRY(rd_str(ps, "string", &kv->key));
        if (kv->key.len == 0) return perr(ps, "empty key");
        if (kv->key.len > KVC_GGUF_MAX_KEY_LEN)
            return perr(ps, "key length %" PRIu64 " exceeds %u", kv->key.len, KVC_GGUF_MAX_KEY_LEN);
        if (memchr(kv->key.ptr, 0, kv->key.len)) return perr(ps, "key contains a NUL byte");
        char name[96];
        show(name, sizeof name, kv->key.ptr, kv->key.len);
        snprintf(ps->where, sizeof ps->where, "kv[%" PRIu64 "] key \"%s\"", i, name);
        uint64_t prev =
            index_probe(&ps->pv->kv_index, &g->kv[0].key, KV_STRIDE, kv->key.ptr, kv->key.len, i);
        if (prev != UINT64_MAX) return perr(ps, "duplicate key (also kv[%" PRIu64 "])", prev);
        uint32_t t = 0;
        KVC_TRY(rd_u32(ps, "value type", &t));
        if (t > KVC_GGUF_F64) return perr(ps, "value type %" PRIu32 " unknown", t);
        KVC_TRY(rd_value(ps, (kvc_gguf_vtype)t, &kv->value));
    }
    return KVC_OK;
}

static kvc_status rd_alignment(parser *ps, kvc_gguf *g) {
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const kvc_gguf_kv *kv = kvc_gguf_find(g, "general.alignment");
    if (kv == NULL) return KVC_OK;
    snprintf(ps->where, sizeof ps->where, "kv[%" PRIu64 "] key \"general.alignment\"",
             (uint64_t)(kv - g->kv));
    const kvc_gguf_value *v = &kv->value;
    uint64_t a;
    switch (v->type) {
    case KVC_GGUF_U8:
    case KVC_GGUF_U16:
    case KVC_GGUF_U32:
    case KVC_GGUF_U64:
        a = v->u;
        break;
    case KVC_GGUF_I8:
    case KVC_GGUF_I16:
    case KVC_GGUF_I32:
    case KVC_GGUF_I64:
        if (v->i < 0) return perr(ps, "alignment %" PRId64 " is negative", v->i);
        a = (uint64_t)v->i;
        break;
    default:
        return perr(ps, "type %s, expected u32", kvc_gguf_vtype_name(v->type));
    }
    if (a == 0 || (a & (a - 1)) != 0 || a > KVC_GGUF_MAX_ALIGNMENT)
        return perr(ps, "alignment %" PRIu64 " (must be a power of two in 1..%u)", a,
                    KVC_GGUF_MAX_ALIGNMENT);
    g->alignment = a;
    return KVC_OK;
}

/* ---- tensor infos and data placement -------------------------------------- */

static kvc_status rd_tensor(parser *ps, kvc_gguf *g, uint64_t i) {
    kvc_gguf_tensor *t = &g->tensors[i];
    snprintf(ps->where, sizeof ps->where, "tensor[%" PRIu64 "] name", i);
    KVC_TRY(rd_str(ps, "string", &t->name));
    if (t->name.len == 0) return perr(ps, "empty tensor name");
    if (t->name.len > KVC_GGUF_MAX_NAME_LEN)
        return perr(ps, "name length %" PRIu64 " exceeds %u", t->name.len, KVC_GGUF_MAX_NAME_LEN);
    if (memchr(t->name.ptr, 0, t->name.len)) return perr(ps, "name contains a NUL byte");
    char name[80];
    show(name, sizeof name, t->name.ptr, t->name.len);
    snprintf(ps->where, sizeof ps->where, "tensor %s", name);
    uint64_t prev = index_probe(&ps->pv->tensor_index, &g->tensors[0].name, TENSOR_STRIDE,
                                t->name.ptr, t->name.len, i);
    if (prev != UINT64_MAX)
        return perr(ps, "duplicate tensor name (also tensor[%" PRIu64 "])", prev);

    KVC_TRY(rd_u32(ps, "n_dims", &t->n_dims));
    if (t->n_dims < 1 || t->n_dims > 4)
        return perr(ps, "n_dims %" PRIu32 " (must be 1..4)", t->n_dims);
    uint64_t n_el = 1;
    for (uint32_t d = 0; d < 4; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        KVC_TRY(rd_uint(ps, 8, "dimension", &t->ne[d]));
        if ((int64_t)t->ne[d] < 0)
            return perr(ps, "ne[%" PRIu32 "] = %" PRId64 " is negative", d, (int64_t)t->ne[d]);
        if (t->ne[d] == 0) return perr(ps, "ne[%" PRIu32 "] is 0", d);
        if (t->ne[d] > (uint64_t)INT64_MAX / n_el)
            return perr(ps, "element count overflows at ne[%" PRIu32 "] = %" PRIu64, d, t->ne[d]);
        n_el *= t->ne[d];
    }
    t->n_elements = n_el;

    KVC_TRY(rd_u32(ps, "type", &t->type));
    uint32_t block, block_bytes;
    if (!kvc_ggml_type_block(t->type, &block, &block_bytes))
        return perr(ps, "unknown ggml type %" PRIu32, t->type);
    if (t->ne[0] % block != 0)
        return perr(ps,
                    "ne[0] = %" PRIu64 " not a multiple of the block size %" PRIu32 " of type %s",
                    t->ne[0], block, kvc_ggml_type_name(t->type));
    uint64_t blocks_per_row = t->ne[0] / block, rows = n_el / t->ne[0];
    if (blocks_per_row > UINT64_MAX / block_bytes ||
        rows > UINT64_MAX / (blocks_per_row * block_bytes))
        return perr(ps, "byte size of %" PRIu64 " elements of type %s overflows", n_el,
                    kvc_ggml_type_name(t->type));
    t->n_bytes = rows * blocks_per_row * block_bytes;
    return rd_uint(ps, 8, "offset", &t->offset);
}

static kvc_status place_tensors(parser *ps, kvc_gguf *g) {
    /* the data section starts at the next multiple of the alignment */
    uint64_t a = g->alignment, end = ps->pos;
    if (end > UINT64_MAX - (a - 1)) return kvc_fail(KVC_ERR_FORMAT, "data offset overflows");
    g->data_offset = (end + a - 1) / a * a;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        kvc_gguf_tensor *t = &g->tensors[i];
        char name[80];
        show(name, sizeof name, t->name.ptr, t->name.len);
        snprintf(ps->where, sizeof ps->where, "tensor %s", name);
        if (t->offset % a != 0)
            return perr(ps, "offset %" PRIu64 " not a multiple of the alignment %" PRIu64,
                        t->offset, a);
        if (g->data_offset > ps->size || t->offset > ps->size - g->data_offset)
            return perr(
                ps, "offset %" PRIu64 " past end of file (%zu; data section at byte %" PRIu64 ")",
                t->offset, ps->size, g->data_offset);
        uint64_t room = ps->size - g->data_offset - t->offset;
        if (t->n_bytes > room)
            return perr(ps,
                        "%" PRIu64 " bytes at offset %" PRIu64 " past end of file (%zu; %" PRIu64
                        " bytes left)",
                        t->n_bytes, t->offset, ps->size, room);
        t->data = ps->p + g->data_offset + t->offset;
    }
    return KVC_OK;
}

/* Tensor order by data offset, for the overlap check (insertion into a sorted
 * prefix would be quadratic on files with many tensors: merge sort). */
static void sort_by_offset(const kvc_gguf *g, uint64_t *ix, uint64_t *tmp, uint64_t n) {
    if (n < 2) return;
    uint64_t h = n / 2;
    sort_by_offset(g, ix, tmp, h);
    sort_by_offset(g, ix + h, tmp, n - h);
    uint64_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = g->tensors[ix[j]].offset < g->tensors[ix[i]].offset ? ix[j++] : ix[i++];
    while (i < h)
        tmp[k++] = ix[i++];
    while (j < n)
        tmp[k++] = ix[j++];
    memcpy(ix, tmp, n * sizeof *ix);
}

/* Two tensors sharing bytes would let one file region be read as two weights
 * (a crafted file aliases a norm onto the embedding): refuse, naming both. */
static kvc_status check_overlaps(parser *ps, kvc_gguf *g) {
    uint64_t n = g->n_tensors;
    if (n < 2) return KVC_OK;
    uint64_t *ix = arena_alloc(ps->pv, (size_t)n * sizeof *ix);
    uint64_t *tmp = arena_alloc(ps->pv, (size_t)n * sizeof *tmp);
    snprintf(ps->where, sizeof ps->where, "tensor data");
    if (ix == NULL || tmp == NULL) return nomem(ps, "overlap check", n);
    for (uint64_t i = 0; i < n; i++)
        ix[i] = i;
    sort_by_offset(g, ix, tmp, n);
    for (uint64_t i = 1; i < n; i++) {
        const kvc_gguf_tensor *a = &g->tensors[ix[i - 1]], *b = &g->tensors[ix[i]];
        if (a->offset + a->n_bytes > b->offset) { /* no overflow: both end inside the file */
            char an[80], bn[80];
            show(an, sizeof an, a->name.ptr, a->name.len);
            show(bn, sizeof bn, b->name.ptr, b->name.len);
            snprintf(ps->where, sizeof ps->where, "tensor %s", bn);
            return perr(ps,
                        "data at offset %" PRIu64 " overlaps tensor %s (offset %" PRIu64
                        ", %" PRIu64 " bytes)",
                        b->offset, an, a->offset, a->n_bytes);
        }
    }
    return KVC_OK;
}

static kvc_status parse_into(parser *ps, kvc_gguf *g) {
    KVC_TRY(rd_header(ps, g));
    KVC_TRY(rd_kvs(ps, g));
    KVC_TRY(rd_alignment(ps, g));
    if (g->n_tensors > 0) {
        snprintf(ps->where, sizeof ps->where, "tensor infos");
        g->tensors = arena_alloc(ps->pv, (size_t)g->n_tensors * sizeof *g->tensors);
        if (g->tensors == NULL) return nomem(ps, "tensor infos", g->n_tensors);
        if (!index_init(ps->pv, &ps->pv->tensor_index, g->n_tensors))
            return nomem(ps, "tensor index", g->n_tensors);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++)
        KVC_TRY(rd_tensor(ps, g, i));
    KVC_TRY(place_tensors(ps, g));
    return check_overlaps(ps, g);
}

/* ---- entry points --------------------------------------------------------- */

void kvc_gguf_free_all(kvc_gguf *g) {
    if (g == NULL) return;
    gguf_priv *pv = g->priv;
    if (pv) {
        for (gguf_arena_block *b = pv->blocks, *next; b; b = next) {
            next = b->next;
            free(b);
        }
        free(pv);
    }
    free(g);
}

kvc_status kvc_gguf_parse(const void *buf, size_t size, kvc_gguf **out) {
    if (out == NULL) return kvc_fail(KVC_ERR_ARG, "kvc_gguf_parse: out is NULL");
    *out = NULL;
    if (buf == NULL && size > 0) return kvc_fail(KVC_ERR_ARG, "kvc_gguf_parse: buf is NULL");
    kvc_gguf *g = calloc(1, sizeof *g);
    gguf_priv *pv = calloc(1, sizeof *pv);
    if (g == NULL || pv == NULL) {
        free(g);
        free(pv);
        return kvc_fail(KVC_ERR_NOMEM, "kvc_gguf_parse: out of memory");
    }
    g->priv = pv;
    g->base = buf;
    g->size = size;
    parser ps = {.p = buf, .size = size, .pv = pv};
    kvc_status s = parse_into(&ps, g);
    if (s != KVC_OK) {
        kvc_gguf_free_all(g);
        return s;
    }
    *out = g;
    return KVC_OK;
}
