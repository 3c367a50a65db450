/* eval kl's reference file (kl_ref.h; layout in docs/formats.md "eval kl
 * reference file"): a 128-byte header, then one record per window. Fields
 * are little-endian (the host order on x86-64, as in GGUF). */
#define _GNU_SOURCE /* fdopen */
#include "eval/kl_ref.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "base/hash.h"
#include "base/status.h"

static const char REF_MAGIC[8] = {'K', 'V', 'C', 'K', 'L', 'R', 'E', 'F'};
enum { REF_VERSION = 2, HEADER_BYTES = 128 };
/* Header offsets (docs/formats.md); the checksum covers the bytes before OFF_SUM. */
enum {
    OFF_VERSION = 8,
    OFF_HEADER_SIZE = 12,
    OFF_ARCH = 16,
    OFF_PARAMS = 32,
    OFF_WEIGHTS = 40,
    OFF_INTS = 48,
    N_INTS = 9,
    OFF_TOKENS = 88,
    OFF_BUILD = 96,
    OFF_ISA = 104,
    OFF_SUM = 112
};

/* The stats are stored as the struct's bytes: every field is 8 bytes wide, so
 * the struct has no padding. A new field changes the size: this assert then
 * fails, and REF_VERSION must change with it. */
_Static_assert(sizeof(kvc_cache_stats) == 24 * 8, "kvc_cache_stats changed: bump REF_VERSION");
enum { META_BYTES = 4 + 4 + 8 + 8 + (int)sizeof(kvc_cache_stats) };

struct kvc_kl_ref_file {
    FILE *fp;
    char path[1024], tmp[1040];
    int writing, finished;
    kvc_kl_ref_id id;
};

static size_t logit_bytes(const kvc_kl_ref_id *id) {
    return (size_t)id->n_cont * (size_t)id->n_vocab * sizeof(float);
}
static size_t record_bytes(const kvc_kl_ref_id *id) {
    return META_BYTES + logit_bytes(id) + 8;
}

uint64_t kvc_kl_ref_tokens_hash(const int32_t *tokens, const int *start, int n_windows, int len) {
    uint64_t h = 0;
    for (int w = 0; w < n_windows; w++)
        h = kvc_hash64(tokens + start[w], sizeof(int32_t) * (size_t)len, h ^ (uint64_t)start[w]);
    return h;
}

/* ---- header -------------------------------------------------------------------- */

/* The header's i32 fields of id, in file order. */
static void id_ints(kvc_kl_ref_id *id, int32_t *f[N_INTS]) {
    int32_t *all[N_INTS] = {&id->n_layers,      &id->dim,     &id->n_vocab,
                            &id->n_text_tokens, &id->n_ctx,   &id->n_cont,
                            &id->n_windows,     &id->n_batch, &id->n_threads};
    memcpy(f, all, sizeof all);
}

static void encode_header(const kvc_kl_ref_id *id, unsigned char *b) {
    memset(b, 0, HEADER_BYTES);
    uint32_t v = REF_VERSION, hb = HEADER_BYTES;
    kvc_kl_ref_id c = *id;
    int32_t *f[N_INTS];
    id_ints(&c, f);
    memcpy(b, REF_MAGIC, 8);
    memcpy(b + OFF_VERSION, &v, 4);
    memcpy(b + OFF_HEADER_SIZE, &hb, 4);
    memcpy(b + OFF_ARCH, id->arch, sizeof id->arch);
    memcpy(b + OFF_PARAMS, &id->n_params, 8);
    memcpy(b + OFF_WEIGHTS, &id->weight_bytes, 8);
    for (int i = 0; i < N_INTS; i++)
        memcpy(b + OFF_INTS + 4 * i, f[i], 4);
    memcpy(b + OFF_TOKENS, &id->tokens_hash, 8);
    memcpy(b + OFF_BUILD, &id->build_hash, 8);
    memcpy(b + OFF_ISA, &id->isa, 4);
    uint64_t sum = kvc_hash64(b, OFF_SUM, 0);
    memcpy(b + OFF_SUM, &sum, 8);
}

static kvc_status decode_header(const char *path, const unsigned char *b, kvc_kl_ref_id *id) {
    uint32_t v, hb;
    uint64_t sum;
    memcpy(&v, b + OFF_VERSION, 4);
    memcpy(&hb, b + OFF_HEADER_SIZE, 4);
    memcpy(&sum, b + OFF_SUM, 8);
    KVC_CHECK(memcmp(b, REF_MAGIC, 8) == 0, KVC_ERR_FORMAT,
              "--ref '%s': not a reference file (no KVCKLREF magic)", path);
    KVC_CHECK(v == REF_VERSION, KVC_ERR_FORMAT,
              "--ref '%s': version %" PRIu32 ", this kvcomp reads %d", path, v, REF_VERSION);
    KVC_CHECK(hb == HEADER_BYTES, KVC_ERR_FORMAT,
              "--ref '%s': header size %" PRIu32 ", expected %d", path, hb, HEADER_BYTES);
    KVC_CHECK(sum == kvc_hash64(b, OFF_SUM, 0), KVC_ERR_FORMAT,
              "--ref '%s': the header fails its checksum (altered file)", path);
    int32_t *f[N_INTS];
    id_ints(id, f);
    memcpy(id->arch, b + OFF_ARCH, sizeof id->arch);
    id->arch[sizeof id->arch - 1] = '\0';
    memcpy(&id->n_params, b + OFF_PARAMS, 8);
    memcpy(&id->weight_bytes, b + OFF_WEIGHTS, 8);
    for (int i = 0; i < N_INTS; i++)
        memcpy(f[i], b + OFF_INTS + 4 * i, 4);
    memcpy(&id->tokens_hash, b + OFF_TOKENS, 8);
    memcpy(&id->build_hash, b + OFF_BUILD, 8);
    memcpy(&id->isa, b + OFF_ISA, 4);
    return KVC_OK;
}

/* The first field in which the file's header differs from the run's; the
 * build and the kernels' ISA only when any_build is 0. */
static kvc_status match_header(const char *path, const kvc_kl_ref_id *got,
                               const kvc_kl_ref_id *want, int any_build) {
    KVC_CHECK(strcmp(got->arch, want->arch) == 0, KVC_ERR_ARG,
              "--ref '%s': made with a '%s' model, this run's model is '%s'", path, got->arch,
              want->arch);
#define SAME(field, what)                                                                          \
    KVC_CHECK(got->field == want->field, KVC_ERR_ARG,                                              \
              "--ref '%s': %s is %" PRId64 " in the file, %" PRId64 " in this run", path, what,    \
              (int64_t)got->field, (int64_t)want->field)
    SAME(n_params, "the model's parameter count");
    SAME(weight_bytes, "the model's weight bytes");
    SAME(n_layers, "the model's layer count");
    SAME(dim, "the model's width");
    SAME(n_vocab, "the vocabulary size");
    SAME(n_text_tokens, "the text's token count (--text)");
    SAME(n_ctx, "--ctx");
    SAME(n_cont, "--cont");
    SAME(n_windows, "--windows");
    SAME(n_batch, "the prefill chunk (-b)");
    SAME(n_threads, "the thread count (-t)");
#undef SAME
    KVC_CHECK(got->tokens_hash == want->tokens_hash, KVC_ERR_ARG,
              "--ref '%s': the windows' tokens differ from this run's (another text or tokenizer)",
              path);
    if (any_build) return KVC_OK;
    KVC_CHECK(got->isa == want->isa, KVC_ERR_ARG,
              "--ref '%s': made with the %s kernels, this run uses %s (their rounding moves the "
              "logits; --ref-any-build accepts it)",
              path, kvc_isa_name((kvc_isa)got->isa), kvc_isa_name((kvc_isa)want->isa));
    KVC_CHECK(got->build_hash == want->build_hash, KVC_ERR_ARG,
              "--ref '%s': made by another kvcomp build (executable checksum %016" PRIx64
              ", this one %016" PRIx64 "; builds round differently; --ref-any-build accepts it)",
              path, got->build_hash, want->build_hash);
    return KVC_OK;
}

uint64_t kvc_kl_ref_build_hash(void) {
    static uint64_t cached;
    static int done;
    if (done) return cached;
    FILE *fp = fopen("/proc/self/exe", "rb");
    uint64_t h = 0;
    if (fp) {
        static unsigned char buf[1 << 16];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, fp)) > 0)
            h = kvc_hash64(buf, n, h);
        h = ferror(fp) ? 0 : h;
        fclose(fp);
    }
    cached = h, done = 1;
    return h;
}

/* ---- writing ------------------------------------------------------------------- */

kvc_status kvc_kl_ref_create(const char *path, const kvc_kl_ref_id *id, kvc_kl_ref_file **out) {
    *out = NULL;
    KVC_CHECK(strlen(path) < sizeof((kvc_kl_ref_file *)0)->path, KVC_ERR_ARG,
              "--ref-out: path longer than %zu bytes", sizeof((kvc_kl_ref_file *)0)->path - 1);
    kvc_kl_ref_file *f = calloc(1, sizeof *f);
    if (!f) return kvc_fail(KVC_ERR_NOMEM, "--ref-out: no memory");
    snprintf(f->path, sizeof f->path, "%s", path);
    snprintf(f->tmp, sizeof f->tmp, "%s.tmp", path);
    f->writing = 1;
    f->id = *id;
    unsigned char h[HEADER_BYTES];
    encode_header(id, h);
    f->fp = fopen(f->tmp, "wb");
    if (!f->fp || fwrite(h, 1, sizeof h, f->fp) != sizeof h) {
        kvc_status st =
            kvc_fail(KVC_ERR_IO, "--ref-out: cannot write '%s': %s", f->tmp, strerror(errno));
        kvc_kl_ref_close(f);
        return st;
    }
    *out = f;
    return KVC_OK;
}

static void encode_meta(const kvc_kl_ref_window *win, unsigned char *b) {
    int32_t zero = 0;
    memcpy(b, &win->start, 4);
    memcpy(b + 4, &zero, 4);
    memcpy(b + 8, &win->seconds, 8);
    memcpy(b + 16, &win->peak_rss, 8);
    memcpy(b + 24, &win->stats, sizeof win->stats);
}

kvc_status kvc_kl_ref_put(kvc_kl_ref_file *f, int w, const kvc_kl_ref_window *win,
                          const float *logits) {
    unsigned char meta[META_BYTES];
    encode_meta(win, meta);
    uint64_t sum = kvc_hash64(meta, sizeof meta, (uint64_t)w);
    sum = kvc_hash64(logits, logit_bytes(&f->id), sum);
    if (fwrite(meta, 1, sizeof meta, f->fp) != sizeof meta ||
        fwrite(logits, 1, logit_bytes(&f->id), f->fp) != logit_bytes(&f->id) ||
        fwrite(&sum, 8, 1, f->fp) != 1)
        return kvc_fail(KVC_ERR_IO, "--ref-out: writing window %d to '%s': %s", w, f->tmp,
                        strerror(errno));
    return KVC_OK;
}

kvc_status kvc_kl_ref_finish(kvc_kl_ref_file *f) {
    int bad = fflush(f->fp) != 0 || fsync(fileno(f->fp)) != 0;
    bad |= fclose(f->fp) != 0;
    f->fp = NULL;
    if (bad || rename(f->tmp, f->path) != 0)
        return kvc_fail(KVC_ERR_IO, "--ref-out: finishing '%s': %s", f->path, strerror(errno));
    f->finished = 1;
    return KVC_OK;
}

/* ---- reading ------------------------------------------------------------------- */

kvc_status kvc_kl_ref_open(const char *path, const kvc_kl_ref_id *want, int any_build,
                           kvc_kl_ref_file **out) {
    *out = NULL;
    int fd = -1;
    KVC_TRY(kvc_file_open_regular(path, &fd));
    kvc_kl_ref_file *f = calloc(1, sizeof *f);
    FILE *fp = f ? fdopen(fd, "rb") : NULL;
    if (!fp) {
        close(fd);
        free(f);
        return kvc_fail(KVC_ERR_NOMEM, "--ref '%s': no memory", path);
    }
    f->fp = fp;
    snprintf(f->path, sizeof f->path, "%s", path);
    unsigned char h[HEADER_BYTES];
    struct stat sb;
    kvc_status st = fread(h, 1, sizeof h, fp) == sizeof h
                        ? KVC_OK
                        : kvc_fail(KVC_ERR_FORMAT, "--ref '%s': shorter than its %d-byte header",
                                   path, HEADER_BYTES);
    if (st == KVC_OK) st = decode_header(path, h, &f->id);
    if (st == KVC_OK) st = match_header(path, &f->id, want, any_build);
    if (st == KVC_OK && fstat(fileno(fp), &sb) != 0)
        st = kvc_fail(KVC_ERR_IO, "--ref '%s': %s", path, strerror(errno));
    if (st == KVC_OK) { /* the header matched this run, so the sizes are this run's sane ones */
        uint64_t need = HEADER_BYTES + (uint64_t)f->id.n_windows * record_bytes(&f->id);
        if ((uint64_t)sb.st_size != need)
            st = kvc_fail(KVC_ERR_FORMAT,
                          "--ref '%s': %lld bytes, its header implies %" PRIu64
                          " (truncated or extended file)",
                          path, (long long)sb.st_size, need);
    }
    if (st != KVC_OK) {
        kvc_kl_ref_close(f);
        return st;
    }
    *out = f;
    return KVC_OK;
}

kvc_status kvc_kl_ref_get(kvc_kl_ref_file *f, int w, kvc_kl_ref_window *win, float *logits) {
    unsigned char meta[META_BYTES];
    uint64_t sum;
    off_t at = (off_t)HEADER_BYTES + (off_t)w * (off_t)record_bytes(&f->id);
    if (fseeko(f->fp, at, SEEK_SET) != 0 || fread(meta, 1, sizeof meta, f->fp) != sizeof meta ||
        fread(logits, 1, logit_bytes(&f->id), f->fp) != logit_bytes(&f->id) ||
        fread(&sum, 8, 1, f->fp) != 1)
        return kvc_fail(KVC_ERR_IO, "--ref '%s': reading window %d: %s", f->path, w,
                        ferror(f->fp) ? strerror(errno) : "the file ended");
    uint64_t got = kvc_hash64(meta, sizeof meta, (uint64_t)w);
    got = kvc_hash64(logits, logit_bytes(&f->id), got);
    KVC_CHECK(got == sum, KVC_ERR_FORMAT, "--ref '%s': window %d fails its checksum (altered file)",
              f->path, w);
    memcpy(&win->start, meta, 4);
    memcpy(&win->seconds, meta + 8, 8);
    memcpy(&win->peak_rss, meta + 16, 8);
    memcpy(&win->stats, meta + 24, sizeof win->stats);
    return KVC_OK;
}

void kvc_kl_ref_close(kvc_kl_ref_file *f) {
    if (!f) return;
    if (f->fp) fclose(f->fp);
    if (f->writing && !f->finished) unlink(f->tmp);
    free(f);
}
