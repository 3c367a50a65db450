/* Eval metrics on hand-computed examples: log-softmax, KL divergence, median /
 * p99 (linear interpolation between order statistics), perplexity ratio, Δp,
 * same-top rate; and the `--kv` list splitter. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvcomp/eval_input.h"
#include "kvcomp/metrics.h"

static void test_log_softmax(void **state) {
    (void)state;
    float x[2] = {0.0f, (float)log(3.0)}, lp[2];
    kvc_log_softmax(x, 2, lp);
    assert_float_equal(lp[0], log(0.25), 1e-6);
    assert_float_equal(lp[1], log(0.75), 1e-6);
    /* shift invariance and no overflow with large logits */
    float y[3] = {1000.0f, 1000.0f, 1000.0f - (float)log(2.0)}, ly[3];
    kvc_log_softmax(y, 3, ly);
    /* 1000 - ln 2 is stored to float's ulp at 1000 (6e-5): budget 1e-4 */
    assert_float_equal(exp(ly[0]), 0.4, 1e-4);
    assert_float_equal(exp(ly[2]), 0.2, 1e-4);
    assert_int_equal(kvc_argmax(y, 3), 0); /* first on ties */
}

static void test_kl(void **state) {
    (void)state;
    float p[2] = {(float)log(0.5), (float)log(0.5)};
    float q[2] = {(float)log(0.25), (float)log(0.75)};
    /* 0.5 ln(0.5/0.25) + 0.5 ln(0.5/0.75) = 0.5 ln(4/3) */
    assert_float_equal(kvc_kl_logprobs(p, q, 2), 0.5 * log(4.0 / 3.0), 1e-7);
    assert_float_equal(kvc_kl_logprobs(p, p, 2), 0.0, 1e-12);
    /* a zero-probability reference entry contributes nothing */
    float r[2] = {0.0f, -INFINITY};
    assert_float_equal(kvc_kl_logprobs(r, q, 2), -log(0.25), 1e-6);
}

static void test_summary(void **state) {
    (void)state;
    double x[5] = {3, 1, 4, 1, 5};
    kvc_summary s;
    kvc_summarize(x, 5, &s);
    assert_int_equal(s.n, 5);
    assert_float_equal(s.mean, 2.8, 1e-12);
    assert_float_equal(s.median, 3.0, 1e-12);
    assert_float_equal(s.p99, 4.96, 1e-12); /* rank 0.99 * 4 = 3.96: 4 + 0.96 * (5 - 4) */
    assert_float_equal(s.min, 1.0, 1e-12);
    assert_float_equal(s.max, 5.0, 1e-12);
    assert_float_equal(x[0], 3.0, 0); /* input untouched */
    double y[4] = {4, 1, 3, 2};
    kvc_summarize(y, 4, &s);
    assert_float_equal(s.median, 2.5, 1e-12);
    double z[1] = {7};
    kvc_summarize(z, 1, &s);
    assert_float_equal(s.median, 7, 0);
    assert_float_equal(s.p99, 7, 0);
}

static void test_positions_and_ppl(void **state) {
    (void)state;
    /* vocabulary of 2; true tokens 0 then 1 */
    float ref_logits[2][2] = {{0.0f, 0.0f}, {(float)log(3.0), 0.0f}};
    float met_logits[2][2] = {{(float)log(3.0), 0.0f}, {(float)log(3.0), 0.0f}};
    int32_t truth[2] = {0, 1};
    kvc_kl_pos pos[2];
    float ref_lp[2], scratch[2];
    for (int i = 0; i < 2; i++) {
        kvc_log_softmax(ref_logits[i], 2, ref_lp);
        kvc_kl_position(ref_lp, met_logits[i], 2, truth[i], scratch, &pos[i]);
    }
    /* position 0: ref (1/2, 1/2), method (3/4, 1/4): KL = 0.5 ln(4/3), top 0 vs 0 on a tie
     * (argmax takes the first) -> same; p_ref(0) = 0.5, p_method(0) = 0.75 */
    assert_float_equal(pos[0].kl, 0.5 * log(4.0 / 3.0), 1e-6);
    assert_int_equal(pos[0].same_top, 1);
    assert_float_equal(pos[0].p_ref, 0.5, 1e-6);
    assert_float_equal(pos[0].p_method, 0.75, 1e-6);
    /* position 1: identical distributions (3/4, 1/4); true token 1: p = 1/4 */
    assert_float_equal(pos[1].kl, 0.0, 1e-7);
    assert_float_equal(pos[1].p_method, 0.25, 1e-6);

    kvc_kl_summary s;
    double scr[2];
    kvc_kl_summarize(pos, 2, scr, &s);
    assert_int_equal(s.n, 2);
    assert_float_equal(s.same_top, 1.0, 0);
    assert_float_equal(s.dp_mean, 0.125, 1e-6);                   /* (0.25 + 0) / 2 */
    assert_float_equal(s.dp_rms, sqrt(0.25 * 0.25 / 2), 1e-6);    /* sqrt(mean d^2) */
    assert_float_equal(s.ppl_ref, sqrt(2.0 * 4.0), 1e-5);         /* exp((ln 2 + ln 4)/2) */
    assert_float_equal(s.ppl_method, sqrt(4.0 / 3.0 * 4.0), 1e-5);
    assert_float_equal(s.ppl_ratio, sqrt(4.0 / 3.0 / 2.0), 1e-5);
    assert_float_equal(s.kl.mean, 0.25 * log(4.0 / 3.0), 1e-6);
    assert_float_equal(s.kl.max, 0.5 * log(4.0 / 3.0), 1e-6);
}

static void test_spec_list(void **state) {
    (void)state;
    char *s[8];
    int n;
    assert_int_equal(kvc_spec_list_split("packkv,kivi:bits=2,group=32,full:f16", s, 8, &n), KVC_OK);
    assert_int_equal(n, 3);
    assert_string_equal(s[0], "packkv");
    assert_string_equal(s[1], "kivi:bits=2,group=32");
    assert_string_equal(s[2], "full:f16");
    kvc_spec_list_free(s, n);
    assert_int_equal(kvc_spec_list_split("full:f32", s, 8, &n), KVC_OK);
    assert_int_equal(n, 1);
    assert_string_equal(s[0], "full:f32");
    kvc_spec_list_free(s, n);
    assert_int_equal(kvc_spec_list_split("a:x=1;b:y=2,z=3", s, 8, &n), KVC_OK);
    assert_int_equal(n, 2);
    assert_string_equal(s[1], "b:y=2,z=3");
    kvc_spec_list_free(s, n);
    /* a '+' stage after a parameter stays in the same spec */
    assert_int_equal(kvc_spec_list_split("full:f16,mustafar:k=0.5,v=0.5+kivi:bits=2,h2o", s, 8, &n),
                     KVC_OK);
    assert_int_equal(n, 3);
    assert_string_equal(s[1], "mustafar:k=0.5,v=0.5+kivi:bits=2");
    assert_string_equal(s[2], "h2o");
    kvc_spec_list_free(s, n);
    assert_int_equal(kvc_spec_list_split("", s, 8, &n), KVC_ERR_ARG);
    assert_int_equal(kvc_spec_list_split("full:f16,,full:f32", s, 8, &n), KVC_ERR_ARG);
    assert_int_equal(kvc_spec_list_split("bits=2,full:f16", s, 8, &n), KVC_ERR_ARG);
    assert_int_equal(kvc_spec_list_split("a;bits=2", s, 8, &n), KVC_ERR_ARG);
    assert_int_equal(kvc_spec_list_split("a,b,c", s, 2, &n), KVC_ERR_ARG);
    assert_non_null(strstr(kvc_last_error(), "more than 2"));
}

/* 95% t-interval: a hand-computed case, the table and its large-df continuation. */
static void test_mean_ci95(void **state) {
    (void)state;
    const double x[4] = {1, 2, 3, 4};
    double lo, hi;
    kvc_mean_ci95(x, 4, &lo, &hi);
    /* mean 2.5, sd sqrt(5/3), t(0.975, 3) = 3.182: half-width 3.182 * sqrt(5/3) / 2 */
    const double half = 3.182 * sqrt(5.0 / 3.0) / 2;
    assert_float_equal(lo, 2.5 - half, 1e-9);
    assert_float_equal(hi, 2.5 + half, 1e-9);
    kvc_mean_ci95(x, 1, &lo, &hi);
    assert_true(isnan(lo) && isnan(hi));
    const double same[3] = {0.25, 0.25, 0.25};
    kvc_mean_ci95(same, 3, &lo, &hi);
    assert_float_equal(lo, 0.25, 1e-15);
    assert_float_equal(hi, 0.25, 1e-15);
    /* published quantiles beyond the table: df 31 2.0395, 60 2.0003, 1000 1.9623 */
    assert_float_equal(kvc_t975(31), 2.0395, 2e-4);
    assert_float_equal(kvc_t975(60), 2.0003, 2e-4);
    assert_float_equal(kvc_t975(1000), 1.9623, 2e-4);
    assert_float_equal(kvc_t975(1), 12.706, 1e-9);
    assert_true(isnan(kvc_t975(0)));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mean_ci95),
        cmocka_unit_test(test_log_softmax),
        cmocka_unit_test(test_kl),
        cmocka_unit_test(test_summary),
        cmocka_unit_test(test_positions_and_ppl),
        cmocka_unit_test(test_spec_list),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
