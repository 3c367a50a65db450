/* Shared pieces of the measuring commands' reports: cache stats and the
 * machine as JSON members, the method registry as JSON (`kvcomp methods
 * --json`), canonical method specs, and a short human size ("3.2 MiB"). */
#ifndef KVCOMP_REPORT_H
#define KVCOMP_REPORT_H

#include <stddef.h>

#include "kvcomp/json.h"
#include "kvcomp.h"

/* Members of the open object: "cache": {tokens, payload_bytes, ...}. */
void kvc_report_stats_json(kvc_json *j, const char *key, const kvc_cache_stats *s);

/* "machine": {cpu, cores, isa, threads}; cpu from /proc/cpuinfo. */
void kvc_report_machine_json(kvc_json *j, int n_threads);
/* The CPU model name ("AMD EPYC ...") into buf; "unknown" if not found. */
void kvc_report_cpu_name(char *buf, size_t cap);

/* Bytes the cache holds for its tokens: payload + meta + index + hot window
 * (buffers and scratch excluded: they are not read per token). */
double kvc_report_held_bytes(const kvc_cache_stats *s);

/* The spec with every parameter spelled out ("kivi:bits=2,group=32,...");
 * the input itself if it does not parse. */
void kvc_report_canonical_spec(const char *spec, char *buf, size_t cap);

/* Every method with its parameters as one JSON document. */
void kvc_report_methods_json(kvc_json *j);

/* "1.50 GiB", "3.2 MiB", "812 B". */
void kvc_report_human_bytes(double bytes, char *buf, size_t cap);

#endif
