/* The backward pass for the KVmix profiler (the KVmix paper, "KV Importance
 * Analysis", eq. 10-11): a separate f32 forward pass over one prompt that keeps
 * every activation, then backpropagation of the next-token cross-entropy down
 * to the first layer, giving per layer the Frobenius norms of the loss
 * gradient with respect to the key and value projection weights,
 * ||dL/dW_k||_F and ||dL/dW_v||_F. Weights are dequantised to f32 once; all
 * products go through OpenBLAS sgemm. Independent of the KV cache (attention
 * here is dense and exact). */
#ifndef KVC_PROFILE_BACKWARD_H
#define KVC_PROFILE_BACKWARD_H

#include <stdint.h>

#include "model/model.h"

typedef struct kvc_bwd kvc_bwd;

/* Dequantises the model's weights to f32 and allocates activations for
 * prompts of up to max_tokens tokens (memory ~ 0.5 GB for the default model at
 * 512 tokens, plus 4 bytes per weight). */
kvc_status kvc_bwd_create(const kvc_model *m, int max_tokens, kvc_bwd **out);
void kvc_bwd_free(kvc_bwd *b);

/* Forward and backward over tokens[0..n) (2 <= n <= max_tokens). The loss is
 * the mean cross-entropy of predicting tokens[t+1] from tokens[0..t] over
 * t < n-1 (natural log). k_norm, v_norm: [n_layers] gradient norms (may be
 * NULL). If grad_layer >= 0, gk and gv (either may be NULL) receive that
 * layer's full gradients dL/dW_k, dL/dW_v [kv_dim][dim], row-major like the
 * weights (tests compare them with finite differences). */
kvc_status kvc_bwd_run(kvc_bwd *b, const int32_t *tokens, int n, double *loss, double *k_norm,
                       double *v_norm, int grad_layer, float *gk, float *gv);

/* Forward only: the same loss. */
kvc_status kvc_bwd_loss(kvc_bwd *b, const int32_t *tokens, int n, double *loss);

/* The f32 copies of layer l's W_k / W_v [kv_dim][dim] that the pass uses
 * (tests perturb them for finite differences). */
float *kvc_bwd_wk(kvc_bwd *b, int layer);
float *kvc_bwd_wv(kvc_bwd *b, int layer);

#endif
