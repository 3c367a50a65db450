/* Tuned profile files (src/kv/method/tuned_profile.c): codec names, their
 * sizes, write/parse round trip, and bad files refused with messages that
 * name the line, the field and the value (never a crash). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/method/tuned_profile.h"

static void test_codec_names(void **state) {
    (void)state;
    const char *ok[] = {"f32", "f16", "q1g128", "q2g32", "q3g16", "q4g1"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        kvc_tuned_codec c;
        char nm[KVC_TUNED_CODEC_NAME];
        assert_int_equal(kvc_tuned_codec_parse(ok[i], "t", &c), KVC_OK);
        kvc_tuned_codec_name(c, nm);
        assert_string_equal(nm, ok[i]);
    }
    const char *bad[] = {"", "q", "q2", "qg32", "q0g32", "q5g32", "q2g0", "q2g99999", "f8",
                         "kivi2", "q2g32x", "q2gg32"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kvc_tuned_codec c;
        assert_int_equal(kvc_tuned_codec_parse(bad[i], "where", &c), KVC_ERR_FORMAT);
        assert_non_null(strstr(kvc_last_error(), "where"));
    }
}

static void test_codec_bits(void **state) {
    (void)state;
    /* 2-bit codes + an f16 scale and min per 32 elements: 3 bits, plus the header */
    double k = kvc_tuned_codec_bits((kvc_tuned_codec){2, 32}, 0, 64, 4096);
    double v = kvc_tuned_codec_bits((kvc_tuned_codec){2, 32}, 1, 64, 4096);
    assert_true(k >= 3.0 && k < 3.01 && v >= 3.0 && v < 3.01);
    /* V groups are cut at the head dim: group 128 over 64 channels is one group of 64 */
    v = kvc_tuned_codec_bits((kvc_tuned_codec){1, 128}, 1, 64, 4096);
    assert_true(v >= 1.5 && v < 1.51);
    assert_true(kvc_tuned_codec_bits((kvc_tuned_codec){16, 0}, 0, 64, 4096) == 16);
}

static kvc_tuned_profile *parse_ok(const char *text) {
    kvc_tuned_profile *p = NULL;
    kvc_status st = kvc_tuned_profile_parse(text, strlen(text), "mem", &p);
    if (st != KVC_OK) fail_msg("refused: %s", kvc_last_error());
    return p;
}

static void test_roundtrip(void **state) {
    (void)state;
    kvc_tuned_profile *p = parse_ok("kvcomp-tuned 1\n# c\nmodel  Some  Model \nsource calib.txt, 1024+32\n"
                                    "layers 3\nlayer 2 q1g128 f16\nlayer 0 q2g32 q4g64 1e-3 2.5e-2\n"
                                    "layer 1 f32 q3g16\n");
    assert_int_equal(p->n_layers, 3);
    assert_string_equal(p->model, "Some Model");
    assert_int_equal(p->layer[0].k.bits, 2);
    assert_int_equal(p->layer[0].v.group, 64);
    assert_true(p->layer[0].v_kl == 2.5e-2 && p->layer[1].k_kl < 0);
    assert_int_equal(p->layer[2].v.bits, 16);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(kvc_tuned_profile_write(p, f), KVC_OK);
    fclose(f);
    kvc_tuned_profile *q = parse_ok(buf);
    assert_string_equal(q->model, p->model);
    assert_string_equal(q->source, p->source);
    for (int i = 0; i < 3; i++) {
        assert_memory_equal(&q->layer[i].k, &p->layer[i].k, sizeof q->layer[i].k);
        assert_memory_equal(&q->layer[i].v, &p->layer[i].v, sizeof q->layer[i].v);
        assert_true(fabs(q->layer[i].k_kl - p->layer[i].k_kl) <= 1e-9);
    }
    free(buf);
    kvc_tuned_profile_free(p);
    kvc_tuned_profile_free(q);
}

/* Each bad file is refused with KVC_ERR_FORMAT and a message containing `want`. */
static void test_bad_files(void **state) {
    (void)state;
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"", "empty"},
        {"garbage\n", "expected 'kvcomp-tuned 1'"},
        {"kvmix-profile 1\nlayers 1\n", "not a tuned profile"},
        {"kvcomp-tuned 2\n", "version 2"},
        {"kvcomp-tuned 1\n", "no 'layers N'"},
        {"kvcomp-tuned 1\nlayers 0\n", "'layers' needs a count"},
        {"kvcomp-tuned 1\nlayers 2000\n", "'layers' needs a count"},
        {"kvcomp-tuned 1\nlayer 0 q2g32 q2g32\n", "before 'layers N'"},
        {"kvcomp-tuned 1\nlayers 2\nlayer 0 q2g32 q2g32\n", "1 of 2 layers missing (first missing: layer 1"},
        {"kvcomp-tuned 1\nlayers 2\nlayer 0 q2g32 q2g32\nlayer 0 q2g32 q2g32\n", "line 4: layer 0 given twice"},
        {"kvcomp-tuned 1\nlayers 2\nlayer 2 q2g32 q2g32\n", "layer index '2' out of range"},
        {"kvcomp-tuned 1\nlayers 1\nlayer 0 q5g32 q2g32\n", "line 3: layer 0 k_codec 'q5g32': bits '5' not in 1..4"},
        {"kvcomp-tuned 1\nlayers 1\nlayer 0 q2g32 kivi:bits=2\n", "v_codec 'kivi:bits=2' is not a codec"},
        {"kvcomp-tuned 1\nlayers 1\nlayer 0 q2g32 q2g0\n", "group '0' not in"},
        {"kvcomp-tuned 1\nlayers 1\nlayer 0 q2g32\n", "needs 3 or 5 values"},
        {"kvcomp-tuned 1\nlayers 1\nlayer 0 q2g32 q2g32 1e-3\n", "needs 3 or 5 values"},
        {"kvcomp-tuned 1\nlayers 1\nlayer 0 q2g32 q2g32 -1 0\n", "k_kl '-1' is not"},
        {"kvcomp-tuned 1\nlayers 1\nlayer 0 q2g32 q2g32 0 nan\n", "v_kl 'nan' is not"},
        {"kvcomp-tuned 1\nlayers 1\nlayers 1\n", "given twice"},
        {"kvcomp-tuned 1\nbits 3\n", "unknown record 'bits'"},
        {"kvcomp-tuned 1\nlayers 1\nlayer 0 a b c d e f g h i j k l m n o p q\n", "more than 16 fields"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kvc_tuned_profile *p = (kvc_tuned_profile *)1;
        kvc_status st = kvc_tuned_profile_parse(cases[i].text, strlen(cases[i].text), "bad", &p);
        if (st != KVC_ERR_FORMAT || p != NULL || !strstr(kvc_last_error(), cases[i].want))
            fail_msg("case %zu: status %d, message '%s', wanted '%s'", i, st, kvc_last_error(),
                     cases[i].want);
    }
    char nul[] = "kvcomp-tuned 1\nlay\0ers 1\n";
    kvc_tuned_profile *p;
    assert_int_equal(kvc_tuned_profile_parse(nul, sizeof nul - 1, "bad", &p), KVC_ERR_FORMAT);
    assert_non_null(strstr(kvc_last_error(), "NUL byte"));
    char *longline = malloc(2100);
    memset(longline, 'x', 2099);
    longline[2099] = '\0';
    assert_int_equal(kvc_tuned_profile_parse(longline, 2099, "bad", &p), KVC_ERR_FORMAT);
    assert_non_null(strstr(kvc_last_error(), "longer than"));
    free(longline);
    assert_int_equal(kvc_tuned_profile_load("/nonexistent/p.tuned", &p), KVC_ERR_IO);
    assert_null(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_names), cmocka_unit_test(test_codec_bits),
        cmocka_unit_test(test_roundtrip), cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
