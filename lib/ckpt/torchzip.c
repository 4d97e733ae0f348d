/* torchzip.c: torch.save's ZIP container by direct offsets (torchzip.h). */
#include "ckpt/torchzip.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_EOCD 0x06054b50u
#define SIG_EOCD64 0x06064b50u
#define SIG_LOC64 0x07064b50u
#define ALIGN 64

static uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const unsigned char *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

#define FAIL(off, ...) \
	do { \
		char m_[512]; \
		snprintf(m_, sizeof(m_), __VA_ARGS__); \
		mt_err_set(err, MT_EXIT_DATA, "'%s': not a readable torch.save ZIP file: %s (at byte %llu)", z->path, m_, \
			   (unsigned long long)(off)); \
		mt_tz_close(z); \
		return -1; \
	} while (0)

void mt_tz_close(struct mt_tz *z)
{
	for (int i = 0; i < z->n; i++)
		free(z->e[i].name);
	free(z->e);
	if (z->map && z->map != MAP_FAILED)
		munmap(z->map, z->size);
	free(z->path);
	free(z->prefix);
	memset(z, 0, sizeof(*z));
}

/* The ZIP64 extra field of a central header: the values whose 32-bit field is all ones,
 * in the order usize, csize, offset. */
static int zip64_extra(struct mt_tz *z, const unsigned char *x, uint32_t xlen, uint64_t at, uint64_t *usize,
		       uint64_t *csize, uint64_t *off, struct mt_err *err)
{
	uint32_t i = 0;

	while (i + 4 <= xlen) {
		uint16_t id = rd16(x + i), len = rd16(x + i + 2);
		if (i + 4 + len > xlen)
			FAIL(at, "an extra field runs past its header");
		if (id == 1) {
			uint32_t k = 0;
			uint64_t *f[3] = { usize, csize, off };
			for (int j = 0; j < 3; j++) {
				if (*f[j] != 0xFFFFFFFFu)
					continue;
				if (k + 8 > len)
					FAIL(at, "a ZIP64 extra field is too short");
				*f[j] = rd64(x + i + 4 + k);
				k += 8;
			}
		}
		i += 4u + len;
	}
	return 0;
}

static int tz_parse(struct mt_tz *z, const unsigned char *b, uint64_t asize, struct mt_err *err);

int mt_tz_open(struct mt_tz *z, const char *path, struct mt_err *err)
{
	return mt_tz_open_at(z, path, 0, UINT64_MAX, err);
}

int mt_tz_open_at(struct mt_tz *z, const char *path, uint64_t at, uint64_t length, struct mt_err *err)
{
	struct stat st;
	int fd;

	memset(z, 0, sizeof(*z));
	if (length == UINT64_MAX)
		z->path = strdup(path);
	else if (asprintf(&z->path, "%s (bytes %llu..%llu)", path, (unsigned long long)at,
			  (unsigned long long)(at + length)) < 0)
		z->path = NULL;
	if (!z->path)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		mt_err_errno(err, MT_EXIT_IO, "cannot open '%s'", path);
		mt_tz_close(z);
		return -1;
	}
	if (fstat(fd, &st) != 0) {
		mt_err_errno(err, MT_EXIT_IO, "cannot stat '%s'", path);
		close(fd);
		mt_tz_close(z);
		return -1;
	}
	z->size = (size_t)st.st_size;
	if (length == UINT64_MAX)
		length = z->size;
	if (at > z->size || length > z->size - at) {
		close(fd);
		mt_err_set(err, MT_EXIT_DATA, "'%s': %zu bytes, too short for the archive at bytes %llu..%llu (truncated?)",
			   path, z->size, (unsigned long long)at, (unsigned long long)(at + length));
		z->size = 0;
		mt_tz_close(z);
		return -1;
	}
	if (length < 22) {
		close(fd);
		mt_err_set(err, MT_EXIT_DATA, "'%s': not a readable torch.save ZIP file: %llu bytes, too short for a ZIP "
			   "archive (truncated?)", z->path, (unsigned long long)length);
		z->size = 0;
		mt_tz_close(z);
		return -1;
	}
	z->map = mmap(NULL, z->size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (z->map == MAP_FAILED) {
		z->map = NULL;
		mt_err_errno(err, MT_EXIT_IO, "cannot map '%s'", path);
		mt_tz_close(z);
		return -1;
	}
	return tz_parse(z, (const unsigned char *)z->map + at, length, err);
}

int mt_tz_open_mem(struct mt_tz *z, const char *name, const void *data, uint64_t size, struct mt_err *err)
{
	memset(z, 0, sizeof(*z));
	if (!(z->path = strdup(name)))
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	if (size < 22) {
		mt_err_set(err, MT_EXIT_DATA, "'%s': not a readable torch.save ZIP file: %llu bytes, too short for a ZIP "
			   "archive (truncated?)", name, (unsigned long long)size);
		mt_tz_close(z);
		return -1;
	}
	return tz_parse(z, data, size, err);
}

/* The archive of asize bytes at b: its central directory, every member checked. */
static int tz_parse(struct mt_tz *z, const unsigned char *b, uint64_t asize, struct mt_err *err)
{
	uint64_t eocd = 0, cd_off, cd_size, count, p;
	size_t plen = 0;

	/* the end record: 22 bytes plus a comment of at most 65535 */
	for (uint64_t i = asize - 22;; i--) {
		if (rd32(b + i) == SIG_EOCD && i + 22 + rd16(b + i + 20) == asize) {
			eocd = i;
			break;
		}
		if (i == 0 || asize - i > 22 + 65535)
			goto no_end;
	}
	count = rd16(b + eocd + 10);
	cd_size = rd32(b + eocd + 12);
	cd_off = rd32(b + eocd + 16);
	if (eocd >= 20 && rd32(b + eocd - 20) == SIG_LOC64) {
		uint64_t e64 = rd64(b + eocd - 20 + 8);
		if (e64 + 56 > eocd - 20 || rd32(b + e64) != SIG_EOCD64) {
			mt_err_set(err, MT_EXIT_DATA, "'%s': not a readable torch.save ZIP file: the ZIP64 end record the "
				   "locator names is not there (at byte %llu)", z->path, (unsigned long long)e64);
			mt_tz_close(z);
			return -1;
		}
		count = rd64(b + e64 + 32);
		cd_size = rd64(b + e64 + 40);
		cd_off = rd64(b + e64 + 48);
	}
	if (cd_off > asize || cd_size > asize - cd_off || count > cd_size / 46) {
		mt_err_set(err, MT_EXIT_DATA, "'%s': not a readable torch.save ZIP file: the central directory (%llu entries "
			   "at byte %llu, %llu bytes) lies outside the file (truncated?)", z->path, (unsigned long long)count,
			   (unsigned long long)cd_off, (unsigned long long)cd_size);
		mt_tz_close(z);
		return -1;
	}
	z->e = calloc(count ? count : 1, sizeof(*z->e));
	if (!z->e) {
		mt_tz_close(z);
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	p = cd_off;
	for (uint64_t i = 0; i < count; i++) {
		struct mt_tz_entry *e = &z->e[z->n];
		uint16_t method, nlen, xlen, clen, lnlen, lxlen, flags;
		uint64_t csize, usize, loff, data;
		if (p + 46 > cd_off + cd_size || rd32(b + p) != SIG_CENTRAL)
			FAIL(p, "central directory entry %llu is not where the directory says", (unsigned long long)i);
		flags = rd16(b + p + 8);
		method = rd16(b + p + 10);
		e->crc = rd32(b + p + 16);
		csize = rd32(b + p + 20);
		usize = rd32(b + p + 24);
		nlen = rd16(b + p + 28);
		xlen = rd16(b + p + 30);
		clen = rd16(b + p + 32);
		loff = rd32(b + p + 42);
		if (p + 46 + nlen + xlen + clen > cd_off + cd_size)
			FAIL(p, "central directory entry %llu runs past the directory", (unsigned long long)i);
		if (zip64_extra(z, b + p + 46 + nlen, xlen, p, &usize, &csize, &loff, err))
			return -1;
		e->name = strndup((const char *)b + p + 46, nlen);
		if (!e->name) {
			mt_tz_close(z);
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
		}
		z->n++;
		if (flags & 1)
			FAIL(p, "member '%s' is encrypted", e->name);
		if (method != 0)
			FAIL(p, "member '%s' is compressed (method %u); torch.save stores its members uncompressed", e->name,
			     method);
		if (csize != usize)
			FAIL(p, "member '%s': stored sizes differ (%llu, %llu)", e->name, (unsigned long long)csize,
			     (unsigned long long)usize);
		if (loff > asize || asize - loff < 30 || rd32(b + loff) != SIG_LOCAL)
			FAIL(loff, "the local header of member '%s' is missing (truncated?)", e->name);
		lnlen = rd16(b + loff + 26);
		lxlen = rd16(b + loff + 28);
		data = loff + 30 + lnlen + lxlen;
		if (data > asize || usize > asize - data)
			FAIL(loff, "member '%s' (%llu bytes) runs past the end of the file (truncated?)", e->name,
			     (unsigned long long)usize);
		e->data = b + data;
		e->size = usize;
		e->local_offset = loff;
		p += 46u + nlen + xlen + clen;
	}
	if (z->n == 0)
		FAIL(cd_off, "the archive is empty");
	/* the top folder, from the first member */
	{
		const char *s = strchr(z->e[0].name, '/');
		if (!s)
			FAIL(z->e[0].local_offset, "member '%s' is not in a top folder", z->e[0].name);
		plen = (size_t)(s - z->e[0].name) + 1;
		z->prefix = strndup(z->e[0].name, plen);
		if (!z->prefix) {
			mt_tz_close(z);
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
		}
	}
	for (int i = 0; i < z->n; i++) {
		if (strncmp(z->e[i].name, z->prefix, plen))
			FAIL(z->e[i].local_offset, "member '%s' is outside the top folder '%s'", z->e[i].name, z->prefix);
		memmove(z->e[i].name, z->e[i].name + plen, strlen(z->e[i].name + plen) + 1);
	}
	return 0;
no_end:
	mt_err_set(err, MT_EXIT_DATA, "'%s': not a readable torch.save ZIP file: no end of central directory record "
		   "(truncated, or not a ZIP file; torch.save's legacy non-ZIP format is not read)", z->path);
	mt_tz_close(z);
	return -1;
}

const struct mt_tz_entry *mt_tz_find(const struct mt_tz *z, const char *name)
{
	for (int i = 0; i < z->n; i++)
		if (!strcmp(z->e[i].name, name))
			return &z->e[i];
	return NULL;
}

static uint32_t crc_of(const void *data, uint64_t n)
{
	uLong c = crc32(0L, Z_NULL, 0);
	const unsigned char *p = data;

	while (n > 0) {
		uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
		c = crc32(c, p, k);
		p += k;
		n -= k;
	}
	return (uint32_t)c;
}

int mt_tz_check_crc(const struct mt_tz *z, const struct mt_tz_entry *e, struct mt_err *err)
{
	uint32_t c = crc_of(e->data, e->size);

	if (c != e->crc)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': member '%s%s' (at byte %llu) fails its CRC-32 check (%08x, the "
				  "directory says %08x): the file is corrupt", z->path, z->prefix, e->name,
				  (unsigned long long)e->local_offset, c, e->crc);
	return 0;
}

/* ---- writing ---- */

static void wr16(unsigned char *p, uint16_t v) { p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); }
static void wr32(unsigned char *p, uint32_t v) { wr16(p, (uint16_t)v); wr16(p + 2, (uint16_t)(v >> 16)); }
static void wr64(unsigned char *p, uint64_t v) { wr32(p, (uint32_t)v); wr32(p + 4, (uint32_t)(v >> 32)); }

static int put(struct mt_tzw *w, const void *p, size_t n, struct mt_err *err)
{
	if (n && fwrite(p, 1, n, w->fp) != n)
		return mt_err_errno(err, MT_EXIT_IO, "cannot write '%s'", w->path);
	w->pos += n;
	return 0;
}

int mt_tzw_open(struct mt_tzw *w, const char *path, const char *top_folder, struct mt_err *err)
{
	memset(w, 0, sizeof(*w));
	w->path = strdup(path);
	w->prefix = malloc(strlen(top_folder) + 2);
	if (!w->path || !w->prefix) {
		free(w->path);
		free(w->prefix);
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	sprintf(w->prefix, "%s/", top_folder);
	w->fp = fopen(path, "wbx");
	if (!w->fp) {
		mt_err_errno(err, MT_EXIT_IO, "cannot create '%s'", path);
		free(w->path);
		free(w->prefix);
		memset(w, 0, sizeof(*w));
		return -1;
	}
	return 0;
}

int mt_tzw_open_fp(struct mt_tzw *w, FILE *fp, const char *name, const char *top_folder, struct mt_err *err)
{
	memset(w, 0, sizeof(*w));
	w->path = strdup(name);
	w->prefix = malloc(strlen(top_folder) + 2);
	if (!w->path || !w->prefix) {
		free(w->path);
		free(w->prefix);
		memset(w, 0, sizeof(*w));
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	sprintf(w->prefix, "%s/", top_folder);
	w->fp = fp;
	w->borrowed = 1;
	return 0;
}

int mt_tzw_add(struct mt_tzw *w, const char *name, const void *data, uint64_t size, struct mt_err *err)
{
	unsigned char h[30 + 20 + 4 + ALIGN];
	size_t nlen = strlen(w->prefix) + strlen(name);
	char *full = malloc(nlen + 1);
	int z64 = size >= 0xFFFFFFFFu;
	uint64_t start, xlen;
	unsigned pad;
	struct mt_tzw_member *m;

	if (!full)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	sprintf(full, "%s%s", w->prefix, name);
	if (w->n == w->cap) {
		int cap = w->cap ? 2 * w->cap : 16;
		struct mt_tzw_member *x = realloc(w->m, (size_t)cap * sizeof(*x));
		if (!x) {
			free(full);
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
		}
		w->m = x;
		w->cap = cap;
	}
	m = &w->m[w->n++];
	m->name = full;
	m->size = size;
	m->offset = w->pos;
	m->crc = crc_of(data, size);
	/* the data begins after the header, the name, a ZIP64 field where needed and the
	 * "FB" padding field, on a 64-byte boundary */
	start = w->pos + 30 + nlen + (z64 ? 20 : 0) + 4;
	pad = (unsigned)((ALIGN - start % ALIGN) % ALIGN);
	xlen = (z64 ? 20 : 0) + 4 + pad;
	memset(h, 0, sizeof(h));
	wr32(h, SIG_LOCAL);
	wr16(h + 4, z64 ? 45 : 20);
	wr16(h + 6, 0);       /* flags */
	wr16(h + 8, 0);       /* stored */
	wr16(h + 10, 0);      /* 00:00:00 */
	wr16(h + 12, 0x21);   /* 1980-01-01 */
	wr32(h + 14, m->crc);
	wr32(h + 18, z64 ? 0xFFFFFFFFu : (uint32_t)size);
	wr32(h + 22, z64 ? 0xFFFFFFFFu : (uint32_t)size);
	wr16(h + 26, (uint16_t)nlen);
	wr16(h + 28, (uint16_t)xlen);
	if (put(w, h, 30, err) || put(w, full, nlen, err))
		return -1;
	memset(h, 0, sizeof(h));
	{
		size_t k = 0;
		if (z64) {
			wr16(h, 1);
			wr16(h + 2, 16);
			wr64(h + 4, size);
			wr64(h + 12, size);
			k = 20;
		}
		h[k] = 'F';
		h[k + 1] = 'B';
		wr16(h + k + 2, (uint16_t)pad);
		memset(h + k + 4, 'Z', pad);
		if (put(w, h, k + 4 + pad, err))
			return -1;
	}
	return put(w, data, size, err);
}

int mt_tzw_finish(struct mt_tzw *w, struct mt_err *err)
{
	uint64_t cd_off = w->pos, cd_size, e64;
	unsigned char h[64];

	for (int i = 0; i < w->n; i++) {
		struct mt_tzw_member *m = &w->m[i];
		size_t nlen = strlen(m->name);
		int zs = m->size >= 0xFFFFFFFFu, zo = m->offset >= 0xFFFFFFFFu;
		uint16_t xlen = (uint16_t)((zs || zo) ? 4 + (zs ? 16 : 0) + (zo ? 8 : 0) : 0);
		memset(h, 0, sizeof(h));
		wr32(h, SIG_CENTRAL);
		wr16(h + 4, 45);
		wr16(h + 6, (zs || zo) ? 45 : 20);
		wr16(h + 14, 0x21);
		wr32(h + 16, m->crc);
		wr32(h + 20, zs ? 0xFFFFFFFFu : (uint32_t)m->size);
		wr32(h + 24, zs ? 0xFFFFFFFFu : (uint32_t)m->size);
		wr16(h + 28, (uint16_t)nlen);
		wr16(h + 30, xlen);
		wr32(h + 42, zo ? 0xFFFFFFFFu : (uint32_t)m->offset);
		if (put(w, h, 46, err) || put(w, m->name, nlen, err))
			return -1;
		if (xlen) {
			size_t k = 4;
			memset(h, 0, sizeof(h));
			wr16(h, 1);
			wr16(h + 2, (uint16_t)(xlen - 4));
			if (zs) {
				wr64(h + k, m->size);
				wr64(h + k + 8, m->size);
				k += 16;
			}
			if (zo) {
				wr64(h + k, m->offset);
				k += 8;
			}
			if (put(w, h, k, err))
				return -1;
		}
	}
	cd_size = w->pos - cd_off;
	e64 = w->pos;
	memset(h, 0, sizeof(h));
	wr32(h, SIG_EOCD64);
	wr64(h + 4, 44);
	wr16(h + 12, 45);
	wr16(h + 14, 45);
	wr64(h + 24, (uint64_t)w->n);
	wr64(h + 32, (uint64_t)w->n);
	wr64(h + 40, cd_size);
	wr64(h + 48, cd_off);
	if (put(w, h, 56, err))
		return -1;
	memset(h, 0, sizeof(h));
	wr32(h, SIG_LOC64);
	wr64(h + 8, e64);
	wr32(h + 16, 1);
	if (put(w, h, 20, err))
		return -1;
	memset(h, 0, sizeof(h));
	wr32(h, SIG_EOCD);
	wr16(h + 8, w->n >= 0xFFFF ? 0xFFFF : (uint16_t)w->n);
	wr16(h + 10, w->n >= 0xFFFF ? 0xFFFF : (uint16_t)w->n);
	wr32(h + 12, cd_size >= 0xFFFFFFFFu ? 0xFFFFFFFFu : (uint32_t)cd_size);
	wr32(h + 16, cd_off >= 0xFFFFFFFFu ? 0xFFFFFFFFu : (uint32_t)cd_off);
	if (put(w, h, 22, err))
		return -1;
	if (!w->borrowed) {
		if (fflush(w->fp) != 0 || fsync(fileno(w->fp)) != 0)
			return mt_err_errno(err, MT_EXIT_IO, "cannot write '%s'", w->path);
		if (fclose(w->fp) != 0) {
			w->fp = NULL;
			return mt_err_errno(err, MT_EXIT_IO, "cannot write '%s'", w->path);
		}
	}
	w->fp = NULL;
	for (int i = 0; i < w->n; i++)
		free(w->m[i].name);
	free(w->m);
	free(w->path);
	free(w->prefix);
	memset(w, 0, sizeof(*w));
	return 0;
}

void mt_tzw_abort(struct mt_tzw *w)
{
	if (w->fp && !w->borrowed) {
		fclose(w->fp);
		if (w->path)
			unlink(w->path);
	}
	for (int i = 0; i < w->n; i++)
		free(w->m[i].name);
	free(w->m);
	free(w->path);
	free(w->prefix);
	memset(w, 0, sizeof(*w));
}
