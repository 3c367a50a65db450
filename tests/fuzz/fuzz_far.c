/* libFuzzer target for the far tier's file (codec/far.h; the file can be
 * truncated or altered under a running cache). Three blobs of known rows are
 * written to a fresh far store, then the input mutates the file: byte 0 bit 0
 * asks for a truncation to the length in bytes 1-2 (little-endian, modulo the
 * file size + 1), and the rest are (offset lo, offset hi, xor) triples applied
 * to the file's bytes. Every blob is then decoded whole and in two ranges,
 * and scored. Property: either the store reports an error (with a message)
 * or every value read equals what was written — a mutated file is never read
 * as data. Built by `make fuzz`; the committed corpus replays in `make test`. */
#define _GNU_SOURCE
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/f16.h"
#include "kv/codec/dense.h"
#include "kv/codec/far.h"

enum { DIM = 16, NB = 3 };
static const int rows_of[NB] = {5, 300, 1};

static float value(int b, int i, int c) { return (float)((b * 7919 + i * 31 + c * 7) % 2001 - 1000) / 64.0f; }

/* Checks blob b read as rows [begin, end) against the written values, unless the store failed. */
static void check_range(kvc_far *f, const kvc_codec *c, void *blob, int b, int begin, int end) {
    float *x = malloc(sizeof(float) * (size_t)(end - begin) * DIM);
    if (!x) __builtin_trap();
    c->ops->decode(c, blob, begin, end, x, DIM);
    float q[DIM], s[300];
    for (int i = 0; i < DIM; i++) q[i] = 1.0f;
    c->ops->qk(c, blob, q, 1, DIM, begin, end, s, 300);
    if (kvc_far_take_error(f) != KVC_OK) {
        if (!kvc_last_error()[0]) __builtin_trap();
        free(x);
        return;
    }
    for (int i = begin; i < end; i++) {
        float dot = 0.0f;
        for (int ch = 0; ch < DIM; ch++) {
            float want = kvc_f16_to_f32(kvc_f32_to_f16(value(b, i, ch)));
            if (x[(size_t)(i - begin) * DIM + ch] != want) __builtin_trap();
            dot += want;
        }
        if (!(fabsf(s[i - begin] - dot) <= 1e-3f * (1.0f + fabsf(dot)))) __builtin_trap();
    }
    free(x);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kvc_codecs_init();
    char path[] = "/tmp/kvc_fuzz_far_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return 0; /* no temporary file: nothing to test */
    close(fd);
    kvc_far *f = NULL;
    if (kvc_far_open(path, &f) != KVC_OK) __builtin_trap();
    kvc_codec c = {.ops = &kvc_codec_far_f16, .dim = DIM, .cfg = f};
    void *blob[NB];
    for (int b = 0; b < NB; b++) {
        float *x = malloc(sizeof(float) * (size_t)rows_of[b] * DIM);
        if (!x) __builtin_trap();
        for (int i = 0; i < rows_of[b]; i++)
            for (int ch = 0; ch < DIM; ch++) x[i * DIM + ch] = value(b, i, ch);
        if (c.ops->encode(&c, x, rows_of[b], DIM, &blob[b]) != KVC_OK) __builtin_trap();
        free(x);
    }
    kvc_far_stats fs;
    kvc_far_stats_get(f, &fs);
    FILE *fp = fopen(path, "r+b");
    if (!fp) __builtin_trap();
    size_t i = 0;
    if (size >= 3 && (data[0] & 1)) {
        size_t len = ((size_t)data[1] | (size_t)data[2] << 8) % (fs.stored + 1);
        if (ftruncate(fileno(fp), (off_t)len) != 0) __builtin_trap();
        i = 3;
    } else if (size >= 1) {
        i = 1;
    }
    for (; i + 3 <= size; i += 3) {
        long off = (long)(((size_t)data[i] | (size_t)data[i + 1] << 8) % fs.stored);
        int ch;
        if (fseek(fp, off, SEEK_SET) != 0) __builtin_trap();
        if ((ch = fgetc(fp)) == EOF) continue; /* past a truncation */
        if (fseek(fp, off, SEEK_SET) != 0) __builtin_trap();
        fputc(ch ^ data[i + 2], fp);
    }
    fclose(fp);
    for (int b = 0; b < NB; b++) {
        check_range(f, &c, blob[b], b, 0, rows_of[b]);
        check_range(f, &c, blob[b], b, rows_of[b] / 2, rows_of[b]);
        c.ops->free(&c, blob[b]);
    }
    kvc_far_close(f);
    unlink(path);
    return 0;
}
