/* `kvcomp run`: prompt -> streamed text, then one summary line (prompt and
 * decode tokens/s, KV bytes and bits per element) on stderr.
 *
 * Unlike llama-cli's raw -p, the prompt is wrapped in the model's chat template
 * (as one user message, plus --system when given) whenever the model has one,
 * so that `make run` with an instruct model gets an answer rather than a
 * continuation; --raw feeds the prompt as plain text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kvcomp_eval.h"
#include "session.h"

static const kvc_cmd_help k_help = {
    "run",
    "[-m MODEL] (-p PROMPT | -f FILE) [options]",
    "Generates text from a prompt and streams it to stdout, then prints one summary line to\n"
    "stderr: prompt and decode tokens/s, KV cache bytes and bits per element. The prompt is\n"
    "wrapped in the model's chat template unless --raw is given.",
    KVC_F_MODEL | KVC_F_PROMPT | KVC_F_FILE | KVC_F_NPRED | KVC_F_CTX | KVC_F_THREADS |
        KVC_F_BATCH | KVC_F_SAMPLE | KVC_F_KV | KVC_F_JSON | KVC_F_CHAT,
};

/* The prompt's tokens: in the chat template unless --raw. The prompt is user
 * text either way: only the template's own markers become control tokens. */
static int prompt_tokens(kvc_session *s, const char *prompt, int32_t **toks, int *n) {
    if (s->a->raw) return kvc_session_tokenize(s, prompt, 1, 0, toks, n);
    kvc_chat_msg msgs[2];
    int k = 0;
    if (s->a->system) msgs[k++] = (kvc_chat_msg){"system", s->a->system};
    msgs[k++] = (kvc_chat_msg){"user", prompt};
    return kvc_session_tokenize_chat(s, msgs, k, toks, n);
}

int kvc_cli_run(int argc, char **argv) {
    kvc_args a;
    int rc = kvc_args_parse(argc, argv, &k_help, &a);
    if (rc == KVC_ARGS_HELP) return 0;
    if (rc != KVC_ARGS_OK) return 2;
    if (!a.prompt && !a.file) {
        fprintf(stderr, "kvcomp run: give a prompt with -p TEXT or -f FILE (see kvcomp run --help)\n");
        return 2;
    }
    if (a.prompt && a.file) {
        fprintf(stderr, "kvcomp run: give either -p or -f, not both\n");
        return 2;
    }
    char *file_text = NULL;
    if (a.file && !(file_text = kvc_read_text_file(a.file, a.max_file_mb))) return 1;
    const char *prompt = a.prompt ? a.prompt : file_text;

    kvc_session s;
    rc = kvc_session_open(&s, &a, "run");
    char *out_text = NULL;
    int32_t *toks = NULL;
    int n = 0;
    if (rc == 0) rc = prompt_tokens(&s, prompt, &toks, &n);
    if (rc == 0 && n == 0) {
        fprintf(stderr, "kvcomp run: the prompt is empty\n");
        rc = 2;
    }
    if (rc == 0) rc = kvc_session_feed(&s, toks, n);
    if (rc == 0) {
        rc = kvc_session_generate(&s, a.n_predict, a.json ? NULL : stdout,
                                  a.json ? &out_text : NULL);
        if (!a.json) {
            fputc('\n', stdout);
            fflush(stdout);
        }
    }
    if (rc == 0 && a.json) {
        kvc_json j;
        kvc_json_init(&j, stdout, 1);
        kvc_json_obj_begin(&j);
        kvc_json_key(&j, "text");
        kvc_json_str(&j, out_text);
        kvc_session_summary_json(&s, &j);
        kvc_json_obj_end(&j);
        fputc('\n', stdout);
    } else if (rc == 0) {
        kvc_session_summary(&s, stderr);
    }
    free(out_text);
    free(toks);
    free(file_text);
    kvc_session_close(&s);
    return rc;
}
