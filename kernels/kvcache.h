/* kvcache.h: the key/value cache of inference: each row of a fused QKV buffer (Megatron's
 * layout, lib/params.h) gets the rotary embedding of its own position on its query and
 * key heads, then its keys and values are stored at that position of its slot's cache.
 * Declarations only; kernels/kvcache.cu has the code. */
#ifndef MT_KERNELS_KVCACHE_H
#define MT_KERNELS_KVCACHE_H

#include <stdint.h>

#include "cuda_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One layer's cache kc, vc: [slots][ng][max_len][hd]. For row n < N of qkv [N][(np + 2 ng) hd]:
 * with cs (cs[p][hd/2][2] = cos, sin of p * base^(-2i/hd), as rope.h), its query and key
 * heads are rotated in place to position pos[n]; then kc and vc at [slot[n]][g][pos[n]]
 * receive its key and value heads. cs NULL: no rotation (learned positions). */
int mt_kv_append(enum mt_dtype dt, void *qkv, void *kc, void *vc, const int32_t *slot, const int32_t *pos,
		 const float *cs, int64_t N, int np, int ng, int hd, int max_len);

#ifdef __cplusplus
}
#endif

#endif
