/* `kvcomp chat`: an interactive chat. Reads one user message per line from
 * stdin (a prompt "> " only on a terminal, so it also works piped), keeps the
 * history, and answers with the model's chat template. Each turn re-renders
 * the whole conversation, keeps the tokens the context already holds when they
 * are a prefix of it and prefills only the rest; when the history no longer
 * fits the context the oldest turns are dropped. "/reset" forgets the history,
 * "/exit" or end of input ends the chat. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "session.h"

static const kvc_cmd_help k_help = {
    "chat",
    "[-m MODEL] [options]",
    "Interactive chat: one message per line on stdin; /reset forgets the history, /exit or\n"
    "end of input quits. Works with piped input too. -p gives a first message.",
    KVC_F_MODEL | KVC_F_PROMPT | KVC_F_NPRED | KVC_F_CTX | KVC_F_THREADS | KVC_F_BATCH |
        KVC_F_SAMPLE | KVC_F_KV | KVC_F_CHAT,
};

typedef struct history {
    kvc_chat_msg *msgs;
    char **owned; /* strings to free, parallel to msgs */
    int n, cap;
} history;

static int hist_add(history *h, const char *role, char *content) {
    if (h->n == h->cap) {
        int cap = h->cap * 2 + 8;
        kvc_chat_msg *m = realloc(h->msgs, (size_t)cap * sizeof *m);
        if (!m) return -1;
        h->msgs = m;
        char **o = realloc(h->owned, (size_t)cap * sizeof *o);
        if (!o) return -1;
        h->owned = o;
        h->cap = cap;
    }
    h->msgs[h->n] = (kvc_chat_msg){role, content};
    h->owned[h->n] = content;
    h->n++;
    return 0;
}

/* Drops the oldest user/assistant pair after the system message. */
static int hist_drop_oldest(history *h, int first) {
    if (h->n - first < 3) return -1; /* keep at least the current user message */
    free(h->owned[first]);
    free(h->owned[first + 1]);
    memmove(h->msgs + first, h->msgs + first + 2, (size_t)(h->n - first - 2) * sizeof *h->msgs);
    memmove(h->owned + first, h->owned + first + 2, (size_t)(h->n - first - 2) * sizeof *h->owned);
    h->n -= 2;
    return 0;
}

static void hist_clear(history *h, int keep) {
    for (int i = keep; i < h->n; i++) free(h->owned[i]);
    h->n = keep;
}

/* Renders and tokenises the conversation with the assistant prompt. */
static int render(kvc_session *s, history *h, int32_t **toks, int *n) {
    return kvc_session_tokenize_chat(s, h->msgs, h->n, toks, n);
}

/* Tokens of the system message (if any) and the last message alone: the
 * least a turn needs. -1 on failure (reported). */
static int alone_tokens(kvc_session *s, const history *h, int first) {
    kvc_chat_msg m[2];
    int k = 0, n = 0;
    if (first) m[k++] = h->msgs[0];
    m[k++] = h->msgs[h->n - 1];
    int32_t *toks = NULL;
    int rc = kvc_session_tokenize_chat(s, m, k, &toks, &n);
    free(toks);
    return rc == 0 ? n : -1;
}

/* One turn: the user message is the last one in h. A message too long for the
 * context is refused before any older turn is dropped to make room, so the
 * history stays as it was. */
static int turn(kvc_session *s, history *h, int first) {
    int32_t *toks = NULL;
    int n = 0, reserve = s->a->n_predict > 0 ? s->a->n_predict : 256;
    int alone = alone_tokens(s, h, first);
    if (alone < 0) return 1;
    if (alone >= s->n_ctx) {
        fprintf(stderr, "kvcomp chat: the message is %d tokens with the template but the context "
                        "holds %d; raise it with -c %d or more\n", alone, s->n_ctx, alone + reserve);
        return -1; /* not fatal: the user can type something shorter */
    }
    for (;;) {
        free(toks);
        if (render(s, h, &toks, &n) != 0) return 1;
        if (n + reserve <= s->n_ctx || hist_drop_oldest(h, first) != 0) break;
    }
    if (n >= s->n_ctx) {
        fprintf(stderr, "kvcomp chat: the message is %d tokens with the template but the context "
                        "holds %d; raise it with -c %d or more\n", n, s->n_ctx, n + reserve);
        free(toks);
        return -1; /* not fatal: the user can type something shorter */
    }
    int common = 0;
    while (common < s->n_hist && common < n && s->hist[common] == toks[common]) common++;
    if (common < s->n_hist || common == n) { /* diverged, or nothing new: start over */
        kvc_ctx_reset(s->ctx);
        s->n_hist = 0;
        common = 0;
    }
    int rc = kvc_session_feed(s, toks + common, n - common);
    free(toks);
    if (rc != 0) return rc;
    char *answer = NULL;
    int limit = s->n_ctx - kvc_ctx_pos(s->ctx);
    if (s->a->n_predict >= 0 && s->a->n_predict < limit) limit = s->a->n_predict;
    rc = kvc_session_generate(s, limit, stdout, &answer);
    fputc('\n', stdout);
    fflush(stdout);
    if (rc != 0 || hist_add(h, "assistant", answer) != 0) {
        free(answer);
        return 1;
    }
    return 0;
}

int kvc_cli_chat(int argc, char **argv) {
    kvc_args a;
    int rc = kvc_args_parse(argc, argv, &k_help, &a);
    if (rc == KVC_ARGS_HELP) return 0;
    if (rc != KVC_ARGS_OK) return 2;
    kvc_session s;
    rc = kvc_session_open(&s, &a, "chat");
    history h = {0};
    int first = 0, tty = isatty(0);
    if (rc == 0 && a.system) {
        char *sys = strdup(a.system);
        if (!sys || hist_add(&h, "system", sys) != 0) rc = 1;
        first = 1;
    }
    const char *pending = a.prompt;
    char *line = NULL;
    size_t cap = 0;
    while (rc == 0) {
        char *msg;
        if (pending) {
            msg = strdup(pending);
            pending = NULL;
        } else {
            if (tty) {
                fputs("> ", stdout);
                fflush(stdout);
            }
            ssize_t len = getline(&line, &cap, stdin);
            if (len < 0) break;
            while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
            if (len == 0) continue;
            if (strcmp(line, "/exit") == 0 || strcmp(line, "/quit") == 0) break;
            if (strcmp(line, "/reset") == 0) {
                hist_clear(&h, first);
                kvc_ctx_reset(s.ctx);
                s.n_hist = 0;
                continue;
            }
            msg = strdup(line);
        }
        if (!msg || hist_add(&h, "user", msg) != 0) {
            free(msg);
            rc = 1;
            break;
        }
        int t = turn(&s, &h, first);
        if (t < 0) { /* too long: forget this message and go on */
            free(h.owned[--h.n]);
            continue;
        }
        rc = t;
    }
    if (rc == 0 && !a.json) kvc_session_summary(&s, stderr);
    free(line);
    hist_clear(&h, 0);
    free(h.msgs);
    free(h.owned);
    if (s.m) kvc_session_close(&s);
    return rc;
}
