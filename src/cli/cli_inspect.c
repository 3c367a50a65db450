/* `kvcomp inspect`: a GGUF file's header, metadata and tensor table (name,
 * type, shape, bytes), as text or --json, through kvc_inspect; then the file
 * is checked as a model the way `run` loads it, so a file that is valid GGUF
 * but broken as a model (a wrong shape, a wrong key type) is refused by both
 * commands with the same message. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "kvcomp.h"
#include "kvcomp_eval.h"

static const kvc_cmd_help k_help = {
    "inspect",
    "MODEL.gguf | -m MODEL.gguf [--json]",
    "Prints a GGUF file's header, metadata (long arrays abbreviated) and tensor table.",
    KVC_F_MODEL | KVC_F_JSON | KVC_F_POSITIONAL,
};

/* Loads the file as a model: 1 with a message when it is malformed as one; an
 * architecture or weight type kvcomp does not run is only a note (inspect
 * shows any GGUF file). */
static int check_as_model(const char *path) {
    kvc_model *m = NULL;
    kvc_status st = kvc_model_load(path, &m);
    if (st == KVC_OK) {
        kvc_model_free(m);
        return 0;
    }
    if (st == KVC_ERR_UNSUPPORTED) {
        fprintf(stderr, "kvcomp inspect: note: kvcomp cannot run this model: %s\n",
                kvc_last_error());
        return 0;
    }
    fprintf(stderr, "kvcomp inspect: %s: not a usable model: %s\n", path, kvc_last_error());
    return 1;
}

int kvc_cli_inspect(int argc, char **argv) {
    kvc_args a;
    int rc = kvc_args_parse(argc, argv, &k_help, &a);
    if (rc == KVC_ARGS_HELP) return 0;
    if (rc != KVC_ARGS_OK) return 2;
    if (a.n_pos > 1 || (a.n_pos == 1 && a.model)) {
        fprintf(stderr, "kvcomp inspect: give one file (see kvcomp inspect --help)\n");
        return 2;
    }
    const char *path = a.n_pos == 1 ? a.pos[0] : a.model ? a.model : KVC_DEFAULT_MODEL;
    if (kvc_inspect(path, stdout, a.json) != KVC_OK) {
        fflush(stdout);
        const char *err = kvc_last_error();
        if (strncmp(err, path, strlen(path)) == 0) /* the message already names the file */
            fprintf(stderr, "kvcomp inspect: %s\n", err);
        else
            fprintf(stderr, "kvcomp inspect: %s: %s\n", path, err);
        return 1;
    }
    fflush(stdout);
    return check_as_model(path);
}
