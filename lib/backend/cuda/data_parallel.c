/* data_parallel.c: the CUDA backend's data parallelism: the gradient buckets reduced over
 * NCCL under the backward pass, and ZeRO-1's shards of the master weights and moments
 * (copies between whole buffers and shards, the checkpoint's gather, the all-gather of
 * the updated parameters). Not here: the buckets' plan (parallel/ddpplan.c), the choice
 * of GPU (plan.c), the norm and the AdamW step over the shards (optimizer.c).
 *
 * Data parallelism (opts.dist with more than one data-parallel rank): one rank per GPU,
 * the GPU picked by the node-local rank; an NCCL communicator (ncclcomm.h). The gradient
 * buffer is cut into buckets along layer boundaries (about bucket_size elements each);
 * the backward pass runs from the last layer to the embeddings, and in the step's last
 * micro-batch (MT_BACKWARD_LAST) each bucket's reduction is launched on a second stream
 * as soon as the pass has finished its parameters, ordered by an event, so the
 * communication runs under the rest of the backward pass; earlier micro-batches only
 * accumulate. Reductions are sums in fp32 (the loop's 1/micro-batches scale comes
 * after). grad_prepare waits for them against the timeout (ncclcomm.h aborts the
 * communicator and says which step); the training loop's heartbeat through dist.h
 * before it names a rank that did not finish its backward pass.
 *
 * With the distributed optimizer (ZeRO-1) each bucket is reduce-scattered instead: rank
 * r owns the r-th of dp equal pieces of every bucket (the few elements left over when
 * dp does not divide a bucket are all-reduced and owned by every rank), keeps fp32
 * master weights and AdamW moments for its pieces only (the memory plan shows the
 * saving), takes the global norm from per-rank sums of squares (an MPI sum of one
 * double, which also carries the non-finite check), updates its pieces and writes the
 * compute copy there, and the compute copy's pieces are all-gathered (bf16/fp16, or fp32
 * when training in fp32, where the compute copy is then a separate buffer). load_state
 * and save_state move the whole state: each rank takes its pieces from the whole
 * buffers, and rank 0 gathers every piece (dist.h) for the checkpoint, so checkpoints
 * are the same global layout as a single GPU's and resume at any number of ranks. */
#ifdef MT_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <stdlib.h>

#include "../../../kernels/adamw.h"
#include "../../../kernels/cuda_err.h"
#include "backend/cuda/cu.h"
#include "base/log.h"
#include "parallel/ncclcomm.h"
#include "parallel/ddpplan.h"

/* ZeRO: this rank's pieces (and the leftovers) between a whole buffer (host or device)
 * and the shard layout */
cudaError_t mt_cu_shard_copy(struct cu *s, float *whole, float *shard, int to_shard)
{
	cudaError_t e = cudaSuccess;

	for (int j = 0; j < s->plan.nb && e == cudaSuccess; j++) {
		int64_t p = s->plan.piece[j], mine = s->plan.lo[j] + s->me * p, left = s->plan.lo[j] + s->dp * p;
		int64_t nl = s->plan.hi[j] - left;
		float *w1 = whole + mine, *s1 = shard + s->plan.sh[j], *w2 = whole + left, *s2 = shard + s->plan.sh[j] + p;
		if (p)
			e = cudaMemcpy(to_shard ? s1 : w1, to_shard ? w1 : s1, (size_t)p * 4, cudaMemcpyDefault);
		if (e == cudaSuccess && nl)
			e = cudaMemcpy(to_shard ? s2 : w2, to_shard ? w2 : s2, (size_t)nl * 4, cudaMemcpyDefault);
	}
	return e;
}

/* Every rank's pieces of a whole host buffer to rank 0 (each rank's are in place). */
int mt_cu_shard_gather(struct cu *s, float *whole, struct mt_err *err)
{
	for (int j = 0; j < s->plan.nb; j++) {
		if (!s->plan.piece[j])
			continue;
		for (int q = 0; q < s->dp; q++) {
			s->g_cnt[q] = s->plan.piece[j];
			s->g_dsp[q] = s->plan.lo[j] + q * s->plan.piece[j];
		}
		if (s->d->ops->gatherv_f32(s->d, whole, s->g_cnt, s->g_dsp, "the checkpoint gather", -1, err))
			return -1;
	}
	return 0;
}

int mt_cu_dp_init(struct cu *s, struct mt_err *err)
{
	cudaError_t e;

	s->g_cnt = calloc((size_t)s->dp * 2, sizeof(int64_t));
	if (!s->g_cnt)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	s->g_dsp = s->g_cnt + s->dp;
	if (mt_nccl_open(&s->nccl, s->d, err))
		return -1;
	s->bev = calloc((size_t)s->plan.nb, sizeof(*s->bev));
	if (!s->bev)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	e = cudaStreamCreateWithFlags(&s->comm, cudaStreamNonBlocking);
	for (int j = 0; j < s->plan.nb && e == cudaSuccess; j++)
		e = cudaEventCreateWithFlags(&s->bev[j], cudaEventDisableTiming);
	if (e == cudaSuccess)
		e = cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming);
	if (e != cudaSuccess)
		return mt_err_set(err, MT_EXIT_IO, "CUDA streams for NCCL: %s", cudaGetErrorString(e));
	s->next = -1;
	if (!s->o.quiet)
		mt_info("cuda: %d data-parallel ranks over %s, %d gradient buckets (at least %lld elements each)%s", s->dp,
			mt_nccl_version(s->nccl), s->plan.nb, (long long)(s->o.bucket_size > 0 ? s->o.bucket_size : MT_DDP_BUCKET_DEFAULT),
			s->zero ? "; distributed optimizer: each rank keeps 1/N of the master weights and AdamW moments" : "");
	return 0;
}

/* in a pass: the gradients at offsets >= lo are complete; launch the buckets this
 * finishes (a no-op outside the step's last micro-batch) */
int mt_cu_grads_ready(struct cu *s, int64_t lo)
{
	struct mt_err *err = &s->derr;

	if (s->next < 0 || s->dp < 2)
		return 0;
	while (s->next < s->plan.nb && s->plan.lo[s->next] >= lo) {
		int j = s->next++;
		int64_t n = s->plan.hi[j] - s->plan.lo[j], p = s->plan.piece[j];
		float *g = s->g + s->plan.lo[j];
		RT(cudaEventRecord(s->bev[j], 0));
		RT(cudaStreamWaitEvent(s->comm, s->bev[j], 0));
		if (!s->zero) {
			if (mt_nccl_allreduce(s->nccl, g, n, MT_NCCL_F32, s->comm, err))
				goto fail;
			continue;
		}
		if (mt_nccl_group_start(s->nccl, err) ||
		    (p && mt_nccl_reduce_scatter(s->nccl, g, p, MT_NCCL_F32, s->comm, err)) ||
		    (n > s->dp * p && mt_nccl_allreduce(s->nccl, g + s->dp * p, n - s->dp * p, MT_NCCL_F32, s->comm, err)) ||
		    mt_nccl_group_end(s->nccl, err))
			goto fail;
	}
	if (s->next == s->plan.nb) {
		RT(cudaEventRecord(s->done, s->comm));
		s->next = -1;
		s->pending = 1;
	}
	return 0;
fail:
	s->failed = 1;
	return -1;
}

/* ZeRO: the whole weights through the gradient buffer (free between steps): the compute
 * copy whole, the master weights' pieces from it; the moments' pieces */
int mt_cu_load_sharded(struct cu *s, const float *w, const float *m, const float *v, struct mt_err *err)
{
	size_t n = (size_t)s->t->total * sizeof(float);
	cudaError_t e = cudaMemcpy(s->g, w, n, cudaMemcpyHostToDevice);

	if (e == cudaSuccess && mt_convert_f32(s->dt, s->wc, s->g, s->t->total))
		return mt_err_set(err, MT_EXIT_IO, "%s", mt_cuda_error());
	if (e == cudaSuccess)
		e = mt_cu_shard_copy(s, s->g, s->w, 1);
	if (e == cudaSuccess)
		e = m ? mt_cu_shard_copy(s, (float *)m, s->m, 1) : cudaMemset(s->m, 0, (size_t)s->plan.shard * 4);
	if (e == cudaSuccess)
		e = v ? mt_cu_shard_copy(s, (float *)v, s->v, 1) : cudaMemset(s->v, 0, (size_t)s->plan.shard * 4);
	if (e == cudaSuccess)
		e = cudaMemset(s->g, 0, n);
	if (e != cudaSuccess)
		return mt_err_set(err, MT_EXIT_IO, "copying the state to the GPU: %s", cudaGetErrorString(e));
	return 0;
}

/* the step's gradient reduction, waited for against the timeout (the loop's heartbeat
 * before it has named a rank that did not finish its backward pass) */
int mt_cu_reduce_wait(struct cu *s, int64_t step, struct mt_err *err)
{
	if (!s->pending)
		return mt_err_set(err, MT_EXIT_IO, "no gradient reduction was started at step %lld (no last micro-batch)",
				  (long long)step);
	s->pending = 0;
	if (mt_nccl_wait(s->nccl, s->done, s->zero ? "the gradient reduce-scatter" : "the gradient all-reduce", step, err)) {
		s->failed = 1;
		return -1;
	}
	if (mt_cu_rt_check(s, cudaStreamWaitEvent(0, s->done, 0), "cudaStreamWaitEvent", __FILE__, __LINE__))
		return mt_cu_failed_err(s, err);
	return 0;
}

/* ZeRO: every rank's updated pieces of the compute copy to every rank */
int mt_cu_gather_params(struct cu *s, int64_t step, struct mt_err *err)
{
	enum mt_nccl_type nt = ntype(s->dt);

	if (mt_cu_rt_check(s, cudaEventRecord(s->bev[0], 0), "cudaEventRecord", __FILE__, __LINE__) ||
	    mt_cu_rt_check(s, cudaStreamWaitEvent(s->comm, s->bev[0], 0), "cudaStreamWaitEvent", __FILE__, __LINE__))
		return mt_cu_failed_err(s, err);
	if (mt_nccl_group_start(s->nccl, err))
		goto fail;
	for (int j = 0; j < s->plan.nb; j++)
		if (s->plan.piece[j] &&
		    mt_nccl_allgather(s->nccl, (char *)s->wc + (size_t)s->plan.lo[j] * s->es, s->plan.piece[j], nt, s->comm, err))
			goto fail;
	if (mt_nccl_group_end(s->nccl, err))
		goto fail;
	if (mt_cu_rt_check(s, cudaEventRecord(s->done, s->comm), "cudaEventRecord", __FILE__, __LINE__))
		return mt_cu_failed_err(s, err);
	if (mt_nccl_wait(s->nccl, s->done, "the parameter all-gather", step, err))
		goto fail;
	if (mt_cu_rt_check(s, cudaStreamWaitEvent(0, s->done, 0), "cudaStreamWaitEvent", __FILE__, __LINE__))
		return mt_cu_failed_err(s, err);
	return 0;
fail:
	s->failed = 1;
	return -1;
}

#endif
