/* tpsplit.h: the small element-wise pieces a tensor-parallel layer needs around its
 * collectives: the bias and residual added after a row-parallel reduction, the
 * vocabulary-parallel embedding lookup, learned positions at a row offset (sequence
 * parallelism), and the cross-entropy over a vocabulary split across ranks (each rank's
 * row statistics, then the loss and gradient from the group's). Declarations only;
 * kernels/tpsplit.cu has the code. */
#ifndef MT_KERNELS_TPSPLIT_H
#define MT_KERNELS_TPSPLIT_H

#include <stdint.h>

#include "cuda_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y[n][i] = (y + b[i]) + r[n][i] in fp32, rounded once (b and r may be NULL) */
int mt_bias_residual(enum mt_dtype dt, void *y, const void *b, const void *r, int64_t rows, int64_t h);
/* x[n] = wte[tok[n] - v0] when v0 <= tok[n] < v0 + nv, else zeros (this rank's rows of
 * the vocabulary, [nv][h]) */
int mt_embed_fwd_vocab(enum mt_dtype dt, void *x, const int32_t *tok, const void *wte, int64_t v0, int64_t nv,
		       int64_t N, int64_t h);
/* x[n] += wpe[(r0 + n) % T] for the N rows starting at row r0 of the batch */
int mt_embed_pos_add(enum mt_dtype dt, void *x, const void *wpe, int64_t r0, int64_t N, int64_t T, int64_t h);
/* gwpe[(r0 + n) % T] += dx[n], for each position the rows in ascending order */
int mt_embed_pos_bwd(enum mt_dtype dt, float *gwpe, const void *dx, int64_t r0, int64_t N, int64_t T, int64_t h);
/* per row of logits [rows][V] (this rank's vocabulary): mx[n] its maximum, sum[n] the sum
 * of exp(z - mx[n]) */
int mt_classifier_stats(enum mt_dtype dt, const void *logits, float *mx, float *sum, int64_t rows, int64_t V);
/* with the group's row maximum gmx and sum of exp(z - gmx) gsum: loss[n] = log(gsum) +
 * gmx - z[target - v0] on the rank whose vocabulary rows [v0, v0 + V) hold the target, 0
 * elsewhere and where the target is -1; with grad the row becomes (softmax - onehot) *
 * gscale in place (zeros where the target is -1) */
int mt_classifier_vocab(enum mt_dtype dt, void *logits, float *loss, const int32_t *target, const float *gmx,
			const float *gsum, int64_t v0, int64_t rows, int64_t V, int grad, float gscale);

#ifdef __cplusplus
}
#endif

#endif
