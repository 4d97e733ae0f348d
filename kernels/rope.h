/* rope.h: rotary position embedding on the query and key heads of a fused QKV buffer
 * (Megatron's layout, see lib/params.h; rotate-half form). Declarations only;
 * kernels/rope.cu has the code. */
#ifndef MT_KERNELS_ROPE_H
#define MT_KERNELS_ROPE_H

#include <stdint.h>

#include "cuda_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* in place on qkv [N][(np + 2 ng) hd]; cs[t][hd/2][2] = cos, sin of t * base^(-2i/hd)
 * (computed by the caller, in double, rounded once); inverse = 1 rotates back (the
 * backward pass) */
int mt_rope(enum mt_dtype dt, void *qkv, const float *cs, int64_t N, int64_t T, int np, int ng, int hd, int inverse);

#ifdef __cplusplus
}
#endif

#endif
