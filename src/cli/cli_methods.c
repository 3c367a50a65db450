/* `kvcomp methods`: every KV cache method with its parameters, defaults and
 * one-line description (kvc_methods_print), or the same as JSON. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "kvcomp.h"
#include "kvcomp_eval.h"

int kvc_cli_methods(int argc, char **argv) {
    int json = 0;
    const kvc_opt opts[] = {KVC_SWITCH_OPT("--json", &json)};
    int rc = kvc_opts_parse("methods", KVC_OPTS(opts), argc, argv, NULL, 0, NULL);
    if (rc != KVC_ARGS_OK)
        return kvc_opts_exit(rc, "usage: kvcomp methods [--json]\n\n"
                                 "Lists every KV cache method for --kv with its parameters, defaults and\n"
                                 "ranges. A spec is name[:key=value,...][+modifier[:key=value,...]].\n");
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
