/* Typed getters over parsed GGUF metadata: integers of any width convert when
 * the value fits the requested type; a present key of the wrong type, or an
 * absent key, is KVC_ERR_FORMAT naming the key. */
#include <inttypes.h>

#include "base/status.h"
#include "gguf/gguf.h"

static int is_unsigned(kvc_gguf_vtype t) {
    return t == KVC_GGUF_U8 || t == KVC_GGUF_U16 || t == KVC_GGUF_U32 || t == KVC_GGUF_U64;
}
static int is_signed(kvc_gguf_vtype t) {
    return t == KVC_GGUF_I8 || t == KVC_GGUF_I16 || t == KVC_GGUF_I32 || t == KVC_GGUF_I64;
}

static kvc_status lookup(const kvc_gguf *g, const char *key, const kvc_gguf_value **v) {
    if (g == NULL || key == NULL) return kvc_fail(KVC_ERR_ARG, "gguf getter: NULL argument");
    const kvc_gguf_kv *kv = kvc_gguf_find(g, key);
    if (kv == NULL) return kvc_fail(KVC_ERR_FORMAT, "missing key %s", key);
    *v = &kv->value;
    return KVC_OK;
}

static kvc_status wrong_type(const char *key, const kvc_gguf_value *v, const char *want) {
    return kvc_fail(KVC_ERR_FORMAT, "key %s: type %s, expected %s", key,
                    kvc_gguf_vtype_name(v->type), want);
}

kvc_status kvc_gguf_get_u64(const kvc_gguf *g, const char *key, uint64_t *out) {
    const kvc_gguf_value *v = NULL;
    KVC_TRY(lookup(g, key, &v));
    if (is_unsigned(v->type)) {
        *out = v->u;
        return KVC_OK;
    }
    if (is_signed(v->type)) {
        KVC_CHECK(v->i >= 0, KVC_ERR_FORMAT, "key %s: value %" PRId64 " is negative", key, v->i);
        *out = (uint64_t)v->i;
        return KVC_OK;
    }
    return wrong_type(key, v, "an integer");
}

kvc_status kvc_gguf_get_i64(const kvc_gguf *g, const char *key, int64_t *out) {
    const kvc_gguf_value *v = NULL;
    KVC_TRY(lookup(g, key, &v));
    if (is_signed(v->type)) {
        *out = v->i;
        return KVC_OK;
    }
    if (is_unsigned(v->type)) {
        KVC_CHECK(v->u <= (uint64_t)INT64_MAX, KVC_ERR_FORMAT,
                  "key %s: value %" PRIu64 " does not fit in i64", key, v->u);
        *out = (int64_t)v->u;
        return KVC_OK;
    }
    return wrong_type(key, v, "an integer");
}

kvc_status kvc_gguf_get_f32(const kvc_gguf *g, const char *key, float *out) {
    const kvc_gguf_value *v = NULL;
    KVC_TRY(lookup(g, key, &v));
    if (v->type == KVC_GGUF_F32 || v->type == KVC_GGUF_F64)
        *out = (float)v->f;
    else if (is_unsigned(v->type))
        *out = (float)v->u;
    else if (is_signed(v->type))
        *out = (float)v->i;
    else
        return wrong_type(key, v, "a number");
    return KVC_OK;
}

kvc_status kvc_gguf_get_str(const kvc_gguf *g, const char *key, const char **out) {
    const kvc_gguf_value *v = NULL;
    KVC_TRY(lookup(g, key, &v));
    if (v->type != KVC_GGUF_STRING) return wrong_type(key, v, "string");
    *out = v->s.ptr;
    return KVC_OK;
}

kvc_status kvc_gguf_get_bool(const kvc_gguf *g, const char *key, int *out) {
    const kvc_gguf_value *v = NULL;
    KVC_TRY(lookup(g, key, &v));
    if (v->type != KVC_GGUF_BOOL) return wrong_type(key, v, "bool");
    *out = v->u != 0;
    return KVC_OK;
}

kvc_status kvc_gguf_get_arr(const kvc_gguf *g, const char *key, kvc_gguf_vtype elem,
                            const kvc_gguf_value **out) {
    const kvc_gguf_value *v = NULL;
    KVC_TRY(lookup(g, key, &v));
    if (v->type != KVC_GGUF_ARRAY)
        return kvc_fail(KVC_ERR_FORMAT, "key %s: type %s, expected array of %s", key,
                        kvc_gguf_vtype_name(v->type), kvc_gguf_vtype_name(elem));
    if (v->arr.type != elem)
        return kvc_fail(KVC_ERR_FORMAT, "key %s: array of %s, expected array of %s", key,
                        kvc_gguf_vtype_name(v->arr.type), kvc_gguf_vtype_name(elem));
    *out = v;
    return KVC_OK;
}
