/* KVmix profile files (the KVmix paper, "KV Importance Analysis" and "Dynamic Pivotal
 * Context Selection"): per layer the K and V bit widths and the K and V
 * recent-pivotal-context (RPC) ratios, plus the importance scores they were
 * derived from. Written by `kvcomp profile`, read by the kvmix method. The file
 * is untrusted input: every field is checked and errors name the line.
 *
 * Text format, one record per line, '#' starts a comment:
 *
 *   kvmix-profile 1                  required first record (format version)
 *   model SmolLM2-135M-Instruct      optional, informational (rest of line)
 *   source alice.txt, 24 prompts     optional, informational (rest of line)
 *   layers 30                        required before any layer record
 *   layer 0 2 2 0.1 0.1 1.5e-3 2.0e-2
 *   ...                              layer i k_bits v_bits k_rpc v_rpc [k_score v_score]
 *
 * Bits are 1, 2, 3 or 4; ratios in [0, 1]; scores finite and >= 0 (optional);
 * every layer 0..layers-1 exactly once. */
#ifndef KVC_KV_METHOD_KVMIX_PROFILE_H
#define KVC_KV_METHOD_KVMIX_PROFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvcomp.h"

enum { KVC_KVMIX_MAX_LAYERS = 1024, KVC_KVMIX_TEXT_MAX = 256 };

typedef struct kvc_kvmix_layer {
    int k_bits, v_bits;
    float k_rpc, v_rpc;      /* recent pivotal context ratios */
    double k_score, v_score; /* mean gradient norms ||dL/dW_k||, ||dL/dW_v|| (0 if unknown) */
} kvc_kvmix_layer;

typedef struct kvc_kvmix_profile {
    int n_layers;
    char model[KVC_KVMIX_TEXT_MAX];
    char source[KVC_KVMIX_TEXT_MAX];
    kvc_kvmix_layer *layer; /* [n_layers] */
} kvc_kvmix_profile;

/* How scores become a configuration (paper defaults: top 20% of layers by
 * score get K 3 / V 4 bits and RPC ratio 0.2, the rest 2 bits and 0.1). */
typedef struct kvc_kvmix_rule {
    double top_frac;
    int k_hi, v_hi, lo;
    float rpc_hi, rpc_lo;
} kvc_kvmix_rule;

/* The paper's rule with top fraction `top_frac`. */
kvc_kvmix_rule kvc_kvmix_rule_default(double top_frac);

/* Number of layers in the top fraction: floor(top_frac * n) (the paper's
 * 20% of 32 layers is 6, giving K 2.1875 and V 2.375 average bits). */
int kvc_kvmix_top_count(double top_frac, int n_layers);

/* Parses a profile from memory; `name` labels messages ("profile p.kvmix line 4: ...").
 * KVC_ERR_FORMAT on any malformed field. */
kvc_status kvc_kvmix_profile_parse(const char *text, size_t len, const char *name,
                                   kvc_kvmix_profile **out);
/* Reads and parses a file (at most 1 MiB). KVC_ERR_IO if it cannot be read. */
kvc_status kvc_kvmix_profile_load(const char *path, kvc_kvmix_profile **out);

/* A profile of n layers from scores: layers ranked by k_score (and separately
 * by v_score), the top kvc_kvmix_top_count get the high bits and ratio.
 * model / source may be NULL. */
kvc_status kvc_kvmix_profile_from_scores(int n_layers, const double *k_score,
                                         const double *v_score, const kvc_kvmix_rule *rule,
                                         const char *model, const char *source,
                                         kvc_kvmix_profile **out);

/* The same number of high-bit layers, chosen at random (the paper's
 * random-k2.19v2.38 ablation); scores are 0. */
kvc_status kvc_kvmix_profile_random(int n_layers, const kvc_kvmix_rule *rule, uint64_t seed,
                                    const char *model, kvc_kvmix_profile **out);

/* Writes the text form (parseable by kvc_kvmix_profile_parse). */
kvc_status kvc_kvmix_profile_write(const kvc_kvmix_profile *p, FILE *f);
kvc_status kvc_kvmix_profile_save(const kvc_kvmix_profile *p, const char *path);

/* Average K and V bits over layers. */
void kvc_kvmix_profile_avg_bits(const kvc_kvmix_profile *p, double *k_bits, double *v_bits);

void kvc_kvmix_profile_free(kvc_kvmix_profile *p);

#endif
