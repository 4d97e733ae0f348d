/* ppsched.c: the pipeline schedules' generators (see ppsched.h). Each generator writes
 * the compute actions of one stage in order; one pass then adds the transfers around
 * them and counts the micro-batches in flight. Nothing here runs anything. */
#include "parallel/ppsched.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[] = { "1f1b", "interleaved", "zb-h1" };

const char *mt_pp_kind_name(enum mt_pp_kind kind)
{
	return (unsigned)kind < 3 ? kind_names[kind] : "?";
}

int mt_pp_kind_parse(const char *name)
{
	for (int k = 0; k < 3; k++)
		if (!strcmp(name, kind_names[k]))
			return k;
	return -1;
}

int mt_pp_sched_check(enum mt_pp_kind kind, int p, int v, int m, int G, struct mt_err *err)
{
	if (p < 1 || v < 1 || m < 1)
		return mt_err_set(err, MT_EXIT_USAGE, "a pipeline of %d stages, %d chunks each and %d micro-batches", p, v, m);
	if (kind != MT_PP_INTERLEAVED && v != 1)
		return mt_err_set(err, MT_EXIT_USAGE,
				  "--pipeline-schedule %s runs one model chunk a stage: it does not take virtual stages "
				  "(--num-layers-per-virtual-pipeline-stage)", mt_pp_kind_name(kind));
	if (kind != MT_PP_INTERLEAVED)
		return 0;
	if (p < 2 || v < 2)
		return mt_err_set(err, MT_EXIT_USAGE,
				  "--pipeline-schedule interleaved needs --pipeline-model-parallel-size of 2 or more and 2 or "
				  "more virtual stages a rank (--num-layers-per-virtual-pipeline-stage), not %d and %d", p, v);
	if (G <= 0)
		G = p;
	/* Megatron's rule (schedules.py): groups of G micro-batches, p <= G <= m, and a last
	 * group shorter than G still holds at least p */
	if (G < p || G > m)
		return mt_err_set(err, MT_EXIT_USAGE,
				  "the interleaved schedule needs --pipeline-model-parallel-size %d <= "
				  "--microbatch-group-size-per-virtual-pipeline-stage %d <= micro-batches per step %d (global "
				  "batch / (micro-batch x data-parallel size))", p, G, m);
	if (m % G != 0 && m % G < p)
		return mt_err_set(err, MT_EXIT_USAGE,
				  "the interleaved schedule needs the micro-batches per step (%d) to be a multiple of the group "
				  "of %d (--microbatch-group-size-per-virtual-pipeline-stage, default "
				  "--pipeline-model-parallel-size) or to leave a last group of at least %d", m, G, p);
	return 0;
}

struct list {
	struct mt_pp_action *a;
	int n, cap, failed;
};

static void push(struct list *l, int op, int chunk, int mb)
{
	if (l->n == l->cap) {
		struct mt_pp_action *na = realloc(l->a, (size_t)(l->cap = l->cap ? 2 * l->cap : 64) * sizeof(*na));
		if (!na) {
			l->failed = 1;
			return;
		}
		l->a = na;
	}
	l->a[l->n++] = (struct mt_pp_action){ op, chunk, mb };
}

/* Megatron's schedule table: virtual micro-batch k as (micro-batch, chunk) */
static void table_entry(int m, int v, int G, int k, int *mb, int *chunk)
{
	int g0 = k / (G * v) * G, size = g0 + G >= m ? m - g0 : G, r = k - g0 * v;

	*chunk = r / size;
	*mb = g0 + r % size;
}

static void gen_1f1b(const struct mt_pp_sched *s, struct list *l)
{
	int m = s->m, w = s->warmup;

	for (int i = 0; i < w; i++)
		push(l, MT_PP_FWD, 0, i);
	for (int i = 0; i < m - w; i++) {
		push(l, MT_PP_FWD, 0, w + i);
		push(l, MT_PP_BWD, 0, i);
	}
	for (int i = m - w; i < m; i++)
		push(l, MT_PP_BWD, 0, i);
}

static void gen_interleaved(const struct mt_pp_sched *s, struct list *l)
{
	int N = s->m * s->v, w = s->warmup, mb, c;

	for (int k = 0; k < N; k++) {
		if (k < w) {
			table_entry(s->m, s->v, s->group, k, &mb, &c);
			push(l, MT_PP_FWD, c, mb);
			continue;
		}
		/* steady state: forward k, then backward k - w; then the cool-down */
		table_entry(s->m, s->v, s->group, k, &mb, &c);
		push(l, MT_PP_FWD, c, mb);
		table_entry(s->m, s->v, s->group, k - w, &mb, &c);
		push(l, MT_PP_BWD, s->v - 1 - c, mb);
	}
	for (int k = N - w; k < N; k++) {
		table_entry(s->m, s->v, s->group, k, &mb, &c);
		push(l, MT_PP_BWD, s->v - 1 - c, mb);
	}
}

/* 1F1B's order of forwards and input-gradient passes; the weight-gradient pass of
 * micro-batch j follows the B pass of j + r on stage r (its deferred ones last) */
static void gen_zbh1(const struct mt_pp_sched *s, struct list *l)
{
	int m = s->m, w = s->warmup, r = s->rank, next_w = 0;

	for (int i = 0; i < w; i++)
		push(l, MT_PP_FWD, 0, i);
	for (int i = 0; i < m; i++) {
		if (i < m - w)
			push(l, MT_PP_FWD, 0, w + i);
		push(l, MT_PP_BWD_INPUT, 0, i);
		if (i - r >= 0)
			push(l, MT_PP_BWD_WEIGHT, 0, next_w++);
	}
	while (next_w < m)
		push(l, MT_PP_BWD_WEIGHT, 0, next_w++);
}

static int is_compute(int op) { return op <= MT_PP_BWD_WEIGHT; }

/* the receive a compute action waits for, if any (-1 none) */
static int recv_of(const struct mt_pp_sched *s, const struct mt_pp_action *x)
{
	int vs = mt_pp_vstage(s, x->chunk), last = s->p * s->v - 1;

	if (x->op == MT_PP_FWD && vs > 0)
		return MT_PP_RECV_FWD;
	if ((x->op == MT_PP_BWD || x->op == MT_PP_BWD_INPUT) && vs < last)
		return MT_PP_RECV_BWD;
	return -1;
}

static int send_of(const struct mt_pp_sched *s, const struct mt_pp_action *x)
{
	int vs = mt_pp_vstage(s, x->chunk), last = s->p * s->v - 1;

	if (x->op == MT_PP_FWD && vs < last)
		return MT_PP_SEND_FWD;
	if ((x->op == MT_PP_BWD || x->op == MT_PP_BWD_INPUT) && vs > 0)
		return MT_PP_SEND_BWD;
	return -1;
}

int mt_pp_sched_make(struct mt_pp_sched *s, enum mt_pp_kind kind, int p, int v, int m, int rank, int G,
		     int forward_only, struct mt_err *err)
{
	struct list c = { 0 }, l = { 0 };
	int *live = NULL;

	memset(s, 0, sizeof(*s));
	if (mt_pp_sched_check(kind, p, v, m, G, err))
		return -1;
	if (rank < 0 || rank >= p)
		return mt_err_set(err, MT_EXIT_USAGE, "pipeline stage %d of %d", rank, p);
	s->kind = kind;
	s->p = p;
	s->v = v;
	s->m = m;
	s->rank = rank;
	s->group = G > 0 ? G : p;
	s->forward_only = forward_only;
	if (forward_only) {
		/* every forward in the table's order, nothing kept */
		s->warmup = m * v;
		for (int k = 0; k < m * v; k++) {
			int mb, ch;
			if (kind == MT_PP_INTERLEAVED)
				table_entry(m, v, s->group, k, &mb, &ch);
			else
				mb = k, ch = 0;
			push(&c, MT_PP_FWD, ch, mb);
		}
	} else if (kind == MT_PP_INTERLEAVED) {
		int w = (p - rank - 1) * 2 + (v - 1) * s->group;
		s->warmup = w < m * v ? w : m * v;
		gen_interleaved(s, &c);
	} else {
		s->warmup = p - rank - 1 < m ? p - rank - 1 : m;
		if (kind == MT_PP_ZBH1)
			gen_zbh1(s, &c);
		else
			gen_1f1b(s, &c);
	}
	/* the transfers: each receive posted one compute action ahead of the action that
	 * waits for it, each send right after the action that produced its data */
	for (int i = 0; i < c.n && !c.failed; i++) {
		int rv, sd;
		if (i == 0 && (rv = recv_of(s, &c.a[0])) >= 0)
			push(&l, rv, c.a[0].chunk, c.a[0].mb);
		if (i + 1 < c.n && (rv = recv_of(s, &c.a[i + 1])) >= 0)
			push(&l, rv, c.a[i + 1].chunk, c.a[i + 1].mb);
		push(&l, c.a[i].op, c.a[i].chunk, c.a[i].mb);
		if ((sd = send_of(s, &c.a[i])) >= 0)
			push(&l, sd, c.a[i].chunk, c.a[i].mb);
	}
	free(c.a);
	s->a = l.a;
	s->n = l.n;
	s->inflight = calloc((size_t)v, sizeof(int));
	live = calloc((size_t)v, sizeof(int));
	if (c.failed || l.failed || !s->inflight || !live) {
		free(live);
		mt_pp_sched_free(s);
		return mt_err_set(err, MT_EXIT_IO, "out of memory for a pipeline schedule");
	}
	/* a micro-batch's activations live from its forward to its backward (to its W pass
	 * when the backward is split; a forward-only list keeps nothing) */
	for (int i = 0; i < s->n; i++) {
		const struct mt_pp_action *x = &s->a[i];
		if (x->op == MT_PP_FWD) {
			if (++live[x->chunk] > s->inflight[x->chunk])
				s->inflight[x->chunk] = live[x->chunk];
			if (forward_only)
				live[x->chunk]--;
		} else if (x->op == MT_PP_BWD || x->op == MT_PP_BWD_WEIGHT) {
			live[x->chunk]--;
		}
	}
	free(live);
	return 0;
}

void mt_pp_sched_free(struct mt_pp_sched *s)
{
	free(s->a);
	free(s->inflight);
	memset(s, 0, sizeof(*s));
}

/* the transfers of stage r's list over edge (from -> to, kind grad) in its order, as
 * receiving chunk * m + mb; n of them into out (NULL: counted only) */
static int edge_seq(const struct mt_pp_sched *s, int from, int to, int grad, int *out)
{
	int n = 0, P = s->p, last = s->p * s->v - 1;

	for (int i = 0; i < s->n; i++) {
		const struct mt_pp_action *a = &s->a[i];
		int vs = a->chunk * P + s->rank, other, rc;
		if (s->rank == from && (a->op == (grad ? MT_PP_SEND_BWD : MT_PP_SEND_FWD))) {
			other = grad ? vs - 1 : vs + 1;
			if (other < 0 || other > last || other % P != to)
				continue;
			rc = other / P;
		} else if (s->rank == to && (a->op == (grad ? MT_PP_RECV_BWD : MT_PP_RECV_FWD))) {
			other = grad ? vs + 1 : vs - 1;
			if (other < 0 || other > last || other % P != from)
				continue;
			rc = a->chunk;
		} else {
			continue;
		}
		if (out)
			out[n] = rc * s->m + a->mb;
		n++;
	}
	return n;
}

int mt_pp_sched_order_check(const struct mt_pp_sched *s, struct mt_err *err)
{
	struct mt_pp_sched peer;
	int rc = 0, cap = 2 * s->v * s->m + 1, *a = malloc((size_t)cap * 2 * sizeof(int)), *b = a ? a + cap : NULL;

	if (!a)
		return mt_err_set(err, MT_EXIT_IO, "out of memory checking the pipeline's transfers");
	/* the edges this stage sends on: activations to the next stage, gradients to the
	 * previous; the peer's list made as the peer makes it */
	for (int grad = 0; grad < 2 && rc == 0 && s->p > 1; grad++) {
		int to = grad ? (s->rank + s->p - 1) % s->p : (s->rank + 1) % s->p, na, nb;
		if (mt_pp_sched_make(&peer, s->kind, s->p, s->v, s->m, to, s->group, s->forward_only, err)) {
			rc = -1;
			break;
		}
		na = edge_seq(s, s->rank, to, grad, a);
		nb = edge_seq(&peer, s->rank, to, grad, b);
		if (na != nb || memcmp(a, b, (size_t)na * sizeof(int)))
			rc = mt_err_set(err, MT_EXIT_USAGE,
					"the %s schedule's %s from stage %d to stage %d are not sent in the order they are "
					"received (%d and %d transfers): an ordered transport (NCCL) cannot run it",
					mt_pp_kind_name(s->kind), grad ? "gradients" : "activations", s->rank, to, na, nb);
		mt_pp_sched_free(&peer);
	}
	free(a);
	return rc;
}

double mt_pp_bubble(enum mt_pp_kind kind, int p, int v, int m, double t_f, double t_b, double t_w)
{
	if (m < 1)
		return 0;
	switch (kind) {
	case MT_PP_INTERLEAVED:
		return (double)(p - 1) / ((double)v * m);
	case MT_PP_ZBH1:
		if (t_f <= 0 || t_b <= 0 || t_w <= 0)
			t_f = t_b = t_w = 1;
		return (p - 1) * (t_f + t_b - t_w) / ((double)m * (t_f + t_b + t_w));
	default:
		return (double)(p - 1) / m;
	}
}

void mt_pp_sched_format(const struct mt_pp_sched *s, char *buf, size_t n)
{
	size_t o = 0;

	if (n)
		buf[0] = 0;
	for (int i = 0; i < s->n && o + 1 < n; i++) {
		const struct mt_pp_action *x = &s->a[i];
		const char *k = x->op == MT_PP_FWD ? "F" : x->op == MT_PP_BWD_WEIGHT ? "W" : "B";
		int w;
		if (!is_compute(x->op))
			continue;
		w = x->chunk ? snprintf(buf + o, n - o, "%s%s%d.%d", o ? " " : "", k, x->mb, x->chunk)
			     : snprintf(buf + o, n - o, "%s%s%d", o ? " " : "", k, x->mb);
		if (w < 0 || (size_t)w >= n - o)
			break;
		o += (size_t)w;
	}
}
