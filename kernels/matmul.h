/* matmul.h: the model's linear layers on cuBLASLt, row-major as lib/gpt.c writes them:
 * weights [out, in] (PyTorch's layout), activations [rows, features]. Declarations
 * only; kernels/matmul.cu has the code. Accumulation is fp32 in every precision; the
 * weight gradient is always fp32 (added to the flat gradient buffer). */
#ifndef MT_KERNELS_MATMUL_H
#define MT_KERNELS_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_err.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mt_lt;

/* a cuBLASLt handle using the given device workspace */
int mt_lt_create(struct mt_lt **lt, void *workspace, size_t bytes);
void mt_lt_destroy(struct mt_lt *lt);

/* out[N,O] = in[N,IN] @ W[O,IN]^T (+ bias[O]) (+ resid[N,O]); bias, resid may be NULL;
 * resid may be out itself */
int mt_linear_fwd(struct mt_lt *lt, enum mt_dtype dt, void *out, const void *in, const void *W, const void *bias,
		  const void *resid, int64_t N, int64_t IN, int64_t O);
/* out[N,O] = in[N,IN] @ W[O,IN]^T in fp32 whatever dt the inputs have (the logits of
 * inference, read on the host) */
int mt_linear_fwd_f32(struct mt_lt *lt, enum mt_dtype dt, float *out, const void *in, const void *W, int64_t N,
		      int64_t IN, int64_t O);
/* din[N,IN] = dout[N,O] @ W[O,IN] (accumulate: +=) */
int mt_linear_bwd_in(struct mt_lt *lt, enum mt_dtype dt, void *din, const void *dout, const void *W, int64_t N,
		     int64_t IN, int64_t O, int accumulate);
/* dW[O,IN] (+)= dout[N,O]^T @ in[N,IN], dW fp32; accumulate 0: dW's old contents are
 * neither read nor kept (the first gradient of a step: no zeroing beforehand) */
int mt_linear_bwd_w(struct mt_lt *lt, enum mt_dtype dt, float *dW, const void *dout, const void *in, int64_t N,
		    int64_t IN, int64_t O, int accumulate);

/* act[N,O] = gelu(pre), pre[N,O] = in @ W^T (+ bias): fc1 with GELU (tanh) in cuBLASLt's
 * epilogue, or a GELU kernel after the product where cuBLASLt has no such algorithm */
int mt_linear_fwd_gelu(struct mt_lt *lt, enum mt_dtype dt, void *act, void *pre, const void *in, const void *W,
		       const void *bias, int64_t N, int64_t IN, int64_t O);
/* din[N,IN] = (dout[N,O] @ W[O,IN]) * gelu'(pre[N,IN]): fc2's input gradient through GELU */
int mt_linear_bwd_in_dgelu(struct mt_lt *lt, enum mt_dtype dt, void *din, const void *dout, const void *W,
			   const void *pre, int64_t N, int64_t IN, int64_t O);

#ifdef __cplusplus
}
#endif

#endif
