/* tool.h: what every mt-* binary shares and the library may not do: print
 * fatal errors, choose exit codes, handle --help/--version, install the
 * signal handlers that remove temporary output. Linked into each tool. */
#ifndef MT_TOOL_H
#define MT_TOOL_H

#include "base/err.h"
#include "base/opt.h"

/* Set the log prefix and signal handlers; call first in main(). */
void mt_tool_start(const struct mt_tool_info *t);

/* Handle the ids every tool treats the same (help, version, errors). Returns for
 * any other id. --version with -v (before or after it) also prints the table of MT_*
 * environment variables (base/knobs.h): each one's value or default and meaning. */
void mt_tool_common(struct mt_opt *o, int id);
/* Tools with a command word first (mt-index stat, mt-blend plan, mt-ckpt-reshard merge,
 * mt-tokenize train): the options every tool has and that take no value (-q, -v,
 * --quiet, --verbose) may come before the command word too; when the first other
 * argument is one of `words` (NULL-terminated), moves it to argv[1], the rest in order. */
void mt_tool_command_first(int argc, char **argv, const char *const *words);

/* "mt-x: error: <msg>" on stderr, then exit with `code`. */
__attribute__((noreturn, format(printf, 2, 3))) void mt_die(int code, const char *fmt, ...);
/* Exit with the error's class; a usage error also gets the --help hint. */
__attribute__((noreturn)) void mt_die_err(const struct mt_err *e);
/* A usage error: the message, the usage lines and a hint, exit 2. */
__attribute__((noreturn, format(printf, 2, 3))) void mt_die_usage(const struct mt_opt *o,
								      const char *fmt, ...);

/* The current option's argument as an integer in [min, max], or as a real number; a
 * bad value is a usage error naming the option (mt_die_usage). */
long long mt_tool_num(struct mt_opt *o, long long min, long long max);
double mt_tool_real(struct mt_opt *o);

/* For a tool whose feature has not landed: parse the common options, then say
 * so and exit 2. Never pretends to work. */
__attribute__((noreturn)) void mt_tool_unavailable(const struct mt_tool_info *t, int argc,
						   char **argv);

#endif
