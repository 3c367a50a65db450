/* K/V dump files: writing at computed offsets as the forward pass produces
 * K/V chunk by chunk, and checked reading (see include/kvcomp/kvdump.h for the layout). */
#include "kvcomp/kvdump.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/f16.h"
#include "base/file.h"
#include "base/status.h"

static const char k_magic[8] = {'K', 'V', 'C', 'D', 'U', 'M', 'P', '1'};

static uint64_t elem_bytes(uint32_t dtype) { return dtype == KVC_KVDUMP_F16 ? 2 : 4; }

/* Checks the header's fields; names the first bad one. */
static kvc_status check_header(const char *path, const kvc_kvdump_header *h) {
    KVC_CHECK(h->version == 1, KVC_ERR_FORMAT, "%s: version %u, expected 1", path, h->version);
    KVC_CHECK(h->dtype == KVC_KVDUMP_F32 || h->dtype == KVC_KVDUMP_F16, KVC_ERR_FORMAT,
              "%s: dtype %u, expected 0 (f32) or 1 (f16)", path, h->dtype);
    KVC_CHECK(h->n_layers >= 1 && h->n_layers <= KVC_KVDUMP_MAX_LAYERS, KVC_ERR_FORMAT,
              "%s: n_layers %u outside [1, %d]", path, h->n_layers, KVC_KVDUMP_MAX_LAYERS);
    KVC_CHECK(h->n_kv_heads >= 1 && h->n_kv_heads <= KVC_KVDUMP_MAX_HEADS, KVC_ERR_FORMAT,
              "%s: n_kv_heads %u outside [1, %d]", path, h->n_kv_heads, KVC_KVDUMP_MAX_HEADS);
    KVC_CHECK(h->head_dim >= 1 && h->head_dim <= KVC_KVDUMP_MAX_HEAD_DIM, KVC_ERR_FORMAT,
              "%s: head_dim %u outside [1, %d]", path, h->head_dim, KVC_KVDUMP_MAX_HEAD_DIM);
    KVC_CHECK(h->n_tokens >= 1 && h->n_tokens <= KVC_KVDUMP_MAX_TOKENS, KVC_ERR_FORMAT,
              "%s: n_tokens %u outside [1, %d]", path, h->n_tokens, KVC_KVDUMP_MAX_TOKENS);
    KVC_CHECK(h->n_heads >= h->n_kv_heads && h->n_heads <= KVC_KVDUMP_MAX_HEADS &&
                  h->n_heads % h->n_kv_heads == 0,
              KVC_ERR_FORMAT, "%s: n_heads %u is not a multiple of n_kv_heads %u (at most %d)",
              path, h->n_heads, h->n_kv_heads, KVC_KVDUMP_MAX_HEADS);
    return KVC_OK;
}

uint64_t kvc_kvdump_file_bytes(const kvc_kvdump_header *h) {
    if (check_header("", h) != KVC_OK) return 0;
    /* each factor is bounded (2^10 * 2 * 2^24 * 2^10 * 2^10 * 4 < 2^64) */
    return KVC_KVDUMP_HEADER_BYTES + (uint64_t)h->n_layers * 2 * h->n_tokens * h->n_kv_heads *
                                         h->head_dim * elem_bytes(h->dtype);
}

static uint64_t row_bytes(const kvc_kvdump_header *h) {
    return (uint64_t)h->n_kv_heads * h->head_dim * elem_bytes(h->dtype);
}

/* Offset of token t of K (kv = 0) or V (kv = 1) of a layer. */
static uint64_t offset_of(const kvc_kvdump_header *h, int layer, int kv, uint64_t t) {
    return KVC_KVDUMP_HEADER_BYTES + (((uint64_t)layer * 2 + (uint64_t)kv) * h->n_tokens + t) *
                                         row_bytes(h);
}

/* ---- writing ----------------------------------------------------------------- */

struct kvc_kvdump_writer {
    int fd;
    char *path;
    kvc_kvdump_header h;
    uint8_t *written; /* [n_layers][n_tokens] */
    void *conv;       /* conversion buffer */
    size_t conv_cap;
};

static kvc_status write_all(int fd, const void *buf, size_t n, uint64_t off, const char *path) {
    const char *p = buf;
    while (n > 0) {
        ssize_t k = pwrite(fd, p, n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        KVC_CHECK(k > 0, KVC_ERR_IO, "%s: write at offset %llu failed: %s", path,
                  (unsigned long long)off, k < 0 ? strerror(errno) : "no progress");
        p += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return KVC_OK;
}

kvc_status kvc_kvdump_create(const char *path, const kvc_kvdump_header *hin,
                             kvc_kvdump_writer **out) {
    *out = NULL;
    kvc_kvdump_header h = *hin;
    h.version = 1;
    KVC_TRY(check_header(path, &h));
    kvc_kvdump_writer *w = calloc(1, sizeof *w);
    KVC_CHECK(w, KVC_ERR_NOMEM, "no memory for a dump writer");
    w->h = h;
    w->path = strdup(path);
    w->written = calloc((size_t)h.n_layers * h.n_tokens, 1);
    w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (!w->path || !w->written || w->fd < 0) {
        kvc_status st = w->fd < 0 ? kvc_fail(KVC_ERR_IO, "%s: cannot create: %s", path,
                                             strerror(errno))
                                  : kvc_fail(KVC_ERR_NOMEM, "no memory for a dump writer");
        if (w->fd >= 0) close(w->fd);
        free(w->path);
        free(w->written);
        free(w);
        return st;
    }
    uint8_t hdr[KVC_KVDUMP_HEADER_BYTES] = {0};
    uint32_t f[8] = {h.version, h.dtype, h.n_layers, h.n_kv_heads, h.head_dim, h.n_tokens,
                     h.n_heads, 0};
    memcpy(hdr, k_magic, 8);
    memcpy(hdr + 8, f, sizeof f);
    kvc_status st = write_all(w->fd, hdr, sizeof hdr, 0, path);
    if (st == KVC_OK && ftruncate(w->fd, (off_t)kvc_kvdump_file_bytes(&h)) != 0)
        st = kvc_fail(KVC_ERR_IO, "%s: cannot size the file to %llu bytes: %s", path,
                      (unsigned long long)kvc_kvdump_file_bytes(&h), strerror(errno));
    if (st != KVC_OK) {
        kvc_kvdump_abort(w);
        return st;
    }
    *out = w;
    return KVC_OK;
}

static kvc_status write_rows(kvc_kvdump_writer *w, const float *x, int n, uint64_t off) {
    size_t elems = (size_t)n * w->h.n_kv_heads * w->h.head_dim;
    if (w->h.dtype == KVC_KVDUMP_F32) return write_all(w->fd, x, elems * 4, off, w->path);
    if (w->conv_cap < elems * 2) {
        void *nb = realloc(w->conv, elems * 2);
        KVC_CHECK(nb, KVC_ERR_NOMEM, "no memory for %zu halves", elems);
        w->conv = nb;
        w->conv_cap = elems * 2;
    }
    kvc_f16 *h = w->conv;
    for (size_t i = 0; i < elems; i++) h[i] = kvc_f32_to_f16(x[i]);
    return write_all(w->fd, h, elems * 2, off, w->path);
}

kvc_status kvc_kvdump_write(kvc_kvdump_writer *w, int layer, int pos0, int n, const float *k,
                            const float *v) {
    KVC_CHECK(layer >= 0 && (uint32_t)layer < w->h.n_layers && pos0 >= 0 && n >= 0,
              KVC_ERR_ARG, "dump write: layer %d, pos0 %d, n %d out of range", layer, pos0, n);
    if ((uint32_t)pos0 >= w->h.n_tokens) return KVC_OK;
    if ((uint64_t)pos0 + (uint64_t)n > w->h.n_tokens) n = (int)(w->h.n_tokens - (uint32_t)pos0);
    KVC_TRY(write_rows(w, k, n, offset_of(&w->h, layer, 0, (uint64_t)pos0)));
    KVC_TRY(write_rows(w, v, n, offset_of(&w->h, layer, 1, (uint64_t)pos0)));
    memset(w->written + (size_t)layer * w->h.n_tokens + pos0, 1, (size_t)n);
    return KVC_OK;
}

void kvc_kvdump_abort(kvc_kvdump_writer *w) {
    if (!w) return;
    close(w->fd);
    unlink(w->path);
    free(w->path);
    free(w->written);
    free(w->conv);
    free(w);
}

kvc_status kvc_kvdump_close(kvc_kvdump_writer *w) {
    size_t total = (size_t)w->h.n_layers * w->h.n_tokens;
    size_t missing = 0, first = 0;
    for (size_t i = total; i-- > 0;)
        if (!w->written[i]) missing++, first = i;
    if (missing) {
        kvc_status st = kvc_fail(KVC_ERR_INTERNAL,
                                 "%s: %zu (layer, token) rows never written (first: layer %zu "
                                 "token %zu)",
                                 w->path, missing, first / w->h.n_tokens, first % w->h.n_tokens);
        kvc_kvdump_abort(w);
        return st;
    }
    int rc = close(w->fd);
    kvc_status st = rc == 0 ? KVC_OK : kvc_fail(KVC_ERR_IO, "%s: close failed: %s", w->path,
                                                 strerror(errno));
    free(w->path);
    free(w->written);
    free(w->conv);
    free(w);
    return st;
}

/* ---- reading ----------------------------------------------------------------- */

static kvc_status read_header_fd(int fd, const char *path, kvc_kvdump_header *h) {
    uint8_t hdr[KVC_KVDUMP_HEADER_BYTES];
    ssize_t got = pread(fd, hdr, sizeof hdr, 0);
    KVC_CHECK(got == (ssize_t)sizeof hdr, KVC_ERR_FORMAT,
              "%s: %zd bytes, shorter than the %d-byte header", path, got < 0 ? 0 : got,
              KVC_KVDUMP_HEADER_BYTES);
    KVC_CHECK(memcmp(hdr, k_magic, 8) == 0, KVC_ERR_FORMAT,
              "%s: not a kvcomp K/V dump (magic is not KVCDUMP1)", path);
    uint32_t f[8];
    memcpy(f, hdr + 8, sizeof f);
    *h = (kvc_kvdump_header){f[0], f[1], f[2], f[3], f[4], f[5], f[6]};
    KVC_TRY(check_header(path, h));
    KVC_CHECK(f[7] == 0, KVC_ERR_FORMAT, "%s: reserved field %u, expected 0", path, f[7]);
    struct stat st;
    KVC_CHECK(fstat(fd, &st) == 0, KVC_ERR_IO, "%s: stat failed: %s", path, strerror(errno));
    uint64_t want = kvc_kvdump_file_bytes(h);
    KVC_CHECK((uint64_t)st.st_size == want, KVC_ERR_FORMAT,
              "%s: file is %llu bytes, the header (%u layers x %u tokens x %u heads x %u dims) "
              "needs %llu",
              path, (unsigned long long)st.st_size, h->n_layers, h->n_tokens, h->n_kv_heads,
              h->head_dim, (unsigned long long)want);
    return KVC_OK;
}

kvc_status kvc_kvdump_read_header(const char *path, kvc_kvdump_header *h) {
    int fd;
    KVC_TRY(kvc_file_open_regular(path, &fd));
    kvc_status st = read_header_fd(fd, path, h);
    close(fd);
    return st;
}

static kvc_status read_rows(int fd, const char *path, const kvc_kvdump_header *h, uint64_t off,
                            float *dst) {
    size_t elems = (size_t)h->n_tokens * h->n_kv_heads * h->head_dim;
    size_t bytes = elems * (size_t)elem_bytes(h->dtype);
    /* f16 is read into the upper half of dst and widened in place, front to back */
    char *buf = h->dtype == KVC_KVDUMP_F32 ? (char *)dst : (char *)dst + elems * 2;
    size_t done = 0;
    while (done < bytes) {
        ssize_t k = pread(fd, buf + done, bytes - done, (off_t)(off + done));
        if (k < 0 && errno == EINTR) continue;
        KVC_CHECK(k > 0, KVC_ERR_IO, "%s: read at offset %llu failed", path,
                  (unsigned long long)(off + done));
        done += (size_t)k;
    }
    if (h->dtype == KVC_KVDUMP_F16) {
        const kvc_f16 *src = (const kvc_f16 *)buf;
        for (size_t i = 0; i < elems; i++) dst[i] = kvc_f16_to_f32(src[i]);
    }
    return KVC_OK;
}

kvc_status kvc_kvdump_load_layer(const char *path, int layer, kvc_kvdump_header *h, float **k,
                                 float **v) {
    *k = *v = NULL;
    int fd;
    KVC_TRY(kvc_file_open_regular(path, &fd));
    kvc_status st = read_header_fd(fd, path, h);
    if (st == KVC_OK && (layer < 0 || (uint32_t)layer >= h->n_layers))
        st = kvc_fail(KVC_ERR_ARG, "%s: layer %d outside [0, %u)", path, layer, h->n_layers);
    size_t elems = st == KVC_OK ? (size_t)h->n_tokens * h->n_kv_heads * h->head_dim : 0;
    if (st == KVC_OK) {
        *k = malloc(elems * sizeof(float));
        *v = malloc(elems * sizeof(float));
        if (!*k || !*v)
            st = kvc_fail(KVC_ERR_NOMEM, "%s: no memory for layer %d (%zu floats)", path, layer,
                          2 * elems);
    }
    if (st == KVC_OK) st = read_rows(fd, path, h, offset_of(h, layer, 0, 0), *k);
    if (st == KVC_OK) st = read_rows(fd, path, h, offset_of(h, layer, 1, 0), *v);
    close(fd);
    if (st != KVC_OK) {
        free(*k);
        free(*v);
        *k = *v = NULL;
    }
    return st;
}
