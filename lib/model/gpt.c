/* gpt.c: the CPU forward and backward passes (see gpt.h), in fp32 and fp64 from one
 * body (gpt_impl.h), so the fp64 gradient check tests the code that trains. */
#include "model/gpt.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* activation views: what the forward pass keeps for the backward pass */
enum { A_RESID, A_LN1, A_LN1S, A_QKV, A_ATT, A_ATTY, A_MID, A_LN2, A_LN2S, A_FC1, A_ACT, A_LNF, A_LNFS,
       A_LOGITS, A_FULL, A_PART,
       /* a split backward pass's output gradients of fc2, fc1, the projection and QKV */
       A_SFC2, A_SFC1, A_SPROJ, A_SQKV, A_NVIEWS };

#define REAL float
#define GEMM cblas_sgemm
#define SFX(name) name##_f32
#include "model/gpt_impl.h"
#undef REAL
#undef GEMM
#undef SFX

#define REAL double
#define GEMM cblas_dgemm
#define SFX(name) name##_f64
#include "model/gpt_impl.h"
#undef REAL
#undef GEMM
#undef SFX

int mt_gpt_acts_alloc(struct mt_gpt_acts *a, const struct mt_config *c, int B, int T, int fp64,
		      struct mt_err *err)
{
	memset(a, 0, sizeof(*a));
	return mt_gpt_acts_alloc_tp(a, c, NULL, B, T, fp64, err);
}

int mt_gpt_acts_alloc_tp(struct mt_gpt_acts *a, const struct mt_config *c, const struct mt_tp *tp, int B, int T,
			 int fp64, struct mt_err *err)
{
	struct mt_gpt_stage whole = { 0, c->num_layers, 1, 1 };

	return mt_gpt_acts_alloc_stage(a, c, tp, &whole, 0, B, T, fp64, err);
}

int mt_gpt_acts_alloc_stage(struct mt_gpt_acts *a, const struct mt_config *c, const struct mt_tp *tp,
			    const struct mt_gpt_stage *st, int split_backward, int B, int T, int fp64,
			    struct mt_err *err)
{
	/* the residual stream's rows: all, or this rank's with sequence parallelism; the
	 * gathered and partial-sum rows of the split points with tensor parallelism; the
	 * stage's layers only, the final norm and logits on the last stage */
	struct dims_f32 d = dims_of_f32(c, tp, B, T);
	size_t es = fp64 ? sizeof(double) : sizeof(float);
	int64_t R = d.Nr, S = d.t > 1 ? d.N * d.h : 0, L = st->l1 - st->l0, hd = st->last ? 1 : 0;
	int64_t W = split_backward ? L : 0;
	int64_t n[A_NVIEWS] = {
		[A_RESID] = (L + 1) * R * d.h, [A_LN1] = L * R * d.h, [A_LN1S] = L * R * 2,
		[A_QKV] = L * d.N * d.qkv, [A_ATT] = L * d.B * d.np * d.T * d.T, [A_ATTY] = L * d.N * d.q,
		[A_MID] = L * R * d.h, [A_LN2] = L * R * d.h, [A_LN2S] = L * R * 2,
		[A_FC1] = L * d.N * d.fc1, [A_ACT] = L * d.N * d.f, [A_LNF] = hd * R * d.h, [A_LNFS] = hd * R * 2,
		[A_LOGITS] = hd * d.N * d.V, [A_FULL] = S, [A_PART] = S,
		[A_SFC2] = W * d.N * d.h, [A_SFC1] = W * d.N * d.fc1, [A_SPROJ] = W * d.N * d.h, [A_SQKV] = W * d.N * d.qkv,
	};
	size_t total = 0;
	double ls = a->label_smoothing;

	if (fp64 && d.t > 1)
		return mt_err_set(err, MT_EXIT_USAGE, "the fp64 passes run on one rank only");
	if (st->l0 < 0 || st->l1 > c->num_layers || st->l0 > st->l1)
		return mt_err_set(err, MT_EXIT_USAGE, "layers [%d, %d) are not a part of a model of %d layers", st->l0, st->l1,
				  c->num_layers);
	memset(a, 0, sizeof(*a));
	a->tp = tp;
	a->label_smoothing = ls;
	a->st = *st;
	a->split_backward = split_backward;
	for (int i = 0; i < A_NVIEWS; i++)
		total += (size_t)n[i] * es;
	a->mem = malloc(total ? total : 1);
	if (!a->mem)
		return mt_err_set(err, MT_EXIT_IO, "out of memory: activations need %zu MB", total >> 20);
	a->bytes = total;
	a->B = B;
	a->T = T;
	total = 0;
	for (int i = 0; i < A_NVIEWS; i++) {
		a->p[i] = (char *)a->mem + total;
		total += (size_t)n[i] * es;
	}
	return 0;
}

void mt_gpt_acts_free(struct mt_gpt_acts *a)
{
	free(a->mem);
	memset(a, 0, sizeof(*a));
}

const float *mt_gpt_probs_f32(const struct mt_gpt_acts *a)
{
	return a->p[A_LOGITS];
}

void mt_gpt_norm_f32(float *out, float *stats, const float *x, const float *w, const float *b, int64_t N, int64_t h,
		     int rms, double eps)
{
	norm_f32(out, stats, x, w, b, N, h, rms, eps);
}
