/* Model loading: reads a Llama-family config from GGUF metadata (the
 * <arch>.* keys of the GGUF spec, "LLM" section), binds every weight tensor by
 * its llama.cpp name (token_embd, blk.N.attn_q, ..., output_norm, output),
 * checks its shape and type, and builds the tokenizer. Tensors stay in the
 * mmap'd file; norm weights and biases are converted to f32 copies.
 * Unsupported architectures, weight types and shapes are errors naming the
 * key or the tensor and the value; so is a NaN or Inf weight. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "model/model.h"
#include "model/wtype.h"

/* Architectures of the Llama shape (pre-norm, RMSNorm, RoPE, GQA, SwiGLU). */
typedef struct arch_info {
    const char *name;
    kvc_rope_layout rope;
    int qkv_bias;
} arch_info;

static const arch_info k_archs[] = {
    {"llama", KVC_ROPE_NORM, 0},
    {"qwen2", KVC_ROPE_NEOX, 1},
};

static const arch_info *find_arch(const char *name) {
    for (size_t i = 0; i < sizeof k_archs / sizeof k_archs[0]; i++)
        if (strcmp(k_archs[i].name, name) == 0) return &k_archs[i];
    return NULL;
}

/* <arch>.<suffix> as an integer; `def` when absent (def < 0: required). */
static kvc_status get_int(const kvc_gguf *g, const char *arch, const char *suffix, int64_t def,
                          int64_t lo, int64_t hi, int *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (!kvc_gguf_find(g, key)) {
        KVC_CHECK(def >= 0, KVC_ERR_FORMAT, "missing metadata key %s", key);
        *out = (int)def;
        return KVC_OK;
    }
    uint64_t v;
    KVC_TRY(kvc_gguf_get_u64(g, key, &v));
    KVC_CHECK(v >= (uint64_t)lo && v <= (uint64_t)hi, KVC_ERR_FORMAT,
              "metadata %s: value %llu outside [%lld, %lld]", key, (unsigned long long)v,
              (long long)lo, (long long)hi);
    *out = (int)v;
    return KVC_OK;
}

static kvc_status get_float(const kvc_gguf *g, const char *arch, const char *suffix, float def,
                            float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (!kvc_gguf_find(g, key)) {
        *out = def;
        return KVC_OK;
    }
    KVC_TRY(kvc_gguf_get_f32(g, key, out));
    KVC_CHECK(*out > 0.0f && *out < 1e30f, KVC_ERR_FORMAT, "metadata %s: value %g out of range",
              key, (double)*out);
    return KVC_OK;
}

static kvc_status read_config(const kvc_gguf *g, kvc_config *c, const arch_info **ai) {
    const char *arch;
    KVC_TRY(kvc_gguf_get_str(g, "general.architecture", &arch));
    *ai = find_arch(arch);
    KVC_CHECK(*ai != NULL, KVC_ERR_UNSUPPORTED,
              "general.architecture: \"%s\" is not supported (supported: llama, qwen2)", arch);
    snprintf(c->arch, sizeof c->arch, "%s", arch);
    const int big = 1 << 20;
    KVC_TRY(get_int(g, arch, "block_count", -1, 1, 4096, &c->n_layers));
    KVC_TRY(get_int(g, arch, "embedding_length", -1, 1, big, &c->dim));
    KVC_TRY(get_int(g, arch, "feed_forward_length", -1, 1, big, &c->ffn_dim));
    KVC_TRY(get_int(g, arch, "attention.head_count", -1, 1, 4096, &c->n_heads));
    KVC_TRY(get_int(g, arch, "attention.head_count_kv", c->n_heads, 1, 4096, &c->n_kv_heads));
    KVC_CHECK(c->n_heads % c->n_kv_heads == 0, KVC_ERR_FORMAT,
              "%s.attention.head_count %d is not a multiple of head_count_kv %d", arch, c->n_heads,
              c->n_kv_heads);
    int def_hd = c->dim % c->n_heads == 0 ? c->dim / c->n_heads : -1;
    KVC_TRY(get_int(g, arch, "attention.key_length", def_hd, 2, 1024, &c->head_dim));
    int vlen;
    KVC_TRY(get_int(g, arch, "attention.value_length", c->head_dim, 2, 1024, &vlen));
    KVC_CHECK(vlen == c->head_dim, KVC_ERR_UNSUPPORTED,
              "%s.attention.value_length %d differs from key_length %d", arch, vlen, c->head_dim);
    KVC_CHECK(c->head_dim % 2 == 0, KVC_ERR_FORMAT, "head dimension %d is odd", c->head_dim);
    KVC_TRY(get_int(g, arch, "context_length", 2048, 1, 1 << 24, &c->ctx_train));
    KVC_TRY(get_int(g, arch, "rope.dimension_count", c->head_dim, 2, c->head_dim, &c->rope_dim));
    KVC_CHECK(c->rope_dim % 2 == 0, KVC_ERR_FORMAT, "%s.rope.dimension_count %d is odd", arch,
              c->rope_dim);
    KVC_TRY(get_float(g, arch, "rope.freq_base", 10000.0f, &c->rope_base));
    KVC_TRY(get_float(g, arch, "attention.layer_norm_rms_epsilon", 1e-5f, &c->norm_eps));
    c->rope_layout = (*ai)->rope;

    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (kvc_gguf_find(g, key)) {
        const char *st;
        KVC_TRY(kvc_gguf_get_str(g, key, &st));
        KVC_CHECK(strcmp(st, "none") == 0, KVC_ERR_UNSUPPORTED,
                  "metadata %s: \"%s\" rope scaling is not supported", key, st);
    }
    return KVC_OK;
}

static const kvc_gguf_tensor *tensor(const kvc_gguf *g, const char *name, int required,
                                     kvc_status *st) {
    const kvc_gguf_tensor *t = kvc_gguf_tensor_find(g, name);
    if (!t && required) *st = kvc_fail(KVC_ERR_FORMAT, "missing tensor %s", name);
    return t;
}

static kvc_status check_shape(const kvc_gguf_tensor *t, int64_t ne0, int64_t ne1) {
    int want_dims = ne1 > 0 ? 2 : 1;
    uint64_t n1 = t->n_dims >= 2 ? t->ne[1] : 1;
    int extra = (t->n_dims >= 3 && t->ne[2] != 1) || (t->n_dims >= 4 && t->ne[3] != 1);
    if (t->ne[0] != (uint64_t)ne0 || n1 != (uint64_t)(ne1 > 0 ? ne1 : 1) || extra) {
        if (want_dims == 1)
            return kvc_fail(KVC_ERR_FORMAT, "tensor %s: shape [%llu, %llu] but expected [%lld]",
                            t->name.ptr, (unsigned long long)t->ne[0], (unsigned long long)n1,
                            (long long)ne0);
        return kvc_fail(KVC_ERR_FORMAT, "tensor %s: shape [%llu, %llu] but expected [%lld, %lld]",
                        t->name.ptr, (unsigned long long)t->ne[0], (unsigned long long)n1,
                        (long long)ne0, (long long)ne1);
    }
    return KVC_OK;
}

static kvc_status check_type(const kvc_gguf_tensor *t, int64_t cols, const kvc_wtype **tr) {
    *tr = kvc_wtype_get(t->type);
    KVC_CHECK(*tr != NULL, KVC_ERR_UNSUPPORTED, "tensor %s: unknown weight type %u", t->name.ptr,
              t->type);
    KVC_CHECK((*tr)->supported, KVC_ERR_UNSUPPORTED, "tensor %s: weight type %s (%u) not supported",
              t->name.ptr, (*tr)->name, t->type);
    KVC_CHECK(cols % (*tr)->block == 0, KVC_ERR_FORMAT,
              "tensor %s: row of %lld elements is not a multiple of the %s block (%d)", t->name.ptr,
              (long long)cols, (*tr)->name, (*tr)->block);
    return KVC_OK;
}

/* The first non-finite value among v[0..n), or -1. */
static int64_t first_nonfinite(const float *v, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i])) return i;
    return -1;
}

static kvc_status nonfinite(const char *name, int64_t row, int64_t col, float x) {
    return kvc_fail(KVC_ERR_FORMAT, "tensor %s: %s at row %lld, column %lld (a corrupt file?)",
                    name, isnan(x) ? "NaN" : "Inf", (long long)row, (long long)col);
}

/* A NaN or Inf weight makes every logit NaN and the output garbage: refuse the
 * file at load, naming the tensor. Every row is dequantised once (about 0.1 s
 * for the 135M-parameter default model), which covers the f32/f16/bf16 values
 * and the scales of quantised blocks alike. */
static kvc_status check_finite_mat(const char *name, const kvc_wmat *m) {
    float *row = malloc((size_t)m->cols * sizeof *row);
    KVC_CHECK(row != NULL, KVC_ERR_NOMEM, "tensor %s: cannot allocate a row of %lld floats", name,
              (long long)m->cols);
    const kvc_wtype *tr = kvc_wtype_get(m->type);
    for (int64_t r = 0; r < m->rows; r++) {
        tr->dequant((const char *)m->data + (size_t)r * m->row_bytes, row, m->cols);
        int64_t c = first_nonfinite(row, m->cols);
        if (c >= 0) {
            kvc_status st = nonfinite(name, r, c, row[c]);
            free(row);
            return st;
        }
    }
    free(row);
    return KVC_OK;
}

/* Binds a matrix of `rows` x `cols` (ggml ne = [cols, rows]). */
static kvc_status bind_mat(const kvc_gguf *g, const char *name, int64_t rows, int64_t cols,
                           kvc_wmat *m) {
    kvc_status st = KVC_OK;
    const kvc_gguf_tensor *t = tensor(g, name, 1, &st);
    if (!t) return st;
    KVC_TRY(check_shape(t, cols, rows));
    const kvc_wtype *tr;
    KVC_TRY(check_type(t, cols, &tr));
    m->data = t->data;
    m->type = t->type;
    m->rows = rows;
    m->cols = cols;
    m->row_bytes = kvc_wtype_row_bytes(t->type, cols);
    KVC_CHECK(m->row_bytes > 0 && t->n_bytes >= (uint64_t)rows * m->row_bytes, KVC_ERR_FORMAT,
              "tensor %s: %llu bytes, expected %llu", name, (unsigned long long)t->n_bytes,
              (unsigned long long)((uint64_t)rows * m->row_bytes));
    return check_finite_mat(name, m);
}

/* Loads a 1-D tensor of n elements as an f32 copy (*out NULL if absent and optional). */
static kvc_status load_vec(const kvc_gguf *g, const char *name, int64_t n, int required,
                           float **out) {
    *out = NULL;
    kvc_status st = KVC_OK;
    const kvc_gguf_tensor *t = tensor(g, name, required, &st);
    if (!t) return st;
    KVC_TRY(check_shape(t, n, 0));
    const kvc_wtype *tr;
    KVC_TRY(check_type(t, n, &tr));
    KVC_CHECK(t->n_bytes >= kvc_wtype_row_bytes(t->type, n), KVC_ERR_FORMAT,
              "tensor %s: %llu bytes is too small", name, (unsigned long long)t->n_bytes);
    float *v = malloc((size_t)n * sizeof *v);
    KVC_CHECK(v != NULL, KVC_ERR_NOMEM, "tensor %s: cannot allocate %lld floats", name,
              (long long)n);
    tr->dequant(t->data, v, n);
    int64_t bad = first_nonfinite(v, n);
    if (bad >= 0) {
        kvc_status st = nonfinite(name, 0, bad, v[bad]);
        free(v);
        return st;
    }
    *out = v;
    return KVC_OK;
}

static kvc_status bind_weights(kvc_model *m, const arch_info *ai) {
    const kvc_gguf *g = m->gguf;
    kvc_config *c = &m->cfg;
    kvc_weights *w = &m->w;
    kvc_status st = KVC_OK;

    const kvc_gguf_tensor *te = tensor(g, "token_embd.weight", 1, &st);
    if (!te) return st;
    KVC_CHECK(te->n_dims == 2 && te->ne[1] >= 1 && te->ne[1] <= (1u << 24), KVC_ERR_FORMAT,
              "tensor token_embd.weight: %u dims, %llu rows", te->n_dims,
              (unsigned long long)te->ne[1]);
    c->n_vocab = (int)te->ne[1];
    KVC_TRY(bind_mat(g, "token_embd.weight", c->n_vocab, c->dim, &w->tok_embd));

    char key[128];
    snprintf(key, sizeof key, "%s.vocab_size", c->arch);
    if (kvc_gguf_find(g, key)) {
        uint64_t vs;
        KVC_TRY(kvc_gguf_get_u64(g, key, &vs));
        KVC_CHECK(vs == (uint64_t)c->n_vocab, KVC_ERR_FORMAT,
                  "metadata %s: %llu but token_embd.weight has %d rows", key,
                  (unsigned long long)vs, c->n_vocab);
    }

    KVC_TRY(load_vec(g, "output_norm.weight", c->dim, 1, &w->out_norm));
    if (kvc_gguf_tensor_find(g, "output.weight")) {
        KVC_TRY(bind_mat(g, "output.weight", c->n_vocab, c->dim, &w->output));
        w->tied = 0;
    } else {
        w->output = w->tok_embd;
        w->tied = 1;
    }
    KVC_TRY(load_vec(g, "rope_freqs.weight", c->rope_dim / 2, 0, &w->rope_freqs));

    w->layers = calloc((size_t)c->n_layers, sizeof *w->layers);
    KVC_CHECK(w->layers != NULL, KVC_ERR_NOMEM, "cannot allocate %d layers", c->n_layers);
    const int64_t qd = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv_heads * c->head_dim;
    for (int l = 0; l < c->n_layers; l++) {
        kvc_layer *L = &w->layers[l];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", l, s), n)
        KVC_TRY(load_vec(g, NAME("attn_norm.weight"), c->dim, 1, &L->attn_norm));
        KVC_TRY(bind_mat(g, NAME("attn_q.weight"), qd, c->dim, &L->wq));
        KVC_TRY(bind_mat(g, NAME("attn_k.weight"), kvd, c->dim, &L->wk));
        KVC_TRY(bind_mat(g, NAME("attn_v.weight"), kvd, c->dim, &L->wv));
        KVC_TRY(bind_mat(g, NAME("attn_output.weight"), c->dim, qd, &L->wo));
        KVC_TRY(load_vec(g, NAME("attn_q.bias"), qd, ai->qkv_bias, &L->bq));
        KVC_TRY(load_vec(g, NAME("attn_k.bias"), kvd, ai->qkv_bias, &L->bk));
        KVC_TRY(load_vec(g, NAME("attn_v.bias"), kvd, ai->qkv_bias, &L->bv));
        KVC_TRY(load_vec(g, NAME("ffn_norm.weight"), c->dim, 1, &L->ffn_norm));
        KVC_TRY(bind_mat(g, NAME("ffn_gate.weight"), c->ffn_dim, c->dim, &L->w_gate));
        KVC_TRY(bind_mat(g, NAME("ffn_up.weight"), c->ffn_dim, c->dim, &L->w_up));
        KVC_TRY(bind_mat(g, NAME("ffn_down.weight"), c->dim, c->ffn_dim, &L->w_down));
#undef NAME
    }
    return KVC_OK;
}

void kvc_model_free(kvc_model *m) {
    if (!m) return;
    if (m->w.layers) {
        for (int l = 0; l < m->cfg.n_layers; l++) {
            kvc_layer *L = &m->w.layers[l];
            free(L->attn_norm);
            free(L->ffn_norm);
            free(L->bq);
            free(L->bk);
            free(L->bv);
        }
        free(m->w.layers);
    }
    free(m->w.out_norm);
    free(m->w.rope_freqs);
    kvc_tokenizer_free(m->tok);
    kvc_gguf_close(m->gguf);
    free(m);
}

kvc_status kvc_model_load(const char *path, kvc_model **out) {
    KVC_CHECK(out != NULL && path != NULL, KVC_ERR_ARG, "kvc_model_load: NULL argument");
    *out = NULL;
    kvc_model *m = calloc(1, sizeof *m);
    KVC_CHECK(m != NULL, KVC_ERR_NOMEM, "cannot allocate the model");
    const arch_info *ai = NULL;
    kvc_status st = kvc_gguf_open(path, &m->gguf);
    if (st == KVC_OK) st = read_config(m->gguf, &m->cfg, &ai);
    if (st == KVC_OK) st = bind_weights(m, ai);
    if (st == KVC_OK) st = kvc_tokenizer_load(m->gguf, &m->tok);
    if (st == KVC_OK && kvc_tokenizer_n_vocab(m->tok) > m->cfg.n_vocab)
        st = kvc_fail(KVC_ERR_FORMAT, "tokenizer has %d tokens but token_embd.weight only %d rows",
                      kvc_tokenizer_n_vocab(m->tok), m->cfg.n_vocab);
    if (st != KVC_OK) {
        kvc_model_free(m);
        return st;
    }
    const char *name = "";
    if (kvc_gguf_find(m->gguf, "general.name") &&
        kvc_gguf_get_str(m->gguf, "general.name", &name) != KVC_OK)
        name = "";
    snprintf(m->name, sizeof m->name, "%s", name);
    for (uint64_t i = 0; i < m->gguf->n_tensors; i++) {
        const kvc_gguf_tensor *t = &m->gguf->tensors[i];
        m->n_params += t->n_elements;
        m->weight_bytes += t->n_bytes;
    }
    kvc_clear_error();
    *out = m;
    return KVC_OK;
}

void kvc_model_info_get(const kvc_model *m, kvc_model_info *out) {
    memset(out, 0, sizeof *out);
    const kvc_config *c = &m->cfg;
    out->arch = c->arch;
    out->name = m->name;
    out->n_layers = c->n_layers;
    out->n_heads = c->n_heads;
    out->n_kv_heads = c->n_kv_heads;
    out->head_dim = c->head_dim;
    out->dim = c->dim;
    out->ffn_dim = c->ffn_dim;
    out->n_vocab = c->n_vocab;
    out->ctx_train = c->ctx_train;
    out->rope_base = c->rope_base;
    out->n_params = m->n_params;
    out->weight_bytes = m->weight_bytes;
}

const kvc_tokenizer *kvc_model_tokenizer(const struct kvc_model *m) { return m->tok; }
