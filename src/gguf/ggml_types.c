/* The ggml tensor-type table as GGUF files use it: name, elements per block
 * and bytes per block for every id ggml defines (ggml.h `enum ggml_type`,
 * block structs in ggml-common.h). The reader needs it to check each tensor's
 * byte size against the file, including types kvcomp has no kernels for; the
 * weight traits table (src/model/wtype.c) takes its names and block sizes from
 * here, so there is one list. Ids that ggml removed (4, 5, 31-33, 36-38) are
 * unknown here, as they are to ggml. */
#include "gguf/gguf.h"

#include <assert.h>

typedef struct ggml_type_row {
    const char *name;
    uint32_t block;       /* elements per block */
    uint32_t block_bytes; /* bytes per block */
} ggml_type_row;

#define QK_K 256

static const ggml_type_row ggml_types[] = {
    [0] = {"f32", 1, 4},
    [1] = {"f16", 1, 2},
    [2] = {"q4_0", 32, 2 + 16},         /* d, 32 nibbles */
    [3] = {"q4_1", 32, 2 + 2 + 16},     /* d, m, 32 nibbles */
    [6] = {"q5_0", 32, 2 + 4 + 16},     /* d, qh, nibbles */
    [7] = {"q5_1", 32, 2 + 2 + 4 + 16}, /* d, m, qh, nibbles */
    [8] = {"q8_0", 32, 2 + 32},
    [9] = {"q8_1", 32, 2 + 2 + 32},
    [10] = {"q2_k", QK_K, QK_K / 16 + QK_K / 4 + 2 + 2},        /* 84 */
    [11] = {"q3_k", QK_K, QK_K / 8 + QK_K / 4 + 12 + 2},        /* 110 */
    [12] = {"q4_k", QK_K, 2 + 2 + 12 + QK_K / 2},               /* 144 */
    [13] = {"q5_k", QK_K, 2 + 2 + 12 + QK_K / 8 + QK_K / 2},    /* 176 */
    [14] = {"q6_k", QK_K, QK_K / 2 + QK_K / 4 + QK_K / 16 + 2}, /* 210 */
    [15] = {"q8_k", QK_K, 4 + QK_K + QK_K / 16 * 2},            /* 292 */
    [16] = {"iq2_xxs", QK_K, 2 + QK_K / 8 * 2},                 /* 66 */
    [17] = {"iq2_xs", QK_K, 2 + QK_K / 8 * 2 + QK_K / 32},      /* 74 */
    [18] = {"iq3_xxs", QK_K, 2 + 3 * QK_K / 8},                 /* 98 */
    [19] = {"iq1_s", QK_K, 2 + QK_K / 8 + QK_K / 32 * 2},       /* 50 */
    [20] = {"iq4_nl", 32, 2 + 16},
    [21] = {"iq3_s", QK_K, 2 + QK_K / 4 + QK_K / 32 + QK_K / 8 + QK_K / 64}, /* 110 */
    [22] = {"iq2_s", QK_K, 2 + QK_K / 4 + QK_K / 32 + QK_K / 32},            /* 82 */
    [23] = {"iq4_xs", QK_K, 2 + 2 + QK_K / 64 + QK_K / 2},                   /* 136 */
    [24] = {"i8", 1, 1},
    [25] = {"i16", 1, 2},
    [26] = {"i32", 1, 4},
    [27] = {"i64", 1, 8},
    [28] = {"f64", 1, 8},
    [29] = {"iq1_m", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32}, /* 56 */
    [30] = {"bf16", 1, 2},
    [34] = {"tq1_0", QK_K, (QK_K - 4 * QK_K / 64) / 5 + QK_K / 64 + 2}, /* 54 */
    [35] = {"tq2_0", QK_K, QK_K / 4 + 2},                               /* 66 */
    [39] = {"mxfp4", 32, 1 + 16},
    [40] = {"nvfp4", 64, 4 + 32},
    [41] = {"q1_0", 128, 2 + 16},
};

/* The block sizes every kernel file relies on (ggml-common.h static_asserts). */
static_assert(QK_K / 16 + QK_K / 4 + 2 + 2 == 84, "q2_k block");
static_assert(QK_K / 8 + QK_K / 4 + 12 + 2 == 110, "q3_k block");
static_assert(2 + 2 + 12 + QK_K / 2 == 144, "q4_k block");
static_assert(2 + 2 + 12 + QK_K / 8 + QK_K / 2 == 176, "q5_k block");
static_assert(QK_K / 2 + QK_K / 4 + QK_K / 16 + 2 == 210, "q6_k block");
static_assert(4 + QK_K + QK_K / 16 * 2 == 292, "q8_k block");
static_assert((QK_K - 4 * QK_K / 64) / 5 + QK_K / 64 + 2 == 54, "tq1_0 block");

#define N_TYPES (sizeof ggml_types / sizeof ggml_types[0])

const char *kvc_ggml_type_name(uint32_t type) {
    return type < N_TYPES ? ggml_types[type].name : NULL;
}

int kvc_ggml_type_block(uint32_t type, uint32_t *block, uint32_t *block_bytes) {
    if (type >= N_TYPES || ggml_types[type].name == NULL) return 0;
    if (block) *block = ggml_types[type].block;
    if (block_bytes) *block_bytes = ggml_types[type].block_bytes;
    return 1;
}
