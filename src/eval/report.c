/* Report helpers shared by eval, bench and methods (see include/kvcomp/report.h).
 * The methods' JSON comes from the public listing (kvc_method_get), as the
 * text of kvc_methods_print does, so `kvcomp methods --json` lists exactly what
 * `kvcomp methods` prints. */
#include "kvcomp/report.h"

#include "kvcomp_eval.h"

#include <stdio.h>
#include <string.h>

#include "kv/method/method.h"

void kvc_report_stats_json(kvc_json *j, const char *key, const kvc_cache_stats *s) {
    kvc_json_key(j, key);
    kvc_json_obj_begin(j);
    kvc_json_kv_uint(j, "tokens", s->tokens);
    kvc_json_kv_uint(j, "context_tokens", s->context_tokens);
    kvc_json_kv_uint(j, "window_tokens", s->window_tokens);
    kvc_json_kv_uint(j, "payload_bytes", s->payload_bytes);
    kvc_json_kv_uint(j, "meta_bytes", s->meta_bytes);
    kvc_json_kv_uint(j, "index_bytes", s->index_bytes);
    kvc_json_kv_uint(j, "window_bytes", s->window_bytes);
    kvc_json_kv_uint(j, "buffer_bytes", s->buffer_bytes);
    kvc_json_kv_uint(j, "in_use_bytes", s->in_use_bytes);
    kvc_json_kv_uint(j, "reserved_bytes", s->reserved_bytes);
    kvc_json_kv_num(j, "bytes_per_token", s->bytes_per_token);
    kvc_json_kv_num(j, "bits_per_element", s->bits_per_element);
    kvc_json_kv_num(j, "ratio_vs_f16", s->ratio_vs_f16);
    kvc_json_kv_num(j, "read_fraction", s->read_fraction);
    kvc_json_kv_num(j, "reuse_rate", s->reuse_rate);
    kvc_json_kv_uint(j, "far_bytes", s->far_bytes);
    kvc_json_kv_uint(j, "far_read_bytes", s->far_read_bytes);
    kvc_json_kv_num(j, "far_read_s", s->far_read_s);
    kvc_json_kv_uint(j, "far_reused_bytes", s->far_reused_bytes);
    kvc_json_kv_uint(j, "far_near_bytes", s->far_near_bytes);
    kvc_json_kv_uint(j, "bg_jobs", s->bg_jobs);
    kvc_json_kv_num(j, "bg_busy_s", s->bg_busy_s);
    kvc_json_kv_uint(j, "bg_pending_steps", s->bg_pending_steps);
    kvc_json_kv_uint(j, "bg_waits", s->bg_waits);
    kvc_json_obj_end(j);
}

double kvc_report_held_bytes(const kvc_cache_stats *s) {
    return (double)s->payload_bytes + (double)s->meta_bytes + (double)s->index_bytes +
           (double)s->window_bytes;
}

void kvc_report_cpu_name(char *buf, size_t cap) {
    snprintf(buf, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        char *c = strchr(line, ':');
        if (!c) continue;
        c++;
        while (*c == ' ' || *c == '\t') c++;
        c[strcspn(c, "\n")] = '\0';
        snprintf(buf, cap, "%s", c);
        break;
    }
    fclose(f);
}

void kvc_report_machine_json(kvc_json *j, int n_threads) {
    char cpu[256];
    kvc_report_cpu_name(cpu, sizeof cpu);
    kvc_json_key(j, "machine");
    kvc_json_obj_begin(j);
    kvc_json_kv_str(j, "cpu", cpu);
    kvc_json_kv_int(j, "cpus", kvc_default_threads());
    kvc_json_kv_str(j, "isa", kvc_isa_name(kvc_active_isa()));
    kvc_json_kv_int(j, "threads", kvc_threads_resolve(n_threads));
    kvc_json_obj_end(j);
}

void kvc_report_canonical_spec(const char *spec, char *buf, size_t cap) {
    kvc_spec s;
    if (kvc_spec_parse(spec, &s) != KVC_OK) {
        snprintf(buf, cap, "%s", spec);
        return;
    }
    kvc_spec_format(&s, buf, cap);
    kvc_spec_free(&s);
}

void kvc_report_methods_json(kvc_json *j) {
    kvc_json_obj_begin(j);
    kvc_json_key(j, "methods");
    kvc_json_arr_begin(j);
    for (int i = 0; i < kvc_method_count(); i++) {
        kvc_method_info m;
        kvc_method_get(i, &m);
        kvc_json_obj_begin(j);
        kvc_json_kv_str(j, "name", m.name);
        kvc_json_kv_str(j, "summary", m.summary);
        kvc_json_kv_str(j, "paper", m.paper);
        kvc_json_kv_bool(j, "base", m.base);
        kvc_json_kv_bool(j, "modifier", m.modifier);
        kvc_json_key(j, "stacks_with");
        kvc_json_arr_begin(j);
        for (const char *const *w = kvc_method_stacks_with(i); *w; w++) kvc_json_str(j, *w);
        kvc_json_arr_end(j);
        kvc_json_key(j, "params");
        kvc_json_arr_begin(j);
        for (int k = 0; k < m.n_params; k++) {
            kvc_method_param p;
            kvc_method_param_get(i, k, &p);
            kvc_json_obj_begin(j);
            kvc_json_kv_str(j, "key", p.key);
            kvc_json_kv_str(j, "type", p.type);
            kvc_json_kv_str(j, "default", p.def);
            if (strcmp(p.type, "int") == 0 || strcmp(p.type, "float") == 0) {
                kvc_json_kv_num(j, "min", p.min);
                kvc_json_kv_num(j, "max", p.max);
            }
            if (strcmp(p.type, "enum") == 0) kvc_json_kv_str(j, "choices", p.choices);
            kvc_json_kv_bool(j, "positional", k == m.positional);
            kvc_json_kv_str(j, "help", p.help);
            kvc_json_obj_end(j);
        }
        kvc_json_arr_end(j);
        kvc_json_obj_end(j);
    }
    kvc_json_arr_end(j);
    kvc_json_obj_end(j);
}

void kvc_report_human_bytes(double b, char *buf, size_t cap) {
    if (b >= 1024.0 * 1024 * 1024) snprintf(buf, cap, "%.2f GiB", b / (1024.0 * 1024 * 1024));
    else if (b >= 1024.0 * 1024) snprintf(buf, cap, "%.1f MiB", b / (1024.0 * 1024));
    else if (b >= 1024.0) snprintf(buf, cap, "%.1f KiB", b / 1024.0);
    else snprintf(buf, cap, "%.0f B", b);
}
