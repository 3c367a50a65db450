/* KVmix profile files: parse (untrusted), write, and build from importance
 * scores by the paper's ranking rule (the KVmix paper, "KV Importance Analysis",
 * eq. 10-11 and "Profiling Results": top 20% of layers by mean gradient norm
 * get K 3 / V 4 bits and RPC ratio 20%, the rest 2 bits and 10%). The format
 * is documented in kvmix_profile.h. */
#include "kv/method/kvmix_profile.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/rng.h"
#include "base/status.h"

enum { MAX_FILE = 1 << 20, MAX_LINE = 1024, MAX_FIELDS = 16 };

kvc_kvmix_rule kvc_kvmix_rule_default(double top_frac) {
    kvc_kvmix_rule r = {top_frac, 3, 4, 2, 0.2f, 0.1f};
    return r;
}

int kvc_kvmix_top_count(double top_frac, int n_layers) {
    if (!(top_frac > 0)) return 0;
    if (top_frac >= 1) return n_layers;
    return (int)floor(top_frac * n_layers + 1e-9);
}

static kvc_status alloc_profile(int n, kvc_kvmix_profile **out) {
    kvc_kvmix_profile *p = calloc(1, sizeof *p);
    if (!p) return kvc_fail(KVC_ERR_NOMEM, "kvmix profile");
    p->layer = calloc((size_t)(n > 0 ? n : 1), sizeof *p->layer);
    if (!p->layer) {
        free(p);
        return kvc_fail(KVC_ERR_NOMEM, "kvmix profile: %d layers", n);
    }
    p->n_layers = n;
    *out = p;
    return KVC_OK;
}

void kvc_kvmix_profile_free(kvc_kvmix_profile *p) {
    if (!p) return;
    free(p->layer);
    free(p);
}

/* ---- parsing ------------------------------------------------------------------ */

typedef struct parser {
    const char *name;
    int line;
    char model[KVC_KVMIX_TEXT_MAX], source[KVC_KVMIX_TEXT_MAX];
} parser;

static int parse_int(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

static int parse_num(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno == ERANGE && fabs(v) > 1) return 0;
    if (end == s || *end || !isfinite(v)) return 0;
    *out = v;
    return 1;
}

/* The rest of a line, cut to the field size; a cut that leaves a trailing
 * blank drops it, so the text reads back the same after a write (fuzz finding). */
static void copy_rest(char *dst, const char *src) {
    size_t n = strlen(src);
    if (n >= KVC_KVMIX_TEXT_MAX) n = KVC_KVMIX_TEXT_MAX - 1;
    while (n > 0 && src[n - 1] == ' ')
        n--;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static kvc_status parse_bits(const parser *ps, const char *what, const char *s, int *out) {
    long v;
    if (!parse_int(s, -1000000, 1000000, &v))
        return kvc_fail(KVC_ERR_FORMAT, "profile %s line %d: %s '%s' is not an integer", ps->name,
                        ps->line, what, s);
    if (v < 1 || v > 4)
        return kvc_fail(KVC_ERR_FORMAT,
                        "profile %s line %d: %s %ld is not a supported bit width (1, 2, 3 or 4)",
                        ps->name, ps->line, what, v);
    *out = (int)v;
    return KVC_OK;
}

static kvc_status parse_ratio(const parser *ps, const char *what, const char *s, float *out) {
    double v;
    if (!parse_num(s, &v) || v < 0 || v > 1)
        return kvc_fail(KVC_ERR_FORMAT, "profile %s line %d: %s '%s' is not a ratio in [0, 1]",
                        ps->name, ps->line, what, s);
    *out = (float)v;
    return KVC_OK;
}

static kvc_status parse_score(const parser *ps, const char *what, const char *s, double *out) {
    double v;
    if (!parse_num(s, &v) || v < 0)
        return kvc_fail(KVC_ERR_FORMAT,
                        "profile %s line %d: %s '%s' is not a finite non-negative number",
                        ps->name, ps->line, what, s);
    *out = v;
    return KVC_OK;
}

/* One record (fields already split). */
static kvc_status parse_record(parser *ps, char **f, int nf, const char *rest, int *have_header,
                               kvc_kvmix_profile **prof, unsigned char *seen) {
    const char *key = f[0];
    if (!*have_header) {
        if (strcmp(key, "kvmix-profile") != 0)
            return kvc_fail(KVC_ERR_FORMAT,
                            "profile %s line %d: expected 'kvmix-profile 1' as the first record, "
                            "found '%s' (not a kvmix profile?)",
                            ps->name, ps->line, key);
        long ver;
        if (nf != 2 || !parse_int(f[1], 0, 1000000, &ver))
            return kvc_fail(KVC_ERR_FORMAT, "profile %s line %d: 'kvmix-profile' needs one version number",
                            ps->name, ps->line);
        if (ver != 1)
            return kvc_fail(KVC_ERR_FORMAT, "profile %s line %d: format version %ld not supported (1)",
                            ps->name, ps->line, ver);
        *have_header = 1;
        return KVC_OK;
    }
    if (strcmp(key, "kvmix-profile") == 0)
        return kvc_fail(KVC_ERR_FORMAT, "profile %s line %d: second 'kvmix-profile' header",
                        ps->name, ps->line);
    if (strcmp(key, "model") == 0 || strcmp(key, "source") == 0) {
        copy_rest(strcmp(key, "model") == 0 ? ps->model : ps->source, rest);
        return KVC_OK;
    }
    if (strcmp(key, "layers") == 0) {
        long n;
        if (*prof)
            return kvc_fail(KVC_ERR_FORMAT, "profile %s line %d: 'layers' given twice", ps->name,
                            ps->line);
        if (nf != 2 || !parse_int(f[1], 1, KVC_KVMIX_MAX_LAYERS, &n))
            return kvc_fail(KVC_ERR_FORMAT,
                            "profile %s line %d: 'layers' needs a count in [1, %d], got '%s'",
                            ps->name, ps->line, KVC_KVMIX_MAX_LAYERS, nf > 1 ? f[1] : "");
        return alloc_profile((int)n, prof);
    }
    if (strcmp(key, "layer") == 0) {
        if (!*prof)
            return kvc_fail(KVC_ERR_FORMAT, "profile %s line %d: 'layer' before 'layers N'",
                            ps->name, ps->line);
        if (nf != 6 && nf != 8)
            return kvc_fail(KVC_ERR_FORMAT,
                            "profile %s line %d: 'layer' needs 5 or 7 values (index k_bits v_bits "
                            "k_rpc v_rpc [k_score v_score]), got %d",
                            ps->name, ps->line, nf - 1);
        long i;
        if (!parse_int(f[1], 0, 1000000000L, &i) || i >= (*prof)->n_layers)
            return kvc_fail(KVC_ERR_FORMAT,
                            "profile %s line %d: layer index '%s' out of range [0, %d) (the file "
                            "declares %d layers)",
                            ps->name, ps->line, f[1], (*prof)->n_layers, (*prof)->n_layers);
        if (seen[i])
            return kvc_fail(KVC_ERR_FORMAT, "profile %s line %d: layer %ld given twice", ps->name,
                            ps->line, i);
        kvc_kvmix_layer *L = &(*prof)->layer[i];
        KVC_TRY(parse_bits(ps, "k_bits", f[2], &L->k_bits));
        KVC_TRY(parse_bits(ps, "v_bits", f[3], &L->v_bits));
        KVC_TRY(parse_ratio(ps, "k_rpc", f[4], &L->k_rpc));
        KVC_TRY(parse_ratio(ps, "v_rpc", f[5], &L->v_rpc));
        if (nf == 8) {
            KVC_TRY(parse_score(ps, "k_score", f[6], &L->k_score));
            KVC_TRY(parse_score(ps, "v_score", f[7], &L->v_score));
        }
        seen[i] = 1;
        return KVC_OK;
    }
    return kvc_fail(KVC_ERR_FORMAT,
                    "profile %s line %d: unknown record '%.40s' (valid: kvmix-profile, model, "
                    "source, layers, layer)",
                    ps->name, ps->line, key);
}

kvc_status kvc_kvmix_profile_parse(const char *text, size_t len, const char *name,
                                   kvc_kvmix_profile **out) {
    *out = NULL;
    parser ps = {name ? name : "(memory)", 0, "", ""};
    KVC_CHECK(len <= MAX_FILE, KVC_ERR_FORMAT, "profile %s: %zu bytes, more than the limit of %d",
              ps.name, len, MAX_FILE);
    const char *nul = memchr(text, '\0', len);
    KVC_CHECK(!nul, KVC_ERR_FORMAT, "profile %s: NUL byte at offset %zu (binary file?)", ps.name,
              (size_t)(nul - text));
    kvc_kvmix_profile *prof = NULL;
    unsigned char seen[KVC_KVMIX_MAX_LAYERS] = {0};
    int have_header = 0;
    kvc_status st = KVC_OK;
    size_t pos = 0;
    char buf[MAX_LINE + 1];
    while (pos < len && st == KVC_OK) {
        ps.line++;
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t ll = nl ? (size_t)(nl - (text + pos)) : len - pos;
        if (ll > MAX_LINE) {
            st = kvc_fail(KVC_ERR_FORMAT, "profile %s line %d: longer than %d bytes", ps.name,
                          ps.line, MAX_LINE);
            break;
        }
        memcpy(buf, text + pos, ll);
        buf[ll] = '\0';
        pos += ll + (nl ? 1 : 0);
        char *hash = strchr(buf, '#');
        if (hash) *hash = '\0';
        /* split on blanks; `rest` is the text after the first field */
        char *f[MAX_FIELDS];
        int nf = 0;
        char *p = buf, *rest = NULL;
        while (*p) {
            while (*p == ' ' || *p == '\t' || *p == '\r') p++;
            if (!*p) break;
            if (nf == 1) rest = p;
            if (nf == MAX_FIELDS) {
                nf++;
                break;
            }
            f[nf++] = p;
            while (*p && *p != ' ' && *p != '\t' && *p != '\r') p++;
            if (*p) *p++ = '\0';
        }
        if (nf == 0) continue;
        if (nf > MAX_FIELDS) {
            st = kvc_fail(KVC_ERR_FORMAT, "profile %s line %d: more than %d fields", ps.name,
                          ps.line, MAX_FIELDS);
            break;
        }
        /* rest-of-line for informational records: re-join the split fields */
        char restbuf[MAX_LINE + 1] = "";
        if (rest) {
            size_t o = 0;
            for (int i = 1; i < nf; i++) {
                size_t l = strlen(f[i]);
                if (o + l + 2 > sizeof restbuf) break;
                if (i > 1) restbuf[o++] = ' ';
                memcpy(restbuf + o, f[i], l);
                o += l;
                restbuf[o] = '\0';
            }
        }
        st = parse_record(&ps, f, nf, restbuf, &have_header, &prof, seen);
    }
    if (st == KVC_OK && !have_header)
        st = kvc_fail(KVC_ERR_FORMAT, "profile %s: empty (no 'kvmix-profile 1' header)", ps.name);
    if (st == KVC_OK && !prof)
        st = kvc_fail(KVC_ERR_FORMAT, "profile %s: no 'layers N' record", ps.name);
    if (st == KVC_OK) {
        int missing = 0, first = -1;
        for (int i = 0; i < prof->n_layers; i++)
            if (!seen[i]) {
                if (first < 0) first = i;
                missing++;
            }
        if (missing)
            st = kvc_fail(KVC_ERR_FORMAT,
                          "profile %s: %d of %d layers missing (first missing: layer %d)", ps.name,
                          missing, prof->n_layers, first);
    }
    if (st != KVC_OK) {
        kvc_kvmix_profile_free(prof);
        return st;
    }
    memcpy(prof->model, ps.model, sizeof ps.model);
    memcpy(prof->source, ps.source, sizeof ps.source);
    *out = prof;
    return KVC_OK;
}

kvc_status kvc_kvmix_profile_load(const char *path, kvc_kvmix_profile **out) {
    *out = NULL;
    char *buf;
    size_t n;
    KVC_TRY(kvc_file_read_all(path, MAX_FILE, "", &buf, &n)); /* regular files only: no FIFO hang */
    kvc_status st = kvc_kvmix_profile_parse(buf, n, path, out);
    free(buf);
    return st;
}

/* ---- building ---------------------------------------------------------------- */

static const double *sort_key;
static int by_score_desc(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    if (sort_key[i] != sort_key[j]) return sort_key[i] > sort_key[j] ? -1 : 1;
    return i - j; /* ties: lower layer first, deterministic */
}

static kvc_status check_rule(const kvc_kvmix_rule *r, int n) {
    KVC_CHECK(n >= 1 && n <= KVC_KVMIX_MAX_LAYERS, KVC_ERR_ARG, "kvmix profile: %d layers", n);
    KVC_CHECK(r->top_frac >= 0 && r->top_frac <= 1, KVC_ERR_ARG,
              "kvmix profile: top fraction %g not in [0, 1]", r->top_frac);
    KVC_CHECK(r->k_hi >= 1 && r->k_hi <= 4 && r->v_hi >= 1 && r->v_hi <= 4 && r->lo >= 1 && r->lo <= 4,
              KVC_ERR_ARG, "kvmix profile: bits must be 1..4");
    return KVC_OK;
}

static void assign(kvc_kvmix_profile *p, const int *k_order, const int *v_order,
                   const kvc_kvmix_rule *r) {
    int top = kvc_kvmix_top_count(r->top_frac, p->n_layers);
    for (int i = 0; i < p->n_layers; i++) {
        p->layer[i].k_bits = p->layer[i].v_bits = r->lo;
        p->layer[i].k_rpc = p->layer[i].v_rpc = r->rpc_lo;
    }
    for (int i = 0; i < top; i++) {
        p->layer[k_order[i]].k_bits = r->k_hi;
        p->layer[k_order[i]].k_rpc = r->rpc_hi;
        p->layer[v_order[i]].v_bits = r->v_hi;
        p->layer[v_order[i]].v_rpc = r->rpc_hi;
    }
}

kvc_status kvc_kvmix_profile_from_scores(int n_layers, const double *k_score,
                                         const double *v_score, const kvc_kvmix_rule *rule,
                                         const char *model, const char *source,
                                         kvc_kvmix_profile **out) {
    *out = NULL;
    KVC_TRY(check_rule(rule, n_layers));
    for (int i = 0; i < n_layers; i++)
        KVC_CHECK(isfinite(k_score[i]) && isfinite(v_score[i]) && k_score[i] >= 0 && v_score[i] >= 0,
                  KVC_ERR_ARG, "kvmix profile: layer %d score not finite (k %g, v %g)", i,
                  k_score[i], v_score[i]);
    kvc_kvmix_profile *p;
    KVC_TRY(alloc_profile(n_layers, &p));
    int *ko = malloc(sizeof(int) * n_layers), *vo = malloc(sizeof(int) * n_layers);
    if (!ko || !vo) {
        free(ko);
        free(vo);
        kvc_kvmix_profile_free(p);
        return kvc_fail(KVC_ERR_NOMEM, "kvmix profile");
    }
    for (int i = 0; i < n_layers; i++) {
        ko[i] = vo[i] = i;
        p->layer[i].k_score = k_score[i];
        p->layer[i].v_score = v_score[i];
    }
    sort_key = k_score;
    qsort(ko, (size_t)n_layers, sizeof(int), by_score_desc);
    sort_key = v_score;
    qsort(vo, (size_t)n_layers, sizeof(int), by_score_desc);
    assign(p, ko, vo, rule);
    if (model) copy_rest(p->model, model);
    if (source) copy_rest(p->source, source);
    free(ko);
    free(vo);
    *out = p;
    return KVC_OK;
}

kvc_status kvc_kvmix_profile_random(int n_layers, const kvc_kvmix_rule *rule, uint64_t seed,
                                    const char *model, kvc_kvmix_profile **out) {
    *out = NULL;
    KVC_TRY(check_rule(rule, n_layers));
    kvc_kvmix_profile *p;
    KVC_TRY(alloc_profile(n_layers, &p));
    int *ko = malloc(sizeof(int) * n_layers), *vo = malloc(sizeof(int) * n_layers);
    if (!ko || !vo) {
        free(ko);
        free(vo);
        kvc_kvmix_profile_free(p);
        return kvc_fail(KVC_ERR_NOMEM, "kvmix profile");
    }
    uint64_t seed0 = seed;
    for (int i = 0; i < n_layers; i++) ko[i] = vo[i] = i;
    for (int i = n_layers - 1; i > 0; i--) { /* Fisher-Yates, K and V independently */
        int j = (int)(kvc_rng_next(&seed) % (uint64_t)(i + 1)), t = ko[i];
        ko[i] = ko[j], ko[j] = t;
        j = (int)(kvc_rng_next(&seed) % (uint64_t)(i + 1)), t = vo[i];
        vo[i] = vo[j], vo[j] = t;
    }
    assign(p, ko, vo, rule);
    if (model) copy_rest(p->model, model);
    snprintf(p->source, sizeof p->source, "random ranking, seed %llu", (unsigned long long)seed0);
    free(ko);
    free(vo);
    *out = p;
    return KVC_OK;
}

/* ---- writing ------------------------------------------------------------------ */

static void write_text_field(FILE *f, const char *key, const char *v) {
    if (!v[0]) return;
    fprintf(f, "%s ", key);
    for (const char *c = v; *c; c++) fputc(*c == '\n' || *c == '#' ? ' ' : *c, f);
    fputc('\n', f);
}

kvc_status kvc_kvmix_profile_write(const kvc_kvmix_profile *p, FILE *f) {
    double kb, vb;
    kvc_kvmix_profile_avg_bits(p, &kb, &vb);
    fprintf(f, "kvmix-profile 1\n");
    fprintf(f, "# KVmix layer configuration: written by `kvcomp profile`, read by --kv kvmix:profile=FILE\n");
    fprintf(f, "# average bits: K %.4f, V %.4f\n", kb, vb);
    write_text_field(f, "model", p->model);
    write_text_field(f, "source", p->source);
    fprintf(f, "layers %d\n", p->n_layers);
    fprintf(f, "# layer k_bits v_bits k_rpc v_rpc k_score v_score\n");
    for (int i = 0; i < p->n_layers; i++) {
        const kvc_kvmix_layer *L = &p->layer[i];
        fprintf(f, "layer %d %d %d %.4g %.4g %.6e %.6e\n", i, L->k_bits, L->v_bits, (double)L->k_rpc,
                (double)L->v_rpc, L->k_score, L->v_score);
    }
    return ferror(f) ? kvc_fail(KVC_ERR_IO, "kvmix profile: write error") : KVC_OK;
}

kvc_status kvc_kvmix_profile_save(const kvc_kvmix_profile *p, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return kvc_fail(KVC_ERR_IO, "profile %s: cannot create: %s", path, strerror(errno));
    kvc_status st = kvc_kvmix_profile_write(p, f);
    if (fclose(f) != 0 && st == KVC_OK) st = kvc_fail(KVC_ERR_IO, "profile %s: write error", path);
    return st;
}

void kvc_kvmix_profile_avg_bits(const kvc_kvmix_profile *p, double *k_bits, double *v_bits) {
    double k = 0, v = 0;
    for (int i = 0; i < p->n_layers; i++) {
        k += p->layer[i].k_bits;
        v += p->layer[i].v_bits;
    }
    *k_bits = p->n_layers ? k / p->n_layers : 0;
    *v_bits = p->n_layers ? v / p->n_layers : 0;
}
