/* tensor_parallel.c: the CUDA backend's tensor parallelism: its transport (NCCL over the
 * group when every rank of it has a GPU of its own, else host memory and model/tp.h's
 * operations over MPI, staged by st_d2h and st_h2d) and the split points the passes
 * call: the partial sums of the row-parallel layers reduced (an all-reduce, or with
 * sequence parallelism a reduce-scatter; tp_reduce_begin overlaps one with a weight
 * gradient), the sequence shard's rows gathered (tp_gather, and for the norms' outputs
 * ln_*), and the sequence-parallel replicas' gradient sums, under the backward pass
 * and waited for before the gradient norm (tp_grads_wait). Not here: where the passes
 * call them (passes.c), the host-side operations (parallel/tpcomm.c), the norm over the
 * group (optimizer.c).
 *
 * The dimensions in struct cu are this rank's (heads, groups, ffn columns, vocabulary
 * rows); the residual stream has Nr rows from r0 (all N without sequence parallelism). */
#ifdef MT_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "../../../kernels/cuda_err.h"
#include "backend/cuda/cu.h"
#include "base/knobs.h"
#include "base/log.h"
#include "parallel/ncclcomm.h"

/* Tensor parallelism's transport: NCCL over the group when every rank of it has a GPU
 * of its own (asked, or by default), else the host path (tp's operations over MPI). The
 * ranks agree on the outcome, so none waits in a communicator the others left. */
int mt_cu_tp_init(struct cu *s, struct mt_err *err)
{
	struct mt_dist *g = s->o.tp_dist;
	int want = s->o.tp_comm, distinct = 1, dev = 0, lo = 0, hi = 0;
	double bad = 0;
	cudaError_t e;

	if (!s->tp || want == MT_TP_COMM_HOST || !g || g->world < 2)
		return 0;
	if (mt_cu_group_gpus(g, "the tensor-parallel GPU check", &dev, &distinct, err))
		return -1;
	if (!distinct) {
		if (want == MT_TP_COMM_NCCL)
			return mt_err_set(err, MT_EXIT_USAGE, "%s: --tensor-parallel-comm nccl: ranks of a tensor-parallel group "
					  "share GPU %d, which NCCL refuses: start one rank per GPU, or use "
					  "--tensor-parallel-comm host", g->where, dev);
		if (!s->o.quiet)
			mt_info("cuda: ranks of a tensor-parallel group share a GPU: their collectives go through host memory");
		return 0;
	}
	{
		struct mt_err e2 = { 0 };
		bad = mt_nccl_open(&s->tpnccl, g, &e2) ? 1 : 0;
		if (g->ops->allreduce_f64(g, &bad, 1, 1, "the tensor-parallel communicator", -1, err))
			return -1;
		if (bad) {
			mt_nccl_close(s->tpnccl, 1);
			s->tpnccl = NULL;
			if (want == MT_TP_COMM_NCCL)
				return e2.msg[0] ? (*err = e2, -1)
						 : mt_err_set(err, MT_EXIT_IO, "%s: another rank could not make the tensor-parallel "
							      "NCCL communicator", g->where);
			if (!s->o.quiet)
				mt_info("cuda: no NCCL communicator for tensor parallelism (%s): through host memory",
					e2.msg[0] ? e2.msg : "another rank could not make one");
			return 0;
		}
	}
	e = cudaEventCreateWithFlags(&s->tpev, cudaEventDisableTiming);
	if (e == cudaSuccess)
		e = cudaEventCreateWithFlags(&s->tpev_in, cudaEventDisableTiming);
	if (e == cudaSuccess)
		e = cudaEventCreateWithFlags(&s->tpev_out, cudaEventDisableTiming);
	/* the collectives' stream at the highest priority, so their kernels get the SMs a
	 * product beside them leaves (MT_TP_PRIORITY=0: the default priority, to compare) */
	if (e == cudaSuccess)
		e = cudaDeviceGetStreamPriorityRange(&lo, &hi);
	if (e == cudaSuccess)
		e = cudaStreamCreateWithPriority(&s->tpst, cudaStreamNonBlocking,
						 mt_knob_on(MT_KNOB_TP_PRIORITY) ? hi : lo);
	if (e == cudaSuccess && !s->comm)
		e = cudaStreamCreateWithFlags(&s->comm, cudaStreamNonBlocking);
	if (e != cudaSuccess)
		return mt_err_set(err, MT_EXIT_IO, "CUDA streams for NCCL: %s", cudaGetErrorString(e));
	s->tp_overlap = mt_knob_on(MT_KNOB_TP_OVERLAP);
	/* SP: the norms' outputs kept gathered for the weight gradients, not gathered again in
	 * the backward pass (2 of its 6 collectives a layer; 4-6% a step on two H200s for
	 * 4 s b h (t-1)/t bytes a layer); MT_SP_KEEP=0 gathers them again, as Megatron does */
	s->sp_keep = s->sp && mt_knob_on(MT_KNOB_SP_KEEP);
	if (!s->o.quiet)
		mt_info("cuda: %d tensor-parallel ranks over %s%s", g->world, mt_nccl_version(s->tpnccl),
			s->sp ? ", sequence parallel" : "");
	return 0;
}

/* n elements of the compute type on the device <-> floats on the host (bf16 and fp16
 * rounded to nearest even, as the device rounds) */
int mt_cu_st_d2h(struct cu *s, float *h, const void *d, int64_t n)
{
	if (s->dt == MT_F32) {
		RT(cudaMemcpy(h, d, (size_t)n * 4, cudaMemcpyDeviceToHost));
		return 0;
	}
	RT(cudaMemcpy(s->h_16, d, (size_t)n * 2, cudaMemcpyDeviceToHost));
	if (s->dt == MT_F16) {
		for (int64_t i = 0; i < n; i++) {
			_Float16 x;
			memcpy(&x, &s->h_16[i], 2);
			h[i] = (float)x;
		}
		return 0;
	}
	for (int64_t i = 0; i < n; i++) {
		uint32_t u = (uint32_t)s->h_16[i] << 16;
		memcpy(&h[i], &u, 4);
	}
	return 0;
}

int mt_cu_st_h2d(struct cu *s, void *d, const float *h, int64_t n)
{
	if (s->dt == MT_F32) {
		RT(cudaMemcpy(d, h, (size_t)n * 4, cudaMemcpyHostToDevice));
		return 0;
	}
	for (int64_t i = 0; i < n && s->dt == MT_F16; i++) {
		_Float16 x = (_Float16)h[i]; /* round to nearest even, as the device's __float2half_rn */
		memcpy(&s->h_16[i], &x, 2);
	}
	for (int64_t i = 0; i < n && s->dt == MT_BF16; i++) {
		uint32_t u;
		memcpy(&u, &h[i], 4);
		s->h_16[i] = (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40)
							      : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
	}
	RT(cudaMemcpy(d, s->h_16, (size_t)n * 2, cudaMemcpyHostToDevice));
	return 0;
}

int mt_cu_tp_failed(struct cu *s)
{
	if (!s->failed && !s->derr.msg[0])
		mt_err_set(&s->derr, MT_EXIT_IO, "a tensor-parallel collective failed (another rank died or hangs)");
	s->failed = 1;
	return -1;
}

/* NCCL: the compute stream's collectives so far, waited for against the timeout before
 * the host reads anything they wrote (a lost peer must not hang a copy) */
int mt_cu_tp_sync(struct cu *s, const char *what)
{
	if (!s->tpnccl)
		return 0;
	RT(cudaEventRecord(s->tpev, 0));
	if (mt_nccl_wait(s->tpnccl, s->tpev, what, -1, &s->derr))
		return mt_cu_tp_failed(s);
	return 0;
}

/* partial sums [N][w] of every rank into the rows this rank keeps, out [Nr][w]: an
 * all-reduce, or with sequence parallelism a reduce-scatter */
int mt_cu_tp_reduce(struct cu *s, void *out, void *part, int64_t w)
{
	if (s->tpnccl) {
		/* on the compute stream, straight into out: the sum, or this rank's rows of it */
		if (mt_nccl_reduce_into(s->tpnccl, part, out, (s->sp ? s->Nr : s->N) * w, ntype(s->dt), s->sp, 0, &s->derr))
			return mt_cu_tp_failed(s);
		return 0;
	}
	if (mt_cu_st_d2h(s, s->h_a, part, s->N * w))
		return -1;
	if (s->sp) {
		if (s->tp->reduce_scatter(s->tp->ctx, s->h_b, s->h_a, s->Nr * w))
			return mt_cu_tp_failed(s);
		return mt_cu_st_h2d(s, out, s->h_b, s->Nr * w);
	}
	if (s->tp->allreduce(s->tp->ctx, s->h_a, s->N * w))
		return mt_cu_tp_failed(s);
	return mt_cu_st_h2d(s, out, s->h_a, s->N * w);
}

/* tp_reduce over NCCL, begun: the sum goes on on s->tpst while the compute stream runs
 * what does not need it (a column-parallel layer's weight gradient, under its input
 * gradient's sum, as Megatron overlaps them); tp_reduce_end makes the compute stream wait
 * for it. part and out are not to be touched in between. The same collectives in the
 * same order on every rank as tp_reduce, and the same sums. */
int mt_cu_tp_reduce_begin(struct cu *s, void *out, void *part, int64_t w)
{
	RT(cudaEventRecord(s->tpev_in, 0));
	RT(cudaStreamWaitEvent(s->tpst, s->tpev_in, 0));
	if (mt_nccl_reduce_into(s->tpnccl, part, out, (s->sp ? s->Nr : s->N) * w, ntype(s->dt), s->sp, s->tpst, &s->derr))
		return mt_cu_tp_failed(s);
	RT(cudaEventRecord(s->tpev_out, s->tpst));
	return 0;
}

int mt_cu_tp_reduce_end(struct cu *s)
{
	RT(cudaStreamWaitEvent(0, s->tpev_out, 0));
	return 0;
}

/* this rank's rows [Nr][w] as all N rows: gathered into s->full with sequence
 * parallelism; the rows themselves without */
void *mt_cu_tp_gather(struct cu *s, void *rows, int64_t w)
{
	if (!s->sp)
		return rows;
	if (s->tpnccl) {
		if (mt_cu_rt_check(s, cudaMemcpyAsync(row(s, s->full, s->r0, w), rows, (size_t)(s->Nr * w) * s->es,
						      cudaMemcpyDeviceToDevice, 0), "cudaMemcpyAsync", __FILE__, __LINE__))
			return NULL;
		if (mt_nccl_allgather(s->tpnccl, s->full, s->Nr * w, ntype(s->dt), 0, &s->derr)) {
			mt_cu_tp_failed(s);
			return NULL;
		}
		return s->full;
	}
	if (mt_cu_st_d2h(s, s->h_a, rows, s->Nr * w))
		return NULL;
	if (s->tp->allgather(s->tp->ctx, s->h_b, s->h_a, s->Nr * w)) {
		mt_cu_tp_failed(s);
		return NULL;
	}
	return mt_cu_st_h2d(s, s->full, s->h_b, s->N * w) ? NULL : s->full;
}

/* A norm's output, the input of a column-parallel layer: with sp_keep the slot holds all N
 * rows, this rank's at r0 (ln_rows), gathered in place in the forward pass (ln_whole) and
 * read whole by the weight gradient (ln_kept: no second gather in the backward pass);
 * else the rank's rows, gathered into s->full each time they are needed whole. */
void *mt_cu_ln_rows(struct cu *s, void *buf)
{
	return s->sp_keep ? row(s, buf, s->r0, s->h) : buf;
}

void *mt_cu_ln_whole(struct cu *s, void *buf)
{
	if (!s->sp_keep)
		return mt_cu_tp_gather(s, buf, s->h);
	if (mt_nccl_allgather(s->tpnccl, buf, s->Nr * s->h, ntype(s->dt), 0, &s->derr)) {
		mt_cu_tp_failed(s);
		return NULL;
	}
	return buf;
}

void *mt_cu_ln_kept(struct cu *s, void *buf)
{
	return s->sp_keep ? buf : mt_cu_tp_gather(s, buf, s->h);
}

/* NCCL: in the step's last micro-batch, the sequence-parallel replicas at offsets >= lo
 * have their step's gradient; their sums over the group go onto the communication
 * stream now, under the rest of the backward pass and ahead of the data-parallel bucket
 * that holds them (grads_ready, the same stream) */
int mt_cu_tp_grads_ready(struct cu *s, int64_t lo)
{
	if (!s->tpnccl || !s->tp_last || lo >= s->tp_done)
		return 0;
	RT(cudaEventRecord(s->tpev, 0));
	RT(cudaStreamWaitEvent(s->comm, s->tpev, 0));
	for (int i = 0; i < s->t->n; i++) {
		const struct mt_param *q = &s->t->p[i];
		if (q->tp_grad_reduce && q->offset >= lo && q->offset < s->tp_done &&
		    mt_nccl_allreduce(s->tpnccl, s->g + q->offset, q->numel, MT_NCCL_F32, s->comm, &s->derr))
			return mt_cu_tp_failed(s);
	}
	s->tp_done = lo;
	s->tp_pending = 1;
	return 0;
}

/* grad_prepare's wait for the sequence-parallel replicas' gradient sums: over NCCL those
 * the backward pass launched, or through host memory the sums themselves, once a step */
int mt_cu_tp_grads_wait(struct cu *s, int64_t step, struct mt_err *err)
{
	if (s->tpnccl && s->tp_pending) {
		/* the replicas' sums launched under the backward pass (with data parallelism
		 * reduce_wait has waited for the same stream) */
		s->tp_pending = 0;
		if (s->dp < 2) {
			if (mt_cu_rt_check(s, cudaEventRecord(s->tpev, s->comm), "cudaEventRecord", __FILE__, __LINE__))
				return mt_cu_failed_err(s, err);
			if (mt_nccl_wait(s->tpnccl, s->tpev, "the sequence-parallel gradient all-reduce", step, err)) {
				s->failed = 1;
				return -1;
			}
			if (mt_cu_rt_check(s, cudaStreamWaitEvent(0, s->tpev, 0), "cudaStreamWaitEvent", __FILE__, __LINE__))
				return mt_cu_failed_err(s, err);
		}
	} else if (s->tpn > 1 && !s->tpnccl) {
		/* sequence parallelism left the replicas' gradients partial on each rank
		 * (params.h tp_grad_reduce): summed over the group, once a step */
		for (int i = 0; i < s->t->n; i++) {
			const struct mt_param *q = &s->t->p[i];
			if (!q->tp_grad_reduce)
				continue;
			if (mt_cu_rt_check(s, cudaMemcpy(s->h_a, s->g + q->offset, (size_t)q->numel * 4, cudaMemcpyDeviceToHost),
					   "cudaMemcpy", __FILE__, __LINE__))
				return mt_cu_failed_err(s, err);
			if (s->tp->allreduce(s->tp->ctx, s->h_a, q->numel)) {
				mt_cu_tp_failed(s);
				return mt_cu_failed_err(s, err);
			}
			if (mt_cu_rt_check(s, cudaMemcpy(s->g + q->offset, s->h_a, (size_t)q->numel * 4, cudaMemcpyHostToDevice),
					   "cudaMemcpy", __FILE__, __LINE__))
				return mt_cu_failed_err(s, err);
		}
	}
	return 0;
}

#endif
