/* KVmix profile files (src/kv/method/kvmix_profile.c): the paper's ranking
 * rule (top 20% of 32 layers -> K 2.1875 / V 2.375 average bits), write/parse
 * round trip, random profiles with the same bit budget, and bad files rejected
 * with messages that name the line and the problem. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/method/kvmix_profile.h"

static void test_paper_rule(void **state) {
    (void)state;
    double ks[32], vs[32];
    for (int i = 0; i < 32; i++) ks[i] = (double)((i * 7) % 32), vs[i] = (double)((i * 11) % 32);
    kvc_kvmix_rule r = kvc_kvmix_rule_default(0.2);
    kvc_kvmix_profile *p;
    assert_int_equal(kvc_kvmix_profile_from_scores(32, ks, vs, &r, "m", "s", &p), KVC_OK);
    double kb, vb;
    kvc_kvmix_profile_avg_bits(p, &kb, &vb);
    assert_true(kb == 2.1875 && vb == 2.375);
    /* the top-scored layers got the high bits and the high ratio */
    for (int i = 0; i < 32; i++) {
        int k_top = ks[i] >= 26, v_top = vs[i] >= 26;
        assert_int_equal(p->layer[i].k_bits, k_top ? 3 : 2);
        assert_int_equal(p->layer[i].v_bits, v_top ? 4 : 2);
        assert_true(p->layer[i].k_rpc == (k_top ? 0.2f : 0.1f));
        assert_true(p->layer[i].v_rpc == (v_top ? 0.2f : 0.1f));
    }
    kvc_kvmix_profile_free(p);
    assert_int_equal(kvc_kvmix_top_count(0.2, 30), 6);
    assert_int_equal(kvc_kvmix_top_count(0.0, 30), 0);
    assert_int_equal(kvc_kvmix_top_count(1.0, 30), 30);
    assert_int_equal(kvc_kvmix_top_count(0.3, 10), 3);
}

static void test_roundtrip(void **state) {
    (void)state;
    double ks[30], vs[30];
    for (int i = 0; i < 30; i++) ks[i] = 1e-3 * (i % 7) + 1e-5 * i, vs[i] = 0.5 / (i + 1);
    kvc_kvmix_rule r = kvc_kvmix_rule_default(0.2);
    kvc_kvmix_profile *p, *q;
    assert_int_equal(kvc_kvmix_profile_from_scores(30, ks, vs, &r, "SmolLM2 # x", "alice.txt, 8 prompts", &p), KVC_OK);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(kvc_kvmix_profile_write(p, f), KVC_OK);
    fclose(f);
    assert_int_equal(kvc_kvmix_profile_parse(buf, len, "mem", &q), KVC_OK);
    assert_int_equal(q->n_layers, 30);
    assert_string_equal(q->model, "SmolLM2 x"); /* '#' would start a comment: replaced */
    assert_string_equal(q->source, "alice.txt, 8 prompts");
    for (int i = 0; i < 30; i++) {
        assert_int_equal(q->layer[i].k_bits, p->layer[i].k_bits);
        assert_int_equal(q->layer[i].v_bits, p->layer[i].v_bits);
        assert_true(q->layer[i].k_rpc == p->layer[i].k_rpc);
        assert_true(q->layer[i].v_rpc == p->layer[i].v_rpc);
        assert_true(q->layer[i].k_score >= p->layer[i].k_score * (1 - 1e-6) &&
                    q->layer[i].k_score <= p->layer[i].k_score * (1 + 1e-6));
        assert_true(q->layer[i].v_score >= p->layer[i].v_score * (1 - 1e-6) &&
                    q->layer[i].v_score <= p->layer[i].v_score * (1 + 1e-6));
    }
    free(buf);
    kvc_kvmix_profile_free(p);
    kvc_kvmix_profile_free(q);
}

static void test_random_same_budget(void **state) {
    (void)state;
    kvc_kvmix_rule r = kvc_kvmix_rule_default(0.2);
    kvc_kvmix_profile *a, *b, *c;
    assert_int_equal(kvc_kvmix_profile_random(30, &r, 7, "m", &a), KVC_OK);
    assert_int_equal(kvc_kvmix_profile_random(30, &r, 7, "m", &b), KVC_OK);
    assert_int_equal(kvc_kvmix_profile_random(30, &r, 8, "m", &c), KVC_OK);
    double kb, vb;
    kvc_kvmix_profile_avg_bits(a, &kb, &vb);
    assert_true(kb == 2.0 + 6.0 / 30 && vb == 2.0 + 12.0 / 30);
    int same = 1;
    for (int i = 0; i < 30; i++) {
        assert_int_equal(a->layer[i].k_bits, b->layer[i].k_bits);
        assert_int_equal(a->layer[i].v_bits, b->layer[i].v_bits);
        if (a->layer[i].k_bits != c->layer[i].k_bits || a->layer[i].v_bits != c->layer[i].v_bits) same = 0;
    }
    assert_false(same);
    kvc_kvmix_profile_free(a);
    kvc_kvmix_profile_free(b);
    kvc_kvmix_profile_free(c);
}

static void test_minimal_and_comments(void **state) {
    (void)state;
    const char *txt = "# comment\n\n  kvmix-profile 1   # trailing\r\nlayers 2\n"
                      "layer 1 4 3 0 1\nlayer 0 1 2 0.5 0.25 1e-3 0\n";
    kvc_kvmix_profile *p;
    assert_int_equal(kvc_kvmix_profile_parse(txt, strlen(txt), "t", &p), KVC_OK);
    assert_int_equal(p->layer[1].k_bits, 4);
    assert_int_equal(p->layer[1].v_bits, 3);
    assert_int_equal(p->layer[0].k_bits, 1);
    assert_true(p->layer[0].v_rpc == 0.25f);
    kvc_kvmix_profile_free(p);
}

typedef struct bad_case {
    const char *text, *expect;
} bad_case;

static void test_bad_files(void **state) {
    (void)state;
    static const bad_case cases[] = {
        {"", "empty"},
        {"# only a comment\n", "empty"},
        {"hello world\n", "expected 'kvmix-profile 1'"},
        {"\x7f" "ELF\x01\x02", "expected 'kvmix-profile 1'"},
        {"kvmix-profile 2\n", "version 2 not supported"},
        {"kvmix-profile\n", "needs one version"},
        {"kvmix-profile 1\n", "no 'layers N'"},
        {"kvmix-profile 1\nlayers 0\n", "count in [1, 1024]"},
        {"kvmix-profile 1\nlayers -3\n", "count in [1, 1024]"},
        {"kvmix-profile 1\nlayers 99999999999999999999\n", "count in [1, 1024]"},
        {"kvmix-profile 1\nlayers 2\nlayers 2\n", "'layers' given twice"},
        {"kvmix-profile 1\nlayer 0 2 2 0.1 0.1\n", "'layer' before 'layers N'"},
        {"kvmix-profile 1\nlayers 2\nlayer 0 2 2 0.1 0.1\n", "1 of 2 layers missing (first missing: layer 1)"},
        {"kvmix-profile 1\nlayers 2\nlayer 2 2 2 0.1 0.1\n", "line 3: layer index '2' out of range [0, 2)"},
        {"kvmix-profile 1\nlayers 2\nlayer -1 2 2 0.1 0.1\n", "out of range"},
        {"kvmix-profile 1\nlayers 2\nlayer 0 2 2 0.1 0.1\nlayer 0 2 2 0.1 0.1\n", "line 4: layer 0 given twice"},
        {"kvmix-profile 1\nlayers 1\nlayer 0 5 2 0.1 0.1\n", "k_bits 5 is not a supported bit width"},
        {"kvmix-profile 1\nlayers 1\nlayer 0 2 8 0.1 0.1\n", "v_bits 8 is not a supported bit width"},
        {"kvmix-profile 1\nlayers 1\nlayer 0 0 2 0.1 0.1\n", "k_bits 0 is not a supported bit width"},
        {"kvmix-profile 1\nlayers 1\nlayer 0 two 2 0.1 0.1\n", "k_bits 'two' is not an integer"},
        {"kvmix-profile 1\nlayers 1\nlayer 0 2.5 2 0.1 0.1\n", "k_bits '2.5' is not an integer"},
        {"kvmix-profile 1\nlayers 1\nlayer 0 2 2 1.5 0.1\n", "k_rpc '1.5' is not a ratio in [0, 1]"},
        {"kvmix-profile 1\nlayers 1\nlayer 0 2 2 0.1 nan\n", "v_rpc 'nan' is not a ratio"},
        {"kvmix-profile 1\nlayers 1\nlayer 0 2 2 0.1 -0.1\n", "v_rpc '-0.1' is not a ratio"},
        {"kvmix-profile 1\nlayers 1\nlayer 0 2 2 0.1 0.1 -1 0\n", "k_score '-1' is not a finite"},
        {"kvmix-profile 1\nlayers 1\nlayer 0 2 2 0.1 0.1 1 inf\n", "v_score 'inf' is not a finite"},
        {"kvmix-profile 1\nlayers 1\nlayer 0 2 2 0.1 0.1 1e999 0\n", "k_score '1e999'"},
        {"kvmix-profile 1\nlayers 1\nlayer 0 2 2 0.1\n", "needs 5 or 7 values"},
        {"kvmix-profile 1\nlayers 1\nlayer 0 2 2 0.1 0.1 1\n", "needs 5 or 7 values"},
        {"kvmix-profile 1\nlayers 1\nbits 3\n", "unknown record 'bits'"},
        {"kvmix-profile 1\nkvmix-profile 1\n", "second 'kvmix-profile' header"},
        {"kvmix-profile 1\nlayers 1\nlayer 0 2 2 0.1 0.1 1 2 3 4 5 6 7 8 9 10 11 12 13\n", "more than 16 fields"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kvc_kvmix_profile *p = (kvc_kvmix_profile *)1;
        kvc_status st = kvc_kvmix_profile_parse(cases[i].text, strlen(cases[i].text), "bad.kvmix", &p);
        if (st != KVC_ERR_FORMAT || p != NULL || !strstr(kvc_last_error(), cases[i].expect) ||
            !strstr(kvc_last_error(), "bad.kvmix"))
            fail_msg("case %zu: status %d, message '%s', expected '%s'", i, st, kvc_last_error(),
                     cases[i].expect);
    }
    /* NUL byte, over-long line, oversize file */
    const char nul[] = "kvmix-profile 1\nlayers 1\0\n";
    kvc_kvmix_profile *p;
    assert_int_equal(kvc_kvmix_profile_parse(nul, sizeof nul - 1, "n", &p), KVC_ERR_FORMAT);
    assert_non_null(strstr(kvc_last_error(), "NUL byte at offset 24"));
    char *big = malloc(3000);
    memset(big, 'a', 3000);
    assert_int_equal(kvc_kvmix_profile_parse(big, 3000, "n", &p), KVC_ERR_FORMAT);
    assert_non_null(strstr(kvc_last_error(), "line 1: longer than 1024 bytes"));
    free(big);
    assert_int_equal(kvc_kvmix_profile_parse("x", (size_t)2 << 20, "n", &p), KVC_ERR_FORMAT);
    assert_non_null(strstr(kvc_last_error(), "more than the limit"));
}

static void test_load_errors(void **state) {
    (void)state;
    kvc_kvmix_profile *p;
    assert_int_equal(kvc_kvmix_profile_load("/nonexistent/dir/x.kvmix", &p), KVC_ERR_IO);
    assert_non_null(strstr(kvc_last_error(), "/nonexistent/dir/x.kvmix: cannot open"));
    assert_null(p);
    /* the shipped default profile parses and has the paper's split (6 of 30 layers high) */
    assert_int_equal(kvc_kvmix_profile_load(KVC_SOURCE_DIR "/profiles/smollm2.kvmix", &p), KVC_OK);
    assert_int_equal(p->n_layers, 30);
    double kb, vb;
    kvc_kvmix_profile_avg_bits(p, &kb, &vb);
    assert_true(fabs(kb - 2.2) < 1e-12 && fabs(vb - 2.4) < 1e-12);
    kvc_kvmix_profile_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paper_rule),         cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_random_same_budget), cmocka_unit_test(test_minimal_and_comments),
        cmocka_unit_test(test_bad_files),          cmocka_unit_test(test_load_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
