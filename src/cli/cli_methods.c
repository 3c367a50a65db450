/* `kvcomp methods`: every KV cache method with its parameters, defaults and
 * one-line description (kvc_methods_print), or the same as JSON. */
#include <stdio.h>
#include <string.h>

#include "base/json.h"
#include "cli/cli.h"
#include "eval/report.h"
#include "kvcomp.h"

int kvc_cli_methods(int argc, char **argv) {
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("usage: kvcomp methods [--json]\n\n"
                   "Lists every KV cache method for --kv with its parameters, defaults and\n"
                   "ranges. A spec is name[:key=value,...][+modifier[:key=value,...]].\n");
            return 0;
        } else {
            fprintf(stderr, "kvcomp methods: unexpected argument '%s' (see kvcomp methods --help)\n",
                    argv[i]);
            return 2;
        }
    }
    if (json) {
        kvc_json j;
        kvc_json_init(&j, stdout, 1);
        kvc_report_methods_json(&j);
        kvc_json_finish(&j);
    } else {
        kvc_methods_print(stdout);
    }
    return 0;
}
