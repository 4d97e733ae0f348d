/* tblog.c: mt-train's TensorBoard log (see tblog.h). */
#include "train/tblog.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/progress.h"
#include "base/timers.h"

int mt_tblog_open(struct mt_tblog *tb, const struct mt_tblog_args *a, struct mt_err *err)
{
	memset(tb, 0, sizeof(*tb));
	tb->a = *a;
	if (tb->a.interval <= 0)
		tb->a.interval = 1;
	if (mt_tfevents_open(&tb->w, a->dir, a->queue_size > 0 ? a->queue_size : 1000, err))
		return -1;
	tb->t_last = mt_now();
	return 0;
}

/* tag at the iteration, and "tag vs samples" at the consumed samples */
static int both(struct mt_tblog *tb, const char *tag, double v, const struct mt_tblog_step *s, struct mt_err *err)
{
	char vs[160];

	snprintf(vs, sizeof(vs), "%s vs samples", tag);
	return mt_tfevents_scalar(&tb->w, tag, v, s->iteration, err) ||
	       mt_tfevents_scalar(&tb->w, vs, v, s->consumed_samples, err);
}

static double host_rss(void)
{
	long pages = 0, rss = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (!f)
		return NAN;
	if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
		rss = -1;
	fclose(f);
	return rss < 0 ? NAN : (double)rss * (double)sysconf(_SC_PAGESIZE);
}

int mt_tblog_step(struct mt_tblog *tb, const struct mt_tblog_step *s, struct mt_err *err)
{
	tb->tokens += s->tokens;
	tb->flops += s->flops;
	if (s->mem_bytes > tb->mem_max)
		tb->mem_max = s->mem_bytes;
	if (s->iteration % tb->a.interval == 0) {
		double now = mt_now(), dt = now - tb->t_last;
		int64_t its = s->iteration - tb->it_last;
		if (both(tb, "learning-rate", s->lr, s, err) || both(tb, "batch-size", (double)s->batch_size, s, err) ||
		    (!s->skipped && both(tb, "lm loss", s->loss, s, err)) || both(tb, "loss-scale", s->loss_scale, s, err) ||
		    (!s->skipped && both(tb, "grad-norm", s->grad_norm, s, err)))
			return -1;
		if (dt > 0 && mt_tfevents_scalar(&tb->w, "tokens-per-second", (double)tb->tokens / dt, s->iteration, err))
			return -1;
		if (tb->a.timers && its > 0 && dt > 0 &&
		    (mt_tfevents_scalar(&tb->w, "iteration-time", dt / (double)its, s->iteration, err) ||
		     mt_tfevents_scalar(&tb->w, "throughput", tb->flops / (dt * 1e12 * (s->world > 0 ? s->world : 1)),
					s->iteration, err)))
			return -1;
		for (int k = 0; s->timers && k < MT_T_N; k++) {
			/* Megatron writes a timer that ran somewhere, as "<name>-time" */
			char tag[64];
			if (!(s->timers[k] > 0))
				continue;
			snprintf(tag, sizeof(tag), "%s-time", mt_timer_names[k]);
			if (mt_tfevents_scalar(&tb->w, tag, s->timers[k], s->iteration, err))
				return -1;
		}
		if (tb->a.memory &&
		    (mt_tfevents_scalar(&tb->w, "mem-reserved-bytes", s->mem_bytes, s->iteration, err) ||
		     mt_tfevents_scalar(&tb->w, "mem-allocated-bytes", s->mem_bytes, s->iteration, err) ||
		     mt_tfevents_scalar(&tb->w, "mem-max-allocated-bytes", tb->mem_max, s->iteration, err) ||
		     mt_tfevents_scalar(&tb->w, "mem-host-rss-bytes", host_rss(), s->iteration, err)))
			return -1;
		tb->t_last = now;
		tb->it_last = s->iteration;
		tb->tokens = 0;
		tb->flops = 0;
	}
	if (!isnan(s->valid_loss)) {
		if (both(tb, "lm loss validation", s->valid_loss, s, err))
			return -1;
		if (tb->a.validation_ppl && both(tb, "lm loss validation ppl", exp(fmin(20.0, s->valid_loss)), s, err))
			return -1;
		/* an evaluation is rare and worth seeing at once */
		if (mt_tfevents_flush(&tb->w, err))
			return -1;
	}
	return 0;
}

int mt_tblog_close(struct mt_tblog *tb, struct mt_err *err)
{
	return mt_tfevents_close(&tb->w, err);
}
