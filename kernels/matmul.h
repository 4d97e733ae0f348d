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

/* Matmul tuning. Each product takes cuBLASLt's first heuristic candidate, unless a pick
 * names another for its key. With tuning on, a product whose key has no pick has its
 * candidates (up to 16, no split-K) timed on its own operands, the output going to a
 * scratch buffer: each candidate repeated for sustain_ms, twice round, the mean of the
 * launches after the first 40% of each turn. On a GPU held at its power limit (an H100 or
 * H200 training: 1,300-1,400 MHz under load against 1,980 idle) that is what a product
 * costs inside a step, which a short burst on an idle GPU does not show
 * (kernels/bench/NOTES.md). The fastest becomes the key's pick when it beats the first
 * candidate by 1% or more, else the first does; `tuned` hears of each new pick. A pick
 * whose configuration the heuristic no longer offers (another cuBLASLt, another
 * alignment) falls back to the first candidate. No tuning while the stream is captured
 * into a graph. A key is compared whole (memcmp): its fields leave no padding. */
struct mt_lt_key {
	int ab, cd;       /* element types of A and B, of C and D (enum mt_dtype) */
	int ta, tb;       /* op(A), op(B) transposed */
	int64_t m, n, k;  /* column-major D[m,n] = op(A)[m,k] op(B)[k,n] */
	int64_t lda, ldb, ldd;
	int beta;         /* 1: C is added (a residual, gradient accumulation) */
	int epi;          /* cublasLtEpilogue_t */
};
#define MT_LT_CFG 8
struct mt_lt_pick {
	struct mt_lt_key key;
	/* algorithm id, tile, stages, split-K, reduction scheme, CTA swizzling, custom option,
	 * cluster shape (cuBLASLt's CUBLASLT_ALGO_* attributes) */
	int cfg[MT_LT_CFG];
	float ms, first_ms; /* sustained ms a product: the pick's, the first candidate's */
	int ncand;          /* candidates timed */
};
/* sustain_ms 0: tuning off (picks already added are still used); tuned (may be NULL) is
 * called with each new pick, or with msg set where a product could not be tuned (no
 * scratch memory), from the thread that runs the product */
void mt_lt_tuning(struct mt_lt *lt, double sustain_ms,
		  void (*tuned)(void *ctx, const struct mt_lt_pick *p, const char *msg), void *ctx);
/* use p's configuration for its key (replacing an earlier pick of the key) */
int mt_lt_add_pick(struct mt_lt *lt, const struct mt_lt_pick *p);
/* the device and library a pick was made on: "<device name>\tcuBLASLt <version>" */
int mt_lt_ident(char *buf, size_t n);

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
