/* Reader for the logits fixtures that scripts/fixtures/make_logits_fixtures.py
 * writes from the reference llama.cpp (format documented in that script):
 * prompt token ids, the reference's top-N logits at every position, its full
 * logits at a few positions, and its greedy continuation with the top-1/top-2
 * margin of each step. Shared by test_logits.c and test_generate.c. */
#ifndef KVC_TESTS_LOGITS_FIXTURE_H
#define KVC_TESTS_LOGITS_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct logits_fixture {
    uint32_t n_vocab, n_tokens, top_n, n_full, n_gen;
    int32_t *tokens;    /* [n_tokens] */
    int32_t *top_id;    /* [n_tokens][top_n] */
    float *top_logit;   /* [n_tokens][top_n] */
    uint32_t *full_pos; /* [n_full] */
    float *full;        /* [n_full][n_vocab] */
    int32_t *gen;       /* [n_gen] */
    float *gen_margin;  /* [n_gen] */
} logits_fixture;

static void logits_fixture_free(logits_fixture *f) {
    free(f->tokens);
    free(f->top_id);
    free(f->top_logit);
    free(f->full_pos);
    free(f->full);
    free(f->gen);
    free(f->gen_margin);
    memset(f, 0, sizeof *f);
}

static int fx_read(FILE *fp, void *dst, size_t n) { return fread(dst, 1, n, fp) == n ? 0 : -1; }

/* Loads tests/fixtures/logits/<name>.bin; returns 0 or -1. */
static int logits_fixture_load(const char *name, logits_fixture *f) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/logits/%s.bin", KVC_SOURCE_DIR, name);
    memset(f, 0, sizeof *f);
    FILE *fp = fopen(path, "rb");
    if (!fp) return -1;
    char magic[8];
    uint32_t h[6];
    int bad = fx_read(fp, magic, 8) || memcmp(magic, "KVCLOGIT", 8) != 0 || fx_read(fp, h, sizeof h) ||
              h[0] != 1 || h[1] == 0 || h[1] > (1u << 20) || h[2] == 0 || h[2] > 100000 ||
              h[3] > h[1] || h[4] > 64 || h[5] > 100000;
    if (!bad) {
        f->n_vocab = h[1], f->n_tokens = h[2], f->top_n = h[3], f->n_full = h[4], f->n_gen = h[5];
        size_t nt = f->n_tokens, tn = f->top_n;
        f->tokens = malloc(nt * 4);
        f->top_id = malloc(nt * tn * 4 + 4);
        f->top_logit = malloc(nt * tn * 4 + 4);
        f->full_pos = malloc(f->n_full * 4 + 4);
        f->full = malloc((size_t)f->n_full * f->n_vocab * 4 + 4);
        f->gen = malloc(f->n_gen * 4 + 4);
        f->gen_margin = malloc(f->n_gen * 4 + 4);
        bad = !f->tokens || !f->top_id || !f->top_logit || !f->full_pos || !f->full || !f->gen ||
              !f->gen_margin || fx_read(fp, f->tokens, nt * 4);
        for (size_t p = 0; !bad && p < nt; p++)
            bad = fx_read(fp, f->top_id + p * tn, tn * 4) ||
                  fx_read(fp, f->top_logit + p * tn, tn * 4);
        for (size_t i = 0; !bad && i < f->n_full; i++)
            bad = fx_read(fp, f->full_pos + i, 4) ||
                  fx_read(fp, f->full + i * f->n_vocab, (size_t)f->n_vocab * 4) ||
                  f->full_pos[i] >= f->n_tokens;
        bad = bad || fx_read(fp, f->gen, f->n_gen * 4) || fx_read(fp, f->gen_margin, f->n_gen * 4);
    }
    fclose(fp);
    if (bad) logits_fixture_free(f);
    return bad ? -1 : 0;
}

#endif
