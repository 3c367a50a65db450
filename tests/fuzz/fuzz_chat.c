/* libFuzzer target for chat templates and prompts with special tokens
 * (untrusted: chat lines, --system, prompt files). The first byte picks the
 * template family (every family kvc_chat_template_kind knows) and whether the
 * assistant prompt is added; the rest is split at 0xff bytes into messages,
 * each one's first byte choosing its role. Property: only the template's own
 * markers become control tokens - the conversation tokenizes to as many
 * control tokens as the same conversation with every content replaced by "x",
 * whatever the contents spell (e.g. "<|im_end|><|im_start|>system").
 * Built by `make fuzz`; the committed corpus replays in `make test`. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_vocab.h"

typedef struct family {
    const char *tmpl;  /* template text that selects the family */
    const char *vocab; /* fixture vocabulary holding its markers */
} family;

static const family k_families[] = {
    {NULL, "smollm-mini"},
    {"{{'<|im_start|>system\\nYou are a helpful AI assistant<|im_end|>'}}<|im_start|>",
     "smollm-mini"},
    {"<|im_start|>", "qwen2-mini"},
    {"<|start_header_id|>{{role}}<|end_header_id|>", "llama3-mini"},
    {"[INST]", "spm-mini"},
    {"[INST] <<SYS>>", "spm-mini"},
    {"bos_token + '[INST] <<SYS>>", "spm-mini"},
    {"content.strip() [INST] <<SYS>>", "spm-mini"},
    {"' [INST] ' + system_message", "spm-mini"},
    {"[INST][AVAILABLE_TOOLS]", "spm-mini"},
    {"\"[INST]\"[AVAILABLE_TOOLS]", "spm-mini"},
    {"[INST][SYSTEM_PROMPT]", "spm-mini"},
};
enum { N_FAMILIES = sizeof k_families / sizeof k_families[0], MAX_MSGS = 16 };
static kvc_tokenizer *g_tok[N_FAMILIES];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    for (int i = 0; i < N_FAMILIES; i++)
        g_tok[i] = fuzz_vocab(k_families[i].vocab);
    return 0;
}

/* Control tokens in the tokenized conversation (kvc_chat_tokenize's path). */
static int chat_controls(const kvc_tokenizer *t, const char *tmpl, const kvc_chat_msg *msgs,
                         int n_msgs, int add_ass) {
    int cap = 64, n = 0, controls = 0;
    int32_t *ids = NULL;
    for (int round = 0; round < 2; round++) {
        free(ids);
        ids = malloc((size_t)cap * sizeof *ids);
        if (!ids) __builtin_trap();
        if (kvc_chat_tokenize_tmpl(t, tmpl, msgs, n_msgs, add_ass, ids, cap, &n) != KVC_OK)
            __builtin_trap();
        if (n <= cap) break;
        cap = n;
    }
    if (n > cap) __builtin_trap();
    for (int i = 0; i < n; i++)
        controls += fuzz_is_control(t, ids[i]);
    free(ids);
    return controls;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int f = data[0] % N_FAMILIES, add_ass = data[0] >> 7;
    static const char *const roles[] = {"system", "user", "assistant"};
    kvc_chat_msg msgs[MAX_MSGS] = {{0}}, plain[MAX_MSGS] = {{0}};
    char *contents[MAX_MSGS];
    int n = 0;
    for (size_t pos = 1; pos < size && n < MAX_MSGS;) {
        const uint8_t *end = memchr(data + pos, 0xff, size - pos);
        size_t len = end ? (size_t)(end - (data + pos)) : size - pos;
        const char *role = roles[len ? data[pos] % 3 : 1];
        size_t skip = len ? 1 : 0; /* the role byte */
        contents[n] = malloc(len - skip + 1);
        if (!contents[n]) __builtin_trap();
        memcpy(contents[n], data + pos + skip, len - skip);
        contents[n][len - skip] = '\0'; /* an embedded NUL ends the content, as in C callers */
        msgs[n] = (kvc_chat_msg){role, contents[n]};
        plain[n] = (kvc_chat_msg){role, "x"};
        n++;
        pos += len + 1;
    }
    const kvc_tokenizer *t = g_tok[f];
    const char *tmpl = k_families[f].tmpl;
    if (chat_controls(t, tmpl, msgs, n, add_ass) != chat_controls(t, tmpl, plain, n, add_ass))
        __builtin_trap();
    for (int i = 0; i < n; i++)
        free(contents[i]);
    return 0;
}
