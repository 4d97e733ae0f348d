/* optim.h: AdamW and the gradient norm, clipping and finiteness checks of the CPU trainer.
 *
 * The update is torch.optim.AdamW's single-tensor path (foreach=False) of PyTorch 2.x,
 * operation by operation in fp32 (optim.c spells the order out), applied over the flat
 * fp32 buffers of a parameter table: the table's weight_decay flag says which
 * parameters decay (Megatron: none of the biases and norm parameters). The gradient
 * norm is Megatron's clip_grad_norm_fp32 with norm type 2, accumulated in double in an
 * order fixed by the table alone, so that every result here is the same bit for bit
 * whatever the thread count. Learning-rate and weight-decay schedules live in lrsched.c;
 * the CUDA backend's fused kernels take the same mt_adamw_coef scalars and must match
 * mt_adamw_update. */
#ifndef MT_OPTIM_H
#define MT_OPTIM_H

#include <stdint.h>

#include "model/params.h"

struct mt_adamw {
	double lr;              /* the learning rate of the last step (for logs) */
	double beta1, beta2;    /* --adam-beta1 0.9, --adam-beta2 0.999 */
	double eps;             /* --adam-eps 1e-8 */
	double weight_decay;    /* --weight-decay 0.01; the scheduler may change it per step */
	int64_t step;           /* steps taken; the next one uses step + 1 for the bias corrections */
};

/* The fp32 scalars of one step, as PyTorch rounds its Python floats to the tensor's dtype. */
struct mt_adamw_coef {
	float decay;            /* 1 - lr * weight_decay */
	float lerp_w;           /* 1 - beta1, the weight of exp_avg.lerp_(grad, 1 - beta1) */
	float beta2;
	float one_minus_beta2;  /* 1 - beta2 */
	float bc2_sqrt;         /* sqrt(1 - beta2^step) */
	float eps;
	float neg_step_size;    /* -(lr / (1 - beta1^step)) */
};

/* Megatron's defaults: betas (0.9, 0.999), eps 1e-8, weight decay 0.01, step 0. */
void mt_adamw_init(struct mt_adamw *o);

/* The scalars for step number `step` (1 for the first update) at learning rate lr. */
void mt_adamw_coef(const struct mt_adamw *o, double lr, int64_t step, struct mt_adamw_coef *c);

/* One update of n elements; decay 0 skips the weight decay (Megatron's no-decay group,
 * where PyTorch multiplies by 1 - lr * 0 = 1). OpenMP-parallel over elements. */
void mt_adamw_update(const struct mt_adamw_coef *c, int decay, float *w, const float *g, float *m,
		     float *v, int64_t n);

/* One AdamW step over every parameter of the table: o->step += 1, o->lr = lr, then
 * w, m and v (flat buffers laid out by the table; m and v start zeroed) are updated from
 * the gradient g, with o->weight_decay where the table's weight_decay flag is set. */
void mt_adamw_step(struct mt_adamw *o, const struct mt_params *t, float *w, const float *g, float *m,
		   float *v, double lr);

/* The sum of squares of the table's gradients in double: each parameter's in fixed
 * chunks, the chunks summed in order, the parameters summed in table order; a
 * tensor-parallel replica with norm_skip is left out (its rank 0 counts it), so the
 * sums of a group's ranks add up to the whole model's. */
double mt_grad_sumsq(const struct mt_params *t, const float *g);
/* The sum of squares of one parameter's n gradients, as mt_grad_sumsq takes it (dp.c sums
 * these over shards in table order). */
double mt_grad_sumsq_param(const float *x, int64_t n);
/* sqrt(mt_grad_sumsq): NaN or Inf when a gradient is. */
double mt_grad_norm(const struct mt_params *t, const float *g);
/* Megatron's clip coefficient max_norm / (norm + 1e-6); below 1 means clip. */
double mt_grad_clip_coeff(double norm, double max_norm);
/* Multiply every gradient of the table by (float)s. */
void mt_grad_scale(const struct mt_params *t, float *g, float s);
/* Megatron's --clip-grad: the norm, and when max_norm > 0 and the coefficient is below 1,
 * the gradients multiplied by it. Returns the norm before clipping. */
double mt_grad_clip(const struct mt_params *t, float *g, double max_norm);
/* 1 when some gradient of the table is NaN or infinite (skip the step), else 0. */
int mt_grad_nonfinite(const struct mt_params *t, const float *g);

#endif
