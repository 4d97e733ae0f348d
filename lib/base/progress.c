/* progress.c: the terminal progress meter (see progress.h). */
#include "base/progress.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double mt_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void mt_fmt_bytes(char *buf, size_t n, double b)
{
	static const char *const unit[] = { "B", "kB", "MB", "GB", "TB", "PB" };
	int u = 0;

	while (b >= 1000.0 && u < 5) {
		b /= 1000.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, n, "%.0f B", b);
	else
		snprintf(buf, n, "%.*f %s", b < 10 ? 2 : b < 100 ? 1 : 0, b, unit[u]);
}

void mt_fmt_duration(char *buf, size_t n, double s)
{
	long t = (long)(s + 0.5);

	if (s < 0 || s > 1e9)
		snprintf(buf, n, "?");
	else if (t < 60)
		snprintf(buf, n, "%lds", t);
	else if (t < 3600)
		snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
	else
		snprintf(buf, n, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
}

static void fmt_count(char *buf, size_t n, double v)
{
	if (v >= 1e6)
		snprintf(buf, n, "%.1fM", v / 1e6);
	else if (v >= 1e4)
		snprintf(buf, n, "%.1fk", v / 1e3);
	else
		snprintf(buf, n, "%.0f", v);
}

void mt_progress_format(char *buf, size_t n, const struct mt_progress *p, double elapsed,
			int64_t bytes, int64_t items)
{
	char done[32], total[32], rate[32], irate[32], eta[32];
	double dt = elapsed > 1e-6 ? elapsed : 1e-6;
	size_t k;

	mt_fmt_bytes(done, sizeof(done), (double)bytes);
	mt_fmt_bytes(rate, sizeof(rate), (double)bytes / dt);
	if (p->total > 0) {
		double frac = (double)bytes / (double)p->total;
		mt_fmt_bytes(total, sizeof(total), (double)p->total);
		if (bytes > 0)
			mt_fmt_duration(eta, sizeof(eta), elapsed * (1.0 - frac) / frac);
		else
			snprintf(eta, sizeof(eta), "?");
		k = (size_t)snprintf(buf, n, "%s: %s / %s (%.0f%%), %s/s", p->what, done, total,
				     100.0 * frac, rate);
	} else {
		eta[0] = '\0';
		k = (size_t)snprintf(buf, n, "%s: %s, %s/s", p->what, done, rate);
	}
	if (p->item && k < n) {
		fmt_count(irate, sizeof(irate), (double)items / dt);
		k += (size_t)snprintf(buf + k, n - k, ", %s %s/s", irate, p->item);
	}
	if (eta[0] && k < n)
		snprintf(buf + k, n - k, ", eta %s", eta);
}

void mt_progress_init(struct mt_progress *p, const char *what, const char *item,
		      int64_t total_bytes, int quiet)
{
	memset(p, 0, sizeof(*p));
	p->what = what;
	p->item = item;
	p->total = total_bytes;
	p->enabled = !quiet && isatty(STDERR_FILENO);
	p->start = p->last = mt_now();
}

void mt_progress_update(struct mt_progress *p, int64_t bytes, int64_t items)
{
	char line[256];
	double t;

	if (!p->enabled)
		return;
	t = mt_now();
	if (t - p->last < 0.25)
		return;
	p->last = t;
	mt_progress_format(line, sizeof(line), p, t - p->start, bytes, items);
	fprintf(stderr, "\r\033[K%s", line);
	fflush(stderr);
	p->drawn = 1;
}

void mt_progress_done(struct mt_progress *p)
{
	if (p->enabled && p->drawn) {
		fprintf(stderr, "\r\033[K");
		fflush(stderr);
	}
	p->drawn = 0;
}
