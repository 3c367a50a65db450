/* The far store and its codec (far.h): regions of f16 rows in a file, block
 * checksums in RAM, verified reads into scratch, then the dense f16 kernels
 * on the scratch rows. With the near buffer on, the blocks an attention read
 * fetched stay in a block pool (per blob an id per block, -1 = on disk) until
 * the method's next selection drops them (kvc_far_near_keep). */
#define _GNU_SOURCE /* pread, pwrite */
#include "kv/codec/far.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/f16.h"
#include "base/hash.h"
#include "base/status.h"
#include "kvcomp/progress.h" /* kvc_now_s */
#include "kv/codec/block_pool.h"
#include "kv/codec/dense.h"

static const char FAR_MAGIC[8] = {'K', 'V', 'C', 'F', 'A', 'R', '0', '1'};

struct kvc_far {
    int fd;
    char path[256];
    atomic_llong end;         /* next free offset */
    atomic_ullong read, read_ns, reused;
    int near_on;              /* keep read blocks in the near buffer */
    pthread_mutex_t nmu;      /* guards pool and every blob's near ids */
    kvc_block_pool pool;      /* near buffer: blocks of KVC_FAR_BLOCK bytes */
    pthread_mutex_t mu;       /* guards err */
    kvc_status err;
    char msg[640];
};

typedef struct far_blob {
    int64_t off;              /* region start in the file */
    int n, dim;
    int n_blocks;
    int32_t *near;            /* [n_blocks] pool id of a block in RAM, -1 = on disk; NULL = none yet */
    uint64_t sum[];           /* [n_blocks] */
} far_blob;

kvc_status kvc_far_open(const char *path, kvc_far **out) {
    *out = NULL;
    KVC_CHECK(path && *path && strlen(path) < sizeof((kvc_far *)0)->path, KVC_ERR_ARG,
              "far store: path '%s' is empty or longer than 255 bytes", path ? path : "");
    kvc_far *f = calloc(1, sizeof *f);
    if (!f) return kvc_fail(KVC_ERR_NOMEM, "far store");
    f->fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (f->fd < 0) {
        kvc_status st = kvc_fail(KVC_ERR_IO, "far store '%s': %s", path, strerror(errno));
        free(f);
        return st;
    }
    snprintf(f->path, sizeof f->path, "%s", path);
    pthread_mutex_init(&f->mu, NULL);
    pthread_mutex_init(&f->nmu, NULL);
    kvc_block_pool_init(&f->pool, KVC_FAR_BLOCK);
    if (pwrite(f->fd, FAR_MAGIC, sizeof FAR_MAGIC, 0) != (ssize_t)sizeof FAR_MAGIC) {
        kvc_status st = kvc_fail(KVC_ERR_IO, "far store '%s': writing the header: %s", path, strerror(errno));
        kvc_far_close(f);
        return st;
    }
    atomic_store(&f->end, (long long)sizeof FAR_MAGIC);
    *out = f;
    return KVC_OK;
}

void kvc_far_close(kvc_far *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    pthread_mutex_destroy(&f->mu);
    pthread_mutex_destroy(&f->nmu);
    kvc_block_pool_free(&f->pool);
    free(f);
}

static void record(kvc_far *f, kvc_status st, const char *msg) {
    pthread_mutex_lock(&f->mu);
    if (f->err == KVC_OK) {
        f->err = st;
        snprintf(f->msg, sizeof f->msg, "%s", msg);
    }
    pthread_mutex_unlock(&f->mu);
}

kvc_status kvc_far_take_error(kvc_far *f) {
    pthread_mutex_lock(&f->mu);
    kvc_status st = f->err;
    char msg[sizeof f->msg];
    memcpy(msg, f->msg, sizeof msg);
    f->err = KVC_OK;
    pthread_mutex_unlock(&f->mu);
    return st == KVC_OK ? KVC_OK : kvc_fail(st, "%s", msg);
}

void kvc_far_stats_get(kvc_far *f, kvc_far_stats *out) {
    out->stored = (uint64_t)atomic_load(&f->end);
    out->read = atomic_load(&f->read);
    out->read_s = (double)atomic_load(&f->read_ns) * 1e-9;
    out->reused = atomic_load(&f->reused);
    pthread_mutex_lock(&f->nmu);
    out->near = (uint64_t)f->pool.used * KVC_FAR_BLOCK;
    pthread_mutex_unlock(&f->nmu);
}

void kvc_far_set_near(kvc_far *f, int on) { f->near_on = on; }

static kvc_far *store_of(const kvc_codec *c) { return (kvc_far *)c->cfg; }
static size_t row_bytes(const far_blob *b) { return (size_t)b->dim * sizeof(kvc_f16); }
static size_t region_bytes(const far_blob *b) { return (size_t)b->n * row_bytes(b); }

static kvc_status far_encode(const kvc_codec *c, const float *x, int n, int ld, void **blob) {
    *blob = NULL;
    kvc_far *f = store_of(c);
    KVC_CHECK(f, KVC_ERR_INTERNAL, "far codec without a store");
    KVC_CHECK(n >= 0 && c->dim >= 1, KVC_ERR_ARG, "far codec: %d rows of %d", n, c->dim);
    size_t bytes = (size_t)n * c->dim * sizeof(kvc_f16);
    int nb = (int)((bytes + KVC_FAR_BLOCK - 1) / KVC_FAR_BLOCK);
    far_blob *b = malloc(sizeof *b + (size_t)nb * sizeof(uint64_t));
    kvc_f16 *rows = malloc(bytes ? bytes : 1);
    if (!b || !rows) {
        free(b), free(rows);
        return kvc_fail(KVC_ERR_NOMEM, "far blob of %d rows", n);
    }
    *b = (far_blob){.n = n, .dim = c->dim, .n_blocks = nb};
    for (int i = 0; i < n; i++) kvc_dense_k.put[KVC_DENSE_F16](x + (size_t)i * ld, (size_t)c->dim, rows + (size_t)i * c->dim);
    b->off = atomic_fetch_add(&f->end, (long long)bytes);
    for (int k = 0; k < nb; k++) {
        size_t o = (size_t)k * KVC_FAR_BLOCK, len = bytes - o < KVC_FAR_BLOCK ? bytes - o : KVC_FAR_BLOCK;
        b->sum[k] = kvc_hash64((const char *)rows + o, len, (uint64_t)b->off + o);
    }
    size_t done = 0;
    while (done < bytes) {
        ssize_t w = pwrite(f->fd, (const char *)rows + done, bytes - done, b->off + (off_t)done);
        if (w <= 0) {
            kvc_status st = kvc_fail(KVC_ERR_IO, "far store '%s': writing %zu bytes at %lld: %s", f->path, bytes,
                                     (long long)b->off, w < 0 ? strerror(errno) : "no progress");
            free(b), free(rows);
            return st;
        }
        done += (size_t)w;
    }
    free(rows);
    *blob = b;
    return KVC_OK;
}

/* Reads blocks [k0, k1) of b from the file into buf (whole blocks, the last
 * one of the region short) and verifies them; 0 (failure recorded) if any fails. */
static int read_blocks(kvc_far *f, const far_blob *b, size_t k0, size_t k1, char *buf) {
    size_t total = region_bytes(b), from = k0 * KVC_FAR_BLOCK;
    size_t span = (k1 - k0) * KVC_FAR_BLOCK;
    if (span > total - from) span = total - from;
    char msg[640];
    size_t got = 0;
    while (got < span) {
        ssize_t r = pread(f->fd, buf + got, span - got, b->off + (off_t)(from + got));
        if (r <= 0) {
            snprintf(msg, sizeof msg, "far store '%s': %s at offset %lld (region of %zu bytes at %lld)", f->path,
                     r < 0 ? strerror(errno) : "file truncated", (long long)(b->off + (off_t)(from + got)),
                     total, (long long)b->off);
            record(f, r < 0 ? KVC_ERR_IO : KVC_ERR_FORMAT, msg);
            return 0;
        }
        got += (size_t)r;
    }
    atomic_fetch_add(&f->read, (unsigned long long)span);
    for (size_t k = k0; k < k1; k++) {
        size_t o = k * KVC_FAR_BLOCK, len = total - o < KVC_FAR_BLOCK ? total - o : KVC_FAR_BLOCK;
        if (kvc_hash64(buf + (o - from), len, (uint64_t)b->off + o) != b->sum[k]) {
            snprintf(msg, sizeof msg, "far store '%s': block %zu at offset %lld fails its checksum (altered file)",
                     f->path, k, (long long)(b->off + (off_t)o));
            record(f, KVC_ERR_FORMAT, msg);
            return 0;
        }
    }
    return 1;
}

static size_t block_len(const far_blob *b, size_t k) {
    size_t total = region_bytes(b), o = k * KVC_FAR_BLOCK;
    return total - o < KVC_FAR_BLOCK ? total - o : KVC_FAR_BLOCK;
}

/* With the near buffer: copies the blocks of [k0, k1) that are in RAM into
 * buf and marks them in have[]; returns how many. */
static size_t near_copy(kvc_far *f, const far_blob *b, size_t k0, size_t k1, char *buf, uint8_t *have) {
    size_t n = 0;
    pthread_mutex_lock(&f->nmu);
    for (size_t k = k0; b->near && k < k1; k++) {
        have[k - k0] = b->near[k] >= 0;
        if (!have[k - k0]) continue;
        memcpy(buf + (k - k0) * KVC_FAR_BLOCK, kvc_block_pool_at(&f->pool, b->near[k]), block_len(b, k));
        atomic_fetch_add(&f->reused, (unsigned long long)block_len(b, k));
        n++;
    }
    pthread_mutex_unlock(&f->nmu);
    return n;
}

/* Puts the verified blocks [k0, k1) of buf into the near buffer (those not
 * there yet; a full pool just leaves them out). */
static void near_insert(kvc_far *f, far_blob *b, size_t k0, size_t k1, const char *buf) {
    pthread_mutex_lock(&f->nmu);
    if (!b->near) {
        b->near = malloc((size_t)b->n_blocks * sizeof *b->near);
        for (int k = 0; b->near && k < b->n_blocks; k++) b->near[k] = -1;
    }
    for (size_t k = k0; b->near && k < k1; k++) {
        if (b->near[k] >= 0) continue;
        int32_t id = kvc_block_pool_get(&f->pool);
        if (id < 0) break;
        memcpy(kvc_block_pool_at(&f->pool, id), buf + (k - k0) * KVC_FAR_BLOCK, block_len(b, k));
        b->near[k] = id;
    }
    pthread_mutex_unlock(&f->nmu);
}

/* Reads rows [begin, end) into out (f16 rows), verifying every block read
 * from the file; blocks in the near buffer (use_near) come from RAM, and the
 * ones read join it. Returns 0 (and records the failure) if any block fails. */
static int read_rows(kvc_far *f, far_blob *b, int begin, int end, kvc_f16 *out, int use_near) {
    double t0 = kvc_now_s();
    size_t rb = row_bytes(b);
    size_t lo = (size_t)begin * rb, hi = (size_t)end * rb;
    size_t k0 = lo / KVC_FAR_BLOCK, k1 = (hi + KVC_FAR_BLOCK - 1) / KVC_FAR_BLOCK, nk = k1 - k0;
    use_near = use_near && f->near_on;
    char *buf = malloc(nk * KVC_FAR_BLOCK + nk + 1);
    if (!buf) {
        char msg[640];
        snprintf(msg, sizeof msg, "far store '%s': no memory to read %zu bytes", f->path, nk * KVC_FAR_BLOCK);
        record(f, KVC_ERR_NOMEM, msg);
        return 0;
    }
    uint8_t *have = (uint8_t *)buf + nk * KVC_FAR_BLOCK;
    memset(have, 0, nk);
    if (use_near) near_copy(f, b, k0, k1, buf, have);
    int ok = 1;
    for (size_t k = k0; ok && k < k1;) { /* runs of blocks not in RAM: one pread each */
        if (have[k - k0]) {
            k++;
            continue;
        }
        size_t e = k + 1;
        while (e < k1 && !have[e - k0]) e++;
        char *dst = buf + (k - k0) * KVC_FAR_BLOCK;
        ok = read_blocks(f, b, k, e, dst);
        if (ok && use_near) near_insert(f, b, k, e, dst);
        k = e;
    }
    if (ok) memcpy(out, buf + (lo - k0 * KVC_FAR_BLOCK), hi - lo);
    free(buf);
    atomic_fetch_add(&f->read_ns, (unsigned long long)((kvc_now_s() - t0) * 1e9));
    return ok;
}

/* f16 scratch for rows [begin, end): NULL if the rows could not be read. */
static kvc_f16 *fetch(const kvc_codec *c, const far_blob *b, int begin, int end, int use_near) {
    kvc_f16 *rows = malloc((size_t)(end - begin ? end - begin : 1) * row_bytes(b));
    /* the blob's near ids are a cache beside its immutable region: reads update them */
    if (rows && read_rows(store_of(c), (far_blob *)b, begin, end, rows, use_near)) return rows;
    if (!rows) record(store_of(c), KVC_ERR_NOMEM, "far store: no memory for read scratch");
    free(rows);
    return NULL;
}

void kvc_far_near_keep(const kvc_codec *c, void *blob, const kvc_range *r, int nr) {
    kvc_far *f = store_of(c);
    far_blob *b = blob;
    size_t rb = row_bytes(b);
    pthread_mutex_lock(&f->nmu);
    int i = 0;
    for (int k = 0; b->near && k < b->n_blocks; k++) {
        if (b->near[k] < 0) continue;
        size_t blo = (size_t)k * KVC_FAR_BLOCK, bhi = blo + KVC_FAR_BLOCK;
        while (i < nr && (size_t)r[i].end * rb <= blo) i++; /* ranges sorted: skip those before the block */
        int wanted = i < nr && (size_t)r[i].begin * rb < bhi;
        if (!wanted) {
            kvc_block_pool_put(&f->pool, b->near[k]);
            b->near[k] = -1;
        }
    }
    pthread_mutex_unlock(&f->nmu);
}

static void far_qk(const kvc_codec *c, const void *blob, const float *q, int G, int ldq, int begin, int end,
                   float *s, int lds) {
    kvc_f16 *rows = fetch(c, blob, begin, end, 1);
    if (rows) kvc_dense_k.qk[KVC_DENSE_F16](rows, end - begin, c->dim, q, G, ldq, s, lds);
    else
        for (int g = 0; g < G; g++)
            for (int j = 0; j < end - begin; j++) s[(size_t)g * lds + j] = -INFINITY;
    free(rows);
}

static void far_pv(const kvc_codec *c, const void *blob, const float *p, int G, int ldp, int begin, int end,
                   float *o, int ldo) {
    kvc_f16 *rows = fetch(c, blob, begin, end, 1);
    if (rows) kvc_dense_k.pv[KVC_DENSE_F16](rows, end - begin, c->dim, p, G, ldp, o, ldo);
    free(rows);
}

/* Decoding (reference attention, tests) reads the file and leaves the near
 * buffer as the last selection made it. */
static void far_decode(const kvc_codec *c, const void *blob, int begin, int end, float *x, int ld) {
    kvc_f16 *rows = fetch(c, blob, begin, end, 0);
    for (int i = begin; i < end; i++) {
        float *xi = x + (size_t)(i - begin) * ld;
        if (rows) kvc_dense_k.cvt[KVC_DENSE_F16](rows + (size_t)(i - begin) * c->dim, (size_t)c->dim, xi);
        else memset(xi, 0, (size_t)c->dim * sizeof *xi);
    }
    free(rows);
}

static int far_count(const kvc_codec *c, const void *blob) {
    (void)c;
    return ((const far_blob *)blob)->n;
}

/* In RAM: the blob's header and checksums only; its rows are on disk. */
/* In RAM: the blob's header and checksums, and its blocks in the near buffer
 * (payload: K/V held in memory); its other rows are on disk. */
static void far_bytes(const kvc_codec *c, const void *blob, uint64_t *payload, uint64_t *meta) {
    const far_blob *b = blob;
    kvc_far *f = store_of(c);
    uint64_t held = 0;
    pthread_mutex_lock(&f->nmu);
    for (int k = 0; b->near && k < b->n_blocks; k++) held += b->near[k] >= 0 ? KVC_FAR_BLOCK : 0; /* whole pool blocks */
    pthread_mutex_unlock(&f->nmu);
    *payload = held;
    *meta = sizeof *b + (uint64_t)b->n_blocks * sizeof(uint64_t) +
            (b->near ? (uint64_t)b->n_blocks * sizeof(int32_t) : 0);
}

static void far_free(const kvc_codec *c, void *blob) {
    far_blob *b = blob;
    if (b->near) {
        kvc_far *f = store_of(c);
        pthread_mutex_lock(&f->nmu);
        for (int k = 0; k < b->n_blocks; k++)
            if (b->near[k] >= 0) kvc_block_pool_put(&f->pool, b->near[k]);
        pthread_mutex_unlock(&f->nmu);
        free(b->near);
    }
    free(blob);
}

const kvc_codec_ops kvc_codec_far_f16 = {
    .name = "far_f16",
    .granule = 1,
    .encode = far_encode,
    .count = far_count,
    .qk = far_qk,
    .pv = far_pv,
    .decode = far_decode,
    .bytes = far_bytes,
    .free = far_free,
};
