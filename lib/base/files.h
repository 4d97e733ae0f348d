/* files.h: small file-system helpers the library and the tools share. */
#ifndef MT_FILES_H
#define MT_FILES_H

#include <stddef.h>

#include "base/err.h"

/* The whole of a file (any size, also a pipe) into *text, NUL-terminated, its length in
 * *len (len may be NULL); the caller frees *text. 0, or -1 with err naming the file. */
int mt_file_read(const char *path, char **text, size_t *len, struct mt_err *err);
/* "dir/name", malloc'ed; NULL when out of memory. */
char *mt_path_join(const char *dir, const char *name);
/* Remove path and, for a directory, everything below it (links are removed, never
 * followed). A missing path is success. 0, or -1 with errno at the first failure. */
int mt_rm_tree(const char *path);
/* fsync a file, or with dir a directory (its entries: renames and new names in it).
 * Some file systems refuse a directory's fsync (EINVAL, EBADF): that counts as done. */
int mt_fsync_path(const char *path, int dir);

#endif
