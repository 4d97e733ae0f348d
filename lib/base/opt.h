/* opt.h: command-line options on getopt_long, described once in a table.
 *
 * A tool lists its options as `struct mt_option` rows; the same table drives
 * getopt_long and the --help text, so the two cannot drift apart. The options
 * every tool shares (-h/--help, --version, -q/--quiet, -v/--verbose) are added
 * here. Arguments are returned in command-line order, positionals included,
 * which lets subcommand tools and Megatron-style list options
 * (`--json-keys text title`, nargs='+') work. Nothing here prints or exits:
 * problems come back as MT_OPT_ERROR with the message in `o->err`. */
#ifndef MT_OPT_H
#define MT_OPT_H

#include <getopt.h>
#include <stdio.h>

#include "base/err.h"

enum mt_arg {
	MT_ARG_NONE,     /* a switch */
	MT_ARG_REQUIRED, /* exactly one value: --x V or --x=V */
	MT_ARG_LIST,     /* one or more values: --x A B C (Megatron's nargs='+') */
};

struct mt_option {
	const char *name;    /* long name without dashes, kebab-case */
	int shortopt;        /* 0, or one of h q v o (STYLE.md point 7) */
	enum mt_arg arg;
	int id;              /* returned by mt_opt_next; use values >= 256 */
	const char *argname; /* shown in help, e.g. "FILE" */
	const char *help;    /* lowercase, no trailing full stop */
};

/* What a tool tells --help and --version about itself. */
struct mt_tool_info {
	const char *name;                /* "mt-tokenize" */
	const char *summary;             /* one line */
	const char *const *synopsis;     /* NULL-terminated usage lines (git's grammar) */
	const char *description;         /* optional paragraph after the synopsis */
	const char *doc;                 /* "docs/mt-tokenize.md" */
};

enum {
	MT_OPT_END = -1,     /* no more arguments */
	MT_OPT_HELP = -2,    /* -h / --help */
	MT_OPT_VERSION = -3, /* --version */
	MT_OPT_ERROR = -4,   /* message in o->err */
	MT_OPT_ARG = 1,      /* a positional argument, in o->arg */
};

struct mt_opt {
	const struct mt_tool_info *tool;
	const struct mt_option *opts;
	int nopts;
	int argc;
	char **argv;
	struct option *longopts;
	char *shortopts;
	const struct mt_option *cur; /* row of the option just returned */
	const char *arg;             /* its value (first value of a list) */
	char **list;                 /* MT_ARG_LIST: the values (valid until mt_opt_free) */
	int nlist;
	char **listbuf;              /* storage for all lists */
	int nlistbuf;
	int quiet;                   /* -q seen */
	int verbose;                 /* number of -v seen */
	int done_options;            /* "--" seen: the rest are positionals */
	struct mt_err err;
};

int mt_opt_init(struct mt_opt *o, const struct mt_tool_info *tool,
		const struct mt_option *opts, int argc, char **argv);
/* Next option id, MT_OPT_ARG for a positional, or one of MT_OPT_END,
 * MT_OPT_HELP, MT_OPT_VERSION, MT_OPT_ERROR. -q and -v are absorbed. */
int mt_opt_next(struct mt_opt *o);
void mt_opt_free(struct mt_opt *o);

/* Usage lines only ("usage: ..."), then the full help with every option. */
void mt_opt_print_usage(const struct mt_opt *o, FILE *f);
void mt_opt_print_help(const struct mt_opt *o, FILE *f);

/* Value parsers for the current option's argument: on a bad value they set
 * o->err ("option '--x': ...") and return -1. */
int mt_opt_long(struct mt_opt *o, long long min, long long max, long long *out);
int mt_opt_double(struct mt_opt *o, double *out);

/* Parse a whole string as a number; 0 on success, -1 if it is not one. */
int mt_parse_ll(const char *s, long long *out);
int mt_parse_double(const char *s, double *out);

#endif
