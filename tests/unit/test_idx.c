/* Unit tests for lib/data/idx.c: the exact bytes of small uint16 and int32 datasets
 * against hand-built arrays, the writer's temporaries (absent names before
 * commit and after abort, no leftovers after commit), value checks, corrupt
 * and truncated files (each an MT_EXIT_DATA error naming the file, never a
 * crash), a 200000-document dataset that crosses the spill buffers, and, where
 * python3 has numpy, a cross-check reading the files the way Megatron does. */
#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/idx.h"
#include "tap.h"

static char dir[256];

static char *path(const char *fmt, const char *a)
{
	static char p[8][512];
	static int k;
	char name[256];

	k = (k + 1) % 8;
	snprintf(name, sizeof(name), fmt, a);
	snprintf(p[k], sizeof(p[k]), "%s/%s", dir, name);
	return p[k];
}

static unsigned char *read_file(const char *p, size_t *n)
{
	FILE *f = fopen(p, "rb");
	unsigned char *buf;
	long sz;

	*n = 0;
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	sz = ftell(f);
	rewind(f);
	buf = malloc((size_t)sz + 1);
	if (buf)
		*n = fread(buf, 1, (size_t)sz, f);
	fclose(f);
	return buf;
}

static void write_file(const char *p, const void *buf, size_t n)
{
	FILE *f = fopen(p, "wb");

	if (!f)
		return;
	if (n)
		fwrite(buf, 1, n, f);
	fclose(f);
}

static int exists(const char *p)
{
	struct stat st;

	return stat(p, &st) == 0;
}

/* Number of entries in a directory; their names, space-separated, in names. */
static int list_dir(const char *d, char *names, size_t cap)
{
	DIR *dp = opendir(d);
	struct dirent *e;
	int n = 0;

	names[0] = '\0';
	if (!dp)
		return -1;
	while ((e = readdir(dp))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		n++;
		if (strlen(names) + strlen(e->d_name) + 2 < cap) {
			strcat(names, e->d_name);
			strcat(names, " ");
		}
	}
	closedir(dp);
	return n;
}

static int bytes_equal(const unsigned char *got, size_t ngot, const unsigned char *want, size_t nwant)
{
	if (!got || ngot != nwant) {
		printf("#   size %zu, want %zu\n", ngot, nwant);
		return 0;
	}
	for (size_t i = 0; i < nwant; i++)
		if (got[i] != want[i]) {
			printf("#   first difference at byte %zu: 0x%02x, want 0x%02x\n", i, got[i], want[i]);
			return 0;
		}
	return 1;
}

/* The small dataset, tokens as int32:
 *   doc 0: one sequence      [5 6 7]
 *   doc 1: empty             (repeats index 1)
 *   doc 2: two sequences     [1 t1] [t2]
 *   doc 3: a zero-length sequence, then [300]
 * so S = 5, lengths 3 2 1 0 1, D = 5, document index 0 1 1 3 5. */
static int add_small(struct mt_idx_writer *w, int32_t t1, int32_t t2, struct mt_err *e)
{
	const int32_t tok0[] = { 5, 6, 7 }, len0[] = { 3 };
	const int32_t tok2[] = { 1, t1, t2 }, len2[] = { 2, 1 };
	const int32_t tok3[] = { 300 }, len3[] = { 0, 1 };

	return mt_idx_writer_add_document(w, tok0, len0, 1, e) || mt_idx_writer_add_document(w, NULL, NULL, 0, e) ||
	       mt_idx_writer_add_document(w, tok2, len2, 2, e) || mt_idx_writer_add_document(w, tok3, len3, 2, e);
}

#define U64(x) (x), 0, 0, 0, 0, 0, 0, 0
#define I32(x) (x), 0, 0, 0
#define MAGIC 'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0

static const unsigned char want_idx_u16[] = {
	MAGIC, U64(1), 8, U64(5), U64(5),
	I32(3), I32(2), I32(1), I32(0), I32(1),        /* lengths */
	U64(0), U64(6), U64(10), U64(12), U64(12),     /* pointers: 2 bytes a token */
	U64(0), U64(1), U64(1), U64(3), U64(5),        /* document index */
};
static const unsigned char want_bin_u16[] = {
	5, 0, 6, 0, 7, 0, 1, 0, 2, 0, 0xff, 0xff, 0x2c, 0x01,
};
static const unsigned char want_idx_i32[] = {
	MAGIC, U64(1), 4, U64(5), U64(5),
	I32(3), I32(2), I32(1), I32(0), I32(1),
	U64(0), U64(12), U64(20), U64(24), U64(24),
	U64(0), U64(1), U64(1), U64(3), U64(5),
};
static const unsigned char want_bin_i32[] = {
	5, 0, 0, 0, 6, 0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0,
	0xfe, 0xff, 0xff, 0xff,  /* -2 */
	0x70, 0x11, 0x01, 0x00,  /* 70000 */
	0x2c, 0x01, 0, 0,        /* 300 */
};

static void check_small_reader(const char *prefix, int dtype, int32_t t1, int32_t t2)
{
	struct mt_err e = { 0 };
	struct mt_idx *ix = NULL;
	int isz = mt_idx_dtype_size(dtype);
	const int32_t lens[] = { 3, 2, 1, 0, 1 }, docs[] = { 0, 1, 1, 3, 5 };
	int64_t toks[] = { 5, 6, 7, 1, t1, t2, 300 }, ptr = 0;
	int k = 0, good = 1;

	is_int(mt_idx_open(&ix, prefix, &e), 0, "%s: reopen", mt_idx_dtype_name(dtype));
	if (!ix) {
		printf("#   %s\n", e.msg);
		return;
	}
	is_int(ix->dtype, dtype, "dtype");
	is_int(ix->itemsize, isz, "itemsize");
	is_int(ix->nseq, 5, "S");
	is_int(ix->ndoc_idx, 5, "D");
	is_int(mt_idx_verify(ix, &e), 0, "verify passes");
	for (int i = 0; i < 5; i++) {
		good &= mt_idx_seq_len(ix, i) == lens[i];
		good &= mt_idx_seq_ptr(ix, i) == ptr;
		good &= mt_idx_doc(ix, i) == docs[i];
		good &= (const unsigned char *)mt_idx_seq_data(ix, i) == ix->bin_map + ptr;
		for (int j = 0; j < lens[i]; j++)
			good &= mt_idx_token(ix, i, j) == toks[k++];
		ptr += lens[i] * isz;
	}
	ok(good, "lengths, pointers, document index, data and tokens read back");
	mt_idx_close(ix);
}

static void write_small(const char *sub, int dtype, int32_t t1, int32_t t2, const unsigned char *want_idx,
			size_t nidx, const unsigned char *want_bin, size_t nbin)
{
	struct mt_err e = { 0 };
	struct mt_idx_writer *w = NULL;
	char names[1024], prefix[512], bin[600], idx[600], tmp[600];
	unsigned char *got;
	size_t n;
	const char *name = mt_idx_dtype_name(dtype);

	mkdir(path("%s", sub), 0777);
	snprintf(prefix, sizeof(prefix), "%s/x", path("%s", sub));
	snprintf(bin, sizeof(bin), "%s.bin", prefix);
	snprintf(idx, sizeof(idx), "%s.idx", prefix);
	is_int(mt_idx_writer_open(&w, prefix, dtype, &e), 0, "%s: open writer", name);
	if (!w)
		return;
	is_int(add_small(w, t1, t2, &e), 0, "%s: add 4 documents", name);
	is_int(mt_idx_writer_sequences(w), 5, "sequences counted");
	is_int(mt_idx_writer_documents(w), 4, "documents counted");
	is_int(mt_idx_writer_tokens(w), 7, "tokens counted");
	ok(!exists(bin) && !exists(idx), "nothing under the final names before commit");
	snprintf(tmp, sizeof(tmp), "%s.bin.tmp.%ld", prefix, (long)getpid());
	ok(exists(tmp), "tokens go to x.bin.tmp.<pid>");
	snprintf(tmp, sizeof(tmp), "%s.idx.lens.tmp.%ld", prefix, (long)getpid());
	ok(exists(tmp), "lengths spill to x.idx.lens.tmp.<pid>");
	snprintf(tmp, sizeof(tmp), "%s.idx.docs.tmp.%ld", prefix, (long)getpid());
	ok(exists(tmp), "document indices spill to x.idx.docs.tmp.<pid>");
	is_int(mt_idx_writer_commit(w, &e), 0, "%s: commit", name);
	is_int(list_dir(path("%s", sub), names, sizeof(names)), 2, "after commit only x.bin and x.idx remain");
	if (list_dir(path("%s", sub), names, sizeof(names)) != 2)
		printf("#   found: %s\n", names);
	got = read_file(idx, &n);
	ok(bytes_equal(got, n, want_idx, nidx), "%s: .idx bytes exactly as built by hand", name);
	free(got);
	got = read_file(bin, &n);
	ok(bytes_equal(got, n, want_bin, nbin), "%s: .bin bytes exactly as built by hand", name);
	free(got);
	check_small_reader(prefix, dtype, t1, t2);
}

static void test_idx_dtype(void)
{
	const int sizes[] = { 0, 1, 1, 2, 4, 8, 8, 4, 2, 0 };
	const char *names[] = { NULL, "uint8", "int8", "int16", "int32", "int64", "float64", "float32", "uint16", NULL };
	int good = 1;

	for (int c = 0; c <= 9; c++) {
		good &= mt_idx_dtype_size(c) == sizes[c];
		good &= names[c] ? mt_idx_dtype_name(c) && !strcmp(mt_idx_dtype_name(c), names[c])
				 : mt_idx_dtype_name(c) == NULL;
	}
	ok(good, "dtype codes 1..8 as Megatron, 0 and 9 unknown");
	is_int(mt_idx_dtype_size(-1), 0, "negative code unknown");
	is_int(mt_idx_dtype_for_vocab(50257), MT_IDX_U16, "gpt2 vocab: uint16");
	is_int(mt_idx_dtype_for_vocab(65499), MT_IDX_U16, "65499: uint16");
	is_int(mt_idx_dtype_for_vocab(65500), MT_IDX_I32, "65500: int32 (Megatron's threshold)");
	is_int(mt_idx_dtype_for_vocab(128256), MT_IDX_I32, "llama3 vocab: int32");
}

static void test_idx_exact_uint16(void)
{
	write_small("u16", MT_IDX_U16, 2, 65535, want_idx_u16, sizeof(want_idx_u16), want_bin_u16,
		    sizeof(want_bin_u16));
}

static void test_idx_exact_int32(void)
{
	struct mt_err e = { 0 };
	struct mt_idx *ix = NULL;

	write_small("i32", MT_IDX_I32, -2, 70000, want_idx_i32, sizeof(want_idx_i32), want_bin_i32,
		    sizeof(want_bin_i32));
	is_int(mt_idx_open(&ix, path("%s", "i32/x.bin"), &e), 0, "open accepts PREFIX.bin");
	if (ix)
		is_str(ix->prefix, path("%s", "i32/x"), "and strips it");
	mt_idx_close(ix);
	is_int(mt_idx_open(&ix, path("%s", "i32/x.idx"), &e), 0, "open accepts PREFIX.idx");
	mt_idx_close(ix);
}

static void test_idx_abort(void)
{
	struct mt_err e = { 0 };
	struct mt_idx_writer *w = NULL;
	char names[1024];
	const char *sub = path("%s", "abort");

	mkdir(sub, 0777);
	is_int(mt_idx_writer_open(&w, path("%s", "abort/x"), MT_IDX_U16, &e), 0, "open writer");
	if (!w)
		return;
	add_small(w, 1, 2, &e);
	ok(list_dir(sub, names, sizeof(names)) == 3, "three temporaries while writing");
	mt_idx_writer_abort(w);
	is_int(list_dir(sub, names, sizeof(names)), 0, "abort leaves nothing, final names included");
	mt_idx_writer_abort(NULL);
	mt_idx_close(NULL);
}

static void test_idx_errors(void)
{
	struct mt_err e = { 0 };
	struct mt_idx_writer *w = NULL;
	struct mt_idx *ix = NULL;
	const int32_t one[] = { 1 }, neg[] = { 2, -1 };
	const struct {
		int dtype;
		int32_t bad, good;
		const char *what;
	} cases[] = {
		{ MT_IDX_U16, 70000, 65535, "70000" },
		{ MT_IDX_U16, -1, 0, "-1" },
		{ MT_IDX_U8, 256, 255, "256" },
		{ MT_IDX_I8, -129, -128, "-129" },
		{ MT_IDX_I16, 32768, -32768, "32768" },
		{ MT_IDX_F32, 16777217, 16777216, "16777217" },
	};
	int32_t toks[3];

	mkdir(path("%s", "err"), 0777);
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		const char *name = mt_idx_dtype_name(cases[c].dtype);

		if (mt_idx_writer_open(&w, path("%s", "err/x"), cases[c].dtype, &e)) {
			ok(0, "open writer: %s", e.msg);
			continue;
		}
		toks[0] = 1;
		toks[1] = cases[c].bad;
		toks[2] = 2;
		mt_err_clear(&e);
		is_int(mt_idx_writer_add_document(w, toks, (const int32_t[]){ 3 }, 1, &e), -1,
		       "%s: %d is an error", name, (int)cases[c].bad);
		is_int(e.code, MT_EXIT_DATA, "data class");
		like(e.msg, cases[c].what, "naming the value");
		is_int(mt_idx_writer_tokens(w) + mt_idx_writer_documents(w), 0, "the document is not counted");
		toks[1] = cases[c].good;
		is_int(mt_idx_writer_add_document(w, toks, (const int32_t[]){ 3 }, 1, &e), 0,
		       "%s: %d fits, and the writer goes on", name, (int)cases[c].good);
		if (mt_idx_writer_commit(w, &e) == 0 && mt_idx_open(&ix, path("%s", "err/x"), &e) == 0) {
			ok(ix->nseq == 1 && ix->ndoc_idx == 2 && mt_idx_token(ix, 0, 1) == cases[c].good,
			   "only the good document is in the file");
			mt_idx_close(ix);
		} else {
			ok(0, "commit and reopen: %s", e.msg);
		}
	}

	mt_idx_writer_open(&w, path("%s", "err/y"), MT_IDX_U16, &e);
	toks[0] = 1;
	toks[1] = 2;
	mt_err_clear(&e);
	is_int(mt_idx_writer_add_document(w, toks, neg, 2, &e), -1, "negative length is an error");
	is_int(e.code, MT_EXIT_DATA, "data class");
	is_int(mt_idx_writer_add_document(w, toks, one, -1, &e), -1, "negative sequence count is an error");
	is_int(mt_idx_writer_add_document_raw(w, toks, 3, one, 1, &e), -1, "raw bytes not matching the lengths");
	is_int(e.code, MT_EXIT_DATA, "data class");
	is_int(mt_idx_writer_sequences(w), 0, "nothing counted");
	mt_idx_writer_abort(w);

	w = (struct mt_idx_writer *)&e; /* must be reset to NULL on failure */
	is_int(mt_idx_writer_open(&w, path("%s", "err/x"), 9, &e), -1, "unknown dtype code");
	ok(w == NULL, "no writer handed out");
	is_int(mt_idx_writer_open(&w, path("%s", "no/such/dir/x"), MT_IDX_U16, &e), -1, "missing output directory");
	is_int(e.code, MT_EXIT_IO, "i/o class");
	like(e.msg, path("%s", "no/such/dir"), "naming the directory");
	like(e.msg, "does not exist", "saying it does not exist");
	ok(!exists(path("%s", "no")), "and not creating it");
	is_int(mt_idx_writer_open(&w, path("%s", "u16/x.idx/y"), MT_IDX_U16, &e), -1, "output directory a file");
	is_int(e.code, MT_EXIT_IO, "i/o class");
}

/* Raw bytes and conversion give the same files; every dtype reads back. */
static void test_idx_raw_and_dtypes(void)
{
	struct mt_err e = { 0 };
	struct mt_idx_writer *w = NULL;
	struct mt_idx *ix = NULL;
	unsigned char *a, *b;
	size_t na, nb;
	const int32_t toks[] = { 0, -5, 100, 127 }, lens[] = { 1, 3 };
	const int dtypes[] = { MT_IDX_I8, MT_IDX_I16, MT_IDX_I32, MT_IDX_I64, MT_IDX_F32, MT_IDX_F64 };

	mkdir(path("%s", "raw"), 0777);
	mt_idx_writer_open(&w, path("%s", "raw/copy"), MT_IDX_U16, &e);
	if (w) {
		is_int(mt_idx_writer_add_document_raw(w, want_bin_u16, 6, (const int32_t[]){ 3 }, 1, &e), 0, "raw doc 0");
		is_int(mt_idx_writer_add_document_raw(w, NULL, 0, NULL, 0, &e), 0, "raw empty doc");
		is_int(mt_idx_writer_add_document_raw(w, want_bin_u16 + 6, 6, (const int32_t[]){ 2, 1 }, 2, &e), 0,
		       "raw doc 2");
		is_int(mt_idx_writer_add_document_raw(w, want_bin_u16 + 12, 2, (const int32_t[]){ 0, 1 }, 2, &e), 0,
		       "raw doc 3");
		is_int(mt_idx_writer_commit(w, &e), 0, "commit");
		a = read_file(path("%s", "raw/copy.idx"), &na);
		ok(bytes_equal(a, na, want_idx_u16, sizeof(want_idx_u16)), "raw writes give the same .idx");
		free(a);
		a = read_file(path("%s", "raw/copy.bin"), &na);
		ok(bytes_equal(a, na, want_bin_u16, sizeof(want_bin_u16)), "and the same .bin");
		free(a);
	}

	for (size_t k = 0; k < sizeof(dtypes) / sizeof(dtypes[0]); k++) {
		const char *name = mt_idx_dtype_name(dtypes[k]);
		int good = 1;

		if (mt_idx_writer_open(&w, path("%s", "raw/t"), dtypes[k], &e) ||
		    mt_idx_writer_add_document(w, toks, lens, 2, &e) || mt_idx_writer_commit(w, &e) ||
		    mt_idx_open(&ix, path("%s", "raw/t"), &e)) {
			ok(0, "%s: write and reopen: %s", name, e.msg);
			continue;
		}
		good &= ix->bin_size == 4 * (size_t)mt_idx_dtype_size(dtypes[k]);
		good &= mt_idx_token(ix, 0, 0) == 0;
		for (int j = 0; j < 3; j++)
			good &= mt_idx_token(ix, 1, j) == toks[1 + j];
		ok(good, "%s: tokens read back, signed values included", name);
		/* copying a dataset raw, sequence by sequence, gives identical files */
		if (mt_idx_writer_open(&w, path("%s", "raw/u"), dtypes[k], &e) == 0) {
			mt_idx_writer_add_document_raw(w, mt_idx_seq_data(ix, 0), (size_t)ix->itemsize, lens, 1, &e);
			mt_idx_writer_add_document_raw(w, mt_idx_seq_data(ix, 1), 3 * (size_t)ix->itemsize,
						       lens + 1, 1, &e);
			mt_idx_writer_commit(w, &e);
		}
		mt_idx_close(ix);
		a = read_file(path("%s", "raw/t.bin"), &na);
		b = read_file(path("%s", "raw/u.bin"), &nb);
		ok(a && b && bytes_equal(a, na, b, nb), "%s: raw copy of the .bin is identical", name);
		free(a);
		free(b);
	}
	if (mt_idx_writer_open(&w, path("%s", "raw/f"), MT_IDX_F64, &e) == 0) {
		const int32_t big[] = { INT32_MIN, INT32_MAX }, l2[] = { 2 };

		mt_idx_writer_add_document(w, big, l2, 1, &e);
		if (mt_idx_writer_commit(w, &e) == 0 && mt_idx_open(&ix, path("%s", "raw/f"), &e) == 0) {
			ok(mt_idx_token(ix, 0, 0) == INT32_MIN && mt_idx_token(ix, 0, 1) == INT32_MAX,
			   "float64 holds the int32 extremes");
			mt_idx_close(ix);
		}
	}
}

static void test_idx_empty(void)
{
	struct mt_err e = { 0 };
	struct mt_idx_writer *w = NULL;
	struct mt_idx *ix = NULL;
	unsigned char *got;
	size_t n;
	const unsigned char want0[] = { MAGIC, U64(1), 8, U64(0), U64(1), U64(0) };
	const unsigned char want1[] = { MAGIC, U64(1), 4, U64(1), U64(3), I32(0), U64(0), U64(0), U64(0), U64(1) };

	mkdir(path("%s", "empty"), 0777);
	mt_idx_writer_open(&w, path("%s", "empty/none"), MT_IDX_U16, &e);
	if (w)
		is_int(mt_idx_writer_commit(w, &e), 0, "a dataset of no documents commits");
	got = read_file(path("%s", "empty/none.idx"), &n);
	ok(bytes_equal(got, n, want0, sizeof(want0)), "its .idx: header and the document index [0]");
	free(got);
	ok(exists(path("%s", "empty/none.bin")), "and an empty .bin");
	is_int(mt_idx_open(&ix, path("%s", "empty/none"), &e), 0, "an empty .bin opens");
	if (ix) {
		ok(ix->nseq == 0 && ix->ndoc_idx == 1 && ix->bin_size == 0 && ix->bin_map, "S=0, D=1, bin mapped");
		is_int(mt_idx_verify(ix, &e), 0, "and verifies");
	}
	mt_idx_close(ix);

	/* an empty document, then a document of one zero-length sequence, then another empty one */
	mt_idx_writer_open(&w, path("%s", "empty/zero"), MT_IDX_I32, &e);
	if (w) {
		mt_idx_writer_add_document(w, NULL, NULL, 0, &e);
		mt_idx_writer_add_document(w, NULL, (const int32_t[]){ 0 }, 1, &e);
		is_int(mt_idx_writer_commit(w, &e), 0, "zero-length sequences only: commits");
	}
	got = read_file(path("%s", "empty/zero.idx"), &n);
	ok(bytes_equal(got, n, want1, sizeof(want1)), "its .idx bytes");
	free(got);
	is_int(mt_idx_open(&ix, path("%s", "empty/zero"), &e), 0, "S=1 with an empty .bin opens");
	if (ix)
		ok(ix->nseq == 1 && mt_idx_seq_len(ix, 0) == 0 && mt_idx_verify(ix, &e) == 0, "and reads back");
	mt_idx_close(ix);
}

/* Write the corrupt pair "bad/<name>" and check it is refused as expected. */
static void corrupt(const char *name, const unsigned char *idx, size_t nidx, const unsigned char *bin, size_t nbin,
		    const char *file, const char *what)
{
	struct mt_err e = { 0 };
	struct mt_idx *ix = (struct mt_idx *)&e;
	char prefix[512], named[600];

	snprintf(prefix, sizeof(prefix), "%s/bad/%s", dir, name);
	snprintf(named, sizeof(named), "'%s.%s'", prefix, file);
	write_file(path("bad/%s.idx", name), idx, nidx);
	write_file(path("bad/%s.bin", name), bin, nbin);
	is_int(mt_idx_open(&ix, prefix, &e), -1, "%s: refused", name);
	ok(ix == NULL, "no dataset handed out");
	is_int(e.code, MT_EXIT_DATA, "data class");
	like(e.msg, named, "the message names the .%s", file);
	like(e.msg, what, "and says '%s'", what);
}

static void set64(unsigned char *p, uint64_t v)
{
	for (int k = 0; k < 8; k++)
		p[k] = (unsigned char)(v >> (8 * k));
}

static void test_idx_corrupt(void)
{
	unsigned char idx[sizeof(want_idx_u16) + 16];
	const size_t n = sizeof(want_idx_u16), nb = sizeof(want_bin_u16);
	const size_t cuts[] = { 0, 5, 9, 17, 33, 34, 53, 100, 133 };
	struct mt_err e = { 0 };
	struct mt_idx *ix = NULL;
	char name[64];

	mkdir(path("%s", "bad"), 0777);
#define RESET() memcpy(idx, want_idx_u16, n)
	RESET();
	idx[0] = 'X';
	corrupt("magic", idx, n, want_bin_u16, nb, "idx", "bad magic");
	RESET();
	memcpy(idx, "TNTIDX\0\0", 8);
	corrupt("legacy", idx, n, want_bin_u16, nb, "idx", "bad magic");
	RESET();
	idx[9] = 2;
	corrupt("version", idx, n, want_bin_u16, nb, "idx", "version 2");
	RESET();
	idx[17] = 9;
	corrupt("dtype9", idx, n, want_bin_u16, nb, "idx", "dtype code 9");
	RESET();
	idx[17] = 0;
	corrupt("dtype0", idx, n, want_bin_u16, nb, "idx", "dtype code 0");
	for (size_t c = 0; c < sizeof(cuts) / sizeof(cuts[0]); c++) {
		RESET();
		snprintf(name, sizeof(name), "cut%zu", cuts[c]);
		corrupt(name, idx, cuts[c], want_bin_u16, nb, "idx", "truncated");
	}
	RESET();
	corrupt("bin_long", idx, n, (const unsigned char *)"0123456789abcdef", nb + 1, "bin", "15 bytes");
	corrupt("bin_short", idx, n, want_bin_u16, nb - 1, "bin", "says 14");
	corrupt("bin_empty", idx, n, want_bin_u16, 0, "bin", "0 bytes");
	set64(idx + n - 8, 4);
	corrupt("doc_last", idx, n, want_bin_u16, nb, "idx", "last document index is 4");
	RESET();
	set64(idx + 18, 1ULL << 62);
	corrupt("s_huge", idx, n, want_bin_u16, nb, "idx", "bad header");
	set64(idx + 18, UINT64_MAX);
	corrupt("s_max", idx, n, want_bin_u16, nb, "idx", "bad header");
	set64(idx + 18, 1ULL << 40);
	corrupt("s_big", idx, n, want_bin_u16, nb, "idx", "truncated");
	RESET();
	set64(idx + 26, 1ULL << 62);
	corrupt("d_huge", idx, n, want_bin_u16, nb, "idx", "bad header");
	set64(idx + 26, 0);
	corrupt("d_zero", idx, n, want_bin_u16, nb, "idx", "no document index");
	RESET();
	set64(idx + 34 + 20 + 32, UINT64_MAX); /* last pointer: -1 */
	corrupt("ptr_neg", idx, n, want_bin_u16, nb, "idx", "bad last sequence");
	set64(idx + 34 + 20 + 32, INT64_MAX);
	corrupt("ptr_huge", idx, n, want_bin_u16, nb, "idx", "bad last sequence");
	RESET();
	memset(idx + 34 + 16, 0xff, 4); /* last length: -1 */
	corrupt("len_neg", idx, n, want_bin_u16, nb, "idx", "bad last sequence");
	RESET();
	set64(idx + 18, 4); /* S one short: document index last no longer S, sizes shift */
	corrupt("s_short", idx, n, want_bin_u16, nb, "idx", "last document index");

	/* a multimodal modes array after the document index is allowed */
	RESET();
	memset(idx + n, 0, 5);
	write_file(path("%s", "bad/modes.idx"), idx, n + 5);
	write_file(path("%s", "bad/modes.bin"), want_bin_u16, nb);
	is_int(mt_idx_open(&ix, path("%s", "bad/modes"), &e), 0, "trailing modes array accepted");
	mt_idx_close(ix);

	/* what only the full pass sees: open refuses them too, naming the entry */
	RESET();
	set64(idx + 34 + 20 + 8, 4);
	corrupt("midptr", idx, n, want_bin_u16, nb, "idx", "sequence 1 starts at byte 4, expected 6");
	RESET();
	set64(idx + 34 + 60 + 16, 0);
	corrupt("docdec", idx, n, want_bin_u16, nb, "idx", "document index 2 is 0");
	RESET();
	set64(idx + 34 + 60 + 8, 9); /* a document index past S, then back */
	corrupt("docbig", idx, n, want_bin_u16, nb, "idx", "document index 2 is 1, below the previous 9");
	RESET();
	set64(idx + 34 + 60, 1);
	corrupt("doc0", idx, n, want_bin_u16, nb, "idx", "document index 0 is 1");
	RESET();
	idx[34] = 0xff, idx[35] = 0xff, idx[36] = 0xff, idx[37] = 0x7f; /* length 2^31-1 */
	corrupt("len_max", idx, n, want_bin_u16, nb, "idx", "sequence 1 starts at byte 6, expected 4294967294");
	RESET();
	idx[34] = 0xff, idx[35] = 0xff, idx[36] = 0xff, idx[37] = 0xff; /* length -1 */
	corrupt("len_m1", idx, n, want_bin_u16, nb, "idx", "sequence 0 has negative length -1");
	RESET();
	set64(idx + 34 + 20 + 8, (uint64_t)1 << 62); /* a pointer far past the end */
	corrupt("ptr_far", idx, n, want_bin_u16, nb, "idx", "sequence 1 starts at byte 4611686018427387904");
	RESET();
	set64(idx + 34 + 20 + 8, UINT64_MAX); /* a pointer of -1 */
	corrupt("ptr_m1", idx, n, want_bin_u16, nb, "idx", "sequence 1 starts at byte -1");
	{ /* a verified dataset still passes mt_idx_verify on its own */
		write_file(path("%s", "bad/good.idx"), want_idx_u16, n);
		write_file(path("%s", "bad/good.bin"), want_bin_u16, nb);
		is_int(mt_idx_open(&ix, path("%s", "bad/good"), &e), 0, "the unchanged dataset opens");
		if (ix)
			is_int(mt_idx_verify(ix, &e), 0, "and verifies");
		mt_idx_close(ix);
	}
#undef RESET

	is_int(mt_idx_open(&ix, path("%s", "bad/missing"), &e), -1, "missing files");
	is_int(e.code, MT_EXIT_IO, "i/o class");
	like(e.msg, path("%s", "bad/missing.idx"), "naming the .idx");
	write_file(path("%s", "bad/nobin.idx"), want_idx_u16, n);
	is_int(mt_idx_open(&ix, path("%s", "bad/nobin"), &e), -1, "missing .bin");
	is_int(e.code, MT_EXIT_IO, "i/o class");
	like(e.msg, path("%s", "bad/nobin.bin"), "naming the .bin");
	mkdir(path("%s", "bad/isdir.idx"), 0777);
	is_int(mt_idx_open(&ix, path("%s", "bad/isdir"), &e), -1, "an .idx that is a directory");
	is_int(e.code, MT_EXIT_IO, "i/o class");
	/* a FIFO is refused at once: opened without waiting for a writer */
	if (mkfifo(path("%s", "bad/fifo.idx"), 0666) == 0) {
		is_int(mt_idx_open(&ix, path("%s", "bad/fifo"), &e), -1, "an .idx that is a FIFO");
		like(e.msg, "not a regular file", "said so");
		write_file(path("%s", "bad/fifob.idx"), want_idx_u16, n);
		mkfifo(path("%s", "bad/fifob.bin"), 0666);
		is_int(mt_idx_open(&ix, path("%s", "bad/fifob"), &e), -1, "a .bin that is a FIFO");
		like(e.msg, "fifob.bin': not a regular file", "naming it");
	} else {
		tap_skip("no FIFOs here", "an .idx that is a FIFO");
	}
}

/* The large dataset: document i has i % 4 sequences, sequence j of it
 * (i * 7 + j * 3) % 23 tokens (zero included), token k (i * 31 + j * 17 + k) % 60000. */
#define LARGE_DOCS 200000
static int large_len(int64_t i, int j) { return (int)((i * 7 + j * 3) % 23); }
static int32_t large_tok(int64_t i, int j, int k) { return (int32_t)((i * 31 + j * 17 + k) % 60000); }

static void test_idx_large(void)
{
	struct mt_err e = { 0 };
	struct mt_idx_writer *w = NULL;
	struct mt_idx *ix = NULL;
	int32_t toks[4 * 23], lens[4];
	int64_t nseq = 0, ntok = 0, s = 0;
	int good = 1, wrote = 1;
	char names[1024];

	mkdir(path("%s", "large"), 0777);
	if (mt_idx_writer_open(&w, path("%s", "large/x"), MT_IDX_U16, &e)) {
		ok(0, "open writer: %s", e.msg);
		return;
	}
	for (int64_t i = 0; i < LARGE_DOCS && wrote; i++) {
		int nt = 0, ns = (int)(i % 4);

		for (int j = 0; j < ns; j++) {
			lens[j] = large_len(i, j);
			for (int k = 0; k < lens[j]; k++)
				toks[nt++] = large_tok(i, j, k);
		}
		wrote = mt_idx_writer_add_document(w, toks, lens, ns, &e) == 0;
		nseq += ns;
		ntok += nt;
	}
	ok(wrote, "%d documents added", LARGE_DOCS);
	is_int(mt_idx_writer_sequences(w), nseq, "sequences counted");
	is_int(mt_idx_writer_documents(w), LARGE_DOCS, "documents counted");
	is_int(mt_idx_writer_tokens(w), ntok, "tokens counted");
	ok(nseq * 4 > (1 << 20) && LARGE_DOCS * 8 > (1 << 20), "spills larger than their 1 MiB buffers");
	is_int(mt_idx_writer_commit(w, &e), 0, "commit");
	is_int(list_dir(path("%s", "large"), names, sizeof(names)), 2, "no temporaries left");
	if (mt_idx_open(&ix, path("%s", "large/x"), &e)) {
		ok(0, "reopen: %s", e.msg);
		return;
	}
	is_int(ix->nseq, nseq, "S");
	is_int(ix->ndoc_idx, LARGE_DOCS + 1, "D");
	is_int(ix->bin_size, 2 * ntok, ".bin size");
	is_int(mt_idx_verify(ix, &e), 0, "verify: pointers contiguous, document index monotonic");
	good &= mt_idx_doc(ix, 0) == 0;
	for (int64_t i = 0; i < LARGE_DOCS && good; i++) {
		int ns = (int)(i % 4);

		for (int j = 0; j < ns; j++, s++) {
			good &= mt_idx_seq_len(ix, s) == large_len(i, j);
			if (i % 97 == 0 || i > LARGE_DOCS - 100)
				for (int k = 0; k < large_len(i, j); k++)
					good &= mt_idx_token(ix, s, k) == large_tok(i, j, k);
		}
		good &= mt_idx_doc(ix, i + 1) == s;
		if (!good)
			printf("#   first mismatch in document %lld\n", (long long)i);
	}
	ok(good, "every length and document index, tokens of every 97th document");
	mt_idx_close(ix);
}

/* Megatron's add_index: appending datasets equals writing their documents. */
static void test_idx_add_index(void)
{
	struct mt_err e = { 0 };
	struct mt_idx_writer *w = NULL;
	struct mt_idx *a = NULL, *b = NULL;
	unsigned char *x, *y;
	size_t nx, ny;

	mkdir(path("%s", "merge"), 0777);
	if (mt_idx_open(&a, path("%s", "u16/x"), &e) || mt_idx_open(&b, path("%s", "empty/zero"), &e)) {
		ok(0, "open inputs: %s", e.msg);
		goto out;
	}
	mt_idx_writer_open(&w, path("%s", "merge/m"), MT_IDX_U16, &e);
	if (!w)
		goto out;
	is_int(mt_idx_writer_add_index(w, a, &e), 0, "add_index");
	is_int(mt_idx_writer_add_index(w, b, &e), -1, "a different dtype is refused");
	is_int(e.code, MT_EXIT_DATA, "data class");
	like(e.msg, "int32", "naming the dtypes");
	is_int(mt_idx_writer_add_document(w, NULL, NULL, 0, &e), 0, "an empty document between");
	is_int(mt_idx_writer_add_index(w, a, &e), 0, "add_index again");
	is_int(mt_idx_writer_sequences(w), 10, "sequences");
	is_int(mt_idx_writer_documents(w), 9, "documents");
	is_int(mt_idx_writer_tokens(w), 14, "tokens");
	is_int(mt_idx_writer_commit(w, &e), 0, "commit");
	mt_idx_writer_open(&w, path("%s", "merge/d"), MT_IDX_U16, &e);
	if (w) {
		add_small(w, 2, 65535, &e);
		mt_idx_writer_add_document(w, NULL, NULL, 0, &e);
		add_small(w, 2, 65535, &e);
		mt_idx_writer_commit(w, &e);
	}
	x = read_file(path("%s", "merge/m.idx"), &nx);
	y = read_file(path("%s", "merge/d.idx"), &ny);
	ok(x && y && bytes_equal(x, nx, y, ny), ".idx identical to writing the documents");
	free(x);
	free(y);
	x = read_file(path("%s", "merge/m.bin"), &nx);
	y = read_file(path("%s", "merge/d.bin"), &ny);
	ok(x && y && bytes_equal(x, nx, y, ny), ".bin identical");
	free(x);
	free(y);
out:
	mt_idx_close(a);
	mt_idx_close(b);
}

/* Read the files as Megatron's _IndexReader does (numpy views at the same
 * offsets) and compare counts and checksums. */
static const char numpy_reader[] =
	"import struct, sys\n"
	"import numpy as np\n"
	"p = sys.argv[1]\n"
	"with open(p + '.idx', 'rb') as f:\n"
	"    assert f.read(9) == b'MMIDIDX\\x00\\x00'\n"
	"    assert struct.unpack('<Q', f.read(8))[0] == 1\n"
	"    code = struct.unpack('<B', f.read(1))[0]\n"
	"    S = struct.unpack('<Q', f.read(8))[0]\n"
	"    D = struct.unpack('<Q', f.read(8))[0]\n"
	"    off = f.tell()\n"
	"dt = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32, 8: np.uint16}[code]\n"
	"buf = np.memmap(p + '.idx', mode='r', order='C')\n"
	"lens = np.frombuffer(buf, dtype=np.int32, count=S, offset=off)\n"
	"ptrs = np.frombuffer(buf, dtype=np.int64, count=S, offset=off + lens.nbytes)\n"
	"docs = np.frombuffer(buf, dtype=np.int64, count=D, offset=off + lens.nbytes + ptrs.nbytes)\n"
	"assert docs[-1] == S\n"
	"bin = np.memmap(p + '.bin', mode='r', order='C')\n"
	"i = S - 1\n"
	"last = np.frombuffer(bin, dtype=dt, count=int(lens[i]), offset=int(ptrs[i])).astype(np.int64)\n"
	"allt = np.frombuffer(bin, dtype=dt).astype(np.int64)\n"
	"print(S, D, int(lens.sum()), int(docs.sum()), int(allt.sum()), int(last.sum()))\n";

static void numpy_check(const char *prefix, const struct mt_idx *ix)
{
	char cmd[1400], out[256];
	long long want[6] = { ix->nseq, ix->ndoc_idx, 0, 0, 0, 0 }, got[6] = { 0 };
	FILE *f;

	for (int64_t i = 0; i < ix->nseq; i++) {
		want[2] += mt_idx_seq_len(ix, i);
		for (int64_t j = 0; j < mt_idx_seq_len(ix, i); j++) {
			want[4] += mt_idx_token(ix, i, j);
			if (i == ix->nseq - 1)
				want[5] += mt_idx_token(ix, i, j);
		}
	}
	for (int64_t k = 0; k < ix->ndoc_idx; k++)
		want[3] += mt_idx_doc(ix, k);
	snprintf(cmd, sizeof(cmd), "python3 %s/reader.py %s > %s/np.out", dir, prefix, dir);
	out[0] = '\0';
	if (system(cmd) == 0 && (f = fopen(path("%s", "np.out"), "r"))) {
		if (!fgets(out, sizeof(out), f))
			out[0] = '\0';
		fclose(f);
	}
	ok(sscanf(out, "%lld %lld %lld %lld %lld %lld", &got[0], &got[1], &got[2], &got[3], &got[4], &got[5]) == 6 &&
		   !memcmp(got, want, sizeof(got)),
	   "numpy reads '%s' alike: S, D, sum of lengths, of indices, of tokens, of the last sequence", prefix + strlen(dir) + 1);
	if (memcmp(got, want, sizeof(got)))
		printf("#   numpy: %s#   want:  %lld %lld %lld %lld %lld %lld\n", out, want[0], want[1], want[2],
		       want[3], want[4], want[5]);
}

/* A batch write gives the same files as the same documents one at a time. */
static void test_idx_add_batch(void)
{
	/* documents: [1 2 | 3], [], [4 5 6] */
	static const int32_t toks[] = { 1, 2, 3, 4, 5, 6 };
	static const uint16_t raw[] = { 1, 2, 3, 4, 5, 6 };
	static const int32_t lens[] = { 2, 1, 3 }, nseq[] = { 2, 0, 1 }, badn[] = { 2, 0, 2 };
	struct mt_err e = { 0 };
	struct mt_idx_writer *w = NULL;
	unsigned char *x, *y;
	size_t nx, ny;

	mkdir(path("%s", "batch"), 0777);
	mt_idx_writer_open(&w, path("%s", "batch/one"), MT_IDX_U16, &e);
	if (!w)
		return;
	mt_idx_writer_add_document(w, toks, lens, 2, &e);
	mt_idx_writer_add_document(w, NULL, NULL, 0, &e);
	mt_idx_writer_add_document(w, toks + 3, lens + 2, 1, &e);
	mt_idx_writer_commit(w, &e);
	mt_idx_writer_open(&w, path("%s", "batch/many"), MT_IDX_U16, &e);
	if (!w)
		return;
	is_int(mt_idx_writer_add_batch(w, raw, sizeof(raw), lens, 3, badn, 3, &e), -1,
	       "documents that claim more sequences than given are refused");
	is_int(mt_idx_writer_add_batch(w, raw, sizeof(raw) - 2, lens, 3, nseq, 3, &e), -1,
	       "bytes that do not match the lengths are refused");
	is_int(mt_idx_writer_add_batch(w, raw, sizeof(raw), lens, 3, nseq, 3, &e), 0, "add_batch");
	is_int(mt_idx_writer_documents(w), 3, "documents counted");
	is_int(mt_idx_writer_commit(w, &e), 0, "commit");
	x = read_file(path("%s", "batch/one.idx"), &nx);
	y = read_file(path("%s", "batch/many.idx"), &ny);
	ok(x && y && bytes_equal(x, nx, y, ny), "batch .idx identical to one document at a time");
	free(x);
	free(y);
	x = read_file(path("%s", "batch/one.bin"), &nx);
	y = read_file(path("%s", "batch/many.bin"), &ny);
	ok(x && y && bytes_equal(x, nx, y, ny), "batch .bin identical too");
	free(x);
	free(y);
}

static void test_idx_numpy(void)
{
	const char *prefixes[] = { "u16/x", "i32/x", "raw/f", "large/x", "merge/m" };
	struct mt_err e = { 0 };
	struct mt_idx *ix = NULL;

	if (system("python3 -c 'import numpy' >/dev/null 2>&1") != 0) {
		tap_skip("python3 with numpy not found", "numpy cross-check");
		return;
	}
	write_file(path("%s", "reader.py"), numpy_reader, strlen(numpy_reader));
	for (size_t k = 0; k < sizeof(prefixes) / sizeof(prefixes[0]); k++) {
		if (mt_idx_open(&ix, path("%s", prefixes[k]), &e)) {
			ok(0, "open %s: %s", prefixes[k], e.msg);
			continue;
		}
		numpy_check(path("%s", prefixes[k]), ix);
		mt_idx_close(ix);
	}
}

int main(void)
{
	char cmd[300];

	snprintf(dir, sizeof(dir), "%s/mt-test-idx-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir))
		return 1;
	test_idx_dtype();
	test_idx_exact_uint16();
	test_idx_exact_int32();
	test_idx_abort();
	test_idx_errors();
	test_idx_raw_and_dtypes();
	test_idx_empty();
	test_idx_corrupt();
	test_idx_large();
	test_idx_add_index();
	test_idx_add_batch();
	test_idx_numpy();
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		return 1;
	return tap_done();
}
