/* gelu.h: GELU, tanh approximation (GPT-2's), forward and backward over n elements.
 * Declarations only; kernels/gelu.cu has the code. */
#ifndef MT_KERNELS_GELU_H
#define MT_KERNELS_GELU_H

#include <stdint.h>

#include "cuda_err.h"

#ifdef __cplusplus
extern "C" {
#endif

int mt_gelu_fwd(enum mt_dtype dt, void *out, const void *in, int64_t n);
/* din = dout * gelu'(in) */
int mt_gelu_bwd(enum mt_dtype dt, void *din, const void *dout, const void *in, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
