/* The weight-type traits table (ggml's type_traits, GGUF spec type ids):
 * names and block sizes of every ggml type id, and for the supported ones the
 * scalar reference kernels of src/model/wt_<type>.c. At first use the active
 * table is a copy of the reference table over which the AVX2 and then AVX-512
 * variants of src/kernels/<isa>/ register, according to kvc_active_isa().
 * Also: row sizes and tile dequantisation for the prefill GEMM. */
#include "model/wt_kernels.h"

#include <pthread.h>

#include "base/cpu.h"

#define KNOWN(nm, blk, bytes)                                                                      \
    { .name = (nm), .block = (blk), .block_bytes = (bytes), .supported = 0 }

/* Ids that ggml has retired (4, 5: q4_2/q4_3; 31-33, 36-38: repacked
 * variants that never appear in files) stay NULL. */
static const kvc_wtype ref_table[KVC_WT_COUNT] = {
    [KVC_WT_F32] = {.name = "f32",
                    .block = 1,
                    .block_bytes = 4,
                    .supported = 1,
                    .act = KVC_ACT_F32,
                    .dequant = kvc_dequant_f32_ref,
                    .dot = kvc_dot_f32_ref,
                    .quantize = kvc_quantize_f32_ref},
    [KVC_WT_F16] = {.name = "f16",
                    .block = 1,
                    .block_bytes = 2,
                    .supported = 1,
                    .act = KVC_ACT_F32,
                    .dequant = kvc_dequant_f16_ref,
                    .dot = kvc_dot_f16_ref,
                    .quantize = kvc_quantize_f16_ref},
    [KVC_WT_Q4_0] = {.name = "q4_0",
                     .block = 32,
                     .block_bytes = 18,
                     .supported = 1,
                     .act = KVC_ACT_Q8_0,
                     .dequant = kvc_dequant_q4_0_ref,
                     .dot = kvc_dot_q4_0_ref,
                     .quantize = kvc_quantize_q4_0_ref},
    [KVC_WT_Q4_1] = {.name = "q4_1",
                     .block = 32,
                     .block_bytes = 20,
                     .supported = 1,
                     .act = KVC_ACT_Q8_0,
                     .dequant = kvc_dequant_q4_1_ref,
                     .dot = kvc_dot_q4_1_ref,
                     .quantize = kvc_quantize_q4_1_ref},
    [6] = KNOWN("q5_0", 32, 22),
    [7] = KNOWN("q5_1", 32, 24),
    [KVC_WT_Q8_0] = {.name = "q8_0",
                     .block = 32,
                     .block_bytes = 34,
                     .supported = 1,
                     .act = KVC_ACT_Q8_0,
                     .dequant = kvc_dequant_q8_0_ref,
                     .dot = kvc_dot_q8_0_ref,
                     .quantize = kvc_quantize_q8_0_ref},
    [KVC_WT_Q8_1] = KNOWN("q8_1", 32, 36),
    [10] = KNOWN("q2_k", 256, 84),
    [11] = KNOWN("q3_k", 256, 110),
    [KVC_WT_Q4_K] = {.name = "q4_k",
                     .block = 256,
                     .block_bytes = 144,
                     .supported = 1,
                     .act = KVC_ACT_Q8_K,
                     .dequant = kvc_dequant_q4_k_ref,
                     .dot = kvc_dot_q4_k_ref,
                     .quantize = kvc_quantize_q4_k_ref},
    [KVC_WT_Q5_K] = {.name = "q5_k",
                     .block = 256,
                     .block_bytes = 176,
                     .supported = 1,
                     .act = KVC_ACT_Q8_K,
                     .dequant = kvc_dequant_q5_k_ref,
                     .dot = kvc_dot_q5_k_ref,
                     .quantize = kvc_quantize_q5_k_ref},
    [KVC_WT_Q6_K] = {.name = "q6_k",
                     .block = 256,
                     .block_bytes = 210,
                     .supported = 1,
                     .act = KVC_ACT_Q8_K,
                     .dequant = kvc_dequant_q6_k_ref,
                     .dot = kvc_dot_q6_k_ref,
                     .quantize = kvc_quantize_q6_k_ref},
    [KVC_WT_Q8_K] = KNOWN("q8_k", 256, 292),
    [16] = KNOWN("iq2_xxs", 256, 66),
    [17] = KNOWN("iq2_xs", 256, 74),
    [18] = KNOWN("iq3_xxs", 256, 98),
    [19] = KNOWN("iq1_s", 256, 50),
    [20] = KNOWN("iq4_nl", 32, 18),
    [21] = KNOWN("iq3_s", 256, 110),
    [22] = KNOWN("iq2_s", 256, 82),
    [23] = KNOWN("iq4_xs", 256, 136),
    [24] = KNOWN("i8", 1, 1),
    [25] = KNOWN("i16", 1, 2),
    [26] = KNOWN("i32", 1, 4),
    [27] = KNOWN("i64", 1, 8),
    [28] = KNOWN("f64", 1, 8),
    [29] = KNOWN("iq1_m", 256, 56),
    [KVC_WT_BF16] = {.name = "bf16",
                     .block = 1,
                     .block_bytes = 2,
                     .supported = 1,
                     .act = KVC_ACT_F32,
                     .dequant = kvc_dequant_bf16_ref,
                     .dot = kvc_dot_bf16_ref,
                     .quantize = kvc_quantize_bf16_ref},
    [34] = KNOWN("tq1_0", 256, 54),
    [35] = KNOWN("tq2_0", 256, 66),
    [39] = KNOWN("mxfp4", 32, 17),
};

static kvc_wtype active_table[KVC_WT_COUNT];
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init_table(void) {
    for (int t = 0; t < KVC_WT_COUNT; t++)
        active_table[t] = ref_table[t];
    kvc_isa isa = kvc_active_isa();
    if (isa >= KVC_ISA_AVX2) {
        kvc_wt_register_float_avx2(active_table);
        kvc_wt_register_q4_0_avx2(active_table);
        kvc_wt_register_q4_1_avx2(active_table);
        kvc_wt_register_q8_0_avx2(active_table);
        kvc_wt_register_q4_k_avx2(active_table);
        kvc_wt_register_q5_k_avx2(active_table);
        kvc_wt_register_q6_k_avx2(active_table);
        kvc_wt_register_act_avx2();
    }
    if (isa >= KVC_ISA_AVX512) {
        kvc_wt_register_float_avx512(active_table);
        kvc_wt_register_q4_0_avx512(active_table);
        kvc_wt_register_q4_1_avx512(active_table);
        kvc_wt_register_q8_0_avx512(active_table);
        kvc_wt_register_q4_k_avx512(active_table);
        kvc_wt_register_q5_k_avx512(active_table);
        kvc_wt_register_q6_k_avx512(active_table);
        kvc_wt_register_act_avx512();
    }
}

void kvc_wt_init(void) {
    pthread_once(&init_once, init_table);
}

const kvc_wtype *kvc_wtype_get(uint32_t type) {
    if (type >= KVC_WT_COUNT) return NULL;
    kvc_wt_init();
    return active_table[type].name ? &active_table[type] : NULL;
}

const kvc_wtype *kvc_wtype_ref(uint32_t type) {
    if (type >= KVC_WT_COUNT) return NULL;
    return ref_table[type].name ? &ref_table[type] : NULL;
}

size_t kvc_wtype_row_bytes(uint32_t type, int64_t n) {
    const kvc_wtype *t = kvc_wtype_ref(type);
    if (!t || t->block <= 0 || n < 0 || n % t->block) return 0;
    return (size_t)(n / t->block) * t->block_bytes;
}

void kvc_dequant_rows(uint32_t type, const void *w, int64_t row0, int64_t nrows, int64_t n,
                      float *out) {
    const kvc_wtype *t = kvc_wtype_get(type);
    size_t rb = kvc_wtype_row_bytes(type, n);
    if (!t || !t->supported || rb == 0) return;
    const uint8_t *p = (const uint8_t *)w + (size_t)row0 * rb;
    for (int64_t r = 0; r < nrows; r++)
        t->dequant(p + (size_t)r * rb, out + r * n, n);
}
