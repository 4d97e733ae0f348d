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

#endif
