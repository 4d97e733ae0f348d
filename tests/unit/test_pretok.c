/* Unit tests for lib/text/pretok.c: every code point against the Unicode 16 sets (whatever
 * Unicode version this machine's PCRE2 carries), the rewrites, and piece iteration. */
#include <stdlib.h>
#include <string.h>

#include "text/pretok.h"
#include "text/unicode_classes.h"
#include "tap.h"

static int utf8(uint32_t c, char *o)
{
	if (c < 0x80)
		return o[0] = (char)c, 1;
	if (c < 0x800)
		return o[0] = (char)(0xC0 | c >> 6), o[1] = (char)(0x80 | (c & 0x3F)), 2;
	if (c < 0x10000)
		return o[0] = (char)(0xE0 | c >> 12), o[1] = (char)(0x80 | ((c >> 6) & 0x3F)),
		       o[2] = (char)(0x80 | (c & 0x3F)), 3;
	return o[0] = (char)(0xF0 | c >> 18), o[1] = (char)(0x80 | ((c >> 12) & 0x3F)),
	       o[2] = (char)(0x80 | ((c >> 6) & 0x3F)), o[3] = (char)(0x80 | (c & 0x3F)), 4;
}

static void test_pretok_every_code_point(void)
{
	for (size_t k = 0; k < sizeof(mt_unicode_classes) / sizeof(mt_unicode_classes[0]); k++) {
		const struct mt_unicode_class *uc = &mt_unicode_classes[k];
		char pat[16], s[4];
		struct mt_pretok p;
		struct mt_pretok_iter it;
		struct mt_err e = { 0 };
		long wrong = 0, first = -1;
		int r = 0;

		snprintf(pat, sizeof(pat), strcmp(uc->name, "WS") ? "\\p{%s}" : "\\s", uc->name);
		if (mt_pretok_compile(&p, pat, &e) || mt_pretok_iter_init(&it, &p, &e)) {
			ok(0, "compile %s: %s", pat, e.msg);
			continue;
		}
		for (uint32_t c = 0; c <= 0x10FFFF; c++) {
			size_t b, en;
			int in, want;
			if (c >= 0xD800 && c <= 0xDFFF)
				continue;
			while (r < uc->nranges && uc->ranges[r][1] < c)
				r++;
			want = r < uc->nranges && uc->ranges[r][0] <= c;
			mt_pretok_iter_reset(&it, s, (size_t)utf8(c, s));
			in = mt_pretok_iter_next(&it, &b, &en) == 1;
			if (in != want) {
				if (first < 0)
					first = (long)c;
				wrong++;
			}
		}
		ok(wrong == 0, "%s matches exactly Unicode 16's set (%ld wrong, first U+%04lX)", pat, wrong,
		   first < 0 ? 0 : first);
		mt_pretok_iter_free(&it);
		mt_pretok_free(&p);
	}
}

/* Pieces of a text as "a|b|c". */
static void pieces(const char *pattern, int gaps, const char *text, char *out, size_t n)
{
	struct mt_pretok p;
	struct mt_pretok_iter it;
	struct mt_err e = { 0 };
	size_t b, en, k = 0;

	out[0] = '\0';
	if (mt_pretok_compile(&p, pattern, &e) || mt_pretok_iter_init(&it, &p, &e)) {
		snprintf(out, n, "error: %.400s", e.msg);
		return;
	}
	p.keep_gaps = gaps;
	mt_pretok_iter_reset(&it, text, strlen(text));
	while (mt_pretok_iter_next(&it, &b, &en))
		k += (size_t)snprintf(out + k, n - k, "%s%.*s", k ? "|" : "", (int)(en - b), text + b);
	mt_pretok_iter_free(&it);
	mt_pretok_free(&p);
}

static void test_pretok_patterns(void)
{
	char out[512];
	struct mt_pretok p;
	struct mt_err e = { 0 };

	pieces("gpt2", 0, "Hello world's  12345!!  \n", out, sizeof(out));
	is_str(out, "Hello| world|'s| | 12345|!!|  \n", "gpt2 pieces: a final run of spaces stays whole");
	pieces("gpt2", 0, "a  b", out, sizeof(out));
	is_str(out, "a| | b", "gpt2 pieces: \\s+(?!\\S) leaves the last space to the word");
	pieces("cl100k", 0, "I'LL pay 12345 now\r\n\r\nok", out, sizeof(out));
	is_str(out, "I|'LL| pay| |123|45| now|\r\n\r\n|ok", "cl100k: case-insensitive contractions, digits by three");
	pieces("o200k", 0, "HelloWorld JSONParser", out, sizeof(out));
	is_str(out, "Hello|World| JSONParser", "o200k splits on case changes");
	pieces("gpt2", 0, "a \xe1\xa0\x8e b", out, sizeof(out));
	is_str(out, "a| \xe1\xa0\x8e| b", "U+180E is not white space (PCRE2's \\s says it is)");
	pieces("[a-z]+", 0, "ab12cd", out, sizeof(out));
	is_str(out, "ab|cd", "find_iter drops text between matches");
	pieces("[a-z]+", 1, "ab12cd34", out, sizeof(out));
	is_str(out, "ab|12|cd|34", "Split(Isolated) keeps it");
	pieces("\\s+$", 0, "a  \n", out, sizeof(out));
	is_str(out, "  \n", "$ is only the end of the text");
	is_int(mt_pretok_compile(&p, "[^\\S]", &e), -1, "\\S inside a class is refused");
	is_int(mt_pretok_compile(&p, "(unclosed", &e), -1, "a bad regex is an error");
	like(e.msg, "missing closing parenthesis", "with PCRE2's reason");
	is_int(e.code, MT_EXIT_USAGE, "usage class");
}

int main(void)
{
	test_pretok_patterns();
	test_pretok_every_code_point();
	return tap_done();
}
