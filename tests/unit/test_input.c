/* Unit tests for lib/base/input.c and lib/base/jsonl.c: every compression and archive
 * yields the same bytes as the plain input; truncation is an error naming the
 * file; lines survive buffer boundaries. Fixtures are made with the system's
 * gzip, xz, zstd, bzip2, tar and zip in a temporary directory. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/input.h"
#include "base/jsonl.h"
#include "tap.h"

static char dir[256];

static void sh(const char *fmt, const char *a)
{
	char cmd[1024];

	snprintf(cmd, sizeof(cmd), fmt, dir, a, dir, a, dir, a);
	if (system(cmd) != 0)
		printf("# command failed: %s\n", cmd);
}

static char *path(const char *name)
{
	static char p[8][512];
	static int k;

	k = (k + 1) % 8;
	snprintf(p[k], sizeof(p[k]), "%s/%s", dir, name);
	return p[k];
}

static void write_file(const char *name, const void *buf, size_t n)
{
	FILE *f = fopen(path(name), "wb");
	fwrite(buf, 1, n, f);
	fclose(f);
}

/* Read every member, concatenated. Returns NULL (and the error) on failure. */
static char *slurp(const char *p, size_t *n, int *members, struct mt_err *err)
{
	struct mt_input *in;
	char *buf = NULL;
	size_t len = 0, cap = 0;
	int r;

	*members = 0;
	if (mt_input_open(&in, p, err))
		return NULL;
	while ((r = mt_input_next(in, err)) == 1) {
		ssize_t got;
		(*members)++;
		do {
			if (cap - len < 65536) {
				cap = cap ? 2 * cap : 1 << 20;
				buf = realloc(buf, cap);
			}
			got = mt_input_read(in, buf + len, cap - len, err);
			if (got < 0) {
				free(buf);
				mt_input_close(in);
				return NULL;
			}
			len += (size_t)got;
		} while (got > 0);
	}
	mt_input_close(in);
	if (r < 0) {
		free(buf);
		return NULL;
	}
	*n = len;
	return buf ? buf : calloc(1, 1);
}

static char *plain;
static size_t plain_n;

static void make_plain(void)
{
	/* text with long and short lines, a NUL byte, and binary noise */
	size_t cap = 3 << 20, n = 0;
	uint32_t x = 12345;

	plain = malloc(cap);
	while (n < cap - 4096) {
		x = x * 1664525u + 1013904223u;
		size_t len = (x >> 8) % ((x & 1) ? 200 : 40000);
		for (size_t i = 0; i < len && n < cap - 4096; i++) {
			x = x * 1664525u + 1013904223u;
			plain[n++] = (x >> 29) == 0 ? (char)(x >> 16) : (char)('a' + (x >> 24) % 26);
			if (plain[n - 1] == '\n')
				plain[n - 1] = ' ';
		}
		plain[n++] = '\n';
	}
	plain[100] = '\0';
	memcpy(plain + n, "last line without newline", 25);
	n += 25;
	plain_n = n;
	write_file("plain.txt", plain, plain_n);
	write_file("b.txt", "second file\n", 12);
	write_file("c.txt", "third\nfile", 10);
}

static void test_input_compressed(void)
{
	static const struct { const char *cmd, *name; } c[] = {
		{ "gzip -c %s/%s > %s/plain.txt.gz", "plain.txt.gz" },
		{ "xz -c %s/%s > %s/plain.txt.xz", "plain.txt.xz" },
		{ "zstd -q -c %s/%s > %s/plain.txt.zst", "plain.txt.zst" },
		{ "bzip2 -c %s/%s > %s/plain.txt.bz2", "plain.txt.bz2" },
		{ "gzip -c %s/%s > %s/misnamed.txt", "misnamed.txt" },
	};
	struct mt_err e = { 0 };

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		size_t n = 0;
		int m;
		char *got;

		sh(c[i].cmd, "plain.txt");
		got = slurp(path(c[i].name), &n, &m, &e);
		ok(got && n == plain_n && memcmp(got, plain, n) == 0, "%s reads back the same bytes", c[i].name);
		is_int(m, 1, "%s is one member", c[i].name);
		if (!got)
			printf("# %s\n", e.msg);
		free(got);
	}
}

static void test_input_archives(void)
{
	char *want = malloc(plain_n + 64), *got;
	size_t n = 0, wn;
	int m;
	struct mt_err e = { 0 };

	memcpy(want, plain, plain_n);
	memcpy(want + plain_n, "second file\nthird\nfile", 22);
	wn = plain_n + 22;
	sh("cd %s && tar czf plain.tar.gz %s b.txt c.txt", "plain.txt");
	got = slurp(path("plain.tar.gz"), &n, &m, &e);
	ok(got && n == wn && memcmp(got, want, n) == 0, "tar.gz of three files reads back their bytes in order");
	is_int(m, 3, "three members");
	free(got);
	sh("cd %s && mkdir -p sub && cp b.txt sub/ && tar cJf plain.tar.xz %s sub b.txt c.txt", "plain.txt");
	got = slurp(path("plain.tar.xz"), &n, &m, &e);
	is_int(m, 4, "tar.xz: directories skipped, files kept");
	free(got);
	sh("cd %s && rm -f plain.zip && zip -q plain.zip %s b.txt c.txt", "plain.txt");
	got = slurp(path("plain.zip"), &n, &m, &e);
	ok(got && n == wn && memcmp(got, want, n) == 0, "zip reads back its files' bytes");
	if (!got)
		printf("# %s\n", e.msg);
	free(got);
	free(want);
}

static void test_input_truncated(void)
{
	static const char *const names[] = { "plain.txt.gz", "plain.txt.xz", "plain.txt.zst",
					     "plain.txt.bz2", "plain.tar.gz" };
	struct mt_err e = { 0 };

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char src[512], dst[512], cmd[1200];
		struct stat st;
		size_t n;
		int m;
		char *got;

		snprintf(src, sizeof(src), "%s/%s", dir, names[i]);
		snprintf(dst, sizeof(dst), "%s/trunc-%s", dir, names[i]);
		stat(src, &st);
		snprintf(cmd, sizeof(cmd), "head -c %lld %s > %s", (long long)st.st_size / 2, src, dst);
		if (system(cmd) != 0)
			printf("# %s failed\n", cmd);
		mt_err_clear(&e);
		got = slurp(dst, &n, &m, &e);
		ok(!got, "truncated %s is an error", names[i]);
		like(e.msg, dst, "the error names the file");
		ok(e.code == MT_EXIT_DATA, "bad data class for %s (%d)", names[i], e.code);
		free(got);
	}
}

static void test_input_missing_and_empty(void)
{
	struct mt_input *in;
	struct mt_err e = { 0 };
	size_t n;
	int m;
	char *got;

	is_int(mt_input_open(&in, path("nope.txt"), &e), -1, "missing file is an error");
	like(e.msg, "nope.txt", "naming it");
	is_int(e.code, MT_EXIT_IO, "i/o class");
	is_int(mt_input_open(&in, dir, &e), -1, "a directory is an error");
	write_file("empty.txt", "", 0);
	got = slurp(path("empty.txt"), &n, &m, &e);
	ok(got && n == 0 && m == 1, "empty file is one empty member");
	free(got);
	sh("gzip -c %s/%s > %s/empty.gz", "empty.txt");
	got = slurp(path("empty.gz"), &n, &m, &e);
	ok(got && n == 0 && m == 1, "empty gzip is one empty member");
	free(got);
}

static void test_input_lines(void)
{
	struct mt_input *in;
	struct mt_err e = { 0 };
	char *line;
	size_t len, off = 0;
	int good = 1, lines = 0, r;

	if (mt_input_open(&in, path("plain.txt.zst"), &e) || mt_input_next(in, &e) != 1) {
		ok(0, "open for lines: %s", e.msg);
		return;
	}
	while ((r = mt_input_getline(in, &line, &len, &e)) == 1) {
		lines++;
		if (off + len > plain_n || memcmp(line, plain + off, len) != 0)
			good = 0;
		off += len + 1;
	}
	ok(r == 0 && good && off == plain_n + 1, "lines of a compressed file rebuild the bytes (%d lines)", lines);
	mt_input_close(in);
}

static void test_jsonl(void)
{
	static const char text[] =
		"{\"text\": \"hello \\u00e9\\n\", \"n\": 1}\n"
		"\n"
		"{\"text\": [\"a\", \"bc\"]}\n"
		"{\"text\": \"x\\u0000y\"}\n"
		"{\"text\": 3}\n"
		"{\"text\": \"broken\n";
	struct mt_input *in;
	struct mt_jsonl r;
	struct mt_err e = { 0 };
	const char **parts;
	size_t *lens;
	json_t *v;

	write_file("t.jsonl", text, sizeof(text) - 1);
	sh("gzip -c %s/%s > %s/t.jsonl.gz", "t.jsonl");
	mt_input_open(&in, path("t.jsonl.gz"), &e);
	mt_input_next(in, &e);
	mt_jsonl_init(&r, in);
	is_int(mt_jsonl_next(&r, &v, &e), 1, "first value");
	is_int(mt_jsonl_get_text(v, "text", &parts, &lens, &e), 1, "a string is one part");
	ok(lens[0] == 9 && memcmp(parts[0], "hello \xc3\xa9\n", 9) == 0, "escapes decoded to UTF-8");
	free(parts), free(lens), json_decref(v);
	is_int(mt_jsonl_next(&r, &v, &e), 1, "blank line skipped");
	is_int(r.lineno, 3, "line numbers count blank lines");
	is_int(mt_jsonl_get_text(v, "text", &parts, &lens, &e), 2, "a list is several parts");
	free(parts), free(lens), json_decref(v);
	is_int(mt_jsonl_next(&r, &v, &e), 1, "NUL inside a string");
	mt_jsonl_get_text(v, "text", &parts, &lens, &e);
	is_int(lens[0], 3, "NUL kept, length right");
	free(parts), free(lens);
	is_int(mt_jsonl_get_text(v, "title", &parts, &lens, &e), -1, "missing key is an error");
	like(e.msg, "'title'", "naming the key");
	json_decref(v);
	is_int(mt_jsonl_next(&r, &v, &e), 1, "number value parses");
	is_int(mt_jsonl_get_text(v, "text", &parts, &lens, &e), -1, "but is not text");
	json_decref(v);
	is_int(mt_jsonl_next(&r, &v, &e), -1, "broken line is an error");
	like(e.msg, "t.jsonl.gz':6:", "naming file and line");
	mt_input_close(in);
}

static void test_input_expand(void)
{
	const char *pats[] = { path("b.txt"), NULL, "-" };
	char pat[512], **paths;
	int n;
	struct mt_err e = { 0 };

	snprintf(pat, sizeof(pat), "%s/plain.txt.*", dir);
	pats[1] = pat;
	is_int(mt_input_expand(pats, 3, &paths, &n, &e), 0, "expand");
	is_int(n, 6, "literal + 4 glob matches + stdin");
	ok(n == 6 && strstr(paths[1], "plain.txt.bz2") && !strcmp(paths[5], "-"), "in order, globs sorted");
	mt_input_paths_free(paths);
	snprintf(pat, sizeof(pat), "%s/none*.json", dir);
	pats[1] = pat;
	is_int(mt_input_expand(pats, 2, &paths, &n, &e), -1, "a glob matching nothing is an error");
}

int main(void)
{
	char cmd[300];

	snprintf(dir, sizeof(dir), "%s/mt-test-input-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir))
		return 1;
	make_plain();
	test_input_compressed();
	test_input_archives();
	test_input_truncated();
	test_input_missing_and_empty();
	test_input_lines();
	test_jsonl();
	test_input_expand();
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		return 1;
	free(plain);
	return tap_done();
}
