/* Unit tests for lib/base/strbuf.c: appends, formatting, NUL bytes, growth, detach. */
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"
#include "tap.h"

static void test_strbuf_empty(void)
{
	struct mt_strbuf b = MT_STRBUF_INIT;

	ok(b.s == NULL && b.n == 0, "a new buffer holds nothing");
	is_int(mt_strbuf_appends(&b, ""), 0, "appending nothing succeeds");
	ok(b.s && b.s[0] == '\0' && b.n == 0, "and leaves an empty NUL-terminated string");
	mt_strbuf_free(&b);
	ok(b.s == NULL && b.n == 0 && b.cap == 0, "free empties the buffer");
}

static void test_strbuf_append(void)
{
	struct mt_strbuf b;

	mt_strbuf_init(&b);
	ok(!mt_strbuf_append(&b, "ab", 2) && !mt_strbuf_appends(&b, "cd") && !mt_strbuf_append(&b, "e\0f", 3),
	   "appends succeed");
	is_int(b.n, 7, "length counts the NUL byte inside");
	ok(!memcmp(b.s, "abcde\0f", 8), "bytes kept, NUL-terminated");
	mt_strbuf_reset(&b);
	ok(b.n == 0 && b.s[0] == '\0' && b.cap > 0, "reset keeps the memory");
	mt_strbuf_appends(&b, "x");
	is_str(b.s, "x", "appends after a reset");
	mt_strbuf_free(&b);
}

static void test_strbuf_appendf(void)
{
	struct mt_strbuf b = MT_STRBUF_INIT;

	is_int(mt_strbuf_appendf(&b, "%s=%d", "n", 42), 0, "appendf succeeds");
	is_int(mt_strbuf_appendf(&b, ", %.1f", 2.5), 0, "a second appendf");
	is_str(b.s, "n=42, 2.5", "formatted text appended");
	is_int(b.n, strlen("n=42, 2.5"), "length without the NUL");
	mt_strbuf_free(&b);
}

static void test_strbuf_grow(void)
{
	struct mt_strbuf b = MT_STRBUF_INIT;
	char chunk[1000];
	int good = 1;

	memset(chunk, 'z', sizeof(chunk));
	for (int i = 0; i < 1000 && good; i++)
		good = !mt_strbuf_append(&b, chunk, sizeof(chunk));
	ok(good, "a million bytes appended");
	is_int(b.n, 1000000, "length");
	ok(b.cap > b.n && b.s[b.n] == '\0', "room for the NUL");
	ok(b.s[0] == 'z' && b.s[999999] == 'z', "first and last bytes");
	is_int(mt_strbuf_grow(&b, 5000000), 0, "grow reserves room");
	ok(b.cap >= b.n + 5000001, "capacity covers it");
	ok(mt_strbuf_grow(&b, (size_t)-1) == -1 && b.n == 1000000, "an impossible size fails, the buffer unchanged");
	mt_strbuf_free(&b);
}

static void test_strbuf_detach(void)
{
	struct mt_strbuf b = MT_STRBUF_INIT;
	size_t n = 99;
	char *s;

	ok(mt_strbuf_detach(&b, &n) == NULL && n == 0, "detach of an empty buffer: NULL, length 0");
	mt_strbuf_appendf(&b, "%d", 12345);
	s = mt_strbuf_detach(&b, &n);
	is_str(s, "12345", "detached bytes");
	is_int(n, 5, "detached length");
	ok(b.s == NULL && b.n == 0 && b.cap == 0, "the buffer is empty after");
	free(s);
}

int main(void)
{
	test_strbuf_empty();
	test_strbuf_append();
	test_strbuf_appendf();
	test_strbuf_grow();
	test_strbuf_detach();
	return tap_done();
}
