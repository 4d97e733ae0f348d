/* input.h: reading named inputs, whatever their compression or packaging.
 *
 * An input is a path or "-" for stdin. Its content is detected, never guessed
 * from the name: plain bytes, any compression libarchive knows (gzip, xz, zstd,
 * bzip2, lz4, ...), or an archive (tar, tar.*, zip, cpio, 7z, ...). A plain or
 * compressed file is one member; an archive yields each regular file it holds,
 * in archive order. Data is read a member at a time, as raw bytes or as lines.
 * Truncated or corrupt data is an error naming the input (and member), never a
 * silent short read. This file does not parse what it reads (see jsonl.h). */
#ifndef MT_INPUT_H
#define MT_INPUT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/err.h"

struct mt_input;

/* Open a path, or stdin for "-". */
int mt_input_open(struct mt_input **in, const char *path, struct mt_err *err);
void mt_input_close(struct mt_input *in);

/* Advance to the next member: 1 when there is one, 0 at the end, -1 on error.
 * Call it once before reading the first member. */
int mt_input_next(struct mt_input *in, struct mt_err *err);

/* Read up to n bytes of the current member: the count, 0 at its end, -1 on error. */
ssize_t mt_input_read(struct mt_input *in, void *buf, size_t n, struct mt_err *err);

/* Next line of the current member without its '\n' (a final line without one
 * counts too). *line stays valid until the next call. 1 for a line, 0 at the
 * end of the member, -1 on error. Do not mix with mt_input_read on a member. */
int mt_input_getline(struct mt_input *in, char **line, size_t *len, struct mt_err *err);
/* Cap the lines mt_input_getline buffers at max bytes (0: no cap, the default). A longer
 * line is read through and dropped without being held: getline returns 2 with *line NULL
 * and *len its length (what was read of it, at least max), and the next call goes on
 * after it. The buffer then stays below max + 2 MiB. */
void mt_input_set_max_line(struct mt_input *in, size_t max);

const char *mt_input_name(const struct mt_input *in);   /* "<stdin>" for "-" */
const char *mt_input_member(const struct mt_input *in); /* member path, or the input's name */
int mt_input_is_archive(const struct mt_input *in);
/* Size on disk in bytes, or -1 if unknown (a pipe). */
int64_t mt_input_size(const struct mt_input *in);
/* Bytes consumed from disk so far (compressed bytes), for progress and ETA. */
int64_t mt_input_consumed(const struct mt_input *in);

/* Expand paths and glob patterns in order ("-" passes through). A pattern that
 * matches nothing is an error. The result is a NULL-terminated array of
 * strings; free it with mt_input_paths_free. */
int mt_input_expand(const char *const *patterns, int n, char ***paths, int *npaths,
		    struct mt_err *err);
void mt_input_paths_free(char **paths);

#endif
