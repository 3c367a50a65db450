/* Method spec parsing (docs/design.md §4 "Method", docs/design-kv.md): valid specs
 * fill the cfg with defaults and values; bad specs are KVC_ERR_ARG with a
 * message naming the bad name / key / value and the valid ones or the range. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kv/method/method.h"
#include "kvcomp_eval.h"

/* Expects `spec` to fail with every needle in the message. */
static void bad(const char *spec, const char *n1, const char *n2) {
    kvc_status st = kvc_method_validate(spec);
    if (st != KVC_ERR_ARG) fail_msg("spec '%s' accepted or wrong status %d", spec, st);
    const char *msg = kvc_last_error();
    if (n1 && !strstr(msg, n1)) fail_msg("spec '%s': message '%s' lacks '%s'", spec, msg, n1);
    if (n2 && !strstr(msg, n2)) fail_msg("spec '%s': message '%s' lacks '%s'", spec, msg, n2);
}

static void canon(const char *spec, const char *want) {
    kvc_spec s;
    if (kvc_spec_parse(spec, &s) != KVC_OK) fail_msg("spec '%s' rejected: %s", spec, kvc_last_error());
    char buf[256];
    int n = kvc_spec_format(&s, buf, sizeof buf);
    assert_int_equal(n, (int)strlen(buf));
    if (strcmp(buf, want)) fail_msg("spec '%s' -> '%s', want '%s'", spec, buf, want);
    kvc_spec_free(&s);
}

static void test_valid(void **state) {
    (void)state;
    canon("full", "full:dtype=f32,block=4096");
    canon("full:f16", "full:dtype=f16,block=4096");
    canon("full:bf16,block=64", "full:dtype=bf16,block=64");
    canon("full:block=16,dtype=f16", "full:dtype=f16,block=16");
    canon("full:dtype=f32", "full:dtype=f32,block=4096");
}

static void test_invalid(void **state) {
    (void)state;
    bad("", "empty", "full");
    bad("nope", "unknown KV method 'nope'", "full");
    bad("Full", "unknown KV method", "full");
    bad(":f16", "missing method name", "full");
    bad("full:", "nothing after ':'", NULL);
    bad("full:f8", "dtype=f8", "f32|f16|bf16");
    bad("full:dtype=f8", "dtype=f8", "f32|f16|bf16");
    bad("full:bits=2", "unknown parameter 'bits'", "dtype, block");
    bad("full:block=8", "block=8", "16..1048576");
    bad("full:block=2000000", "block=2000000", "16..1048576");
    bad("full:block=12x", "block=12x", "not an integer");
    bad("full:block=", "empty value", "block");
    bad("full:block=64,block=32", "given twice", "block");
    bad("full:block=64,f16", "not key=value", "dtype, block");
    bad("full:f16,,block=64", "empty parameter", NULL);
    bad("full:f16,", "empty parameter", NULL);
    bad("full :f16", "whitespace", NULL);
    bad("full+full", "cannot be stacked", "full");
    bad("full+", "missing method name", NULL);
    bad("+full", "missing method name", NULL);
    bad("full+nope", "unknown KV method 'nope'", NULL);
    bad("full+full+full+full+full", "stacked", NULL);
    /* probe findings (issue 14, item 10) */
    bad("kivi:,bits=2", "empty parameter before the first comma", NULL);
    bad("mustafar+kivi:bits=4+kivi:bits=1", "modifier kivi is stacked twice", NULL);
    bad("mustafar:k=1e-400", "k=1e-400 is a number that underflows", "0..1");
    bad("mustafar:k=1e400", "k=1e400 is a number that overflows", "0..1");
}

/* The canonical string parses back to the same cfg: floats keep every bit
 * (the fuzz target's property; "%g" wrote 0.555556 for 0.5555555). */
static void test_canonical_floats(void **state) {
    (void)state;
    canon("think:0.55555555", "think:ratio=0.5555555,window=32,block=64,obs=32");
    canon("think:0.1", "think:ratio=0.1,window=32,block=64,obs=32");
}

static void test_print(void **state) {
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    kvc_methods_print(f);
    fclose(f);
    assert_non_null(strstr(buf, "full"));
    assert_non_null(strstr(buf, "dtype"));
    assert_non_null(strstr(buf, "f32|f16|bf16"));
    assert_non_null(strstr(buf, "block"));
    free(buf);
    /* every registered method's defaults parse (a method may still require a
     * parameter: then its check names the method) and its positional index is valid */
    for (int i = 0; kvc_method_registry[i]; i++) {
        const kvc_method *m = kvc_method_registry[i];
        assert_true(m->positional < m->n_params);
        assert_true(m->n_params <= KVC_MAX_PARAMS);
        if (m->flags & KVC_METHOD_BASE) {
            kvc_status st = kvc_method_validate(m->name);
            if (st != KVC_OK && (st != KVC_ERR_ARG || !strstr(kvc_last_error(), m->name)))
                fail_msg("defaults of %s: status %d: %s", m->name, st, kvc_last_error());
        }
    }
}

/* Stacks from the registry: every base+modifier pair a base lists parses (or
 * fails only on a required parameter, naming the method); a modifier cannot
 * come first unless it is also a base; a method not listed cannot follow '+'. */
static void test_stacks(void **state) {
    (void)state;
    for (int i = 0; kvc_method_registry[i]; i++) {
        const kvc_method *b = kvc_method_registry[i];
        if (!(b->flags & KVC_METHOD_BASE)) {
            bad(b->name, "can only follow '+'", b->name);
            continue;
        }
        for (const char *const *m = b->stacks_with; m && *m; m++) {
            char spec[128];
            snprintf(spec, sizeof spec, "%s+%s", b->name, *m);
            kvc_status st = kvc_method_validate(spec);
            if (st != KVC_OK && (st != KVC_ERR_ARG || strstr(kvc_last_error(), "stack")))
                fail_msg("%s: %s", spec, kvc_last_error());
            const kvc_method *mm = kvc_method_find(*m);
            assert_non_null(mm);
            assert_true(mm->flags & KVC_METHOD_MODIFIER);
        }
        /* a method the base does not list */
        for (int j = 0; kvc_method_registry[j]; j++) {
            const kvc_method *o = kvc_method_registry[j];
            int listed = 0;
            for (const char *const *m = b->stacks_with; m && *m; m++) listed |= !strcmp(*m, o->name);
            if (listed) continue;
            char spec[128];
            snprintf(spec, sizeof spec, "%s+%s", b->name, o->name);
            if (kvc_method_validate(spec) == KVC_OK) fail_msg("%s accepted", spec);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_canonical_floats),
        cmocka_unit_test(test_print),
        cmocka_unit_test(test_stacks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
