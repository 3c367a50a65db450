/* Opening untrusted input files: regular files only, sizes checked first.
 * See file.h. */
#define _GNU_SOURCE
#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"

static const char *file_kind(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a named pipe (FIFO)";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

kvc_status kvc_file_open_regular(const char *path, int *fd) {
    *fd = -1;
    KVC_CHECK(path != NULL, KVC_ERR_ARG, "file path is NULL");
    /* O_NONBLOCK: opening a FIFO without a writer returns at once instead of hanging */
    int f = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    KVC_CHECK(f >= 0, KVC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(f, &st) != 0) {
        int e = errno;
        close(f);
        return kvc_fail(KVC_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        return kvc_fail(KVC_ERR_IO, "%s: is %s; expected a regular file", path,
                        file_kind(st.st_mode));
    }
    int flags = fcntl(f, F_GETFL);
    if (flags >= 0) (void)fcntl(f, F_SETFL, flags & ~O_NONBLOCK);
    *fd = f;
    return KVC_OK;
}

static kvc_status too_large(const char *path, size_t max_bytes, const char *option) {
    if (option && *option)
        return kvc_fail(KVC_ERR_RANGE, "%s: larger than the limit of %zu bytes (raise it with %s)",
                        path, max_bytes, option);
    return kvc_fail(KVC_ERR_RANGE, "%s: larger than the limit of %zu bytes", path, max_bytes);
}

kvc_status kvc_file_read_all(const char *path, size_t max_bytes, const char *option, char **out,
                             size_t *len) {
    *out = NULL;
    *len = 0;
    int fd;
    KVC_TRY(kvc_file_open_regular(path, &fd));
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size > max_bytes || max_bytes >= SIZE_MAX) {
        close(fd);
        return too_large(path, max_bytes, option);
    }
    /* the size may change while reading: read at most max_bytes + 1 to notice growth */
    size_t cap = (size_t)st.st_size + 1, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        close(fd);
        return kvc_fail(KVC_ERR_NOMEM, "%s: no memory for %zu bytes", path, cap);
    }
    for (;;) {
        if (n == cap) {
            size_t ncap = cap > max_bytes / 2 ? max_bytes + 1 : cap * 2;
            char *nb = ncap > cap ? realloc(buf, ncap + 1) : NULL;
            if (!nb) {
                free(buf);
                close(fd);
                if (ncap <= cap) return too_large(path, max_bytes, option);
                return kvc_fail(KVC_ERR_NOMEM, "%s: no memory for %zu bytes", path, ncap);
            }
            buf = nb;
            cap = ncap;
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int e = errno;
            free(buf);
            close(fd);
            return kvc_fail(KVC_ERR_IO, "%s: read error: %s", path, strerror(e));
        }
        if (got == 0) break;
        n += (size_t)got;
        if (n > max_bytes) {
            free(buf);
            close(fd);
            return too_large(path, max_bytes, option);
        }
    }
    close(fd);
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return KVC_OK;
}
