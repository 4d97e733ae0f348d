/* swiglu.h: SwiGLU, silu(a) * b, where each row of the input holds [a (f) | b (f)] as
 * Megatron's fused fc1 writes it. Declarations only; kernels/swiglu.cu has the code. */
#ifndef MT_KERNELS_SWIGLU_H
#define MT_KERNELS_SWIGLU_H

#include <stdint.h>

#include "cuda_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[N][f] from in[N][2f] */
int mt_swiglu_fwd(enum mt_dtype dt, void *out, const void *in, int64_t N, int64_t f);
/* din[N][2f] from dout[N][f] and in */
int mt_swiglu_bwd(enum mt_dtype dt, void *din, const void *dout, const void *in, int64_t N, int64_t f);

#ifdef __cplusplus
}
#endif

#endif
