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
 * kv_channels rows.
 *
 * Tensor parallelism is data here too: a table built for rank r of a tensor-parallel
 * group (mt_params_build_tp) holds the same parameters in the same order, each with its
 * shard's shape (shape) beside the logical one (gshape) and how it splits (split, as
 * Megatron's ColumnParallelLinear, RowParallelLinear and VocabParallelEmbedding split
 * it). Sharding, gradient reductions, the gradient norm's count of replicas,
 * checkpoint slices and the dry run's memory all read these fields.
 *
 * Pipeline parallelism is a selection from the same rows: a table built for a stage
 * (mt_params_build_stage) holds the parameters of its layers (with their global layer
 * numbers and logical names), the embeddings on the first stage, the final norm and the
 * output layer on the last; with tied embeddings the last stage holds its own copy of
 * the word embedding (tied_copy), initialized as the first stage's, and each row keeps
 * its index in the whole model's table (lidx) so that initialization and checkpoints
 * stay those of one model. */
#ifndef MT_PARAMS_H
#define MT_PARAMS_H

#include <stdint.h>

#include "model/config.h"
#include "base/err.h"

enum mt_param_kind {
	MT_P_WORD_EMB, MT_P_POS_EMB,
	MT_P_LN1_W, MT_P_LN1_B, MT_P_QKV_W, MT_P_QKV_B, MT_P_PROJ_W, MT_P_PROJ_B,
	MT_P_LN2_W, MT_P_LN2_B, MT_P_FC1_W, MT_P_FC1_B, MT_P_FC2_W, MT_P_FC2_B,
	MT_P_FINAL_W, MT_P_FINAL_B, MT_P_OUTPUT,
	MT_P_NKINDS
};

/* How tensor parallelism splits a parameter (weights are [out, in]). */
enum mt_split {
	MT_SPLIT_NONE,          /* replicated: every rank holds it whole */
	MT_SPLIT_COLUMN,        /* column-parallel linear: rows (the output) in size contiguous blocks;
				 * QKV by whole query groups, which are contiguous in Megatron's layout */
	MT_SPLIT_COLUMN_HALVES, /* SwiGLU's fc1: the gate half and the up half each split in
				 * blocks, rank r holding [gate block r; up block r] */
	MT_SPLIT_ROW,           /* row-parallel linear: columns (the input) in contiguous blocks */
	MT_SPLIT_VOCAB,         /* vocabulary rows of the padded vocabulary in contiguous blocks */
};

struct mt_param {
	char name[96];
	enum mt_param_kind kind;
	int layer;               /* -1 outside the decoder layers */
	int ndim;                /* 1 or 2 */
	int64_t shape[2];        /* this table's shape (the shard's; the logical one at size 1);
				  * shape[1] = 1 for vectors */
	int64_t numel;
	int64_t offset;          /* in floats, into the flat buffer */
	int weight_decay;        /* 0 for biases and norm parameters (Megatron's rule) */
	int tp_dim;              /* the dimension split: -1 none, 0 rows, 1 columns (from split) */
	double init_std;         /* > 0: normal(0, std); 0: zeros; -1: ones */
	enum mt_split split;     /* tensor parallelism; shape[] is this rank's shard */
	int64_t gshape[2];       /* the logical shape, over the table's padded vocabulary */
	int norm_skip;           /* 1: a replica counted by tensor-parallel rank 0, not here */
	int tp_grad_reduce;      /* 1: its gradient is partial on each rank (sequence parallel,
				  * Megatron's sequence_parallel attribute): summed over the group */
	int lidx;                /* its row in the whole model's table (initialization, checkpoints) */
	int tied_copy;           /* the last stage's copy of the tied word embedding: counted in
				  * the norm and written to checkpoints by the first stage only */
};

/* How pipeline parallelism cuts the decoder layers (Megatron's rules): over size stages
 * evenly, or with the first and/or last stage holding its own count (Megatron's
 * --decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-layers; 0: even) and
 * the other stages the rest evenly; with vp model chunks a stage (interleaving), chunk c
 * of stage r holds the layer block number c * size + r of L / (size vp) layers. */
struct mt_pp_split {
	int size;                /* p: stages (1: none) */
	int vp;                  /* v: model chunks on each stage (1: no interleaving) */
	int first, last;         /* layers of the first / last stage; 0: the even share */
};

struct mt_params {
	struct mt_param *p;
	int n;
	int64_t total;           /* floats in the flat buffer */
	/* index of each kind for each layer (-1 if absent), and of the non-layer ones */
	int *idx;                /* [num_layers][MT_P_NKINDS] */
	int glob[MT_P_NKINDS];
	int num_layers;
	int tp_size, tp_rank;    /* the tensor-parallel rank this table is for (1, 0: whole) */
	int sequence_parallel;
	/* the pipeline stage this table is for (1, 0: whole): its model chunks, chunk c holding
	 * layers [chunk_layers[2c], chunk_layers[2c + 1]); the first stage holds the
	 * embeddings, the last the final norm and the output layer (or the tied copy) */
	int pp_size, pp_rank, nchunks;
	int *chunk_layers;
	int first_stage, last_stage;
};

/* The whole model's table (tensor-parallel size 1: every shape its gshape, split still
 * saying how a larger group would cut each parameter). */
int mt_params_build(struct mt_params *t, const struct mt_config *c, struct mt_err *err);
/* The table of rank `rank` of a tensor-parallel group of `size`, c->padded_vocab_size
 * already padded for that size. Fails (MT_EXIT_USAGE, naming the flags and numbers) when
 * heads, query groups, the ffn size or the padded vocabulary do not divide by size, or,
 * with sequence_parallel, the sequence length. size 1 is mt_params_build; there
 * sequence_parallel is ignored (as Megatron turns it off without tensor parallelism) and
 * the table's sequence_parallel is 0. norm_skip is set on the replicated parameters of
 * ranks other than 0; tp_grad_reduce on every replicated parameter (norms, row-parallel
 * biases, position embeddings) under sequence parallelism, where each rank's gradient
 * covers its part of the sequence only. */
int mt_params_build_tp(struct mt_params *t, const struct mt_config *c, int size, int rank, int sequence_parallel,
		       struct mt_err *err);
/* The table of stage `stage` of split s for tensor-parallel rank `rank` of `size`
 * (mt_params_build_tp's checks, then mt_pp_split_check's). Stage 0 of a split of size 1
 * is mt_params_build_tp. */
int mt_params_build_stage(struct mt_params *t, const struct mt_config *c, int size, int rank, int sequence_parallel,
			  const struct mt_pp_split *s, int stage, struct mt_err *err);
/* Megatron's requirements on a pipeline split, each naming its flags (MT_EXIT_USAGE):
 * the layers divide as asked, every stage (and every chunk) holds at least one layer. */
int mt_pp_split_check(const struct mt_config *c, const struct mt_pp_split *s, struct mt_err *err);
/* Layers [*lo, *hi) of chunk `chunk` of stage `stage` (a checked split). */
void mt_pp_split_layers(const struct mt_config *c, const struct mt_pp_split *s, int stage, int chunk, int *lo, int *hi);
void mt_params_free(struct mt_params *t);
/* Copy between a logical buffer (laid out by `logical`, a table of size 1: what
 * checkpoints hold) and rank `rank`'s shard (laid out by `local`, a table of the same
 * model for any rank of the group and any pipeline stage: only shapes, offsets and lidx
 * are read). to_logical 1: the shard's elements into their places of the logical buffer
 * (a replicated parameter is copied whole; a tied copy not at all: the first stage
 * writes the embedding); 0: the rank's shard out of the logical buffer. The two tables
 * may differ in the padded vocabulary: rows one has and the other lacks are skipped, and
 * read as zeros into a shard. */
void mt_params_slice(const struct mt_params *local, int rank, const struct mt_params *logical, float *logical_buf,
		     float *shard, int to_logical);
/* Where rank `rank`'s shard of p lies in the logical tensor, as the rectangles it holds
 * in the shard's row order (the shard's rows are their rows stacked): {row0, col0, rows,
 * cols} each, cols 1 for vectors; 1 rectangle, or 2 for SwiGLU's halves. Rows of a
 * shard's padded vocabulary may lie past another table's logical rows: callers clip.
 * The checkpoint slices of every rank (what it writes, what it reads) come from here. */
int mt_params_pieces(const struct mt_param *p, int rank, int64_t pieces[2][4]);
const struct mt_param *mt_params_find(const struct mt_params *t, const char *name);
/* The parameter of a kind in a layer (layer -1 for the others), or NULL. */
const struct mt_param *mt_params_get(const struct mt_params *t, int layer, enum mt_param_kind kind);

/* Megatron's initialization: weights normal(0, init_method_std), the output projections
 * of attention and MLP normal(0, std / sqrt(2 * num_layers)), norm weights 1, biases 0.
 * Deterministic for a seed, whatever the thread count. */
void mt_params_init(const struct mt_params *t, float *w, uint64_t seed);
/* The same initialization for a tensor-parallel table: every element of the shard gets
 * the value mt_params_init gives it in the logical tensor (over the same padded
 * vocabulary), so TP=1 and TP=N start from one model. Whole tables: mt_params_init. */
void mt_params_init_shard(const struct mt_params *t, float *w, uint64_t seed);

#endif
