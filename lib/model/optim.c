/* optim.c: AdamW over a parameter table, and the gradient norm, clipping and finiteness
 * checks (see optim.h). It holds no learning-rate schedule (lrsched.c) and allocates
 * nothing: the caller owns w, g, m and v.
 *
 * The update is PyTorch 2.x torch.optim.AdamW, _single_tensor_adamw (foreach=False,
 * fused=False, amsgrad=False, maximize=False), which runs per parameter tensor:
 *
 *     step_t += 1
 *     param.mul_(1 - lr * weight_decay)
 *     exp_avg.lerp_(grad, 1 - beta1)
 *     exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
 *     bias_correction1 = 1 - beta1 ** step
 *     bias_correction2 = 1 - beta2 ** step
 *     step_size = lr / bias_correction1
 *     bias_correction2_sqrt = math.sqrt(bias_correction2)
 *     denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
 *     param.addcdiv_(exp_avg, denom, value=-step_size)
 *
 * The scalars are Python floats (double) rounded once to float where they meet an fp32
 * tensor (mt_adamw_coef); every tensor operation is one fp32 operation, rounded, in
 * ATen's order:
 *
 *     p = p * decay                       mul_: decay = (float)(1 - lr*wd)
 *     m = fmaf(w1, g - m, m)              lerp_: w1 = (float)(1 - beta1) < 0.5; ATen's lerp
 *         (w1 >= 0.5: fmaf(w1 - 1, g - m, g))   is fmadd(w, end - self, self)
 *     v = v * b2                          mul_: b2 = (float)beta2
 *     v = fmaf(c2 * g, g, v)              addcmul_: self + value * t1 * t2, the last
 *                                         multiply-add fused; c2 = (float)(1 - beta2)
 *     d = sqrtf(v) / bc2s + eps           sqrt, div (a true division), add_:
 *                                         bc2s = (float)sqrt(1 - beta2^t)
 *     p = p + (s * m) / d                 addcdiv_: self + value * t1 / t2, not fused:
 *                                         s = (float)(-(lr / (1 - beta1^t)))
 *
 * The two FMAs are what torch 2.11's CPU kernels compute (checked op by op on 100003
 * elements, AVX512 build: lerp_ and addcmul_ equal the fused forms everywhere, the
 * unfused forms differ in 30% and 14% of them); a CUDA kernel matches with __fmaf_rn at
 * those two places and IEEE division and sqrtf elsewhere. sqrtf is correctly rounded;
 * that torch build's vectorized CPU sqrt is not (it differs from it in 0.7% of random
 * floats, in the last bit), so ten steps against torch.optim.AdamW(foreach=False) agree to the
 * bit in exp_avg and exp_avg_sq and within one ulp in a few weights
 * (tests/unit/test_optim.c). PyTorch 1.13 differed in the first moment,
 * exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1); we follow 2.x.
 *
 * Each element's update reads only that element, so the OpenMP split cannot change a
 * result. The gradient norm sums each parameter in chunks whose bounds depend on the
 * parameter's size only, each chunk sequentially in double, then the chunks in order. */
#include "model/optim.h"

#include <math.h>
#include <string.h>

/* below this many elements a loop is not worth starting threads for */
#define PAR_MIN 32768
/* chunks of the gradient norm: at least NORM_CHUNK elements, at most NORM_MAXCHUNKS per parameter */
#define NORM_CHUNK 16384
#define NORM_MAXCHUNKS 512

void mt_adamw_init(struct mt_adamw *o)
{
	memset(o, 0, sizeof(*o));
	o->beta1 = 0.9;
	o->beta2 = 0.999;
	o->eps = 1e-8;
	o->weight_decay = 0.01;
}

void mt_adamw_coef(const struct mt_adamw *o, double lr, int64_t step, struct mt_adamw_coef *c)
{
	double bc1 = 1.0 - pow(o->beta1, (double)step);
	double bc2 = 1.0 - pow(o->beta2, (double)step);
	double step_size = lr / bc1;

	c->decay = (float)(1.0 - lr * o->weight_decay);
	c->lerp_w = (float)(1.0 - o->beta1);
	c->beta2 = (float)o->beta2;
	c->one_minus_beta2 = (float)(1.0 - o->beta2);
	c->bc2_sqrt = (float)sqrt(bc2);
	c->eps = (float)o->eps;
	c->neg_step_size = (float)(-step_size);
}

/* On x86-64 an FMA clone of the loop, chosen at load time where the CPU has FMA, makes
 * fmaf one instruction instead of a libm call; both clones compute the same bits. */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#define FMA_CLONES __attribute__((target_clones("fma", "default")))
#else
#define FMA_CLONES
#endif

FMA_CLONES
static void update_range(const struct mt_adamw_coef *c, int decay, float *w, const float *g, float *m,
			 float *v, int64_t lo, int64_t hi)
{
	const float dec = decay ? c->decay : 1.0f;
	const float w1 = c->lerp_w, b2 = c->beta2, c2 = c->one_minus_beta2;
	const float bc2s = c->bc2_sqrt, eps = c->eps, s = c->neg_step_size;
	const int small = w1 < 0.5f;

	for (int64_t i = lo; i < hi; i++) {
		float p = w[i], gi = g[i], mi = m[i], vi = v[i], d;

		p = p * dec;
		mi = small ? fmaf(w1, gi - mi, mi) : fmaf(w1 - 1.0f, gi - mi, gi);
		vi = vi * b2;
		vi = fmaf(c2 * gi, gi, vi);
		d = sqrtf(vi) / bc2s + eps;
		p = p + s * mi / d;
		w[i] = p;
		m[i] = mi;
		v[i] = vi;
	}
}

void mt_adamw_update(const struct mt_adamw_coef *c, int decay, float *w, const float *g, float *m,
		     float *v, int64_t n)
{
	const int64_t block = 8192, nblock = (n + block - 1) / block;

	#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
	for (int64_t b = 0; b < nblock; b++)
		update_range(c, decay, w, g, m, v, b * block, b * block + block < n ? b * block + block : n);
}

void mt_adamw_step(struct mt_adamw *o, const struct mt_params *t, float *w, const float *g, float *m,
		   float *v, double lr)
{
	struct mt_adamw_coef c;

	o->step++;
	o->lr = lr;
	mt_adamw_coef(o, lr, o->step, &c);
	for (int i = 0; i < t->n; i++) {
		const struct mt_param *p = &t->p[i];

		mt_adamw_update(&c, p->weight_decay, w + p->offset, g + p->offset, m + p->offset,
				v + p->offset, p->numel);
	}
}

/* Sequential sum of squares in double: four running sums over i mod 4, then (s0+s1)+(s2+s3). */
static double sumsq_seq(const float *x, int64_t n)
{
	double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
	int64_t i = 0;

	for (; i + 4 <= n; i += 4) {
		s0 += (double)x[i] * x[i];
		s1 += (double)x[i + 1] * x[i + 1];
		s2 += (double)x[i + 2] * x[i + 2];
		s3 += (double)x[i + 3] * x[i + 3];
	}
	for (; i < n; i++)
		s0 += (double)x[i] * x[i];
	return (s0 + s1) + (s2 + s3);
}

double mt_grad_sumsq_param(const float *x, int64_t n)
{
	double part[NORM_MAXCHUNKS], s = 0;
	int64_t chunk = NORM_CHUNK, nchunk;

	if (n <= NORM_CHUNK)
		return sumsq_seq(x, n);
	if ((n + chunk - 1) / chunk > NORM_MAXCHUNKS)
		chunk = (n + NORM_MAXCHUNKS - 1) / NORM_MAXCHUNKS;
	nchunk = (n + chunk - 1) / chunk;
	#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
	for (int64_t k = 0; k < nchunk; k++) {
		int64_t lo = k * chunk, hi = lo + chunk < n ? lo + chunk : n;

		part[k] = sumsq_seq(x + lo, hi - lo);
	}
	for (int64_t k = 0; k < nchunk; k++)
		s += part[k];
	return s;
}

double mt_grad_sumsq(const struct mt_params *t, const float *g)
{
	double s = 0;

	/* a replica another tensor-parallel rank counts is not counted here (params.h) */
	for (int i = 0; i < t->n; i++)
		if (!t->p[i].norm_skip)
			s += mt_grad_sumsq_param(g + t->p[i].offset, t->p[i].numel);
	return s;
}

double mt_grad_norm(const struct mt_params *t, const float *g)
{
	return sqrt(mt_grad_sumsq(t, g));
}

double mt_grad_clip_coeff(double norm, double max_norm)
{
	return max_norm / (norm + 1.0e-6);
}

void mt_grad_scale(const struct mt_params *t, float *g, float s)
{
	for (int i = 0; i < t->n; i++) {
		float *x = g + t->p[i].offset;
		int64_t n = t->p[i].numel;

		#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
		for (int64_t j = 0; j < n; j++)
			x[j] = x[j] * s;
	}
}

double mt_grad_clip(const struct mt_params *t, float *g, double max_norm)
{
	double norm = mt_grad_norm(t, g), coeff;

	if (max_norm > 0) {
		coeff = mt_grad_clip_coeff(norm, max_norm);
		if (coeff < 1.0)
			mt_grad_scale(t, g, (float)coeff);
	}
	return norm;
}

int mt_grad_nonfinite(const struct mt_params *t, const float *g)
{
	int bad = 0;

	for (int i = 0; i < t->n && !bad; i++) {
		const float *x = g + t->p[i].offset;
		int64_t n = t->p[i].numel;

		/* exponent bits all ones: Inf or NaN */
		#pragma omp parallel for schedule(static) reduction(|:bad) if (n >= PAR_MIN)
		for (int64_t j = 0; j < n; j++) {
			uint32_t u;

			memcpy(&u, &x[j], sizeof(u));
			bad |= (u & 0x7f800000u) == 0x7f800000u;
		}
	}
	return bad;
}
