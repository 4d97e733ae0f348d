/* Unit tests for lib/text/hfjson.c's normalizers: Unicode 9.0's tables as Hugging Face
 * tokenizers has them (code points assigned later kept as they are, as starters), on cases
 * worked out by hand from that rule, and the generated table itself. The whole range is
 * checked against Python in tests/mt-tokenize-hfjson.bats. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "text/hfjson.h"
#include "text/unicode_post9.h"
#include "tap.h"

/* form's normalization of s through mt_hfjson_normalize; NULL on an error */
static char *norm(const char *form, const char *s, size_t n, size_t *outn)
{
	char js[64];
	struct mt_vocab v;
	struct mt_err e = { 0 };
	json_t *root;
	char *out = NULL;

	memset(&v, 0, sizeof(v));
	snprintf(js, sizeof(js), "{\"normalizer\": {\"type\": \"%s\"}}", form);
	root = json_loads(js, 0, NULL);
	if (!root || mt_hfjson_load(&v, root, "test.json", &e) || mt_hfjson_normalize(&v, s, n, &out, outn, &e))
		out = NULL;
	json_decref(root);
	mt_hfjson_free(&v.hf);
	return out;
}

static void check(const char *form, const char *in, const char *want, const char *what)
{
	size_t n = 0;
	char *got = norm(form, in, strlen(in), &n);

	ok(got && n == strlen(want) && !memcmp(got, want, n), "%s: %s", form, what);
	free(got);
}

static void test_cases(void)
{
	check("NFKC", "\u337b\u32ff\ufb01", "\u5e73\u6210\u32ff" "fi", "U+337B (1.1) becomes 平成, U+32FF (12.1) stays, ﬁ is fi");
	check("NFKD", "\u32ff\u2460", "\u32ff" "1", "U+32FF stays, ① is 1");
	check("NFC", "\u32ff", "\u32ff", "U+32FF stays");
	/* U+1DFA (14.0, class 218) is a starter: the marks keep their sides, e+U+0301 composes */
	check("NFC", "e\u0301\u1dfa\u0323", "\u00e9\u1dfa\u0323", "a later mark between older ones does not move");
	check("NFD", "e\u0301\u1dfa\u0323", "e\u0301\u1dfa\u0323", "the same marks, in their order");
	/* U+1DF9 (10.0, class 220) blocks e+U+0301, which utf8proc alone would compose to é */
	check("NFC", "e\u1df9\u0301", "e\u1df9\u0301", "a later mark blocks composition");
	check("NFKC", "\u1e0b\u0323\u1dfa\u0307", "\u1e0d\u0307\u1dfa\u0307", "older marks reordered around a later one");
	/* Dives Akuru (13.0): U+11935 U+11930 would compose to U+11938, which would decompose */
	check("NFC", "\U00011935\U00011930", "\U00011935\U00011930", "a later composition pair stays apart");
	check("NFD", "\U00011938", "\U00011938", "a later canonical composite stays whole");
	check("NFKC", "\U0001e030\u0301", "\U0001e030\u0301", "U+1E030 (15.0) keeps its compatibility form");
	check("NFKC", "plain ascii", "plain ascii", "ASCII unchanged");
	check("NFC", "\u1100\u1161\u11a8\u32ff\uac00\u11a8", "\uac01\u32ff\uac01", "Hangul on both sides composes");
	check("NFKC", "", "", "an empty text");

	/* many later code points: the output grows piece by piece */
	{
		enum { N = 2000 };
		char *in = malloc(N * 6 + 1), *want = malloc(N * 5 + 1), *got;
		size_t n = 0;
		for (int i = 0; i < N; i++) {
			memcpy(in + i * 6, "\ufb01\u32ff", 6);    /* 3 + 3 bytes */
			memcpy(want + i * 5, "fi\u32ff", 5);      /* 2 + 3 bytes */
		}
		in[N * 6] = want[N * 5] = '\0';
		got = norm("NFKC", in, N * 6, &n);
		ok(got && n == N * 5 && !memcmp(got, want, n), "NFKC of %d ﬁ U+32FF pairs", N);
		free(got);
		free(in);
		free(want);
	}
	/* text that is not UTF-8 after a later code point is still refused */
	{
		size_t n = 0;
		char *got = norm("NFC", "\u32ff" "a\xff", 5, &n);
		ok(got == NULL, "invalid UTF-8 after U+32FF is an error");
		free(got);
	}
}

static void test_table(void)
{
	size_t nr = sizeof(mt_unicode_post9) / sizeof(mt_unicode_post9[0]), count = 0;
	int sorted = 1, known = 1;
	unsigned tmaj = 0, tmin = 0, umaj = 0, umin = 0;

	for (size_t i = 0; i < nr; i++) {
		if (mt_unicode_post9[i][0] > mt_unicode_post9[i][1] ||
		    (i && mt_unicode_post9[i][0] <= mt_unicode_post9[i - 1][1] + 1))
			sorted = 0;
		count += mt_unicode_post9[i][1] - mt_unicode_post9[i][0] + 1;
		for (uint32_t c = mt_unicode_post9[i][0]; c <= mt_unicode_post9[i][1]; c++)
			if (utf8proc_category((utf8proc_int32_t)c) == UTF8PROC_CATEGORY_CN)
				known = 0;
	}
	ok(sorted && mt_unicode_post9[0][0] == MT_UNICODE_POST9_MIN && count == MT_UNICODE_POST9_COUNT,
	   "the table: %zu ranges, sorted, apart, %zu code points", nr, count);
	ok(known, "utf8proc knows every code point of the table");
	{ /* the block bitmap: a bit for each block below U+20000 that holds a table code point, no more */
		int same = 1;
		for (uint32_t blk = 0; blk < 0x200; blk++) {
			int bit = mt_unicode_post9_blocks[blk >> 6] >> (blk & 63) & 1, has = 0;
			for (size_t i = 0; i < nr; i++)
				if (mt_unicode_post9[i][0] <= (blk << 8 | 0xff) && mt_unicode_post9[i][1] >= blk << 8)
					has = 1;
			if (bit != has)
				same = 0;
		}
		ok(same, "the block bitmap matches the ranges");
	}
	/* a utf8proc of a later Unicode than the table's data would normalize code points the
	 * table does not list: regenerate it (scripts/gen-unicode-post9.py) from newer data */
	sscanf(MT_UNICODE_POST9_VERSION, "%u.%u", &tmaj, &tmin);
	sscanf(utf8proc_unicode_version(), "%u.%u", &umaj, &umin);
	ok(umaj < tmaj || (umaj == tmaj && umin <= tmin), "utf8proc's Unicode %s is not later than the table's %s",
	   utf8proc_unicode_version(), MT_UNICODE_POST9_VERSION);
}

int main(void)
{
	test_cases();
	test_table();
	return tap_done();
}
