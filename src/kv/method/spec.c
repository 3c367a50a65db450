/* Method spec parsing (docs/design.md §4 "Method", docs/design-kv.md "Methods and
 * the spec language"): "name[:key=value,...]" layers joined by '+', filled
 * into each method's cfg struct through its parameter table. Every error
 * names the method, the key and the value, and lists the valid names, keys,
 * choices or the allowed range. Also the public kvc_method_validate. */
#include "kv/method/method.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

enum { TOKEN_MAX = 512 };

const kvc_method *kvc_method_find(const char *name) {
    for (int i = 0; kvc_method_registry[i]; i++)
        if (strcmp(kvc_method_registry[i]->name, name) == 0) return kvc_method_registry[i];
    return NULL;
}

static void list_methods(char *buf, size_t cap) {
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; kvc_method_registry[i] && off < cap; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%s", i ? ", " : "",
                                kvc_method_registry[i]->name);
}

static void list_keys(const kvc_method *m, char *buf, size_t cap) {
    size_t off = 0;
    buf[0] = '\0';
    if (m->n_params == 0) snprintf(buf, cap, "(none)");
    for (int i = 0; i < m->n_params && off < cap; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%s", i ? ", " : "", m->params[i].key);
}

/* Index of `word` in "a|b|c", or -1. */
static int choice_index(const char *choices, const char *word) {
    int idx = 0;
    size_t wl = strlen(word);
    for (const char *p = choices; *p;) {
        const char *e = strchr(p, '|');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == wl && strncmp(p, word, l) == 0) return idx;
        idx++;
        if (!e) break;
        p = e + 1;
    }
    return -1;
}

/* Writes choice number idx of "a|b|c" into buf. */
static void choice_name(const char *choices, int idx, char *buf, size_t cap) {
    const char *p = choices;
    for (int i = 0; i < idx && p; i++) {
        p = strchr(p, '|');
        if (p) p++;
    }
    if (!p) p = "?";
    size_t l = strcspn(p, "|");
    if (l >= cap) l = cap - 1;
    memcpy(buf, p, l);
    buf[l] = '\0';
}

static kvc_status set_value(const kvc_method *m, const kvc_param *pr, const char *val, void *cfg) {
    char *at = (char *)cfg + pr->offset;
    switch (pr->type) {
    case KVC_PARAM_INT: {
        char *end;
        errno = 0;
        long x = strtol(val, &end, 10);
        KVC_CHECK(*val && !*end && errno == 0, KVC_ERR_ARG,
                  "method %s: %s=%s is not an integer (allowed %.0f..%.0f)", m->name, pr->key, val,
                  pr->min, pr->max);
        KVC_CHECK(x >= pr->min && x <= pr->max, KVC_ERR_ARG,
                  "method %s: %s=%s out of range (allowed %.0f..%.0f)", m->name, pr->key, val, pr->min,
                  pr->max);
        *(int *)at = (int)x;
        return KVC_OK;
    }
    case KVC_PARAM_FLOAT: {
        char *end;
        errno = 0;
        double x = strtod(val, &end);
        int range = errno == ERANGE;
        KVC_CHECK(*val && !*end && (range || isfinite(x)), KVC_ERR_ARG,
                  "method %s: %s=%s is not a number (allowed %g..%g)", m->name, pr->key, val,
                  pr->min, pr->max);
        KVC_CHECK(!range, KVC_ERR_ARG, "method %s: %s=%s is a number that %s (allowed %g..%g)",
                  m->name, pr->key, val, fabs(x) < 1 ? "underflows to 0" : "overflows", pr->min,
                  pr->max);
        KVC_CHECK(x >= pr->min && x <= pr->max, KVC_ERR_ARG,
                  "method %s: %s=%s out of range (allowed %g..%g)", m->name, pr->key, val, pr->min,
                  pr->max);
        *(float *)at = (float)x;
        return KVC_OK;
    }
    case KVC_PARAM_ENUM: {
        int i = choice_index(pr->choices, val);
        KVC_CHECK(i >= 0, KVC_ERR_ARG, "method %s: %s=%s is not one of %s", m->name, pr->key, val,
                  pr->choices);
        *(int *)at = i;
        return KVC_OK;
    }
    case KVC_PARAM_BOOL: {
        int b = -1;
        if (!strcmp(val, "1") || !strcmp(val, "true") || !strcmp(val, "on") || !strcmp(val, "yes")) b = 1;
        if (!strcmp(val, "0") || !strcmp(val, "false") || !strcmp(val, "off") || !strcmp(val, "no")) b = 0;
        KVC_CHECK(b >= 0, KVC_ERR_ARG, "method %s: %s=%s is not a boolean (0|1|true|false|on|off)",
                  m->name, pr->key, val);
        *(int *)at = b;
        return KVC_OK;
    }
    case KVC_PARAM_STRING:
        KVC_CHECK(strlen(val) < KVC_PARAM_STR_MAX, KVC_ERR_ARG,
                  "method %s: %s is %zu characters long (at most %d)", m->name, pr->key,
                  strlen(val), KVC_PARAM_STR_MAX - 1);
        strcpy(at, val);
        return KVC_OK;
    }
    return kvc_fail(KVC_ERR_INTERNAL, "method %s: parameter %s has unknown type %d", m->name,
                    pr->key, (int)pr->type);
}

static int param_index(const kvc_method *m, const char *key) {
    for (int i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].key, key) == 0) return i;
    return -1;
}

/* Parses one layer "name[:args]" (already split off from '+'). */
static kvc_status parse_layer(const char *text, const kvc_method **mo, void **cfgo) {
    char buf[TOKEN_MAX];
    *mo = NULL;
    *cfgo = NULL;
    KVC_CHECK(strlen(text) < sizeof buf, KVC_ERR_ARG, "KV spec part '%.40s...' too long (%zu chars)",
              text, strlen(text));
    strcpy(buf, text);
    char *colon = strchr(buf, ':');
    char *args = NULL;
    if (colon) {
        *colon = '\0';
        args = colon + 1;
    }
    char names[512];
    if (!buf[0]) {
        list_methods(names, sizeof names);
        return kvc_fail(KVC_ERR_ARG, "KV spec '%s': missing method name; valid methods: %s", text,
                        names);
    }
    const kvc_method *m = kvc_method_find(buf);
    if (!m) {
        list_methods(names, sizeof names);
        return kvc_fail(KVC_ERR_ARG, "unknown KV method '%s'; valid methods: %s", buf, names);
    }
    void *cfg = calloc(1, m->cfg_size ? m->cfg_size : 1);
    if (!cfg) return kvc_fail(KVC_ERR_NOMEM, "method %s: cannot allocate its parameters", m->name);
    kvc_status st = KVC_OK;
    for (int i = 0; i < m->n_params && st == KVC_OK; i++) {
        st = set_value(m, &m->params[i], m->params[i].def, cfg);
        if (st != KVC_OK)
            st = kvc_fail(KVC_ERR_INTERNAL, "method %s: default of %s ('%s') does not parse",
                          m->name, m->params[i].key, m->params[i].def);
    }
    uint8_t seen[KVC_MAX_PARAMS] = {0};
    if (st == KVC_OK && args && !*args)
        st = kvc_fail(KVC_ERR_ARG, "KV spec '%s': nothing after ':'", text);
    if (st == KVC_OK && args && *args == ',')
        st = kvc_fail(KVC_ERR_ARG, "KV spec '%s': empty parameter before the first comma", text);
    if (st == KVC_OK && args && *args) {
        int first = 1;
        for (char *save = NULL, *arg = strtok_r(args, ",", &save); arg && st == KVC_OK;
             arg = strtok_r(NULL, ",", &save), first = 0) {
            char *eq = strchr(arg, '=');
            char keys[512];
            int pi;
            const char *val;
            if (!eq) {
                if (!first || m->positional < 0) {
                    list_keys(m, keys, sizeof keys);
                    st = kvc_fail(KVC_ERR_ARG,
                                  "method %s: '%s' is not key=value%s; valid keys: %s", m->name,
                                  arg,
                                  m->positional >= 0 ? " (a bare value is allowed only first)" : "",
                                  keys);
                    break;
                }
                pi = m->positional;
                val = arg;
            } else {
                *eq = '\0';
                val = eq + 1;
                pi = param_index(m, arg);
                if (pi < 0) {
                    list_keys(m, keys, sizeof keys);
                    st = kvc_fail(KVC_ERR_ARG, "method %s: unknown parameter '%s'; valid keys: %s",
                                  m->name, arg, keys);
                    break;
                }
                if (!*val) {
                    st = kvc_fail(KVC_ERR_ARG, "method %s: empty value for %s", m->name, arg);
                    break;
                }
            }
            if (pi < KVC_MAX_PARAMS && seen[pi]) {
                st = kvc_fail(KVC_ERR_ARG, "method %s: parameter %s given twice", m->name,
                              m->params[pi].key);
                break;
            }
            if (pi < KVC_MAX_PARAMS) seen[pi] = 1;
            st = set_value(m, &m->params[pi], val, cfg);
        }
        /* strtok_r skips empty fields: reject "a=1,,b=2" and trailing commas explicitly */
        if (st == KVC_OK && (strstr(text, ",,") || text[strlen(text) - 1] == ','))
            st = kvc_fail(KVC_ERR_ARG, "KV spec '%s': empty parameter between commas", text);
    }
    if (st == KVC_OK && m->check) st = m->check(cfg);
    if (st != KVC_OK) {
        free(cfg);
        return st;
    }
    *mo = m;
    *cfgo = cfg;
    return KVC_OK;
}

void kvc_spec_free(kvc_spec *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) free(s->cfg[i]);
    memset(s, 0, sizeof *s);
}

static int stacks_with(const kvc_method *base, const char *name) {
    for (const char *const *p = base->stacks_with; p && *p; p++)
        if (strcmp(*p, name) == 0) return 1;
    return 0;
}

kvc_status kvc_spec_parse(const char *text, kvc_spec *out) {
    memset(out, 0, sizeof *out);
    KVC_CHECK(text != NULL, KVC_ERR_ARG, "KV spec is NULL");
    char names[512];
    if (!*text) {
        list_methods(names, sizeof names);
        return kvc_fail(KVC_ERR_ARG, "empty KV spec; valid methods: %s", names);
    }
    for (const char *p = text; *p; p++)
        KVC_CHECK(!isspace((unsigned char)*p), KVC_ERR_ARG,
                  "KV spec '%s': contains whitespace at offset %d", text, (int)(p - text));
    const char *p = text;
    for (;;) {
        const char *plus = strchr(p, '+');
        size_t len = plus ? (size_t)(plus - p) : strlen(p);
        if (out->n >= KVC_MAX_STACK) {
            kvc_spec_free(out);
            return kvc_fail(KVC_ERR_ARG, "KV spec '%s': more than %d stacked methods", text,
                            KVC_MAX_STACK);
        }
        char part[TOKEN_MAX];
        if (len >= sizeof part) {
            kvc_spec_free(out);
            return kvc_fail(KVC_ERR_ARG, "KV spec '%s': part too long", text);
        }
        memcpy(part, p, len);
        part[len] = '\0';
        kvc_status st = parse_layer(part, &out->m[out->n], &out->cfg[out->n]);
        if (st != KVC_OK) {
            kvc_spec_free(out);
            return st;
        }
        out->n++;
        if (!plus) break;
        p = plus + 1;
    }
    const kvc_method *base = out->m[0];
    if (!(base->flags & KVC_METHOD_BASE)) {
        kvc_spec_free(out);
        return kvc_fail(KVC_ERR_ARG, "KV spec '%s': %s can only follow '+' (it modifies a base method)",
                        text, base->name);
    }
    for (int i = 1; i < out->n; i++) {
        const kvc_method *m = out->m[i];
        for (int j = 1; j < i; j++)
            if (out->m[j] == m) {
                const char *mname = m->name;
                kvc_spec_free(out);
                return kvc_fail(KVC_ERR_ARG, "KV spec '%s': modifier %s is stacked twice", text,
                                mname);
            }
        if (!(m->flags & KVC_METHOD_MODIFIER) || !stacks_with(base, m->name)) {
            char ok[256];
            size_t off = 0;
            ok[0] = '\0';
            for (const char *const *q = base->stacks_with; q && *q && off < sizeof ok; q++)
                off += (size_t)snprintf(ok + off, sizeof ok - off, "%s%s", off ? ", " : "", *q);
            const char *mname = m->name;
            kvc_spec_free(out);
            return kvc_fail(KVC_ERR_ARG, "KV spec '%s': %s cannot be stacked on %s; it stacks with: %s",
                            text, mname, base->name, ok[0] ? ok : "(nothing)");
        }
    }
    return KVC_OK;
}

/* The shortest %g spelling that parses back to the same float, so the
 * canonical string of a spec parses to the same cfg ("0.1", not "0.100000001"). */
static int format_float(float x, char *buf, size_t cap) {
    int n = 0;
    for (int prec = 6; prec <= 9; prec++) {
        n = snprintf(buf, cap, "%.*g", prec, (double)x);
        if ((float)strtod(buf, NULL) == x) break;
    }
    return n;
}

static int format_value(const kvc_param *pr, const void *cfg, char *buf, size_t cap) {
    const char *at = (const char *)cfg + pr->offset;
    switch (pr->type) {
    case KVC_PARAM_INT: return snprintf(buf, cap, "%d", *(const int *)at);
    case KVC_PARAM_FLOAT: return format_float(*(const float *)at, buf, cap);
    case KVC_PARAM_BOOL: return snprintf(buf, cap, "%d", *(const int *)at);
    case KVC_PARAM_ENUM: {
        char w[64];
        choice_name(pr->choices, *(const int *)at, w, sizeof w);
        return snprintf(buf, cap, "%s", w);
    }
    case KVC_PARAM_STRING: return snprintf(buf, cap, "%s", at);
    }
    return snprintf(buf, cap, "?");
}

int kvc_spec_format(const kvc_spec *s, char *buf, size_t cap) {
    size_t off = 0;
    char tmp[KVC_PARAM_STR_MAX + 16];
    if (cap) buf[0] = '\0';
#define PUT(...)                                                                                   \
    do {                                                                                           \
        int w_ = snprintf(off < cap ? buf + off : NULL, off < cap ? cap - off : 0, __VA_ARGS__);   \
        off += (size_t)(w_ > 0 ? w_ : 0);                                                          \
    } while (0)
    for (int i = 0; i < s->n; i++) {
        const kvc_method *m = s->m[i];
        PUT("%s%s", i ? "+" : "", m->name);
        for (int j = 0; j < m->n_params; j++) {
            format_value(&m->params[j], s->cfg[i], tmp, sizeof tmp);
            PUT("%s%s=%s", j ? "," : ":", m->params[j].key, tmp);
        }
    }
#undef PUT
    return (int)off;
}

/* ---- public ---------------------------------------------------------------- */

kvc_status kvc_method_validate(const char *spec) {
    kvc_spec s;
    KVC_TRY(kvc_spec_parse(spec, &s));
    kvc_spec_free(&s);
    return KVC_OK;
}

