/* Unit tests for lib/backend/lttune.c: the matmul tuning file (no GPU needed; test_cuda
 * runs the tuning itself). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/lttune.h"
#include "base/files.h"
#include "tap.h"

static const char *H100 = "NVIDIA H100 80GB HBM3\tcuBLASLt 130100";
static const char *H200 = "NVIDIA H200\tcuBLASLt 130100";

static struct mt_lt_pick pick(int64_t m, int beta, int tile)
{
	struct mt_lt_pick p;

	memset(&p, 0, sizeof(p));
	p.key.ab = MT_BF16, p.key.cd = MT_F32, p.key.ta = 0, p.key.tb = 1;
	p.key.m = m, p.key.n = 11264, p.key.k = 16384, p.key.lda = m, p.key.ldb = 11264, p.key.ldd = m;
	p.key.beta = beta, p.key.epi = 1;
	int cfg[MT_LT_CFG] = { 66, tile, 35, 1, 0, 0, 0, 0 };
	memcpy(p.cfg, cfg, sizeof(cfg));
	p.ms = 1.117f, p.first_ms = 1.129f, p.ncand = 8;
	return p;
}

static void test_line_round_trip(void)
{
	struct mt_lt_pick p = pick(2048, 0, 24), *got = NULL;
	struct mt_err e = { 0 };
	char line[512];
	int n = -1, len = mt_lttune_line(line, sizeof(line), H100, &p);

	is_str(line,
	       "NVIDIA H100 80GB HBM3\tcuBLASLt 130100\tbf16\tf32\tN\tT\t2048\t11264\t16384\t2048\t11264\t2048\t0\t1\t66\t24"
	       "\t35\t1\t0\t0\t0\t0\t1.1170\t1.1290\t8\n",
	       "a pick's line: the device, the library, the key, the configuration, the times");
	is_int(len, (int)strlen(line), "its length returned");
	is_int(mt_lttune_line(line, 40, H100, &p), -1, "a buffer too short is refused");
	is_int(mt_lttune_parse("t", "# comment\n\n", H100, &got, &n, &e), 0, "comments and blank lines only");
	is_int(n, 0, "no picks in them");
	free(got);
	mt_lttune_line(line, sizeof(line), H100, &p);
	is_int(mt_lttune_parse("t", line, H100, &got, &n, &e), 0, "a line parses back");
	is_int(n, 1, "one pick");
	ok(got && !memcmp(&got[0].key, &p.key, sizeof(p.key)) && !memcmp(got[0].cfg, p.cfg, sizeof(p.cfg)) &&
		   got[0].ncand == 8 && got[0].ms > 1.1169f && got[0].ms < 1.1171f,
	   "the same key, configuration and times");
	free(got);
	is_int(mt_lttune_parse("t", line, H200, &got, &n, &e), 0, "another device's line parses");
	is_int(n, 0, "but is not this device's pick");
	free(got);
	is_int(mt_lttune_parse("t", line, "NVIDIA H100 80GB HBM3\tcuBLASLt 120900", &got, &n, &e), 0,
	       "another cuBLASLt's line parses");
	is_int(n, 0, "but is not this library's pick");
	free(got);
}

static void bad(const char *text, const char *want, const char *what)
{
	struct mt_lt_pick *got = (struct mt_lt_pick *)1;
	struct mt_err e = { 0 };
	int n = -1;

	is_int(mt_lttune_parse("tune.tsv", text, H100, &got, &n, &e), -1, "%s: refused", what);
	like(e.msg, want, "%s: the error names it", what);
	ok(got == NULL && n == 0, "%s: no picks returned", what);
	is_int(e.code, MT_EXIT_DATA, "%s: a data error", what);
}

static void test_bad_lines(void)
{
	struct mt_lt_pick p = pick(2048, 0, 24);
	char line[512], text[1200];

	mt_lttune_line(line, sizeof(line), H100, &p);
	bad("NVIDIA H100\tcuBLASLt 1\tbf16\n", "tune.tsv:1: 3 tab-separated fields, expected 25", "a short line");
	snprintf(text, sizeof(text), "# head\n%s%.*s\textra\n", line, (int)strlen(line) - 1, line);
	bad(text, "tune.tsv:3: 26 tab-separated fields", "an extra field on line 3");
	snprintf(text, sizeof(text), "%s", line);
	memcpy(strstr(text, "bf16"), "bf17", 4);
	bad(text, "tune.tsv:1: field 3 (A/B type) is not valid: \"bf17\"", "an unknown type");
	snprintf(text, sizeof(text), "%s", line);
	*strstr(text, "\tT\t") = '\t', memcpy(strstr(text, "\tN\t") + 1, "X", 1);
	bad(text, "field 5 (op(A))", "an op neither N nor T");
	snprintf(text, sizeof(text), "%s", line);
	memcpy(strstr(text, "\t11264\t"), "\t-1264\t", 7);
	bad(text, "field 8 (n) is not valid: \"-1264\"", "a negative size");
	snprintf(text, sizeof(text), "%s", line);
	memcpy(strstr(text, "1.1170"), "1.1x70", 6);
	bad(text, "field 23 (ms) is not valid", "a time that is not a number");
	snprintf(text, sizeof(text), "%s", line);
	memcpy(strstr(text, "\t0\t1\t66"), "\t2\t1\t66", 7);
	bad(text, "field 13 (beta)", "a beta other than 0 or 1");
}

static void test_save(void)
{
	char dir[] = "/tmp/mt-lttune-XXXXXX", path[300], *text = NULL;
	struct mt_lt_pick a = pick(2048, 0, 24), b = pick(5632, 1, 31), a2 = pick(2048, 0, 201), *got = NULL;
	struct mt_err e = { 0 };
	int n = 0;

	if (!mkdtemp(dir)) {
		ok(0, "mkdtemp");
		return;
	}
	snprintf(path, sizeof(path), "%s/tune.tsv", dir);
	is_int(mt_lttune_save(path, H100, &a, &e), 0, "save to a new file");
	is_int(mt_lttune_save(path, H200, &a, &e), 0, "another device's pick of the same key");
	is_int(mt_lttune_save(path, H100, &b, &e), 0, "a second key");
	is_int(mt_lttune_save(path, H100, &a2, &e), 0, "the first key again, another tile");
	is_int(mt_file_read(path, &text, NULL, &e), 0, "the file reads");
	like(text, "# mt matmul tuning", "with a header");
	is_int(mt_lttune_parse(path, text, H100, &got, &n, &e), 0, "and parses");
	is_int(n, 2, "two picks for this device: a key's pick replaced, not added");
	ok(n == 2 && got[0].key.m == 5632 && got[0].cfg[1] == 31 && got[1].key.m == 2048 && got[1].cfg[1] == 201,
	   "the second key, then the first's new tile");
	free(got);
	is_int(mt_lttune_parse(path, text, H200, &got, &n, &e), 0, "the other device's");
	ok(n == 1 && got[0].cfg[1] == 24, "kept as it was");
	free(got);
	ok(strstr(text, "# mt matmul tuning") == text && !strstr(text + 1, "# mt matmul tuning"),
	   "one header after four saves");
	free(text);

	/* a file that does not parse is not overwritten */
	FILE *f = fopen(path, "w");
	fputs("garbage\n", f);
	fclose(f);
	is_int(mt_lttune_save(path, H100, &a, &e), -1, "saving over a bad file is refused");
	like(e.msg, "tune.tsv:1: 1 tab-separated fields", "naming its line");
	is_int(mt_file_read(path, &text, NULL, &e), 0, "the bad file reads");
	is_str(text, "garbage\n", "and is left as it was");
	free(text);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	test_line_round_trip();
	test_bad_lines();
	test_save();
	return tap_done();
}
