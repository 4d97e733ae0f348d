/* opt.c: table-driven getopt_long wrapper (see opt.h).
 *
 * getopt_long runs in RETURN_IN_ORDER mode ("-" at the start of optstring) so
 * positionals come back in place instead of being permuted to the end; that is
 * what lets a list option swallow the values that follow it. */
#include "base/opt.h"

#include "base/log.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const struct mt_option common_opts[] = {
	{ "help", 'h', MT_ARG_NONE, MT_OPT_HELP, NULL, "show this help and exit" },
	{ "version", 0, MT_ARG_NONE, MT_OPT_VERSION, NULL, "show the version and build features and exit" },
	{ "quiet", 'q', MT_ARG_NONE, -100, NULL, "only print errors; no progress meter" },
	{ "verbose", 'v', MT_ARG_NONE, -101, NULL, "print more detail (repeat for debug output)" },
};
#define NCOMMON ((int)(sizeof(common_opts) / sizeof(common_opts[0])))

static const struct mt_option *row(const struct mt_opt *o, int i)
{
	return i < o->nopts ? &o->opts[i] : &common_opts[i - o->nopts];
}

int mt_opt_init(struct mt_opt *o, const struct mt_tool_info *tool,
		const struct mt_option *opts, int argc, char **argv)
{
	int n = 0, i, k = 0;

	memset(o, 0, sizeof(*o));
	while (opts && opts[n].name)
		n++;
	o->tool = tool;
	o->opts = opts;
	o->nopts = n;
	o->argc = argc;
	o->argv = argv;
	o->longopts = calloc((size_t)(n + NCOMMON + 1), sizeof(struct option));
	o->shortopts = calloc((size_t)(2 * (n + NCOMMON) + 3), 1);
	o->listbuf = calloc((size_t)argc + 1, sizeof(char *));
	if (!o->longopts || !o->shortopts || !o->listbuf)
		return mt_err_set(&o->err, MT_EXIT_IO, "out of memory");
	o->shortopts[k++] = '-'; /* positionals in order */
	o->shortopts[k++] = ':'; /* report a missing argument as ':' */
	for (i = 0; i < n + NCOMMON; i++) {
		const struct mt_option *r = row(o, i);
		o->longopts[i].name = r->name;
		o->longopts[i].has_arg = r->arg == MT_ARG_NONE ? no_argument : required_argument;
		o->longopts[i].flag = NULL;
		o->longopts[i].val = 1000 + i; /* index into the table, offset */
		if (r->shortopt) {
			o->shortopts[k++] = (char)r->shortopt;
			if (r->arg != MT_ARG_NONE)
				o->shortopts[k++] = ':';
		}
	}
	optind = 0; /* 0, not 1: glibc then resets its whole state */
	opterr = 0;
	return 0;
}

/* A token continues a list unless it looks like an option. "-" (stdin) and
 * negative numbers are values, as in argparse. */
static int is_list_value(const char *s)
{
	double d;

	if (s[0] != '-' || s[1] == '\0')
		return 1;
	return mt_parse_double(s, &d) == 0;
}

static int find_short(const struct mt_opt *o, int c)
{
	for (int i = 0; i < o->nopts + NCOMMON; i++)
		if (row(o, i)->shortopt == c)
			return i;
	return -1;
}

int mt_opt_next(struct mt_opt *o)
{
	for (;;) {
		int c, idx;
		const struct mt_option *r;

		o->cur = NULL;
		o->arg = NULL;
		o->list = NULL;
		o->nlist = 0;
		if (o->done_options) {
			if (optind >= o->argc)
				return MT_OPT_END;
			o->arg = o->argv[optind++];
			return MT_OPT_ARG;
		}
		c = getopt_long(o->argc, o->argv, o->shortopts, o->longopts, NULL);
		if (c == -1) {
			/* "--" or the end: anything left is positional */
			o->done_options = 1;
			continue;
		}
		if (c == 1) {
			o->arg = optarg;
			return MT_OPT_ARG;
		}
		if (c == '?') {
			const char *bad = o->argv[optind - 1];
			if (optopt && optopt < 1000)
				return mt_err_set(&o->err, MT_EXIT_USAGE, "unknown option '-%c'", optopt), MT_OPT_ERROR;
			return mt_err_set(&o->err, MT_EXIT_USAGE, "unknown option '%s'", bad), MT_OPT_ERROR;
		}
		if (c == ':') {
			const char *bad = o->argv[optind - 1];
			if (optopt >= 1000)
				bad = o->longopts[optopt - 1000].name, c = 0;
			if (optopt && optopt < 1000)
				return mt_err_set(&o->err, MT_EXIT_USAGE, "option '-%c' needs a value", optopt), MT_OPT_ERROR;
			return mt_err_set(&o->err, MT_EXIT_USAGE, "option '%s%s' needs a value",
					  c == 0 ? "--" : "", bad), MT_OPT_ERROR;
		}
		idx = c >= 1000 ? c - 1000 : find_short(o, c);
		if (idx < 0)
			return mt_err_set(&o->err, MT_EXIT_USAGE, "unknown option '-%c'", c), MT_OPT_ERROR;
		r = row(o, idx);
		o->cur = r;
		/* -q and -v set the log level here, wherever they stand */
		if (r->id == -100) {
			o->quiet = 1;
			mt_log_set_level(MT_LOG_ERROR);
			continue;
		}
		if (r->id == -101) {
			o->verbose++;
			if (!o->quiet && o->verbose > 1)
				mt_log_set_level(MT_LOG_DEBUG);
			continue;
		}
		o->arg = optarg;
		if (r->arg == MT_ARG_LIST) {
			/* first value from getopt (it may sit inside "--x=A"),
			 * then every following token that is not an option */
			int more = 0;
			while (optind + more < o->argc && is_list_value(o->argv[optind + more]))
				more++;
			/* values are copied into listbuf, which has room for
			 * all of argv, so every list stays valid until free */
			o->list = o->listbuf + o->nlistbuf;
			o->list[0] = optarg;
			for (int k = 0; k < more; k++)
				o->list[k + 1] = o->argv[optind + k];
			optind += more;
			o->nlist = more + 1;
			o->nlistbuf += o->nlist;
		}
		return r->id;
	}
}

void mt_opt_free(struct mt_opt *o)
{
	free(o->longopts);
	free(o->shortopts);
	free(o->listbuf);
	o->listbuf = NULL;
	o->longopts = NULL;
	o->shortopts = NULL;
}

void mt_opt_print_usage(const struct mt_opt *o, FILE *f)
{
	const char *const *s = o->tool->synopsis;

	for (int i = 0; s && s[i]; i++)
		fprintf(f, "%s %s %s\n", i == 0 ? "usage:" : "   or:", o->tool->name, s[i]);
}

void mt_opt_print_help(const struct mt_opt *o, FILE *f)
{
	mt_opt_print_usage(o, f);
	fprintf(f, "\n%s: %s\n", o->tool->name, o->tool->summary);
	if (o->tool->description)
		fprintf(f, "\n%s\n", o->tool->description);
	for (int i = 0; i < o->nopts + NCOMMON; i++) {
		const struct mt_option *r = row(o, i);
		char left[128], sh[8] = "    ";
		int n;

		if (i == 0 && o->nopts)
			fprintf(f, "\noptions:\n");
		if (i == o->nopts)
			fprintf(f, "\ncommon options:\n");
		if (r->shortopt)
			snprintf(sh, sizeof(sh), "-%c, ", r->shortopt);
		n = snprintf(left, sizeof(left), "  %s--%s%s%s%s", sh, r->name,
			     r->argname ? " " : "", r->argname ? r->argname : "",
			     r->arg == MT_ARG_LIST ? "..." : "");
		if (n < 32)
			fprintf(f, "%-32s %s\n", left, r->help);
		else
			fprintf(f, "%s\n%-32s %s\n", left, "", r->help);
	}
	if (o->tool->doc)
		fprintf(f, "\nexit status: 0 ok, 1 check failed, 2 usage, 3 bad data, 4 i/o or environment\n"
			   "see %s for the full manual\n", o->tool->doc);
}

int mt_parse_ll(const char *s, long long *out)
{
	char *end;
	long long v;

	if (!s || !*s)
		return -1;
	errno = 0;
	v = strtoll(s, &end, 0);
	if (errno || *end)
		return -1;
	*out = v;
	return 0;
}

int mt_parse_double(const char *s, double *out)
{
	char *end;
	double v;

	if (!s || !*s)
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || isnan(v))
		return -1;
	*out = v;
	return 0;
}

static const char *cur_name(const struct mt_opt *o)
{
	return o->cur ? o->cur->name : "?";
}

int mt_opt_long(struct mt_opt *o, long long min, long long max, long long *out)
{
	long long v;

	if (mt_parse_ll(o->arg, &v))
		return mt_err_set(&o->err, MT_EXIT_USAGE, "option '--%s': '%s' is not an integer",
				  cur_name(o), o->arg ? o->arg : "");
	if (v < min || v > max)
		return mt_err_set(&o->err, MT_EXIT_USAGE, "option '--%s': %lld is out of range [%lld, %lld]",
				  cur_name(o), v, min, max);
	*out = v;
	return 0;
}

int mt_opt_double(struct mt_opt *o, double *out)
{
	if (mt_parse_double(o->arg, out))
		return mt_err_set(&o->err, MT_EXIT_USAGE, "option '--%s': '%s' is not a number",
				  cur_name(o), o->arg ? o->arg : "");
	/* no option takes inf or nan: "--lr inf" is a typo or a test, never a setting */
	if (!isfinite(*out))
		return mt_err_set(&o->err, MT_EXIT_USAGE, "option '--%s': '%s' is not a finite number",
				  cur_name(o), o->arg);
	return 0;
}
