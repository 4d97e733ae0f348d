/* torchzip-bench FILE.pt [ROUNDS]: read every member of a torch.save file two ways and
 * print the time of each (docs/formats.md "Megatron-LM checkpoints" has the figures):
 *
 *   libarchive  archive_read_* over the ZIP (seekable reader), each member's bytes copied
 *               into a buffer of its size, as a reader that hands out tensors must
 *   direct      lib/ckpt/torchzip.c: the central directory by offsets, each member a
 *               pointer into the mmap'ed file, its bytes summed in place
 *
 * Both touch every byte (a checksum), so the page cache serves both alike; the difference
 * is the copy and what libarchive does per block. Peak extra memory: libarchive's largest
 * member (a storage of several GB is a buffer of several GB); direct: none. */
#include <archive.h>
#include <archive_entry.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt/torchzip.h"

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t sum(const unsigned char *p, size_t n)
{
	uint64_t s = 0;

	for (size_t i = 0; i + 8 <= n; i += 8) {
		uint64_t x;
		memcpy(&x, p + i, 8);
		s += x;
	}
	return s;
}

static int by_libarchive(const char *path, uint64_t *bytes, uint64_t *check, uint64_t *peak)
{
	struct archive *a = archive_read_new();
	struct archive_entry *e;

	archive_read_support_format_zip_seekable(a);
	if (archive_read_open_filename(a, path, 1 << 20) != ARCHIVE_OK) {
		fprintf(stderr, "libarchive: %s\n", archive_error_string(a));
		return -1;
	}
	while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
		int64_t n = archive_entry_size(e);
		unsigned char *buf = malloc(n > 0 ? (size_t)n : 1);
		la_ssize_t k, got = 0;
		if (!buf)
			return -1;
		while (got < n && (k = archive_read_data(a, buf + got, (size_t)(n - got))) > 0)
			got += k;
		*check += sum(buf, (size_t)got);
		*bytes += (uint64_t)got;
		if ((uint64_t)n > *peak)
			*peak = (uint64_t)n;
		free(buf);
	}
	archive_read_free(a);
	return 0;
}

static int direct(const char *path, uint64_t *bytes, uint64_t *check)
{
	struct mt_tz z;
	struct mt_err err = { 0 };

	if (mt_tz_open(&z, path, &err)) {
		fprintf(stderr, "%s\n", err.msg);
		return -1;
	}
	for (int i = 0; i < z.n; i++) {
		*check += sum(z.e[i].data, z.e[i].size);
		*bytes += z.e[i].size;
	}
	mt_tz_close(&z);
	return 0;
}

int main(int argc, char **argv)
{
	int rounds = argc > 2 ? atoi(argv[2]) : 3;
	double best[2] = { 1e30, 1e30 };
	uint64_t bytes[2] = { 0, 0 }, check[2] = { 0, 0 }, peak = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: torchzip-bench FILE.pt [ROUNDS]\n");
		return 2;
	}
	for (int r = 0; r < rounds; r++) {
		double t0;
		bytes[0] = bytes[1] = check[0] = check[1] = 0;
		t0 = now();
		if (by_libarchive(argv[1], &bytes[0], &check[0], &peak))
			return 1;
		if (now() - t0 < best[0])
			best[0] = now() - t0;
		t0 = now();
		if (direct(argv[1], &bytes[1], &check[1]))
			return 1;
		if (now() - t0 < best[1])
			best[1] = now() - t0;
	}
	if (bytes[0] != bytes[1] || check[0] != check[1]) {
		fprintf(stderr, "the two readers disagree: %llu/%llu bytes\n", (unsigned long long)bytes[0],
			(unsigned long long)bytes[1]);
		return 1;
	}
	printf("%llu bytes; best of %d: libarchive %.3f s (%.0f MB/s, largest buffer %.0f MB), direct offsets %.3f s "
	       "(%.0f MB/s, no buffer)\n", (unsigned long long)bytes[0], rounds, best[0], bytes[0] / best[0] / 1e6, peak / 1e6,
	       best[1], bytes[1] / best[1] / 1e6);
	return 0;
}
