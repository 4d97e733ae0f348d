/* tap.h: a tiny TAP producer for C unit tests (tests/unit/test_<module>.c).
 *
 * Each check prints "ok N - what" or "not ok N - what" with the file and line
 * of a failure; tap_done() prints the plan and returns the exit status. The
 * runner (tests/run.sh) counts the lines. Header-only on purpose: it is test
 * scaffolding, not part of libmt. */
#ifndef MT_TAP_H
#define MT_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int tap_n, tap_failed;

static inline int tap_ok(int cond, const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	tap_n++;
	printf("%s %d - ", cond ? "ok" : "not ok", tap_n);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	if (!cond) {
		tap_failed++;
		printf("#   failed at %s:%d\n", file, line);
	}
	fflush(stdout);
	return cond;
}

static inline void tap_skip(const char *why, const char *what)
{
	printf("ok %d - %s # skip %s\n", ++tap_n, what, why);
}

#define ok(cond, ...) tap_ok(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
#define is_int(got, want, ...)                                                                   \
	do {                                                                                     \
		long long g_ = (long long)(got), w_ = (long long)(want);                         \
		if (!ok(g_ == w_, __VA_ARGS__))                                                  \
			printf("#   got %lld, want %lld\n", g_, w_);                                 \
	} while (0)
#define is_str(got, want, ...)                                                                   \
	do {                                                                                     \
		const char *g_ = (got), *w_ = (want);                                            \
		if (!ok(g_ && w_ && strcmp(g_, w_) == 0, __VA_ARGS__))                           \
			printf("#   got '%s', want '%s'\n", g_ ? g_ : "(null)", w_ ? w_ : "(null)"); \
	} while (0)
#define like(got, needle, ...)                                                                   \
	do {                                                                                     \
		const char *g_ = (got), *n_ = (needle);                                          \
		if (!ok(g_ && strstr(g_, n_), __VA_ARGS__))                                      \
			printf("#   '%s' does not contain '%s'\n", g_ ? g_ : "(null)", n_);          \
	} while (0)

static inline int tap_done(void)
{
	printf("1..%d\n", tap_n);
	return tap_failed ? 1 : 0;
}

#endif
