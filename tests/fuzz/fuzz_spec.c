/* libFuzzer target for the --kv method spec language (untrusted: it comes from
 * the command line and from scripts). Property: a spec that parses formats to
 * a canonical string (every parameter written out) that parses again to the
 * same methods and the same cfg bytes, and formats to the same string
 * (parse -> canonical -> parse is the identity). Errors must leave a message.
 * Built by `make fuzz`; the committed corpus replays in `make test`. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kv/method/method.h"

enum { SPEC_MAX = 1024, CANON_MAX = 8192 };

static void same_spec(const kvc_spec *a, const kvc_spec *b) {
    if (a->n != b->n) __builtin_trap();
    for (int i = 0; i < a->n; i++) {
        if (a->m[i] != b->m[i]) __builtin_trap();
        if (a->m[i]->cfg_size && memcmp(a->cfg[i], b->cfg[i], a->m[i]->cfg_size) != 0)
            __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char text[SPEC_MAX + 1];
    if (size > SPEC_MAX) size = SPEC_MAX;
    memcpy(text, data, size);
    text[size] = '\0';
    kvc_spec s;
    if (kvc_spec_parse(text, &s) != KVC_OK) {
        if (!kvc_last_error()[0]) __builtin_trap(); /* a refusal always says why */
        return 0;
    }
    static char canon[CANON_MAX], again[CANON_MAX];
    int n = kvc_spec_format(&s, canon, sizeof canon);
    if (n <= 0 || n >= CANON_MAX) __builtin_trap();
    kvc_spec t;
    if (kvc_spec_parse(canon, &t) != KVC_OK) __builtin_trap();
    same_spec(&s, &t);
    kvc_spec_format(&t, again, sizeof again);
    if (strcmp(canon, again) != 0) __builtin_trap();
    kvc_spec_free(&t);
    kvc_spec_free(&s);
    return 0;
}
