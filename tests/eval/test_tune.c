/* `kvcomp tune` and the `tuned` method on the default model (skips without
 * it) and the budgeted choice alone:
 * - kvc_tune_choose is the exact optimum of small random instances (against
 *   enumeration) and refuses a budget below every side's cheapest codec;
 * - the Pareto front that eval kl --plot marks;
 * - K/V appended with kvc_ctx_append_kv, then a chunk: the same logits as
 *   the prefill that produced them (full:f32);
 * - tuned with every side q<b>g<g> gives exactly kivi:bits=b,group=g's logits
 *   (prefill and decode), also both +rot, a mixed profile runs, and a profile for another
 *   layer count is refused naming both counts;
 * - the sensitivity pass with --rot (kvc_tune, rot = 1; in the default-ISA
 *   variant only) writes a profile that
 *   parses, has the model's layers, only the candidates, stays within the
 *   budget, says it was probed +rot, and runs as tuned:profile=FILE+rot. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/cpu.h"
#include "kv/method/tuned_profile.h"
#include "kvcomp.h"
#include "kvcomp_eval.h"
#include "kvcomp/tune.h"

enum { NCTX = 200, NCONT = 12 };

static uint64_t rng = 7;
static double urand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static void test_choose_exact(void **state) {
    (void)state;
    enum { NI = 5, NC = 3 };
    for (int trial = 0; trial < 200; trial++) {
        double kl[NI * NC], bits[NI * NC];
        for (int i = 0; i < NI * NC; i++) kl[i] = urand(), bits[i] = 1 + (int)(urand() * 8) / 4.0;
        double budget = 1.5 + urand() * 2;
        double best = INFINITY;
        for (int code = 0; code < 243; code++) { /* 3^5 assignments */
            double k = 0, b = 0;
            for (int i = 0, c = code; i < NI; i++, c /= 3) k += kl[i * NC + c % 3], b += bits[i * NC + c % 3];
            if (b <= budget * NI + 1e-9 && k < best) best = k;
        }
        int choice[NI];
        kvc_status st = kvc_tune_choose(NI, NC, kl, bits, budget, choice);
        if (!isfinite(best)) {
            assert_int_equal(st, KVC_ERR_RANGE);
            assert_non_null(strstr(kvc_last_error(), "below the cheapest"));
            continue;
        }
        assert_int_equal(st, KVC_OK);
        double k = 0, b = 0;
        for (int i = 0; i < NI; i++) k += kl[i * NC + choice[i]], b += bits[i * NC + choice[i]];
        assert_true(b <= budget * NI + 1e-9);
        assert_true(fabs(k - best) < 1e-12);
    }
}

/* The front of eval kl --plot: dominated, tied and non-finite points. */
static void test_pareto(void **state) {
    (void)state;
    const kvc_plot_point p[] = {{"a", 1, 5}, {"b", 2, 3}, {"c", 2, 4}, {"d", 3, 3},
                                {"e", 4, 1}, {"f", NAN, 0}, {"g", 1, 5}, {"h", 0.5, INFINITY}};
    const unsigned char want[] = {1, 1, 0, 0, 1, 0, 1, 0}; /* g ties a: both stay */
    unsigned char front[8];
    kvc_plot_pareto(p, 8, front);
    assert_memory_equal(front, want, sizeof want);
}

typedef struct saved {
    float *k, *v;
    int n, kvd;
} saved;

static void observe(void *user, int layer, int pos0, int n, const float *k, const float *v) {
    saved *s = user;
    for (int i = 0; i < n && pos0 + i < s->n; i++) {
        size_t off = ((size_t)layer * s->n + pos0 + i) * s->kvd;
        memcpy(s->k + off, k + (size_t)i * s->kvd, sizeof(float) * s->kvd);
        memcpy(s->v + off, v + (size_t)i * s->kvd, sizeof(float) * s->kvd);
    }
}

typedef struct fixture {
    kvc_model *m;
    kvc_model_info mi;
    int32_t *tok;
    int n_tok;
} fixture;

static int setup(void **state) {
    if (access(KVC_MODEL_PATH, R_OK) != 0) {
        *state = NULL;
        return 0;
    }
    fixture *f = calloc(1, sizeof *f);
    char *text;
    size_t len;
    if (kvc_model_load(KVC_MODEL_PATH, &f->m) != KVC_OK ||
        kvc_eval_read_file(KVC_SOURCE_DIR "/data/alice.txt", 1 << 20, &text, &len) != KVC_OK)
        return -1;
    kvc_model_info_get(f->m, &f->mi);
    int st = kvc_tokenize_all(f->m, text, 4000, &f->tok, &f->n_tok) != KVC_OK;
    free(text);
    *state = f;
    return st || f->n_tok < NCTX + NCONT + 30 ? -1 : 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    if (!f) return 0;
    kvc_model_free(f->m);
    free(f->tok);
    free(f);
    return 0;
}

static kvc_ctx *make_ctx(const fixture *f, const char *spec) {
    kvc_ctx_params cp = {.n_ctx = NCTX + NCONT + 40, .n_threads = 2, .n_batch = 128, .kv_spec = spec};
    kvc_ctx *c = NULL;
    if (kvc_ctx_create(f->m, &cp, &c) != KVC_OK) fail_msg("%s: %s", spec, kvc_last_error());
    return c;
}

static void test_append_kv_matches_prefill(void **state) {
    fixture *f = *state;
    if (!f) skip();
    const size_t nv = (size_t)f->mi.n_vocab;
    saved s = {NULL, NULL, NCTX, f->mi.n_kv_heads * f->mi.head_dim};
    s.k = malloc(sizeof(float) * f->mi.n_layers * NCTX * s.kvd);
    s.v = malloc(sizeof(float) * f->mi.n_layers * NCTX * s.kvd);
    float *a = malloc(sizeof(float) * nv * NCONT), *b = malloc(sizeof(float) * nv * NCONT);
    kvc_ctx *c = make_ctx(f, "full:f32");
    kvc_ctx_set_kv_observer(c, observe, &s);
    assert_int_equal(kvc_ctx_prefill(c, f->tok, NCTX, NULL), KVC_OK);
    assert_int_equal(kvc_ctx_prefill_all(c, f->tok + NCTX, NCONT, a), KVC_OK);
    kvc_ctx_free(c);
    c = make_ctx(f, "full:f32");
    assert_int_equal(kvc_ctx_append_kv(c, f->tok, NCTX, s.k, s.v), KVC_OK);
    assert_int_equal(kvc_ctx_pos(c), NCTX);
    assert_int_equal(kvc_ctx_prefill_all(c, f->tok + NCTX, NCONT, b), KVC_OK);
    double mx = 0;
    for (size_t i = 0; i < nv * NCONT; i++) mx = fmax(mx, fabs((double)a[i] - b[i]));
    if (mx > 1e-3) fail_msg("append_kv then a chunk: max |dlogit| %g against the prefill", mx);
    int32_t bad = -1;
    assert_int_equal(kvc_ctx_append_kv(c, &bad, 1, s.k, s.v), KVC_ERR_ARG);
    kvc_ctx_free(c);
    free(s.k), free(s.v), free(a), free(b);
}

/* Prefill, then decode steps: all logits into out [(1 + steps) * nv]. */
static void run(const fixture *f, const char *spec, float *out, int steps) {
    const size_t nv = (size_t)f->mi.n_vocab;
    kvc_ctx *c = make_ctx(f, spec);
    assert_int_equal(kvc_ctx_prefill(c, f->tok, NCTX, out), KVC_OK);
    for (int i = 0; i < steps; i++)
        assert_int_equal(kvc_ctx_decode(c, f->tok[NCTX + i], out + (i + 1) * nv), KVC_OK);
    kvc_ctx_free(c);
}

static void write_profile(const kvc_tuned_profile *p, const char *path) {
    if (kvc_tuned_profile_save(p, path) != KVC_OK) fail_msg("%s", kvc_last_error());
}

static void test_uniform_equals_kivi(void **state) {
    fixture *f = *state;
    if (!f) skip();
    enum { STEPS = 12 };
    const size_t nv = (size_t)f->mi.n_vocab, n = nv * (STEPS + 1);
    float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
    static const struct {
        kvc_tuned_codec c;
        const char *kivi;
    } cases[] = {{{2, 32}, "kivi:bits=2"}, {{4, 128}, "kivi:bits=4,group=128"}, {{3, 16}, "kivi:bits=3,group=16"}};
    char path[] = "/tmp/kvcomp-test-tune-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char spec[128];
    snprintf(spec, sizeof spec, "tuned:profile=%s", path);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kvc_tuned_profile *p;
        assert_int_equal(kvc_tuned_profile_uniform(f->mi.n_layers, cases[i].c, &p), KVC_OK);
        write_profile(p, path);
        kvc_tuned_profile_free(p);
        run(f, cases[i].kivi, a, STEPS);
        run(f, spec, b, STEPS);
        if (memcmp(a, b, sizeof(float) * n) != 0) fail_msg("tuned uniform != %s", cases[i].kivi);
    }
    /* and in the rotated space: the same streams, chunks and rotation */
    {
        char kivi_rot[64], spec_rot[160];
        snprintf(kivi_rot, sizeof kivi_rot, "%s+rot:seed=4", cases[2].kivi);
        snprintf(spec_rot, sizeof spec_rot, "%s+rot:seed=4", spec);
        run(f, kivi_rot, a, STEPS);
        run(f, spec_rot, b, STEPS);
        if (memcmp(a, b, sizeof(float) * n) != 0) fail_msg("tuned uniform+rot != %s", kivi_rot);
    }
    /* a mixed profile: every layer different, K and V apart, dense sides too */
    kvc_tuned_profile *p;
    assert_int_equal(kvc_tuned_profile_uniform(f->mi.n_layers, (kvc_tuned_codec){1, 128}, &p), KVC_OK);
    for (int l = 0; l < f->mi.n_layers; l++) {
        p->layer[l].k = (kvc_tuned_codec){l % 3 == 0 ? 16 : 1 + l % 4, l % 3 == 0 ? 0 : 32 << (l % 3)};
        p->layer[l].v = (kvc_tuned_codec){l % 5 == 0 ? 32 : 1 + (l + 1) % 4, l % 5 == 0 ? 0 : 64};
    }
    write_profile(p, path);
    run(f, spec, b, STEPS);
    for (size_t i = 0; i < n; i++) assert_true(isfinite(b[i]));
    kvc_tuned_profile_free(p);
    /* a profile made for another model */
    assert_int_equal(kvc_tuned_profile_uniform(3, (kvc_tuned_codec){2, 32}, &p), KVC_OK);
    write_profile(p, path);
    kvc_tuned_profile_free(p);
    kvc_ctx_params cp = {.n_ctx = 64, .kv_spec = spec};
    kvc_ctx *c = NULL;
    assert_int_equal(kvc_ctx_create(f->m, &cp, &c), KVC_ERR_ARG);
    char want[64];
    snprintf(want, sizeof want, "has 3 layers, the model has %d", f->mi.n_layers);
    assert_non_null(strstr(kvc_last_error(), want));
    unlink(path);
    free(a), free(b);
}

/* kvc_tune with rot = 1 on a short window: the profile it writes is within
 * the budget, made of the candidates, labelled +rot, and runs with +rot. */
static void test_tune_pass_rot(void **state) {
    fixture *f = *state;
    /* The pass's logic does not depend on the kernels (the other tests check
     * them per ISA), and it runs the model ~120 times: once, in the variant
     * the CPU picks by default, not in the forced scalar/AVX2 ones. */
    if (!f || kvc_active_isa() != kvc_cpu_isa()) skip();
    char path[] = "/tmp/kvcomp-test-tune-rot-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    const double budget = 4.0;
    kvc_tune_params p = {.n_ctx = 32, .n_cont = 2, .candidates = "f16,q1g32", .budgets = &budget,
                         .n_budgets = 1, .n_threads = 2, .n_batch = 128, .rot = 1};
    FILE *report = tmpfile();
    assert_non_null(report);
    if (kvc_tune(f->m, f->tok, f->n_tok, &p, path, report, 0) != KVC_OK) fail_msg("%s", kvc_last_error());
    fclose(report);
    kvc_tuned_profile *prof;
    if (kvc_tuned_profile_load(path, &prof) != KVC_OK) fail_msg("%s", kvc_last_error());
    assert_int_equal(prof->n_layers, f->mi.n_layers);
    assert_non_null(strstr(prof->source, "probed +rot"));
    const int dim = f->mi.head_dim;
    double mean_bits = 0;
    int n_q1 = 0;
    for (int l = 0; l < prof->n_layers; l++) {
        const kvc_tuned_codec side[2] = {prof->layer[l].k, prof->layer[l].v};
        for (int s = 0; s < 2; s++) {
            const int is_f16 = side[s].bits == 16 && side[s].group == 0;
            assert_true(is_f16 || (side[s].bits == 1 && side[s].group == 32));
            n_q1 += !is_f16;
            /* tune costs every codec at a steady-state 4096 tokens (tune.c) */
            mean_bits += kvc_tuned_codec_bits(side[s], s, dim, 4096) / (2 * prof->n_layers);
        }
        assert_true(isfinite(prof->layer[l].k_kl) && isfinite(prof->layer[l].v_kl));
    }
    kvc_tuned_profile_free(prof);
    assert_true(mean_bits <= budget + 1e-9);
    assert_true(n_q1 > 0); /* 4 bits is below all-f16, so some sides must be 1-bit */

    char spec[96];
    snprintf(spec, sizeof spec, "tuned:profile=%s+rot", path);
    kvc_ctx *c = make_ctx(f, spec);
    float *logits = malloc(sizeof(float) * f->mi.n_vocab * 8);
    assert_int_equal(kvc_ctx_prefill_all(c, f->tok, 8, logits), KVC_OK);
    for (int i = 0; i < f->mi.n_vocab * 8; i++) assert_true(isfinite(logits[i]));
    free(logits);
    kvc_ctx_free(c);
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_choose_exact),
        cmocka_unit_test(test_pareto),
        cmocka_unit_test(test_append_kv_matches_prefill),
        cmocka_unit_test(test_uniform_equals_kivi),
        cmocka_unit_test(test_tune_pass_rot),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
