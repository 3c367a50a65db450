/* libFuzzer target for tuned profile files (tuned_profile.h; untrusted: read
 * by --kv tuned:profile=FILE). Property: a file that parses writes back to a
 * text that parses to the same codecs (exactly) and KLs (to the written
 * precision), and writing that again gives the same text (write is a fixed
 * point after one round). A refusal leaves a message. Built by `make fuzz`;
 * the committed corpus replays in `make test`. */
#define _GNU_SOURCE
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/method/tuned_profile.h"

/* The profile written to a malloc'd text; traps on failure. */
static char *written(const kvc_tuned_profile *p, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) __builtin_trap();
    if (kvc_tuned_profile_write(p, f) != KVC_OK) __builtin_trap();
    fclose(f);
    return buf;
}

static int close_to(double a, double b) {
    return fabs(a - b) <= 1e-5 * fmax(fabs(a), fabs(b)) + 1e-300;
}

static int same_codec(kvc_tuned_codec a, kvc_tuned_codec b) {
    return a.bits == b.bits && a.group == b.group;
}

static void same_layers(const kvc_tuned_profile *a, const kvc_tuned_profile *b) {
    if (a->n_layers != b->n_layers || strcmp(a->model, b->model) || strcmp(a->source, b->source))
        __builtin_trap();
    for (int i = 0; i < a->n_layers; i++) {
        const kvc_tuned_layer *x = &a->layer[i], *y = &b->layer[i];
        if (!same_codec(x->k, y->k) || !same_codec(x->v, y->v)) __builtin_trap();
        if ((x->k_kl >= 0) != (y->k_kl >= 0) || (x->k_kl >= 0 && !close_to(x->k_kl, y->k_kl)))
            __builtin_trap();
        if ((x->v_kl >= 0) != (y->v_kl >= 0) || (x->v_kl >= 0 && !close_to(x->v_kl, y->v_kl)))
            __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kvc_tuned_profile *p = NULL;
    if (kvc_tuned_profile_parse((const char *)data, size, "fuzz", &p) != KVC_OK) {
        if (p != NULL || !kvc_last_error()[0]) __builtin_trap();
        return 0;
    }
    size_t n1, n2;
    char *t1 = written(p, &n1);
    kvc_tuned_profile *q = NULL;
    if (kvc_tuned_profile_parse(t1, n1, "fuzz-written", &q) != KVC_OK) __builtin_trap();
    same_layers(p, q);
    char *t2 = written(q, &n2);
    if (n1 != n2 || memcmp(t1, t2, n1) != 0) __builtin_trap();
    free(t1);
    free(t2);
    kvc_tuned_profile_free(q);
    kvc_tuned_profile_free(p);
    return 0;
}
