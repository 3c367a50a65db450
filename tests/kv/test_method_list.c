/* The public method listing (kvcomp.h: kvc_method_count, kvc_method_get,
 * kvc_method_param_get, kvc_method_stacks_with) against the registry it reads:
 * every row and parameter is reachable, the types are the documented ones,
 * defaults of int and float parameters lie in their range, and indexes
 * outside the table are KVC_ERR_RANGE with a message, never a crash. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "kv/method/method.h"
#include "kvcomp.h"

static void test_rows(void **state) {
    (void)state;
    int n = kvc_method_count();
    int registered = 0;
    while (kvc_method_registry[registered]) registered++;
    assert_int_equal(n, registered);
    for (int i = 0; i < n; i++) {
        kvc_method_info m;
        assert_int_equal(kvc_method_get(i, &m), KVC_OK);
        assert_string_equal(m.name, kvc_method_registry[i]->name);
        assert_true(m.base || m.modifier);
        assert_true(m.positional < m.n_params);
        assert_non_null(kvc_method_stacks_with(i));
        for (int j = 0; j < m.n_params; j++) {
            kvc_method_param p;
            assert_int_equal(kvc_method_param_get(i, j, &p), KVC_OK);
            assert_non_null(strstr("int float enum bool string", p.type));
            if (strcmp(p.type, "enum") == 0) assert_true(strlen(p.choices) > 0);
            if ((strcmp(p.type, "int") == 0 || strcmp(p.type, "float") == 0) && *p.def) {
                double d = strtod(p.def, NULL);
                assert_true(d >= p.min && d <= p.max);
            }
        }
    }
    kvc_method_info full;
    assert_int_equal(kvc_method_get(0, &full), KVC_OK);
    assert_string_equal(full.name, "full");
}

static void test_out_of_range(void **state) {
    (void)state;
    kvc_method_info m;
    kvc_method_param p;
    int n = kvc_method_count();
    assert_int_equal(kvc_method_get(-1, &m), KVC_ERR_RANGE);
    assert_int_equal(kvc_method_get(n, &m), KVC_ERR_RANGE);
    assert_non_null(strstr(kvc_last_error(), "methods"));
    assert_int_equal(kvc_method_param_get(n, 0, &p), KVC_ERR_RANGE);
    assert_int_equal(kvc_method_get(0, &m), KVC_OK);
    assert_int_equal(kvc_method_param_get(0, m.n_params, &p), KVC_ERR_RANGE);
    assert_int_equal(kvc_method_param_get(0, -1, &p), KVC_ERR_RANGE);
    assert_null(kvc_method_stacks_with(n)[0]);
    assert_null(kvc_method_stacks_with(-1)[0]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_out_of_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
