/* decode_attention.h: attention of single query rows over the key/value cache
 * (kvcache.h), the decode step of inference: row n's query heads attend over
 * positions 0..pos[n] of slot slot[n]'s cache, each slot at its own length, with
 * grouped-query heads. Split over the positions (flash-decoding): blocks of
 * MT_DECODE_SPLIT positions each leave a partial result, and the last of a (row, head)
 * to finish combines them in split order (the same bits run to run), all in one kernel.
 * Declarations only; kernels/decode_attention.cu has the code. Head sizes 8, 16, 32, 64
 * and 128. */
#ifndef MT_KERNELS_DECODE_ATTENTION_H
#define MT_KERNELS_DECODE_ATTENTION_H

#include <stdint.h>

#include "cuda_err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MT_DECODE_SPLIT 64

/* y[N][np*hd] = softmax(q k^T / sqrt(hd)) v for each row n and head, q from qkv
 * [N][(np + 2 ng) hd] (Megatron's layout), k and v from kc, vc [slots][ng][max_len][hd]
 * at [slot[n]][head's group][0..pos[n]]; scratch: mt_decode_attention_scratch(R, np, hd,
 * max_len) floats for up to R = scratch_rows rows, set up once by
 * mt_decode_attention_reset (it holds counters that each call leaves at zero). A
 * programmatic dependent launch when mt_cuda_pdl() is on (cuda_err.h). */
int mt_decode_attention(enum mt_dtype dt, void *y, const void *qkv, const void *kc, const void *vc,
			const int32_t *slot, const int32_t *pos, int64_t N, int np, int ng, int hd, int max_len,
			float *scratch, int64_t scratch_rows);
int64_t mt_decode_attention_scratch(int64_t R, int np, int hd, int max_len);
int mt_decode_attention_reset(float *scratch, int64_t R, int np, int hd, int max_len);

#ifdef __cplusplus
}
#endif

#endif
