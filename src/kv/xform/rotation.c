/* Per-segment rotation transform (rotation.h): the incremental second-moment
 * accumulator, its eigendecomposition with LAPACK's dsyevr, and the kvc_xform
 * operations that map queries in, outputs out and stored rows back. */
#include "kv/xform/rotation.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/f16.h"
#include "base/status.h"
#include "kv/xform/rowmat.h"

/* LAPACK (Fortran calling convention; the distribution ships no C header for
 * it beside LAPACKE, which the build does not need). */
void dsyevr_(const char *jobz, const char *range, const char *uplo, const int *n, double *a,
             const int *lda, const double *vl, const double *vu, const int *il, const int *iu,
             const double *abstol, int *m, double *w, double *z, const int *ldz, int *isuppz,
             double *work, const int *lwork, int *iwork, const int *liwork, int *info);

kvc_status kvc_cov_init(kvc_cov *c, int d) {
    KVC_CHECK(d >= 1 && d <= KVC_ROT_MAX_D, KVC_ERR_ARG, "rotation: head_dim %d outside [1, %d]", d,
              KVC_ROT_MAX_D);
    c->d = d;
    c->n = 0;
    c->s = calloc((size_t)d * d, sizeof *c->s);
    return c->s ? KVC_OK : kvc_fail(KVC_ERR_NOMEM, "covariance %d x %d", d, d);
}

void kvc_cov_free(kvc_cov *c) {
    free(c->s);
    c->s = NULL;
}

void kvc_cov_reset(kvc_cov *c) {
    memset(c->s, 0, (size_t)c->d * c->d * sizeof *c->s);
    c->n = 0;
}

enum { SYRK_ROWS = 256 }; /* rows widened to double per BLAS call */

/* Rows t0.. of a batch as one symmetric rank-k update (BLAS dsyrk); false if
 * the double scratch cannot be had (the caller falls back to the loop). */
static int cov_add_blas(kvc_cov *c, const float *x, int n, int ld) {
    int d = c->d;
    double *xd = malloc((size_t)SYRK_ROWS * d * sizeof *xd);
    if (!xd) return 0;
    for (int t0 = 0; t0 < n; t0 += SYRK_ROWS) {
        int m = n - t0 < SYRK_ROWS ? n - t0 : SYRK_ROWS;
        for (int t = 0; t < m; t++)
            for (int i = 0; i < d; i++) xd[(size_t)t * d + i] = x[(size_t)(t0 + t) * ld + i];
        /* row-major upper triangle of xdᵀ·xd */
        cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, d, m, 1.0, xd, d, 1.0, c->s, d);
    }
    free(xd);
    return 1;
}

void kvc_cov_add(kvc_cov *c, const float *x, int n, int ld) {
    int d = c->d;
    double xd[KVC_ROT_MAX_D];
    if (n >= 8 && cov_add_blas(c, x, n, ld)) {
        c->n += n;
        return;
    }
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * ld;
        for (int i = 0; i < d; i++) xd[i] = xt[i];
        for (int i = 0; i < d; i++) {
            double *row = c->s + (size_t)i * d;
            double a = xd[i];
            for (int j = i; j < d; j++) row[j] += a * xd[j];
        }
    }
    c->n += n;
}

kvc_status kvc_cov_eigen(const kvc_cov *c, float *rot, double *eval) {
    int d = c->d;
    /* row-major upper triangle = column-major lower triangle: uplo "L" */
    double *a = malloc((size_t)d * d * sizeof *a), *z = malloc((size_t)d * d * sizeof *z);
    double *w = malloc((size_t)d * sizeof *w);
    int *isuppz = malloc((size_t)2 * d * sizeof *isuppz);
    double wq;
    int iq, info = 0, m = 0, lwork = -1, liwork = -1, il = 1, iu = d;
    double vl = 0, vu = 0, abstol = 0;
    kvc_status st = KVC_OK;
    if (!a || !z || !w || !isuppz) st = kvc_fail(KVC_ERR_NOMEM, "eigendecomposition %d x %d", d, d);
    if (st == KVC_OK) {
        memcpy(a, c->s, (size_t)d * d * sizeof *a);
        dsyevr_("V", "A", "L", &d, a, &d, &vl, &vu, &il, &iu, &abstol, &m, w, z, &d, isuppz, &wq,
                &lwork, &iq, &liwork, &info);
        lwork = (int)wq;
        liwork = iq;
    }
    double *work = st == KVC_OK && info == 0 ? malloc((size_t)lwork * sizeof *work) : NULL;
    int *iwork = work ? malloc((size_t)liwork * sizeof *iwork) : NULL;
    if (st == KVC_OK && info == 0 && !iwork) st = kvc_fail(KVC_ERR_NOMEM, "dsyevr workspace");
    if (st == KVC_OK && info == 0)
        dsyevr_("V", "A", "L", &d, a, &d, &vl, &vu, &il, &iu, &abstol, &m, w, z, &d, isuppz, work,
                &lwork, iwork, &liwork, &info);
    if (st == KVC_OK && (info != 0 || m != d))
        st = kvc_fail(KVC_ERR_INTERNAL, "dsyevr on a %d x %d matrix: info %d, %d eigenvalues", d, d,
                      info, m);
    if (st == KVC_OK) {
        /* z column-major: eigenvector k (ascending) is z[k*d .. k*d+d) */
        for (int j = 0; j < d; j++) {
            int k = d - 1 - j;
            if (eval) eval[j] = w[k];
            for (int i = 0; i < d; i++) rot[(size_t)i * d + j] = (float)z[(size_t)k * d + i];
        }
    }
    free(a); free(z); free(w); free(isuppz); free(work); free(iwork);
    return st;
}

void kvc_cov_channel_order(const kvc_cov *c, float *rot) {
    int d = c->d;
    int order[KVC_ROT_MAX_D];
    for (int i = 0; i < d; i++) order[i] = i;
    for (int i = 1; i < d; i++) { /* insertion sort by decreasing energy, stable */
        int x = order[i], j = i;
        double e = c->s[(size_t)x * d + x];
        while (j > 0 && c->s[(size_t)order[j - 1] * d + order[j - 1]] < e) order[j] = order[j - 1], j--;
        order[j] = x;
    }
    memset(rot, 0, (size_t)d * d * sizeof *rot);
    for (int j = 0; j < d; j++) rot[(size_t)order[j] * d + j] = 1.0f;
}

/* ---- the transform ------------------------------------------------------------ */

/* Stored so that every map is one row-major matrix product: keys map in by
 * rk, values map out by rvt. Both are IEEE half precision: the per-step maps
 * of the query and the output (G rows, the row-block kernel of rowmat.h,
 * several times faster than a BLAS call at G x 64 x 48) stream half the
 * bytes of f32 bases, and every map (encoding, queries, outputs, restoring)
 * uses the same rounded basis, so the stored rows and the mapped queries
 * agree. Rounding costs orthonormality about 2^-11 per element, below what
 * the f16 payload of the packed vectors already rounds away. */
typedef struct rot_state {
    kvc_f16 *rk;  /* [d][dim_k]: columns = kept key basis vectors */
    kvc_f16 *rvt; /* [dim_v][d]: rows = kept value basis vectors */
} rot_state;

enum { TILE_FLOATS = 8192 }; /* f32 copy of a part of a basis (32 KiB on the stack) */

/* y [n][ldy] = x [n][ldx] · op(m) for the many-row maps (segment encoding,
 * restoring): m is f16 row-major, [k][cols] (trans = 0) or [cols][k]
 * (trans = 1), leading dimension ldm. Widened to f32 a tile of m's rows at a
 * time, one sgemm per tile: rows of m are the inner index (trans = 0, the
 * tiles' products summed into y) or the output columns (trans = 1). */
static void matmul(const float *x, int n, int ldx, int trans, const kvc_f16 *m, int ldm, int k,
                   int cols, float *y, int ldy) {
    float tile[TILE_FLOATS];
    int width = trans ? k : cols, rows = trans ? cols : k;
    int step = TILE_FLOATS / width; /* >= 16: width <= KVC_ROT_MAX_D */
    for (int r0 = 0; r0 < rows; r0 += step) {
        int nr = rows - r0 < step ? rows - r0 : step;
        for (int r = 0; r < nr; r++)
            for (int c = 0; c < width; c++)
                tile[(size_t)r * width + c] = kvc_f16_to_f32(m[(size_t)(r0 + r) * ldm + c]);
        if (trans)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, nr, k, 1.0f, x, ldx, tile, width,
                        0.0f, y + r0, ldy);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, cols, nr, 1.0f, x + r0, ldx, tile,
                        width, r0 ? 1.0f : 0.0f, y, ldy);
    }
}

static void rot_prepare_q(const kvc_xform *x, const float *q, int G, int ldq, float *qt, int ldt) {
    const rot_state *r = x->state;
    kvc_rowmat(q, G, ldq, r->rk, x->dim_in, x->dim_k, x->dim_k, qt, ldt);
}

static void rot_finish_out(const kvc_xform *x, const float *ot, int G, int ldt, float *out, int ldo) {
    const rot_state *r = x->state;
    kvc_rowmat(ot, G, ldt, r->rvt, x->dim_v, x->dim_in, x->dim_in, out, ldo);
}

/* The map's rows into L2, one hint per cache line. */
static void rot_prefetch(const kvc_xform *x, int which) {
    const rot_state *r = x->state;
    const char *p = (const char *)(which ? r->rvt : r->rk);
    size_t bytes = (size_t)x->dim_in * (which ? x->dim_v : x->dim_k) * sizeof(kvc_f16);
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 2);
}

static void rot_restore(const kvc_xform *x, int which, const float *xt, int n, int ldt, float *out,
                        int ld) {
    const rot_state *r = x->state;
    if (n <= 0) return;
    if (which) matmul(xt, n, ldt, 0, r->rvt, x->dim_in, x->dim_v, x->dim_in, out, ld);
    else matmul(xt, n, ldt, 1, r->rk, x->dim_k, x->dim_k, x->dim_in, out, ld);
}

static uint64_t rot_bytes(const kvc_xform *x) {
    return sizeof *x + sizeof(rot_state) +
           (uint64_t)x->dim_in * (uint64_t)(x->dim_k + x->dim_v) * sizeof(kvc_f16);
}

static void rot_free(kvc_xform *x) {
    rot_state *r = x->state;
    if (r) {
        free(r->rk);
        free(r->rvt);
        free(r);
    }
    free(x);
}

static const kvc_xform_ops rotation_ops = {
    .name = "rotation",
    .prepare_q = rot_prepare_q,
    .finish_out = rot_finish_out,
    .prefetch = rot_prefetch,
    .restore = rot_restore,
    .bytes = rot_bytes,
    .free = rot_free,
};

/* The first cols columns of basis [d][d] in f16, as [d][cols] or transposed
 * [cols][d]. */
static kvc_f16 *leading_columns(const float *basis, int d, int cols, int transpose) {
    kvc_f16 *m = malloc((size_t)d * cols * sizeof *m);
    if (!m) return NULL;
    for (int i = 0; i < d; i++)
        for (int j = 0; j < cols; j++) {
            kvc_f16 h = kvc_f32_to_f16(basis[(size_t)i * d + j]);
            if (transpose) m[(size_t)j * d + i] = h;
            else m[(size_t)i * cols + j] = h;
        }
    return m;
}

kvc_status kvc_rotation_create(int d, const float *rk, int dim_k, const float *rv, int dim_v,
                               kvc_xform **out) {
    *out = NULL;
    KVC_CHECK(d >= 1 && d <= KVC_ROT_MAX_D, KVC_ERR_ARG, "rotation: head_dim %d outside [1, %d]", d,
              KVC_ROT_MAX_D);
    KVC_CHECK(dim_k >= 1 && dim_k <= d && dim_v >= 1 && dim_v <= d, KVC_ERR_ARG,
              "rotation: kept channels k %d, v %d outside [1, %d]", dim_k, dim_v, d);
    kvc_xform *x = calloc(1, sizeof *x);
    rot_state *r = calloc(1, sizeof *r);
    if (x && r) {
        r->rk = leading_columns(rk, d, dim_k, 0);
        r->rvt = leading_columns(rv, d, dim_v, 1);
    }
    if (!x || !r || !r->rk || !r->rvt) {
        if (r) { free(r->rk); free(r->rvt); }
        free(r);
        free(x);
        return kvc_fail(KVC_ERR_NOMEM, "rotation %d x (%d + %d)", d, dim_k, dim_v);
    }
    x->ops = &rotation_ops;
    atomic_init(&x->refs, 1);
    x->dim_in = d;
    x->dim_k = dim_k;
    x->dim_v = dim_v;
    x->state = r;
    *out = x;
    return KVC_OK;
}

void kvc_rotation_apply(const kvc_xform *x, int which, const float *xin, int n, int ldx, float *xt,
                        int ldt) {
    const rot_state *r = x->state;
    if (n <= 0) return;
    if (which) matmul(xin, n, ldx, 1, r->rvt, x->dim_in, x->dim_in, x->dim_v, xt, ldt);
    else matmul(xin, n, ldx, 0, r->rk, x->dim_k, x->dim_in, x->dim_k, xt, ldt);
}
