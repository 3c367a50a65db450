/* Reading texts, tokenizing them whole, splitting `--kv` method lists. See
 * include/kvcomp/eval_input.h. */
#include "kvcomp/eval_input.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/status.h"

kvc_status kvc_eval_read_file(const char *path, size_t max_bytes, char **out, size_t *len) {
    return kvc_file_read_all(path, max_bytes, "", out, len);
}

kvc_status kvc_tokenize_all(const kvc_model *m, const char *text, size_t len, int32_t **out,
                            int *n_out) {
    *out = NULL;
    *n_out = 0;
    KVC_CHECK(len < (size_t)1 << 30, KVC_ERR_RANGE, "text of %zu bytes: too long to tokenize",
              len);
    int cap = (int)len + 16, n = 0; /* byte-level BPE: at most one token per byte, + BOS */
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)cap);
    KVC_CHECK(toks, KVC_ERR_NOMEM, "no memory for %d tokens", cap);
    kvc_status s = kvc_tokenize(m, text, len, 1, 0, toks, cap, &n);
    if (s == KVC_OK && n > cap) { /* a tokenizer that can exceed one token per byte */
        int32_t *nt = realloc(toks, sizeof(int32_t) * (size_t)n);
        if (!nt) {
            free(toks);
            return kvc_fail(KVC_ERR_NOMEM, "no memory for %d tokens", n);
        }
        toks = nt;
        cap = n;
        s = kvc_tokenize(m, text, len, 1, 0, toks, cap, &n);
    }
    if (s != KVC_OK) {
        free(toks);
        return s;
    }
    *out = toks;
    *n_out = n;
    return KVC_OK;
}

void kvc_spec_list_free(char **specs, int n) {
    for (int i = 0; i < n; i++) {
        free(specs[i]);
        specs[i] = NULL;
    }
}

/* An element starts a new spec unless it is `key=value` before any ':', so that
 * `mustafar:k=0.5,v=0.5+kivi:bits=2` stays one spec (the '+' stage's ':' comes
 * after the previous stage's '='). */
static int starts_spec(const char *p, size_t n) {
    const char *colon = memchr(p, ':', n), *eq = memchr(p, '=', n);
    return !eq || (colon && colon < eq);
}

kvc_status kvc_spec_list_split(const char *list, char **out, int max, int *n_out) {
    *n_out = 0;
    KVC_CHECK(list && *list, KVC_ERR_ARG, "--kv: empty method list");
    int n = 0;
    const char *p = list;
    for (;;) {
        size_t len = strcspn(p, ",;");
        char sep = p[len];
        if (len == 0) {
            kvc_spec_list_free(out, n);
            return kvc_fail(KVC_ERR_ARG, "--kv '%s': empty method spec at offset %d", list,
                            (int)(p - list));
        }
        if (starts_spec(p, len) || (n > 0 && p[-1] == ';')) {
            if (!starts_spec(p, len)) {
                kvc_spec_list_free(out, n);
                return kvc_fail(KVC_ERR_ARG, "--kv '%s': '%.*s' after ';' is not a method", list,
                                (int)len, p);
            }
            if (n == max) {
                kvc_spec_list_free(out, n);
                return kvc_fail(KVC_ERR_ARG, "--kv '%s': more than %d methods", list, max);
            }
            out[n] = strndup(p, len);
            if (!out[n]) {
                kvc_spec_list_free(out, n);
                return kvc_fail(KVC_ERR_NOMEM, "no memory for --kv");
            }
            n++;
        } else {
            if (n == 0) {
                return kvc_fail(KVC_ERR_ARG,
                                "--kv '%s': '%.*s' is a parameter with no method before it",
                                list, (int)len, p);
            }
            size_t old = strlen(out[n - 1]);
            char *s = realloc(out[n - 1], old + 1 + len + 1);
            if (!s) {
                kvc_spec_list_free(out, n);
                return kvc_fail(KVC_ERR_NOMEM, "no memory for --kv");
            }
            s[old] = ',';
            memcpy(s + old + 1, p, len);
            s[old + 1 + len] = '\0';
            out[n - 1] = s;
        }
        if (!sep) break;
        p += len + 1;
    }
    *n_out = n;
    return KVC_OK;
}
