/* The block pool of the far tier's near buffer (src/kv/codec/block_pool.c):
 * ids are distinct while held, a block's memory is its own (writes to one
 * never show in another) and stays put while other slabs are added, every id
 * can be given back at once (the free list holds them all), and freed ids are
 * handed out again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kv/codec/block_pool.h"

enum { N = 3000, BLOCK = 64 };

static void test_get_put(void **state) {
    (void)state;
    kvc_block_pool p;
    kvc_block_pool_init(&p, BLOCK);
    static int32_t ids[N];
    static unsigned char *at[N];
    static unsigned char seen[N * 2];
    for (int round = 0; round < 3; round++) {
        memset(seen, 0, sizeof seen);
        for (int i = 0; i < N; i++) {
            ids[i] = kvc_block_pool_get(&p);
            assert_true(ids[i] >= 0 && ids[i] < N * 2);
            assert_int_equal(seen[ids[i]], 0);
            seen[ids[i]] = 1;
            at[i] = kvc_block_pool_at(&p, ids[i]);
            memset(at[i], i & 0xff, BLOCK);
        }
        assert_int_equal(p.used, N);
        for (int i = 0; i < N; i++) {
            assert_ptr_equal(kvc_block_pool_at(&p, ids[i]), at[i]); /* slabs never move */
            for (int j = 0; j < BLOCK; j++) assert_int_equal(at[i][j], i & 0xff);
        }
        for (int i = N - 1; i >= 0; i -= 2) kvc_block_pool_put(&p, ids[i]); /* every other, then the rest */
        for (int i = N - 2; i >= 0; i -= 2) kvc_block_pool_put(&p, ids[i]);
        assert_int_equal(p.used, 0);
    }
    kvc_block_pool_free(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get_put),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
