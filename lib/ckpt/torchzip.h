/* torchzip.h: the ZIP container of torch.save's files (PyTorch's "zip file" serialization),
 * read and written.
 *
 * A file torch.save writes is a ZIP archive of stored (uncompressed) entries that share one
 * top folder named after the file ("model_optim_rng/data.pkl", "model_optim_rng/data/0",
 * ...; "archive/" when saved to a buffer): data.pkl (the pickle), byteorder, version,
 * data/<key> (the raw bytes of each storage), and in recent versions .format_version,
 * .storage_alignment and .data/serialization_id. Storage data starts on a 64-byte boundary:
 * the padding sits in an extra field ("FB") of the LOCAL header only, so a member's data
 * offset is computed from its local header, not from the central directory. Recent
 * versions always write a ZIP64 end of central directory.
 *
 * An archive may also sit inside a larger file, at an offset (mt_tz_open_at): PyTorch's
 * distributed checkpoint stores each chunk as a whole torch.save archive in a .distcp file.
 *
 * Reading maps the file (mmap, read-only) and walks the central directory by direct
 * offsets: every member's data is then a pointer into the mapping, never copied, so a
 * storage of several GB costs no memory of its own and only the pages read are read.
 * Measured against libarchive on a 419 MB file torch.save wrote (tests/helpers/
 * torchzip-bench.c; docs/formats.md): libarchive's seekable ZIP reader, copying each member
 * into a buffer, 0.445 s; direct offsets 0.067 s, 6.6x faster, with no buffer at all, so this
 * is what mt uses. Everything is checked
 * against the file size before use: the end records, each central and local header, each
 * member's extent; only method 0 (stored) is accepted; CRC-32s are verified on request
 * (mt_tz_check_crc), as torch's own reader does. Errors name the file and the offset
 * (MT_EXIT_DATA; MT_EXIT_IO for the file system).
 *
 * Writing produces what torch.save writes: the top folder, 64-byte aligned data with an
 * "FB" padding field, CRC-32s, a ZIP64 end record, and ZIP64 extra fields wherever a size
 * or an offset does not fit 32 bits. */
#ifndef MT_TORCHZIP_H
#define MT_TORCHZIP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"

struct mt_tz_entry {
	char *name;                  /* without the top folder: "data.pkl", "data/0" */
	const unsigned char *data;   /* into the mapping */
	uint64_t size;
	uint32_t crc;
	uint64_t local_offset;       /* of its local header, for messages */
};

struct mt_tz {
	char *path;
	void *map;
	size_t size;
	char *prefix;                /* the top folder, with its slash: "model_optim_rng/" */
	struct mt_tz_entry *e;
	int n;
};

int mt_tz_open(struct mt_tz *z, const char *path, struct mt_err *err);
/* The archive at bytes [at, at + length) of the file at path (a chunk of a distributed
 * checkpoint's .distcp file, torchdist.h): its offsets count from `at`; z->path, in
 * messages, is "path (bytes at..at+length)". A range past the end of the file is refused
 * naming it (MT_EXIT_DATA). */
int mt_tz_open_at(struct mt_tz *z, const char *path, uint64_t at, uint64_t length, struct mt_err *err);
/* An archive held in memory (size bytes at data, which must outlive z; not copied), named
 * `name` in messages: a torch.save file inside a pickled io.BytesIO, say. */
int mt_tz_open_mem(struct mt_tz *z, const char *name, const void *data, uint64_t size, struct mt_err *err);
void mt_tz_close(struct mt_tz *z);
/* A member by its name under the top folder, or NULL. */
const struct mt_tz_entry *mt_tz_find(const struct mt_tz *z, const char *name);
/* 0 when the member's CRC-32 matches its data; else -1 naming the file and member. */
int mt_tz_check_crc(const struct mt_tz *z, const struct mt_tz_entry *e, struct mt_err *err);

/* The writer: members are added in order, then mt_tz_write_finish writes the central
 * directory and the end records. The file is written at `path` as given (callers write
 * into a temporary directory and rename it). */
struct mt_tzw_member {
	char *name;
	uint64_t size, offset;
	uint32_t crc;
};
struct mt_tzw {
	FILE *fp;
	int borrowed;                /* fp is the caller's (mt_tzw_open_fp): never closed or removed */
	char *path;
	char *prefix;                /* "model_optim_rng/" */
	uint64_t pos;
	struct mt_tzw_member *m;
	int n, cap;
};
int mt_tzw_open(struct mt_tzw *w, const char *path, const char *top_folder, struct mt_err *err);
/* An archive appended to fp, a stream the caller opened, at its current position (a chunk of
 * a .distcp file, torchdist.h): offsets inside the archive count from there; `name` (the
 * file's path) is for messages. mt_tzw_finish then neither syncs nor closes fp, and
 * mt_tzw_abort neither closes nor removes it: the caller owns the file. */
int mt_tzw_open_fp(struct mt_tzw *w, FILE *fp, const char *name, const char *top_folder, struct mt_err *err);
/* One stored member, name under the top folder; its data begins on a 64-byte boundary. */
int mt_tzw_add(struct mt_tzw *w, const char *name, const void *data, uint64_t size, struct mt_err *err);
/* The central directory and end records; fsync and close (a stream of mt_tzw_open_fp's is
 * left open, unsynced). */
int mt_tzw_finish(struct mt_tzw *w, struct mt_err *err);
/* Close and remove the partial file after a failure (also safe after finish). */
void mt_tzw_abort(struct mt_tzw *w);

#endif
