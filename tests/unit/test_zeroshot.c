/* Unit tests for lib/text/zeroshot.c and lib/eval/ledger.c: every target of a text is counted by
 * exactly one window for every stride and length (and the count is Megatron's formula),
 * the word count and strip follow Python's str.strip().split(" ") on Unicode whitespace,
 * strict LAMBADA's last word and context, cloze rows with and without left truncation,
 * and the ledger's torn-line repair, keys and lock. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "text/detok.h"
#include "eval/ledger.h"
#include "text/zeroshot.h"
#include "tap.h"

static void test_zeroshot_windows_cover_once(void)
{
	int bad = 0, cases = 0;

	for (int64_t L = 1; L <= 9; L++)
		for (int64_t o = 1; o <= L; o++)
			for (int64_t n = 1; n <= 40; n++) {
				int32_t toks[40], row[10];
				uint8_t mask[9];
				int hits[40] = { 0 };
				int64_t w = mt_zs_windows(n, o), total = 0, want;
				for (int64_t i = 0; i < n; i++)
					toks[i] = (int32_t)i;
				/* Megatron's count */
				want = (n - 1 - o > 0 ? (n - 1 - o + o - 1) / o : 0) + 1;
				bad += w != want;
				for (int64_t k = 0; k < w; k++) {
					total += mt_zs_window(toks, n, L, o, k, -7, row, mask);
					for (int64_t j = 0; j < L; j++)
						if (mask[j]) {
							if (row[j + 1] < 0) {
								bad++;
								continue;
							}
							hits[row[j + 1]]++;
						}
				}
				bad += total != n - 1;
				for (int64_t i = 1; i < n; i++)
					bad += hits[i] != 1;
				bad += hits[0] != 0;
				cases++;
			}
	ok(bad == 0, "windows: each of the n-1 targets counted once (%d cases, %d bad)", cases, bad);
}

static void test_zeroshot_window_padding(void)
{
	int32_t toks[5] = { 10, 11, 12, 13, 14 }, row[9];
	uint8_t mask[8];
	int64_t c = mt_zs_window(toks, 5, 8, 4, 0, 99, row, mask);

	is_int(c, 4, "short text: 4 targets in the first window");
	is_int(row[4], 14, "tokens in place");
	is_int(row[5], 99, "padded with eod");
	is_int(mask[3], 1, "last real target counted");
	is_int(mask[4], 0, "padding not counted");
	is_int(mt_zs_windows(5, 4), 1, "one window");
	is_int(mt_zs_windows(1, 4), 1, "at least one window");
}

static void test_zeroshot_words(void)
{
	const char *s = "  a b  c\n";
	size_t b, n;

	is_int(mt_zs_word_count(s, strlen(s)), 4, "split(\" \") counts empty strings between two spaces");
	is_int(mt_zs_word_count("", 0), 1, "''.split(' ') has one element");
	s = "\xc2\xa0x y\xe3\x80\x80";
	mt_zs_strip(s, strlen(s), &b, &n);
	ok(b == 2 && n == 3, "strip removes U+00A0 and U+3000 (got %zu,%zu)", b, n);
	s = "x\xe3\x80\x80y";
	is_int(mt_zs_word_count(s, strlen(s)), 1, "an inner U+3000 is not \" \"");
}

static void test_zeroshot_last_word(void)
{
	const char *s = "He saw the cat.  The cat ran to Anna \n";
	size_t cb, cl, wb, wl;

	ok(mt_zs_last_word(s, strlen(s), &cb, &cl, &wb, &wl) == 0, "a last word");
	ok(wl == 4 && !strncmp(s + wb, "Anna", 4), "the word is 'Anna'");
	ok(cb == 0 && cl == strlen("He saw the cat.  The cat ran to"), "the context is stripped (%zu,%zu)", cb, cl);
	ok(mt_zs_last_word(" \t\n", 3, &cb, &cl, &wb, &wl) == -1, "no word in whitespace");
	s = "word";
	ok(mt_zs_last_word(s, 4, &cb, &cl, &wb, &wl) == 0 && wb == 0 && wl == 4 && cl == 0, "one word: empty context");
}

static void test_zeroshot_cloze_row(void)
{
	int32_t ctx[6] = { 1, 2, 3, 4, 5, 6 }, ans[2] = { 7, 8 }, row[6];
	uint8_t mask[5];
	int64_t dropped;

	ok(mt_zs_cloze_row(ctx, 2, ans, 2, 5, 0, row, mask, &dropped) == 0, "a short row");
	ok(row[0] == 1 && row[2] == 7 && row[3] == 8 && row[4] == 0 && row[5] == 0 && dropped == 0, "context, answer, eod");
	ok(!mask[0] && mask[1] && mask[2] && !mask[3] && !mask[4], "the mask covers the answer's targets");
	ok(mt_zs_cloze_row(ctx, 6, ans, 2, 5, 0, row, mask, &dropped) == 0 && dropped == 2, "a long row loses 2 from the left");
	ok(row[0] == 3 && row[4] == 7 && row[5] == 8 && mask[3] && mask[4] && !mask[2], "the kept tokens and the mask");
	ok(mt_zs_cloze_row(ctx, 0, ans, 0, 5, 0, row, mask, &dropped) == -1, "an empty answer is refused");
}

static void test_ledger_repair_and_lock(void)
{
	char dir[] = "/tmp/mt-ledger-XXXXXX", path[64], buf[256];
	const char *start = "{\"iteration\": 5, \"task\": \"valid\"}\nnot json\n{\"iteration\": 10, \"ta";
	const char *torn = strrchr(start, '\n') + 1;
	struct mt_ledger l, l2;
	struct mt_err e = { 0 };
	int fd;
	ssize_t n;

	if (!mkdtemp(dir)) {
		ok(0, "mkdtemp");
		return;
	}
	snprintf(path, sizeof(path), "%s/ledger.jsonl", dir);
	fd = open(path, O_WRONLY | O_CREAT, 0644);
	n = write(fd, start, strlen(start));
	close(fd);
	ok(n == (ssize_t)strlen(start), "wrote a ledger with a torn last line");
	ok(mt_ledger_open(&l, path, 0, &e) == 0, "open: %s", e.msg);
	is_int(l.repaired, strlen(torn), "the torn line's bytes are cut off");
	is_int(l.ignored, 1, "the line that is not a result is ignored");
	ok(mt_ledger_has(&l, 5, "valid") && !mt_ledger_has(&l, 10, "valid") && !mt_ledger_has(&l, 5, "test"), "keys");
	is_int(mt_ledger_open(&l2, path, 0, &e), 1, "a second open without waiting is told the lock is held");
	ok(mt_ledger_append(&l, 10, "valid", "{\"iteration\": 10, \"task\": \"valid\"}", &e) == 0, "append");
	ok(mt_ledger_has(&l, 10, "valid"), "the appended key");
	mt_ledger_close(&l);
	fd = open(path, O_RDONLY);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	is_str(buf, "{\"iteration\": 5, \"task\": \"valid\"}\nnot json\n{\"iteration\": 10, \"task\": \"valid\"}\n",
	       "the file: old lines, no torn tail, the new line");
	ok(mt_ledger_open(&l2, path, 0, &e) == 0 && mt_ledger_has(&l2, 10, "valid"), "after close the lock is free");
	mt_ledger_close(&l2);
	snprintf(buf, sizeof(buf), "rm -rf '%s'", dir);
	(void)!system(buf);
}

static void detok_is(enum mt_detok k, const char *in, const char *want)
{
	struct mt_err e = { 0 };
	char *out = NULL;
	size_t n;

	ok(mt_detok_apply(k, in, strlen(in), &out, &n, &e) == 0 && n == strlen(out), "detokenize: %s", e.msg);
	is_str(out, want, "%s rules give the expected text", mt_detok_names[k]);
	free(out);
}

static void test_detok_rules(void)
{
	detok_is(MT_DETOK_WIKITEXT, " = = Title = = \n The 1 @,@ 000 cats ( and dogs ) said \" hi \" , and it 's N @-@ 1 . \n",
		 " == Title ==\nThe 1,000 cats (and dogs) said \"hi\", and it's N-1.\n");
	detok_is(MT_DETOK_WIKITEXT, "a { b } [ c ] 20 \xc2\xb0 C", "a {b} [c] 20\xc2\xb0" "C");
	detok_is(MT_DETOK_PTB, "it is n't $ 1 \n N years", "it isn't $1\nN years");
	detok_is(MT_DETOK_PTB, "it is n't $ 1 , N years", "it isn't $1 ,1 years");
	detok_is(MT_DETOK_LAMBADA, "  \xe2\x80\x9chi\xe2\x80\x9d  \n", "\n\"hi\"");
	detok_is(MT_DETOK_NONE, " a , b ", " a , b ");
	is_int(mt_detok_for_path("data/wikitext-103/wiki.test.tokens"), MT_DETOK_WIKITEXT, "wiki in the path");
	is_int(mt_detok_for_path("ptb/wiki.txt"), MT_DETOK_PTB, "ptb first");
	is_int(mt_detok_for_path("lambada_test.jsonl"), MT_DETOK_LAMBADA, "lambada");
	is_int(mt_detok_for_path("text.txt"), MT_DETOK_NONE, "none");
}

int main(void)
{
	test_detok_rules();
	test_zeroshot_windows_cover_once();
	test_zeroshot_window_padding();
	test_zeroshot_words();
	test_zeroshot_last_word();
	test_zeroshot_cloze_row();
	test_ledger_repair_and_lock();
	return tap_done();
}
