/* attention.h: causal multi-head attention with grouped-query heads over a fused QKV
 * buffer (Megatron's layout: per query group its query heads, its key head, its value
 * head, each hd wide), flash style: the T x T scores are never stored; the forward keeps
 * the log-sum-exp of each query row for the backward. Declarations only;
 * kernels/attention.cu has the code. Head sizes 8, 16, 32, 64 and 128. */
#ifndef MT_KERNELS_ATTENTION_H
#define MT_KERNELS_ATTENTION_H

#include <stdint.h>

#include "cuda_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 (default): bf16/fp16 with head size 64 or 128 take the tensor-core kernels; 0: the
 * CUDA-core ones (for comparing the two) */
extern int mt_attention_tensor_cores;

/* 1 (default): on a compute capability 9.0 device with sm_90a code, bf16/fp16 at head
 * sizes 64 and 128 take the wgmma/TMA forward (attention_sm90.cu); 0: the mma.sync one */
extern int mt_attention_sm90;
/* 0 (default): the sm_90a backward adds each key block's query gradients in whatever order
 * the blocks finish (the last bits of dQ may differ from run to run); 1: in a fixed order,
 * bit-identical runs (mt-train --deterministic) */
extern int mt_attention_deterministic;
/* 0 (default): the sm_90a backward's key blocks start in groups of about SMs / key blocks
 * (head group, batch) pairs, the longest first within a group; n > 0: groups of n pairs
 * (tests: several groups at small sizes) */
extern int mt_attention_bwd_group;
/* head size 128: -1 (default): MT_ATTN_BWD_ALT decides, on unless it is 0; 1: the sm_90a
 * backward's two consumer warpgroups take turns to make each query tile's whole dQ; 0: each
 * makes half of every tile's. The same products either way, so the same bits (tests compare
 * them) */
extern int mt_attention_bwd_alt;
/* The sm_90a kernels' switches for comparisons. kernels/ reads no environment: the
 * library fills these from the MT_ATTN_* variables (lib/base/knobs.h, docs/environment.md)
 * and sets them once, before the first launch; without that call each has the default
 * below. */
struct mt_attention_sm90_options {
	int sm90;     /* 0: the mma.sync kernels instead (MT_ATTN_SM90); 1 */
	int pingpong; /* 0: the forward's consumer warpgroups issue as they come (MT_ATTN_PINGPONG); 1 */
	int persist;  /* 0: the forward launches a block an item, not a persistent grid (MT_ATTN_PERSIST); 1 */
	int order;    /* 0: the longest tiles of every head first, not heads in groups (MT_ATTN_ORDER); 1 */
	int sm90_bwd; /* 0: the mma.sync backward (MT_ATTN_SM90_BWD); 1 */
	int bwd7;     /* 1: the backward's seven products (MT_ATTN_BWD7); 0 */
	int bwd_alt;  /* head size 128, where mt_attention_bwd_alt is -1: 0 halves of dQ (MT_ATTN_BWD_ALT); 1 */
	int bwd_pp;   /* the backward's warpgroups in turns: 0 off, 1 on, -1 on unless bwd_alt applies
		       * (MT_ATTN_BWD_PP); -1 */
};
#define MT_ATTENTION_SM90_OPTIONS_DEFAULT { 1, 1, 1, 1, 1, 0, 1, -1 }
void mt_attention_sm90_set_options(const struct mt_attention_sm90_options *o);
/* the sm_90a forward: 0 when it ran, 1 when it does not apply here, -1 on a CUDA error */
int mt_attention_fwd_sm90(enum mt_dtype dt, void *y, float *lse, const void *qkv, int B, int T, int np, int ng, int hd);
/* the sm_90a backward, the same way */
int mt_attention_bwd_sm90(enum mt_dtype dt, void *dqkv, const void *dy, const void *y, const float *lse, const void *qkv,
			  int B, int T, int np, int ng, int hd, float *dbias, float *scratch, const float *rope);

/* y[B*T][np*hd] = softmax(q k^T / sqrt(hd), causal) v; lse[B][np][T] */
int mt_attention_fwd(enum mt_dtype dt, void *y, float *lse, const void *qkv, int B, int T, int np, int ng, int hd);
/* dqkv (every element written) from dy, y, lse and qkv; rope non-NULL: qkv's queries and
 * keys were rotated (rope.h's table, [T][hd / 2] cos, sin pairs) and dqkv's are the
 * gradients of the unrotated ones, as mt_rope(..., inverse 1) after would make them (the
 * sm_90a backward rotates them as it writes them); dbias non-NULL: the QKV layer's
 * bias gradient added there too (dbias[c] += the sum over rows of dqkv[.][c]; the sm_90a
 * backward takes it from its own kernels' fp32 values, other paths from dqkv through
 * mt_bias_grad); scratch: mt_attention_bwd_scratch_floats(dt, B, T, np, ng, hd, dbias !=
 * NULL) floats */
int64_t mt_attention_bwd_scratch_floats(enum mt_dtype dt, int B, int T, int np, int ng, int hd, int bias);
int mt_attention_bwd(enum mt_dtype dt, void *dqkv, const void *dy, const void *y, const float *lse, const void *qkv,
		     int B, int T, int np, int ng, int hd, float *dbias, float *scratch, const float *rope);

#ifdef __cplusplus
}
#endif

#endif
