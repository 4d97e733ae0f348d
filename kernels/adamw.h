/* adamw.h: the optimizer side on the GPU: a multi-tensor AdamW over the flat fp32
 * buffers (one launch for every parameter), the gradient's sum of squares with a
 * fixed reduction order, and the fp32 -> compute-type copy of the weights.
 * Declarations only; kernels/adamw.cu has the code. */
#ifndef MT_KERNELS_ADAMW_H
#define MT_KERNELS_ADAMW_H

#include <stdint.h>

#include "cuda_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One piece of a parameter: elements [start, start + len) of the flat gradient and
 * compute-copy buffers, len at most MT_ADAMW_CHUNK; decay: whether weight decay
 * applies; mstart: where the piece starts in the fp32 master weights and the moments
 * (start, except with a sharded optimizer, whose buffers hold only a rank's shard). */
#define MT_ADAMW_CHUNK 65536
struct mt_chunk {
	int64_t start;
	int32_t len;
	int32_t decay;
	int64_t mstart;
};

/* The fp32 scalars of lib/optim.h's struct mt_adamw_coef, in its order. */
struct mt_adamw_scalars {
	float decay, lerp_w, beta2, one_minus_beta2, bc2_sqrt, eps, neg_step_size;
};

/* w, m, v (at mstart) updated from g * gscale (at start) exactly as lib/optim.c's
 * mt_adamw_update; wc (may be NULL; at start) receives w rounded to dt */
int mt_adamw_apply(const struct mt_chunk *chunks, int64_t nchunks, const struct mt_adamw_scalars *s, float gscale,
		   float *w, const float *g, float *m, float *v, enum mt_dtype dt, void *wc);
/* g *= scale (when scale != 1), then *out (device double) = sum of g^2: per chunk in
 * double, the chunks summed in order; partial: nchunks doubles */
int mt_grad_sumsq_dev(const struct mt_chunk *chunks, int64_t nchunks, float *g, float scale, double *partial,
		      double *out);
/* g[c.start .. c.start + c.len) = 0 for each chunk c (one launch for many parameters) */
int mt_zero_chunks(const struct mt_chunk *chunks, int64_t nchunks, float *g);
/* dst[i] = (dt) src[i] */
int mt_convert_f32(enum mt_dtype dt, void *dst, const float *src, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
