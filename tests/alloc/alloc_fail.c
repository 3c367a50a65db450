/* Allocation-failure injection for a test-only build of the command
 * (kvcomp_alloctest, linked with -Wl,--wrap=malloc,... so every allocation
 * kvcomp's own code makes goes through here; libc's and OpenBLAS's internal
 * ones do not). Environment:
 *   KVC_ALLOC_FAIL=N    the Nth allocation (1-based, counted in call order
 *                       across threads) returns NULL; every other succeeds
 *   KVC_ALLOC_TRACE=1   print the call stack of the failed allocation (glibc
 *                       backtrace_symbols_fd, which does not allocate)
 *   KVC_ALLOC_REPORT=1  at exit, print "kvc-alloc: C allocations, largest B
 *                       bytes" to stderr (C counts the calls, B the largest
 *                       single request)
 * tests/cli/test_alloc_failure.sh runs a command once to count, then once per
 * N; tests/cli/test_corrupt_models.sh uses the report to bound the largest
 * allocation a refused file causes. strdup/strndup are wrapped as well since
 * libc's copies allocate behind the wrapper's back. */
#include <execinfo.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);

static atomic_ulong g_count;
static atomic_size_t g_largest;
static unsigned long g_fail_at; /* 0: never */
static int g_trace;
static atomic_int g_state;      /* 0: environment not read, 1: reading, 2: read */

static void report(void) {
    fprintf(stderr, "kvc-alloc: %lu allocations, largest %zu bytes\n",
            (unsigned long)atomic_load(&g_count), (size_t)atomic_load(&g_largest));
}

static void read_env(void) {
    int expect = 0;
    if (!atomic_compare_exchange_strong(&g_state, &expect, 1)) {
        while (atomic_load(&g_state) != 2) /* another thread is reading it */
            ;
        return;
    }
    const char *f = getenv("KVC_ALLOC_FAIL"); /* getenv does not allocate */
    g_fail_at = f ? strtoul(f, NULL, 10) : 0;
    const char *tr = getenv("KVC_ALLOC_TRACE");
    g_trace = tr && tr[0] == '1';
    const char *r = getenv("KVC_ALLOC_REPORT");
    if (r && r[0] == '1') atexit(report);
    atomic_store(&g_state, 2);
}

/* Counts one request of n bytes; 1 when it is the one to fail. */
static int fail_this(size_t n) {
    if (atomic_load(&g_state) != 2) read_env();
    unsigned long k = atomic_fetch_add(&g_count, 1) + 1;
    size_t big = atomic_load(&g_largest);
    while (n > big && !atomic_compare_exchange_weak(&g_largest, &big, n))
        ;
    if (k != g_fail_at) return 0;
    if (g_trace) {
        void *frames[32];
        fprintf(stderr, "kvc-alloc: failing allocation %lu (%zu bytes) at\n", k, n);
        backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
    }
    return 1;
}

void *__wrap_malloc(size_t n) {
    return fail_this(n) ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t k, size_t n) {
    size_t bytes = n && k > SIZE_MAX / n ? SIZE_MAX : k * n;
    return fail_this(bytes) ? NULL : __real_calloc(k, n);
}

void *__wrap_realloc(void *p, size_t n) {
    return fail_this(n) ? NULL : __real_realloc(p, n);
}

void *__wrap_aligned_alloc(size_t a, size_t n) {
    return fail_this(n) ? NULL : __real_aligned_alloc(a, n);
}

char *__wrap_strdup(const char *s) {
    return fail_this(strlen(s) + 1) ? NULL : __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n) {
    return fail_this(strnlen(s, n) + 1) ? NULL : __real_strndup(s, n);
}
