/* Inputs of an evaluation or benchmark: a text file read whole, a text
 * tokenized whole, and a `--kv` list of method specs split into specs. */
#ifndef KVCOMP_EVAL_INPUT_H
#define KVCOMP_EVAL_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include "kvcomp.h"

/* Reads a whole file into a NUL-terminated malloc'd buffer (caller frees).
 * KVC_ERR_IO naming the path on failure; KVC_ERR_RANGE past max_bytes. */
kvc_status kvc_eval_read_file(const char *path, size_t max_bytes, char **out, size_t *len);

/* Tokenizes a whole text (with the model's BOS if it asks for one, no special
 * tokens parsed) into a malloc'd array. */
kvc_status kvc_tokenize_all(const kvc_model *m, const char *text, size_t len, int32_t **out,
                            int *n_out);

/* Splits a `--kv` list into method specs. Specs have commas of their own
 * ("kivi:bits=2,group=32"), so a comma starts a new spec only when the piece
 * after it looks like a spec start: it contains ':' or has no '='. A piece
 * "key=value" without ':' continues the previous spec's parameters. ';' always
 * separates. Example: "mustafar,kivi:bits=2,group=32,full:f16" gives
 * "mustafar", "kivi:bits=2,group=32", "full:f16".
 * At most max specs; each is malloc'd in out[i] (free with kvc_spec_list_free).
 * KVC_ERR_ARG on an empty list, an empty spec, a continuation with nothing
 * before it, or more than max specs. */
kvc_status kvc_spec_list_split(const char *list, char **out, int max, int *n_out);
void kvc_spec_list_free(char **specs, int n);

#endif
