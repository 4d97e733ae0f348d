/* decode_linear.h: the linear layers of a decode step (a few rows: one a sequence) as
 * single kernels that stream the weights once, with what comes before and after each
 * one fused in: the norm of the input rows (and, for the first layer, the embedding
 * that makes them), and an epilogue: bias, the residual add, GELU, SwiGLU, the rotary
 * embedding with the key/value cache append, or fp32 logits. Weights [O][IN] as
 * matmul.h (PyTorch's layout), rows [N][IN]; fp32 or bf16, accumulation in fp32.
 * Declarations only; kernels/decode_linear.cu has the code. */
#ifndef MT_KERNELS_DECODE_LINEAR_H
#define MT_KERNELS_DECODE_LINEAR_H

#include <stdint.h>

#include "cuda_err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MT_DLIN_MAX_ROWS 32

enum mt_dlin_epi {
	MT_DLIN_STORE,  /* out[n][o] = acc + bias */
	MT_DLIN_RESID,  /* out[n][o] += acc + bias (the residual stream, in place) */
	MT_DLIN_GELU,   /* out[n][o] = gelu_tanh(acc + bias) */
	MT_DLIN_SWIGLU, /* out[n][i] = silu(a) * b, a and b acc + bias of rows i and O/2 + i, each
			 * rounded to the type first (as fc1's output is); out has O/2 columns */
	MT_DLIN_F32,    /* out[n][o] = acc + bias in fp32 whatever the type (logits) */
	MT_DLIN_QKV,    /* the fused QKV projection of kvcache.h: v = acc + bias rounded to the
			 * type; with cs the query and key heads rotated to position pos[n]; the
			 * row to out, its key and value heads to kc, vc at [slot[n]][g][pos[n]] */
};

struct mt_dlin {
	const void *x;          /* input rows, row stride ldx elements */
	int64_t ldx;
	const void *norm_w;     /* non-NULL: LayerNorm (norm_b may be NULL) or RMSNorm of */
	const void *norm_b;     /* each input row first, rounded to the type */
	int rms;
	float eps;
	const int32_t *tok;     /* with norm_w: the input rows are wte[tok[n]] + wpe[pos[n]] */
	const void *wte, *wpe;  /* (wpe may be NULL) instead of x, and written to x_out */
	void *x_out;
	const void *W, *bias;   /* [O][IN], [O] or NULL */
	int epi;                /* enum mt_dlin_epi */
	void *out;              /* row stride ldo elements */
	int64_t ldo;
	/* MT_DLIN_QKV (and the embedding's positions): Megatron's layout of np query heads in
	 * ng groups of head size hd; cs NULL or the rotary table of rope.h */
	void *kc, *vc;
	const int32_t *slot, *pos;
	const float *cs;
	int np, ng, hd, max_len;
};

/* 1 if the kernel takes these shapes and pointers (fp32 or bf16, 1 <= N <= 32, IN a
 * multiple of 32, O of 16, 16-byte aligned rows, rotary heads of 16, 32, 64 or 128, the shared
 * memory of a norm's rows within the device's), else 0 with the reason in
 * mt_cuda_error() */
int mt_decode_linear_fits(enum mt_dtype dt, const struct mt_dlin *a, int N, int IN, int O);
/* Blocks a cluster for the bf16 kernels on sm_90: n > 0 that many (1: none, at most 4 are
 * used), 0 (the default without a call): chosen from the layer's shape. The library sets it
 * from MT_DECODE_CLUSTER (kernels/ reads no environment), before the first launch. */
void mt_decode_linear_set_cluster(int blocks);
/* the layer for N rows; a programmatic dependent launch when mt_cuda_pdl() is on */
int mt_decode_linear(enum mt_dtype dt, const struct mt_dlin *a, int N, int IN, int O);

#ifdef __cplusplus
}
#endif

#endif
