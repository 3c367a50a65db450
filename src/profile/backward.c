/* Backward pass of the Llama-family model for the KVmix profiler (the KVmix paper,
 * "KV Importance Analysis"; backward.h). The forward pass mirrors llama.c
 * (RMSNorm, Q/K/V (+ qwen2 biases), RoPE, causal softmax attention with GQA,
 * output projection, SwiGLU FFN, final norm, output projection) in f32 over a
 * whole prompt with dense exact attention, and keeps every activation; the
 * backward pass propagates the gradient of the mean next-token cross-entropy
 * through every block, and at each layer forms dL/dW_k = dK^T X and
 * dL/dW_v = dV^T X (X the normed block input, dK the gradient of the pre-RoPE
 * keys) to take their Frobenius norms. Products are OpenBLAS sgemm calls on
 * weights dequantised once to f32. */
#include "profile/backward.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "model/wtype.h"

typedef struct bwd_w {
    float *wq, *wk, *wv, *wo, *wg, *wu, *wd; /* f32 copies, [out][in] */
} bwd_w;

typedef struct bwd_act {
    float *x, *xb, *rs1;      /* block input, normed, 1/rms per token */
    float *q, *k, *v;         /* post-RoPE q, k; v */
    float *p;                 /* [n_heads][T][T] attention probabilities */
    float *att;               /* [T][q_dim] attention output */
    float *xm, *xb2, *rs2;    /* after attention residual, normed, 1/rms */
    float *gate, *up, *h;     /* [T][ffn] */
} bwd_act;

struct kvc_bwd {
    const kvc_model *m;
    kvc_config c;
    int max_t, qd, kvd;
    bwd_w *w;
    float *emb, *out;         /* [n_vocab][dim]; out == emb when tied */
    bwd_act *a;               /* [n_layers] */
    float *xl, *xf, *rsf;     /* final residual, normed, 1/rms */
    float *logits;            /* [T][n_vocab] (then its gradient) */
    float *inv_freq;          /* [rope_dim/2] */
    /* gradients / scratch */
    float *dx, *dxm, *dxb, *dh, *dg, *du, *datt, *dq, *dk, *dv, *dp, *gw;
};

static float *falloc(size_t n) { return malloc((n ? n : 1) * sizeof(float)); }

static float *dequant_mat(const kvc_wmat *w) {
    float *f = falloc((size_t)w->rows * (size_t)w->cols);
    if (f) kvc_dequant_rows(w->type, w->data, 0, w->rows, w->cols, f);
    return f;
}

void kvc_bwd_free(kvc_bwd *b) {
    if (!b) return;
    if (b->w) {
        for (int l = 0; l < b->c.n_layers; l++) {
            bwd_w *w = &b->w[l];
            free(w->wq), free(w->wk), free(w->wv), free(w->wo), free(w->wg), free(w->wu), free(w->wd);
        }
    }
    if (b->a) {
        for (int l = 0; l < b->c.n_layers; l++) {
            bwd_act *a = &b->a[l];
            free(a->x), free(a->xb), free(a->rs1), free(a->q), free(a->k), free(a->v), free(a->p);
            free(a->att), free(a->xm), free(a->xb2), free(a->rs2), free(a->gate), free(a->up);
            free(a->h);
        }
    }
    free(b->w);
    free(b->a);
    if (b->out != b->emb) free(b->out);
    free(b->emb);
    free(b->xl), free(b->xf), free(b->rsf), free(b->logits), free(b->inv_freq);
    free(b->dx), free(b->dxm), free(b->dxb), free(b->dh), free(b->dg), free(b->du);
    free(b->datt), free(b->dq), free(b->dk), free(b->dv), free(b->dp), free(b->gw);
    free(b);
}

kvc_status kvc_bwd_create(const kvc_model *m, int max_tokens, kvc_bwd **out) {
    *out = NULL;
    KVC_CHECK(max_tokens >= 2 && max_tokens <= 8192, KVC_ERR_ARG,
              "backward pass: %d tokens per prompt outside [2, 8192]", max_tokens);
    kvc_bwd *b = calloc(1, sizeof *b);
    if (!b) return kvc_fail(KVC_ERR_NOMEM, "backward pass state");
    b->m = m;
    b->c = m->cfg;
    const kvc_config *c = &b->c;
    size_t T = (size_t)max_tokens, dim = (size_t)c->dim, ffn = (size_t)c->ffn_dim;
    b->max_t = max_tokens;
    b->qd = c->n_heads * c->head_dim;
    b->kvd = c->n_kv_heads * c->head_dim;
    int ok = 1;
    b->w = calloc((size_t)c->n_layers, sizeof *b->w);
    b->a = calloc((size_t)c->n_layers, sizeof *b->a);
    ok = b->w && b->a;
    for (int l = 0; ok && l < c->n_layers; l++) {
        const kvc_layer *L = &m->w.layers[l];
        bwd_w *w = &b->w[l];
        w->wq = dequant_mat(&L->wq), w->wk = dequant_mat(&L->wk), w->wv = dequant_mat(&L->wv);
        w->wo = dequant_mat(&L->wo), w->wg = dequant_mat(&L->w_gate), w->wu = dequant_mat(&L->w_up);
        w->wd = dequant_mat(&L->w_down);
        bwd_act *a = &b->a[l];
        a->x = falloc(T * dim), a->xb = falloc(T * dim), a->rs1 = falloc(T);
        a->q = falloc(T * b->qd), a->k = falloc(T * b->kvd), a->v = falloc(T * b->kvd);
        a->p = falloc((size_t)c->n_heads * T * T), a->att = falloc(T * b->qd);
        a->xm = falloc(T * dim), a->xb2 = falloc(T * dim), a->rs2 = falloc(T);
        a->gate = falloc(T * ffn), a->up = falloc(T * ffn), a->h = falloc(T * ffn);
        ok = w->wq && w->wk && w->wv && w->wo && w->wg && w->wu && w->wd && a->x && a->xb &&
             a->rs1 && a->q && a->k && a->v && a->p && a->att && a->xm && a->xb2 && a->rs2 &&
             a->gate && a->up && a->h;
    }
    if (ok) {
        b->emb = dequant_mat(&m->w.tok_embd);
        b->out = m->w.tied ? b->emb : dequant_mat(&m->w.output);
        b->xl = falloc(T * dim), b->xf = falloc(T * dim), b->rsf = falloc(T);
        b->logits = falloc(T * (size_t)c->n_vocab);
        b->inv_freq = falloc((size_t)c->rope_dim / 2);
        b->dx = falloc(T * dim), b->dxm = falloc(T * dim), b->dxb = falloc(T * dim);
        b->dh = falloc(T * ffn), b->dg = falloc(T * ffn), b->du = falloc(T * ffn);
        b->datt = falloc(T * b->qd), b->dq = falloc(T * b->qd);
        b->dk = falloc(T * b->kvd), b->dv = falloc(T * b->kvd);
        b->dp = falloc(T * T), b->gw = falloc((size_t)b->kvd * dim);
        ok = b->emb && b->out && b->xl && b->xf && b->rsf && b->logits && b->inv_freq && b->dx &&
             b->dxm && b->dxb && b->dh && b->dg && b->du && b->datt && b->dq && b->dk && b->dv &&
             b->dp && b->gw;
    }
    if (!ok) {
        kvc_bwd_free(b);
        return kvc_fail(KVC_ERR_NOMEM, "backward pass: cannot allocate weights and activations "
                                       "for %d tokens", max_tokens);
    }
    for (int i = 0; i < c->rope_dim / 2; i++) {
        double f = pow((double)c->rope_base, -2.0 * i / c->rope_dim);
        if (m->w.rope_freqs) f /= m->w.rope_freqs[i];
        b->inv_freq[i] = (float)f;
    }
    *out = b;
    return KVC_OK;
}

float *kvc_bwd_wk(kvc_bwd *b, int layer) { return b->w[layer].wk; }
float *kvc_bwd_wv(kvc_bwd *b, int layer) { return b->w[layer].wv; }

/* ---- building blocks ----------------------------------------------------------- */

/* y[T][out] = x[T][in] W^T, W [out][in]; beta 0 or 1 */
static void lin(const float *x, const float *w, float *y, int T, int in, int out, float beta) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, out, in, 1.0f, x, in, w, in, beta, y, out);
}
/* dx[T][in] (+)= dy[T][out] W */
static void lin_back(const float *dy, const float *w, float *dx, int T, int in, int out, float beta) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, in, out, 1.0f, dy, out, w, in, beta, dx, in);
}

static void rmsnorm_fwd(const float *x, const float *w, float *y, float *rs, int T, int n, float eps) {
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * n;
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)xt[i] * xt[i];
        float s = (float)(1.0 / sqrt(ss / n + eps));
        rs[t] = s;
        for (int i = 0; i < n; i++) y[(size_t)t * n + i] = xt[i] * s * w[i];
    }
}

/* dx += d(rmsnorm)/dx^T dy: g = dy*w; dx = s*g - s^3 x (g.x)/n */
static void rmsnorm_back(const float *x, const float *w, const float *rs, const float *dy, float *dx,
                         int T, int n) {
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * n, *dyt = dy + (size_t)t * n;
        float *dxt = dx + (size_t)t * n;
        double dot = 0;
        for (int i = 0; i < n; i++) dot += (double)dyt[i] * w[i] * xt[i];
        float s = rs[t], c = (float)((double)s * s * s * dot / n);
        for (int i = 0; i < n; i++) dxt[i] += s * dyt[i] * w[i] - c * xt[i];
    }
}

/* Rotates heads of rows [T][n_heads*head_dim] by +angle (dir 1) or -angle (dir -1). */
static void rope_rows(const kvc_bwd *b, float *x, int T, int n_heads, int dir) {
    const kvc_config *c = &b->c;
    int half = c->rope_dim / 2, ld = n_heads * c->head_dim;
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < half; i++) {
            double ang = (double)t * b->inv_freq[i];
            float cs = (float)cos(ang), sn = (float)sin(ang) * (float)dir;
            int i0 = c->rope_layout == KVC_ROPE_NEOX ? i : 2 * i;
            int i1 = c->rope_layout == KVC_ROPE_NEOX ? i + half : 2 * i + 1;
            for (int h = 0; h < n_heads; h++) {
                float *v = x + (size_t)t * ld + (size_t)h * c->head_dim;
                float a = v[i0], bb = v[i1];
                v[i0] = a * cs - bb * sn;
                v[i1] = a * sn + bb * cs;
            }
        }
    }
}

static void add_bias(float *y, const float *bias, int T, int n) {
    if (!bias) return;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < n; i++) y[(size_t)t * n + i] += bias[i];
}

static float silu(float g) { return g / (1.0f + expf(-g)); }

/* ---- forward ------------------------------------------------------------------ */

static kvc_status forward(kvc_bwd *b, const int32_t *tok, int T) {
    const kvc_config *c = &b->c;
    const kvc_model *m = b->m;
    int dim = c->dim, ffn = c->ffn_dim, qd = b->qd, kvd = b->kvd, hd = c->head_dim;
    int G = c->n_heads / c->n_kv_heads;
    float scale = 1.0f / sqrtf((float)hd);
    for (int t = 0; t < T; t++) {
        KVC_CHECK(tok[t] >= 0 && tok[t] < c->n_vocab, KVC_ERR_ARG,
                  "backward pass: token %d at %d outside [0, %d)", tok[t], t, c->n_vocab);
        memcpy(b->a[0].x + (size_t)t * dim, b->emb + (size_t)tok[t] * dim, sizeof(float) * dim);
    }
    for (int l = 0; l < c->n_layers; l++) {
        const kvc_layer *L = &m->w.layers[l];
        const bwd_w *w = &b->w[l];
        bwd_act *a = &b->a[l];
        rmsnorm_fwd(a->x, L->attn_norm, a->xb, a->rs1, T, dim, c->norm_eps);
        lin(a->xb, w->wq, a->q, T, dim, qd, 0);
        lin(a->xb, w->wk, a->k, T, dim, kvd, 0);
        lin(a->xb, w->wv, a->v, T, dim, kvd, 0);
        add_bias(a->q, L->bq, T, qd);
        add_bias(a->k, L->bk, T, kvd);
        add_bias(a->v, L->bv, T, kvd);
        rope_rows(b, a->q, T, c->n_heads, 1);
        rope_rows(b, a->k, T, c->n_kv_heads, 1);
        for (int h = 0; h < c->n_heads; h++) {
            int g = h / G;
            float *P = a->p + (size_t)h * T * T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, scale, a->q + h * hd, qd,
                        a->k + g * hd, kvd, 0.0f, P, T);
            for (int i = 0; i < T; i++) { /* causal softmax of row i over j <= i */
                float *row = P + (size_t)i * T, mx = row[0];
                for (int j = 1; j <= i; j++) mx = row[j] > mx ? row[j] : mx;
                double sum = 0;
                for (int j = 0; j <= i; j++) sum += row[j] = expf(row[j] - mx);
                float inv = (float)(1.0 / sum);
                for (int j = 0; j <= i; j++) row[j] *= inv;
                for (int j = i + 1; j < T; j++) row[j] = 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, 1.0f, P, T,
                        a->v + g * hd, kvd, 0.0f, a->att + h * hd, qd);
        }
        memcpy(a->xm, a->x, sizeof(float) * (size_t)T * dim);
        lin(a->att, w->wo, a->xm, T, qd, dim, 1.0f);
        rmsnorm_fwd(a->xm, L->ffn_norm, a->xb2, a->rs2, T, dim, c->norm_eps);
        lin(a->xb2, w->wg, a->gate, T, dim, ffn, 0);
        lin(a->xb2, w->wu, a->up, T, dim, ffn, 0);
        for (size_t i = 0; i < (size_t)T * ffn; i++) a->h[i] = silu(a->gate[i]) * a->up[i];
        float *next = l + 1 < c->n_layers ? b->a[l + 1].x : b->xl;
        memcpy(next, a->xm, sizeof(float) * (size_t)T * dim);
        lin(a->h, w->wd, next, T, ffn, dim, 1.0f);
    }
    rmsnorm_fwd(b->xl, m->w.out_norm, b->xf, b->rsf, T, dim, c->norm_eps);
    /* logits only for the positions that predict a token */
    lin(b->xf, b->out, b->logits, T - 1, dim, c->n_vocab, 0);
    return KVC_OK;
}

/* Mean cross-entropy over t < T-1; if grad, logits become dL/dlogits. */
static double loss_and_grad(kvc_bwd *b, const int32_t *tok, int T, int grad) {
    int V = b->c.n_vocab, N = T - 1;
    double loss = 0;
    for (int t = 0; t < N; t++) {
        float *l = b->logits + (size_t)t * V, mx = l[0];
        for (int i = 1; i < V; i++) mx = l[i] > mx ? l[i] : mx;
        double sum = 0;
        for (int i = 0; i < V; i++) sum += exp((double)l[i] - mx);
        double lse = mx + log(sum);
        loss += lse - l[tok[t + 1]];
        if (grad) {
            for (int i = 0; i < V; i++) l[i] = (float)(exp((double)l[i] - lse) / N);
            l[tok[t + 1]] -= 1.0f / (float)N;
        }
    }
    return loss / N;
}

kvc_status kvc_bwd_loss(kvc_bwd *b, const int32_t *tokens, int n, double *loss) {
    KVC_CHECK(n >= 2 && n <= b->max_t, KVC_ERR_ARG, "backward pass: %d tokens outside [2, %d]", n,
              b->max_t);
    KVC_TRY(forward(b, tokens, n));
    *loss = loss_and_grad(b, tokens, n, 0);
    return KVC_OK;
}

/* ---- backward ----------------------------------------------------------------- */

static double frob(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s);
}

kvc_status kvc_bwd_run(kvc_bwd *b, const int32_t *tokens, int n, double *loss, double *k_norm,
                       double *v_norm, int grad_layer, float *gk, float *gv) {
    KVC_CHECK(n >= 2 && n <= b->max_t, KVC_ERR_ARG, "backward pass: %d tokens outside [2, %d]", n,
              b->max_t);
    const kvc_config *c = &b->c;
    const kvc_model *m = b->m;
    int T = n, dim = c->dim, ffn = c->ffn_dim, qd = b->qd, kvd = b->kvd, hd = c->head_dim;
    int G = c->n_heads / c->n_kv_heads;
    float scale = 1.0f / sqrtf((float)hd);
    KVC_TRY(forward(b, tokens, T));
    double L = loss_and_grad(b, tokens, T, 1);
    if (loss) *loss = L;

    /* dxf = dlogits Wout (last row: no prediction, zero) -> dx of the final residual */
    memset(b->dxb, 0, sizeof(float) * (size_t)T * dim);
    lin_back(b->logits, b->out, b->dxb, T - 1, dim, c->n_vocab, 0);
    memset(b->dx, 0, sizeof(float) * (size_t)T * dim);
    rmsnorm_back(b->xl, m->w.out_norm, b->rsf, b->dxb, b->dx, T, dim);

    for (int l = c->n_layers - 1; l >= 0; l--) {
        const kvc_layer *LW = &m->w.layers[l];
        const bwd_w *w = &b->w[l];
        bwd_act *a = &b->a[l];
        /* FFN: x_next = xm + down(silu(gate) * up) */
        memcpy(b->dxm, b->dx, sizeof(float) * (size_t)T * dim);
        lin_back(b->dx, w->wd, b->dh, T, ffn, dim, 0);
        for (size_t i = 0; i < (size_t)T * ffn; i++) {
            float g = a->gate[i], sg = 1.0f / (1.0f + expf(-g));
            b->du[i] = b->dh[i] * g * sg;
            b->dg[i] = b->dh[i] * a->up[i] * sg * (1.0f + g * (1.0f - sg));
        }
        lin_back(b->dg, w->wg, b->dxb, T, dim, ffn, 0);
        lin_back(b->du, w->wu, b->dxb, T, dim, ffn, 1.0f);
        rmsnorm_back(a->xm, LW->ffn_norm, a->rs2, b->dxb, b->dxm, T, dim);

        /* attention: xm = x + att Wo^T */
        lin_back(b->dxm, w->wo, b->datt, T, qd, dim, 0);
        memset(b->dk, 0, sizeof(float) * (size_t)T * kvd);
        memset(b->dv, 0, sizeof(float) * (size_t)T * kvd);
        for (int h = 0; h < c->n_heads; h++) {
            int g = h / G;
            const float *P = a->p + (size_t)h * T * T;
            float *dP = b->dp;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, 1.0f, b->datt + h * hd, qd,
                        a->v + g * hd, kvd, 0.0f, dP, T);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, 1.0f, P, T,
                        b->datt + h * hd, qd, 1.0f, b->dv + g * hd, kvd);
            for (int i = 0; i < T; i++) { /* dS = P * (dP - sum_j P dP) * scale */
                const float *pr = P + (size_t)i * T;
                float *dr = dP + (size_t)i * T;
                double dot = 0;
                for (int j = 0; j <= i; j++) dot += (double)pr[j] * dr[j];
                for (int j = 0; j <= i; j++) dr[j] = pr[j] * (dr[j] - (float)dot) * scale;
                for (int j = i + 1; j < T; j++) dr[j] = 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, 1.0f, dP, T,
                        a->k + g * hd, kvd, 0.0f, b->dq + h * hd, qd);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, 1.0f, dP, T,
                        a->q + h * hd, qd, 1.0f, b->dk + g * hd, kvd);
        }
        rope_rows(b, b->dq, T, c->n_heads, -1); /* gradients of the pre-RoPE q, k */
        rope_rows(b, b->dk, T, c->n_kv_heads, -1);

        /* dW_k = dK^T xb, dW_v = dV^T xb */
        for (int which = 0; which < 2; which++) {
            const float *d = which ? b->dv : b->dk;
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kvd, dim, T, 1.0f, d, kvd, a->xb, dim,
                        0.0f, b->gw, dim);
            double nrm = frob(b->gw, (size_t)kvd * dim);
            if (which == 0 && k_norm) k_norm[l] = nrm;
            if (which == 1 && v_norm) v_norm[l] = nrm;
            float *dst = which ? gv : gk;
            if (l == grad_layer && dst) memcpy(dst, b->gw, sizeof(float) * (size_t)kvd * dim);
        }
        if (l == 0) break; /* nothing below the first layer needs a gradient */
        lin_back(b->dq, w->wq, b->dxb, T, dim, qd, 0);
        lin_back(b->dk, w->wk, b->dxb, T, dim, kvd, 1.0f);
        lin_back(b->dv, w->wv, b->dxb, T, dim, kvd, 1.0f);
        memcpy(b->dx, b->dxm, sizeof(float) * (size_t)T * dim);
        rmsnorm_back(a->x, LW->attn_norm, a->rs1, b->dxb, b->dx, T, dim);
    }
    return KVC_OK;
}
