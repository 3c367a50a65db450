/* Chat templates: the conversation -> prompt text of the supported families,
 * chosen from the model's tokenizer.chat_template (a Jinja text that is not
 * executed; its family is recognised by marker strings, as llama.cpp's
 * llm_chat_detect_template does):
 *   ChatML   "<|im_start|>" (SmolLM2, Qwen2): <|im_start|>role\n...<|im_end|>\n;
 *            a default system message written literally in the template
 *            (SmolLM2: "You are a helpful AI assistant named SmolLM, trained
 *            by Hugging Face") is added when the first message is not a
 *            system message, as the template itself does
 *   Llama-3  "<|start_header_id|>": <|start_header_id|>role<|end_header_id|>\n\n
 *            content (trimmed) <|eot_id|>; BOS comes from the tokenizer
 *   Llama-2  "[INST]": [INST] <<SYS>>\n...\n<</SYS>>\n\nuser [/INST]assistant</s>
 *            and its variants, Mistral v1/v3/v3-tekken/v7
 * No template, or an unknown one, falls back to ChatML. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "tokenizer/tokenizer_impl.h"

/* The prompt text and, per byte, whether the template wrote it (1) or it is
 * a message's content (0): only template bytes may become control tokens. */
typedef struct str {
    char *p;
    uint8_t *mask;
    size_t n, cap;
    int oom, content; /* content: the bytes being written are a message's */
} str;

static void put(str *s, const char *t, size_t n) {
    if (s->oom) return;
    if (s->n + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->n + n + 1)
            cap *= 2;
        char *p = realloc(s->p, cap);
        if (p) s->p = p;
        uint8_t *m = p ? realloc(s->mask, cap) : NULL;
        if (!m) {
            s->oom = 1;
            return;
        }
        s->mask = m;
        s->cap = cap;
    }
    memcpy(s->p + s->n, t, n);
    memset(s->mask + s->n, !s->content, n);
    s->n += n;
    s->p[s->n] = 0;
}
static void puts_(str *s, const char *t) {
    put(s, t, strlen(t));
}
static void put_trim(str *s, const char *t) { /* without leading/trailing ASCII white space */
    size_t a = 0, b = strlen(t);
    while (a < b && isspace((unsigned char)t[a]))
        a++;
    while (b > a && isspace((unsigned char)t[b - 1]))
        b--;
    put(s, t + a, b - a);
}
/* A message's content: text, whatever special-token text it spells. */
static void put_content(str *s, const char *t) {
    s->content = 1;
    puts_(s, t);
    s->content = 0;
}
static void put_trim_content(str *s, const char *t) {
    s->content = 1;
    put_trim(s, t);
    s->content = 0;
}

static int has(const char *tmpl, const char *needle) {
    return tmpl && strstr(tmpl, needle) != NULL;
}

const char *kvc_chat_template_kind(const char *tmpl) {
    if (!tmpl || !*tmpl) return "chatml";
    if (has(tmpl, "<|im_start|>")) return "chatml";
    if (strncmp(tmpl, "mistral", 7) == 0 || has(tmpl, "[INST]")) {
        if (has(tmpl, "[SYSTEM_PROMPT]")) return "mistral-v7";
        if (has(tmpl, "' [INST] ' + system_message") || has(tmpl, "[AVAILABLE_TOOLS]")) {
            if (has(tmpl, " [INST]")) return "mistral-v1";
            if (has(tmpl, "\"[INST]\"")) return "mistral-v3-tekken";
            return "mistral-v3";
        }
        if (has(tmpl, "content.strip()")) return "llama2-sys-strip";
        if (has(tmpl, "bos_token + '[INST]")) return "llama2-sys-bos";
        if (has(tmpl, "<<SYS>>")) return "llama2-sys";
        return "llama2";
    }
    if (has(tmpl, "<|start_header_id|>") && has(tmpl, "<|end_header_id|>")) return "llama3";
    return "chatml";
}

/* The default system message a ChatML template writes literally
 * ('<|im_start|>system\n...<|im_end|>'), unescaped, or NULL. */
static char *default_system(const char *tmpl) {
    static const char *const heads[] = {"<|im_start|>system\n", "<|im_start|>system\\n"};
    for (int h = 0; h < 2; h++) {
        const char *p = strstr(tmpl, heads[h]);
        if (!p) continue;
        p += strlen(heads[h]);
        const char *e = strstr(p, "<|im_end|>");
        if (!e || e == p) continue;
        size_t n = (size_t)(e - p);
        if (memchr(p, '{', n) || memchr(p, '}', n) || memchr(p, '+', n))
            continue; /* not a literal */
        char *out = malloc(n + 1), *w = out;
        if (!out) return NULL;
        for (size_t i = 0; i < n; i++) {
            if (p[i] == '\\' && i + 1 < n) {
                char c = p[++i];
                *w++ = c == 'n' ? '\n' : c == 't' ? '\t' : c;
            } else {
                *w++ = p[i];
            }
        }
        *w = 0;
        return out;
    }
    return NULL;
}

static int is_role(const kvc_chat_msg *m, const char *role) {
    return m->role && strcmp(m->role, role) == 0;
}

static void fmt_chatml(str *s, const char *tmpl, const kvc_chat_msg *msgs, int n, int add_ass) {
    if (tmpl && n > 0 && !is_role(&msgs[0], "system")) {
        char *sys = default_system(tmpl);
        if (sys) {
            puts_(s, "<|im_start|>system\n");
            puts_(s, sys);
            puts_(s, "<|im_end|>\n");
            free(sys);
        }
    }
    for (int i = 0; i < n; i++) {
        puts_(s, "<|im_start|>");
        put_content(s, msgs[i].role); /* caller text too */
        puts_(s, "\n");
        put_content(s, msgs[i].content);
        puts_(s, "<|im_end|>\n");
    }
    if (add_ass) puts_(s, "<|im_start|>assistant\n");
}

static void fmt_llama3(str *s, const kvc_chat_msg *msgs, int n, int add_ass) {
    for (int i = 0; i < n; i++) {
        puts_(s, "<|start_header_id|>");
        put_content(s, msgs[i].role); /* caller text too */
        puts_(s, "<|end_header_id|>\n\n");
        put_trim_content(s, msgs[i].content);
        puts_(s, "<|eot_id|>");
    }
    if (add_ass) puts_(s, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void fmt_llama2(str *s, const char *kind, const kvc_chat_msg *msgs, int n) {
    int sys_ok = strcmp(kind, "llama2") != 0;
    int bos_inside = strcmp(kind, "llama2-sys-bos") == 0;
    int strip = strcmp(kind, "llama2-sys-strip") == 0;
    int inside = 1;
    puts_(s, "[INST] ");
    for (int i = 0; i < n; i++) {
        if (!inside) {
            inside = 1;
            puts_(s, bos_inside ? "<s>[INST] " : "[INST] ");
        }
        void (*content)(str *, const char *) = strip ? put_trim_content : put_content;
        if (is_role(&msgs[i], "system")) {
            if (sys_ok) {
                puts_(s, "<<SYS>>\n");
                content(s, msgs[i].content);
                puts_(s, "\n<</SYS>>\n\n");
            } else {
                content(s, msgs[i].content);
                puts_(s, "\n");
            }
        } else if (is_role(&msgs[i], "user")) {
            content(s, msgs[i].content);
            puts_(s, " [/INST]");
        } else {
            content(s, msgs[i].content);
            puts_(s, "</s>");
            inside = 0;
        }
    }
}

static void fmt_mistral(str *s, const char *kind, const kvc_chat_msg *msgs, int n) {
    if (strcmp(kind, "mistral-v7") == 0) {
        for (int i = 0; i < n; i++) {
            if (is_role(&msgs[i], "system")) {
                puts_(s, "[SYSTEM_PROMPT] ");
                put_content(s, msgs[i].content);
                puts_(s, "[/SYSTEM_PROMPT]");
            } else if (is_role(&msgs[i], "user")) {
                puts_(s, "[INST] ");
                put_content(s, msgs[i].content);
                puts_(s, "[/INST]");
            } else {
                puts_(s, " ");
                put_content(s, msgs[i].content);
                puts_(s, "</s>");
            }
        }
        return;
    }
    const char *lead = strcmp(kind, "mistral-v1") == 0 ? " " : "";
    const char *trail = strcmp(kind, "mistral-v3-tekken") == 0 ? "" : " ";
    int trim_ass = strcmp(kind, "mistral-v3") == 0;
    int inside = 0;
    for (int i = 0; i < n; i++) {
        if (!inside) {
            puts_(s, lead);
            puts_(s, "[INST]");
            puts_(s, trail);
            inside = 1;
        }
        if (is_role(&msgs[i], "system")) {
            put_content(s, msgs[i].content);
            puts_(s, "\n\n");
        } else if (is_role(&msgs[i], "user")) {
            put_content(s, msgs[i].content);
            puts_(s, lead);
            puts_(s, "[/INST]");
        } else {
            puts_(s, trail);
            if (trim_ass)
                put_trim_content(s, msgs[i].content);
            else
                put_content(s, msgs[i].content);
            puts_(s, "</s>");
            inside = 0;
        }
    }
}

kvc_status kvc_chat_format(const char *tmpl, const kvc_chat_msg *msgs, int n_msgs,
                           int add_assistant_prompt, char **out) {
    uint8_t *mask = NULL;
    kvc_status st = kvc_chat_format_masked(tmpl, msgs, n_msgs, add_assistant_prompt, out, &mask);
    free(mask);
    return st;
}

kvc_status kvc_chat_format_masked(const char *tmpl, const kvc_chat_msg *msgs, int n_msgs,
                                  int add_assistant_prompt, char **out, uint8_t **mask) {
    KVC_CHECK(out && mask, KVC_ERR_ARG, "chat_apply: out is NULL");
    *out = NULL;
    *mask = NULL;
    KVC_CHECK(n_msgs >= 0 && (msgs || n_msgs == 0), KVC_ERR_ARG, "chat_apply: %d messages", n_msgs);
    for (int i = 0; i < n_msgs; i++)
        KVC_CHECK(msgs[i].role && msgs[i].content, KVC_ERR_ARG,
                  "chat_apply: message %d has a NULL %s", i, msgs[i].role ? "content" : "role");
    const char *kind = kvc_chat_template_kind(tmpl);
    str s = {0};
    puts_(&s, ""); /* an empty conversation gives "" rather than NULL */
    if (strcmp(kind, "chatml") == 0)
        fmt_chatml(&s, tmpl, msgs, n_msgs, add_assistant_prompt);
    else if (strcmp(kind, "llama3") == 0)
        fmt_llama3(&s, msgs, n_msgs, add_assistant_prompt);
    else if (strncmp(kind, "llama2", 6) == 0)
        fmt_llama2(&s, kind, msgs, n_msgs);
    else
        fmt_mistral(&s, kind, msgs, n_msgs);
    if (s.oom) {
        free(s.p);
        free(s.mask);
        return kvc_fail(KVC_ERR_NOMEM, "chat_apply: prompt text");
    }
    *out = s.p;
    *mask = s.mask;
    return KVC_OK;
}

kvc_status kvc_tokenizer_chat_apply(const kvc_tokenizer *t, const kvc_chat_msg *msgs, int n_msgs,
                                    int add_assistant_prompt, char **out) {
    KVC_CHECK(t, KVC_ERR_ARG, "chat_apply: no tokenizer (model not loaded?)");
    return kvc_chat_format(t->chat_template, msgs, n_msgs, add_assistant_prompt, out);
}
