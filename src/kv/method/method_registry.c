/* The method registry (docs/design.md §5): one row per method, defined in its own
 * file under src/kv/method/. Adding a method = an extern line and a row here.
 * Also the public listing of the rows (kvc_method_count, kvc_method_get, ...)
 * and kvc_methods_print (kvcomp_eval.h), the text of `kvcomp methods`. */
#include "kv/method/method.h"

#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "kvcomp_eval.h"

extern const kvc_method kvc_method_full;
extern const kvc_method kvc_method_mustafar;
extern const kvc_method kvc_method_h2o;
extern const kvc_method kvc_method_think;
extern const kvc_method kvc_method_kivi;
extern const kvc_method kvc_method_kvmix;
extern const kvc_method kvc_method_quest;
extern const kvc_method kvc_method_packkv;
extern const kvc_method kvc_method_streaming;
extern const kvc_method kvc_method_sentkv;
extern const kvc_method kvc_method_mosaic;
extern const kvc_method kvc_method_rot;
extern const kvc_method kvc_method_tuned;
extern const kvc_method kvc_method_sinks;

const kvc_method *const kvc_method_registry[] = {
    &kvc_method_full,
    &kvc_method_mustafar,
    &kvc_method_h2o,
    &kvc_method_think,
    &kvc_method_kivi,
    &kvc_method_kvmix,
    &kvc_method_quest,
    &kvc_method_packkv,
    &kvc_method_streaming,
    &kvc_method_sentkv,
    &kvc_method_mosaic,
    &kvc_method_rot,
    &kvc_method_tuned,
    &kvc_method_sinks,
    NULL,
};

int kvc_method_count(void) {
    int n = 0;
    while (kvc_method_registry[n]) n++;
    return n;
}

static const char *param_type_name(kvc_param_type t) {
    switch (t) {
    case KVC_PARAM_INT: return "int";
    case KVC_PARAM_FLOAT: return "float";
    case KVC_PARAM_ENUM: return "enum";
    case KVC_PARAM_BOOL: return "bool";
    case KVC_PARAM_STRING: return "string";
    }
    return "?";
}

kvc_status kvc_method_get(int i, kvc_method_info *out) {
    KVC_CHECK(i >= 0 && i < kvc_method_count(), KVC_ERR_RANGE, "method %d: there are %d methods", i,
              kvc_method_count());
    const kvc_method *m = kvc_method_registry[i];
    *out = (kvc_method_info){.name = m->name,
                             .summary = m->summary,
                             .paper = m->paper ? m->paper : "",
                             .base = (m->flags & KVC_METHOD_BASE) != 0,
                             .modifier = (m->flags & KVC_METHOD_MODIFIER) != 0,
                             .n_params = m->n_params,
                             .positional = m->positional};
    return KVC_OK;
}

kvc_status kvc_method_param_get(int i, int j, kvc_method_param *out) {
    kvc_method_info mi;
    KVC_TRY(kvc_method_get(i, &mi));
    KVC_CHECK(j >= 0 && j < mi.n_params, KVC_ERR_RANGE, "method %s: parameter %d of %d", mi.name,
              j, mi.n_params);
    const kvc_param *p = &kvc_method_registry[i]->params[j];
    *out = (kvc_method_param){.key = p->key,
                              .type = param_type_name(p->type),
                              .def = p->def,
                              .min = p->min,
                              .max = p->max,
                              .choices = p->type == KVC_PARAM_ENUM ? p->choices : "",
                              .help = p->help};
    return KVC_OK;
}

const char *const *kvc_method_stacks_with(int i) {
    static const char *const none[] = {NULL};
    if (i < 0 || i >= kvc_method_count() || !kvc_method_registry[i]->stacks_with) return none;
    return kvc_method_registry[i]->stacks_with;
}

void kvc_methods_print(FILE *f) {
    fprintf(f, "KV cache methods: --kv name[:key=value,...][+modifier[:key=value,...]]\n");
    for (int i = 0; i < kvc_method_count(); i++) {
        kvc_method_info m;
        kvc_method_get(i, &m);
        fprintf(f, "\n%s — %s\n", m.name, m.summary);
        if (*m.paper) fprintf(f, "  paper: %s\n", m.paper);
        if (!m.base) fprintf(f, "  modifier only (use after '+')\n");
        const char *const *with = kvc_method_stacks_with(i);
        if (with[0]) {
            fprintf(f, "  stacks with:");
            for (const char *const *w = with; *w; w++) fprintf(f, " +%s", *w);
            fprintf(f, "\n");
        }
        for (int j = 0; j < m.n_params; j++) {
            kvc_method_param p;
            kvc_method_param_get(i, j, &p);
            char range[160];
            if (strcmp(p.type, "int") == 0)
                snprintf(range, sizeof range, "int %.0f..%.0f", p.min, p.max);
            else if (strcmp(p.type, "float") == 0)
                snprintf(range, sizeof range, "float %g..%g", p.min, p.max);
            else if (strcmp(p.type, "enum") == 0)
                snprintf(range, sizeof range, "%s", p.choices);
            else
                snprintf(range, sizeof range, "%s", p.type);
            fprintf(f, "  %-10s default %-8s (%s)%s  %s\n", p.key, *p.def ? p.def : "\"\"", range,
                    j == m.positional ? " [positional]" : "", p.help);
        }
    }
}
