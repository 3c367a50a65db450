/* CPU feature detection with cpuid/xgetbv (via GCC's builtins), and the
 * KVC_ISA override that forces a lower level for tests and comparisons.
 * AVX2 level: AVX2+FMA+F16C+BMI1+BMI2. AVX-512 level: F+BW+DQ+VL+VBMI+VBMI2+VNNI+BF16+GFNI,
 * the set the kernels in src/kernels/avx512 are compiled for. */
#include "base/cpu.h"

#include <cpuid.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

kvc_isa kvc_cpu_isa(void) {
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
    int avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                 __builtin_cpu_supports("avx512vbmi") &&
                 __builtin_cpu_supports("avx512vbmi2") && __builtin_cpu_supports("avx512vnni") &&
                 __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("gfni");
    return avx512 ? KVC_ISA_AVX512 : avx2 ? KVC_ISA_AVX2 : KVC_ISA_SCALAR;
}

int kvc_cpu_fast_pdep(void) {
    const char *env = getenv("KVC_PDEP");
    if (env && (strcmp(env, "0") == 0 || strcmp(env, "1") == 0)) return env[0] == '1';
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("bmi2")) return 0;
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return 0;
    const int amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u; /* "AuthenticAMD" */
    if (!amd) return 1;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    unsigned family = (a >> 8) & 0xf;
    if (family == 0xf) family += (a >> 20) & 0xff; /* extended family */
    return family >= 0x19;
}

static kvc_isa active = KVC_ISA_SCALAR;
static pthread_once_t active_once = PTHREAD_ONCE_INIT;

static void detect_active(void) {
    kvc_isa cpu = kvc_cpu_isa();
    kvc_isa want = cpu;
    const char *env = getenv("KVC_ISA");
    if (env && strcmp(env, "scalar") == 0) want = KVC_ISA_SCALAR;
    else if (env && strcmp(env, "avx2") == 0) want = KVC_ISA_AVX2;
    else if (env && strcmp(env, "avx512") == 0) want = KVC_ISA_AVX512;
    active = want < cpu ? want : cpu;
}

kvc_isa kvc_active_isa(void) {
    pthread_once(&active_once, detect_active);
    return active;
}

const char *kvc_isa_name(kvc_isa isa) {
    switch (isa) {
    case KVC_ISA_SCALAR: return "scalar";
    case KVC_ISA_AVX2: return "avx2";
    case KVC_ISA_AVX512: return "avx512";
    }
    return "unknown";
}
