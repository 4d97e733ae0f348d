/* Unit tests for lib/base/atomic.c and lib/base/progress.c. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/atomic.h"
#include "base/progress.h"
#include "tap.h"

static char dir[256];

static char *read_all(const char *p)
{
	static char buf[4096];
	FILE *f = fopen(p, "rb");
	size_t n;

	if (!f)
		return NULL;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static void test_atomic_commit_and_abort(void)
{
	char p[512], tmp[600];
	struct mt_atomic w;
	struct mt_err e = { 0 };
	struct stat st;

	snprintf(p, sizeof(p), "%s/out.bin", dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", p, (long)getpid());
	is_int(mt_atomic_open(&w, p, &e), 0, "open");
	mt_atomic_write(&w, "first", 5, &e);
	ok(stat(p, &st) != 0, "target absent before commit");
	ok(stat(tmp, &st) == 0, "data goes to %s.tmp.<pid>", "out.bin");
	is_int(mt_atomic_commit(&w, &e), 0, "commit");
	is_str(read_all(p), "first", "content after commit");
	ok(stat(tmp, &st) != 0, "temporary gone after commit");

	mt_atomic_open(&w, p, &e);
	fprintf(mt_atomic_file(&w), "second %d", 2);
	is_str(read_all(p), "first", "old content stays while the new one is written");
	mt_atomic_abort(&w);
	is_str(read_all(p), "first", "abort keeps the old content");
	ok(stat(tmp, &st) != 0, "abort removes the temporary");

	mt_atomic_open(&w, p, &e);
	fprintf(mt_atomic_file(&w), "second %d", 2);
	mt_atomic_unlink_all();
	ok(stat(tmp, &st) != 0, "unlink_all removes live temporaries");
	mt_atomic_abort(&w);

	snprintf(p, sizeof(p), "%s/no/such/dir/x", dir);
	is_int(mt_atomic_open(&w, p, &e), -1, "unwritable place is an error");
	like(e.msg, "no/such/dir/x.tmp.", "naming the file");
	is_int(e.code, MT_EXIT_IO, "i/o class");
}

/* Past the write-back threshold (8 MiB) the content must stay exact, seeks (holes)
 * included, and on Linux the write-back of what was written has been started. */
static void test_atomic_large_writeback(void)
{
	char p[512];
	struct mt_atomic w;
	struct mt_err e = { 0 };
	size_t total = 0, chunk = 123457, hole = 5000;
	unsigned char *buf = malloc(chunk), *back = NULL;
	FILE *f;
	long long size;
	int same = 1;

	snprintf(p, sizeof(p), "%s/big.bin", dir);
	is_int(mt_atomic_open(&w, p, &e), 0, "open");
	for (int i = 0; total < (20u << 20); i++) {
		for (size_t k = 0; k < chunk; k++)
			buf[k] = (unsigned char)((total + k) * 2654435761u >> 13);
		if (mt_atomic_write(&w, buf, chunk, &e))
			break;
		total += chunk;
		if (i == 70) { /* a hole in the middle, as mt-index merge leaves one */
			fseeko(mt_atomic_file(&w), (off_t)hole, SEEK_CUR);
			total += hole;
		}
	}
	is_int((int)(total >= (20u << 20)), 1, "20 MiB written");
#ifdef SYNC_FILE_RANGE_WRITE
	ok(w.synced >= (8 << 20), "write-back started as the file grew (up to %lld)", w.synced);
#endif
	is_int(mt_atomic_commit(&w, &e), 0, "commit");
	f = fopen(p, "rb");
	fseeko(f, 0, SEEK_END);
	size = (long long)ftello(f);
	is_int((int)(size == (long long)total), 1, "size %lld", size);
	rewind(f);
	back = malloc(total);
	if (fread(back, 1, total, f) != total)
		same = 0;
	fclose(f);
	for (size_t q = 0, i = 0; same && q < total; i++) {
		for (size_t k = 0; k < chunk; k++)
			if (back[q + k] != (unsigned char)((q + k) * 2654435761u >> 13)) {
				same = 0;
				break;
			}
		q += chunk;
		if (i == 70) {
			for (size_t k = 0; k < hole && same; k++)
				same = back[q + k] == 0;
			q += hole;
		}
	}
	ok(same, "content intact, the hole reads as zeros");
	free(buf);
	free(back);
}

static void test_progress_format(void)
{
	struct mt_progress p;
	char line[256], b[32];

	mt_progress_init(&p, "mt-x", "docs", 1000000000, 1);
	ok(!p.enabled, "-q disables the meter");
	mt_progress_format(line, sizeof(line), &p, 10.0, 250000000, 5000);
	is_str(line, "mt-x: 250 MB / 1.00 GB (25%), 25.0 MB/s, 500 docs/s, eta 30s", "known total: percent, rates, eta");
	p.total = -1;
	p.item = NULL;
	mt_progress_format(line, sizeof(line), &p, 2.0, 3000, 0);
	is_str(line, "mt-x: 3.00 kB, 1.50 kB/s", "unknown total: no eta");
	mt_fmt_duration(b, sizeof(b), 3725);
	is_str(b, "1h02m", "hours");
	mt_fmt_duration(b, sizeof(b), 125);
	is_str(b, "2m05s", "minutes");
	mt_fmt_bytes(b, sizeof(b), 999);
	is_str(b, "999 B", "bytes");
}

int main(void)
{
	char cmd[300];

	snprintf(dir, sizeof(dir), "%s/mt-test-atomic-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir))
		return 1;
	test_atomic_commit_and_abort();
	test_atomic_large_writeback();
	test_progress_format();
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		return 1;
	return tap_done();
}
