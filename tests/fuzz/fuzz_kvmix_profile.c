/* libFuzzer target for KVmix profile files (kvmix_profile.h; untrusted: read
 * by --kv kvmix:profile=FILE). Property: a file that parses writes back to a
 * text that parses to the same per-layer bits (exactly) and ratios/scores (to
 * the written precision), and writing that again gives the same text
 * (write is a fixed point after one round). A refusal leaves a message.
 * Built by `make fuzz`; the committed corpus replays in `make test`. */
#define _GNU_SOURCE
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/method/kvmix_profile.h"

/* The profile written to a malloc'd text (NUL-terminated); traps on failure. */
static char *written(const kvc_kvmix_profile *p, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) __builtin_trap();
    if (kvc_kvmix_profile_write(p, f) != KVC_OK) __builtin_trap();
    fclose(f);
    return buf;
}

static int close_to(double a, double b) {
    return fabs(a - b) <= 1e-3 * fmax(fabs(a), fabs(b)) + 1e-300;
}

static void same_layers(const kvc_kvmix_profile *a, const kvc_kvmix_profile *b) {
    if (a->n_layers != b->n_layers) __builtin_trap();
    for (int i = 0; i < a->n_layers; i++) {
        const kvc_kvmix_layer *x = &a->layer[i], *y = &b->layer[i];
        if (x->k_bits != y->k_bits || x->v_bits != y->v_bits) __builtin_trap();
        if (!close_to(x->k_rpc, y->k_rpc) || !close_to(x->v_rpc, y->v_rpc)) __builtin_trap();
        if (!close_to(x->k_score, y->k_score) || !close_to(x->v_score, y->v_score))
            __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kvc_kvmix_profile *p = NULL;
    if (kvc_kvmix_profile_parse((const char *)data, size, "fuzz", &p) != KVC_OK) {
        if (p != NULL || !kvc_last_error()[0]) __builtin_trap();
        return 0;
    }
    size_t n1, n2;
    char *t1 = written(p, &n1);
    kvc_kvmix_profile *q = NULL;
    if (kvc_kvmix_profile_parse(t1, n1, "fuzz-written", &q) != KVC_OK) __builtin_trap();
    same_layers(p, q);
    char *t2 = written(q, &n2);
    if (n1 != n2 || memcmp(t1, t2, n1) != 0) __builtin_trap();
    free(t1);
    free(t2);
    kvc_kvmix_profile_free(q);
    kvc_kvmix_profile_free(p);
    return 0;
}
