/* RULER task generator: determinism for a seed, every needle and answer in the
 * prompt, answers in the expected format, the budget met (counted here in
 * words by a stand-in for the tokenizer), needle depths spread over the
 * haystack, wrap-around of a short haystack, and string_match_all scoring.
 * The haystack is the development text data/alice.txt. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcomp/eval_input.h"
#include "kvcomp/ruler.h"

static kvc_ruler_haystack hay;

/* Stand-in tokenizer: words of prompt and prefix, plus 12 for a chat template. */
static kvc_status count_words(void *user, const char *prompt, const char *prefix, int *n) {
    int *calls = user;
    if (calls) (*calls)++;
    int words = 12;
    const char *parts[2] = {prompt, prefix};
    for (int k = 0; k < 2; k++) {
        int in = 0;
        for (const char *p = parts[k]; *p; p++) {
            if (isspace((unsigned char)*p)) in = 0;
            else if (!in) in = 1, words++;
        }
    }
    *n = words;
    return KVC_OK;
}

static int setup(void **state) {
    (void)state;
    char *text;
    size_t len;
    if (kvc_eval_read_file(KVC_SOURCE_DIR "/data/alice.txt", 1 << 20, &text, &len) != KVC_OK) return 1;
    kvc_status s = kvc_ruler_haystack_init(&hay, text, len);
    free(text);
    return s != KVC_OK;
}

static int teardown(void **state) {
    (void)state;
    kvc_ruler_haystack_free(&hay);
    return 0;
}

static int count_occurrences(const char *hay_s, const char *needle) {
    int n = 0;
    for (const char *p = hay_s; (p = strstr(p, needle)); p++) n++;
    return n;
}

static void test_task_names(void **state) {
    (void)state;
    for (int t = 0; t < KVC_RULER_N_TASKS; t++) {
        kvc_ruler_task got;
        assert_int_equal(kvc_ruler_task_parse(kvc_ruler_task_name((kvc_ruler_task)t), &got), KVC_OK);
        assert_int_equal(got, t);
    }
    kvc_ruler_task got;
    assert_int_equal(kvc_ruler_task_parse("niah", &got), KVC_ERR_ARG);
    assert_non_null(strstr(kvc_last_error(), "niah_multivalue"));
}

static void test_deterministic(void **state) {
    (void)state;
    for (int t = 0; t < KVC_RULER_N_TASKS; t++) {
        kvc_ruler_sample a, b, c;
        assert_int_equal(kvc_ruler_make(&hay, t, 1500, 42, 3, -1, count_words, NULL, &a), KVC_OK);
        assert_int_equal(kvc_ruler_make(&hay, t, 1500, 42, 3, -1, count_words, NULL, &b), KVC_OK);
        assert_int_equal(kvc_ruler_make(&hay, t, 1500, 42, 4, -1, count_words, NULL, &c), KVC_OK);
        assert_string_equal(a.prompt, b.prompt);
        assert_string_equal(a.answer_prefix, b.answer_prefix);
        assert_int_equal(a.n_answers, b.n_answers);
        for (int i = 0; i < a.n_answers; i++) assert_string_equal(a.answers[i], b.answers[i]);
        assert_true(strcmp(a.prompt, c.prompt) != 0);
        kvc_ruler_sample_free(&a);
        kvc_ruler_sample_free(&b);
        kvc_ruler_sample_free(&c);
    }
}

static int all_digits(const char *s, int n) {
    if ((int)strlen(s) != n || s[0] == '0') return 0;
    for (int i = 0; i < n; i++)
        if (!isdigit((unsigned char)s[i])) return 0;
    return 1;
}

static void test_needles_and_answers(void **state) {
    (void)state;
    char buf[256];
    for (int idx = 0; idx < 20; idx++) {
        for (int t = 0; t < KVC_RULER_N_TASKS; t++) {
            kvc_ruler_sample s;
            assert_int_equal(kvc_ruler_make(&hay, t, 2000, 7, idx, -1, count_words, NULL, &s), KVC_OK);
            assert_true(s.n_tokens <= 2000);
            assert_true(s.n_tokens >= 1900); /* close to the budget */
            assert_true(s.max_new_tokens > 0);
            for (int i = 0; i < s.n_needles; i++) assert_true(s.depth[i] >= 0 && s.depth[i] <= 1);
            switch (t) {
            case KVC_RULER_NIAH_SINGLE:
            case KVC_RULER_NIAH_MULTIKEY:
            case KVC_RULER_NIAH_MULTIVALUE:
            case KVC_RULER_NIAH_MULTIQUERY:
                assert_int_equal(s.n_needles, t == KVC_RULER_NIAH_SINGLE ? 1 : 4);
                assert_int_equal(s.n_answers, t >= KVC_RULER_NIAH_MULTIVALUE ? 4 : 1);
                assert_int_equal(count_occurrences(s.prompt, "One of the special magic numbers for "),
                                 s.n_needles);
                for (int i = 0; i < s.n_answers; i++) {
                    assert_true(all_digits(s.answers[i], 7));
                    snprintf(buf, sizeof buf, " is: %s.", s.answers[i]);
                    assert_int_equal(count_occurrences(s.prompt, buf), 1);
                }
                assert_non_null(strstr(s.prompt, "What are all the special magic numbers for "));
                assert_non_null(strstr(s.answer_prefix, "The special magic numbers for "));
                break;
            case KVC_RULER_PASSKEY:
                assert_true(all_digits(s.answers[0], 5));
                snprintf(buf, sizeof buf, "The pass key is %s. Remember it. %s is the pass key.",
                         s.answers[0], s.answers[0]);
                assert_non_null(strstr(s.prompt, buf));
                assert_non_null(strstr(s.prompt, "The grass is green."));
                assert_non_null(strstr(s.prompt, "What is the pass key?"));
                break;
            case KVC_RULER_VT: {
                assert_int_equal(s.n_answers, 5);
                const char *prev = s.prompt;
                for (int i = 0; i < 5; i++) {
                    assert_int_equal(strlen(s.answers[i]), 5);
                    for (int c = 0; c < 5; c++) assert_true(isupper((unsigned char)s.answers[i][c]));
                    if (i == 0) snprintf(buf, sizeof buf, "VAR %s = ", s.answers[0]);
                    else snprintf(buf, sizeof buf, "VAR %s = VAR %s.", s.answers[i], s.answers[i - 1]);
                    const char *at = strstr(s.prompt, buf);
                    assert_non_null(at);
                    assert_true(at >= prev); /* the chain reads in order */
                    prev = at;
                    if (i > 0) assert_true(s.depth[i] >= s.depth[i - 1]);
                }
                break;
            }
            }
            kvc_ruler_sample_free(&s);
        }
    }
}

static void test_depths_spread(void **state) {
    (void)state;
    double lo = 1, hi = 0;
    for (int idx = 0; idx < 40; idx++) {
        kvc_ruler_sample s;
        assert_int_equal(
            kvc_ruler_make(&hay, KVC_RULER_NIAH_SINGLE, 800, 1, idx, -1, count_words, NULL, &s), KVC_OK);
        lo = s.depth[0] < lo ? s.depth[0] : lo;
        hi = s.depth[0] > hi ? s.depth[0] : hi;
        kvc_ruler_sample_free(&s);
    }
    assert_true(lo < 0.2);
    assert_true(hi > 0.8);
}

/* A chosen depth moves the one needle there (the nearest sentence boundary)
 * and changes nothing else of the sample; tasks of several needles and
 * depths outside [0, 1] are refused. */
static void test_chosen_depth(void **state) {
    (void)state;
    const kvc_ruler_task one[] = {KVC_RULER_NIAH_SINGLE, KVC_RULER_PASSKEY};
    const double depths[] = {0, 0.25, 0.5, 0.9, 1};
    for (int t = 0; t < 2; t++) {
        kvc_ruler_sample r;
        assert_int_equal(kvc_ruler_make(&hay, one[t], 2000, 9, 3, -1, count_words, NULL, &r), KVC_OK);
        for (int d = 0; d < 5; d++) {
            kvc_ruler_sample s;
            assert_int_equal(
                kvc_ruler_make(&hay, one[t], 2000, 9, 3, depths[d], count_words, NULL, &s), KVC_OK);
            assert_true(fabs(s.depth[0] - depths[d]) < 0.05);
            assert_string_equal(s.answers[0], r.answers[0]);
            assert_string_equal(s.answer_prefix, r.answer_prefix);
            assert_true(abs(s.n_tokens - r.n_tokens) < 20);
            kvc_ruler_sample_free(&s);
        }
        kvc_ruler_sample_free(&r);
    }
    kvc_ruler_sample s;
    assert_int_equal(
        kvc_ruler_make(&hay, KVC_RULER_NIAH_MULTIKEY, 2000, 9, 3, 0.5, count_words, NULL, &s),
        KVC_ERR_ARG);
    assert_non_null(strstr(kvc_last_error(), "one needle"));
    assert_int_equal(
        kvc_ruler_make(&hay, KVC_RULER_NIAH_SINGLE, 2000, 9, 3, 1.5, count_words, NULL, &s),
        KVC_ERR_ARG);
    assert_non_null(strstr(kvc_last_error(), "[0, 1]"));
}

static void test_wraps_short_haystack(void **state) {
    (void)state;
    kvc_ruler_haystack small;
    const char *text = "It was a bright cold day in April. The clocks were striking thirteen.\n\n"
                       "Winston slipped quickly through the glass doors of Victory Mansions.";
    assert_int_equal(kvc_ruler_haystack_init(&small, text, strlen(text)), KVC_OK);
    kvc_ruler_sample s;
    int calls = 0;
    assert_int_equal(
        kvc_ruler_make(&small, KVC_RULER_NIAH_SINGLE, 600, 5, 0, -1, count_words, &calls, &s), KVC_OK);
    assert_true(s.n_tokens <= 600 && s.n_tokens > 550);
    assert_true(count_occurrences(s.prompt, "The clocks were striking thirteen.") > 5);
    assert_true(calls < 48);
    kvc_ruler_sample_free(&s);
    /* a budget below the instructions alone */
    assert_int_equal(kvc_ruler_make(&small, KVC_RULER_VT, 20, 5, 0, -1, count_words, NULL, &s),
                     KVC_ERR_RANGE);
    assert_non_null(strstr(kvc_last_error(), "raise --len"));
    kvc_ruler_haystack_free(&small);
}

static void test_score(void **state) {
    (void)state;
    kvc_ruler_sample s;
    memset(&s, 0, sizeof s);
    s.n_answers = 2;
    strcpy(s.answers[0], "1234567");
    strcpy(s.answers[1], "ABCDE");
    assert_float_equal(kvc_ruler_score(&s, " 1234567 and abcde."), 1.0, 0);
    assert_float_equal(kvc_ruler_score(&s, " 1234567."), 0.5, 0);
    assert_float_equal(kvc_ruler_score(&s, " 123456 7"), 0.0, 0);
    assert_float_equal(kvc_ruler_score(&s, ""), 0.0, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_task_names),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_needles_and_answers),
        cmocka_unit_test(test_depths_spread),
        cmocka_unit_test(test_chosen_depth),
        cmocka_unit_test(test_wraps_short_haystack),
        cmocka_unit_test(test_score),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
