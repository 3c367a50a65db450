/* Opening untrusted input files. Paths come from the command line, so one may
 * name a FIFO (open() would block until a writer appears: forever), a
 * directory or a device (reading /dev/zero never ends). Every reader of a file
 * goes through kvc_file_open_regular, which opens without blocking and refuses
 * anything but a regular file, naming what the path is; kvc_file_read_all
 * also refuses a file larger than the caller's limit before reading it. */
#ifndef KVC_BASE_FILE_H
#define KVC_BASE_FILE_H

#include <stddef.h>

#include "kvcomp.h"

/* Opens path read-only (close-on-exec) and checks that it is a regular file;
 * *fd is the descriptor, -1 on failure (KVC_ERR_IO naming the path). */
kvc_status kvc_file_open_regular(const char *path, int *fd);

/* Reads a whole regular file into a malloc'd buffer with a NUL after the last
 * byte (*len excludes it). KVC_ERR_RANGE when the file has more than max_bytes
 * bytes, with a message naming the limit and `option` (the setting that
 * raises it, "" if none). */
kvc_status kvc_file_read_all(const char *path, size_t max_bytes, const char *option, char **out,
                             size_t *len);

#endif
