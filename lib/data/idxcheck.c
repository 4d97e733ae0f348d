/* idxcheck.c: the full consistency check of an indexed dataset (see idxcheck.h).
 *
 * An independent pass over the mapped files, written to keep going: the header
 * fields are checked one by one, each array entry against its neighbour, and
 * problems of one kind are counted and reported once with the first place they
 * occur. All arithmetic on values read from the files is unsigned or 128-bit,
 * so garbage cannot overflow it. The token scan reads the .bin map in blocks
 * with a branch-free count first, and only looks closer at blocks that hold a
 * bad token. Not here: opening datasets for use (idx.c), statistics
 * (idxstat.c), printing (the tool). */
#include "data/idxcheck.h"

#include "data/idx.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const unsigned char magic[9] = { 'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0 };
static const unsigned char empty_map[1];

#define SCAN_BLOCK 65536 /* tokens counted before looking closer */

static uint32_t ld32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t ld64(const unsigned char *p)
{
	return (uint64_t)ld32(p) | (uint64_t)ld32(p + 4) << 32;
}

static void problem(struct mt_idx_check *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(struct mt_idx_check *c, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	c->problems++;
	if (c->problem)
		c->problem(c->ctx, line);
}

static int map_ro(const char *path, const unsigned char **map, size_t *size, struct mt_err *err)
{
	struct stat st;
	void *m;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block */

	if (fd < 0)
		return mt_err_errno(err, MT_EXIT_IO, "cannot open '%s'", path);
	if (fstat(fd, &st) != 0) {
		mt_err_errno(err, MT_EXIT_IO, "cannot stat '%s'", path);
		close(fd);
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		mt_err_set(err, MT_EXIT_IO, "cannot open '%s': not a regular file", path);
		close(fd);
		return -1;
	}
	*size = (size_t)st.st_size;
	*map = empty_map;
	if (*size) {
		m = mmap(NULL, *size, PROT_READ, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED) {
			mt_err_errno(err, MT_EXIT_IO, "cannot map '%s'", path);
			close(fd);
			return -1;
		}
		*map = m;
	}
	close(fd);
	return 0;
}

static void unmap(const unsigned char *map, size_t size)
{
	if (map && map != empty_map)
		munmap((void *)map, size);
}

/* What the checks found out about the layout, for locating tokens. */
struct layout {
	const unsigned char *idx;
	uint64_t s, d;
	size_t off_lens, off_ptrs, off_docs;
	int itemsize;
	int ptrs_ok, docs_ok; /* pointers contiguous and .bin size right; document index sound */
};

static int32_t len_at(const struct layout *l, uint64_t i) { return (int32_t)ld32(l->idx + l->off_lens + 4 * i); }
static uint64_t ptr_at(const struct layout *l, uint64_t i) { return ld64(l->idx + l->off_ptrs + 8 * i); }
static uint64_t doc_at(const struct layout *l, uint64_t i) { return ld64(l->idx + l->off_docs + 8 * i); }

/* "document D, sequence S, position P" of token t of the .bin, as far as known. */
static void locate(const struct layout *l, uint64_t t, char *buf, size_t n)
{
	uint64_t off = t * (uint64_t)l->itemsize, lo = 0, hi = l->s, seq, doc;

	if (!l->ptrs_ok || l->s == 0) {
		snprintf(buf, n, "token %llu of the .bin", (unsigned long long)t);
		return;
	}
	while (hi - lo > 1) { /* the last sequence starting at or before off */
		uint64_t mid = lo + (hi - lo) / 2;

		if (ptr_at(l, mid) <= off)
			lo = mid;
		else
			hi = mid;
	}
	seq = lo;
	if (!l->docs_ok) {
		snprintf(buf, n, "sequence %llu, position %llu", (unsigned long long)seq,
			 (unsigned long long)((off - ptr_at(l, seq)) / (uint64_t)l->itemsize));
		return;
	}
	lo = 0;
	hi = l->d - 1;
	while (hi - lo > 1) { /* the last document starting at or before seq */
		uint64_t mid = lo + (hi - lo) / 2;

		if (doc_at(l, mid) <= seq)
			lo = mid;
		else
			hi = mid;
	}
	doc = lo;
	snprintf(buf, n, "document %llu, sequence %llu, position %llu", (unsigned long long)doc,
		 (unsigned long long)seq, (unsigned long long)((off - ptr_at(l, seq)) / (uint64_t)l->itemsize));
}

/* Tokens outside [0, vocab): how many, the first, the smallest and largest. */
struct scan {
	uint64_t bad, first;
	int64_t lo, hi, first_v;         /* integer dtypes */
	double flo, fhi, first_f;        /* float dtypes */
};

static void note_int(struct scan *r, uint64_t at, int64_t v)
{
	if (r->bad == 0) {
		r->first = at;
		r->first_v = r->lo = r->hi = v;
	}
	r->lo = v < r->lo ? v : r->lo;
	r->hi = v > r->hi ? v : r->hi;
	r->bad++;
}

static void note_float(struct scan *r, uint64_t at, double v)
{
	if (r->bad == 0) {
		r->first = at;
		r->first_f = r->flo = r->fhi = v;
	}
	if (v < r->flo || r->flo != r->flo)
		r->flo = v;
	if (v > r->fhi || r->fhi != r->fhi)
		r->fhi = v;
	r->bad++;
}

/* One scanner per integer dtype: a branch-free count per block, a closer look
 * only at blocks with a bad token. (uint64_t)v >= vocab is also true of v < 0. */
#define SCAN_INT(name, T, load)                                                                    \
	static void name(const unsigned char *p, uint64_t n, uint64_t vocab, struct scan *r)       \
	{                                                                                          \
		for (uint64_t b = 0; b < n; b += SCAN_BLOCK) {                                     \
			uint64_t e = n - b < SCAN_BLOCK ? n : b + SCAN_BLOCK, cnt = 0;             \
			for (uint64_t i = b; i < e; i++) {                                         \
				T v = load(p + i * sizeof(T));                                     \
				cnt += (uint64_t)(int64_t)v >= vocab;                              \
			}                                                                          \
			if (!cnt)                                                                  \
				continue;                                                          \
			for (uint64_t i = b; i < e; i++) {                                         \
				T v = load(p + i * sizeof(T));                                     \
				if ((uint64_t)(int64_t)v >= vocab)                                 \
					note_int(r, i, (int64_t)v);                                \
			}                                                                          \
		}                                                                                  \
	}

static inline uint8_t ld_u8(const unsigned char *p) { return p[0]; }
static inline int8_t ld_i8(const unsigned char *p) { return (int8_t)p[0]; }
static inline uint16_t ld_u16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline int16_t ld_i16(const unsigned char *p) { return (int16_t)ld_u16(p); }
static inline int32_t ld_i32(const unsigned char *p) { return (int32_t)ld32(p); }
static inline int64_t ld_i64(const unsigned char *p) { return (int64_t)ld64(p); }

SCAN_INT(scan_u8, uint8_t, ld_u8)
SCAN_INT(scan_i8, int8_t, ld_i8)
SCAN_INT(scan_u16, uint16_t, ld_u16)
SCAN_INT(scan_i16, int16_t, ld_i16)
SCAN_INT(scan_i32, int32_t, ld_i32)
SCAN_INT(scan_i64, int64_t, ld_i64)

/* Floats must hold a whole number in [0, vocab). */
static void scan_float(const unsigned char *p, uint64_t n, int itemsize, uint64_t vocab, struct scan *r)
{
	for (uint64_t i = 0; i < n; i++) {
		double v;

		if (itemsize == 4) {
			uint32_t u = ld32(p + 4 * i);
			float f;

			memcpy(&f, &u, 4);
			v = f;
		} else {
			uint64_t u = ld64(p + 8 * i);

			memcpy(&v, &u, 8);
		}
		if (!(v >= 0 && v < (double)vocab && v == (double)(int64_t)v))
			note_float(r, i, v);
	}
}

static void check_tokens(struct mt_idx_check *c, const struct layout *l, int dtype, const unsigned char *bin,
			 size_t bin_size)
{
	uint64_t n = (uint64_t)bin_size / (uint64_t)l->itemsize, vocab = (uint64_t)c->vocab_size;
	struct scan r = { 0 };
	char where[160];

	if (bin_size)
		madvise((void *)bin, bin_size, MADV_SEQUENTIAL);
	switch (dtype) {
	case MT_IDX_U8: scan_u8(bin, n, vocab, &r); break;
	case MT_IDX_I8: scan_i8(bin, n, vocab, &r); break;
	case MT_IDX_U16: scan_u16(bin, n, vocab, &r); break;
	case MT_IDX_I16: scan_i16(bin, n, vocab, &r); break;
	case MT_IDX_I32: scan_i32(bin, n, vocab, &r); break;
	case MT_IDX_I64: scan_i64(bin, n, vocab, &r); break;
	case MT_IDX_F32:
	case MT_IDX_F64: scan_float(bin, n, l->itemsize, vocab, &r); break;
	}
	if (!r.bad)
		return;
	locate(l, r.first, where, sizeof(where));
	if (dtype == MT_IDX_F32 || dtype == MT_IDX_F64) {
		if (r.bad == 1)
			problem(c, "1 token is not a token id below --vocab-size %lld: %s is %.17g",
				(long long)c->vocab_size, where, r.first_f);
		else
			problem(c, "%llu tokens are not token ids below --vocab-size %lld (values %.17g to %.17g); "
				"the first: %s is %.17g", (unsigned long long)r.bad, (long long)c->vocab_size, r.flo,
				r.fhi, where, r.first_f);
	} else if (r.bad == 1) {
		problem(c, "1 token is outside the vocabulary [0, %lld): %s is %lld", (long long)c->vocab_size, where,
			(long long)r.first_v);
	} else {
		problem(c, "%llu tokens are outside the vocabulary [0, %lld) (values %lld to %lld); the first: %s is %lld",
			(unsigned long long)r.bad, (long long)c->vocab_size, (long long)r.lo, (long long)r.hi, where,
			(long long)r.first_v);
	}
}

/* Lengths and pointers; sets l->ptrs_ok (without the .bin size) and the token count. */
static void check_sequences(struct mt_idx_check *c, struct layout *l, int *neg_out, unsigned __int128 *tokens)
{
	uint64_t neg = 0, neg_at = 0, bad = 0, bad_at = 0, bad_got = 0, bad_want = 0, want = 0;
	int32_t neg_len = 0;
	unsigned __int128 sum = 0;

	for (uint64_t i = 0; i < l->s; i++) {
		int32_t len = len_at(l, i);

		if (len < 0) {
			if (!neg++) {
				neg_at = i;
				neg_len = len;
			}
		} else {
			sum += (uint64_t)len;
		}
		if (l->itemsize) {
			uint64_t at = ptr_at(l, i);

			/* each pointer against the one before it, so one bad entry is one problem */
			if (i > 0)
				want = ptr_at(l, i - 1) + (uint64_t)(int64_t)len_at(l, i - 1) * (uint64_t)l->itemsize;
			/* after a negative length (reported above) there is no expected value */
			if (at != want && !(i > 0 && len_at(l, i - 1) < 0) && !bad++) {
				bad_at = i;
				bad_got = at;
				bad_want = want;
			}
		}
	}
	if (neg == 1)
		problem(c, "sequence %llu has negative length %d", (unsigned long long)neg_at, (int)neg_len);
	else if (neg)
		problem(c, "%llu sequences have negative lengths; the first: sequence %llu, length %d",
			(unsigned long long)neg, (unsigned long long)neg_at, (int)neg_len);
	if (bad == 1)
		problem(c, "sequence %llu starts at byte %lld, expected %lld (pointers are contiguous from 0)",
			(unsigned long long)bad_at, (long long)bad_got, (long long)bad_want);
	else if (bad)
		problem(c, "%llu sequence pointers do not follow from the one before; the first: sequence %llu "
			"starts at byte %lld, expected %lld", (unsigned long long)bad, (unsigned long long)bad_at,
			(long long)bad_got, (long long)bad_want);
	l->ptrs_ok = l->itemsize && !neg && !bad;
	*neg_out = neg > 0;
	*tokens = sum;
}

static void check_documents(struct mt_idx_check *c, struct layout *l)
{
	uint64_t dec = 0, dec_at = 0, over = 0, over_at = 0, first = doc_at(l, 0), last = doc_at(l, l->d - 1);
	int64_t dec_v = 0, dec_prev = 0, over_v = 0, prev = (int64_t)first;

	if (first != 0)
		problem(c, "document index 0 is %lld, expected 0", (long long)first);
	for (uint64_t k = 1; k < l->d; k++) {
		int64_t v = (int64_t)doc_at(l, k);

		if (v < prev && !dec++) {
			dec_at = k;
			dec_v = v;
			dec_prev = prev;
		}
		if (k + 1 < l->d && (uint64_t)v > l->s && !over++) {
			over_at = k;
			over_v = v;
		}
		prev = v;
	}
	if (dec == 1)
		problem(c, "document index %llu is %lld, below the entry before it (%lld)", (unsigned long long)dec_at,
			(long long)dec_v, (long long)dec_prev);
	else if (dec)
		problem(c, "%llu document index entries are below the entry before them; the first: entry %llu is "
			"%lld, after %lld", (unsigned long long)dec, (unsigned long long)dec_at, (long long)dec_v,
			(long long)dec_prev);
	if (over == 1)
		problem(c, "document index %llu is %lld, outside the %llu sequences", (unsigned long long)over_at,
			(long long)over_v, (unsigned long long)l->s);
	else if (over)
		problem(c, "%llu document index entries are outside the %llu sequences; the first: entry %llu is %lld",
			(unsigned long long)over, (unsigned long long)l->s, (unsigned long long)over_at,
			(long long)over_v);
	if (last != l->s)
		problem(c, "the document index ends at %lld, expected %llu (the sequence count)", (long long)last,
			(unsigned long long)l->s);
	l->docs_ok = first == 0 && !dec && !over && last == l->s;
}

int mt_idx_check_run(struct mt_idx_check *c, const char *prefix, struct mt_err *err)
{
	const unsigned char *idx = NULL, *bin = NULL;
	size_t isz = 0, bsz = 0, n = strlen(prefix);
	char *idx_path = NULL, *bin_path = NULL;
	struct layout l = { 0 };
	uint64_t version, need;
	unsigned __int128 tokens;
	int neg, rc = -1;

	c->problems = 0;
	c->dtype = 0;
	c->sequences = c->documents = c->tokens = -1;
	if (n > 4 && (strcmp(prefix + n - 4, ".bin") == 0 || strcmp(prefix + n - 4, ".idx") == 0))
		n -= 4;
	idx_path = malloc(n + 5);
	bin_path = malloc(n + 5);
	if (!idx_path || !bin_path) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out;
	}
	memcpy(idx_path, prefix, n);
	memcpy(idx_path + n, ".idx", 5);
	memcpy(bin_path, prefix, n);
	memcpy(bin_path + n, ".bin", 5);
	if (map_ro(idx_path, &idx, &isz, err) || map_ro(bin_path, &bin, &bsz, err))
		goto out;
	rc = 0;

	/* header: stop only where nothing after it can be read */
	if (memcmp(idx, magic, isz < 9 ? isz : 9) != 0) {
		problem(c, "bad magic in the .idx (not a Megatron MMIDIDX index)");
		goto out;
	}
	if (isz < MT_IDX_HEADER_SIZE) {
		problem(c, "truncated .idx: %zu bytes, the header needs %d", isz, MT_IDX_HEADER_SIZE);
		goto out;
	}
	version = ld64(idx + 9);
	if (version != 1)
		problem(c, "unsupported version %llu in the .idx (expected 1)", (unsigned long long)version);
	l.itemsize = mt_idx_dtype_size(idx[17]);
	if (l.itemsize)
		c->dtype = idx[17];
	else
		problem(c, "unknown dtype code %d in the .idx", idx[17]);
	l.idx = idx;
	l.s = ld64(idx + 18);
	l.d = ld64(idx + 26);
	if (l.s > (UINT64_MAX - MT_IDX_HEADER_SIZE) / 24 || l.d > (UINT64_MAX - MT_IDX_HEADER_SIZE) / 16) {
		problem(c, "impossible counts in the .idx header: %llu sequences, %llu document index entries",
			(unsigned long long)l.s, (unsigned long long)l.d);
		goto out;
	}
	need = MT_IDX_HEADER_SIZE + 12 * l.s + 8 * l.d;
	if (need > isz) {
		problem(c, "truncated .idx: %zu bytes, but its %llu sequences and %llu document index entries need %llu",
			isz, (unsigned long long)l.s, (unsigned long long)l.d, (unsigned long long)need);
		goto out;
	}
	if (isz - need != 0 && isz - need != l.s)
		problem(c, ".idx has %llu bytes after the document index (neither none nor a multimodal modes array "
			"of %llu bytes)", (unsigned long long)(isz - need), (unsigned long long)l.s);
	l.off_lens = MT_IDX_HEADER_SIZE;
	l.off_ptrs = l.off_lens + 4 * (size_t)l.s;
	l.off_docs = l.off_ptrs + 8 * (size_t)l.s;
	c->sequences = (int64_t)l.s;

	check_sequences(c, &l, &neg, &tokens);
	if (tokens <= (unsigned __int128)INT64_MAX)
		c->tokens = (int64_t)tokens;
	if (l.d == 0)
		problem(c, "the .idx has no document index (its header says 0 entries, at least 1 is needed)");
	else {
		c->documents = (int64_t)l.d - 1;
		check_documents(c, &l);
	}
	if (l.itemsize && !neg && tokens * (unsigned)l.itemsize != (unsigned __int128)bsz) {
		problem(c, ".bin is %zu bytes, but the index's lengths add up to %llu tokens of %d bytes", bsz,
			(unsigned long long)(tokens > UINT64_MAX ? UINT64_MAX : (uint64_t)tokens), l.itemsize);
		l.ptrs_ok = 0;
	}
	if (c->vocab_size > 0 && l.itemsize)
		check_tokens(c, &l, idx[17], bin, bsz);
out:
	unmap(idx, isz);
	unmap(bin, bsz);
	free(idx_path);
	free(bin_path);
	return rc;
}
