/* embed.h: the token (and learned position) embedding, forward and backward.
 * Declarations only; kernels/embed.cu has the code. */
#ifndef MT_KERNELS_EMBED_H
#define MT_KERNELS_EMBED_H

#include <stdint.h>

#include "cuda_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* x[n] = wte[tok[n]] + wpe[n % T] (wpe may be NULL), rows of h */
int mt_embed_fwd(enum mt_dtype dt, void *x, const int32_t *tok, const void *wte, const void *wpe, int64_t N,
		 int64_t T, int64_t h);
/* x[n] = wte[tok[n]] + wpe[pos[n]] (wpe may be NULL): rows at any positions (inference) */
int mt_embed_rows(enum mt_dtype dt, void *x, const int32_t *tok, const int32_t *pos, const void *wte, const void *wpe,
		  int64_t N, int64_t h);
/* gwte[u_tok[k]] += sum of dx[pos[j]] for j in [start[k], start[k+1]), in that order, for
 * k < nuniq: the positions grouped by token on the host (a counting sort), so no two
 * blocks write one row and the sum order is fixed; gwpe[t] += sum over sequences b of
 * dx[b * T + t] (gwpe may be NULL) */
int mt_embed_bwd(enum mt_dtype dt, float *gwte, float *gwpe, const void *dx, const int32_t *u_tok,
		 const int32_t *start, const int32_t *pos, int64_t nuniq, int64_t N, int64_t T, int64_t h);

#ifdef __cplusplus
}
#endif

#endif
