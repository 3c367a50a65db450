/* Peak resident set size and its reset (see rss.h). */
#include "base/rss.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

int kvc_peak_rss_reset(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return -1;
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

int64_t kvc_peak_rss_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (f) {
        char line[256];
        long long kib = -1;
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "VmHWM:", 6) == 0 && sscanf(line + 6, "%lld", &kib) == 1) break;
        fclose(f);
        if (kib >= 0) return (int64_t)kib * 1024;
    }
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (int64_t)ru.ru_maxrss * 1024 : 0;
}
