/* optimizer.c: the CUDA backend's state and step: the weights and AdamW moments in and
 * out (load_state, save_state; ZeRO's shards through data_parallel.c), zero_grad, and the
 * step: grad_prepare (waits for the data-parallel and sequence-parallel sums, then the
 * global norm over every rank holding a part of the model, the non-finite check, fp16's
 * loss scale, clipping) and adamw_step. Not here: the AdamW kernel (kernels/adamw.cu),
 * the collectives it waits for (data_parallel.c, tensor_parallel.c,
 * pipeline_parallel.c).
 *
 * fp16 uses Megatron's loss scaling: the loss gradient is multiplied by the scale,
 * grad_prepare divides it out, and with the dynamic scaler an overflow skips the step
 * and lowers the scale (hysteresis), while loss_scale_window good steps double it. */
#ifdef MT_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <math.h>
#include <string.h>

#include "../../../kernels/adamw.h"
#include "../../../kernels/cuda_err.h"
#include "backend/cuda/cu.h"
#include "base/log.h"
#include "base/timers.h"

int mt_cu_load_state(struct mt_backend *b, const float *w, const float *m, const float *v, struct mt_err *err)
{
	struct cu *s = b->state;
	size_t n = (size_t)s->t->total * sizeof(float);
	cudaError_t e;

	if (s->zero)
		return mt_cu_load_sharded(s, w, m, v, err);
	e = cudaMemcpy(s->w, w, n, cudaMemcpyHostToDevice);

	if (e == cudaSuccess && s->m)
		e = m ? cudaMemcpy(s->m, m, n, cudaMemcpyHostToDevice) : cudaMemset(s->m, 0, n);
	if (e == cudaSuccess && s->v)
		e = v ? cudaMemcpy(s->v, v, n, cudaMemcpyHostToDevice) : cudaMemset(s->v, 0, n);
	if (e != cudaSuccess)
		return mt_err_set(err, MT_EXIT_IO, "copying the state to the GPU: %s", cudaGetErrorString(e));
	if (s->dt != MT_F32 && mt_convert_f32(s->dt, s->wc, s->w, s->t->total))
		return mt_err_set(err, MT_EXIT_IO, "%s", mt_cuda_error());
	return 0;
}

int mt_cu_save_state(struct mt_backend *b, float *w, float *m, float *v, struct mt_err *err)
{
	struct cu *s = b->state;
	size_t n = (size_t)s->t->total * sizeof(float);
	cudaError_t e = cudaSuccess;

	if (s->zero) {
		/* each rank's pieces into its whole buffers, then to rank 0 */
		float *bufs[3] = { w, m, v }, *dev[3] = { s->w, s->m, s->v };
		for (int i = 0; i < 3; i++) {
			if (!bufs[i])
				continue;
			e = mt_cu_shard_copy(s, bufs[i], dev[i], 0);
			if (e != cudaSuccess)
				return mt_err_set(err, MT_EXIT_IO, "copying the state from the GPU: %s", cudaGetErrorString(e));
			if (mt_cu_shard_gather(s, bufs[i], err))
				return -1;
		}
		return 0;
	}
	if (s->dp > 1 && s->me != 0)
		return 0; /* replicated: rank 0's copy is everyone's */
	if (w)
		e = cudaMemcpy(w, s->w, n, cudaMemcpyDeviceToHost);
	if (e == cudaSuccess && m)
		e = cudaMemcpy(m, s->m, n, cudaMemcpyDeviceToHost);
	if (e == cudaSuccess && v)
		e = cudaMemcpy(v, s->v, n, cudaMemcpyDeviceToHost);
	if (e != cudaSuccess)
		return mt_err_set(err, MT_EXIT_IO, "copying the state from the GPU: %s", cudaGetErrorString(e));
	return 0;
}

void mt_cu_zero_grad(struct mt_backend *b)
{
	struct cu *s = b->state;

	if (!s->first_write) {
		if (cudaMemset(s->g, 0, s->bytes[1]) != cudaSuccess)
			mt_cu_rt_check(s, cudaGetLastError(), "cudaMemset", __FILE__, __LINE__);
		return;
	}
	for (int i = 0; i < s->t->n; i++)
		s->gfresh[i] = mt_cu_overwritten(s, &s->t->p[i]);
	if (s->nzchunks && mt_zero_chunks(s->zchunks, s->nzchunks, s->g))
		mt_cu_fail(s);
}

/* zeroes the gradients no product has written since zero_grad (a step's gradient read
 * whole: none are left after a pass, but a caller may read it without one) */
static int grads_settle(struct cu *s)
{
	for (int i = 0; s->gfresh && i < s->t->n; i++)
		if (s->gfresh[i]) {
			const struct mt_param *p = &s->t->p[i];
			s->gfresh[i] = 0;
			RT(cudaMemsetAsync(s->g + p->offset, 0, (size_t)p->numel * sizeof(float), 0));
		}
	return 0;
}

/* Megatron's DynamicGradScaler.update */
static void scaler_update(struct cu *s, int found_inf)
{
	if (s->o.precision != MT_PREC_FP16 || s->o.loss_scale > 0)
		return;
	if (found_inf) {
		s->growth = 0;
		if (--s->hyst <= 0) {
			s->scale *= 0.5;
			if (s->scale < s->o.min_loss_scale)
				s->scale = s->o.min_loss_scale;
		}
	} else if (++s->growth == s->o.loss_scale_window) {
		s->growth = 0;
		s->hyst = s->o.hysteresis;
		s->scale *= 2;
	}
}

int mt_cu_grad_prepare(struct mt_backend *b, float scale, double max_norm, double *norm, int *nonfinite,
		       struct mt_err *err)
{
	struct cu *s = b->state;
	/* the norm over every rank holding a part of the model: tensor x pipeline */
	const struct mt_tp *mp = s->o.mp ? s->o.mp : s->tp;
	double sq = NAN, part[2] = { 0, 0 };
	float sc = s->scale != 1.0 ? (float)((double)scale / s->scale) : scale;
	/* ZeRO: this rank's pieces, then the leftovers every rank holds (counted by rank 0) */
	int64_t n1 = s->zero ? s->npiece_chunks : s->nchunks, n2 = s->nchunks - n1;

	s->gclip = 1.0f;
	*norm = 0;
	*nonfinite = 1;
	if (s->failed || grads_settle(s))
		return mt_cu_failed_err(s, err);
	if (s->stage && mt_cu_stage_reduce(s))
		return mt_cu_failed_err(s, err);
	if (s->dp > 1) {
		/* the part of the reduction the backward pass did not hide */
		double t0 = b->timers ? mt_now() : 0;
		if (mt_cu_reduce_wait(s, b->step, err))
			return -1;
		mt_timer_add(b->timers, MT_T_ALL_GRADS_SYNC, t0);
	}
	if (mt_cu_tp_grads_wait(s, b->step, err))
		return -1;
	mt_cu_prof_mark(s, P_OPTIM);
	if ((n1 && mt_grad_sumsq_dev(s->chunks, n1, s->g, sc, s->partial, s->sumsq)) ||
	    (n2 && mt_grad_sumsq_dev((const struct mt_chunk *)s->chunks + n1, n2, s->g, sc, s->partial + n1, s->sumsq + 1))) {
		mt_cu_fail(s);
		return mt_cu_failed_err(s, err);
	}
	mt_cu_prof_mark(s, P_OPTIM);
	if (mt_cu_rt_check(s, cudaMemcpy(part, s->sumsq, sizeof(part), cudaMemcpyDeviceToHost), "cudaMemcpy", __FILE__, __LINE__))
		return mt_cu_failed_err(s, err);
	sq = (n1 ? part[0] : 0) + (n2 && s->me == 0 ? part[1] : 0);
	if (s->chunk_norm) {
		/* each chunk's sum in chunk order, as the device adds them, without the
		 * replicas another tensor-parallel rank counts (ZeRO: the leftovers on rank 0) */
		if (mt_cu_rt_check(s, cudaMemcpy(s->h_partial, s->partial, (size_t)(n1 + n2) * sizeof(double),
						 cudaMemcpyDeviceToHost), "cudaMemcpy", __FILE__, __LINE__))
			return mt_cu_failed_err(s, err);
		sq = 0;
		for (int64_t i = 0; i < n1 + n2; i++)
			if (s->chunk_norm[i] && (i < n1 || s->me == 0))
				sq += s->h_partial[i];
	}
	/* a sum over the ranks carries the non-finite check with it: the data-parallel
	 * shards (ZeRO), then the tensor-parallel group */
	if (s->zero && s->d->ops->allreduce_f64(s->d, &sq, 1, 0, "the gradient norm", b->step, err)) {
		s->failed = 1;
		return -1;
	}
	if (mt_tp_on(mp) && mp->allreduce_f64(mp->ctx, &sq, 1, 0)) {
		mt_cu_tp_failed(s);
		return mt_cu_failed_err(s, err);
	}
	if (!isfinite(sq)) {
		int dynamic = s->o.precision == MT_PREC_FP16 && !(s->o.loss_scale > 0);
		scaler_update(s, 1);
		if (dynamic && !s->o.quiet)
			mt_info("fp16: gradient overflow, step skipped; loss scale now %g", s->scale);
		*nonfinite = dynamic ? MT_GRAD_OVERFLOW : 1;
		return 0;
	}
	scaler_update(s, 0);
	*nonfinite = 0;
	*norm = sqrt(sq);
	if (max_norm > 0) {
		double coeff = max_norm / (*norm + 1.0e-6);
		if (coeff < 1.0)
			s->gclip = (float)coeff;
	}
	return 0;
}

int mt_cu_adamw_step(struct mt_backend *b, struct mt_adamw *o, double lr, struct mt_err *err)
{
	struct cu *s = b->state;
	struct mt_adamw_coef c;
	struct mt_adamw_scalars k;

	o->step++;
	o->lr = lr;
	mt_adamw_coef(o, lr, o->step, &c);
	k.decay = c.decay;
	k.lerp_w = c.lerp_w;
	k.beta2 = c.beta2;
	k.one_minus_beta2 = c.one_minus_beta2;
	k.bc2_sqrt = c.bc2_sqrt;
	k.eps = c.eps;
	k.neg_step_size = c.neg_step_size;
	if (s->failed)
		return mt_cu_failed_err(s, err);
	mt_cu_prof_mark(s, P_OPTIM);
	if (mt_adamw_apply(s->chunks, s->nchunks, &k, s->gclip, s->w, s->g, s->m, s->v, s->dt,
			   s->wc == (void *)s->w ? NULL : s->wc)) {
		mt_cu_fail(s);
		return mt_cu_failed_err(s, err);
	}
	mt_cu_prof_mark(s, P_OPTIM);
	if (b->timers && mt_cu_rt_check(s, cudaStreamSynchronize(0), "cudaStreamSynchronize", __FILE__, __LINE__))
		return mt_cu_failed_err(s, err); /* timed: the update done before the clock stops */
	if (s->zero) {
		double t0 = b->timers ? mt_now() : 0;
		if (mt_cu_gather_params(s, b->step, err))
			return -1;
		mt_timer_add(b->timers, MT_T_PARAMS_ALL_GATHER, t0);
	}
	mt_cu_prof_collect(s);
	if (s->prof && o->step == 1)
		memset(s->ptime, 0, sizeof(s->ptime));
	if (s->prof) {
		double t = mt_now();
		if (o->step > 1) {
			s->pwall += t - s->plast;
			s->psteps++;
		}
		s->plast = t;
	}
	s->gclip = 1.0f;
	return 0;
}

int mt_cu_get_grad(struct mt_backend *b, float *g, struct mt_err *err)
{
	struct cu *s = b->state;
	cudaError_t e;

	if (grads_settle(s))
		return mt_err_set(err, MT_EXIT_IO, "zeroing the gradient: %s", mt_cuda_error());
	e = cudaMemcpy(g, s->g, (size_t)s->t->total * sizeof(float), cudaMemcpyDeviceToHost);

	if (e != cudaSuccess)
		return mt_err_set(err, MT_EXIT_IO, "copying the gradient from the GPU: %s", cudaGetErrorString(e));
	return 0;
}

double mt_cu_loss_scale(const struct mt_backend *b)
{
	const struct cu *s = b->state;

	return s->scale;
}

#endif
