/* GGUF reader on handcrafted files (tests/gguf/gguf_writer.h builds them):
 * good files of every value type, nested arrays, v2 and v3, custom alignment;
 * bad files with one field wrong (magic, version, counts, string lengths, keys,
 * dims, types, offsets, alignment), each rejected with KVC_ERR_FORMAT and a
 * message naming the field and the value; every prefix and single-byte flips
 * of a valid file (rejected or parsed safely, never a crash or leak under the
 * sanitizers); the real default model; kvc_inspect's table and JSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvcomp_eval.h"
#include "gguf/gguf.h"
#include "gguf_writer.h"

enum { T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 };
enum { G_F32 = 0, G_F16 = 1, G_Q4_0 = 2, G_Q8_0 = 8, G_Q4_K = 12 };

static size_t align_up(size_t x, size_t a) {
    return (x + a - 1) / a * a;
}

/* ---- helpers ---------------------------------------------------------------- */

/* Parses a private copy of exactly n bytes (so ASan sees any read past the end)
 * and expects KVC_ERR_FORMAT with `needle` in the message. */
static void expect_bad_n(const uint8_t *p, size_t n, const char *needle) {
    uint8_t *copy = malloc(n ? n : 1);
    assert_non_null(copy);
    if (n) memcpy(copy, p, n);
    kvc_gguf *g = (kvc_gguf *)1;
    kvc_status s = kvc_gguf_parse(copy, n, &g);
    if (s != KVC_ERR_FORMAT || g != NULL || (needle && !strstr(kvc_last_error(), needle))) {
        free(copy);
        fail_msg("status %d, message \"%s\", expected format error with \"%s\"", s,
                 kvc_last_error(), needle ? needle : "");
    }
    free(copy);
}
static void expect_bad(const gw *w, const char *needle) {
    expect_bad_n(w->p, w->n, needle);
}

static void touch_value(const kvc_gguf_value *v, unsigned *sum) {
    if (v->type == KVC_GGUF_STRING) {
        for (uint64_t i = 0; i < v->s.len; i++)
            *sum += (unsigned char)v->s.ptr[i];
        assert_int_equal(v->s.ptr[v->s.len], '\0');
    } else if (v->type == KVC_GGUF_ARRAY) {
        for (uint64_t i = 0; i < v->arr.n; i++) {
            assert_int_equal(v->arr.items[i].type, v->arr.type);
            touch_value(&v->arr.items[i], sum);
        }
    } else {
        *sum += (unsigned)v->u;
    }
}

/* Reads everything a parse result points at; lookups find every key and tensor. */
static unsigned walk(const kvc_gguf *g) {
    unsigned sum = 0;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const kvc_gguf_kv *kv = &g->kv[i];
        assert_int_equal(strlen(kv->key.ptr), kv->key.len);
        assert_ptr_equal(kvc_gguf_find(g, kv->key.ptr), kv);
        touch_value(&kv->value, &sum);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kvc_gguf_tensor *t = &g->tensors[i];
        assert_int_equal(strlen(t->name.ptr), t->name.len);
        assert_ptr_equal(kvc_gguf_tensor_find(g, t->name.ptr), t);
        assert_true(t->n_dims >= 1 && t->n_dims <= 4);
        assert_true(t->n_bytes > 0);
        const uint8_t *d = t->data;
        assert_true(d >= g->base && d + t->n_bytes <= g->base + g->size);
        sum += d[0] + d[t->n_bytes - 1];
    }
    return sum;
}

/* ---- a valid file with every value type ---------------------------------------- */

#define N_ALL_TENSORS 3

/* alignment 0: no general.alignment key (default 32). */
static void build_all_types(gw *w, uint32_t version, uint32_t alignment) {
    size_t a = alignment ? alignment : 32;
    gw_header(w, version, N_ALL_TENSORS, alignment ? 18 : 17);
    gw_kv_str(w, "general.architecture", "llama");
    gw_key(w, "t.u8", T_U8), gw_u8(w, 200);
    gw_key(w, "t.i8", T_I8), gw_u8(w, (uint8_t)-100);
    gw_key(w, "t.u16", T_U16), gw_u16(w, 60000);
    gw_key(w, "t.i16", T_I16), gw_u16(w, (uint16_t)-30000);
    gw_key(w, "t.u32", T_U32), gw_u32(w, 4000000000u);
    gw_key(w, "t.i32", T_I32), gw_u32(w, (uint32_t)-2000000000);
    gw_key(w, "t.f32", T_F32), gw_f32(w, 1.5f);
    gw_key(w, "t.bool", T_BOOL), gw_u8(w, 1);
    gw_kv_str(w, "t.str", "h\xc3\xa9llo");
    gw_key(w, "t.u64", T_U64), gw_u64(w, (1ull << 40) + 3);
    gw_key(w, "t.i64", T_I64), gw_u64(w, (uint64_t) - (1ll << 40));
    gw_key(w, "t.f64", T_F64), gw_f64(w, -2.25);
    gw_key(w, "t.arr.i32", T_ARR), gw_arr(w, T_I32, 3);
    gw_u32(w, 1), gw_u32(w, (uint32_t)-2), gw_u32(w, 3);
    gw_key(w, "t.arr.str", T_ARR), gw_arr(w, T_STR, 3);
    gw_str(w, "a"), gw_str(w, "bc"), gw_str(w, "");
    gw_key(w, "t.arr.nested", T_ARR), gw_arr(w, T_ARR, 3); /* [[1, 2], ["x"], []] */
    gw_arr(w, T_U8, 2), gw_u8(w, 1), gw_u8(w, 2);
    gw_arr(w, T_STR, 1), gw_str(w, "x");
    gw_arr(w, T_F64, 0);
    gw_key(w, "t.arr.empty", T_ARR), gw_arr(w, T_F32, 0);
    if (alignment) gw_kv_u32(w, "general.alignment", alignment);

    size_t off0 = 0, off1 = align_up(32 * 3 * 4, a), off2 = align_up(off1 + 2 * 2 * 34, a);
    gw_tensor(w, "tok.weight", 2, (uint64_t[]){32, 3}, G_F32, off0);
    gw_tensor(w, "blk.0.q", 2, (uint64_t[]){64, 2}, G_Q8_0, off1);
    gw_tensor(w, "norm", 1, (uint64_t[]){8}, G_F16, off2);
    gw_pad(w, a);
    size_t base = w->n;
    gw_data(w, 32 * 3 * 4, 10);
    gw_pad(w, a), assert_int_equal(w->n - base, off1);
    gw_data(w, 2 * 2 * 34, 20);
    gw_pad(w, a), assert_int_equal(w->n - base, off2);
    gw_data(w, 16, 30); /* the file ends at the last tensor's last byte */
}

static void check_all_types(const kvc_gguf *g, uint32_t version, uint32_t alignment) {
    assert_int_equal(g->version, version);
    assert_int_equal(g->alignment, alignment ? alignment : 32);
    assert_int_equal(g->data_offset % g->alignment, 0);
    uint64_t u;
    int64_t i;
    float f;
    const char *s;
    int b;
    assert_int_equal(kvc_gguf_get_str(g, "general.architecture", &s), KVC_OK);
    assert_string_equal(s, "llama");
    assert_int_equal(kvc_gguf_get_u64(g, "t.u8", &u), KVC_OK), assert_int_equal(u, 200);
    assert_int_equal(kvc_gguf_get_i64(g, "t.i8", &i), KVC_OK), assert_int_equal(i, -100);
    assert_int_equal(kvc_gguf_get_u64(g, "t.u16", &u), KVC_OK), assert_int_equal(u, 60000);
    assert_int_equal(kvc_gguf_get_i64(g, "t.i16", &i), KVC_OK), assert_int_equal(i, -30000);
    assert_int_equal(kvc_gguf_get_u64(g, "t.u32", &u), KVC_OK), assert_int_equal(u, 4000000000u);
    assert_int_equal(kvc_gguf_get_i64(g, "t.i32", &i), KVC_OK), assert_int_equal(i, -2000000000);
    assert_int_equal(kvc_gguf_get_f32(g, "t.f32", &f), KVC_OK), assert_true(f == 1.5f);
    assert_int_equal(kvc_gguf_get_bool(g, "t.bool", &b), KVC_OK), assert_int_equal(b, 1);
    assert_int_equal(kvc_gguf_get_str(g, "t.str", &s), KVC_OK);
    assert_string_equal(s, "h\xc3\xa9llo");
    assert_int_equal(kvc_gguf_get_u64(g, "t.u64", &u), KVC_OK);
    assert_int_equal(u, (1ull << 40) + 3);
    assert_int_equal(kvc_gguf_get_i64(g, "t.i64", &i), KVC_OK);
    assert_int_equal(i, -(1ll << 40));
    assert_int_equal(kvc_gguf_get_f32(g, "t.f64", &f), KVC_OK), assert_true(f == -2.25f);
    assert_int_equal(kvc_gguf_find(g, "t.f64")->value.type, KVC_GGUF_F64);

    const kvc_gguf_value *v;
    assert_int_equal(kvc_gguf_get_arr(g, "t.arr.i32", KVC_GGUF_I32, &v), KVC_OK);
    assert_int_equal(v->arr.n, 3);
    assert_int_equal(v->arr.items[1].i, -2);
    assert_int_equal(kvc_gguf_get_arr(g, "t.arr.str", KVC_GGUF_STRING, &v), KVC_OK);
    assert_int_equal(v->arr.n, 3);
    assert_string_equal(v->arr.items[1].s.ptr, "bc");
    assert_int_equal(v->arr.items[2].s.len, 0);
    assert_int_equal(kvc_gguf_get_arr(g, "t.arr.nested", KVC_GGUF_ARRAY, &v), KVC_OK);
    assert_int_equal(v->arr.n, 3);
    assert_int_equal(v->arr.items[0].arr.type, KVC_GGUF_U8);
    assert_int_equal(v->arr.items[0].arr.items[1].u, 2);
    assert_string_equal(v->arr.items[1].arr.items[0].s.ptr, "x");
    assert_int_equal(v->arr.items[2].arr.type, KVC_GGUF_F64);
    assert_int_equal(v->arr.items[2].arr.n, 0);
    assert_int_equal(kvc_gguf_get_arr(g, "t.arr.empty", KVC_GGUF_F32, &v), KVC_OK);
    assert_int_equal(v->arr.n, 0);

    assert_int_equal(g->n_tensors, N_ALL_TENSORS);
    const kvc_gguf_tensor *t = kvc_gguf_tensor_find(g, "blk.0.q");
    assert_non_null(t);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 64), assert_int_equal(t->ne[1], 2), assert_int_equal(t->ne[3], 1);
    assert_int_equal(t->type, G_Q8_0);
    assert_int_equal(t->n_elements, 128);
    assert_int_equal(t->n_bytes, 136);
    assert_ptr_equal(t->data, g->base + g->data_offset + t->offset);
    assert_int_equal(((const uint8_t *)t->data)[0], 20);
    assert_int_equal(((const uint8_t *)t->data)[135], (uint8_t)(20 + 135));
    t = kvc_gguf_tensor_find(g, "norm");
    assert_non_null(t);
    assert_int_equal(t->n_bytes, 16);
    assert_ptr_equal((const uint8_t *)t->data + 16, g->base + g->size);
    assert_null(kvc_gguf_tensor_find(g, "nope"));
    assert_null(kvc_gguf_find(g, "t.u"));
    walk(g);
}

static void test_good_all_types(void **state) {
    (void)state;
    for (uint32_t version = 2; version <= 3; version++) {
        uint32_t aligns[] = {0, 1, 8, 64, 4096};
        for (size_t k = 0; k < sizeof aligns / sizeof aligns[0]; k++) {
            gw w = {0};
            build_all_types(&w, version, aligns[k]);
            kvc_gguf *g = NULL;
            assert_int_equal(kvc_gguf_parse(w.p, w.n, &g), KVC_OK);
            check_all_types(g, version, aligns[k]);
            kvc_gguf_close(g);
            gw_free(&w);
        }
    }
}

static void test_good_no_tensors(void **state) {
    (void)state;
    gw w = {0};
    gw_header(&w, 3, 0, 1);
    gw_kv_str(&w, "general.name", "x"); /* file ends here: no padding, no data */
    kvc_gguf *g = NULL;
    assert_int_equal(kvc_gguf_parse(w.p, w.n, &g), KVC_OK);
    assert_int_equal(g->n_tensors, 0);
    assert_null(kvc_gguf_tensor_find(g, "x"));
    kvc_gguf_close(g);
    gw_free(&w);

    gw_header(&w, 2, 0, 0); /* header only */
    assert_int_equal(kvc_gguf_parse(w.p, w.n, &g), KVC_OK);
    assert_null(kvc_gguf_find(g, "general.name"));
    kvc_gguf_close(g);
    gw_free(&w);
}

static void test_getters(void **state) {
    (void)state;
    gw w = {0};
    build_all_types(&w, 3, 0);
    kvc_gguf *g = NULL;
    assert_int_equal(kvc_gguf_parse(w.p, w.n, &g), KVC_OK);
    uint64_t u;
    int64_t i;
    float f;
    const char *s;
    int b;
    const kvc_gguf_value *v;
    assert_int_equal(kvc_gguf_get_u64(g, "missing.key", &u), KVC_ERR_FORMAT);
    assert_non_null(strstr(kvc_last_error(), "missing key missing.key"));
    assert_int_equal(kvc_gguf_get_u64(g, "t.i8", &u), KVC_ERR_FORMAT); /* negative */
    assert_non_null(strstr(kvc_last_error(), "t.i8"));
    assert_int_equal(kvc_gguf_get_u64(g, "t.str", &u), KVC_ERR_FORMAT);
    assert_non_null(strstr(kvc_last_error(), "key t.str: type string"));
    assert_int_equal(kvc_gguf_get_i64(g, "t.u8", &i), KVC_OK), assert_int_equal(i, 200);
    assert_int_equal(kvc_gguf_get_f32(g, "t.u16", &f), KVC_OK), assert_true(f == 60000.0f);
    assert_int_equal(kvc_gguf_get_f32(g, "t.str", &f), KVC_ERR_FORMAT);
    assert_int_equal(kvc_gguf_get_str(g, "t.u32", &s), KVC_ERR_FORMAT);
    assert_non_null(strstr(kvc_last_error(), "t.u32"));
    assert_int_equal(kvc_gguf_get_bool(g, "t.u8", &b), KVC_ERR_FORMAT);
    assert_int_equal(kvc_gguf_get_arr(g, "t.arr.i32", KVC_GGUF_STRING, &v), KVC_ERR_FORMAT);
    assert_non_null(strstr(kvc_last_error(), "array of i32, expected array of string"));
    assert_int_equal(kvc_gguf_get_arr(g, "t.u8", KVC_GGUF_U8, &v), KVC_ERR_FORMAT);
    assert_string_equal(kvc_gguf_vtype_name(KVC_GGUF_STRING), "string");
    assert_string_equal(kvc_ggml_type_name(3), "q4_1");
    assert_null(kvc_ggml_type_name(4));
    uint32_t blk, bb;
    assert_true(kvc_ggml_type_block(14, &blk, &bb)), assert_int_equal(blk, 256);
    assert_int_equal(bb, 210);
    assert_false(kvc_ggml_type_block(31, &blk, &bb));
    assert_false(kvc_ggml_type_block(1000, &blk, &bb));
    kvc_gguf_close(g);
    gw_free(&w);
}

/* ---- bad headers, counts and strings ------------------------------------------ */

static void test_bad_magic_and_version(void **state) {
    (void)state;
    gw w = {0};
    expect_bad(&w, "too short"); /* empty buffer */
    gw_bytes(&w, "GGU", 3);
    expect_bad(&w, "too short");
    gw_free(&w);
    gw_bytes(&w, "GGML", 4), gw_u32(&w, 3), gw_u64(&w, 0), gw_u64(&w, 0);
    expect_bad(&w, "bad magic 47 47 4d 4c");
    gw_free(&w);
    uint32_t versions[] = {0, 1, 4, 99};
    for (size_t k = 0; k < 4; k++) {
        gw_header(&w, versions[k], 0, 0);
        char needle[64];
        snprintf(needle, sizeof needle, "version %u not supported", versions[k]);
        expect_bad(&w, needle);
        gw_free(&w);
    }
    gw_header(&w, 0x03000000u, 0, 0);
    expect_bad(&w, "big-endian");
    gw_free(&w);
    gw_bytes(&w, "GGUF", 4), gw_u32(&w, 3), gw_u32(&w, 0); /* truncated tensor count */
    expect_bad(&w, "tensor count past end of file");
    gw_free(&w);
}

static void test_bad_counts(void **state) {
    (void)state;
    struct {
        uint64_t n_tensors, n_kv;
        const char *needle;
    } cases[] = {
        {0, UINT64_MAX, "kv count -1 is negative"},
        {1ull << 63, 0, "is negative"},
        {0, 1ull << 40, "kv count 1099511627776 past end of file"},
        {1ull << 40, 0, "tensor count 1099511627776 past end of file"},
        {(1ull << 62) + 5, 1, "past end of file"},
        {2, 2, "past end of file"}, /* small but still more than the 100 bytes that follow */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        gw w = {0};
        gw_header(&w, 3, cases[k].n_tensors, cases[k].n_kv);
        gw_data(&w, 50, 0);
        expect_bad(&w, cases[k].needle);
        gw_free(&w);
    }
    /* huge array counts of each element kind */
    uint32_t elems[] = {T_U8, T_U64, T_STR, T_ARR};
    for (size_t k = 0; k < 4; k++) {
        gw w = {0};
        gw_header(&w, 3, 0, 1);
        gw_key(&w, "big", T_ARR), gw_arr(&w, elems[k], 1ull << 60);
        gw_data(&w, 64, 0);
        expect_bad(&w, "kv[0] key \"big\": array of");
        expect_bad(&w, "count 1152921504606846976 past end of file");
        gw_free(&w);
    }
}

static void test_bad_strings(void **state) {
    (void)state;
    gw w = {0};
    /* the docs/formats.md example: a value string length past the end */
    gw_header(&w, 3, 0, 6);
    for (int k = 0; k < 5; k++) {
        char key[16];
        snprintf(key, sizeof key, "k.%d", k);
        gw_kv_u32(&w, key, (uint32_t)k);
    }
    gw_key(&w, "general.name", T_STR), gw_u64(&w, 99999), gw_bytes(&w, "abc", 3);
    expect_bad(&w, "kv[5] key \"general.name\": string length 99999 past end of file");
    gw_free(&w);

    gw_header(&w, 3, 0, 1);
    gw_u64(&w, 1ull << 63), gw_bytes(&w, "abcdefghijklmnopq", 17); /* key length */
    expect_bad(&w, "kv[0] key: string length 9223372036854775808 past end of file");
    gw_free(&w);

    gw_header(&w, 3, 0, 1);
    gw_key(&w, "arr", T_ARR), gw_arr(&w, T_STR, 2), gw_str(&w, "ok");
    gw_u64(&w, 1000), gw_bytes(&w, "short", 5);
    expect_bad(&w, "kv[0] key \"arr\"[1]: string length 1000 past end of file");
    gw_free(&w);

    gw_header(&w, 3, 1, 0);
    gw_u64(&w, UINT64_MAX), gw_data(&w, 40, 1); /* tensor name length */
    expect_bad(&w, "tensor[0] name: string length 18446744073709551615 past end of file");
    gw_free(&w);
}

static void test_bad_keys(void **state) {
    (void)state;
    gw w = {0};
    gw_header(&w, 3, 0, 3);
    gw_kv_u32(&w, "a.b", 1), gw_kv_u32(&w, "c", 2), gw_kv_str(&w, "a.b", "again");
    expect_bad(&w, "kv[2] key \"a.b\": duplicate key (also kv[0])");
    gw_free(&w);

    gw_header(&w, 3, 0, 2);
    gw_kv_u32(&w, "a", 1), gw_kv_u32(&w, "", 2);
    expect_bad(&w, "kv[1] key: empty key");
    gw_free(&w);

    gw_header(&w, 3, 0, 1);
    gw_strn(&w, "a\0b", 3), gw_u32(&w, T_U8), gw_u8(&w, 0);
    expect_bad(&w, "kv[0] key: key contains a NUL byte");
    gw_free(&w);

    size_t long_len = KVC_GGUF_MAX_KEY_LEN + 1;
    char *long_key = malloc(long_len);
    memset(long_key, 'k', long_len);
    gw_header(&w, 3, 0, 1);
    gw_strn(&w, long_key, long_len), gw_u32(&w, T_U8), gw_u8(&w, 0);
    expect_bad(&w, "key length 65536 exceeds 65535");
    free(long_key);
    gw_free(&w);

    gw_header(&w, 3, 0, 1);
    gw_key(&w, "t", 13), gw_u64(&w, 0);
    expect_bad(&w, "kv[0] key \"t\": value type 13 unknown");
    gw_free(&w);

    gw_header(&w, 3, 0, 1);
    gw_key(&w, "t", T_ARR), gw_arr(&w, 77, 1), gw_u64(&w, 0);
    expect_bad(&w, "array element type 77 unknown");
    gw_free(&w);

    gw_header(&w, 3, 0, 1);
    gw_key(&w, "flag", T_BOOL), gw_u8(&w, 2);
    expect_bad(&w, "kv[0] key \"flag\": bool value 2 (must be 0 or 1)");
    gw_free(&w);

    gw_header(&w, 3, 0, 1); /* arrays nested one level deeper than allowed */
    gw_key(&w, "deep", T_ARR);
    for (int d = 0; d < KVC_GGUF_MAX_DEPTH; d++)
        gw_arr(&w, T_ARR, 1);
    gw_arr(&w, T_U8, 1), gw_u8(&w, 7);
    expect_bad(&w, "nested deeper than 8");
    gw_free(&w);

    gw_header(&w, 3, 0, 1); /* exactly the maximum depth is fine */
    gw_key(&w, "deep", T_ARR);
    for (int d = 0; d < KVC_GGUF_MAX_DEPTH - 1; d++)
        gw_arr(&w, T_ARR, 1);
    gw_arr(&w, T_U8, 1), gw_u8(&w, 7);
    kvc_gguf *g = NULL;
    assert_int_equal(kvc_gguf_parse(w.p, w.n, &g), KVC_OK);
    kvc_gguf_close(g);
    gw_free(&w);
}

/* ---- bad tensor infos and placement ------------------------------------------- */

/* A file with one tensor whose info is given; `data` bytes follow the padding. */
static void one_tensor(gw *w, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                       uint64_t offset, size_t data) {
    gw_header(w, 3, 1, 1);
    gw_kv_str(w, "general.architecture", "llama");
    gw_tensor(w, name, n_dims, ne, type, offset);
    gw_pad(w, 32);
    gw_data(w, data, 0);
}

static void test_bad_tensors(void **state) {
    (void)state;
    struct {
        const char *name;
        uint32_t n_dims;
        uint64_t ne[5];
        uint32_t type;
        uint64_t offset;
        size_t data;
        const char *needle;
    } cases[] = {
        {"w", 1, {32}, G_F32, 0, 128, NULL}, /* good: the control case */
        {"w", 0, {0}, G_F32, 0, 128, "tensor w: n_dims 0 (must be 1..4)"},
        {"w", 5, {1, 1, 1, 1, 1}, G_F32, 0, 128, "tensor w: n_dims 5 (must be 1..4)"},
        {"w", 2, {32, 0}, G_F32, 0, 128, "tensor w: ne[1] is 0"},
        {"w", 2, {32, UINT64_MAX}, G_F32, 0, 128, "ne[1] = -1 is negative"},
        {"w",
         3,
         {1ull << 32, 1ull << 32, 2},
         G_F32,
         0,
         128,
         "element count overflows at ne[1] = 4294967296"},
        {"w",
         4,
         {1ull << 20, 1ull << 20, 1ull << 20, 1ull << 10},
         G_F32,
         0,
         128,
         "element count overflows at ne[3]"},
        {"w", 1, {1ull << 62}, 28 /* f64 */, 0, 128, "byte size of 4611686018427387904"},
        {"w", 2, {1ull << 30, 1ull << 30}, G_F32, 0, 128, "past end of file"},
        {"w", 1, {32}, 77, 0, 128, "tensor w: unknown ggml type 77"},
        {"w", 1, {32}, 4, 0, 128, "unknown ggml type 4"},   /* removed q4_2 */
        {"w", 1, {32}, 31, 0, 128, "unknown ggml type 31"}, /* removed q4_0_4_4 */
        {"w",
         1,
         {33},
         G_Q8_0,
         0,
         128,
         "ne[0] = 33 not a multiple of the block size 32 of type q8_0"},
        {"w", 2, {128, 2}, G_Q4_K, 0, 288, "not a multiple of the block size 256 of type q4_k"},
        {"w", 1, {32}, G_F32, 4096, 128, "tensor w: offset 4096 past end of file"},
        {"w", 1, {32}, G_F32, UINT64_MAX - 31, 128, "past end of file"},
        {"w", 1, {32}, G_F32, 4, 132, "tensor w: offset 4 not a multiple of the alignment 32"},
        {"w", 1, {32}, G_F32, 32, 128, "tensor w: 128 bytes at offset 32 past end of file"},
        {"w", 1, {33}, G_F32, 0, 128, "132 bytes at offset 0 past end of file"},
        {"", 1, {32}, G_F32, 0, 128, "tensor[0] name: empty tensor name"},
        {"0123456789012345678901234567890123456789012345678901234567890123456789",
         1,
         {32},
         G_F32,
         0,
         128,
         "name length 70 exceeds 64"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        gw w = {0};
        one_tensor(&w, cases[k].name, cases[k].n_dims, cases[k].ne, cases[k].type, cases[k].offset,
                   cases[k].data);
        if (cases[k].needle) {
            expect_bad(&w, cases[k].needle);
        } else {
            kvc_gguf *g = NULL;
            assert_int_equal(kvc_gguf_parse(w.p, w.n, &g), KVC_OK);
            walk(g);
            kvc_gguf_close(g);
        }
        gw_free(&w);
    }

    gw w = {0}; /* duplicate tensor names */
    gw_header(&w, 3, 2, 0);
    gw_tensor(&w, "w", 1, (uint64_t[]){8}, G_F32, 0);
    gw_tensor(&w, "w", 1, (uint64_t[]){8}, G_F32, 32);
    gw_pad(&w, 32), gw_data(&w, 64, 0);
    expect_bad(&w, "tensor w: duplicate tensor name (also tensor[0])");
    gw_free(&w);

    gw_header(&w, 3, 1, 0); /* NUL inside a name */
    gw_strn(&w, "a\0b", 3), gw_u32(&w, 1), gw_u64(&w, 8), gw_u32(&w, G_F32), gw_u64(&w, 0);
    gw_pad(&w, 32), gw_data(&w, 32, 0);
    expect_bad(&w, "name contains a NUL byte");
    gw_free(&w);
}

static void test_bad_alignment(void **state) {
    (void)state;
    struct {
        uint32_t vtype;
        uint64_t value;
        const char *needle;
    } cases[] = {
        {T_U32, 0, "kv[0] key \"general.alignment\": alignment 0 (must be a power of two"},
        {T_U32, 3, "alignment 3 (must be a power of two"},
        {T_U32, 48, "alignment 48"},
        {T_U32, 1u << 21, "alignment 2097152"},
        {T_U64, 1ull << 40, "alignment 1099511627776"},
        {T_I32, (uint32_t)-32, "alignment -32 is negative"},
        {T_STR, 0, "type string, expected u32"},
        {T_F32, 0, "type f32, expected u32"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        gw w = {0};
        gw_header(&w, 3, 0, 1);
        gw_key(&w, "general.alignment", cases[k].vtype);
        if (cases[k].vtype == T_STR)
            gw_str(&w, "32");
        else if (cases[k].vtype == T_U64)
            gw_u64(&w, cases[k].value);
        else
            gw_u32(&w, (uint32_t)cases[k].value);
        expect_bad(&w, cases[k].needle);
        gw_free(&w);
    }
    /* alignment 16 given as u8 is accepted; a tensor offset must then be a multiple of 16 */
    gw w = {0};
    gw_header(&w, 3, 2, 1);
    gw_key(&w, "general.alignment", T_U8), gw_u8(&w, 16);
    gw_tensor(&w, "a", 1, (uint64_t[]){4}, G_F32, 0);
    size_t b_offset_at = w.n + 8 + 1 + 4 + 8 + 4; /* name, n_dims, ne[0], type */
    gw_tensor(&w, "b", 1, (uint64_t[]){4}, G_F32, 16);
    gw_pad(&w, 16), gw_data(&w, 32, 0);
    kvc_gguf *g = NULL;
    assert_int_equal(kvc_gguf_parse(w.p, w.n, &g), KVC_OK);
    assert_int_equal(g->alignment, 16);
    assert_ptr_equal(kvc_gguf_tensor_find(g, "b")->data, g->base + g->data_offset + 16);
    kvc_gguf_close(g);
    w.p[b_offset_at] = 8; /* b's offset := 8 */
    expect_bad(&w, "tensor b: offset 8 not a multiple of the alignment 16");
    gw_free(&w);
}

/* ---- truncation and corruption -------------------------------------------------- */

static void test_every_prefix(void **state) {
    (void)state;
    for (uint32_t version = 2; version <= 3; version++) {
        gw w = {0};
        build_all_types(&w, version, 0);
        for (size_t n = 0; n < w.n; n++)
            expect_bad_n(w.p, n, NULL);
        gw_free(&w);
    }
}

/* Every byte flipped three ways: each result is rejected or parses into
 * something whose every pointer stays inside the buffer. */
static void test_byte_flips(void **state) {
    (void)state;
    gw w = {0};
    build_all_types(&w, 3, 64);
    const uint8_t masks[] = {0x01, 0x80, 0xff};
    int ok = 0, bad = 0;
    uint8_t *copy = malloc(w.n);
    for (size_t i = 0; i < w.n; i++) {
        for (size_t m = 0; m < sizeof masks; m++) {
            memcpy(copy, w.p, w.n);
            copy[i] ^= masks[m];
            kvc_gguf *g = NULL;
            kvc_status s = kvc_gguf_parse(copy, w.n, &g);
            if (s == KVC_OK) {
                walk(g);
                kvc_gguf_close(g);
                ok++;
            } else {
                assert_int_equal(s, KVC_ERR_FORMAT);
                assert_null(g);
                assert_true(strlen(kvc_last_error()) > 0);
                bad++;
            }
        }
    }
    /* data bytes and most value bytes may change freely; structure bytes may not */
    assert_true(ok > 0 && bad > 0);
    /* random multi-byte damage, fixed seed */
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int it = 0; it < 20000; it++) {
        memcpy(copy, w.p, w.n);
        int flips = 1 + it % 4;
        for (int k = 0; k < flips; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            copy[(x >> 8) % w.n] = (uint8_t)x;
        }
        kvc_gguf *g = NULL;
        if (kvc_gguf_parse(copy, w.n, &g) == KVC_OK) {
            walk(g);
            kvc_gguf_close(g);
        }
    }
    free(copy);
    gw_free(&w);
}

/* ---- files: open, the real model, inspect -------------------------------------- */

static char *write_temp(const gw *w) {
    char *path = strdup("/tmp/kvc_test_gguf_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, w->p, w->n), (ssize_t)w->n);
    close(fd);
    return path;
}

static void test_open_errors(void **state) {
    (void)state;
    kvc_gguf *g = (kvc_gguf *)1;
    assert_int_equal(kvc_gguf_open("/nonexistent/model.gguf", &g), KVC_ERR_IO);
    assert_null(g);
    assert_non_null(strstr(kvc_last_error(), "/nonexistent/model.gguf: cannot open"));
    assert_int_equal(kvc_gguf_open("/tmp", &g), KVC_ERR_IO);
    assert_non_null(strstr(kvc_last_error(), "/tmp: is a directory; expected a regular file"));
    gw w = {0};
    char *empty = write_temp(&w);
    assert_int_equal(kvc_gguf_open(empty, &g), KVC_ERR_FORMAT);
    assert_non_null(strstr(kvc_last_error(), "empty file"));
    unlink(empty);
    free(empty);
    build_all_types(&w, 3, 0);
    char *path = write_temp(&w);
    assert_int_equal(kvc_gguf_open(path, &g), KVC_OK);
    check_all_types(g, 3, 0);
    kvc_gguf_close(g);
    w.n -= 1; /* one byte short: the last tensor runs past the end, named with the path */
    char *cut = write_temp(&w);
    assert_int_equal(kvc_gguf_open(cut, &g), KVC_ERR_FORMAT);
    assert_non_null(strstr(kvc_last_error(), cut));
    assert_non_null(strstr(kvc_last_error(), "tensor norm: 16 bytes at offset"));
    unlink(path), unlink(cut);
    free(path), free(cut);
    gw_free(&w);
}

static void test_real_model(void **state) {
    (void)state;
    struct stat st;
    if (stat(KVC_MODEL_PATH, &st) != 0) {
        print_message("model %s missing: skipped\n", KVC_MODEL_PATH);
        skip();
    }
    kvc_gguf *g = NULL;
    assert_int_equal(kvc_gguf_open(KVC_MODEL_PATH, &g), KVC_OK);
    const char *arch;
    uint64_t n;
    assert_int_equal(kvc_gguf_get_str(g, "general.architecture", &arch), KVC_OK);
    assert_string_equal(arch, "llama");
    assert_int_equal(kvc_gguf_get_u64(g, "llama.block_count", &n), KVC_OK);
    assert_int_equal(n, 30);
    assert_int_equal(kvc_gguf_get_u64(g, "llama.attention.head_count_kv", &n), KVC_OK);
    assert_int_equal(n, 3);
    const kvc_gguf_value *tokens;
    assert_int_equal(kvc_gguf_get_arr(g, "tokenizer.ggml.tokens", KVC_GGUF_STRING, &tokens),
                     KVC_OK);
    assert_int_equal(tokens->arr.n, 49152);
    assert_string_equal(tokens->arr.items[1].s.ptr, "<|im_start|>");
    /* 30 blocks x 9 tensors + token embedding + output norm (output tied) */
    assert_int_equal(g->n_tensors, 30 * 9 + 2);
    const kvc_gguf_tensor *t = kvc_gguf_tensor_find(g, "blk.29.attn_k.weight");
    assert_non_null(t);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 576);
    assert_int_equal(t->ne[1], 192);
    assert_string_equal(kvc_ggml_type_name(t->type), "q4_1");
    assert_int_equal(t->n_bytes, 192 * 576 / 32 * 20);
    assert_null(kvc_gguf_tensor_find(g, "blk.30.attn_k.weight"));
    uint64_t last = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].offset + g->tensors[i].n_bytes > last)
            last = g->tensors[i].offset + g->tensors[i].n_bytes;
    assert_true(g->data_offset + last <= g->size);
    walk(g);
    /* the same bytes cut short: the reader names the first tensor that no longer fits */
    kvc_gguf *cut = NULL;
    assert_int_equal(kvc_gguf_parse(g->base, g->size - 1000, &cut), KVC_ERR_FORMAT);
    assert_null(cut);
    assert_non_null(strstr(kvc_last_error(), "past end of file"));
    assert_non_null(strstr(kvc_last_error(), "tensor "));
    kvc_gguf_close(g);
}

static char *inspect_to_string(const char *path, int json, kvc_status *s) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    *s = kvc_inspect(path, f, json);
    fclose(f);
    return buf;
}

static void test_inspect(void **state) {
    (void)state;
    gw w = {0};
    build_all_types(&w, 3, 64);
    char *path = write_temp(&w);
    kvc_status s;
    char *text = inspect_to_string(path, 0, &s);
    assert_int_equal(s, KVC_OK);
    const char *want_text[] = {"GGUF version 3", "alignment 64",     "t.arr.str", "[string x 3]",
                               "\"bc\"",         "[array x 3]",      "blk.0.q",   "q8_0",
                               "64 x 2",         "total: 3 tensors", "f16"};
    for (size_t k = 0; k < sizeof want_text / sizeof want_text[0]; k++)
        if (!strstr(text, want_text[k]))
            fail_msg("inspect text lacks \"%s\":\n%s", want_text[k], text);
    free(text);
    char *json = inspect_to_string(path, 1, &s);
    assert_int_equal(s, KVC_OK);
    assert_int_equal(json[0], '{');
    const char *want_json[] = {"\"n_tensors\":3", "\"alignment\":64", "\"elem_type\":\"string\"",
                               "\"count\":3",     "\"shape\":[64,2]", "\"type\":\"q8_0\"",
                               "\"by_type\":{"};
    for (size_t k = 0; k < sizeof want_json / sizeof want_json[0]; k++)
        if (!strstr(json, want_json[k])) fail_msg("inspect json lacks %s:\n%s", want_json[k], json);
    free(json);
    unlink(path);
    free(path);

    w.p[0] = 'X'; /* a bad file: the error names the path and the field */
    path = write_temp(&w);
    text = inspect_to_string(path, 0, &s);
    assert_int_equal(s, KVC_ERR_FORMAT);
    assert_non_null(strstr(kvc_last_error(), "bad magic"));
    assert_non_null(strstr(kvc_last_error(), path));
    free(text);
    unlink(path);
    free(path);
    gw_free(&w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_all_types), cmocka_unit_test(test_good_no_tensors),
        cmocka_unit_test(test_getters),        cmocka_unit_test(test_bad_magic_and_version),
        cmocka_unit_test(test_bad_counts),     cmocka_unit_test(test_bad_strings),
        cmocka_unit_test(test_bad_keys),       cmocka_unit_test(test_bad_tensors),
        cmocka_unit_test(test_bad_alignment),  cmocka_unit_test(test_every_prefix),
        cmocka_unit_test(test_byte_flips),     cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_real_model),     cmocka_unit_test(test_inspect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
