/* Tuned profile files: per layer, the codec of the keys and the codec of the
 * values, as chosen by `kvcomp tune` (src/eval/tune.c) for a byte budget and
 * run by `--kv tuned:profile=FILE` (tuned.c). The file is untrusted input:
 * every field is checked and errors name the line, the field and the value.
 *
 * Text format, one record per line, '#' starts a comment:
 *
 *   kvcomp-tuned 1                   required first record (format version)
 *   model Qwen2.5-Coder-1.5B         optional, informational (rest of line)
 *   source calib.txt, budget 2.0     optional, informational (rest of line)
 *   layers 28                        required before any layer record
 *   layer 0 q2g128 q1g128 4.1e-3 2.0e-3
 *   ...                              layer i k_codec v_codec [k_kl v_kl]
 *
 * A codec is `f32`, `f16` (dense) or `q<bits>g<group>`: KIVI's asymmetric
 * quantization (keys per channel in groups of <group> tokens, values per
 * token in groups of <group> channels) at <bits> 1..4, group 1..
 * KVC_QUANT_MAX_N. k_kl, v_kl: the KL the sensitivity pass measured for that
 * choice alone (finite, >= 0; optional). Every layer 0..layers-1 exactly once. */
#ifndef KVC_KV_METHOD_TUNED_PROFILE_H
#define KVC_KV_METHOD_TUNED_PROFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvcomp.h"

enum { KVC_TUNED_MAX_LAYERS = 1024, KVC_TUNED_TEXT_MAX = 256, KVC_TUNED_CODEC_NAME = 16 };

/* One side's codec: bits 32 (f32) or 16 (f16) dense, 1..4 quantized in groups. */
typedef struct kvc_tuned_codec {
    int bits;
    int group; /* quantized only; 0 for dense */
} kvc_tuned_codec;

typedef struct kvc_tuned_layer {
    kvc_tuned_codec k, v;
    double k_kl, v_kl; /* measured KL of this choice alone; < 0: not given */
} kvc_tuned_layer;

typedef struct kvc_tuned_profile {
    int n_layers;
    char model[KVC_TUNED_TEXT_MAX];
    char source[KVC_TUNED_TEXT_MAX];
    kvc_tuned_layer *layer; /* [n_layers] */
} kvc_tuned_profile;

/* Parses a codec name ("f16", "q2g32"); KVC_ERR_FORMAT naming the problem
 * (prefixed by `where`, e.g. "profile p line 4: k_codec"). */
kvc_status kvc_tuned_codec_parse(const char *s, const char *where, kvc_tuned_codec *out);
/* Writes the canonical name ("q2g32") into buf (KVC_TUNED_CODEC_NAME bytes). */
void kvc_tuned_codec_name(kvc_tuned_codec c, char *buf);
/* Bits per element of n tokens of dim channels in this codec, K or V side,
 * payload and metadata (the codec's exact blob sizes). */
double kvc_tuned_codec_bits(kvc_tuned_codec c, int is_v, int dim, int n);

/* A profile of n layers, every side `fill`, no KL given. */
kvc_status kvc_tuned_profile_uniform(int n_layers, kvc_tuned_codec fill, kvc_tuned_profile **out);

/* Parses a profile from memory; `name` labels messages. KVC_ERR_FORMAT on
 * any malformed field. */
kvc_status kvc_tuned_profile_parse(const char *text, size_t len, const char *name,
                                   kvc_tuned_profile **out);
/* Reads and parses a file (at most 1 MiB). KVC_ERR_IO if it cannot be read. */
kvc_status kvc_tuned_profile_load(const char *path, kvc_tuned_profile **out);

/* Writes the text form (parseable by kvc_tuned_profile_parse). */
kvc_status kvc_tuned_profile_write(const kvc_tuned_profile *p, FILE *f);
kvc_status kvc_tuned_profile_save(const kvc_tuned_profile *p, const char *path);

void kvc_tuned_profile_free(kvc_tuned_profile *p);

#endif
