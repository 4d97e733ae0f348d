/* norm.h: LayerNorm and RMSNorm over the rows of [N, h], forward and backward, as
 * lib/gpt_impl.h defines them (stats[2n] = mean, 0 for RMSNorm; stats[2n+1] = rstd,
 * fp32). Declarations only; kernels/norm.cu has the code. The weight and bias
 * gradients are summed over rows in a fixed order (no atomics): run to run identical. */
#ifndef MT_KERNELS_NORM_H
#define MT_KERNELS_NORM_H

#include <stdint.h>

#include "cuda_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out = norm(x) * w + b; b may be NULL */
int mt_norm_fwd(enum mt_dtype dt, void *out, float *stats, const void *x, const void *w, const void *b, int64_t N,
		int64_t h, int rms, float eps);
/* dx (+)= d norm / dx (accumulate 0: overwrite); dw += sum_rows dout * xhat, db += sum_rows
 * dout (db may be NULL), dsum += sum_rows of dx as written (dsum may be NULL: where dx is
 * the output gradient of a linear layer, e.g. the residual stream's, its bias gradient);
 * scratch: mt_norm_scratch_floats(h, ...) floats */
int mt_norm_bwd(enum mt_dtype dt, void *dx, int accumulate, float *dw, float *db, float *dsum, const void *dout,
		const void *x, const float *stats, const void *w, int64_t N, int64_t h, int rms, float *scratch);
/* the scratch floats for norms of width h and bias gradients of width o */
int64_t mt_norm_scratch_floats(int64_t h, int64_t o);

/* db[O] += sum over rows of dout[N, O] (a linear layer's bias gradient); scratch as above */
int mt_bias_grad(enum mt_dtype dt, float *db, const void *dout, int64_t N, int64_t O, float *scratch);

#ifdef __cplusplus
}
#endif

#endif
