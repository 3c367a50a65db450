/* The growable token buffer the encoders append to (kvc_tokbuf). */
#include <stdlib.h>

#include "base/status.h"
#include "tokenizer/tokenizer_impl.h"

kvc_status kvc_tokbuf_push(kvc_tokbuf *b, int32_t tok) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 256;
        int32_t *v = realloc(b->v, cap * sizeof *v);
        if (!v) return kvc_fail(KVC_ERR_NOMEM, "tokenizer: output of %zu tokens", cap);
        b->v = v;
        b->cap = cap;
    }
    b->v[b->n++] = tok;
    return KVC_OK;
}
