/* pipeline.c: the executor of pipeline schedules (see pipeline.h). */
#include "parallel/pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { K_AIN, K_AOUT, K_GIN, K_GOUT };

/* each chunk's buffers of a kind: one more than its micro-batches in flight, at most 64
 * (a buffer is waited for before it is reused, so fewer only cost overlap) */
#define MAXSLOTS 64

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int mt_pp_exec_init(struct mt_pp_exec *x, struct mt_dist *g, int vp, int64_t elems, struct mt_err *err)
{
	memset(x, 0, sizeof(*x));
	x->g = g;
	x->p = g->world;
	x->v = vp;
	x->elems = elems;
	x->elem_bytes = sizeof(float);
	x->nslots = calloc((size_t)vp, sizeof(int));
	for (int k = 0; k < 4; k++)
		x->buf[k] = NULL;
	if (!x->nslots)
		return mt_err_set(err, MT_EXIT_IO, "%s: out of memory for the pipeline", g->where);
	return 0;
}

void mt_pp_exec_set_transport(struct mt_pp_exec *x, const struct mt_pp_transport *tr, size_t elem_bytes)
{
	x->tr = tr;
	x->elem_bytes = tr ? elem_bytes : sizeof(float);
}

void mt_pp_exec_free(struct mt_pp_exec *x)
{
	for (int k = 0; k < 4; k++) {
		if (x->buf[k])
			for (int c = 0; c < x->v; c++)
				for (int i = 0; i < x->nslots[c]; i++) {
					struct mt_pp_buf *b = &x->buf[k][c * MAXSLOTS + i];
					if (x->tr)
						x->tr->release(x->tr->ctx, b);
					else
						free(b->x);
				}
		free(x->buf[k]);
	}
	free(x->nslots);
	memset(x, 0, sizeof(*x));
}

void mt_pp_exec_reset_stats(struct mt_pp_exec *x)
{
	memset(&x->st, 0, sizeof(x->st));
}

static int grow(struct mt_pp_exec *x, const struct mt_pp_sched *s, struct mt_err *err)
{
	for (int k = 0; k < 4; k++)
		if (!x->buf[k] && !(x->buf[k] = calloc((size_t)x->v * MAXSLOTS, sizeof(struct mt_pp_buf))))
			return mt_err_set(err, MT_EXIT_IO, "%s: out of memory for the pipeline", x->g->where);
	for (int c = 0; c < x->v; c++) {
		int want = s->inflight[c] + 1;
		if (want > MAXSLOTS)
			want = MAXSLOTS;
		for (int i = x->nslots[c]; i < want; i++)
			for (int k = 0; k < 4; k++) {
				struct mt_pp_buf *b = &x->buf[k][c * MAXSLOTS + i];
				b->mb = -1;
				if (x->tr) {
					if (x->tr->alloc(x->tr->ctx, b, x->elems > 0 ? x->elems : 1, err))
						return -1;
					continue;
				}
				if (!(b->x = malloc((size_t)(x->elems > 0 ? x->elems : 1) * sizeof(float))))
					return mt_err_set(err, MT_EXIT_IO, "%s: out of memory for the pipeline's buffers",
							  x->g->where);
			}
		if (want > x->nslots[c])
			x->nslots[c] = want;
	}
	return 0;
}

/* the stage and chunk on the other end of a transfer of chunk c: forward activations
 * come from virtual stage vs - 1 and go to vs + 1 (ring order over the stages) */
static void neighbour(const struct mt_pp_sched *s, int chunk, int next, int *rank, int *ch)
{
	int vs = mt_pp_vstage(s, chunk) + (next ? 1 : -1);

	*rank = vs % s->p;
	*ch = vs / s->p;
}

/* tags: which data (activations or gradient) for which chunk and micro-batch on the
 * receiving side, so two transfers between the same stages never match each other */
static int tag_of(const struct mt_pp_sched *s, int grad, int recv_chunk, int mb)
{
	return (grad + 2 * (recv_chunk + s->v * mb)) % 16384;
}

static void describe(char *buf, size_t n, int grad, int chunk, int mb, int v)
{
	if (v > 1)
		snprintf(buf, n, "the %s of micro-batch %d (chunk %d)", grad ? "gradient" : "activations", mb, chunk);
	else
		snprintf(buf, n, "the %s of micro-batch %d", grad ? "gradient" : "activations", mb);
}

static struct mt_pp_buf *slot_buf(struct mt_pp_exec *x, int kind, int chunk, int mb)
{
	return &x->buf[kind][chunk * MAXSLOTS + mb % x->nslots[chunk]];
}

/* wait for a transfer of buffer b, counting the time as waiting */
static int settle(struct mt_pp_exec *x, struct mt_pp_buf *b, int kind, int chunk, int64_t step, struct mt_err *err)
{
	char what[96];
	double t0, dt;
	int rc, grad = kind == K_GIN || kind == K_GOUT;

	if (!b->r.active && !b->busy)
		return 0;
	describe(what, sizeof(what), grad, chunk, b->mb, x->v);
	t0 = now();
	rc = x->tr ? x->tr->wait(x->tr->ctx, b, what, step, err) : mt_dist_wait(x->g, &b->r, what, step, err);
	dt = now() - t0;
	x->st.wait += dt;
	x->st.wait_kind[kind] += dt;
	return rc;
}

int mt_pp_exec_run(struct mt_pp_exec *x, const struct mt_pp_sched *s, const struct mt_pp_ops *ops, int64_t step,
		   struct mt_err *err)
{
	double t_start = now();
	int last = s->p * s->v - 1, rc = 0;

	if (s->p != x->p || s->v != x->v || s->rank != x->g->rank)
		return mt_err_set(err, MT_EXIT_USAGE, "%s: a schedule for stage %d of %d x %d run on stage %d of %d x %d",
				  x->g->where, s->rank, s->p, s->v, x->g->rank, x->p, x->v);
	if (grow(x, s, err))
		return -1;
	/* an ordered transport: the list's transfers in the order the peers expect them */
	if (x->tr && (x->checked != s || x->checked_m != s->m || x->checked_fo != s->forward_only)) {
		if (mt_pp_sched_order_check(s, err))
			return -1;
		x->checked = s;
		x->checked_m = s->m;
		x->checked_fo = s->forward_only;
	}
	for (int i = 0; i < s->n && rc == 0; i++) {
		const struct mt_pp_action *a = &s->a[i];
		int vs = mt_pp_vstage(s, a->chunk), slot = a->mb % s->inflight[a->chunk], peer, pch;
		struct mt_pp_buf *in = NULL, *out = NULL;
		double t0;

		switch (a->op) {
		case MT_PP_RECV_FWD:
		case MT_PP_RECV_BWD: {
			int grad = a->op == MT_PP_RECV_BWD;
			struct mt_pp_buf *b = slot_buf(x, grad ? K_GIN : K_AIN, a->chunk, a->mb);
			/* the buffer's previous data was consumed by its pass: only a receive
			 * still pending (none in a valid list) would need the wait */
			if ((rc = settle(x, b, grad ? K_GIN : K_AIN, a->chunk, step, err)))
				break;
			neighbour(s, a->chunk, grad, &peer, &pch);
			b->mb = a->mb;
			if (x->tr)
				rc = x->tr->recv(x->tr->ctx, b, x->elems, peer, grad, err);
			else
				rc = mt_dist_irecv_f32(x->g, b->x, x->elems, peer, tag_of(s, grad, a->chunk, a->mb), &b->r, err);
			break;
		}
		case MT_PP_SEND_FWD:
		case MT_PP_SEND_BWD: {
			int grad = a->op == MT_PP_SEND_BWD;
			struct mt_pp_buf *b = slot_buf(x, grad ? K_GOUT : K_AOUT, a->chunk, a->mb);
			neighbour(s, a->chunk, !grad, &peer, &pch);
			if (x->tr)
				rc = x->tr->send(x->tr->ctx, b, x->elems, peer, grad, err);
			else
				rc = mt_dist_isend_f32(x->g, b->x, x->elems, peer, tag_of(s, grad, pch, a->mb), &b->r, err);
			x->st.bytes_sent += x->elems * (int64_t)x->elem_bytes;
			x->st.messages++;
			break;
		}
		case MT_PP_FWD:
			if (vs > 0) {
				in = slot_buf(x, K_AIN, a->chunk, a->mb);
				if (in->mb != a->mb)
					rc = mt_err_set(err, MT_EXIT_USAGE, "%s: forward %d of chunk %d before its receive",
							x->g->where, a->mb, a->chunk);
				else
					rc = settle(x, in, K_AIN, a->chunk, step, err);
			}
			if (rc == 0 && vs < last) {
				/* the buffer's previous send must be delivered before it is rewritten */
				out = slot_buf(x, K_AOUT, a->chunk, a->mb);
				rc = settle(x, out, K_AOUT, a->chunk, step, err);
				out->mb = a->mb;
			}
			if (rc)
				break;
			t0 = now();
			rc = ops->forward(ops->ctx, a->chunk, a->mb, slot, in ? in->x : NULL, out ? out->x : NULL);
			x->st.compute[MT_PP_T_FWD] += now() - t0;
			x->st.passes[MT_PP_T_FWD]++;
			if (in)
				in->mb = -1;
			break;
		case MT_PP_BWD:
		case MT_PP_BWD_INPUT:
			if (vs < last) {
				in = slot_buf(x, K_GIN, a->chunk, a->mb);
				if (in->mb != a->mb)
					rc = mt_err_set(err, MT_EXIT_USAGE, "%s: backward %d of chunk %d before its receive",
							x->g->where, a->mb, a->chunk);
				else
					rc = settle(x, in, K_GIN, a->chunk, step, err);
			}
			if (rc == 0 && vs > 0) {
				out = slot_buf(x, K_GOUT, a->chunk, a->mb);
				rc = settle(x, out, K_GOUT, a->chunk, step, err);
				out->mb = a->mb;
			}
			if (rc)
				break;
			t0 = now();
			rc = ops->backward(ops->ctx, a->chunk, a->mb, slot, in ? in->x : NULL, out ? out->x : NULL,
					   a->op == MT_PP_BWD_INPUT);
			x->st.compute[a->op == MT_PP_BWD ? MT_PP_T_BWD : MT_PP_T_BWD_INPUT] += now() - t0;
			x->st.passes[a->op == MT_PP_BWD ? MT_PP_T_BWD : MT_PP_T_BWD_INPUT]++;
			if (in)
				in->mb = -1;
			break;
		case MT_PP_BWD_WEIGHT:
			t0 = now();
			rc = ops->weight(ops->ctx, a->chunk, a->mb, slot);
			x->st.compute[MT_PP_T_BWD_WEIGHT] += now() - t0;
			x->st.passes[MT_PP_T_BWD_WEIGHT]++;
			break;
		default:
			rc = mt_err_set(err, MT_EXIT_USAGE, "%s: pipeline action %d unknown", x->g->where, a->op);
		}
	}
	/* this stage's sends delivered before the step goes on (their buffers are reused) */
	for (int k = K_AOUT; rc == 0 && k <= K_GOUT; k += 2)
		for (int c = 0; rc == 0 && c < x->v; c++)
			for (int i = 0; rc == 0 && i < x->nslots[c]; i++)
				rc = settle(x, &x->buf[k][c * MAXSLOTS + i], k, c, step, err);
	x->st.wall += now() - t_start;
	return rc;
}
