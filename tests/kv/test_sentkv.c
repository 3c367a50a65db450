/* SentKV's parts and the sentkv and streaming methods:
 *  - the splitter equals a direct transcription of Algorithm 2 run on the
 *    whole text, whatever batches the tokens arrive in; it covers every token
 *    exactly once, keeps sentences within L ± Δ while boundaries exist (L
 *    exactly without them), and is deterministic; the ablation modes do what
 *    they say (length: L tokens; punct: ends after every boundary, at most cap);
 *  - boundary weights of token texts (stops, newlines, merged tokens, CJK);
 *  - sentkv: sealed chunks are whole sentences as the splitter drew them,
 *    with one profile per sentence bounding every key, the sinks in an
 *    always-attended chunk; with U = 1 attention equals the plain reference;
 *    with U = 0.1 a step reads at most U of the context (plus one sentence
 *    of slack is not needed: whole sentences never overshoot) and the
 *    read / reuse statistics are reported;
 *  - streaming: only the sinks and the recent window stay live, evicted
 *    chunks are freed, attention equals the reference over what stays;
 *  - the far tier: sealed sentences in a file, attention as with them in RAM,
 *    and a file truncated or altered under the running cache is reported;
 *    with the near buffer (reuse) attention is bit for bit what it is when
 *    every step gathers its selection afresh from the file, and every byte a
 *    step reads comes either from the file or from the near buffer;
 *  - the near buffer in RAM: attention as from the chunks, only newly
 *    selected sentences copied, its bytes counted.
 *
 * Tolerance of the attention comparisons: |Δ| <= 3e-5 * (1 + |ref|). */
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

#include "expect_close.h"

#include "base/threadpool.h"
#include "kv/attend.h"
#include "kv/cache_impl.h"
#include "kv/method/sentence_split.h"
#include "kv/method/sentence_vocab.h"
#include "kv/select/minmax.h"
#include "kv/synth.h"

static uint64_t urng = 31337;
static uint32_t urand(void) {
    urng = urng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(urng >> 33);
}

/* Algorithm 2 as printed (ends after the boundary token, see sentence_split.h). */
static int reference_split(const float *w, int n, int L, int D, int64_t *ends) {
    int m = 0, cur = 0;
    while (cur < n) {
        int ideal = cur + L < n ? cur + L : n;
        int ws = ideal - D > cur + 1 ? ideal - D : cur + 1;
        int we = ideal + D < n ? ideal + D : n;
        int best = -1;
        float bs = 0;
        for (int e = ws; e <= we; e++) {
            if (w[e - 1] <= 0) continue;
            float sc = 0.7f * w[e - 1] + 0.3f * (1.0f - (float)abs(ideal - e) / (float)D); /* as the code rounds */
            if (best < 0 || sc > bs || (sc == bs && abs(e - ideal) < abs(best - ideal))) best = e, bs = sc;
        }
        int e = best >= 0 ? best : ideal;
        ends[m++] = e;
        cur = e;
    }
    return m;
}

static void make_weights(float *w, int n, int density) {
    static const float levels[] = {0.3f, 0.4f, 0.5f, 0.6f, 0.8f, 1.0f};
    for (int i = 0; i < n; i++) w[i] = (int)(urand() % 100) < density ? levels[urand() % 6] : 0.0f;
}

static void split_batches(kvc_splitter *sp, const float *w, int n) {
    for (int i = 0; i < n;) {
        int b = 1 + (int)(urand() % 50);
        if (b > n - i) b = n - i;
        assert_int_equal(kvc_split_push(sp, w + i, b), KVC_OK);
        i += b;
    }
    assert_int_equal(kvc_split_finish(sp), KVC_OK);
}

static void test_split_matches_algorithm2(void **state) {
    (void)state;
    enum { N = 5000 };
    float *w = malloc(sizeof(float) * N);
    int64_t *ref = malloc(sizeof(int64_t) * N);
    const int Ls[] = {14, 14, 5, 30, 1}, Ds[] = {8, 1, 5, 8, 1};
    for (int density = 0; density <= 60; density += 15)
        for (int c = 0; c < 5; c++) {
            make_weights(w, N, density);
            int L = Ls[c], D = Ds[c];
            int m = reference_split(w, N, L, D, ref);
            for (int rep = 0; rep < 2; rep++) { /* batches differ between reps: same split */
                kvc_splitter sp;
                assert_int_equal(kvc_split_init(&sp, L, D, 64, KVC_SPLIT_WEIGHTED), KVC_OK);
                split_batches(&sp, w, N);
                assert_int_equal(sp.n_ends, m);
                for (int i = 0; i < m; i++) assert_int_equal(sp.ends[i], ref[i]);
                /* every token once, in order; lengths within L ± Δ but the last */
                int64_t prev = 0;
                for (int i = 0; i < m; i++) {
                    int64_t len = sp.ends[i] - prev;
                    assert_true(len >= 1);
                    if (prev + L + D <= N) { /* decided before the end of the text */
                        assert_true(len >= (L - D > 1 ? L - D : 1) && len <= L + D);
                        if (density == 0) assert_int_equal(len, L);
                    }
                    prev = sp.ends[i];
                }
                assert_int_equal(prev, N);
                kvc_split_free(&sp);
            }
        }
    free(w);
    free(ref);
}

static void test_split_modes(void **state) {
    (void)state;
    enum { N = 3000 };
    float *w = malloc(sizeof(float) * N);
    make_weights(w, N, 10);
    kvc_splitter sp;
    assert_int_equal(kvc_split_init(&sp, 14, 8, 64, KVC_SPLIT_LENGTH), KVC_OK);
    split_batches(&sp, w, N);
    for (int64_t i = 0; i < sp.n_ends; i++) assert_int_equal(sp.ends[i], i + 1 < sp.n_ends ? 14 * (i + 1) : N);
    kvc_split_free(&sp);
    assert_int_equal(kvc_split_init(&sp, 14, 8, 20, KVC_SPLIT_PUNCT), KVC_OK);
    split_batches(&sp, w, N);
    int64_t prev = 0;
    for (int64_t i = 0; i < sp.n_ends; i++) {
        int64_t e = sp.ends[i];
        for (int64_t t = prev; t < e - 1; t++) assert_true(w[t] == 0.0f); /* no boundary inside */
        assert_true(w[e - 1] > 0.0f || e - prev == 20 || e == N);
        prev = e;
    }
    assert_int_equal(prev, N);
    kvc_split_free(&sp);
    /* flat: weights do not matter, only presence: same as weighted with all weights 1 */
    float *w1 = malloc(sizeof(float) * N);
    int64_t *ref = malloc(sizeof(int64_t) * N);
    for (int i = 0; i < N; i++) w1[i] = w[i] > 0 ? 1.0f : 0.0f;
    int m = reference_split(w1, N, 14, 8, ref);
    assert_int_equal(kvc_split_init(&sp, 14, 8, 64, KVC_SPLIT_FLAT), KVC_OK);
    split_batches(&sp, w, N);
    assert_int_equal(sp.n_ends, m);
    for (int i = 0; i < m; i++) assert_int_equal(sp.ends[i], ref[i]);
    kvc_split_free(&sp);
    assert_int_equal(kvc_split_init(&sp, 0, 8, 64, KVC_SPLIT_WEIGHTED), KVC_ERR_ARG);
    assert_int_equal(kvc_split_init(&sp, 14, 0, 64, KVC_SPLIT_WEIGHTED), KVC_ERR_ARG);
    free(w), free(w1), free(ref);
}

static void test_boundary_weights(void **state) {
    (void)state;
    struct { const char *t; float w; } cases[] = {
        {".", 1.0f}, {". ", 1.0f}, {" .", 1.0f}, {"?", 1.0f}, {"!\"", 1.0f}, {".)", 1.0f},
        {"\n", 0.8f}, {"\n\n", 1.0f}, {".\n", 1.0f}, {";", 0.6f}, {":", 0.5f}, {" ,", 0.3f},
        {")", 0.4f}, {"\xe2\x80\x9d", 0.4f}, {"\xe3\x80\x82", 1.0f}, {"\xe2\x80\xa6", 1.0f},
        {"Hello", 0.0f}, {" the", 0.0f}, {"3.", 0.0f}, {"", 0.0f}, {" ", 0.0f}, {"\xe3\x80", 0.0f},
        {"-", 0.0f}, {"\xff.", 0.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float w = kvc_sentence_weight(cases[i].t, (int)strlen(cases[i].t));
        if (w != cases[i].w) fail_msg("\"%s\": weight %g, want %g", cases[i].t, w, cases[i].w);
    }
}

/* ---- the methods -------------------------------------------------------------- */

enum { NL = 2, NH = 6, NKV = 2, GQ = 3, HD = 32, NTOK = 1400, NPRE = 1000 };

/* A fake vocabulary: token ids map to words, and every 9th-ish id to punctuation. */
static int fake_text(void *ctx, int32_t tok, char *buf, int cap) {
    (void)ctx;
    const char *s = tok % 11 == 0 ? ". " : tok % 13 == 0 ? "\n" : tok % 17 == 0 ? "," : " word";
    int n = (int)strlen(s);
    if (n <= cap) memcpy(buf, s, (size_t)n);
    return n;
}

static void make_q(float *q, const float *k, int t) {
    for (int h = 0; h < NKV; h++)
        for (int g = 0; g < GQ; g++)
            for (int i = 0; i < HD; i++)
                q[(h * GQ + g) * HD + i] = k[((size_t)t * NKV + h) * HD + i] * (1.0f + 0.02f * (float)(urand() % 25));
}

typedef struct run_out {
    kvc_cache_stats st;
} run_out;

/* Prefill in chunks of 250 with token ids observed, decode the rest; compare
 * with the reference when asked; check the sentence layout at the end. */
static void run(const char *spec, int compare, double max_read, run_out *ro) {
    kvc_codecs_init();
    kvc_cache_shape shape = {.n_layers = NL, .n_heads = NH, .n_kv_heads = NKV, .head_dim = HD, .max_tokens = NTOK};
    kvc_cache *c;
    assert_int_equal(kvc_cache_create(&shape, spec, NULL, &c), KVC_OK);
    kvc_cache_set_token_text(c, fake_text, NULL);
    size_t row = (size_t)NKV * HD;
    float *k = malloc(sizeof(float) * NTOK * row), *v = malloc(sizeof(float) * NTOK * row);
    float *q = malloc(sizeof(float) * 250 * NH * HD), *out = malloc(sizeof(float) * 250 * NH * HD);
    int32_t *tok = malloc(sizeof(int32_t) * NTOK);
    float ref[GQ * HD];
    kvc_synth_kv(NKV, HD, 0, NTOK, 3, k, v);
    for (int t = 0; t < NTOK; t++) tok[t] = (int32_t)(urand() % 1000);
    for (int t0 = 0; t0 < NPRE; t0 += 250) {
        kvc_cache_observe_tokens(c, tok + t0, 250);
        for (int l = 0; l < NL; l++) {
            for (int i = 0; i < 250; i++) make_q(q + (size_t)i * NH * HD, k, t0 + i);
            assert_int_equal(kvc_cache_prefill(c, l, 250, q, k + t0 * row, v + t0 * row, out), KVC_OK);
        }
    }
    for (int t = NPRE; t < NTOK; t++) {
        kvc_cache_observe_tokens(c, tok + t, 1);
        for (int l = 0; l < NL; l++) {
            assert_int_equal(kvc_cache_append(c, l, k + t * row, v + t * row), KVC_OK);
            make_q(q, k, (int)(urand() % (uint32_t)t));
            assert_int_equal(kvc_cache_attend(c, l, q, out), KVC_OK);
            for (int h = 0; h < NKV; h++) {
                kvc_stream *s = kvc_cache_stream(c, l, h);
                if (compare && t % 23 == 0) {
                    assert_int_equal(kvc_attend_reference(s, q + h * GQ * HD, GQ, ref), KVC_OK);
                    expect_close(out + h * GQ * HD, ref, GQ * HD, 3e-5, spec);
                }
            }
        }
    }
    kvc_cache_stats_get(c, &ro->st);
    if (!(ro->st.read_fraction <= max_read + 1.0 / NPRE)) /* ceil(U * context) per step */
        fail_msg("%s: read %g > %g", spec, ro->st.read_fraction, max_read);
    assert_true(ro->st.read_fraction > 0.0);
    assert_true(ro->st.reuse_rate >= 0.0 && ro->st.reuse_rate <= 1.0);
    kvc_cache_free(c);
    free(k), free(v), free(q), free(out), free(tok);
}

/* The splitter's view of the same tokens, for the layout checks. */
static void check_layout(const char *spec, int L, int D) {
    kvc_codecs_init();
    kvc_cache_shape shape = {.n_layers = 1, .n_heads = NH, .n_kv_heads = NKV, .head_dim = HD, .max_tokens = NTOK};
    kvc_cache *c;
    assert_int_equal(kvc_cache_create(&shape, spec, NULL, &c), KVC_OK);
    kvc_cache_set_token_text(c, fake_text, NULL);
    size_t row = (size_t)NKV * HD;
    float *k = malloc(sizeof(float) * NTOK * row), *v = malloc(sizeof(float) * NTOK * row), w[NTOK];
    int32_t tok[NTOK];
    kvc_synth_kv(NKV, HD, 0, NTOK, 4, k, v);
    char buf[16];
    for (int t = 0; t < NTOK; t++) {
        tok[t] = (int32_t)(urand() % 1000);
        w[t] = kvc_sentence_weight(buf, fake_text(NULL, tok[t], buf, 16));
    }
    kvc_cache_observe_tokens(c, tok, NTOK);
    assert_int_equal(kvc_cache_load(c, 0, NTOK, k, v), KVC_OK);
    int64_t ends[NTOK];
    int m = reference_split(w, NTOK, L, D, ends);
    for (int h = 0; h < NKV; h++) {
        kvc_stream *s = kvc_cache_stream(c, 0, h);
        int e = 0;
        int64_t p = 0;
        for (int ci = 0; ci < s->n_chunks; ci++) {
            const kvc_chunk *ch = s->chunks[ci];
            assert_int_equal(ch->pos0, p);
            if (ci == 0) { /* the sinks' sentence */
                assert_null(ch->sel.ops);
                assert_true(ch->flags & KVC_CHUNK_ALWAYS);
            } else {
                assert_ptr_equal(ch->sel.ops, &kvc_selector_minmax);
                int nu = kvc_selector_minmax.n_units(ch->sel.index);
                for (int u = 0; u < nu; u++) {
                    kvc_range r = kvc_selector_minmax.unit(ch->sel.index, u);
                    while (e < m && ends[e] <= p + r.begin) e++;
                    assert_int_equal(p + r.end, ends[e]); /* a unit = one sentence of the splitter */
                }
                assert_int_equal(kvc_minmax_tokens(ch->sel.index), ch->n);
            }
            p += ch->n;
        }
        assert_int_equal(p + s->hot->n, NTOK);
        assert_true(s->hot->n >= 32); /* the recent window stays hot */
    }
    kvc_cache_free(c);
    free(k), free(v);
}

static void test_sentkv_layout(void **state) {
    (void)state;
    check_layout("sentkv:0.1", 14, 8);
    check_layout("sentkv:0.1,L=20,delta=4,block=64", 20, 4);
    check_layout("sentkv:0.1,profile=f16", 14, 8); /* f16 profiles: the same units */
    check_layout("sentkv:0.1,profile=f16,heads=max", 14, 8);
}

static void test_sentkv_all_is_full(void **state) {
    (void)state;
    run_out ro;
    run("sentkv:usage=1", 1, 1.0, &ro);
    assert_true(ro.st.read_fraction > 0.999);
    run("sentkv:usage=1,profile=f16", 1, 1.0, &ro);
    assert_true(ro.st.read_fraction > 0.999);
}

static void test_sentkv_usage(void **state) {
    (void)state;
    run_out ro;
    run("sentkv:usage=0.1", 0, 0.1, &ro);
    assert_true(ro.st.reuse_rate > 0.0);
    run("sentkv:usage=0.2,split=length", 0, 0.2, &ro);
    run("sentkv:usage=0.2,split=punct,cap=30", 0, 0.2, &ro);
    run("sentkv:usage=0.1,profile=f16", 0, 0.1, &ro);
    run("sentkv:usage=0.1,heads=max", 0, 0.1, &ro); /* sentences scored by the best head's bound */
    run("sentkv:usage=0.2,profile=f16,heads=max", 0, 0.2, &ro);
}

/* Streaming: live tokens = sinks + the recent window (the hot window may hold
 * up to block - 1 older tokens), attention equals the reference over them,
 * and the memory of evicted chunks is gone. */
static void test_streaming(void **state) {
    (void)state;
    run_out ro;
    run("streaming:budget=0.2,sinks=4,block=16", 1, 0.2 + 32.0 / NPRE, &ro); /* + dead tokens of two chunks */
    kvc_codecs_init();
    kvc_cache_shape shape = {.n_layers = 1, .n_heads = NH, .n_kv_heads = NKV, .head_dim = HD, .max_tokens = NTOK};
    kvc_cache *c;
    assert_int_equal(kvc_cache_create(&shape, "streaming:budget=100,sinks=4,block=16", NULL, &c), KVC_OK);
    size_t row = (size_t)NKV * HD;
    float *k = malloc(sizeof(float) * NTOK * row), *v = malloc(sizeof(float) * NTOK * row), q[NH * HD], out[NH * HD];
    kvc_synth_kv(NKV, HD, 0, NTOK, 6, k, v);
    assert_int_equal(kvc_cache_load(c, 0, 1000, k, v), KVC_OK);
    make_q(q, k, 10);
    assert_int_equal(kvc_cache_attend(c, 0, q, out), KVC_OK);
    for (int h = 0; h < NKV; h++) {
        kvc_stream *s = kvc_cache_stream(c, 0, h);
        for (int64_t p = 0; p < 1000; p++) {
            int live = 0, found = p >= s->n_pos - s->hot->n;
            for (int ci = 0; ci < s->n_chunks && !found; ci++) {
                const kvc_chunk *ch = s->chunks[ci];
                if (p >= ch->pos0 && p < ch->pos0 + ch->n) found = 1, live = !kvc_chunk_is_dead(ch, (int)(p - ch->pos0));
            }
            if (p >= s->n_pos - s->hot->n) live = 1;
            assert_int_equal(live, p < 4 || p >= 1000 - 96);
        }
        assert_true(s->n_chunks <= 1 + 96 / 16 + 1); /* sinks' chunk, the window's, one at the edge */
    }
    kvc_cache_free(c);
    free(k), free(v);
}

/* The far tier: sealed sentences in a file. With U = 1 attention equals the
 * reference; RAM holds no sealed payload; a truncated or altered file is
 * reported as the attention's error (KVC_ERR_FORMAT), never read. */
static void test_far_tier(void **state) {
    (void)state;
    kvc_codecs_init();
    char path[] = "/tmp/kvc_test_far_XXXXXX", spec[128];
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    snprintf(spec, sizeof spec, "sentkv:usage=1,far=%s,near=0", path); /* every step reads the file */
    kvc_cache_shape shape = {.n_layers = 1, .n_heads = NH, .n_kv_heads = NKV, .head_dim = HD, .max_tokens = NTOK};
    kvc_cache *c;
    assert_int_equal(kvc_cache_create(&shape, spec, NULL, &c), KVC_OK);
    size_t row = (size_t)NKV * HD;
    float *k = malloc(sizeof(float) * NTOK * row), *v = malloc(sizeof(float) * NTOK * row), q[NH * HD], out[NH * HD];
    float ref[GQ * HD];
    kvc_synth_kv(NKV, HD, 0, NTOK, 8, k, v);
    assert_int_equal(kvc_cache_load(c, 0, 900, k, v), KVC_OK);
    for (int t = 900; t < 960; t++) {
        assert_int_equal(kvc_cache_append(c, 0, k + t * row, v + t * row), KVC_OK);
        make_q(q, k, (int)(urand() % (uint32_t)t));
        assert_int_equal(kvc_cache_attend(c, 0, q, out), KVC_OK);
        for (int h = 0; h < NKV; h++) {
            kvc_stream *s = kvc_cache_stream(c, 0, h);
            assert_int_equal(kvc_attend_reference(s, q + h * GQ * HD, GQ, ref), KVC_OK);
            expect_close(out + h * GQ * HD, ref, GQ * HD, 3e-5, "far tier");
        }
    }
    kvc_cache_stats st;
    kvc_cache_stats_get(c, &st);
    assert_true(st.far_bytes > (uint64_t)850 * row * 2 * 2); /* sealed K and V in the file */
    assert_true(st.far_read_bytes > 0);
    assert_true(st.payload_bytes < (uint64_t)64 * row * 2 * 2); /* RAM: the sinks' chunk only */
    /* altered: one byte of the middle of the file */
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, (long)(st.far_bytes / 2), SEEK_SET), 0);
    int b = fgetc(f);
    assert_int_equal(fseek(f, (long)(st.far_bytes / 2), SEEK_SET), 0);
    fputc(b ^ 0x10, f);
    fclose(f);
    assert_int_equal(kvc_cache_attend(c, 0, q, out), KVC_ERR_FORMAT);
    assert_non_null(strstr(kvc_last_error(), "checksum"));
    /* truncated */
    assert_int_equal(truncate(path, (off_t)(st.far_bytes / 3)), 0);
    assert_int_equal(kvc_cache_attend(c, 0, q, out), KVC_ERR_FORMAT);
    assert_non_null(strstr(kvc_last_error(), "truncated"));
    kvc_cache_free(c);
    unlink(path);
    assert_int_equal(kvc_cache_create(&shape, "sentkv:far=/nonexistent-dir/x", NULL, &c), KVC_ERR_IO);
    free(k), free(v);
}

/* Two caches of the same spec shape fed the same K/V (900 tokens, then 60
 * decode steps whose queries drift: each aims at one token for 6 steps, so
 * consecutive selections overlap); their outputs compared at every step,
 * bit for bit when `exact`, else within float rounding with a's attention
 * split over 3 parts every other step. */
static void decode_pair(kvc_cache *a, kvc_cache *b, uint64_t seed, int exact) {
    size_t row = (size_t)NKV * HD;
    float *k = malloc(sizeof(float) * NTOK * row), *v = malloc(sizeof(float) * NTOK * row);
    float q[NH * HD], oa[NH * HD], ob[NH * HD];
    kvc_synth_kv(NKV, HD, 0, NTOK, seed, k, v);
    assert_int_equal(kvc_cache_load(a, 0, 900, k, v), KVC_OK);
    assert_int_equal(kvc_cache_load(b, 0, 900, k, v), KVC_OK);
    for (int t = 900; t < 960; t++) {
        assert_int_equal(kvc_cache_append(a, 0, k + t * row, v + t * row), KVC_OK);
        assert_int_equal(kvc_cache_append(b, 0, k + t * row, v + t * row), KVC_OK);
        make_q(q, k, 50 + (t - 900) / 6 * 83);
        assert_int_equal(kvc_cache_attend_opts(a, 0, q, oa, exact || t % 2 == 0 ? 0 : 3), KVC_OK);
        assert_int_equal(kvc_cache_attend(b, 0, q, ob), KVC_OK);
        if (exact) assert_memory_equal(oa, ob, sizeof oa);
        else expect_close(oa, ob, NH * HD, 3e-5, "near buffer against the chunks");
    }
    free(k), free(v);
}

/* The near buffer of the far tier: two caches (decode_pair), one reusing
 * the previous step's selected blocks (near=1), one reading every selected
 * block from its file (near=0). The outputs are identical (the same f16 rows
 * reach the same kernels); the bytes the reusing cache read from its file
 * plus those its near buffer served equal the bytes the other read; reuse
 * actually happens and saves reads. */
static void test_far_near_reuse(void **state) {
    (void)state;
    kvc_codecs_init();
    char pa[] = "/tmp/kvc_test_near_XXXXXX", pb[] = "/tmp/kvc_test_near_XXXXXX", spec[160];
    int fa = mkstemp(pa), fb = mkstemp(pb);
    assert_true(fa >= 0 && fb >= 0);
    close(fa), close(fb);
    kvc_cache_shape shape = {.n_layers = 1, .n_heads = NH, .n_kv_heads = NKV, .head_dim = HD, .max_tokens = NTOK};
    kvc_cache *a, *b;
    snprintf(spec, sizeof spec, "sentkv:usage=0.2,far=%s,profile=f16", pa); /* far tier with f16 profiles */
    assert_int_equal(kvc_cache_create(&shape, spec, NULL, &a), KVC_OK);
    snprintf(spec, sizeof spec, "sentkv:usage=0.2,far=%s,near=0,profile=f16", pb);
    assert_int_equal(kvc_cache_create(&shape, spec, NULL, &b), KVC_OK);
    decode_pair(a, b, 9, 1);
    kvc_cache_stats sa, sb;
    kvc_cache_stats_get(a, &sa);
    kvc_cache_stats_get(b, &sb);
    assert_true(sa.far_reused_bytes > 0);
    assert_true(sa.far_read_bytes < sb.far_read_bytes);
    assert_true(sa.far_read_bytes + sa.far_reused_bytes == sb.far_read_bytes);
    assert_true(sa.far_near_bytes > 0);
    assert_true(sa.far_near_bytes < sa.far_bytes / 2); /* about the last selection, not the file */
    assert_int_equal(sb.far_reused_bytes, 0);
    assert_int_equal(sb.far_near_bytes, 0);
    assert_true(sa.payload_bytes == sb.payload_bytes + sa.far_near_bytes); /* the near buffer is RAM */
    kvc_cache_free(a);
    kvc_cache_free(b);
    unlink(pa);
    unlink(pb);
}

/* The near buffer in RAM (kv/near.h): two caches (decode_pair), one
 * attending its selection from the near buffer (near=1, the default), one
 * where it lies in the chunks (near=0). The outputs agree within float
 * rounding (the same f16 rows in another order), on one thread and split
 * over parts on 3 threads (which fill the buffer at once); the buffer copies only the sentences a step newly selects,
 * far fewer than the steps attend, and its bytes are counted among the
 * reserved buffers. */
static void test_near_in_ram(void **state) {
    (void)state;
    kvc_codecs_init();
    kvc_cache_shape shape = {.n_layers = 1, .n_heads = NH, .n_kv_heads = NKV, .head_dim = HD, .max_tokens = NTOK};
    kvc_cache *a, *b;
    kvc_pool *pool = NULL; /* a's split steps fill the buffer from 3 threads at once */
    assert_int_equal(kvc_pool_create(3, &pool), KVC_OK);
    /* U = 0.6: the buffer's rows span several work items, so the parts fill it together */
    assert_int_equal(kvc_cache_create(&shape, "sentkv:usage=0.6", pool, &a), KVC_OK);
    assert_int_equal(kvc_cache_create(&shape, "sentkv:usage=0.6,near=0", NULL, &b), KVC_OK);
    decode_pair(a, b, 11, 0);
    kvc_attend_times ta, tb;
    kvc_cache_attend_times(a, &ta);
    kvc_cache_attend_times(b, &tb);
    kvc_cache_stats sa, sb;
    kvc_cache_stats_get(a, &sa);
    kvc_cache_stats_get(b, &sb);
    assert_int_equal(tb.near_copied, 0);
    assert_true(ta.near_copied > 0);
    assert_true(sa.reuse_rate > 0.5);
    /* 60 steps of about 0.6 * 930 selected tokens per KV head: most reused */
    assert_true(ta.near_copied < (uint64_t)(60 * NKV * 0.6 * 930) / 2);
    assert_true(sa.buffer_bytes > sb.buffer_bytes);
    assert_true(sa.in_use_bytes == sb.in_use_bytes);
    kvc_cache_free(a);
    kvc_cache_free(b);
    kvc_pool_free(pool);
}

static void test_bad_specs(void **state) {
    (void)state;
    assert_int_equal(kvc_method_validate("sentkv:usage=-0.1"), KVC_ERR_ARG);
    assert_int_equal(kvc_method_validate("sentkv:split=commas"), KVC_ERR_ARG);
    assert_int_equal(kvc_method_validate("sentkv:profile=q4"), KVC_ERR_ARG);
    assert_int_equal(kvc_method_validate("sentkv:heads=mean"), KVC_ERR_ARG);
    assert_int_equal(kvc_method_validate("sentkv:L=0"), KVC_ERR_ARG);
    assert_int_equal(kvc_method_validate("streaming:sinks=-1"), KVC_ERR_ARG);
    assert_int_equal(kvc_method_validate("sentkv:0.2,L=20,delta=5,split=flat"), KVC_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_matches_algorithm2),
        cmocka_unit_test(test_split_modes),
        cmocka_unit_test(test_boundary_weights),
        cmocka_unit_test(test_sentkv_layout),
        cmocka_unit_test(test_sentkv_all_is_full),
        cmocka_unit_test(test_sentkv_usage),
        cmocka_unit_test(test_streaming),
        cmocka_unit_test(test_far_tier),
        cmocka_unit_test(test_far_near_reuse),
        cmocka_unit_test(test_near_in_ram),
        cmocka_unit_test(test_bad_specs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
