/* The blob arena (src/kv/blob_arena.c): blocks are 64-byte aligned, writable
 * to their full size and never overlap; consecutive small blocks are adjacent
 * in one 2 MiB slab; blocks too large for a slab get their own mapping;
 * freeing every block returns the arena to at most its current and spare
 * slab, and the space is handed out again; two threads allocating and freeing
 * at once see only their own bytes; and a codec's blobs (iq_k / iq_v, the
 * quant and bitmap codecs) come from the arena and go back to it. Under
 * ASan the arena poisons padding and freed blocks (checked by the sanitizer
 * build, not here). Whether the kernel gives the slabs huge pages is the
 * machine's policy, not checked here (docs/benchmarks.md reads smaps). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <pthread.h>

#include "kv/blob_arena.h"
#include "kv/codec/bitmap.h"
#include "kv/codec/iquant.h"
#include "kv/codec/quant.h"

#include "test_rng.h"

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed * 131u + i * 7u);
}
static int check(const unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(seed * 131u + i * 7u)) return 0;
    return 1;
}

enum { NB = 600 };

/* Sizes from 0 to a few MiB: alignment, full writability, no overlap (every
 * block keeps its own pattern while the others are written). */
static void test_alignment_and_overlap(void **state) {
    (void)state;
    static unsigned char *p[NB];
    static size_t sz[NB];
    kvc_blob_arena_stats s0, s1, s2;
    kvc_blob_arena_stats_get(&s0);
    size_t fixed[] = {0, 1, 63, 64, 65, 1000, 4096, 65536 + 17, 131072, 600000, 3u << 20};
    int nf = (int)(sizeof fixed / sizeof *fixed);
    for (int i = 0; i < NB; i++) {
        sz[i] = i < nf ? fixed[i] : (i % 50 == 0 ? 520000 + rnd() % 100000 : rnd() % 140000);
        p[i] = kvc_blob_alloc(sz[i]);
        assert_non_null(p[i]);
        assert_int_equal((uintptr_t)p[i] % 64, 0);
        fill(p[i], sz[i], (unsigned)i);
    }
    kvc_blob_arena_stats_get(&s1);
    assert_int_equal(s1.live_blocks, s0.live_blocks + NB);
    assert_true(s1.large > s0.large); /* 600000, 3 MiB and the 520K+ ones */
    for (int i = 0; i < NB; i++) assert_true(check(p[i], sz[i], (unsigned)i));
    /* free in a scrambled order */
    for (int i = 0; i < NB; i++) {
        int j = (int)(rnd() % NB);
        unsigned char *t = p[i];
        size_t ts = sz[i];
        p[i] = p[j], sz[i] = sz[j], p[j] = t, sz[j] = ts;
    }
    for (int i = 0; i < NB; i++) kvc_blob_free(p[i]);
    kvc_blob_free(NULL);
    kvc_blob_arena_stats_get(&s2);
    assert_int_equal(s2.live_blocks, s0.live_blocks);
    assert_int_equal(s2.large, s0.large);
    /* at most the current slab and the spare stay mapped besides what was there */
    assert_true(s2.slabs <= (s0.slabs > 2 ? s0.slabs : 2));
    assert_int_equal(s2.mapped_bytes, s2.slabs * KVC_BLOB_SLAB);
}

/* Small blocks allocated one after the other lie one after the other, in
 * allocation order (the layout the attention walks), inside a 2 MiB slab. */
static void test_adjacent(void **state) {
    (void)state;
    enum { M = 8 };
    unsigned char *p[M];
    for (int i = 0; i < M; i++) p[i] = kvc_blob_alloc(1000 + 64 * i);
    int adjacent = 0;
    for (int i = 1; i < M; i++) {
        int same_slab = ((uintptr_t)p[i] & ~(uintptr_t)(KVC_BLOB_SLAB - 1)) ==
                        ((uintptr_t)p[i - 1] & ~(uintptr_t)(KVC_BLOB_SLAB - 1));
        if (!same_slab) continue; /* a slab boundary: at most one */
        assert_true(p[i] >= p[i - 1] + 1000 + 64 * (i - 1));
        assert_true(p[i] <= p[i - 1] + 1000 + 64 * (i - 1) + 64 + 64); /* + padding, + ASan's header */
        adjacent++;
    }
    assert_true(adjacent >= M - 2);
    for (int i = 0; i < M; i++) kvc_blob_free(p[i]);
}

/* Freed space is handed out again: filling four slabs, freeing everything
 * and filling again maps no more slabs than the first fill. */
static void test_reuse(void **state) {
    (void)state;
    enum { M = 4 * 16 };
    static unsigned char *p[M];
    kvc_blob_arena_stats a, b, c;
    for (int i = 0; i < M; i++) p[i] = kvc_blob_alloc(120000);
    kvc_blob_arena_stats_get(&a);
    for (int i = 0; i < M; i++) kvc_blob_free(p[i]);
    kvc_blob_arena_stats_get(&b);
    assert_true(b.slabs <= 2 && b.slabs < a.slabs);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < M; i++) {
            p[i] = kvc_blob_alloc(120000);
            fill(p[i], 120000, (unsigned)(i + round));
        }
        kvc_blob_arena_stats_get(&c);
        assert_true(c.slabs <= a.slabs);
        for (int i = 0; i < M; i++) assert_true(check(p[i], 120000, (unsigned)(i + round)));
        /* free every other block first: the slabs stay until their last block */
        for (int i = 0; i < M; i += 2) kvc_blob_free(p[i]);
        for (int i = 1; i < M; i += 2) assert_true(check(p[i], 120000, (unsigned)(i + round)));
        for (int i = 1; i < M; i += 2) kvc_blob_free(p[i]);
    }
}

static void *worker(void *arg) {
    unsigned seed = (unsigned)(uintptr_t)arg;
    enum { K = 64 };
    unsigned char *p[K] = {0};
    size_t sz[K] = {0};
    uint64_t r = 0x1234567ull * (seed + 1);
    for (int it = 0; it < 4000; it++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        int k = (int)(r % K);
        if (p[k]) {
            if (!check(p[k], sz[k], seed * 1000u + (unsigned)k)) return (void *)1;
            kvc_blob_free(p[k]);
        }
        sz[k] = (size_t)(r >> 20) % 20000;
        p[k] = kvc_blob_alloc(sz[k]);
        if (!p[k]) return (void *)1;
        fill(p[k], sz[k], seed * 1000u + (unsigned)k);
    }
    for (int k = 0; k < K; k++) {
        if (!check(p[k], sz[k], seed * 1000u + (unsigned)k)) return (void *)1;
        kvc_blob_free(p[k]);
    }
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    kvc_blob_arena_stats s0, s1;
    kvc_blob_arena_stats_get(&s0);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < 2; i++) {
        void *ret;
        pthread_join(t[i], &ret);
        assert_null(ret);
    }
    kvc_blob_arena_stats_get(&s1);
    assert_int_equal(s1.live_blocks, s0.live_blocks);
}

/* The codecs with write-once blobs allocate them in the arena: one block per
 * blob while it lives, none after free, 64-byte aligned. */
static void test_codec_blobs(void **state) {
    (void)state;
    enum { N = 300, D = 64 };
    static float x[N * D];
    for (int i = 0; i < N * D; i++) x[i] = (float)((int)(rnd() % 2001) - 1000) / 500.0f;
    kvc_quant_cfg q2 = {.bits = 2, .group = 32}, q3 = {.bits = 3, .group = 8};
    kvc_codec iqk, iqv, fk, fv;
    kvc_quant_codecs(&q2, D, &iqk, &iqv);
    kvc_quant_codecs(&q3, D, &fk, &fv); /* groups of 8: the float quant codecs */
    assert_ptr_equal(iqk.ops, &kvc_codec_iq_k);
    assert_ptr_equal(fk.ops, &kvc_codec_quant_k);
    kvc_bitmap_cfg bc = {.keep = 20};
    kvc_codec bm = {.ops = &kvc_codec_bitmap_f16, .dim = D, .cfg = &bc};
    const kvc_codec *cs[] = {&iqk, &iqv, &fk, &fv, &bm};
    for (int i = 0; i < 5; i++) {
        kvc_blob_arena_stats s0, s1, s2;
        kvc_blob_arena_stats_get(&s0);
        void *blob = NULL;
        assert_int_equal(cs[i]->ops->encode(cs[i], x, N, D, &blob), KVC_OK);
        assert_non_null(blob);
        assert_int_equal((uintptr_t)blob % 64, 0);
        kvc_blob_arena_stats_get(&s1);
        assert_int_equal(s1.live_blocks, s0.live_blocks + 1);
        assert_int_equal(cs[i]->ops->count(cs[i], blob), N);
        cs[i]->ops->free(cs[i], blob);
        kvc_blob_arena_stats_get(&s2);
        assert_int_equal(s2.live_blocks, s0.live_blocks);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alignment_and_overlap),
        cmocka_unit_test(test_adjacent),
        cmocka_unit_test(test_reuse),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_codec_blobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
