/* The weight-type traits table (ggml's type_traits, GGUF spec type ids):
 * names and block sizes of the ggml type ids below KVC_WT_COUNT (taken from
 * src/gguf/ggml_types.c), and for the supported ones the scalar reference
 * kernels of src/model/wt_<type>.c. At first use the active
 * table is a copy of the reference table over which the AVX2 and then AVX-512
 * variants of src/kernels/<isa>/ register, according to kvc_active_isa().
 * The activation preparation (wt_act.c) registers the same way. Also: row
 * sizes and tile dequantisation for the prefill GEMM. */
#include "model/wt_kernels.h"

#include <pthread.h>

#include "base/cpu.h"
#include "gguf/gguf.h"

/* The kernels of the supported types. Names and block sizes of every id come
 * from the one ggml type table, src/gguf/ggml_types.c, when the tables are
 * set up; ids it does not know (retired by ggml) stay NULL. */
static kvc_wtype ref_table[KVC_WT_COUNT] = {
    [KVC_WT_F32] = {.supported = 1,
                    .act = KVC_ACT_F32,
                    .dequant = kvc_dequant_f32_ref,
                    .dot = kvc_dot_f32_ref,
                    .quantize = kvc_quantize_f32_ref},
    [KVC_WT_F16] = {.supported = 1,
                    .act = KVC_ACT_F32,
                    .dequant = kvc_dequant_f16_ref,
                    .dot = kvc_dot_f16_ref,
                    .quantize = kvc_quantize_f16_ref},
    [KVC_WT_Q4_0] = {.supported = 1,
                     .act = KVC_ACT_Q8_0,
                     .dequant = kvc_dequant_q4_0_ref,
                     .dot = kvc_dot_q4_0_ref,
                     .quantize = kvc_quantize_q4_0_ref},
    [KVC_WT_Q4_1] = {.supported = 1,
                     .act = KVC_ACT_Q8_0,
                     .dequant = kvc_dequant_q4_1_ref,
                     .dot = kvc_dot_q4_1_ref,
                     .quantize = kvc_quantize_q4_1_ref},
    [KVC_WT_Q5_0] = {.supported = 1,
                     .act = KVC_ACT_Q8_0,
                     .dequant = kvc_dequant_q5_0_ref,
                     .dot = kvc_dot_q5_0_ref,
                     .quantize = kvc_quantize_q5_0_ref},
    [KVC_WT_Q8_0] = {.supported = 1,
                     .act = KVC_ACT_Q8_0,
                     .dequant = kvc_dequant_q8_0_ref,
                     .dot = kvc_dot_q8_0_ref,
                     .quantize = kvc_quantize_q8_0_ref},
    [KVC_WT_Q4_K] = {.supported = 1,
                     .act = KVC_ACT_Q8_K,
                     .dequant = kvc_dequant_q4_k_ref,
                     .dot = kvc_dot_q4_k_ref,
                     .quantize = kvc_quantize_q4_k_ref},
    [KVC_WT_Q5_K] = {.supported = 1,
                     .act = KVC_ACT_Q8_K,
                     .dequant = kvc_dequant_q5_k_ref,
                     .dot = kvc_dot_q5_k_ref,
                     .quantize = kvc_quantize_q5_k_ref},
    [KVC_WT_Q6_K] = {.supported = 1,
                     .act = KVC_ACT_Q8_K,
                     .dequant = kvc_dequant_q6_k_ref,
                     .dot = kvc_dot_q6_k_ref,
                     .quantize = kvc_quantize_q6_k_ref},
    [KVC_WT_BF16] = {.supported = 1,
                     .act = KVC_ACT_F32,
                     .dequant = kvc_dequant_bf16_ref,
                     .dot = kvc_dot_bf16_ref,
                     .quantize = kvc_quantize_bf16_ref},
};

static kvc_wtype active_table[KVC_WT_COUNT];
kvc_act_fn kvc_act_q8_0_active = kvc_act_q8_0_ref;
kvc_act_fn kvc_act_q8_k_active = kvc_act_q8_k_ref;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init_table(void) {
    for (uint32_t t = 0; t < KVC_WT_COUNT; t++) {
        uint32_t block, block_bytes;
        if (kvc_ggml_type_block(t, &block, &block_bytes)) {
            ref_table[t].name = kvc_ggml_type_name(t);
            ref_table[t].block = (int)block;
            ref_table[t].block_bytes = block_bytes;
        }
        active_table[t] = ref_table[t];
    }
    kvc_isa isa = kvc_active_isa();
    if (isa >= KVC_ISA_AVX2) {
        kvc_wt_register_float_avx2(active_table);
        kvc_wt_register_q4_0_avx2(active_table);
        kvc_wt_register_q4_1_avx2(active_table);
        kvc_wt_register_q5_0_avx2(active_table);
        kvc_wt_register_q8_0_avx2(active_table);
        kvc_wt_register_q4_k_avx2(active_table);
        kvc_wt_register_q5_k_avx2(active_table);
        kvc_wt_register_q6_k_avx2(active_table);
        kvc_wt_register_act_avx2(&kvc_act_q8_0_active, &kvc_act_q8_k_active);
    }
    if (isa >= KVC_ISA_AVX512) {
        kvc_wt_register_float_avx512(active_table);
        kvc_wt_register_q4_0_avx512(active_table);
        kvc_wt_register_q4_1_avx512(active_table);
        kvc_wt_register_q5_0_avx512(active_table);
        kvc_wt_register_q8_0_avx512(active_table);
        kvc_wt_register_q4_k_avx512(active_table);
        kvc_wt_register_q5_k_avx512(active_table);
        kvc_wt_register_q6_k_avx512(active_table);
        kvc_wt_register_act_avx512(&kvc_act_q8_0_active, &kvc_act_q8_k_active);
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
    kvc_wt_init();
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

void kvc_act_prepare(kvc_act_fmt fmt, const float *x, void *buf, int64_t n) {
    kvc_wt_init(); /* make sure the SIMD variants are registered */
    kvc_act_prepare_with(fmt, x, buf, n, kvc_act_q8_0_active, kvc_act_q8_k_active);
}
