/* K/V dump files: a round trip in f32 (exact) and f16 (to half precision) with
 * rows written in scattered chunks as the forward pass produces them; rows
 * never written are an error on close; and the reader rejects malformed files
 * (bad magic, version, dtype, counts, reserved field, size mismatch, header
 * claiming more data than the file holds) with a message naming the field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvcomp/kvdump.h"

static char path[64];

static int setup(void **state) {
    (void)state;
    snprintf(path, sizeof path, "/tmp/kvc_test_kvdump_%d.bin", (int)getpid());
    return 0;
}
static int teardown(void **state) {
    (void)state;
    unlink(path);
    return 0;
}

static float value(int layer, int kv, int t, int e) {
    return (float)(layer * 1000 + kv * 500 + t) + (float)e / 64.0f;
}

static void write_sample(kvc_kvdump_dtype dtype, int skip_token) {
    kvc_kvdump_header h = {1, dtype, 3, 2, 8, 37, 6};
    kvc_kvdump_writer *w;
    assert_int_equal(kvc_kvdump_create(path, &h, &w), KVC_OK);
    const int row = 2 * 8;
    float k[16 * 16], v[16 * 16];
    /* chunks of 16 tokens, layers interleaved, the last chunk past n_tokens */
    for (int pos0 = 0; pos0 < 48; pos0 += 16) {
        for (int l = 0; l < 3; l++) {
            for (int t = 0; t < 16; t++)
                for (int e = 0; e < row; e++) {
                    k[t * row + e] = value(l, 0, pos0 + t, e);
                    v[t * row + e] = value(l, 1, pos0 + t, e);
                }
            if (skip_token >= pos0 && skip_token < pos0 + 16 && l == 1) {
                int n1 = skip_token - pos0;
                if (n1 > 0) assert_int_equal(kvc_kvdump_write(w, l, pos0, n1, k, v), KVC_OK);
                continue;
            }
            assert_int_equal(kvc_kvdump_write(w, l, pos0, 16, k, v), KVC_OK);
        }
    }
    kvc_status st = kvc_kvdump_close(w);
    if (skip_token >= 0) {
        assert_int_equal(st, KVC_ERR_INTERNAL);
        assert_non_null(strstr(kvc_last_error(), "never written"));
        assert_int_not_equal(access(path, F_OK), 0); /* removed */
    } else {
        assert_int_equal(st, KVC_OK);
    }
}

static void test_round_trip(void **state) {
    (void)state;
    for (int d = 0; d < 2; d++) {
        write_sample((kvc_kvdump_dtype)d, -1);
        kvc_kvdump_header h;
        assert_int_equal(kvc_kvdump_read_header(path, &h), KVC_OK);
        assert_int_equal(h.n_layers, 3);
        assert_int_equal(h.n_tokens, 37);
        assert_int_equal(h.n_heads, 6);
        for (int l = 0; l < 3; l++) {
            float *k, *v;
            assert_int_equal(kvc_kvdump_load_layer(path, l, &h, &k, &v), KVC_OK);
            for (int t = 0; t < 37; t++)
                for (int e = 0; e < 16; e++) {
                    float ek = value(l, 0, t, e), ev = value(l, 1, t, e);
                    /* f16 keeps 11 significant bits: relative error <= 2^-11 */
                    double tol = d == 0 ? 0 : fabs(ek) * 0x1p-11 + 1e-6;
                    assert_float_equal(k[t * 16 + e], ek, tol);
                    assert_float_equal(v[t * 16 + e], ev, d == 0 ? 0 : fabs(ev) * 0x1p-11 + 1e-6);
                }
            free(k);
            free(v);
        }
        float *k, *v;
        assert_int_equal(kvc_kvdump_load_layer(path, 3, &h, &k, &v), KVC_ERR_ARG);
    }
}

static void test_missing_rows(void **state) {
    (void)state;
    write_sample(KVC_KVDUMP_F32, 20);
}

/* Writes a header with the given fields and `payload` bytes after it. */
static void write_raw(const char *magic, const uint32_t f[8], size_t payload) {
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    fwrite(magic, 1, 8, fp);
    fwrite(f, 4, 8, fp);
    for (size_t i = 0; i < payload; i++) fputc(0, fp);
    fclose(fp);
}

static void expect_bad(const char *magic, const uint32_t f[8], size_t payload, const char *msg) {
    write_raw(magic, f, payload);
    kvc_kvdump_header h;
    assert_int_equal(kvc_kvdump_read_header(path, &h), KVC_ERR_FORMAT);
    if (!strstr(kvc_last_error(), msg)) fail_msg("message '%s' lacks '%s'", kvc_last_error(), msg);
    float *k, *v;
    assert_int_equal(kvc_kvdump_load_layer(path, 0, &h, &k, &v), KVC_ERR_FORMAT);
    assert_null(k);
}

static void test_rejects_malformed(void **state) {
    (void)state;
    const size_t good = 2 * 2 * 4 * 1 * 4; /* 1 layer, 2 tokens, 1 head, 4 dims, f32 */
    uint32_t ok[8] = {1, 0, 1, 1, 4, 2, 1, 0};
    write_raw("KVCDUMP1", ok, good);
    kvc_kvdump_header h;
    assert_int_equal(kvc_kvdump_read_header(path, &h), KVC_OK);

    expect_bad("KVCDUMP2", ok, good, "magic");
    uint32_t f[8];
#define BAD(idx, val, payload, msg)                                                                \
    memcpy(f, ok, sizeof f);                                                                       \
    f[idx] = (val);                                                                                \
    expect_bad("KVCDUMP1", f, payload, msg)
    BAD(0, 2, good, "version 2");
    BAD(1, 7, good, "dtype 7");
    BAD(2, 0, good, "n_layers 0");
    BAD(2, 100000, good, "n_layers 100000");
    BAD(3, 0, good, "n_kv_heads 0");
    BAD(4, 0xffffffffu, good, "head_dim 4294967295");
    BAD(5, 0, good, "n_tokens 0");
    BAD(5, 1u << 30, good, "n_tokens");
    BAD(5, 1u << 20, good, "needs"); /* in range, but the file is too short */
    BAD(6, 0, good, "n_heads 0");
    BAD(7, 5, good, "reserved");
#undef BAD
    expect_bad("KVCDUMP1", ok, good - 1, "needs");
    expect_bad("KVCDUMP1", ok, good + 1, "needs");
    FILE *fp = fopen(path, "wb");
    fwrite("KVCDU", 1, 5, fp);
    fclose(fp);
    assert_int_equal(kvc_kvdump_read_header(path, &h), KVC_ERR_FORMAT);
    assert_non_null(strstr(kvc_last_error(), "header"));
    assert_int_equal(kvc_kvdump_read_header("/nonexistent/x.kv", &h), KVC_ERR_IO);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_missing_rows),
        cmocka_unit_test(test_rejects_malformed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
