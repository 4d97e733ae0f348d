/* params.h: the one table of a GPT model's parameters.
 *
 * Every parameter has a logical name (Megatron-core's, e.g.
 * "decoder.layers.3.mlp.linear_fc1.weight"), a global shape, its place in the flat
 * fp32 buffer the backends use, whether weight decay applies, how tensor parallelism
 * splits it, and how it is initialized. Allocation, initialization, the optimizer's
 * decay mask, checkpoint names and Hugging Face export all read this table and nothing
 * else (DESIGN: no magic parameter indices). Linear weights are [out, in], as PyTorch
 * and Megatron store them. The fused QKV weight follows Megatron's layout: for each
 * query group, its query heads, then its key head, then its value head, each
 * kv_channels rows. */
#ifndef MT_PARAMS_H
#define MT_PARAMS_H

#include <stdint.h>

#include "config.h"
#include "err.h"

enum mt_param_kind {
	MT_P_WORD_EMB, MT_P_POS_EMB,
	MT_P_LN1_W, MT_P_LN1_B, MT_P_QKV_W, MT_P_QKV_B, MT_P_PROJ_W, MT_P_PROJ_B,
	MT_P_LN2_W, MT_P_LN2_B, MT_P_FC1_W, MT_P_FC1_B, MT_P_FC2_W, MT_P_FC2_B,
	MT_P_FINAL_W, MT_P_FINAL_B, MT_P_OUTPUT,
	MT_P_NKINDS
};

struct mt_param {
	char name[96];
	enum mt_param_kind kind;
	int layer;               /* -1 outside the decoder layers */
	int ndim;                /* 1 or 2 */
	int64_t shape[2];        /* global shape; shape[1] = 1 for vectors */
	int64_t numel;
	int64_t offset;          /* in floats, into the flat buffer */
	int weight_decay;        /* 0 for biases and norm parameters (Megatron's rule) */
	int tp_dim;              /* tensor-parallel split: -1 none, 0 rows, 1 columns */
	double init_std;         /* > 0: normal(0, std); 0: zeros; -1: ones */
};

struct mt_params {
	struct mt_param *p;
	int n;
	int64_t total;           /* floats in the flat buffer */
	int layer_first[2];      /* unused by the CPU backend; reserved for pipeline stages */
	/* index of each kind for each layer (-1 if absent), and of the non-layer ones */
	int *idx;                /* [num_layers][MT_P_NKINDS] */
	int glob[MT_P_NKINDS];
	int num_layers;
};

int mt_params_build(struct mt_params *t, const struct mt_config *c, struct mt_err *err);
void mt_params_free(struct mt_params *t);
const struct mt_param *mt_params_find(const struct mt_params *t, const char *name);
/* The parameter of a kind in a layer (layer -1 for the others), or NULL. */
const struct mt_param *mt_params_get(const struct mt_params *t, int layer, enum mt_param_kind kind);

/* Megatron's initialization: weights normal(0, init_method_std), the output projections
 * of attention and MLP normal(0, std / sqrt(2 * num_layers)), norm weights 1, biases 0.
 * Deterministic for a seed, whatever the thread count. */
void mt_params_init(const struct mt_params *t, float *w, uint64_t seed);

#endif
