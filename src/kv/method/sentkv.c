/* Method `sentkv` (SentKVCompress: Sentence-Level Dynamic KVCache Compression
 * for Efficient Long-Context LLM Inference, ICLR 2026 submission): the cache
 * is kept whole, in sentences, and each decode step attends the sentences
 * whose keys may score high for the current query, whole, until the usage
 * rate U (the fraction of the context's K/V attended) is met; the attention
 * sinks and the recent window are always attended.
 *
 *  - Sentences: the token ids the forward pass reports (on_tokens) get
 *    boundary weights from the model's vocabulary (sentence_vocab.h) and go
 *    through the online splitter (sentence_split.h, Algorithm 2 with L and Δ);
 *    decode tokens close sentences as they arrive. Without token ids (the
 *    synthetic `bench attn`) sentences are L tokens long (the splitter's own
 *    fall-back on text without boundaries).
 *  - Profiles (§4.1.2): per sentence and KV head the channel-wise key max and
 *    min (select/minmax.h, shared with quest): full blocks of 16 sentences in
 *    8-bit codes rounded outward, the open block in f16 (profile=q8, 0.625x
 *    the bytes of profile=f16, which keeps every profile in f16).
 *  - Storage: the recent window and the open sentence stay in the dense hot
 *    window; whole sentences leave it once they end before the window, into
 *    dense f16 chunks with one profile per sentence (unit_chunks.h). The
 *    sentences that hold the first `sinks` tokens go to a chunk without
 *    profiles, which is always attended.
 *  - Selection (§4.2.1): the driver scores every sentence by its bound (the
 *    sum over the G query heads of the group, which costs one head's
 *    arithmetic; heads=max the largest) and takes whole sentences
 *    in score order while they fit the budget U · context − (sinks + hot
 *    window); the driver's unit statistics report how much of each step's
 *    selection the previous step had selected (the reuse rate of §4.2.2).
 *  - Far tier (`far=PATH`, the CPU analogue of the paper's GPU-CPU offload):
 *    sealed sentences go to a file (codec/far.h) instead of RAM, read back
 *    with pread and verified block by block when selected; RAM keeps the
 *    profiles, the sinks and the hot window. A truncated or altered file is
 *    reported as the attention's error (after_attend).
 *  - Near buffer (§4.2.2 reuse, `near=1`): the sentences of the previous
 *    step's selection stay side by side in the stream's near buffer
 *    (kv/near.h), and a step copies in only those it newly selects, then
 *    attends them all in long runs; in the far tier the blocks of the
 *    previous selection stay in RAM (on_select drops those the new selection
 *    does not cover), so a step reads only its newly selected sentences from
 *    the file (bytes served from RAM: far_reused_bytes).
 *  - Memory limit (`mem=256M`, the CLI's --kv-mem): sealed sentences stay in
 *    RAM while their K/V fit the limit (all streams together); those that do
 *    not go to the far tier (a temporary file, deleted when the cache is
 *    freed, unless `far=` names one). Profiles, sinks, hot windows and the near
 *    buffer are on top of the limit and reported in the stats. */
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"
#include "kv/codec/far.h"
#include "kv/method/budget.h"
#include "kv/method/method.h"
#include "kv/method/sentence_split.h"
#include "kv/method/sentence_vocab.h"
#include "kv/method/unit_chunks.h"
#include "kv/select/minmax.h"

typedef struct sentkv_cfg {
    float usage;  /* U: fraction of the context (<= 1) or tokens (> 1) attended per step */
    int L, delta; /* target sentence length and window */
    int split;    /* kvc_split_mode */
    int cap;      /* longest sentence in split=punct */
    int sinks;    /* first tokens always attended */
    int recent;   /* newest tokens always attended (kept in the hot window) */
    int block;    /* tokens per chunk */
    char far[KVC_PARAM_STR_MAX]; /* "" or the far tier's file */
    int near;     /* keep the last selection in a near buffer (RAM: kv/near.h; far tier: its blocks) */
    char mem[KVC_PARAM_STR_MAX]; /* "" or the RAM allowed to sealed sentences ("256M") */
    int profile;  /* 0 f16, 1 q8 (select/minmax.h) */
    int heads;    /* 0: a sentence scores the sum of its group's heads' bounds, 1: the largest */
} sentkv_cfg;

static const kvc_param sentkv_params[] = {
    {.key = "usage", .type = KVC_PARAM_FLOAT, .offset = offsetof(sentkv_cfg, usage), .def = "0.1",
     .min = 0, .max = 1e9, .help = "U: tokens attended per step, a fraction of the context (<= 1) or a count (> 1)"},
    {.key = "L", .type = KVC_PARAM_INT, .offset = offsetof(sentkv_cfg, L), .def = "14",
     .min = 1, .max = 4096, .help = "target sentence length in tokens"},
    {.key = "delta", .type = KVC_PARAM_INT, .offset = offsetof(sentkv_cfg, delta), .def = "8",
     .min = 1, .max = 4096, .help = "search window around the target end (+-delta tokens)"},
    {.key = "split", .type = KVC_PARAM_ENUM, .offset = offsetof(sentkv_cfg, split), .def = "weighted",
     .choices = "weighted|flat|length|punct",
     .help = "Algorithm 2 | no punctuation weights | no punctuation | no length control"},
    {.key = "cap", .type = KVC_PARAM_INT, .offset = offsetof(sentkv_cfg, cap), .def = "64",
     .min = 1, .max = 65536, .help = "split=punct: longest sentence without a boundary"},
    {.key = "sinks", .type = KVC_PARAM_INT, .offset = offsetof(sentkv_cfg, sinks), .def = "4",
     .min = 0, .max = 1 << 20, .help = "the first tokens (attention sinks) are always attended"},
    {.key = "recent", .type = KVC_PARAM_INT, .offset = offsetof(sentkv_cfg, recent), .def = "32",
     .min = 0, .max = 1 << 20, .help = "the newest tokens are always attended"},
    {.key = "block", .type = KVC_PARAM_INT, .offset = offsetof(sentkv_cfg, block), .def = "4096",
     .min = 16, .max = 1 << 20, .help = "tokens per chunk (sentences are appended whole)"},
    {.key = "far", .type = KVC_PARAM_STRING, .offset = offsetof(sentkv_cfg, far), .def = "",
     .help = "far tier: keep sealed sentences in this file (created), read back with pread"},
    {.key = "near", .type = KVC_PARAM_BOOL, .offset = offsetof(sentkv_cfg, near), .def = "1",
     .help = "near buffer: the previous step's selected sentences stay side by side in RAM and are attended "
             "from there; only newly selected ones are copied (far tier: read from the file)"},
    {.key = "mem", .type = KVC_PARAM_STRING, .offset = offsetof(sentkv_cfg, mem), .def = "",
     .help = "RAM for sealed sentences (bytes, or with K/M/G); the rest go to the far tier (a temporary file "
             "unless far= names one)"},
    {.key = "profile", .type = KVC_PARAM_ENUM, .offset = offsetof(sentkv_cfg, profile), .def = "q8",
     .choices = "f16|q8",
     .help = "sentence profiles: f16 min/max rounded outward | 8-bit codes on a per-16-sentence grid, "
             "rounded outward (0.625x the bytes, the same KL within noise)"},
    {.key = "heads", .type = KVC_PARAM_ENUM, .offset = offsetof(sentkv_cfg, heads), .def = "sum",
     .choices = "sum|max",
     .help = "a sentence's score for the query heads of a group: the sum of their bounds (one head's "
             "arithmetic for all of them) | the largest"},
};

/* "" -> 0 (no limit); digits with an optional K, M or G (powers of 1024). */
static kvc_status parse_mem(const char *t, int64_t *out) {
    *out = 0;
    if (!*t) return KVC_OK;
    char *end;
    errno = 0;
    long long v = strtoll(t, &end, 10);
    int64_t mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1 << 10, end++;
    else if (*end == 'M' || *end == 'm') mul = 1 << 20, end++;
    else if (*end == 'G' || *end == 'g') mul = 1 << 30, end++;
    KVC_CHECK(end != t && !*end && errno == 0 && v >= 1 && v <= INT64_MAX / mul, KVC_ERR_ARG,
              "sentkv: mem='%s' is not a size (a positive number of bytes, or one with K, M or G)", t);
    *out = (int64_t)v * mul;
    return KVC_OK;
}

static kvc_status sentkv_check(const void *cfgp) {
    int64_t m;
    return parse_mem(((const sentkv_cfg *)cfgp)->mem, &m);
}

typedef struct sentkv_state {
    sentkv_cfg cfg;
    kvc_splitter sp;
    kvc_vocab_weights vw;
    float *wbuf;
    int wcap;
    kvc_status err; /* a failure in on_tokens, reported by the next build_chunk */
    kvc_far *far;   /* NULL: sentences stay in RAM */
    int64_t mem;    /* RAM allowed to sealed sentences (0: no limit; all go far if far is set) */
    atomic_llong in_ram; /* bytes of sealed sentences in RAM, all streams */
} sentkv_state;

/* Creates a far file in $TMPDIR (or /tmp) and unlinks it at once: it lives
 * as long as the store keeps it open. */
static kvc_status open_temp_far(kvc_far **out) {
    const char *dir = getenv("TMPDIR");
    char path[256];
    snprintf(path, sizeof path, "%s/kvcomp-far-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) return kvc_fail(KVC_ERR_IO, "sentkv: temporary far file '%s': %s", path, strerror(errno));
    close(fd);
    kvc_status st = kvc_far_open(path, out);
    unlink(path);
    return st;
}

static kvc_status sentkv_create(const kvc_method_env *env, void **state) {
    sentkv_state *st = calloc(1, sizeof *st);
    if (!st) return kvc_fail(KVC_ERR_NOMEM, "sentkv state");
    st->cfg = *(const sentkv_cfg *)env->cfg;
    kvc_status r = kvc_split_init(&st->sp, st->cfg.L, st->cfg.delta, st->cfg.cap, (kvc_split_mode)st->cfg.split);
    if (r == KVC_OK) r = parse_mem(st->cfg.mem, &st->mem);
    if (r == KVC_OK && st->cfg.far[0]) r = kvc_far_open(st->cfg.far, &st->far);
    else if (r == KVC_OK && st->mem > 0) r = open_temp_far(&st->far);
    if (r == KVC_OK && st->far) kvc_far_set_near(st->far, st->cfg.near);
    if (r != KVC_OK) {
        kvc_split_free(&st->sp);
        kvc_far_close(st->far);
        free(st);
        return r;
    }
    *state = st;
    return KVC_OK;
}

static void sentkv_destroy(void *state) {
    sentkv_state *st = state;
    kvc_split_free(&st->sp);
    kvc_vocab_weights_free(&st->vw);
    kvc_far_close(st->far);
    free(st->wbuf);
    free(st);
}

/* Tokens of positions pos0..: a new sequence at 0; a gap (tokens the cache
 * was not told) counts as text without boundaries; repeated positions are skipped. */
static void sentkv_on_tokens(void *state, const int32_t *tokens, int n, int64_t pos0,
                             kvc_token_text_fn text, void *text_ctx) {
    sentkv_state *st = state;
    if (pos0 == 0) {
        kvc_split_reset(&st->sp);
        st->err = KVC_OK;
    }
    if (st->err != KVC_OK) return;
    int64_t gap = pos0 - st->sp.total;
    int skip = gap < 0 ? (int)(-gap < n ? -gap : n) : 0;
    int64_t need = (gap > 0 ? gap : 0) + n - skip;
    if (need > st->wcap) {
        float *w = realloc(st->wbuf, (size_t)need * sizeof *w);
        if (!w) {
            st->err = kvc_fail(KVC_ERR_NOMEM, "sentkv token weights (%lld)", (long long)need);
            return;
        }
        st->wbuf = w;
        st->wcap = (int)need;
    }
    int64_t k = 0;
    for (; k < gap; k++) st->wbuf[k] = 0.0f;
    for (int i = skip; i < n; i++) st->wbuf[k++] = kvc_vocab_weight(&st->vw, tokens[i], text, text_ctx);
    st->err = kvc_split_push(&st->sp, st->wbuf, (int)k);
}

/* The largest sentence end e with lo < e <= hi, or lo if there is none.
 * Positions the splitter has not been told (no token ids) end sentences
 * every L tokens from its open sentence. */
static int64_t last_end(const sentkv_state *st, int64_t lo, int64_t hi) {
    const kvc_splitter *sp = &st->sp;
    if (sp->total < hi) {
        int64_t base = sp->current, e = base + (hi - base) / st->cfg.L * st->cfg.L;
        if (e > lo) return e;
    }
    int64_t a = 0, b = sp->n_ends; /* first end > hi */
    while (a < b) {
        int64_t m = a + (b - a) / 2;
        if (sp->ends[m] <= hi) a = m + 1;
        else b = m;
    }
    return a > 0 && sp->ends[a - 1] > lo ? sp->ends[a - 1] : lo;
}

/* The end of the sentence that starts at pos (< limit). */
static int64_t next_end(const sentkv_state *st, int64_t pos, int64_t limit) {
    const kvc_splitter *sp = &st->sp;
    int64_t a = 0, b = sp->n_ends; /* first end > pos */
    while (a < b) {
        int64_t m = a + (b - a) / 2;
        if (sp->ends[m] <= pos) a = m + 1;
        else b = m;
    }
    int64_t e = a < sp->n_ends ? sp->ends[a] : pos + st->cfg.L; /* past the splitter: every L */
    return e < limit ? e : limit;
}

static int sentkv_hot_leave(void *state, kvc_stream *s, void *sstate) {
    (void)sstate;
    const sentkv_state *st = state;
    int64_t h0 = s->n_pos - s->hot->n, hi = s->n_pos - st->cfg.recent;
    if (hi <= h0) return 0;
    return (int)(last_end(st, h0, hi) - h0);
}

/* With a memory limit, takes bytes of the RAM allowed to sealed sentences if
 * they fit (1: keep them in RAM); without one, the far tier takes everything. */
static int reserve_ram(sentkv_state *st, int64_t bytes) {
    if (st->mem <= 0) return 0;
    long long cur = atomic_load(&st->in_ram);
    do {
        if (cur + bytes > st->mem) return 0;
    } while (!atomic_compare_exchange_weak(&st->in_ram, &cur, cur + bytes));
    return 1;
}

/* A sealed RAM chunk (dense, with profiles) gives its bytes back to the limit. */
static void sentkv_chunk_free(void *state, kvc_chunk *c) {
    sentkv_state *st = state;
    if (st->mem > 0 && c->sel.ops && c->kc.ops != &kvc_codec_far_f16)
        atomic_fetch_sub(&st->in_ram, (long long)c->n * c->kc.dim * 4);
}

static kvc_status sentkv_build_chunk(void *state, kvc_stream *s, void *sstate, const float *k,
                                     const float *v, int n, int64_t pos0, kvc_chunk **out) {
    (void)sstate;
    sentkv_state *st = state;
    *out = NULL;
    KVC_TRY(st->err);
    int *len = malloc((size_t)(n ? n : 1) * sizeof *len);
    if (!len) return kvc_fail(KVC_ERR_NOMEM, "sentkv sentences (%d tokens)", n);
    int nu = 0, n_sink = 0, sink_tokens = 0;
    for (int64_t p = pos0; p < pos0 + n;) {
        int64_t e = next_end(st, p, pos0 + n);
        len[nu++] = (int)(e - p);
        if (p < st->cfg.sinks) n_sink++, sink_tokens += (int)(e - p);
        p = e;
    }
    kvc_status r = KVC_OK;
    if (n_sink)
        r = kvc_unit_chunks_append(s, st->cfg.block, KVC_UNITS_PLAIN, KVC_CHUNK_ALWAYS, k, v, pos0, len, n_sink);
    size_t off = (size_t)sink_tokens * s->dim;
    int idx_fmt = KVC_UNITS_INDEXED | (st->cfg.profile ? KVC_MM_Q8 : 0) | (st->cfg.heads ? 0 : KVC_MM_HEADS_SUM);
    if (r == KVC_OK && nu > n_sink && st->far && !reserve_ram(st, (int64_t)(n - sink_tokens) * s->dim * 4)) {
        kvc_codec fc = {.ops = &kvc_codec_far_f16, .dim = s->dim, .cfg = st->far};
        r = kvc_unit_chunks_encode(s, &fc, idx_fmt, KVC_CHUNK_FAR, k + off, v + off, pos0 + sink_tokens, len + n_sink,
                                   nu - n_sink);
    } else if (r == KVC_OK && nu > n_sink) {
        r = kvc_unit_chunks_append(s, st->cfg.block, idx_fmt, 0, k + off, v + off, pos0 + sink_tokens, len + n_sink,
                                   nu - n_sink);
    }
    free(len);
    return r;
}

static kvc_select_plan sentkv_select(void *state, kvc_stream *s, void *sstate) {
    (void)sstate;
    const sentkv_state *st = state;
    int64_t always = s->hot->n;
    for (int ci = 0; ci < s->n_chunks; ci++)
        if (!s->chunks[ci]->sel.ops || (s->chunks[ci]->flags & KVC_CHUNK_ALWAYS)) always += s->chunks[ci]->n;
    int64_t b = kvc_budget_tokens(st->cfg.usage, s->n_pos) - always;
    return (kvc_select_plan){.budget = b > 0 ? b : 0, .reuse = 0, .near = st->cfg.near};
}

static kvc_status sentkv_after_attend(void *state) {
    sentkv_state *st = state;
    return st->far ? kvc_far_take_error(st->far) : KVC_OK;
}

static void sentkv_far_stats(void *state, kvc_cache_stats *out) {
    sentkv_state *st = state;
    if (!st->far) return;
    kvc_far_stats fs;
    kvc_far_stats_get(st->far, &fs);
    out->far_bytes += fs.stored, out->far_read_bytes += fs.read, out->far_read_s += fs.read_s;
    out->far_reused_bytes += fs.reused, out->far_near_bytes += fs.near;
}

/* The near buffer follows the selection: before the step's attention, every
 * far chunk of the stream keeps in RAM only the blocks of its units selected
 * now (units arrive sorted by chunk, then position). */
static void sentkv_on_select(void *state, kvc_stream *s, void *sstate, int n_units, const int32_t *chunk_idx,
                             const kvc_range *units) {
    (void)sstate;
    const sentkv_state *st = state;
    if (!st->far || !st->cfg.near) return;
    int i = 0;
    for (int ci = 0; ci < s->n_chunks; ci++) {
        kvc_chunk *c = s->chunks[ci];
        while (i < n_units && chunk_idx[i] < ci) i++;
        int n = 0;
        while (i + n < n_units && chunk_idx[i + n] == ci) n++;
        if (c->kc.ops == &kvc_codec_far_f16) kvc_far_near_keep(&c->kc, c->kb, units + i, n);
        if (c->vc.ops == &kvc_codec_far_f16) kvc_far_near_keep(&c->vc, c->vb, units + i, n);
        i += n;
    }
}

/* The splitter and the vocabulary table are per cache: counted with stream (0, 0). */
static uint64_t sentkv_buffer_bytes(const void *state, const kvc_stream *s, const void *sstate) {
    (void)sstate;
    const sentkv_state *st = state;
    if (s->layer != 0 || s->head != 0) return 0;
    return sizeof *st + (uint64_t)st->sp.cap_w * sizeof(float) + (uint64_t)st->sp.cap_ends * sizeof(int64_t) +
           (uint64_t)st->vw.cap * sizeof(float) + (uint64_t)st->wcap * sizeof(float);
}

const kvc_method kvc_method_sentkv = {
    .name = "sentkv",
    .summary = "sentence-level selection: sentences split at punctuation and length, key min/max profiles, "
               "whole sentences attended up to a usage rate",
    .paper = "SentKVCompress (ICLR 2026 submission)",
    .flags = KVC_METHOD_BASE,
    .params = sentkv_params,
    .n_params = (int)(sizeof sentkv_params / sizeof sentkv_params[0]),
    .positional = 0,
    .cfg_size = sizeof(sentkv_cfg),
    .check = sentkv_check,
    .ops = {
        .create = sentkv_create,
        .destroy = sentkv_destroy,
        .hot_leave = sentkv_hot_leave,
        .build_chunk = sentkv_build_chunk,
        .select = sentkv_select,
        .buffer_bytes = sentkv_buffer_bytes,
        .after_attend = sentkv_after_attend,
        .far_stats = sentkv_far_stats,
        .on_select = sentkv_on_select,
        .chunk_free = sentkv_chunk_free,
        .on_tokens = sentkv_on_tokens,
    },
};
