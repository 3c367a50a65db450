/* The K/V dump file of `kvcomp dump-kv`, read by `kvcomp bench attn --dump`:
 * a model's post-RoPE keys and values for a text, per layer.
 *
 * Layout (little-endian, no padding):
 *   offset  0  char[8]  magic "KVCDUMP1"
 *           8  u32      version (1)
 *          12  u32      dtype: 0 = f32, 1 = f16 (IEEE half)
 *          16  u32      n_layers
 *          20  u32      n_kv_heads
 *          24  u32      head_dim
 *          28  u32      n_tokens
 *          32  u32      n_heads (query heads of the model, for the GQA shape)
 *          36  u32      reserved, 0
 *          40  payload: for each layer, K [n_tokens][n_kv_heads][head_dim] then
 *                       V [n_tokens][n_kv_heads][head_dim]
 * The file size must be exactly 40 + n_layers * 2 * n_tokens * n_kv_heads *
 * head_dim * sizeof(dtype). Reading is untrusted input: every field is range
 * checked and the size verified before anything is allocated. */
#ifndef KVCOMP_KVDUMP_H
#define KVCOMP_KVDUMP_H

#include <stdint.h>

#include "kvcomp.h"

#define KVC_KVDUMP_HEADER_BYTES 40
#define KVC_KVDUMP_MAX_LAYERS 1024
#define KVC_KVDUMP_MAX_HEADS 1024
#define KVC_KVDUMP_MAX_HEAD_DIM 1024
#define KVC_KVDUMP_MAX_TOKENS (1 << 24)

typedef enum kvc_kvdump_dtype { KVC_KVDUMP_F32 = 0, KVC_KVDUMP_F16 = 1 } kvc_kvdump_dtype;

typedef struct kvc_kvdump_header {
    uint32_t version, dtype, n_layers, n_kv_heads, head_dim, n_tokens, n_heads;
} kvc_kvdump_header;

/* Bytes of the whole file for a header (0 if a field is out of range). */
uint64_t kvc_kvdump_file_bytes(const kvc_kvdump_header *h);

/* ---- writing ---- */
typedef struct kvc_kvdump_writer kvc_kvdump_writer;

/* Creates the file at its full size and writes the header. */
kvc_status kvc_kvdump_create(const char *path, const kvc_kvdump_header *h,
                             kvc_kvdump_writer **out);
/* Writes tokens pos0 .. pos0+n-1 of a layer (k, v [n][n_kv_heads][head_dim]
 * f32); tokens at or past n_tokens are ignored. */
kvc_status kvc_kvdump_write(kvc_kvdump_writer *w, int layer, int pos0, int n, const float *k,
                            const float *v);
/* Closes the file; KVC_ERR_INTERNAL if some (layer, token) was never written. */
kvc_status kvc_kvdump_close(kvc_kvdump_writer *w);
/* Closes and removes a partial file. */
void kvc_kvdump_abort(kvc_kvdump_writer *w);

/* ---- reading ---- */
/* Reads and validates the header and the file size. */
kvc_status kvc_kvdump_read_header(const char *path, kvc_kvdump_header *h);
/* Loads one layer as f32: *k, *v malloc'd [n_tokens][n_kv_heads][head_dim]. */
kvc_status kvc_kvdump_load_layer(const char *path, int layer, kvc_kvdump_header *h, float **k,
                                 float **v);

#endif
