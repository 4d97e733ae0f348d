/* Unit tests for lib/data/idxstat.c and the 64-bit arithmetic of lib/data/idx.c that the
 * Bats suite cannot reach with real files:
 *   - nearest-rank percentiles on hand-computed sets, long documents (the
 *     sorted list), accumulators added together, counts beyond 2^32;
 *   - datasets of more than 2^31 sequences and more than 2^31 documents, as
 *     sparse .idx files of 16-26 GB that take a few KiB of disk: opened with
 *     mt_idx_open_header and read through the accessors at offsets beyond 2^32
 *     (mt_idx_open's full pass would fault in every page, so it is not run on
 *     them; the counts are the header's);
 *   - the size a garbage header asks for, computed without wrapping.
 * Writing 2^31 real documents is out of reach of a test; these check that no
 * count or offset goes through 32 bits on the way. */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/idx.h"
#include "data/idxcheck.h"
#include "data/idxstat.h"
#include "tap.h"

static char dir[256];

static void put64(unsigned char *p, uint64_t v)
{
	for (int k = 0; k < 8; k++)
		p[k] = (unsigned char)(v >> (8 * k));
}

static void test_idxstat_percentiles(void)
{
	struct mt_idx_lenstat s;
	struct mt_err e = { 0 };

	mt_idx_lenstat_init(&s);
	is_int(mt_idx_lenstat_percentile(&s, 50), -1, "no documents: no percentile");
	ok(mt_idx_lenstat_mean(&s) == 0.0, "no documents: mean 0");
	for (int len = 10; len >= 1; len--)
		mt_idx_lenstat_add(&s, len, 1, &e);
	/* 1..10: rank ceil(p * 10 / 100) */
	is_int(mt_idx_lenstat_percentile(&s, 0), 1, "p0 is the minimum");
	is_int(mt_idx_lenstat_percentile(&s, 50), 5, "p50 of 1..10 is 5 (nearest rank, the lower median)");
	is_int(mt_idx_lenstat_percentile(&s, 90), 9, "p90 of 1..10");
	is_int(mt_idx_lenstat_percentile(&s, 91), 10, "p91 of 1..10");
	is_int(mt_idx_lenstat_percentile(&s, 99), 10, "p99 of 1..10");
	is_int(mt_idx_lenstat_percentile(&s, 100), 10, "p100 is the maximum");
	is_int(s.min, 1, "min");
	is_int(s.max, 10, "max");
	ok(mt_idx_lenstat_mean(&s) == 5.5, "mean");
	is_int(mt_idx_lenstat_add(&s, -1, 1, &e), -1, "a negative length is refused");
	mt_idx_lenstat_free(&s);
}

/* Lengths past the direct table go to the sorted list; both halves count. */
static void test_idxstat_long_documents(void)
{
	struct mt_idx_lenstat a, b;
	struct mt_err e = { 0 };
	const int64_t big = MT_IDX_LENSTAT_DIRECT;

	mt_idx_lenstat_init(&a);
	mt_idx_lenstat_init(&b);
	mt_idx_lenstat_add(&a, 0, 3, &e);
	mt_idx_lenstat_add(&a, big + 5, 1, &e);
	mt_idx_lenstat_add(&b, big + 1, 1, &e);
	mt_idx_lenstat_add(&b, big * 4, 1, &e);
	mt_idx_lenstat_add(&b, 7, 4, &e);
	is_int(mt_idx_lenstat_merge(&a, &b, &e), 0, "merge");
	/* sorted: 0 0 0 7 7 7 7 big+1 big+5 4big (n = 10) */
	is_int(a.n, 10, "documents");
	is_int(a.empty, 3, "empty documents");
	is_int(mt_idx_lenstat_percentile(&a, 30), 0, "p30");
	is_int(mt_idx_lenstat_percentile(&a, 31), 7, "p31");
	is_int(mt_idx_lenstat_percentile(&a, 80), big + 1, "p80 from the list");
	is_int(mt_idx_lenstat_percentile(&a, 90), big + 5, "p90 from the list");
	is_int(mt_idx_lenstat_percentile(&a, 99), big * 4, "p99 from the list");
	is_int(a.max, big * 4, "max");
	is_int(a.sum, 28 + (big + 1) + (big + 5) + big * 4, "tokens");
	mt_idx_lenstat_free(&a);
	mt_idx_lenstat_free(&b);
}

/* Document counts beyond 2^32: ranks and sums in 64 (and 128) bits. */
static void test_idxstat_counts_past_2_32(void)
{
	struct mt_idx_lenstat s;
	struct mt_err e = { 0 };

	mt_idx_lenstat_init(&s);
	mt_idx_lenstat_add(&s, 7, 3000000000LL, &e);
	mt_idx_lenstat_add(&s, 9, 1000000000LL, &e);
	mt_idx_lenstat_add(&s, 100, 1, &e);
	is_int(s.n, 4000000001LL, "4e9 + 1 documents");
	is_int(s.sum, 7 * 3000000000LL + 9 * 1000000000LL + 100, "their tokens");
	/* p75: rank ceil(0.75 * 4000000001) = 3000000001, the first 9 */
	is_int(mt_idx_lenstat_percentile(&s, 75), 9, "p75 at rank 3000000001");
	is_int(mt_idx_lenstat_percentile(&s, 74), 7, "p74");
	is_int(mt_idx_lenstat_percentile(&s, 100), 100, "p100");
	mt_idx_lenstat_free(&s);
}

/* A sparse file of `size` bytes with the given bytes written at offsets; 0 if
 * the filesystem made it sparse. */
static int sparse_file(const char *path, uint64_t size, const unsigned char *const *parts, const uint64_t *at,
		       const size_t *len, int nparts)
{
	struct stat st;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644), rc = -1;

	if (fd < 0)
		return -1;
	if (ftruncate(fd, (off_t)size) != 0)
		goto out;
	for (int i = 0; i < nparts; i++)
		if (pwrite(fd, parts[i], len[i], (off_t)at[i]) != (ssize_t)len[i])
			goto out;
	if (fstat(fd, &st) != 0 || (uint64_t)st.st_blocks * 512 > ((uint64_t)64 << 20))
		goto out;
	rc = 0;
out:
	close(fd);
	if (rc)
		unlink(path);
	return rc;
}

/* S = 2^31 + 1 sequences in one document, all empty but the last: lengths and
 * pointers are zeros (holes), so the .idx is valid and 24+ GiB long. */
static void test_idxstat_sequences_past_2_31(void)
{
	const uint64_t s = (1ULL << 31) + 1, d = 2;
	unsigned char hdr[MT_IDX_HEADER_SIZE] = { 'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0 };
	unsigned char last_len[4] = { 3, 0, 0, 0 }, docs[16], bin[6] = { 1, 0, 2, 0, 0xff, 0xff };
	const unsigned char *parts[3] = { hdr, last_len, docs };
	uint64_t at[3], size = MT_IDX_HEADER_SIZE + 12 * s + 8 * d;
	size_t len[3] = { sizeof(hdr), 4, 16 };
	char p[512], b[512];
	struct mt_idx *ix = NULL;
	struct mt_err e = { 0 };
	FILE *f;

	put64(hdr + 9, 1);
	hdr[17] = MT_IDX_U16;
	put64(hdr + 18, s);
	put64(hdr + 26, d);
	put64(docs, 0);
	put64(docs + 8, s);
	at[0] = 0;
	at[1] = MT_IDX_HEADER_SIZE + 4 * (s - 1);
	at[2] = MT_IDX_HEADER_SIZE + 12 * s;
	snprintf(p, sizeof(p), "%s/seqs.idx", dir);
	snprintf(b, sizeof(b), "%s/seqs.bin", dir);
	if (sparse_file(p, size, parts, at, len, 3)) {
		tap_skip("no sparse files here", "more than 2^31 sequences");
		return;
	}
	f = fopen(b, "wb");
	if (f) {
		fwrite(bin, 1, sizeof(bin), f);
		fclose(f);
	}
	if (!ok(mt_idx_open_header(&ix, p, &e) == 0, "open a .idx of %llu bytes, %llu sequences", (unsigned long long)size,
		(unsigned long long)s)) {
		printf("#   %s\n", e.msg);
	} else {
		is_int(ix->nseq, (int64_t)s, "S read as 64 bits");
		is_int(ix->ndoc_idx, 2, "D");
		is_int((int64_t)ix->off_docs, (int64_t)(MT_IDX_HEADER_SIZE + 12 * s), "document index past 2^34 bytes");
		is_int(mt_idx_seq_len(ix, (int64_t)s - 1), 3, "the last length, at byte %llu", (unsigned long long)at[1]);
		is_int(mt_idx_seq_len(ix, (int64_t)s - 2), 0, "the one before");
		is_int(mt_idx_seq_ptr(ix, (int64_t)s - 1), 0, "the last pointer");
		is_int(mt_idx_doc(ix, 1), (int64_t)s, "the document index ends at S");
		is_int(mt_idx_token(ix, (int64_t)s - 1, 2), 65535, "a token of the last sequence");
	}
	mt_idx_close(ix);
	unlink(p);
	unlink(b);
}

/* D = 2^31 + 2: 2^31 + 1 empty documents, a document index of zeros (holes). */
static void test_idxstat_documents_past_2_31(void)
{
	const uint64_t d = (1ULL << 31) + 2;
	unsigned char hdr[MT_IDX_HEADER_SIZE] = { 'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0 };
	const unsigned char *parts[1] = { hdr };
	uint64_t at[1] = { 0 }, size = MT_IDX_HEADER_SIZE + 8 * d;
	size_t len[1] = { sizeof(hdr) };
	char p[512], b[512];
	struct mt_idx *ix = NULL;
	struct mt_err e = { 0 };
	FILE *f;

	put64(hdr + 9, 1);
	hdr[17] = MT_IDX_I32;
	put64(hdr + 18, 0);
	put64(hdr + 26, d);
	snprintf(p, sizeof(p), "%s/docs.idx", dir);
	snprintf(b, sizeof(b), "%s/docs.bin", dir);
	if (sparse_file(p, size, parts, at, len, 1)) {
		tap_skip("no sparse files here", "more than 2^31 documents");
		return;
	}
	f = fopen(b, "wb");
	if (f)
		fclose(f);
	if (!ok(mt_idx_open_header(&ix, p, &e) == 0, "open a .idx of %llu document index entries", (unsigned long long)d)) {
		printf("#   %s\n", e.msg);
	} else {
		is_int(ix->ndoc_idx - 1, (int64_t)d - 1, "2^31 + 1 documents");
		is_int(mt_idx_doc(ix, ix->ndoc_idx - 1), 0, "the last entry, at byte %llu",
		       (unsigned long long)(size - 8));
	}
	mt_idx_close(ix);
	unlink(p);
	unlink(b);
}

/* A header asking for more than 2^32 (or 2^64) bytes: the exact size in the
 * message, no wrap-around. */
static void test_idxstat_header_sizes(void)
{
	unsigned char hdr[MT_IDX_HEADER_SIZE] = { 'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0 };
	const uint64_t s = (1ULL << 40) + 3, d = (1ULL << 33) + 1;
	char p[512], b[512], want[64];
	struct mt_idx *ix = NULL;
	struct mt_err e = { 0 };
	FILE *f;

	put64(hdr + 9, 1);
	hdr[17] = MT_IDX_U16;
	put64(hdr + 18, s);
	put64(hdr + 26, d);
	snprintf(p, sizeof(p), "%s/hdr.idx", dir);
	snprintf(b, sizeof(b), "%s/hdr.bin", dir);
	f = fopen(p, "wb");
	if (f) {
		fwrite(hdr, 1, sizeof(hdr), f);
		fclose(f);
	}
	f = fopen(b, "wb");
	if (f)
		fclose(f);
	snprintf(want, sizeof(want), "needs %llu", (unsigned long long)(MT_IDX_HEADER_SIZE + 12 * s + 8 * d));
	is_int(mt_idx_open(&ix, p, &e), -1, "a header asking for 12 TiB");
	like(e.msg, want, "the exact size it needs");
	put64(hdr + 18, UINT64_MAX / 12 + 1); /* 12 S alone wraps */
	f = fopen(p, "wb");
	if (f) {
		fwrite(hdr, 1, sizeof(hdr), f);
		fclose(f);
	}
	is_int(mt_idx_open(&ix, p, &e), -1, "a header whose size wraps 2^64");
	like(e.msg, "cannot fit", "said so");
	{
		struct mt_idx_check c = { 0 };

		is_int(mt_idx_check_run(&c, p, &e), 0, "the check reads it");
		is_int(c.problems, 1, "one problem");
	}
	unlink(p);
	unlink(b);
}

int main(void)
{
	char cmd[300];

	snprintf(dir, sizeof(dir), "%s/mt-test-idxstat-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir))
		return 1;
	test_idxstat_percentiles();
	test_idxstat_long_documents();
	test_idxstat_counts_past_2_32();
	test_idxstat_sequences_past_2_31();
	test_idxstat_documents_past_2_31();
	test_idxstat_header_sizes();
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		return 1;
	return tap_done();
}
