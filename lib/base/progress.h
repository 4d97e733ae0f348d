/* progress.h: a one-line progress meter on stderr for long work.
 *
 * Shows bytes done (of a total when known), the byte rate, an item rate
 * ("docs/s") and an ETA, redrawn in place at most a few times a second. It is
 * silent unless stderr is a terminal, and when the tool runs with -q. Final
 * summaries are the tool's business (they go to stderr whether or not a tty). */
#ifndef MT_PROGRESS_H
#define MT_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

struct mt_progress {
	int enabled;
	const char *what;      /* prefix, e.g. "mt-tokenize" */
	const char *item;      /* item name for the rate, e.g. "docs"; NULL for none */
	int64_t total;         /* total bytes, -1 if unknown */
	double start, last;    /* seconds, monotonic */
	int drawn;             /* something is on the line */
};

double mt_now(void); /* monotonic seconds */

void mt_progress_init(struct mt_progress *p, const char *what, const char *item,
		      int64_t total_bytes, int quiet);
void mt_progress_update(struct mt_progress *p, int64_t bytes, int64_t items);
/* Clear the line so later messages start on a clean line. */
void mt_progress_done(struct mt_progress *p);

/* The line itself, for tests: elapsed seconds since start. */
void mt_progress_format(char *buf, size_t n, const struct mt_progress *p, double elapsed,
			int64_t bytes, int64_t items);
/* Human sizes and durations: "1.5 GB", "3m05s". */
void mt_fmt_bytes(char *buf, size_t n, double bytes);
void mt_fmt_duration(char *buf, size_t n, double seconds);

#endif
