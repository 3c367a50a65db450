/* The `sinks` modifier (src/kv/method/sinks.c, the cache's push_tokens and
 * kvc_stream_sink_push): with `+sinks:S` the first S tokens of every stream
 * sit in one dense chunk at the head of the stream, flagged SINK and ALWAYS,
 * hold exactly the appended rows (f16-rounded, as the hot window would), are
 * never compressed, evicted or rebuilt (also under +h2o eviction and +rot),
 * and nothing else in the stream holds a position below S; decode attention
 * equals the reference over what is stored; the spec parser composes it and
 * refuses it where it cannot go.
 *
 * Tolerances: stored rows equal the f16 rounding of the input (exact);
 * attention 2e-5 · (1 + |ref|) for the float codecs (test_cache.c's); for
 * packkv the relative L1 error of the whole output <= 1e-3, as test_packkv.c
 * allows (its AVX-512 p·v rounds the weights to int16). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/f16.h"
#include "base/status.h"
#include "kv/attend.h"
#include "kv/cache_impl.h"
#include "kv/method/method.h"
#include "kv/synth.h"
#include "expect_close.h"

enum { NL = 2, NH = 4, NKV = 2, D = 64, G = NH / NKV, P = 300, DEC = 40, N = P + DEC };

static kvc_cache *make(const char *spec) {
    kvc_cache_shape sh = {.n_layers = NL, .n_heads = NH, .n_kv_heads = NKV, .head_dim = D, .max_tokens = N};
    kvc_cache *c = NULL;
    if (kvc_cache_create(&sh, spec, NULL, &c) != KVC_OK) fail_msg("%s: %s", spec, kvc_last_error());
    return c;
}

/* The sink chunk of every stream holds rows 0..S-1 as given (mapped by the
 * stream's space, f16-rounded); no other chunk and not the hot window holds a
 * position below S; no sink token is dead. */
static void check_sinks(kvc_cache *c, int S, const float *k, const float *v, const char *spec) {
    for (int l = 0; l < NL; l++)
        for (int h = 0; h < NKV; h++) {
            kvc_stream *s = kvc_cache_stream(c, l, h);
            assert_true(s->n_chunks > 1);
            kvc_chunk *sc = s->chunks[0];
            if (!(sc->flags & KVC_CHUNK_SINK) || !(sc->flags & KVC_CHUNK_ALWAYS) || sc->n != S || sc->pos0 != 0 ||
                sc->n_dead != 0 || sc->xf)
                fail_msg("%s: layer %d head %d: sink chunk flags %u, %d tokens, %d dead", spec, l, h, sc->flags,
                         sc->n, sc->n_dead);
            float dk[64 * D], dv[64 * D], want[2][D];
            assert_int_equal(kvc_chunk_decode(sc, 0, S, dk, dv, D), KVC_OK);
            for (int i = 0; i < S; i++) {
                const float *kr = k + ((size_t)i * NKV + h) * D, *vr = v + ((size_t)i * NKV + h) * D;
                if (s->xf) {
                    s->xf->ops->apply(s->xf, 0, kr, 1, D, want[0], D);
                    s->xf->ops->apply(s->xf, 1, vr, 1, D, want[1], D);
                } else {
                    memcpy(want[0], kr, sizeof want[0]);
                    memcpy(want[1], vr, sizeof want[1]);
                }
                for (int j = 0; j < D; j++) {
                    float ek = kvc_f16_to_f32(kvc_f32_to_f16(want[0][j])), ev = kvc_f16_to_f32(kvc_f32_to_f16(want[1][j]));
                    if (dk[i * D + j] != ek || dv[i * D + j] != ev)
                        fail_msg("%s: sink token %d channel %d: %g %g vs %g %g", spec, i, j, dk[i * D + j],
                                 dv[i * D + j], ek, ev);
                }
            }
            for (int ci = 1; ci < s->n_chunks; ci++) {
                const kvc_chunk *ch = s->chunks[ci];
                assert_false(ch->flags & KVC_CHUNK_SINK);
                for (int i = 0; i < ch->n; i++)
                    if (kvc_chunk_pos(ch, i) < S) fail_msg("%s: chunk %d holds position %lld", spec, ci,
                                                           (long long)kvc_chunk_pos(ch, i));
            }
            assert_true(s->hot->n == 0 || s->hot->pos0 >= S);
        }
}

/* Prefill in chunks of 100 with queries (so h2o and mustafar's output-aware
 * score see them), then decode steps with attention; after both, the sinks
 * are intact and attention matches the reference over the stored rows. */
static void run(const char *spec, int S) {
    kvc_cache *c = make(spec);
    float *k = malloc(sizeof(float) * N * NKV * D), *v = malloc(sizeof(float) * N * NKV * D);
    float *q = malloc(sizeof(float) * N * NH * D), *out = malloc(sizeof(float) * 100 * NH * D);
    kvc_synth_kv(NKV, D, 0, N, 17, k, v);
    rng = 5;
    for (size_t i = 0; i < (size_t)N * NH * D; i++) q[i] = frand();
    for (int l = 0; l < NL; l++) {
        for (int t = 0; t < P; t += 100)
            assert_int_equal(kvc_cache_prefill(c, l, 100, q + (size_t)t * NH * D, k + (size_t)t * NKV * D,
                                               v + (size_t)t * NKV * D, out), KVC_OK);
        for (int t = P; t < N; t++) {
            assert_int_equal(kvc_cache_append(c, l, k + (size_t)t * NKV * D, v + (size_t)t * NKV * D), KVC_OK);
            assert_int_equal(kvc_cache_attend(c, l, q + (size_t)t * NH * D, out), KVC_OK);
        }
    }
    check_sinks(c, S, k, v, spec);
    /* one more decode step against the reference over the stored rows */
    const float *qq = q + (size_t)(N - 1) * NH * D;
    assert_int_equal(kvc_cache_attend(c, 0, qq, out), KVC_OK);
    for (int h = 0; h < NKV; h++) {
        kvc_stream *s = kvc_cache_stream(c, 0, h);
        float ref[G * D];
        assert_int_equal(kvc_attend_reference(s, qq + h * G * D, G, ref), KVC_OK);
        if (strncmp(spec, "packkv", 6) == 0) {
            double e = 0, m = 0;
            for (int i = 0; i < G * D; i++) e += fabs((double)out[h * G * D + i] - ref[i]), m += fabs(ref[i]);
            if (!(e <= 1e-3 * m)) fail_msg("%s: relative L1 error %g", spec, e / m);
        } else {
            expect_close(out + h * G * D, ref, (size_t)G * D, 2e-5, spec);
        }
    }
    free(k); free(v); free(q); free(out);
    kvc_cache_free(c);
}

static void test_sinks_kept(void **state) {
    (void)state;
    run("kivi:bits=3,group=8+sinks:4", 4); /* float kernels: exact against the reference */
    run("kivi:bits=3,group=8+sinks:16+rot", 16);
    run("mustafar:k=0.5,v=0.5,outaware=1+sinks:16", 16);
    run("think:0.5+sinks:4", 4);
    run("packkv+sinks:4", 4);
    run("mustafar:k=0.5,v=0.5+h2o:budget=0.2,recent=0.1+sinks:16", 16); /* evicts most tokens */
    run("packkv+h2o:budget=0.2,recent=0.1+sinks:4+rot", 4);
    /* every token attended, so the reference over all stored rows applies;
     * prompt segments close (rotation, packing) during prefill, the last,
     * shorter one at the first decode token */
    run("mosaic:tokens=1,async=0,segment=128+sinks:16", 16);
    run("mosaic:tokens=1,segment=64+sinks:4", 4);
}

/* Decode-only filling (one token at a time), S larger than a prefill chunk of
 * the test above would make it: the sink chunk grows token by token. */
static void test_sinks_decode_only(void **state) {
    (void)state;
    kvc_cache *c = make("mustafar:k=0.5,v=0.5+h2o:budget=0.3,recent=0.1+sinks:40");
    float *k = malloc(sizeof(float) * N * NKV * D), *v = malloc(sizeof(float) * N * NKV * D);
    float q[NH * D], out[NH * D];
    kvc_synth_kv(NKV, D, 0, N, 23, k, v);
    rng = 9;
    for (int i = 0; i < NH * D; i++) q[i] = frand();
    for (int t = 0; t < N; t++)
        for (int l = 0; l < NL; l++) {
            assert_int_equal(kvc_cache_append(c, l, k + (size_t)t * NKV * D, v + (size_t)t * NKV * D), KVC_OK);
            assert_int_equal(kvc_cache_attend(c, l, q, out), KVC_OK);
        }
    check_sinks(c, 40, k, v, "decode-only +sinks:40");
    free(k);
    free(v);
    kvc_cache_free(c);
}

static void expect_refused(const char *spec, const char *needle) {
    kvc_spec s;
    if (kvc_spec_parse(spec, &s) != KVC_ERR_ARG) fail_msg("'%s' accepted", spec);
    if (!strstr(kvc_last_error(), needle)) fail_msg("'%s': message '%s' lacks '%s'", spec, kvc_last_error(), needle);
}

static void test_spec(void **state) {
    (void)state;
    kvc_spec s;
    assert_int_equal(kvc_spec_parse("kivi:bits=2+sinks:16+rot", &s), KVC_OK);
    char buf[256];
    kvc_spec_format(&s, buf, sizeof buf);
    assert_non_null(strstr(buf, "+sinks:n=16+rot:seed=1"));
    kvc_spec_free(&s);
    assert_int_equal(kvc_spec_parse("kivi+sinks", &s), KVC_OK); /* default n */
    kvc_spec_free(&s);
    expect_refused("sinks:4", "can only follow '+'");
    expect_refused("kivi+sinks:-1", "out of range");
    expect_refused("kivi+sinks:n=x", "not an integer");
    expect_refused("streaming+sinks:4", "cannot be stacked on streaming");
    expect_refused("full:f16+sinks:4", "cannot be stacked on full");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sinks_kept),
        cmocka_unit_test(test_sinks_decode_only),
        cmocka_unit_test(test_spec),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
