/* Unit tests for lib/base/jsontext.c: what is accepted and rejected matches Python's json
 * module (which Megatron uses), and the text decodes exactly. */
#include <stdlib.h>
#include <string.h>

#include "base/jsontext.h"
#include "tap.h"

static struct mt_jsontext j;
static const char *const keys[] = { "text", "title" };

static int parse(const char *line)
{
	struct mt_err e = { 0 };
	return mt_jsontext_parse(&j, line, strlen(line), keys, 2, &e);
}

static const char *part(int k, int i)
{
	static char out[256];
	int q = j.first[k] + i;
	snprintf(out, sizeof(out), "%.*s", (int)j.len[q], j.buf + j.off[q]);
	return out;
}

static void test_jsontext_accepts(void)
{
	ok(parse("{\"text\": \"hello\"}") == 0 && j.count[0] == 1, "a string value");
	is_str(part(0, 0), "hello", "decoded");
	is_int(j.count[1], MT_JSONTEXT_MISSING, "an absent key is missing");
	ok(parse(" {\"a\":[1,{\"b\":null}],\"text\":[\"x\",\"\",\"yz\"],\"title\":\"t\"} ") == 0, "nested values skipped");
	is_int(j.count[0], 3, "a list of three strings");
	ok(!strcmp(part(0, 0), "x") && !strcmp(part(0, 2), "yz") && j.len[j.first[0] + 1] == 0, "list items in order");
	is_str(part(1, 0), "t", "second key");
	ok(parse("{\"text\":\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\\u00e9\\u4e2d\\ud83d\\ude00\"}") == 0, "every escape");
	is_str(part(0, 0), "a\"b\\c/d\b\f\n\r\t\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80", "decoded to UTF-8");
	ok(parse("{\"text\":\"\\ud800x\\udc00\\udbff\\ud800\"}") == 0, "lone surrogates accepted (Python does)");
	is_str(part(0, 0), "\xef\xbf\xbdx\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", "each one U+FFFD, as tiktoken makes them");
	is_int(j.surrogates, 4, "and counted");
	ok(parse("{\"text\":\"\\u0000\"}") == 0 && j.len[j.first[0]] == 1 && j.buf[j.off[j.first[0]]] == 0, "NUL kept");
	ok(parse("{\"text\":\"1\",\"text\":\"2\"}") == 0, "duplicate keys");
	is_str(part(0, 0), "2", "the last one counts, as in Python");
	ok(parse("{\"\\u0074ext\":\"esc\"}") == 0 && j.count[0] == 1, "an escaped key matches");
	ok(parse("{\"n\":[NaN,Infinity,-Infinity,-0.5e+3,0,1E9],\"text\":\"\"}") == 0, "Python's number forms");
	ok(parse("{\"text\":\"caf\xc3\xa9 \xf0\x9f\x91\x8b\"}") == 0, "raw UTF-8");
	ok(parse("{\"text\": 3}") == 0 && j.count[0] == MT_JSONTEXT_NOT_TEXT, "a number is valid JSON but not text");
	ok(parse("{\"text\": [\"a\", 2]}") == 0 && j.count[0] == MT_JSONTEXT_NOT_TEXT && j.bad_item[0] == 1,
	   "a list with a number: item 1 named");
	ok(parse("{}") == 0 && j.count[0] == MT_JSONTEXT_MISSING, "an empty object");
}

static void test_jsontext_rejects(void)
{
	static const char *const bad[] = {
		"", "   ", "{", "{\"text\":\"a\"", "{\"text\":\"a\",}", "{'text':'a'}", "{\"text\":\"a\"} x",
		"{\"text\":\"a\nb\"}", "{\"text\":\"\\x\"}", "{\"text\":\"\\u12\"}", "{\"text\":\"\xff\"}",
		"{\"text\":\"\xc0\xaf\"}", "{\"text\":\"\xed\xa0\x80\"}", "{\"text\":01}", "{\"n\":1.}",
		"{\"n\":.5}", "{\"n\":-}", "{\"n\":+1}", "{\"n\":[1,]}", "{\"n\":tru}", "{\"n\":nan}",
		"{text:\"a\"}", "{\"a\" \"b\"}", "{\"n\":[1 2]}", "[1]", "\"text\"", "3",
	};
	struct mt_err e = { 0 };
	int all = 1;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (mt_jsontext_parse(&j, bad[i], strlen(bad[i]), keys, 2, &e) == 0) {
			printf("# accepted: %s\n", bad[i]);
			all = 0;
		}
	ok(all, "every malformed line or non-object is refused");
	mt_jsontext_parse(&j, "{\"text\": [1, }", 14, keys, 2, &e);
	is_str(e.msg, "invalid JSON at column 14: expected a value", "the column is named");
	is_int(e.code, MT_EXIT_DATA, "bad data class");
	{
		char deep[2100];
		memset(deep, '[', 1000);
		strcpy(deep + 1000, "1");
		memset(deep + 1001, ']', 1000);
		deep[2001] = '\0';
		char line[2200];
		snprintf(line, sizeof(line), "{\"x\":%s}", deep);
		is_int(mt_jsontext_parse(&j, line, strlen(line), keys, 2, &e), -1, "deep nesting refused, not a crash");
	}
}

int main(void)
{
	test_jsontext_accepts();
	test_jsontext_rejects();
	mt_jsontext_free(&j);
	return tap_done();
}
