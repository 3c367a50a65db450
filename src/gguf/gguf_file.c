/* Opening a GGUF file: map it read-only (MAP_PRIVATE) and parse the mapping
 * with kvc_gguf_parse, so tensor data pointers point into the page cache and
 * nothing is copied. kvc_gguf_close unmaps. Errors are prefixed with the path. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "base/status.h"
#include "gguf/gguf.h"
#include "gguf/gguf_internal.h"

kvc_status kvc_gguf_open(const char *path, kvc_gguf **out) {
    if (out == NULL) return kvc_fail(KVC_ERR_ARG, "kvc_gguf_open: out is NULL");
    *out = NULL;
    if (path == NULL) return kvc_fail(KVC_ERR_ARG, "kvc_gguf_open: path is NULL");
    int fd;
    KVC_TRY(kvc_file_open_regular(path, &fd)); /* a FIFO would block open() forever */
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return kvc_fail(KVC_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (st.st_size <= 0) {
        close(fd);
        return kvc_fail(KVC_ERR_FORMAT, "%s: empty file, not GGUF", path);
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return kvc_fail(KVC_ERR_IO, "%s: file of %lld bytes too large to map", path,
                        (long long)st.st_size);
    }
    size_t size = (size_t)st.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) return kvc_fail(KVC_ERR_IO, "%s: cannot mmap: %s", path, strerror(e));

    kvc_gguf *g;
    kvc_status s = kvc_gguf_parse(map, size, &g);
    if (s != KVC_OK) {
        munmap(map, size);
        char msg[512];
        snprintf(msg, sizeof msg, "%s", kvc_last_error());
        return kvc_fail(s, "%s: %s", path, msg);
    }
    gguf_priv *pv = g->priv;
    pv->map = map;
    pv->map_size = size;
    *out = g;
    return KVC_OK;
}

void kvc_gguf_close(kvc_gguf *g) {
    if (g == NULL) return;
    gguf_priv *pv = g->priv;
    if (pv && pv->map) munmap(pv->map, pv->map_size);
    kvc_gguf_free_all(g);
}
