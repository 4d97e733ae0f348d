/* dp.c: ordered gradient reduction and ZeRO-1 over host buffers (see dp.h). It knows the
 * parameter table and optim.c's arithmetic, and moves data only through dist.h. */
#include "parallel/dp.h"
#include "base/timers.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void mt_dp_free(struct mt_dp *p)
{
	free(p->pfirst), free(p->cnt), free(p->acc), free(p->recv), free(p->m), free(p->v), free(p->psq);
	memset(p, 0, sizeof(*p));
}

int mt_dp_init(struct mt_dp *p, struct mt_dist *d, const struct mt_params *t, int zero, struct mt_err *err)
{
	int n = d->dp, me = d->dp_rank;
	int64_t len;

	memset(p, 0, sizeof(*p));
	p->d = d;
	p->t = t;
	p->zero = zero;
	p->n = n;
	p->pfirst = calloc((size_t)n + 1, sizeof(int));
	p->cnt = calloc((size_t)n * 4, sizeof(int64_t));
	if (!p->pfirst || !p->cnt)
		goto oom;
	p->dsp = p->cnt + n;
	p->pcnt = p->dsp + n;
	p->pdsp = p->pcnt + n;
	/* whole parameters, each rank's shard starting at the first parameter at or past
	 * r/n of the buffer */
	for (int r = 1; r < n; r++) {
		int i = p->pfirst[r - 1];
		while (i < t->n && t->p[i].offset < (int64_t)((double)t->total * r / n))
			i++;
		p->pfirst[r] = i;
	}
	p->pfirst[n] = t->n;
	for (int r = 0; r < n; r++) {
		int a = p->pfirst[r], b = p->pfirst[r + 1];
		p->dsp[r] = a < t->n ? t->p[a].offset : t->total;
		p->cnt[r] = (b < t->n ? t->p[b].offset : t->total) - p->dsp[r];
		p->pdsp[r] = a;
		p->pcnt[r] = b - a;
	}
	p->lo = p->dsp[me];
	p->hi = p->lo + p->cnt[me];
	len = p->hi - p->lo;
	p->acc = malloc((size_t)(len ? len : 1) * sizeof(float));
	p->recv = malloc((size_t)(len ? len : 1) * (size_t)n * sizeof(float));
	p->psq = calloc((size_t)t->n + 1, sizeof(double));
	if (!p->acc || !p->recv || !p->psq)
		goto oom;
	if (zero) {
		p->m = calloc((size_t)(len ? len : 1), sizeof(float));
		p->v = calloc((size_t)(len ? len : 1), sizeof(float));
		if (!p->m || !p->v)
			goto oom;
	}
	return 0;
oom:
	mt_dp_free(p);
	return mt_err_set(err, MT_EXIT_IO, "out of memory for the data-parallel buffers");
}

int64_t mt_dp_bytes(const struct mt_dp *p)
{
	return (p->hi - p->lo) * (int64_t)sizeof(float) * (1 + p->n + (p->zero ? 2 : 0));
}

void mt_dp_begin(struct mt_dp *p)
{
	memset(p->acc, 0, (size_t)(p->hi - p->lo) * sizeof(float));
}

int mt_dp_accumulate(struct mt_dp *p, const float *g, int64_t step, struct mt_err *err)
{
	int64_t len = p->hi - p->lo;
	double t0 = p->timers && p->n > 1 ? mt_now() : 0;

	if (p->n == 1) {
		#pragma omp parallel for schedule(static) if (len >= 65536)
		for (int64_t i = 0; i < len; i++)
			p->acc[i] = p->acc[i] + g[i];
		return 0;
	}
	/* a heartbeat first: a rank that died or hangs in its backward pass is named by rank 0
	 * (one small message per rank and micro-batch, against a whole gradient) */
	{
		int x;
		if (mt_dist_agree(p->d, step, 0, &x, err))
			return -1;
	}
	if (mt_dist_alltoallv_f32(p->d, g, p->cnt, p->dsp, p->recv, len, "the gradient exchange", step, err))
		return -1;
	/* rank order is the global micro-batch order */
	for (int q = 0; q < p->n; q++) {
		const float *x = p->recv + (int64_t)q * len;
		#pragma omp parallel for schedule(static) if (len >= 65536)
		for (int64_t i = 0; i < len; i++)
			p->acc[i] = p->acc[i] + x[i];
	}
	mt_timer_add(p->timers, MT_T_ALL_GRADS_SYNC, t0);
	return 0;
}

int mt_dp_allgather_grads(struct mt_dp *p, float *g, int64_t step, struct mt_err *err)
{
	double t0 = p->timers && p->n > 1 ? mt_now() : 0;

	memcpy(g + p->lo, p->acc, (size_t)(p->hi - p->lo) * sizeof(float));
	if (mt_dist_allgatherv_f32(p->d, g, p->cnt, p->dsp, "the gradient gather", step, err))
		return -1;
	mt_timer_add(p->n > 1 ? p->timers : NULL, MT_T_ALL_GRADS_SYNC, t0);
	return 0;
}

static void scale(float *x, int64_t n, float s)
{
	#pragma omp parallel for schedule(static) if (n >= 65536)
	for (int64_t i = 0; i < n; i++)
		x[i] = x[i] * s;
}

int mt_dp_zero_clip(struct mt_dp *p, float s, double max_norm, double *norm, int *nonfinite, int64_t step,
		    struct mt_err *err)
{
	const struct mt_params *t = p->t;
	int64_t len = p->hi - p->lo;
	int a = p->pfirst[p->d->dp_rank], b = p->pfirst[p->d->dp_rank + 1];
	double bad = 0, sum = 0, t0 = p->timers ? mt_now() : 0;

	if (s != 1.0f)
		scale(p->acc, len, s);
	for (int64_t i = 0; i < len && !bad; i++) {
		uint32_t u;
		memcpy(&u, &p->acc[i], sizeof(u));
		bad = (u & 0x7f800000u) == 0x7f800000u;
	}
	if (mt_dist_allreduce_f64(p->d, &bad, 1, 1, "the finiteness check", step, err))
		return -1;
	if (mt_tp_on(p->tp) && p->tp->allreduce_f64(p->tp->ctx, &bad, 1, 1))
		return mt_err_set(err, MT_EXIT_IO, "%s: the tensor-parallel finiteness check at step %lld failed",
				  p->d->where, (long long)step);
	*nonfinite = bad != 0;
	*norm = 0;
	if (*nonfinite) {
		mt_timer_add(p->timers, MT_T_OPTIMIZER_CLIP, t0);
		return 0;
	}
	for (int i = a; i < b; i++)
		p->psq[i] = mt_grad_sumsq_param(p->acc + (t->p[i].offset - p->lo), t->p[i].numel);
	if (mt_dist_allgatherv_f64(p->d, p->psq, p->pcnt, p->pdsp, "the gradient norm", step, err))
		return -1;
	/* each replica once over the tensor-parallel group (params.h norm_skip) */
	for (int i = 0; i < t->n; i++)
		if (!t->p[i].norm_skip)
			sum += p->psq[i];
	if (mt_tp_on(p->tp) && p->tp->allreduce_f64(p->tp->ctx, &sum, 1, 0))
		return mt_err_set(err, MT_EXIT_IO, "%s: the tensor-parallel gradient norm at step %lld failed", p->d->where,
				  (long long)step);
	*norm = sqrt(sum);
	if (max_norm > 0) {
		double coeff = mt_grad_clip_coeff(*norm, max_norm);
		if (coeff < 1.0)
			scale(p->acc, len, (float)coeff);
	}
	mt_timer_add(p->timers, MT_T_OPTIMIZER_CLIP, t0);
	return 0;
}

int mt_dp_zero_update(struct mt_dp *p, float *w, struct mt_adamw *o, double lr, int64_t step, struct mt_err *err)
{
	const struct mt_params *t = p->t;
	int a = p->pfirst[p->d->dp_rank], b = p->pfirst[p->d->dp_rank + 1];
	double t0 = p->timers ? mt_now() : 0;
	struct mt_adamw_coef c;

	o->step++;
	o->lr = lr;
	mt_adamw_coef(o, lr, o->step, &c);
	for (int i = a; i < b; i++) {
		const struct mt_param *q = &t->p[i];
		int64_t off = q->offset - p->lo;
		mt_adamw_update(&c, q->weight_decay, w + q->offset, p->acc + off, p->m + off, p->v + off, q->numel);
	}
	mt_timer_add(p->timers, MT_T_OPTIMIZER_INNER, t0);
	t0 = p->timers ? mt_now() : 0;
	if (mt_dist_allgatherv_f32(p->d, w, p->cnt, p->dsp, "the parameter gather", step, err))
		return -1;
	mt_timer_add(p->timers, MT_T_PARAMS_ALL_GATHER, t0);
	return 0;
}

int mt_dp_zero_step(struct mt_dp *p, float *w, struct mt_adamw *o, double lr, float s, double max_norm,
		    double *norm, int *nonfinite, int64_t step, struct mt_err *err)
{
	if (mt_dp_zero_clip(p, s, max_norm, norm, nonfinite, step, err))
		return -1;
	return *nonfinite || !o ? 0 : mt_dp_zero_update(p, w, o, lr, step, err);
}

void mt_dp_set_moments(struct mt_dp *p, const float *m, const float *v)
{
	size_t n = (size_t)(p->hi - p->lo) * sizeof(float);

	if (!p->zero)
		return;
	if (m)
		memcpy(p->m, m + p->lo, n);
	else
		memset(p->m, 0, n);
	if (v)
		memcpy(p->v, v + p->lo, n);
	else
		memset(p->v, 0, n);
}

int mt_dp_gather_moments(struct mt_dp *p, float *m, float *v, int64_t step, struct mt_err *err)
{
	size_t n = (size_t)(p->hi - p->lo) * sizeof(float);

	memcpy(m + p->lo, p->m, n);
	memcpy(v + p->lo, p->v, n);
	if (mt_dist_gatherv_f32(p->d, m, p->cnt, p->dsp, "the optimizer-state gather", step, err))
		return -1;
	return mt_dist_gatherv_f32(p->d, v, p->cnt, p->dsp, "the optimizer-state gather", step, err);
}
