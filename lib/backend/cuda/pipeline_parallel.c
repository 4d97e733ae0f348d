/* pipeline_parallel.c: the CUDA backend's pipeline parallelism: a stage's passes
 * (stage_forward, stage_backward, stage_weight) over its model chunks, each micro-batch in
 * flight in a pslot of its own made on first use; the stage's gradient reductions once its
 * schedule is done; the tied embedding's gradient summed between the first and the last
 * stage; and the transport between the stages over NCCL (ppx_*, below). Not here: the
 * schedule and its executor (parallel/ppsched.c, parallel/pipeline.c), the layers' passes
 * (passes.c), a pslot's layout (plan.c). */
#ifdef MT_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../../kernels/cuda_err.h"
#include "../../../kernels/norm.h"
#include "backend/cuda/cu.h"
#include "base/log.h"
#include "parallel/ncclcomm.h"

/* ---- the pipeline's transport over NCCL (pipeline.h) ----
 * Each stage on a GPU of its own: the activations and gradients between stages stay on
 * the devices, in the compute type, over four one-way two-rank communicators (ncclcomm.h
 * mt_nccl_open_ring), each with a stream of its own, so a send that waits for its
 * receiver holds up nothing else. A transfer starts after the compute queued before it
 * (an event on the compute stream: a send's buffer is written, a receive's old contents
 * are read), and its completion is an event the executor waits for against the
 * timeout. The stage passes then read and write the buffers on the device. */
enum { E_ACT_OUT, E_ACT_IN, E_GRAD_OUT, E_GRAD_IN };

struct ppx {
	struct mt_pp_transport tr;
	struct cu *s;
	struct mt_nccl *edge[4];
	cudaStream_t st[4];
	cudaEvent_t ready;
	struct mt_pp_buf *pend[4]; /* a channel's transfer NCCL still takes (mt_nccl_send) */
};

static int ppx_alloc(void *ctx, struct mt_pp_buf *b, int64_t elems, struct mt_err *err)
{
	struct ppx *x = ctx;
	cudaError_t e = cudaMalloc(&b->x, (size_t)elems * x->s->es);

	if (e == cudaSuccess)
		e = cudaEventCreateWithFlags((cudaEvent_t *)&b->ev, cudaEventDisableTiming);
	if (e != cudaSuccess)
		return mt_err_set(err, MT_EXIT_IO, "cannot allocate the pipeline's GPU buffers: %s", cudaGetErrorString(e));
	x->s->bytes[3] += (size_t)elems * x->s->es;
	return 0;
}

static void ppx_release(void *ctx, struct mt_pp_buf *b)
{
	struct ppx *x = ctx;

	if (x->s->failed)
		return; /* a lost peer: no call that waits for the device */
	if (b->x)
		cudaFree(b->x);
	if (b->ev)
		cudaEventDestroy((cudaEvent_t)b->ev);
	b->x = b->ev = NULL;
}

/* the channel's transfer that NCCL was still taking, taken: its completion event goes
 * onto the channel's stream behind it */
static int ppx_take(struct ppx *x, int ch, struct mt_err *err)
{
	struct mt_pp_buf *b = x->pend[ch];
	cudaError_t e;

	if (!b)
		return 0;
	x->pend[ch] = NULL;
	if (mt_nccl_settle(x->edge[ch], err)) {
		x->s->failed = 1;
		return -1;
	}
	if ((e = cudaEventRecord((cudaEvent_t)b->ev, x->st[ch])) != cudaSuccess)
		return mt_err_set(err, MT_EXIT_IO, "pipeline transfer: %s", cudaGetErrorString(e));
	return 0;
}

/* A transfer is posted, not waited for (mt_nccl_send): the schedule goes on while NCCL
 * takes it, and its event is recorded once it is taken (here for an immediate one, else
 * by the channel's next transfer or the wait for this one). */
static int ppx_start(struct ppx *x, struct mt_pp_buf *b, int64_t elems, int ch, struct mt_err *err)
{
	struct cu *s = x->s;
	cudaError_t e;
	int rc;

	if (ppx_take(x, ch, err))
		return -1;
	e = cudaEventRecord(x->ready, 0);
	if (e == cudaSuccess)
		e = cudaStreamWaitEvent(x->st[ch], x->ready, 0);
	if (e != cudaSuccess)
		return mt_err_set(err, MT_EXIT_IO, "pipeline transfer: %s", cudaGetErrorString(e));
	rc = ch == E_ACT_OUT || ch == E_GRAD_OUT ? mt_nccl_send(x->edge[ch], b->x, elems, ntype(s->dt), x->st[ch], err)
						 : mt_nccl_recv(x->edge[ch], b->x, elems, ntype(s->dt), x->st[ch], err);
	if (rc < 0) {
		s->failed = 1;
		return -1;
	}
	b->busy = 1;
	b->chan = ch;
	if (rc == 1) {
		x->pend[ch] = b;
		return 0;
	}
	if ((e = cudaEventRecord((cudaEvent_t)b->ev, x->st[ch])) != cudaSuccess)
		return mt_err_set(err, MT_EXIT_IO, "pipeline transfer: %s", cudaGetErrorString(e));
	return 0;
}

static int ppx_send(void *ctx, struct mt_pp_buf *b, int64_t elems, int peer, int grad, struct mt_err *err)
{
	(void)peer;
	return ppx_start(ctx, b, elems, grad ? E_GRAD_OUT : E_ACT_OUT, err);
}

static int ppx_recv(void *ctx, struct mt_pp_buf *b, int64_t elems, int peer, int grad, struct mt_err *err)
{
	(void)peer;
	return ppx_start(ctx, b, elems, grad ? E_GRAD_IN : E_ACT_IN, err);
}

static int ppx_wait(void *ctx, struct mt_pp_buf *b, const char *what, int64_t step, struct mt_err *err)
{
	struct ppx *x = ctx;

	if (!b->busy)
		return 0;
	b->busy = 0;
	if (x->pend[b->chan] == b && ppx_take(x, b->chan, err))
		return -1;
	if (mt_nccl_wait(x->edge[b->chan], b->ev, what, step, err)) {
		x->s->failed = 1;
		return -1;
	}
	return 0;
}

void mt_cu_ppx_close(struct cu *s)
{
	struct ppx *x = s->ppx;

	if (!x)
		return;
	for (int i = 0; i < 4 && !s->failed; i++)
		if (x->pend[i] && ppx_take(x, i, &(struct mt_err){ 0 }))
			s->failed = 1;
	mt_nccl_close_all(x->edge, 4, s->failed);
	if (!s->failed) {
		for (int i = 0; i < 4; i++)
			if (x->st[i])
				cudaStreamDestroy(x->st[i]);
		if (x->ready)
			cudaEventDestroy(x->ready);
	}
	free(x);
	s->ppx = NULL;
}

/* NCCL between the stages when each has a GPU of its own (or asked), else nothing: MPI
 * through host memory; the group agrees, so no stage waits in a communicator the others
 * left */
int mt_cu_pp_transport(struct mt_backend *b, struct mt_dist *g, const struct mt_pp_transport **out,
		       size_t *elem_bytes, struct mt_err *err)
{
	struct cu *s = b->state;
	int want = s->o.pp_comm, distinct = 1, dev = 0;
	double bad = 0;
	struct mt_err e2 = { 0 };
	struct ppx *x;
	cudaError_t e = cudaSuccess;

	*out = NULL;
	*elem_bytes = 4;
	if (want == MT_TP_COMM_HOST || !g || g->world < 2)
		return 0;
	if (mt_cu_group_gpus(g, "the pipeline's GPU check", &dev, &distinct, err))
		return -1;
	if (!distinct) {
		if (want == MT_TP_COMM_NCCL)
			return mt_err_set(err, MT_EXIT_USAGE, "%s: --pipeline-parallel-comm nccl: stages share GPU %d, which "
					  "NCCL refuses: start one rank per GPU, or use --pipeline-parallel-comm host", g->where,
					  dev);
		if (!s->o.quiet)
			mt_info("cuda: pipeline stages share a GPU: their transfers go through host memory");
		return 0;
	}
	x = calloc(1, sizeof(*x));
	if (!x)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	x->s = s;
	bad = mt_nccl_open_ring(x->edge, g, &e2) ? 1 : 0;
	if (g->ops->allreduce_f64(g, &bad, 1, 1, "the pipeline's communicators", -1, err)) {
		mt_nccl_close_all(x->edge, 4, 1);
		free(x);
		return -1;
	}
	if (bad) {
		mt_nccl_close_all(x->edge, 4, 1);
		free(x);
		if (want == MT_TP_COMM_NCCL)
			return e2.msg[0] ? (*err = e2, -1)
					 : mt_err_set(err, MT_EXIT_IO, "%s: another stage could not make the pipeline's NCCL "
						      "communicators", g->where);
		if (!s->o.quiet)
			mt_info("cuda: no NCCL communicators between the stages (%s): through host memory",
				e2.msg[0] ? e2.msg : "another stage could not make them");
		return 0;
	}
	s->ppx = x;
	for (int i = 0; i < 4 && e == cudaSuccess; i++)
		e = cudaStreamCreateWithFlags(&x->st[i], cudaStreamNonBlocking);
	if (e == cudaSuccess)
		e = cudaEventCreateWithFlags(&x->ready, cudaEventDisableTiming);
	if (e != cudaSuccess)
		return mt_err_set(err, MT_EXIT_IO, "CUDA streams for the pipeline: %s", cudaGetErrorString(e));
	x->tr = (struct mt_pp_transport){ x, "nccl", ppx_alloc, ppx_release, ppx_send, ppx_recv, ppx_wait };
	s->pp_dev = 1;
	*out = &x->tr;
	*elem_bytes = s->es;
	if (!s->o.quiet)
		mt_info("cuda: %d pipeline stages over %s (send/recv between the GPUs, %s)", g->world,
			mt_nccl_version(x->edge[0]), s->dt == MT_F32 ? "fp32" : s->dt == MT_BF16 ? "bf16" : "fp16");
	return 0;
}

/* the stage passes' input and output: through host memory (MPI), or the transport's
 * device buffers */
static int pp_in(struct cu *s, void *dst, const void *src)
{
	if (!s->pp_dev)
		return mt_cu_st_h2d(s, dst, src, s->Nr * s->h);
	RT(cudaMemcpyAsync(dst, src, (size_t)(s->Nr * s->h) * s->es, cudaMemcpyDeviceToDevice, 0));
	return 0;
}

static int pp_out(struct cu *s, void *dst, const void *src)
{
	if (!s->pp_dev)
		return mt_cu_st_d2h(s, dst, src, s->Nr * s->h);
	RT(cudaMemcpyAsync(dst, src, (size_t)(s->Nr * s->h) * s->es, cudaMemcpyDeviceToDevice, 0));
	return 0;
}

static int stage_fail(struct cu *s, const char *fmt, int a, int b2)
{
	if (!s->derr.msg[0])
		mt_err_set(&s->derr, MT_EXIT_IO, fmt, a, b2);
	s->failed = 1;
	return -1;
}

/* the pslot of a chunk's micro-batch slot, made on first use */
static struct pslot *pslot_get(struct cu *s, int chunk, int slot)
{
	const struct mt_params *t = s->t;
	int first = t->first_stage && chunk == 0, last = t->last_stage && chunk == t->nchunks - 1;
	struct carve k = { NULL, 0 };
	struct pslot *x;
	size_t bytes;
	cudaError_t e;

	if (!s->stage || chunk < 0 || chunk >= t->nchunks || slot < 0) {
		stage_fail(s, "a pipeline pass for chunk %d, slot %d of no stage of this backend", chunk, slot);
		return NULL;
	}
	if (!s->ps && (!(s->ps = calloc((size_t)t->nchunks, sizeof(*s->ps))) ||
		       !(s->nps = calloc((size_t)t->nchunks, sizeof(int))))) {
		stage_fail(s, "out of memory for the micro-batches in flight (chunk %d, slot %d)", chunk, slot);
		return NULL;
	}
	if (slot >= s->nps[chunk]) {
		struct pslot *n = realloc(s->ps[chunk], (size_t)(slot + 1) * sizeof(*n));
		if (!n) {
			stage_fail(s, "out of memory for the micro-batches in flight (chunk %d, slot %d)", chunk, slot);
			return NULL;
		}
		memset(n + s->nps[chunk], 0, (size_t)(slot + 1 - s->nps[chunk]) * sizeof(*n));
		s->ps[chunk] = n;
		s->nps[chunk] = slot + 1;
	}
	x = &s->ps[chunk][slot];
	if (x->mem)
		return x;
	x->nl = t->chunk_layers[2 * chunk + 1] - t->chunk_layers[2 * chunk];
	x->ls = calloc((size_t)x->nl, sizeof(*x->ls));
	x->dsave = s->o.split_backward ? calloc((size_t)x->nl * 4, sizeof(void *)) : NULL;
	if (!x->ls || (s->o.split_backward && !x->dsave)) {
		stage_fail(s, "out of memory for the micro-batches in flight (chunk %d, slot %d)", chunk, slot);
		return NULL;
	}
	bytes = mt_cu_carve_pslot(s, &k, x, first, last);
	e = cudaMalloc(&x->mem, bytes);
	if (e != cudaSuccess) {
		x->mem = NULL;
		mt_err_set(&s->derr, MT_EXIT_IO,
			   "cannot allocate %.2f GiB of GPU memory for the activations of a micro-batch in flight (chunk %d, "
			   "slot %d): %s; fewer micro-batches in flight (a smaller pipeline or --micro-batch-size) or "
			   "--recompute-granularity full", mt_cu_gib(bytes), chunk, slot, cudaGetErrorString(e));
		s->failed = 1;
		return NULL;
	}
	k = (struct carve){ x->mem, 0 };
	mt_cu_carve_pslot(s, &k, x, first, last);
	s->bytes[3] += bytes;
	return x;
}

/* the passes' buffers of a micro-batch: its residual stream (row 0 entering layer l0),
 * tokens, targets and final norm */
static void bind(struct cu *s, struct pslot *x, int l0)
{
	s->res = x->res;
	s->lbase = l0;
	if (x->tok) {
		s->tok = x->tok;
		s->u_tok = x->u_tok;
		s->u_start = x->u_start;
		s->u_pos = x->u_pos;
	}
	if (x->tgt) {
		s->tgt = x->tgt;
		s->lnf = x->lnf;
		s->lnfs = x->lnfs;
	}
	/* the sequence-parallel replicas are summed once the schedule is done
	 * (stage_reduce), not in a pass */
	s->tp_last = 0;
	s->tp_done = s->t->total;
}

static struct slot *lslot(struct cu *s, struct pslot *x, int l)
{
	return s->o.recompute_full ? &s->slots[0] : &x->ls[l - s->lbase];
}

static int stage_fwd(struct cu *s, int chunk, int slot, const int32_t *tokens, const int32_t *targets, const float *in,
		     float *out, int grad, double *loss, int64_t *ntargets)
{
	const struct mt_params *t = s->t;
	int first = t->first_stage && chunk == 0, last = t->last_stage && chunk == t->nchunks - 1;
	struct pslot *x = pslot_get(s, chunk, slot);
	int l0, l1;
	void *xL;

	if (!x)
		return -1;
	l0 = t->chunk_layers[2 * chunk];
	l1 = t->chunk_layers[2 * chunk + 1];
	bind(s, x, l0);
	xL = row(s, x->res, (int64_t)x->nl * s->Nr, s->h);
	if (first) {
		/* the copies are waited for: h_tok and h_u are written again by the next
		 * micro-batch's pass, which may come before this one's loss is read */
		x->nu = 0;
		if (mt_cu_tokens_in(s, tokens, NULL) || (grad && mt_cu_groups_in(s, tokens, &x->nu)))
			return -1;
		RT(cudaStreamSynchronize(0));
		if (mt_cu_embed_fwd(s))
			return -1;
	} else if (pp_in(s, x->res, in)) {
		return -1;
	}
	for (int l = l0; l < l1; l++)
		if (mt_cu_layer_fwd(s, l, lslot(s, x, l)))
			return -1;
	if (!last)
		return pp_out(s, out, xL);
	x->count = 0;
	for (int64_t n = 0; n < s->N; n++)
		x->count += targets[n] >= 0;
	RT(cudaMemcpy(s->tgt, targets, (size_t)s->N * sizeof(int32_t), cudaMemcpyHostToDevice));
	if (mt_cu_head(s, xL, grad, x->count, x->dlnf))
		return -1;
	*ntargets = x->count;
	return mt_cu_loss_out(s, x->count, loss);
}

static int stage_bwd(struct cu *s, int chunk, int slot, const void *dout, void *din, int split)
{
	const struct mt_params *t = s->t;
	int first = t->first_stage && chunk == 0, last = t->last_stage && chunk == t->nchunks - 1;
	struct pslot *x = pslot_get(s, chunk, slot);
	int l0, l1;

	if (!x)
		return -1;
	l0 = t->chunk_layers[2 * chunk];
	l1 = t->chunk_layers[2 * chunk + 1];
	bind(s, x, l0);
	if (last) {
		/* d loss / d lnf came with the forward pass; the last layer's fc2 bias gradient
		 * taken with the final norm's (see layer_bwd) */
		float *gb = gp(s, l1 - 1, MT_P_FC2_B);
		KP(P_NORM, mt_norm_bwd(s->dt, s->dres, 0, gp(s, -1, MT_P_FINAL_W), gp(s, -1, MT_P_FINAL_B), gb, x->dlnf,
				       row(s, x->res, (int64_t)x->nl * s->Nr, s->h), x->lnfs, wp(s, -1, MT_P_FINAL_W), s->Nr,
				       s->h, s->c->normalization == MT_NORM_RMSNORM, s->scratch));
		s->dres_summed = gb != NULL;
	} else {
		s->dres_summed = 0;
		if (pp_in(s, s->dres, dout))
			return -1;
	}
	for (int l = l1 - 1; l >= l0; l--) {
		struct slot *sl = lslot(s, x, l);
		if (s->o.recompute_full && mt_cu_layer_fwd(s, l, sl))
			return -1;
		if (mt_cu_layer_bwd(s, l, sl, split && x->dsave ? x->dsave + 4 * (l - l0) : NULL))
			return -1;
	}
	if (first)
		return mt_cu_embed_bwd(s, x->nu);
	return pp_out(s, din, s->dres);
}

static int stage_wt(struct cu *s, int chunk, int slot)
{
	struct pslot *x = pslot_get(s, chunk, slot);
	int l0;

	if (!x)
		return -1;
	if (!x->dsave)
		return 0; /* the backward pass was whole */
	l0 = s->t->chunk_layers[2 * chunk];
	bind(s, x, l0);
	for (int l = l0; l < l0 + x->nl; l++)
		if (mt_cu_layer_w(s, l, lslot(s, x, l), x->dsave + 4 * (l - l0)))
			return -1;
	return 0;
}

double mt_cu_stage_forward(struct mt_backend *b, int chunk, int slot, const int32_t *tokens,
			   const int32_t *targets, const void *in, void *out, int64_t *ntargets)
{
	struct cu *s = b->state;
	double loss = 0;

	*ntargets = 0;
	if (s->failed || stage_fwd(s, chunk, slot, tokens, targets, in, out, !b->stage_eval, &loss, ntargets))
		return NAN;
	return loss;
}

int mt_cu_stage_backward(struct mt_backend *b, int chunk, int slot, const void *dout, void *din, int split)
{
	struct cu *s = b->state;

	return s->failed || stage_bwd(s, chunk, slot, dout, din, split) ? -1 : 0;
}

int mt_cu_stage_weight(struct mt_backend *b, int chunk, int slot)
{
	struct cu *s = b->state;

	return s->failed || stage_wt(s, chunk, slot) ? -1 : 0;
}

/* A stage's gradient is whole once its schedule is done: the sequence-parallel replicas'
 * sums (NCCL) and the data-parallel buckets are launched then, on the communication
 * stream, and waited for as after a last micro-batch. */
int mt_cu_stage_reduce(struct cu *s)
{
	if (s->tpnccl) {
		s->tp_last = 1;
		s->tp_done = s->t->total;
		if (mt_cu_tp_grads_ready(s, 0))
			return -1;
		s->tp_last = 0;
	}
	if (s->dp > 1) {
		if (s->pending) {
			mt_err_set(&s->derr, MT_EXIT_IO, "the previous step's gradient reduction was not waited for");
			s->failed = 1;
			return -1;
		}
		s->next = 0;
		if (mt_cu_grads_ready(s, 0))
			return -1;
	}
	return 0;
}

/* the tied word embedding's two copies' gradients (first and last stage) summed over the
 * embedding group, through host memory (the group's ordered sum, the same bits on both) */
int mt_cu_tie_grads(struct mt_backend *b, const struct mt_tp *emb, struct mt_err *err)
{
	struct cu *s = b->state;
	const struct mt_param *p = mt_params_get(s->t, -1, MT_P_WORD_EMB);

	if (s->failed)
		return mt_cu_failed_err(s, err);
	if (!p)
		return mt_err_set(err, MT_EXIT_USAGE, "tied embeddings: no word embedding on this stage");
	if (!s->h_emb && !(s->h_emb = malloc((size_t)p->numel * sizeof(float))))
		return mt_err_set(err, MT_EXIT_IO, "out of memory for the embedding's gradient");
	if (mt_cu_rt_check(s, cudaMemcpy(s->h_emb, s->g + p->offset, (size_t)p->numel * 4, cudaMemcpyDeviceToHost),
			   "cudaMemcpy", __FILE__, __LINE__))
		return mt_cu_failed_err(s, err);
	if (emb->allreduce(emb->ctx, s->h_emb, p->numel))
		return mt_err_set(err, MT_EXIT_IO, "the tied embedding's gradient sum failed");
	if (mt_cu_rt_check(s, cudaMemcpy(s->g + p->offset, s->h_emb, (size_t)p->numel * 4, cudaMemcpyHostToDevice),
			   "cudaMemcpy", __FILE__, __LINE__))
		return mt_cu_failed_err(s, err);
	return 0;
}

#endif
