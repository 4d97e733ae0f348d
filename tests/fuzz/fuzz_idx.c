/* fuzz_idx: libFuzzer target for the indexed-dataset reader (lib/data/idx.c), the
 * full check (lib/data/idxcheck.c), the statistics (lib/data/idxstat.c) and the merge
 * path of the writer (mt_idx_writer_add_index). Built and run by
 * tests/fuzz/run.sh with clang -fsanitize=fuzzer,address,undefined.
 *
 * Input: byte 0 flags, bytes 1-4 the .idx length n (u32 LE, clamped), then n
 * bytes of .idx, then the .bin. With flag bit 0 the .bin is instead made the
 * size the index's last sequence asks for (up to 1 MiB, filled from the rest
 * of the input), so that most inputs get past the size check at open; bits 1-3
 * pick the vocabulary size for the token check.
 *
 * Besides "no crash, no sanitizer report" it checks, and aborts when they fail:
 *   - mt_idx_check_run finds no problem exactly when mt_idx_open and
 *     mt_idx_verify accept the dataset (trailing .idx bytes that are not a
 *     modes array aside, which only the check refuses);
 *   - with a vocabulary it reports one more problem exactly when some token is
 *     outside [0, vocab) (integer dtypes);
 *   - merging an accepted dataset alone gives back the same .idx and .bin
 *     (when it has no trailing bytes), as Megatron's add_index would;
 *   - the statistics add up: documents, tokens, min <= p50 <= p90 <= p99 <= max. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/idx.h"
#include "data/idxcheck.h"
#include "data/idxstat.h"

static char dir[256], prefix[300], idx_path[320], bin_path[320], out_prefix[300];
static unsigned char *bin_buf;

#define MAX_BIN (1 << 20)

static void die(const char *what)
{
	fprintf(stderr, "fuzz_idx: oracle failed: %s\n", what);
	abort();
}

static void write_file(const char *p, const void *buf, size_t n)
{
	FILE *f = fopen(p, "wb");

	if (!f || (n && fwrite(buf, 1, n, f) != n) || fclose(f) != 0)
		die("cannot write the input files");
}

static unsigned char *read_all(const char *p, size_t *n)
{
	FILE *f = fopen(p, "rb");
	unsigned char *b;
	long sz;

	*n = 0;
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	sz = ftell(f);
	rewind(f);
	b = malloc((size_t)sz + 1);
	if (b)
		*n = fread(b, 1, (size_t)sz, f);
	fclose(f);
	return b;
}

static uint64_t le64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int k = 7; k >= 0; k--)
		v = v << 8 | p[k];
	return v;
}

/* The .bin size the last sequence of the index asks for, or -1. */
static int64_t wanted_bin(const unsigned char *idx, size_t n)
{
	uint64_t s, ptr;
	int32_t len;
	int itemsize;

	if (n < MT_IDX_HEADER_SIZE || !(itemsize = mt_idx_dtype_size(idx[17])))
		return -1;
	s = le64(idx + 18);
	if (s == 0)
		return 0;
	if (s > (n - MT_IDX_HEADER_SIZE) / 12)
		return -1;
	memcpy(&len, idx + MT_IDX_HEADER_SIZE + 4 * (s - 1), 4);
	ptr = le64(idx + MT_IDX_HEADER_SIZE + 4 * s + 8 * (s - 1));
	if (len < 0 || ptr > MAX_BIN || (uint64_t)len * (uint64_t)itemsize > MAX_BIN - ptr)
		return -1;
	return (int64_t)(ptr + (uint64_t)len * (uint64_t)itemsize);
}

static void count_problem(void *ctx, const char *line)
{
	(void)line;
	(*(int *)ctx)++;
}

/* Leave nothing in /dev/shm when libFuzzer exits normally. */
static void cleanup(void)
{
	char p[340];

	unlink(idx_path);
	unlink(bin_path);
	snprintf(p, sizeof(p), "%s.idx", out_prefix);
	unlink(p);
	snprintf(p, sizeof(p), "%s.bin", out_prefix);
	unlink(p);
	rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");

	(void)argc;
	(void)argv;
	snprintf(dir, sizeof(dir), "%s/mt-fuzz-idx-XXXXXX", base);
	if (!mkdtemp(dir))
		die("mkdtemp");
	snprintf(prefix, sizeof(prefix), "%s/d", dir);
	snprintf(idx_path, sizeof(idx_path), "%s.idx", prefix);
	snprintf(bin_path, sizeof(bin_path), "%s.bin", prefix);
	snprintf(out_prefix, sizeof(out_prefix), "%s/m", dir);
	bin_buf = malloc(MAX_BIN);
	atexit(cleanup);
	return 0;
}

/* Merge ix alone into out_prefix; the output must equal the input files. */
static void check_merge(const struct mt_idx *ix)
{
	struct mt_idx_writer *w;
	struct mt_err e = { 0 };
	char p[320];
	unsigned char *a, *b;
	size_t na, nb;

	if (mt_idx_writer_open(&w, out_prefix, ix->dtype, &e))
		die("writer open");
	if (mt_idx_writer_add_index(w, ix, &e)) {
		mt_idx_writer_abort(w);
		die("add_index of a verified dataset");
	}
	if (mt_idx_writer_documents(w) != ix->ndoc_idx - 1 || mt_idx_writer_sequences(w) != ix->nseq)
		die("writer counts");
	if (mt_idx_writer_commit(w, &e))
		die("commit");
	snprintf(p, sizeof(p), "%s.idx", out_prefix);
	a = read_all(p, &na);
	if (!a || na != ix->idx_size || memcmp(a, ix->idx_map, na) != 0)
		die("merged .idx differs from its only input");
	snprintf(p, sizeof(p), "%s.bin", out_prefix);
	b = read_all(p, &nb);
	if (!b || nb != ix->bin_size || (nb && memcmp(b, ix->bin_map, nb) != 0))
		die("merged .bin differs from its only input");
	free(a);
	free(b);
}

static void check_stats(const struct mt_idx *ix)
{
	struct mt_idx_lenstat s;
	struct mt_err e = { 0 };
	int64_t tokens = 0, p[3];

	mt_idx_lenstat_init(&s);
	if (mt_idx_lenstat_add_dataset(&s, ix, &e))
		die("lenstat of a verified dataset");
	for (int64_t i = 0; i < ix->nseq; i++)
		tokens += mt_idx_seq_len(ix, i);
	if (s.n != ix->ndoc_idx - 1 || s.sum != tokens)
		die("lenstat counts");
	p[0] = mt_idx_lenstat_percentile(&s, 50);
	p[1] = mt_idx_lenstat_percentile(&s, 90);
	p[2] = mt_idx_lenstat_percentile(&s, 99);
	if (s.n && !(s.min <= p[0] && p[0] <= p[1] && p[1] <= p[2] && p[2] <= s.max))
		die("percentiles out of order");
	mt_idx_lenstat_free(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int64_t vocabs[8] = { 0, 1, 2, 255, 256, 1000, 65536, (int64_t)1 << 31 };
	struct mt_idx *ix = NULL;
	struct mt_err e = { 0 };
	struct mt_idx_check c = { 0 };
	size_t nidx, nbin;
	const uint8_t *bin;
	int flags, open_ok, verify_ok = 0, trailing_bad = 0, problems = 0, vproblems = 0, bad_tokens = 0;
	int64_t vocab, want;
	volatile uint64_t sink = 0; /* keeps the reads; unsigned, so it may wrap */

	if (size < 5)
		return 0;
	flags = data[0];
	nidx = (size_t)data[1] | (size_t)data[2] << 8 | (size_t)data[3] << 16 | (size_t)data[4] << 24;
	if (nidx > size - 5)
		nidx = size - 5;
	bin = data + 5 + nidx;
	nbin = size - 5 - nidx;
	vocab = vocabs[(flags >> 1) & 7];
	write_file(idx_path, data + 5, nidx);
	if ((flags & 1) && (want = wanted_bin(data + 5, nidx)) >= 0) {
		for (int64_t i = 0; i < want; i++)
			bin_buf[i] = nbin ? bin[(size_t)i % nbin] : 0;
		write_file(bin_path, bin_buf, (size_t)want);
	} else {
		write_file(bin_path, bin, nbin);
	}

	open_ok = mt_idx_open(&ix, prefix, &e) == 0;
	if (open_ok) {
		size_t need = MT_IDX_HEADER_SIZE + 12 * (size_t)ix->nseq + 8 * (size_t)ix->ndoc_idx;
		size_t extra = ix->idx_size - need;

		trailing_bad = extra != 0 && extra != (size_t)ix->nseq;
		/* every entry through the accessors: in bounds whatever the values */
		for (int64_t i = 0; i < ix->nseq; i++)
			sink += (uint64_t)mt_idx_seq_len(ix, i) + (uint64_t)mt_idx_seq_ptr(ix, i);
		for (int64_t k = 0; k < ix->ndoc_idx; k++)
			sink += (uint64_t)mt_idx_doc(ix, k);
		verify_ok = mt_idx_verify(ix, &e) == 0;
	} else if (e.code != MT_EXIT_DATA) {
		die("open failed with an error class other than bad data");
	}
	if (verify_ok) {
		/* documents, sequences, tokens, as mt-index cat walks them */
		for (int64_t d = 0; d + 1 < ix->ndoc_idx; d++)
			for (int64_t s = mt_idx_doc(ix, d); s < mt_idx_doc(ix, d + 1); s++) {
				const unsigned char *p = mt_idx_seq_data(ix, s);

				for (int32_t j = 0; j < mt_idx_seq_len(ix, s); j++) {
					int64_t t = mt_idx_token(ix, s, j);

					sink += (uint64_t)t + p[(size_t)j * (size_t)ix->itemsize];
					if (vocab > 0 && (t < 0 || t >= vocab))
						bad_tokens++;
				}
			}
		check_stats(ix);
		if (!trailing_bad && ix->idx_size == MT_IDX_HEADER_SIZE + 12 * (size_t)ix->nseq + 8 * (size_t)ix->ndoc_idx)
			check_merge(ix);
	}

	c.problem = count_problem;
	c.ctx = &problems;
	if (mt_idx_check_run(&c, prefix, &e))
		die("check could not read the files");
	if (c.problems != problems)
		die("problem count and callback disagree");
	if ((problems == 0) != (open_ok && verify_ok && !trailing_bad))
		die("the check and the reader disagree");
	if (vocab > 0) {
		struct mt_idx_check cv = { .vocab_size = vocab, .problem = count_problem, .ctx = &vproblems };

		if (mt_idx_check_run(&cv, prefix, &e))
			die("check could not read the files");
		if (verify_ok && ix->dtype != MT_IDX_F32 && ix->dtype != MT_IDX_F64 &&
		    (vproblems == problems + 1) != (bad_tokens > 0))
			die("the token check and the tokens disagree");
		if (vproblems < problems || vproblems > problems + 1)
			die("the token check adds more than one problem");
	}
	mt_idx_close(ix);
	return 0;
}
