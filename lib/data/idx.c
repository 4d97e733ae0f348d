/* idx.c: Megatron's indexed dataset, MMIDIDX .bin/.idx (see idx.h).
 *
 * Writer: tokens are converted to the dtype in a bounded buffer and appended to
 * the .bin through lib/base/atomic.c; sequence lengths (int32) and document indices
 * (int64) are spilled in host order to two temporaries beside the output, also
 * through lib/base/atomic.c so a signal handler removes them. Commit streams the .idx
 * out of the spills (header, lengths, pointers recomputed from the lengths as
 * Megatron's finalize does, document indices), so memory stays a few MiB
 * whatever the dataset size. Reader: mmap of both files, header and size checks
 * done in 64-bit arithmetic that cannot overflow on a garbage header, and
 * memcpy accessors since the arrays are unaligned. Not here: sample indices,
 * blending, tokenizing. */
#include "data/idx.h"

#include "base/atomic.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The open-time check runs at -O3 under GCC, where the loops vectorize (-O2's cheap
 * cost model leaves them scalar); other compilers get their own default. */
#if defined(__GNUC__) && !defined(__clang__)
#define VECTORIZE __attribute__((optimize("O3")))
#else
#define VECTORIZE
#endif

#define SCRATCH_SIZE (1 << 20) /* conversion and spill read buffer, bytes */

static const unsigned char magic[9] = { 'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0 };
static const unsigned char empty_map[1]; /* what an empty .bin maps to */

/* Little-endian element access ------------------------------------------- */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define HOST_LE 1
#else
#define HOST_LE 0
#endif

static inline void put16(unsigned char *p, uint16_t v)
{
	if (HOST_LE) {
		memcpy(p, &v, 2);
	} else {
		p[0] = (unsigned char)v;
		p[1] = (unsigned char)(v >> 8);
	}
}

static inline void put32(unsigned char *p, uint32_t v)
{
	if (HOST_LE) {
		memcpy(p, &v, 4);
	} else {
		for (int k = 0; k < 4; k++)
			p[k] = (unsigned char)(v >> (8 * k));
	}
}

static inline void put64(unsigned char *p, uint64_t v)
{
	if (HOST_LE) {
		memcpy(p, &v, 8);
	} else {
		for (int k = 0; k < 8; k++)
			p[k] = (unsigned char)(v >> (8 * k));
	}
}

static inline uint16_t get16(const unsigned char *p)
{
	uint16_t v;

	if (HOST_LE)
		memcpy(&v, p, 2);
	else
		v = (uint16_t)(p[0] | p[1] << 8);
	return v;
}

static inline uint32_t get32(const unsigned char *p)
{
	uint32_t v = 0;

	if (HOST_LE)
		memcpy(&v, p, 4);
	else
		for (int k = 0; k < 4; k++)
			v |= (uint32_t)p[k] << (8 * k);
	return v;
}

static inline uint64_t get64(const unsigned char *p)
{
	uint64_t v = 0;

	if (HOST_LE)
		memcpy(&v, p, 8);
	else
		for (int k = 0; k < 8; k++)
			v |= (uint64_t)p[k] << (8 * k);
	return v;
}

/* A float token as int64 without undefined behaviour on NaN or huge values. */
static int64_t float_to_i64(double d)
{
	if (d != d)
		return 0;
	if (d >= 9223372036854775807.0)
		return INT64_MAX;
	if (d <= -9223372036854775808.0)
		return INT64_MIN;
	return (int64_t)d;
}

/* Dtypes ------------------------------------------------------------------- */

int mt_idx_dtype_size(int code)
{
	switch (code) {
	case MT_IDX_U8:
	case MT_IDX_I8:
		return 1;
	case MT_IDX_I16:
	case MT_IDX_U16:
		return 2;
	case MT_IDX_I32:
	case MT_IDX_F32:
		return 4;
	case MT_IDX_I64:
	case MT_IDX_F64:
		return 8;
	}
	return 0;
}

const char *mt_idx_dtype_name(int code)
{
	switch (code) {
	case MT_IDX_U8: return "uint8";
	case MT_IDX_I8: return "int8";
	case MT_IDX_I16: return "int16";
	case MT_IDX_I32: return "int32";
	case MT_IDX_I64: return "int64";
	case MT_IDX_F64: return "float64";
	case MT_IDX_F32: return "float32";
	case MT_IDX_U16: return "uint16";
	}
	return NULL;
}

int mt_idx_dtype_for_vocab(int64_t vocab_size)
{
	/* Megatron's optimal_dtype; note 65500..65535 would fit uint16 but get
	 * int32 there too, and byte compatibility follows Megatron. */
	return vocab_size < 65500 ? MT_IDX_U16 : MT_IDX_I32;
}

/* Writer ------------------------------------------------------------------- */

struct mt_idx_writer {
	char *bin_path, *idx_path, *lens_path, *docs_path;
	int dtype, itemsize;
	struct mt_atomic bin;  /* PREFIX.bin.tmp.<pid> */
	struct mt_atomic lens; /* PREFIX.idx.lens.tmp.<pid>: int32 per sequence, host order */
	struct mt_atomic docs; /* PREFIX.idx.docs.tmp.<pid>: int64 per document, host order */
	unsigned char *scratch; /* SCRATCH_SIZE bytes */
	int64_t nseq, ndocs, ntokens;
	int broken; /* an I/O error happened: the files no longer match the counts */
	void (*progress)(void *ctx, int64_t bytes); /* see mt_idx_writer_set_progress */
	void *progress_ctx;
};

static char *concat(const char *a, const char *b)
{
	size_t na = strlen(a), nb = strlen(b);
	char *s = malloc(na + nb + 1);

	if (s) {
		memcpy(s, a, na);
		memcpy(s + na, b, nb + 1);
	}
	return s;
}

/* The directory the output goes to must exist: say so by name. */
static int check_out_dir(const char *prefix, struct mt_err *err)
{
	const char *slash = strrchr(prefix, '/');
	char *dir;
	struct stat st;
	int rc = 0;

	if (!slash)
		dir = strdup(".");
	else if (slash == prefix)
		dir = strdup("/");
	else
		dir = strndup(prefix, (size_t)(slash - prefix));
	if (!dir)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	if (stat(dir, &st) != 0) {
		if (errno == ENOENT)
			rc = mt_err_set(err, MT_EXIT_IO, "output directory '%s' does not exist", dir);
		else
			rc = mt_err_errno(err, MT_EXIT_IO, "cannot use output directory '%s'", dir);
	} else if (!S_ISDIR(st.st_mode)) {
		rc = mt_err_set(err, MT_EXIT_IO, "output directory '%s' is not a directory", dir);
	}
	free(dir);
	return rc;
}

static void writer_free(struct mt_idx_writer *w)
{
	if (!w)
		return;
	mt_atomic_abort(&w->bin);
	mt_atomic_abort(&w->lens);
	mt_atomic_abort(&w->docs);
	free(w->bin_path);
	free(w->idx_path);
	free(w->lens_path);
	free(w->docs_path);
	free(w->scratch);
	free(w);
}

void mt_idx_writer_abort(struct mt_idx_writer *w)
{
	writer_free(w);
}

int mt_idx_writer_open(struct mt_idx_writer **out, const char *prefix, int dtype, struct mt_err *err)
{
	struct mt_idx_writer *w;

	*out = NULL;
	if (!mt_idx_dtype_size(dtype))
		return mt_err_set(err, MT_EXIT_DATA, "unknown dtype code %d", dtype);
	if (check_out_dir(prefix, err))
		return -1;
	w = calloc(1, sizeof(*w));
	if (!w)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	/* an mt_atomic that was never opened must not release registry slot 0 */
	w->bin.slot = w->lens.slot = w->docs.slot = -1;
	w->dtype = dtype;
	w->itemsize = mt_idx_dtype_size(dtype);
	w->bin_path = concat(prefix, ".bin");
	w->idx_path = concat(prefix, ".idx");
	w->lens_path = concat(prefix, ".idx.lens");
	w->docs_path = concat(prefix, ".idx.docs");
	w->scratch = malloc(SCRATCH_SIZE);
	if (!w->bin_path || !w->idx_path || !w->lens_path || !w->docs_path || !w->scratch) {
		writer_free(w);
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	if (mt_atomic_open(&w->bin, w->bin_path, err) || mt_atomic_open(&w->lens, w->lens_path, err) ||
	    mt_atomic_open(&w->docs, w->docs_path, err)) {
		writer_free(w);
		return -1;
	}
	*out = w;
	return 0;
}

void mt_idx_writer_set_progress(struct mt_idx_writer *w, void (*fn)(void *ctx, int64_t bytes), void *ctx)
{
	w->progress = fn;
	w->progress_ctx = ctx;
}

int64_t mt_idx_writer_sequences(const struct mt_idx_writer *w) { return w->nseq; }
int64_t mt_idx_writer_documents(const struct mt_idx_writer *w) { return w->ndocs; }
int64_t mt_idx_writer_tokens(const struct mt_idx_writer *w) { return w->ntokens; }

static int broken_err(const struct mt_idx_writer *w, struct mt_err *err)
{
	return mt_err_set(err, MT_EXIT_IO, "'%s': not written after an earlier write error", w->bin_path);
}

/* Validate the lengths; their sum in *ntok. */
static int check_lens(const int32_t *lens, int nseq, int64_t *ntok, struct mt_err *err)
{
	int64_t sum = 0;

	if (nseq < 0)
		return mt_err_set(err, MT_EXIT_DATA, "negative sequence count %d", nseq);
	if (nseq > 0 && !lens)
		return mt_err_set(err, MT_EXIT_DATA, "%d sequences but no lengths", nseq);
	for (int i = 0; i < nseq; i++) {
		if (lens[i] < 0)
			return mt_err_set(err, MT_EXIT_DATA, "sequence %d of the document has negative length %d",
					  i, (int)lens[i]);
		sum += lens[i];
	}
	*ntok = sum;
	return 0;
}

/* Every token must be exactly representable in the dtype; checked before
 * anything is written so that a rejected document leaves no trace. */
static int check_range(int dtype, const int32_t *t, int64_t n, struct mt_err *err)
{
	int32_t lo, hi, mn = INT32_MAX, mx = INT32_MIN;

	switch (dtype) {
	case MT_IDX_U8: lo = 0; hi = UINT8_MAX; break;
	case MT_IDX_I8: lo = INT8_MIN; hi = INT8_MAX; break;
	case MT_IDX_I16: lo = INT16_MIN; hi = INT16_MAX; break;
	case MT_IDX_U16: lo = 0; hi = UINT16_MAX; break;
	case MT_IDX_F32: lo = -(1 << 24); hi = 1 << 24; break; /* every integer here is exact */
	default: return 0; /* int32, int64, float64 hold every int32 */
	}
	for (int64_t i = 0; i < n; i++) {
		mn = t[i] < mn ? t[i] : mn;
		mx = t[i] > mx ? t[i] : mx;
	}
	if (n == 0 || (mn >= lo && mx <= hi))
		return 0;
	for (int64_t i = 0; i < n; i++) {
		if (t[i] >= lo && t[i] <= hi)
			continue;
		if (dtype == MT_IDX_F32) {
			if ((double)(float)t[i] == (double)t[i])
				continue;
			return mt_err_set(err, MT_EXIT_DATA, "token %d cannot be stored exactly as float32",
					  (int)t[i]);
		}
		return mt_err_set(err, MT_EXIT_DATA, "token %d does not fit dtype %s (%d..%d)", (int)t[i],
				  mt_idx_dtype_name(dtype), (int)lo, (int)hi);
	}
	return 0;
}

/* Convert n tokens (already range-checked) into out, little-endian. */
static void convert(int dtype, unsigned char *out, const int32_t *t, size_t n)
{
	switch (dtype) {
	case MT_IDX_U8:
	case MT_IDX_I8:
		for (size_t i = 0; i < n; i++)
			out[i] = (unsigned char)t[i];
		break;
	case MT_IDX_I16:
	case MT_IDX_U16:
		for (size_t i = 0; i < n; i++)
			put16(out + 2 * i, (uint16_t)t[i]);
		break;
	case MT_IDX_I32:
		for (size_t i = 0; i < n; i++)
			put32(out + 4 * i, (uint32_t)t[i]);
		break;
	case MT_IDX_I64:
		for (size_t i = 0; i < n; i++)
			put64(out + 8 * i, (uint64_t)(int64_t)t[i]);
		break;
	case MT_IDX_F32:
		for (size_t i = 0; i < n; i++) {
			float f = (float)t[i];
			uint32_t u;

			memcpy(&u, &f, 4);
			put32(out + 4 * i, u);
		}
		break;
	case MT_IDX_F64:
		for (size_t i = 0; i < n; i++) {
			double d = (double)t[i];
			uint64_t u;

			memcpy(&u, &d, 8);
			put64(out + 8 * i, u);
		}
		break;
	}
}

static int write_tokens(struct mt_idx_writer *w, const int32_t *t, int64_t n, struct mt_err *err)
{
	size_t chunk = SCRATCH_SIZE / (size_t)w->itemsize;

	if (HOST_LE && w->dtype == MT_IDX_I32)
		return mt_atomic_write(&w->bin, t, (size_t)n * 4, err);
	while (n > 0) {
		size_t k = (uint64_t)n < chunk ? (size_t)n : chunk;

		convert(w->dtype, w->scratch, t, k);
		if (mt_atomic_write(&w->bin, w->scratch, k * (size_t)w->itemsize, err))
			return -1;
		t += k;
		n -= (int64_t)k;
	}
	return 0;
}

/* The .bin part of a document is written: record its lengths and index. */
static int finish_doc(struct mt_idx_writer *w, const int32_t *lens, int nseq, int64_t ntok,
		      struct mt_err *err)
{
	int64_t d;

	if (nseq > 0 && mt_atomic_write(&w->lens, lens, (size_t)nseq * sizeof(int32_t), err))
		goto fail;
	w->nseq += nseq;
	w->ntokens += ntok;
	w->ndocs++;
	d = w->nseq;
	if (mt_atomic_write(&w->docs, &d, sizeof(d), err))
		goto fail;
	return 0;
fail:
	w->broken = 1;
	return -1;
}

int mt_idx_writer_add_document(struct mt_idx_writer *w, const int32_t *tokens, const int32_t *lens,
			       int nseq, struct mt_err *err)
{
	int64_t ntok;

	if (w->broken)
		return broken_err(w, err);
	if (check_lens(lens, nseq, &ntok, err))
		return -1;
	if (ntok > 0 && !tokens)
		return mt_err_set(err, MT_EXIT_DATA, "document of %lld tokens without tokens", (long long)ntok);
	if (check_range(w->dtype, tokens, ntok, err))
		return -1;
	if (write_tokens(w, tokens, ntok, err)) {
		w->broken = 1;
		return -1;
	}
	return finish_doc(w, lens, nseq, ntok, err);
}

int mt_idx_writer_add_document_raw(struct mt_idx_writer *w, const void *data, size_t nbytes,
				   const int32_t *lens, int nseq, struct mt_err *err)
{
	int64_t ntok;

	if (w->broken)
		return broken_err(w, err);
	if (check_lens(lens, nseq, &ntok, err))
		return -1;
	if ((uint64_t)nbytes != (uint64_t)ntok * (uint64_t)w->itemsize)
		return mt_err_set(err, MT_EXIT_DATA,
				  "document of %zu bytes does not match its lengths (%lld tokens of %d bytes)",
				  nbytes, (long long)ntok, w->itemsize);
	if (nbytes > 0 && !data)
		return mt_err_set(err, MT_EXIT_DATA, "document of %zu bytes without data", nbytes);
	if (mt_atomic_write(&w->bin, data, nbytes, err)) {
		w->broken = 1;
		return -1;
	}
	return finish_doc(w, lens, nseq, ntok, err);
}

int mt_idx_writer_add_batch(struct mt_idx_writer *w, const void *data, size_t nbytes,
			    const int32_t *lens, size_t nlens, const int32_t *nseq, size_t ndocs,
			    struct mt_err *err)
{
	int64_t ntok, d, lsum = 0;
	size_t chunk = SCRATCH_SIZE / sizeof(int64_t);

	if (w->broken)
		return broken_err(w, err);
	if (nlens > INT32_MAX || check_lens(lens, (int)nlens, &ntok, err))
		return nlens > INT32_MAX ? mt_err_set(err, MT_EXIT_DATA, "too many sequences in one batch") : -1;
	for (size_t i = 0; i < ndocs; i++) {
		if (nseq[i] < 0)
			return mt_err_set(err, MT_EXIT_DATA, "document %zu of the batch has %d sequences", i, nseq[i]);
		lsum += nseq[i];
	}
	if ((uint64_t)lsum != (uint64_t)nlens)
		return mt_err_set(err, MT_EXIT_DATA, "the documents of the batch have %lld sequences, not %zu",
				  (long long)lsum, nlens);
	if ((uint64_t)nbytes != (uint64_t)ntok * (uint64_t)w->itemsize)
		return mt_err_set(err, MT_EXIT_DATA, "batch of %zu bytes does not match its lengths (%lld tokens of %d bytes)",
				  nbytes, (long long)ntok, w->itemsize);
	if (mt_atomic_write(&w->bin, data, nbytes, err) ||
	    (nlens && mt_atomic_write(&w->lens, lens, nlens * sizeof(int32_t), err)))
		goto fail;
	d = w->nseq;
	for (size_t i = 0; i < ndocs;) {
		size_t k = ndocs - i < chunk ? ndocs - i : chunk;
		for (size_t j = 0; j < k; j++) {
			d += nseq[i + j];
			memcpy(w->scratch + 8 * j, &d, 8);
		}
		if (mt_atomic_write(&w->docs, w->scratch, 8 * k, err))
			goto fail;
		i += k;
	}
	w->nseq += (int64_t)nlens;
	w->ntokens += ntok;
	w->ndocs += (int64_t)ndocs;
	return 0;
fail:
	w->broken = 1;
	return -1;
}

#define COPY_CHUNK ((size_t)64 << 20) /* bytes of a .bin copied between progress calls */

/* The next data region of ix's .bin at or after pos, as [*data, *end): what
 * SEEK_DATA/SEEK_HOLE say when fd is that file and the filesystem knows holes,
 * else all of [pos, size). */
static void next_data(int fd, off_t pos, off_t size, off_t *data, off_t *end)
{
	off_t d, h;

	*data = pos;
	*end = size;
	if (fd < 0)
		return;
	d = lseek(fd, pos, SEEK_DATA);
	if (d < 0) {
		if (errno == ENXIO) /* only a hole from pos to the end */
			*data = size;
		return;
	}
	h = lseek(fd, d, SEEK_HOLE);
	*data = d < size ? d : size;
	if (h > d && h < size)
		*end = h;
}

/* Append ix's .bin to the writer's: data regions from the map, holes as holes
 * (a seek past them; the size is set at the end), in chunks with progress. */
static int copy_bin(struct mt_idx_writer *w, const struct mt_idx *ix, struct mt_err *err)
{
	FILE *fp = mt_atomic_file(&w->bin);
	off_t size = (off_t)ix->bin_size, pos = 0, data, end;
	struct stat st;
	int fd = open(ix->bin_path, O_RDONLY | O_CLOEXEC), hole_at_end = 0, rc = -1;

	/* holes are taken only from the very file that is mapped */
	if (fd >= 0 && (fstat(fd, &st) != 0 || (uint64_t)st.st_dev != ix->bin_dev ||
			(uint64_t)st.st_ino != ix->bin_ino || st.st_size != size)) {
		close(fd);
		fd = -1;
	}
	while (pos < size) {
		next_data(fd, pos, size, &data, &end);
		if (data > pos) {
			if (fseeko(fp, data - pos, SEEK_CUR) != 0) {
				mt_err_errno(err, MT_EXIT_IO, "cannot seek in '%s'", w->bin.tmp);
				goto out;
			}
			hole_at_end = 1;
			pos = data;
		}
		while (pos < end) {
			size_t k = (uint64_t)(end - pos) < COPY_CHUNK ? (size_t)(end - pos) : COPY_CHUNK;

			if (mt_atomic_write(&w->bin, ix->bin_map + pos, k, err))
				goto out;
			pos += (off_t)k;
			hole_at_end = 0;
			if (w->progress)
				w->progress(w->progress_ctx, (int64_t)pos);
		}
	}
	/* a seek alone does not make the file longer */
	if (hole_at_end && (fflush(fp) != 0 || ftruncate(fileno(fp), ftello(fp)) != 0)) {
		mt_err_errno(err, MT_EXIT_IO, "cannot write '%s'", w->bin.tmp);
		goto out;
	}
	if (w->progress)
		w->progress(w->progress_ctx, (int64_t)size);
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	return rc;
}

int mt_idx_writer_add_index(struct mt_idx_writer *w, const struct mt_idx *ix, struct mt_err *err)
{
	int64_t base = w->nseq;
	size_t chunk;

	if (w->broken)
		return broken_err(w, err);
	if (ix->dtype != w->dtype)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': dtype %s does not match the output's %s",
				  ix->idx_path, mt_idx_dtype_name(ix->dtype), mt_idx_dtype_name(w->dtype));
	if (copy_bin(w, ix, err))
		goto fail;
	chunk = SCRATCH_SIZE / sizeof(int32_t);
	for (int64_t i = 0; i < ix->nseq;) {
		size_t k = (uint64_t)(ix->nseq - i) < chunk ? (size_t)(ix->nseq - i) : chunk;

		for (size_t j = 0; j < k; j++) {
			int32_t v = mt_idx_seq_len(ix, i + (int64_t)j);

			memcpy(w->scratch + 4 * j, &v, 4);
		}
		if (mt_atomic_write(&w->lens, w->scratch, 4 * k, err))
			goto fail;
		i += (int64_t)k;
	}
	chunk = SCRATCH_SIZE / sizeof(int64_t);
	for (int64_t i = 1; i < ix->ndoc_idx;) {
		size_t k = (uint64_t)(ix->ndoc_idx - i) < chunk ? (size_t)(ix->ndoc_idx - i) : chunk;

		for (size_t j = 0; j < k; j++) {
			int64_t v = base + mt_idx_doc(ix, i + (int64_t)j);

			memcpy(w->scratch + 8 * j, &v, 8);
		}
		if (mt_atomic_write(&w->docs, w->scratch, 8 * k, err))
			goto fail;
		i += (int64_t)k;
	}
	w->nseq += ix->nseq;
	w->ndocs += ix->ndoc_idx - 1;
	w->ntokens += (int64_t)(ix->bin_size / (size_t)ix->itemsize);
	return 0;
fail:
	w->broken = 1;
	return -1;
}

/* Make a spill file's content readable through another stream. */
static int flush_spill(struct mt_atomic *a, struct mt_err *err)
{
	FILE *fp = mt_atomic_file(a);

	if (fflush(fp) != 0 || ferror(fp))
		return mt_err_errno(err, MT_EXIT_IO, "cannot write '%s'", a->tmp);
	return 0;
}

/* Read up to max bytes; a short read that is not the end is an error. */
static int read_chunk(FILE *in, const char *name, void *buf, size_t max, size_t *got, struct mt_err *err)
{
	*got = fread(buf, 1, max, in);
	if (*got < max && ferror(in))
		return mt_err_errno(err, MT_EXIT_IO, "cannot read '%s'", name);
	return 0;
}

/* Stream the spilled lengths into the .idx twice: as lengths, then as the
 * pointers they imply. */
static int emit_lens_and_ptrs(struct mt_idx_writer *w, struct mt_atomic *idx, unsigned char *obuf,
			      struct mt_err *err)
{
	const char *name = w->lens.tmp;
	FILE *in = fopen(name, "rb");
	int64_t count = 0, ptr = 0;
	size_t got;

	if (!in)
		return mt_err_errno(err, MT_EXIT_IO, "cannot open '%s'", name);
	for (int pass = 0; pass < 2; pass++) {
		count = 0;
		rewind(in);
		for (;;) {
			size_t n;

			if (read_chunk(in, name, w->scratch, SCRATCH_SIZE, &got, err))
				goto fail;
			n = got / 4;
			if (n == 0)
				break;
			for (size_t k = 0; k < n; k++) {
				int32_t len;

				memcpy(&len, w->scratch + 4 * k, 4);
				if (pass == 0) {
					put32(obuf + 4 * k, (uint32_t)len);
				} else {
					put64(obuf + 8 * k, (uint64_t)ptr);
					ptr += (int64_t)len * w->itemsize;
				}
			}
			if (mt_atomic_write(idx, obuf, n * (pass == 0 ? 4 : 8), err))
				goto fail;
			count += (int64_t)n;
		}
		if (count != w->nseq || got % 4) {
			mt_err_set(err, MT_EXIT_IO, "'%s': holds %lld lengths, expected %lld", name,
				   (long long)count, (long long)w->nseq);
			goto fail;
		}
	}
	fclose(in);
	return 0;
fail:
	fclose(in);
	return -1;
}

static int emit_docs(struct mt_idx_writer *w, struct mt_atomic *idx, unsigned char *obuf, struct mt_err *err)
{
	const char *name = w->docs.tmp;
	FILE *in = fopen(name, "rb");
	int64_t count = 0;
	size_t got;

	if (!in)
		return mt_err_errno(err, MT_EXIT_IO, "cannot open '%s'", name);
	put64(obuf, 0); /* the leading 0 of the document index */
	if (mt_atomic_write(idx, obuf, 8, err))
		goto fail;
	for (;;) {
		size_t n;

		if (read_chunk(in, name, w->scratch, SCRATCH_SIZE, &got, err))
			goto fail;
		n = got / 8;
		if (n == 0)
			break;
		for (size_t k = 0; k < n; k++) {
			int64_t d;

			memcpy(&d, w->scratch + 8 * k, 8);
			put64(obuf + 8 * k, (uint64_t)d);
		}
		if (mt_atomic_write(idx, obuf, n * 8, err))
			goto fail;
		count += (int64_t)n;
	}
	if (count != w->ndocs || got % 8) {
		mt_err_set(err, MT_EXIT_IO, "'%s': holds %lld document indices, expected %lld", name,
			   (long long)count, (long long)w->ndocs);
		goto fail;
	}
	fclose(in);
	return 0;
fail:
	fclose(in);
	return -1;
}

int mt_idx_writer_commit(struct mt_idx_writer *w, struct mt_err *err)
{
	struct mt_atomic idx = { .slot = -1 };
	unsigned char hdr[MT_IDX_HEADER_SIZE];
	unsigned char *obuf = NULL;
	FILE *fp;
	int rc = -1;

	if (w->broken) {
		broken_err(w, err);
		goto out;
	}
	if (flush_spill(&w->lens, err) || flush_spill(&w->docs, err))
		goto out;
	obuf = malloc(2 * SCRATCH_SIZE); /* a chunk of lengths becomes twice as many pointer bytes */
	if (!obuf) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out;
	}
	if (mt_atomic_open(&idx, w->idx_path, err))
		goto out;
	memcpy(hdr, magic, 9);
	put64(hdr + 9, 1);
	hdr[17] = (unsigned char)w->dtype;
	put64(hdr + 18, (uint64_t)w->nseq);
	put64(hdr + 26, (uint64_t)w->ndocs + 1);
	if (mt_atomic_write(&idx, hdr, sizeof(hdr), err) || emit_lens_and_ptrs(w, &idx, obuf, err) ||
	    emit_docs(w, &idx, obuf, err))
		goto out;
	/* Have the .idx on disk before the .bin replaces anything, so that the
	 * only step left after the .bin rename is the .idx rename. */
	fp = mt_atomic_file(&idx);
	if (fflush(fp) != 0 || ferror(fp)) {
		mt_err_errno(err, MT_EXIT_IO, "cannot write '%s'", idx.tmp);
		goto out;
	}
	if (fsync(fileno(fp)) != 0 && errno != EINVAL) {
		mt_err_errno(err, MT_EXIT_IO, "cannot sync '%s'", idx.tmp);
		goto out;
	}
	/* Replacing a dataset: the old .idx goes first, so that from here until the new
	 * .idx is in place a reader finds no .idx (a clean "missing" error) instead of
	 * the old .idx beside the new .bin. Each step is on disk before the next. */
	if (unlink(w->idx_path) != 0 && errno != ENOENT) {
		mt_err_errno(err, MT_EXIT_IO, "cannot replace '%s'", w->idx_path);
		goto out;
	}
	mt_atomic_step(w->idx_path); /* the old .idx removed */
	mt_atomic_sync_dir(w->idx_path);
	if (mt_atomic_commit(&w->bin, err))
		goto out;
	if (mt_atomic_commit(&idx, err)) {
		unlink(w->bin_path); /* a .bin without its .idx is no dataset */
		goto out;
	}
	rc = 0;
out:
	mt_atomic_abort(&idx);
	free(obuf);
	writer_free(w);
	return rc;
}

/* Reader ------------------------------------------------------------------- */

static int map_file(const char *path, const unsigned char **map, size_t *size, struct stat *stp,
		    struct mt_err *err)
{
	struct stat st;
	void *m;
	/* O_NONBLOCK: a FIFO under the name opens at once (and is refused below)
	 * instead of waiting for a writer */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	if (fd < 0)
		return mt_err_errno(err, MT_EXIT_IO, "cannot open '%s'", path);
	if (fstat(fd, &st) != 0) {
		mt_err_errno(err, MT_EXIT_IO, "cannot stat '%s'", path);
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		mt_err_set(err, MT_EXIT_IO, "cannot open '%s': not a regular file", path);
		goto fail;
	}
	if ((uint64_t)st.st_size > SIZE_MAX) {
		mt_err_set(err, MT_EXIT_IO, "cannot map '%s': too large for this system", path);
		goto fail;
	}
	*size = (size_t)st.st_size;
	if (*size == 0) {
		*map = empty_map; /* mmap of 0 bytes is invalid */
	} else {
		m = mmap(NULL, *size, PROT_READ, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED) {
			mt_err_errno(err, MT_EXIT_IO, "cannot map '%s'", path);
			goto fail;
		}
		*map = m;
	}
	if (stp)
		*stp = st;
	close(fd);
	return 0;
fail:
	close(fd);
	return -1;
}

static void unmap(const unsigned char *map, size_t size)
{
	if (map && map != empty_map)
		munmap((void *)map, size);
}

void mt_idx_close(struct mt_idx *ix)
{
	if (!ix)
		return;
	unmap(ix->idx_map, ix->idx_size);
	unmap(ix->bin_map, ix->bin_size);
	free(ix->prefix);
	free(ix->idx_path);
	free(ix->bin_path);
	free(ix);
}

/* Header, counts and index size; fills the offsets. */
static int check_idx(struct mt_idx *ix, struct mt_err *err)
{
	const unsigned char *m = ix->idx_map;
	const char *name = ix->idx_path;
	size_t size = ix->idx_size;
	uint64_t version, s, d, need;

	if (memcmp(m, magic, size < 9 ? size : 9) != 0)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': bad magic (not a Megatron MMIDIDX index)", name);
	if (size < MT_IDX_HEADER_SIZE)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': truncated: %zu bytes, header needs %d", name, size,
				  MT_IDX_HEADER_SIZE);
	version = get64(m + 9);
	if (version != 1)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': unsupported version %llu (expected 1)", name,
				  (unsigned long long)version);
	ix->dtype = m[17];
	ix->itemsize = mt_idx_dtype_size(ix->dtype);
	if (!ix->itemsize)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': unknown dtype code %d", name, ix->dtype);
	s = get64(m + 18);
	d = get64(m + 26);
	/* 12s + 8d + 34 must not wrap: bound each term by half the range first */
	if (s > (UINT64_MAX - MT_IDX_HEADER_SIZE) / 24 || d > (UINT64_MAX - MT_IDX_HEADER_SIZE) / 16)
		return mt_err_set(err, MT_EXIT_DATA,
				  "'%s': bad header: %llu sequences and %llu document indices cannot fit in %zu bytes",
				  name, (unsigned long long)s, (unsigned long long)d, size);
	need = MT_IDX_HEADER_SIZE + 12 * s + 8 * d;
	if (need > size)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': truncated: %zu bytes, header needs %llu", name, size,
				  (unsigned long long)need);
	if (d == 0)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': bad header: no document index (at least 1 entry needed)",
				  name);
	ix->nseq = (int64_t)s;
	ix->ndoc_idx = (int64_t)d;
	ix->off_lens = MT_IDX_HEADER_SIZE;
	ix->off_ptrs = ix->off_lens + 4 * (size_t)s;
	ix->off_docs = ix->off_ptrs + 8 * (size_t)s;
	if (mt_idx_doc(ix, ix->ndoc_idx - 1) != ix->nseq)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': last document index is %lld, expected %lld (the sequence count)",
				  name, (long long)mt_idx_doc(ix, ix->ndoc_idx - 1), (long long)ix->nseq);
	return 0;
}

/* The .bin must hold exactly what the last sequence says. */
static int check_bin(struct mt_idx *ix, struct mt_err *err)
{
	int64_t want = 0;

	if (ix->nseq > 0) {
		int64_t p = mt_idx_seq_ptr(ix, ix->nseq - 1);
		int64_t len = mt_idx_seq_len(ix, ix->nseq - 1);

		if (p < 0 || len < 0 || p > INT64_MAX - len * ix->itemsize)
			return mt_err_set(err, MT_EXIT_DATA, "'%s': bad last sequence: pointer %lld, length %lld",
					  ix->idx_path, (long long)p, (long long)len);
		want = p + len * ix->itemsize;
	}
	if ((uint64_t)want != (uint64_t)ix->bin_size)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': %zu bytes, but its index '%s' says %lld", ix->bin_path,
				  ix->bin_size, ix->idx_path, (long long)want);
	return 0;
}

int mt_idx_open_header(struct mt_idx **out, const char *prefix, struct mt_err *err)
{
	struct mt_idx *ix;
	struct stat st;
	size_t n = strlen(prefix);

	*out = NULL;
	ix = calloc(1, sizeof(*ix));
	if (!ix)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	if (n > 4 && (strcmp(prefix + n - 4, ".bin") == 0 || strcmp(prefix + n - 4, ".idx") == 0))
		n -= 4;
	ix->prefix = strndup(prefix, n);
	if (ix->prefix) {
		ix->idx_path = concat(ix->prefix, ".idx");
		ix->bin_path = concat(ix->prefix, ".bin");
	}
	if (!ix->prefix || !ix->idx_path || !ix->bin_path) {
		mt_idx_close(ix);
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	if (map_file(ix->idx_path, &ix->idx_map, &ix->idx_size, NULL, err) || check_idx(ix, err) ||
	    map_file(ix->bin_path, &ix->bin_map, &ix->bin_size, &st, err) || check_bin(ix, err)) {
		mt_idx_close(ix);
		return -1;
	}
	ix->bin_dev = (uint64_t)st.st_dev;
	ix->bin_ino = (uint64_t)st.st_ino;
	*out = ix;
	return 0;
}

int mt_idx_open(struct mt_idx **out, const char *prefix, struct mt_err *err)
{
	if (mt_idx_open_header(out, prefix, err))
		return -1;
	if (mt_idx_verify(*out, err)) {
		mt_idx_close(*out);
		*out = NULL;
		return -1;
	}
	return 0;
}

/* The first inconsistency, named: run where the fast pass found one. */
static int verify_slow(const struct mt_idx *ix, struct mt_err *err)
{
	int64_t p = 0, prev;

	for (int64_t i = 0; i < ix->nseq; i++) {
		int64_t len = mt_idx_seq_len(ix, i), at = mt_idx_seq_ptr(ix, i);

		if (len < 0)
			return mt_err_set(err, MT_EXIT_DATA, "'%s': sequence %lld has negative length %lld",
					  ix->idx_path, (long long)i, (long long)len);
		if (at != p)
			return mt_err_set(err, MT_EXIT_DATA,
					  "'%s': sequence %lld starts at byte %lld, expected %lld (pointers must be contiguous)",
					  ix->idx_path, (long long)i, (long long)at, (long long)p);
		if (p > INT64_MAX - len * ix->itemsize)
			return mt_err_set(err, MT_EXIT_DATA, "'%s': sequence %lld ends past 2^63 bytes",
					  ix->idx_path, (long long)i);
		p += len * ix->itemsize;
	}
	if ((uint64_t)p != (uint64_t)ix->bin_size)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': %zu bytes, but its index '%s' says %lld", ix->bin_path,
				  ix->bin_size, ix->idx_path, (long long)p);
	prev = mt_idx_doc(ix, 0);
	if (prev != 0)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': document index 0 is %lld, expected 0", ix->idx_path,
				  (long long)prev);
	for (int64_t k = 1; k < ix->ndoc_idx; k++) {
		int64_t d = mt_idx_doc(ix, k);

		if (d < prev)
			return mt_err_set(err, MT_EXIT_DATA, "'%s': document index %lld is %lld, below the previous %lld",
					  ix->idx_path, (long long)k, (long long)d, (long long)prev);
		prev = d;
	}
	return mt_err_set(err, MT_EXIT_DATA, "'%s': inconsistent lengths, pointers or document index", ix->idx_path);
}


/* Entries checked per block before the verdict is looked at. */
#define VERIFY_BLOCK 4096

/* The fast pass, one block of sequences [i0, i1) with i1 < S: lengths >= 0, each
 * pointer at most the .bin size (< 2^63) and the next one exactly len * itemsize
 * further on. Written with sign bits and xor instead of comparisons, without
 * branches, so that GCC turns it into vector code; a nonzero return says the
 * block holds a problem, not which. */
VECTORIZE static uint64_t bad_seqs(const unsigned char *lens, const unsigned char *ptrs, int64_t i0, int64_t i1,
				   int shift, uint64_t bin_size)
{
	uint64_t bad = 0;

	for (int64_t i = i0; i < i1; i++) {
		uint64_t len = (uint64_t)(int64_t)(int32_t)get32(lens + 4 * (size_t)i);
		uint64_t p = get64(ptrs + 8 * (size_t)i), next = get64(ptrs + 8 * (size_t)i + 8);

		/* len < 0; p >= 2^63; p > bin_size; next - p != len << shift */
		bad |= len >> 63 | p >> 63 | (bin_size - p) >> 63 | ((next - p) ^ (len << shift));
	}
	return bad;
}

/* The document index [k0, k1), k0 >= 1: every entry in [0, S] and none below the one
 * before it (with both in range their difference cannot wrap). */
VECTORIZE static uint64_t bad_docs(const unsigned char *docs, int64_t k0, int64_t k1, uint64_t S)
{
	uint64_t bad = 0;

	for (int64_t k = k0; k < k1; k++) {
		uint64_t d = get64(docs + 8 * (size_t)k), prev = get64(docs + 8 * (size_t)k - 8);

		bad |= d >> 63 | (S - d) >> 63 | (d - prev) >> 63;
	}
	return bad;
}

/* Why this is enough: pointer 0 is 0, every step between neighbours is exactly
 * len * itemsize (< 2^34) and no pointer exceeds the .bin size, so no sum wraps and
 * pointer i is the sum of the lengths before it; the last sequence ends at the .bin
 * size. Every token any reader can reach then lies inside the .bin. The document
 * index starts at 0, ends at S (checked at open) and never decreases, so each entry
 * is a sequence index in [0, S]. */
int mt_idx_verify(const struct mt_idx *ix, struct mt_err *err)
{
	const unsigned char *lens = ix->idx_map + ix->off_lens, *ptrs = ix->idx_map + ix->off_ptrs;
	const unsigned char *docs = ix->idx_map + ix->off_docs;
	int shift = ix->itemsize == 1 ? 0 : ix->itemsize == 2 ? 1 : ix->itemsize == 4 ? 2 : 3;
	uint64_t bin = (uint64_t)ix->bin_size, bad = 0;
	int64_t S = ix->nseq, D = ix->ndoc_idx;

	if (S > 0) {
		int32_t len = mt_idx_seq_len(ix, S - 1);
		uint64_t p = (uint64_t)mt_idx_seq_ptr(ix, S - 1);

		bad |= (uint64_t)(mt_idx_seq_ptr(ix, 0) != 0) | (uint64_t)(len < 0) | (uint64_t)(p > bin) |
		       (uint64_t)(bin - p != (uint64_t)(uint32_t)len << shift);
	} else {
		bad |= (uint64_t)(bin != 0);
	}
	for (int64_t i = 0; i < S - 1 && !bad; i += VERIFY_BLOCK)
		bad |= bad_seqs(lens, ptrs, i, i + VERIFY_BLOCK < S - 1 ? i + VERIFY_BLOCK : S - 1, shift, bin);
	bad |= (uint64_t)(mt_idx_doc(ix, 0) != 0);
	for (int64_t k = 1; k < D && !bad; k += VERIFY_BLOCK)
		bad |= bad_docs(docs, k, k + VERIFY_BLOCK < D ? k + VERIFY_BLOCK : D, (uint64_t)S);
	return bad ? verify_slow(ix, err) : 0;
}

int32_t mt_idx_seq_len(const struct mt_idx *ix, int64_t i)
{
	return (int32_t)get32(ix->idx_map + ix->off_lens + 4 * (size_t)i);
}

int64_t mt_idx_seq_ptr(const struct mt_idx *ix, int64_t i)
{
	return (int64_t)get64(ix->idx_map + ix->off_ptrs + 8 * (size_t)i);
}

int64_t mt_idx_doc(const struct mt_idx *ix, int64_t i)
{
	return (int64_t)get64(ix->idx_map + ix->off_docs + 8 * (size_t)i);
}

const void *mt_idx_seq_data(const struct mt_idx *ix, int64_t i)
{
	return ix->bin_map + mt_idx_seq_ptr(ix, i);
}

int64_t mt_idx_token(const struct mt_idx *ix, int64_t i, int64_t j)
{
	const unsigned char *p = ix->bin_map + mt_idx_seq_ptr(ix, i) + j * ix->itemsize;
	uint32_t u32;
	uint64_t u64;
	float f;
	double d;

	switch (ix->dtype) {
	case MT_IDX_U8: return p[0];
	case MT_IDX_I8: return (int8_t)p[0];
	case MT_IDX_I16: return (int16_t)get16(p);
	case MT_IDX_U16: return get16(p);
	case MT_IDX_I32: return (int32_t)get32(p);
	case MT_IDX_I64: return (int64_t)get64(p);
	case MT_IDX_F32:
		u32 = get32(p);
		memcpy(&f, &u32, 4);
		return float_to_i64(f);
	case MT_IDX_F64:
		u64 = get64(p);
		memcpy(&d, &u64, 8);
		return float_to_i64(d);
	}
	return 0;
}
