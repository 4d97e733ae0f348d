/* err.h: error reporting into a buffer the caller owns.
 *
 * The library never prints fatal errors and never exits. A function that can
 * fail takes a `struct mt_err *`, fills it with a one-line message and an exit
 * class, and returns -1 (or NULL). Only the tools in bin/ print the message and
 * turn the class into an exit code (docs/conventions.md). */
#ifndef MT_ERR_H
#define MT_ERR_H

#include <stdarg.h>

/* Exit codes shared by every tool (STYLE.md point 9). */
enum {
	MT_EXIT_OK = 0,
	MT_EXIT_FALSE = 1, /* a negative answer: a check failed */
	MT_EXIT_USAGE = 2, /* bad command line */
	MT_EXIT_DATA = 3,  /* bad input data */
	MT_EXIT_IO = 4,    /* environment or I/O failure */
};

#define MT_ERR_LEN 1024

struct mt_err {
	int code;              /* one of MT_EXIT_*; 0 when no error is set */
	char msg[MT_ERR_LEN];  /* lowercase, no trailing newline */
};

/* Set the error and return -1, so callers can write `return mt_err_set(...)`. */
int mt_err_set(struct mt_err *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int mt_err_vset(struct mt_err *err, int code, const char *fmt, va_list ap);
/* As mt_err_set, appending ": strerror(errno)" (errno read on entry). */
int mt_err_errno(struct mt_err *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Prefix an existing message with more context: "ctx: old message". */
int mt_err_prefix(struct mt_err *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void mt_err_clear(struct mt_err *err);

#endif
