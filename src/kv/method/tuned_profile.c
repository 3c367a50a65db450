/* Tuned profile files (format in tuned_profile.h): parse (untrusted input),
 * write, and the codec names and sizes that `kvcomp tune` chooses between. */
#include "kv/method/tuned_profile.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/status.h"
#include "kv/codec/quant.h"

enum { MAX_FILE = 1 << 20, MAX_LINE = 1024, MAX_FIELDS = 16 };

/* ---- codecs -------------------------------------------------------------------- */

static int parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

kvc_status kvc_tuned_codec_parse(const char *s, const char *where, kvc_tuned_codec *out) {
    if (strcmp(s, "f32") == 0 || strcmp(s, "f16") == 0) {
        *out = (kvc_tuned_codec){s[1] == '3' ? 32 : 16, 0};
        return KVC_OK;
    }
    char digits[KVC_TUNED_CODEC_NAME];
    const char *g = strchr(s, 'g');
    size_t nb = g ? (size_t)(g - s) - 1 : 0;
    long bits, group;
    if (s[0] != 'q' || !g || nb == 0 || nb >= sizeof digits)
        return kvc_fail(KVC_ERR_FORMAT,
                        "%s '%.40s' is not a codec (f32, f16, or q<bits>g<group> such as q2g32)",
                        where, s);
    memcpy(digits, s + 1, nb);
    digits[nb] = '\0';
    if (!parse_long(digits, 1, 4, &bits))
        return kvc_fail(KVC_ERR_FORMAT, "%s '%.40s': bits '%s' not in 1..4", where, s, digits);
    if (!parse_long(g + 1, 1, KVC_QUANT_MAX_N, &group))
        return kvc_fail(KVC_ERR_FORMAT, "%s '%.40s': group '%.20s' not in 1..%d", where, s, g + 1,
                        KVC_QUANT_MAX_N);
    *out = (kvc_tuned_codec){(int)bits, (int)group};
    return KVC_OK;
}

void kvc_tuned_codec_name(kvc_tuned_codec c, char *buf) {
    if (c.bits >= 16) snprintf(buf, KVC_TUNED_CODEC_NAME, "f%d", c.bits);
    else snprintf(buf, KVC_TUNED_CODEC_NAME, "q%dg%d", c.bits, c.group);
}

double kvc_tuned_codec_bits(kvc_tuned_codec c, int is_v, int dim, int n) {
    if (c.bits >= 16) return c.bits;
    kvc_quant_cfg q = {c.bits, c.group, 0};
    uint64_t payload, meta;
    if (is_v) kvc_quant_v_bytes(&q, dim, n, &payload, &meta);
    else kvc_quant_k_bytes(&q, dim, n, &payload, &meta);
    return 8.0 * (double)(payload + meta) / ((double)dim * n);
}

/* ---- profiles ------------------------------------------------------------------- */

static kvc_status alloc_profile(int n, kvc_tuned_profile **out) {
    kvc_tuned_profile *p = calloc(1, sizeof *p);
    if (p) p->layer = calloc((size_t)(n > 0 ? n : 1), sizeof *p->layer);
    if (!p || !p->layer) {
        free(p);
        return kvc_fail(KVC_ERR_NOMEM, "tuned profile: %d layers", n);
    }
    p->n_layers = n;
    for (int i = 0; i < n; i++) p->layer[i].k_kl = p->layer[i].v_kl = -1;
    *out = p;
    return KVC_OK;
}

void kvc_tuned_profile_free(kvc_tuned_profile *p) {
    if (!p) return;
    free(p->layer);
    free(p);
}

kvc_status kvc_tuned_profile_uniform(int n_layers, kvc_tuned_codec fill, kvc_tuned_profile **out) {
    *out = NULL;
    KVC_CHECK(n_layers >= 1 && n_layers <= KVC_TUNED_MAX_LAYERS, KVC_ERR_ARG,
              "tuned profile: %d layers not in [1, %d]", n_layers, KVC_TUNED_MAX_LAYERS);
    KVC_TRY(alloc_profile(n_layers, out));
    for (int i = 0; i < n_layers; i++) (*out)->layer[i].k = (*out)->layer[i].v = fill;
    return KVC_OK;
}

/* ---- parsing ------------------------------------------------------------------- */

typedef struct parser {
    const char *name;
    int line, have_header;
    kvc_tuned_profile *prof;
    unsigned char seen[KVC_TUNED_MAX_LAYERS];
    char model[KVC_TUNED_TEXT_MAX], source[KVC_TUNED_TEXT_MAX];
} parser;

/* Fields f[1..nf) joined by one blank, cut to the text size without a
 * trailing blank (so that a written profile reads back the same). */
static void join_rest(char *dst, char **f, int nf) {
    size_t o = 0;
    dst[0] = '\0';
    for (int i = 1; i < nf && o + 1 < KVC_TUNED_TEXT_MAX; i++) {
        if (i > 1) dst[o++] = ' ';
        size_t l = strlen(f[i]);
        if (o + l >= KVC_TUNED_TEXT_MAX) l = KVC_TUNED_TEXT_MAX - 1 - o;
        memcpy(dst + o, f[i], l);
        o += l;
    }
    while (o > 0 && dst[o - 1] == ' ') o--;
    dst[o] = '\0';
}

static kvc_status parse_kl(const parser *ps, const char *what, const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v) || v < 0 || (errno == ERANGE && v > 1))
        return kvc_fail(KVC_ERR_FORMAT,
                        "profile %s line %d: %s '%.40s' is not a finite non-negative number",
                        ps->name, ps->line, what, s);
    *out = v;
    return KVC_OK;
}

static kvc_status parse_layer(parser *ps, char **f, int nf) {
    KVC_CHECK(ps->prof, KVC_ERR_FORMAT, "profile %s line %d: 'layer' before 'layers N'", ps->name,
              ps->line);
    KVC_CHECK(nf == 4 || nf == 6, KVC_ERR_FORMAT,
              "profile %s line %d: 'layer' needs 3 or 5 values (index k_codec v_codec [k_kl "
              "v_kl]), got %d",
              ps->name, ps->line, nf - 1);
    long i;
    KVC_CHECK(parse_long(f[1], 0, ps->prof->n_layers - 1, &i), KVC_ERR_FORMAT,
              "profile %s line %d: layer index '%.40s' out of range [0, %d) (the file declares "
              "%d layers)",
              ps->name, ps->line, f[1], ps->prof->n_layers, ps->prof->n_layers);
    KVC_CHECK(!ps->seen[i], KVC_ERR_FORMAT, "profile %s line %d: layer %ld given twice", ps->name,
              ps->line, i);
    kvc_tuned_layer *L = &ps->prof->layer[i];
    char where[128];
    snprintf(where, sizeof where, "profile %s line %d: layer %ld k_codec", ps->name, ps->line, i);
    KVC_TRY(kvc_tuned_codec_parse(f[2], where, &L->k));
    snprintf(where, sizeof where, "profile %s line %d: layer %ld v_codec", ps->name, ps->line, i);
    KVC_TRY(kvc_tuned_codec_parse(f[3], where, &L->v));
    if (nf == 6) {
        KVC_TRY(parse_kl(ps, "k_kl", f[4], &L->k_kl));
        KVC_TRY(parse_kl(ps, "v_kl", f[5], &L->v_kl));
    }
    ps->seen[i] = 1;
    return KVC_OK;
}

static kvc_status parse_record(parser *ps, char **f, int nf) {
    const char *key = f[0];
    if (!ps->have_header) {
        KVC_CHECK(strcmp(key, "kvcomp-tuned") == 0, KVC_ERR_FORMAT,
                  "profile %s line %d: expected 'kvcomp-tuned 1' as the first record, found "
                  "'%.40s' (not a tuned profile?)",
                  ps->name, ps->line, key);
        long ver;
        KVC_CHECK(nf == 2 && parse_long(f[1], 0, 1000000, &ver), KVC_ERR_FORMAT,
                  "profile %s line %d: 'kvcomp-tuned' needs one version number", ps->name, ps->line);
        KVC_CHECK(ver == 1, KVC_ERR_FORMAT,
                  "profile %s line %d: format version %ld not supported (1)", ps->name, ps->line,
                  ver);
        ps->have_header = 1;
        return KVC_OK;
    }
    if (strcmp(key, "model") == 0) join_rest(ps->model, f, nf);
    else if (strcmp(key, "source") == 0) join_rest(ps->source, f, nf);
    else if (strcmp(key, "layers") == 0) {
        long n;
        KVC_CHECK(!ps->prof, KVC_ERR_FORMAT, "profile %s line %d: 'layers' given twice", ps->name,
                  ps->line);
        KVC_CHECK(nf == 2 && parse_long(f[1], 1, KVC_TUNED_MAX_LAYERS, &n), KVC_ERR_FORMAT,
                  "profile %s line %d: 'layers' needs a count in [1, %d], got '%.40s'", ps->name,
                  ps->line, KVC_TUNED_MAX_LAYERS, nf > 1 ? f[1] : "");
        return alloc_profile((int)n, &ps->prof);
    } else if (strcmp(key, "layer") == 0) return parse_layer(ps, f, nf);
    else
        return kvc_fail(KVC_ERR_FORMAT,
                        "profile %s line %d: unknown record '%.40s' (valid: kvcomp-tuned, model, "
                        "source, layers, layer)",
                        ps->name, ps->line, key);
    return KVC_OK;
}

/* Splits a line (comment cut) into blank-separated fields; -1 if too many. */
static int split_fields(char *buf, char **f) {
    char *hash = strchr(buf, '#');
    if (hash) *hash = '\0';
    int nf = 0;
    for (char *p = buf;;) {
        while (*p == ' ' || *p == '\t' || *p == '\r') p++;
        if (!*p) return nf;
        if (nf == MAX_FIELDS) return -1;
        f[nf++] = p;
        while (*p && *p != ' ' && *p != '\t' && *p != '\r') p++;
        if (*p) *p++ = '\0';
    }
}

static kvc_status parse_lines(parser *ps, const char *text, size_t len) {
    char buf[MAX_LINE + 1];
    for (size_t pos = 0; pos < len;) {
        ps->line++;
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t ll = nl ? (size_t)(nl - (text + pos)) : len - pos;
        KVC_CHECK(ll <= MAX_LINE, KVC_ERR_FORMAT, "profile %s line %d: longer than %d bytes",
                  ps->name, ps->line, MAX_LINE);
        memcpy(buf, text + pos, ll);
        buf[ll] = '\0';
        pos += ll + (nl ? 1 : 0);
        char *f[MAX_FIELDS];
        int nf = split_fields(buf, f);
        KVC_CHECK(nf >= 0, KVC_ERR_FORMAT, "profile %s line %d: more than %d fields", ps->name,
                  ps->line, MAX_FIELDS);
        if (nf > 0) KVC_TRY(parse_record(ps, f, nf));
    }
    KVC_CHECK(ps->have_header, KVC_ERR_FORMAT, "profile %s: empty (no 'kvcomp-tuned 1' header)",
              ps->name);
    KVC_CHECK(ps->prof, KVC_ERR_FORMAT, "profile %s: no 'layers N' record", ps->name);
    int missing = 0, first = -1;
    for (int i = 0; i < ps->prof->n_layers; i++)
        if (!ps->seen[i]) {
            if (first < 0) first = i;
            missing++;
        }
    KVC_CHECK(!missing, KVC_ERR_FORMAT,
              "profile %s: %d of %d layers missing (first missing: layer %d; truncated file?)",
              ps->name, missing, ps->prof->n_layers, first);
    return KVC_OK;
}

kvc_status kvc_tuned_profile_parse(const char *text, size_t len, const char *name,
                                   kvc_tuned_profile **out) {
    *out = NULL;
    const char *nm = name ? name : "(memory)";
    KVC_CHECK(len <= MAX_FILE, KVC_ERR_FORMAT, "profile %s: %zu bytes, more than the limit of %d",
              nm, len, MAX_FILE);
    const char *nul = memchr(text, '\0', len);
    KVC_CHECK(!nul, KVC_ERR_FORMAT, "profile %s: NUL byte at offset %zu (binary file?)", nm,
              (size_t)(nul - text));
    parser *ps = calloc(1, sizeof *ps);
    KVC_CHECK(ps, KVC_ERR_NOMEM, "tuned profile parser");
    ps->name = nm;
    kvc_status st = parse_lines(ps, text, len);
    if (st == KVC_OK) {
        memcpy(ps->prof->model, ps->model, sizeof ps->model);
        memcpy(ps->prof->source, ps->source, sizeof ps->source);
        *out = ps->prof;
    } else {
        kvc_tuned_profile_free(ps->prof);
    }
    free(ps);
    return st;
}

kvc_status kvc_tuned_profile_load(const char *path, kvc_tuned_profile **out) {
    *out = NULL;
    char *buf;
    size_t n;
    KVC_TRY(kvc_file_read_all(path, MAX_FILE, "", &buf, &n)); /* regular files only */
    kvc_status st = kvc_tuned_profile_parse(buf, n, path, out);
    free(buf);
    return st;
}

/* ---- writing ------------------------------------------------------------------- */

/* An informational record; characters that would end or comment it become blanks,
 * and the text is written as the parser will read it back (blanks collapsed). */
static void write_text_field(FILE *f, const char *key, const char *v) {
    char buf[KVC_TUNED_TEXT_MAX], *fields[KVC_TUNED_TEXT_MAX / 2 + 2];
    size_t n = strlen(v);
    for (size_t i = 0; i <= n; i++) buf[i] = v[i] == '\n' || v[i] == '#' || v[i] == '\t' || v[i] == '\r' ? ' ' : v[i];
    int nf = 1;
    for (char *p = buf;;) {
        while (*p == ' ') p++;
        if (!*p) break;
        fields[nf++] = p;
        while (*p && *p != ' ') p++;
        if (*p) *p++ = '\0';
    }
    if (nf == 1) return;
    char joined[KVC_TUNED_TEXT_MAX];
    join_rest(joined, fields, nf);
    fprintf(f, "%s %s\n", key, joined);
}

kvc_status kvc_tuned_profile_write(const kvc_tuned_profile *p, FILE *f) {
    fprintf(f, "kvcomp-tuned 1\n");
    fprintf(f, "# per-layer K and V codecs: written by `kvcomp tune`, read by --kv tuned:profile=FILE\n");
    write_text_field(f, "model", p->model);
    write_text_field(f, "source", p->source);
    fprintf(f, "layers %d\n", p->n_layers);
    fprintf(f, "# layer k_codec v_codec [k_kl v_kl: measured KL of the choice alone]\n");
    for (int i = 0; i < p->n_layers; i++) {
        const kvc_tuned_layer *L = &p->layer[i];
        char kn[KVC_TUNED_CODEC_NAME], vn[KVC_TUNED_CODEC_NAME];
        kvc_tuned_codec_name(L->k, kn);
        kvc_tuned_codec_name(L->v, vn);
        if (L->k_kl >= 0 && L->v_kl >= 0)
            fprintf(f, "layer %d %s %s %.6e %.6e\n", i, kn, vn, L->k_kl, L->v_kl);
        else fprintf(f, "layer %d %s %s\n", i, kn, vn);
    }
    return ferror(f) ? kvc_fail(KVC_ERR_IO, "tuned profile: write error") : KVC_OK;
}

kvc_status kvc_tuned_profile_save(const kvc_tuned_profile *p, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return kvc_fail(KVC_ERR_IO, "profile %s: cannot create: %s", path, strerror(errno));
    kvc_status st = kvc_tuned_profile_write(p, f);
    if (fclose(f) != 0 && st == KVC_OK) st = kvc_fail(KVC_ERR_IO, "profile %s: write error", path);
    return st;
}
