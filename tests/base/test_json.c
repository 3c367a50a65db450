/* JSON writer: escaping of quotes, backslashes and control characters,
 * replacement of invalid UTF-8, nesting and commas, numbers (shortest exact
 * form, non-finite as null), compact and pretty layouts. Outputs are compared
 * with hand-written expected text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvcomp/json.h"

typedef struct membuf {
    char *data;
    size_t size;
    FILE *f;
} membuf;

static void mb_open(membuf *m) {
    m->data = NULL;
    m->size = 0;
    m->f = open_memstream(&m->data, &m->size);
    assert_non_null(m->f);
}

static void mb_check(membuf *m, const char *expected) {
    fclose(m->f);
    assert_string_equal(m->data, expected);
    free(m->data);
}

static void test_escaping(void **state) {
    (void)state;
    membuf m;
    mb_open(&m);
    kvc_json j;
    kvc_json_init(&j, m.f, 0);
    kvc_json_arr_begin(&j);
    kvc_json_str(&j, "a\"b\\c");
    kvc_json_str(&j, "tab\there\nnl\r\b\f");
    kvc_json_str(&j, "\x01\x1f end");
    kvc_json_str(&j, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"); /* valid UTF-8 kept */
    kvc_json_str(&j, "bad\xff\xc3(x\xed\xa0\x80");                  /* invalid bytes */
    kvc_json_strn(&j, "nul\0in", 6);
    kvc_json_str(&j, NULL);
    kvc_json_str(&j, "/ and \x7f");
    kvc_json_arr_end(&j);
    kvc_json_finish(&j);
    mb_check(&m, "[\"a\\\"b\\\\c\",\"tab\\there\\nnl\\r\\b\\f\",\"\\u0001\\u001f end\","
                 "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\","
                 "\"bad\\ufffd\\ufffd(x\\ufffd\\ufffd\\ufffd\",\"nul\\u0000in\",null,"
                 "\"/ and \x7f\"]\n");
}

static void test_nesting_and_numbers(void **state) {
    (void)state;
    membuf m;
    mb_open(&m);
    kvc_json j;
    kvc_json_init(&j, m.f, 0);
    kvc_json_obj_begin(&j);
    kvc_json_kv_str(&j, "name", "x");
    kvc_json_kv_num(&j, "half", 0.5);
    kvc_json_kv_num(&j, "tenth", 0.1);
    kvc_json_kv_num(&j, "third", 1.0 / 3.0);
    kvc_json_kv_num(&j, "nan", NAN);
    kvc_json_kv_num(&j, "inf", -INFINITY);
    kvc_json_kv_int(&j, "neg", -42);
    kvc_json_kv_uint(&j, "big", UINT64_MAX);
    kvc_json_kv_bool(&j, "yes", 1);
    kvc_json_key(&j, "empty");
    kvc_json_obj_begin(&j);
    kvc_json_obj_end(&j);
    kvc_json_key(&j, "list");
    kvc_json_arr_begin(&j);
    kvc_json_int(&j, 1);
    kvc_json_arr_begin(&j);
    kvc_json_arr_end(&j);
    kvc_json_obj_begin(&j);
    kvc_json_kv_num(&j, "e", 1e300);
    kvc_json_obj_end(&j);
    kvc_json_null(&j);
    kvc_json_arr_end(&j);
    kvc_json_obj_end(&j);
    kvc_json_finish(&j);
    mb_check(&m, "{\"name\":\"x\",\"half\":0.5,\"tenth\":0.1,\"third\":0.3333333333333333,"
                 "\"nan\":null,\"inf\":null,\"neg\":-42,\"big\":18446744073709551615,"
                 "\"yes\":true,\"empty\":{},\"list\":[1,[],{\"e\":1e+300},null]}\n");
}

static void test_pretty(void **state) {
    (void)state;
    membuf m;
    mb_open(&m);
    kvc_json j;
    kvc_json_init(&j, m.f, 1);
    kvc_json_obj_begin(&j);
    kvc_json_kv_int(&j, "a", 1);
    kvc_json_key(&j, "b");
    kvc_json_arr_begin(&j);
    kvc_json_int(&j, 2);
    kvc_json_int(&j, 3);
    kvc_json_arr_end(&j);
    kvc_json_obj_end(&j);
    kvc_json_finish(&j);
    mb_check(&m, "{\n  \"a\": 1,\n  \"b\": [\n    2,\n    3\n  ]\n}\n");
}

/* Numbers written by the writer read back exactly. */
static void test_number_round_trip(void **state) {
    (void)state;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 2000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double v;
        uint64_t bits = x;
        memcpy(&v, &bits, 8);
        if (!isfinite(v)) continue;
        membuf m;
        mb_open(&m);
        kvc_json j;
        kvc_json_init(&j, m.f, 0);
        kvc_json_num(&j, v);
        fclose(m.f);
        assert_true(strtod(m.data, NULL) == v);
        free(m.data);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_nesting_and_numbers),
        cmocka_unit_test(test_pretty),
        cmocka_unit_test(test_number_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
