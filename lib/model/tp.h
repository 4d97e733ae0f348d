/* tp.h: the split points of a tensor-parallel model, named by the model and supplied by
 * the layer that owns the processes (dist/tpcomm.c over MPI; a GPU backend's own).
 *
 * The model layer decides where a collective goes (Megatron's "copy to", "reduce from",
 * "gather from" and "scatter to" the tensor-parallel region, and the sequence-parallel
 * all-gather and reduce-scatter); it never calls MPI or NCCL. Each operation is
 * collective over the tensor-parallel group and must give every rank the same bits, so
 * that replicated parameters stay identical on all ranks without being compared.
 * A NULL struct mt_tp, or size 1, is one rank: no operation is called. */
#ifndef MT_TP_H
#define MT_TP_H

#include <stdint.h>

struct mt_tp {
	int size, rank;                 /* the tensor-parallel group and this rank in it */
	int sequence_parallel;          /* norms and residuals on 1/size of the rows */
	void *ctx;
	/* SUM over the group, in place, n floats */
	int (*allreduce)(void *ctx, float *buf, int64_t n);
	/* every rank gives n floats (in); out receives size * n, rank 0's first */
	int (*allgather)(void *ctx, float *out, const float *in, int64_t n);
	/* every rank gives size * n floats (in); out receives this rank's n of the sum */
	int (*reduce_scatter)(void *ctx, float *out, const float *in, int64_t n);
	/* small double vectors (the cross-entropy's row maxima and sums): SUM, or MAX when max */
	int (*allreduce_f64)(void *ctx, double *buf, int64_t n, int max);
};

/* 1 when t is tensor parallel (more than one rank) */
static inline int mt_tp_on(const struct mt_tp *t) { return t && t->size > 1; }

#endif
