/* Unit tests for lib/base/err.c and lib/base/opt.c: messages, exit classes, options. */
#include <errno.h>

#include "base/err.h"
#include "base/opt.h"
#include "tap.h"

static void test_err_set(void)
{
	struct mt_err e = { 0 };
	int r = mt_err_set(&e, MT_EXIT_DATA, "bad '%s'", "x.idx");

	is_int(r, -1, "mt_err_set returns -1");
	is_int(e.code, MT_EXIT_DATA, "code kept");
	is_str(e.msg, "bad 'x.idx'", "message formatted");
	errno = ENOENT;
	mt_err_errno(&e, MT_EXIT_IO, "cannot open '%s'", "f");
	is_str(e.msg, "cannot open 'f': No such file or directory", "errno appended");
	mt_err_prefix(&e, "reading %s", "corpus");
	is_str(e.msg, "reading corpus: cannot open 'f': No such file or directory", "prefix added");
	is_int(mt_err_set(NULL, 1, "x"), -1, "NULL buffer tolerated");
}

static const struct mt_tool_info info = { "mt-test", "a test", NULL, NULL, NULL };
enum { O_KEYS = 256, O_N, O_FLAG, O_OUT };
static const struct mt_option opts[] = {
	{ "json-keys", 0, MT_ARG_LIST, O_KEYS, "KEY", "keys" },
	{ "workers", 0, MT_ARG_REQUIRED, O_N, "N", "workers" },
	{ "append-eod", 0, MT_ARG_NONE, O_FLAG, NULL, "flag" },
	{ "output", 'o', MT_ARG_REQUIRED, O_OUT, "FILE", "out" },
	{ 0 },
};

static void test_opt_order_and_lists(void)
{
	char *argv[] = { "mt-test", "stat", "--json-keys", "text", "title", "--workers=4", "-q",
			 "--append-eod", "pos2", "-o", "out", "--json-keys=a", "b", "--", "--x", NULL };
	struct mt_opt o;
	long long n;
	int id;

	mt_opt_init(&o, &info, opts, 15, argv);
	is_int(mt_opt_next(&o), MT_OPT_ARG, "first positional in place");
	is_str(o.arg, "stat", "positional value");
	is_int(mt_opt_next(&o), O_KEYS, "list option");
	is_int(o.nlist, 2, "list took two values");
	is_str(o.list[1], "title", "second value");
	is_int(mt_opt_next(&o), O_N, "--workers=4");
	ok(mt_opt_long(&o, 1, 64, &n) == 0 && n == 4, "integer parsed");
	is_int(mt_opt_next(&o), O_FLAG, "-q absorbed, switch returned");
	ok(o.quiet, "quiet recorded");
	is_int(mt_opt_next(&o), MT_OPT_ARG, "later positional");
	is_str(o.arg, "pos2", "its value");
	is_int(mt_opt_next(&o), O_OUT, "short option");
	is_str(o.arg, "out", "short option value");
	id = mt_opt_next(&o);
	is_int(id, O_KEYS, "--x=A B list");
	ok(o.nlist == 2 && !strcmp(o.list[0], "a") && !strcmp(o.list[1], "b"), "first value from inside the word");
	is_int(mt_opt_next(&o), MT_OPT_ARG, "after --, options are positionals");
	is_str(o.arg, "--x", "taken literally");
	is_int(mt_opt_next(&o), MT_OPT_END, "end");
	mt_opt_free(&o);
}

static void test_opt_errors(void)
{
	char *a1[] = { "mt-test", "--bogus", NULL };
	char *a2[] = { "mt-test", "--workers", NULL };
	char *a3[] = { "mt-test", "--workers", "many", NULL };
	char *a4[] = { "mt-test", "--help", NULL };
	char *a5[] = { "mt-test", "--json-keys", "-1", "x", "--workers", "0", NULL };
	struct mt_opt o;
	long long n;

	mt_opt_init(&o, &info, opts, 2, a1);
	is_int(mt_opt_next(&o), MT_OPT_ERROR, "unknown option is an error");
	is_str(o.err.msg, "unknown option '--bogus'", "and named");
	is_int(o.err.code, MT_EXIT_USAGE, "usage class");
	mt_opt_free(&o);
	mt_opt_init(&o, &info, opts, 2, a2);
	is_int(mt_opt_next(&o), MT_OPT_ERROR, "missing value is an error");
	is_str(o.err.msg, "option '--workers' needs a value", "and explained");
	mt_opt_free(&o);
	mt_opt_init(&o, &info, opts, 3, a3);
	mt_opt_next(&o);
	is_int(mt_opt_long(&o, 1, 64, &n), -1, "non-integer refused");
	is_str(o.err.msg, "option '--workers': 'many' is not an integer", "with the value");
	mt_opt_free(&o);
	mt_opt_init(&o, &info, opts, 2, a4);
	is_int(mt_opt_next(&o), MT_OPT_HELP, "--help returned");
	mt_opt_free(&o);
	mt_opt_init(&o, &info, opts, 6, a5);
	mt_opt_next(&o);
	is_int(o.nlist, 2, "negative numbers are list values");
	is_int(mt_opt_next(&o), O_N, "next option after list");
	is_int(mt_opt_long(&o, 1, 64, &n), -1, "out of range refused");
	mt_opt_free(&o);
}

int main(void)
{
	test_err_set();
	test_opt_order_and_lists();
	test_opt_errors();
	return tap_done();
}
