/* dist.h: the processes of a multi-process run: who we are (rank, world, node-local rank,
 * the tensor x data x pipeline layout in Megatron's order), the few collectives the
 * trainer needs and the point-to-point transfers of pipeline parallelism, each bounded
 * by a timeout.
 *
 * Processes are started by srun or mpiexec; MPI bootstraps them (mt_dist_init). Without a
 * launcher in the environment the run is one process and MPI is not touched at all, so a
 * plain `mt-train ...` behaves as it always did. The collectives here move host float and
 * double buffers over MPI (the CPU backend's transport); a GPU backend moves gradients
 * with NCCL over a communicator it makes from mt_dist_bcast'ed ids, and keeps using this
 * module for the rank layout, agreement and failure handling: it sends the NCCL unique id
 * with mt_dist_bcast, polls its own operations against d->timeout (ncclCommGetAsyncError,
 * then ncclCommAbort) and reports through mt_dist_agree and mt_dist_abort like the CPU
 * path.
 *
 * Every wait polls a nonblocking operation against a deadline (--distributed-timeout-
 * minutes): a rank that died or hangs makes the others fail with a message naming the
 * step, never hang. The step-boundary agreement (mt_dist_agree) goes through rank 0
 * point to point, so rank 0 can name the rank that did not arrive. This module returns
 * errors; the tool prints them and calls mt_dist_abort. Not thread-safe: call from the
 * main thread only. Layout and ordering rules: docs/mt-train.md "Distributed training". */
#ifndef MT_DIST_H
#define MT_DIST_H

#include <stdint.h>

#include "base/err.h"

struct mt_dist_ops;

/* The process groups of Megatron's grid: ranks that differ only in the tensor-, data- or
 * pipeline-parallel coordinate; model-parallel (tensor x pipeline: every rank of one
 * model replica); the embedding group (first and last stage of a pipeline group, which
 * both hold the tied word embedding). */
enum mt_group { MT_GROUP_TP, MT_GROUP_DP, MT_GROUP_PP, MT_GROUP_MP, MT_GROUP_EMB, MT_GROUP_NKINDS };

struct mt_dist {
	const struct mt_dist_ops *ops; /* mt_dist_init sets it (below) */
	int rank, world;            /* in the world communicator */
	int local_rank, local_world; /* on this node: picks the GPU */
	int tp, pp, dp;             /* sizes; tp * pp * dp = world */
	int tp_rank, pp_rank, dp_rank; /* Megatron's order tp-cp-ep-dp-pp: tp fastest, pp slowest */
	int active;                 /* MPI was initialized by mt_dist_init */
	double timeout;             /* seconds; <= 0: wait forever */
	char where[64];             /* "rank 5 (tp 1, dp 0, pp 2)": world rank and coordinates,
				     * the same in a group's view; every message names it */
	struct mt_dist *group[MT_GROUP_NKINDS]; /* mt_dist_layout's views (mt_dist_group) */
	struct mt_dist *parent;     /* in a group's view: the world it was made from */
	void *impl;
};

/* 1 when a launcher (mpiexec, srun, Open MPI's mpirun) started this process. */
int mt_dist_launched(void);
/* Start MPI when launched, else a world of one; then check that srun did not start
 * several tasks that MPI sees as separate worlds (srun --mpi=none). */
int mt_dist_init(struct mt_dist *d, struct mt_err *err);
/* Lay the world out as tp x dp x pp (Megatron's order), set where to "rank R (tp T, dp D,
 * pp P)" (it says "rank R" before) and make the group views (mt_dist_group): every rank
 * must call it with the same sizes. Fails when world is not a multiple of tp * pp. */
int mt_dist_layout(struct mt_dist *d, int tp, int pp, struct mt_err *err);
/* The layout of rank r without a communicator (for --dry-run of a world not started). */
void mt_dist_coords(int world, int tp, int pp, int r, int *tp_rank, int *dp_rank, int *pp_rank);
/* The world ranks of the group of kind g that holds world rank r, ascending, into
 * ranks[] (room for world entries); returns their count, 0 when r is in no group of
 * that kind (the embedding group of a middle stage) or the layout is not one (world not
 * a multiple of tp x pp, r outside it). Arithmetic only. The embedding group is the first
 * and the last rank of r's pipeline group; with one stage (pp = 1) they are the same
 * rank, and the group is r alone (its tied embedding has no other copy). */
int mt_dist_group_ranks(int world, int tp, int pp, enum mt_group g, int r, int *ranks);
/* This rank's group of kind g, as a struct mt_dist of its own: rank and world within the
 * group (ranks ordered by world rank), dp = world and dp_rank = rank, tp = pp = 1, the
 * parent's timeout (read again at each call, so a timeout set after the layout holds)
 * and where; every collective of this file works on it, and its messages name other
 * ranks by world rank and coordinates. Made by mt_dist_layout, a collective call over
 * the world (a world of one without MPI); NULL when this rank is in no such group.
 * Freed by the parent's mt_dist_finalize (which does nothing on a view). */
struct mt_dist *mt_dist_group(struct mt_dist *d, enum mt_group g);
void mt_dist_finalize(struct mt_dist *d);
/* Stop every rank (MPI_Abort) with the exit code; returns only in a world of one. */
void mt_dist_abort(struct mt_dist *d, int code);

/* Every rank gives (step, flag); all get the maximum flag. Rank 0 waits up to the timeout
 * for each other rank and names the first missing one ("rank 0 (tp 0, dp 0, pp 0): rank N
 * (tp T, dp D, pp P) did not reach step S within T s", world ranks and coordinates also
 * in a group's view); the others wait twice as long for rank 0's answer. The messages
 * of every collective here start with where. */
int mt_dist_agree(struct mt_dist *d, int64_t step, int flag, int *max_flag, struct mt_err *err);
/* A barrier with the timeout. */
int mt_dist_barrier(struct mt_dist *d, const char *what, int64_t step, struct mt_err *err);

/* Rank q sends send[displs[r] .. + counts[r]) to each rank r; recv gets, for each q in
 * rank order, q's part for this rank, packed (recv_counts[q] = counts[this rank] for
 * all q). What the trainer reduces in rank order, which fixes the summation order. */
int mt_dist_alltoallv_f32(struct mt_dist *d, const float *send, const int64_t *counts, const int64_t *displs,
			  float *recv, int64_t my_count, const char *what, int64_t step, struct mt_err *err);
/* In place: rank r's part buf[displs[r] .. + counts[r]) reaches every rank. */
int mt_dist_allgatherv_f32(struct mt_dist *d, float *buf, const int64_t *counts, const int64_t *displs,
			   const char *what, int64_t step, struct mt_err *err);
int mt_dist_allgatherv_f64(struct mt_dist *d, double *buf, const int64_t *counts, const int64_t *displs,
			   const char *what, int64_t step, struct mt_err *err);
/* To rank 0 only (checkpoints): rank r's part of buf (in place on rank 0). */
int mt_dist_gatherv_f32(struct mt_dist *d, float *buf, const int64_t *counts, const int64_t *displs,
			const char *what, int64_t step, struct mt_err *err);
/* Sums of float buffers in the library's own order (fast, not bit-reproducible across
 * world sizes): every rank gets the whole sum (allreduce, in place), or rank r gets the
 * sum of its part [displs[r], + counts[r]) into recv (reduce-scatter). NCCL's
 * ncclAllReduce and ncclReduceScatter are the GPU counterparts. */
int mt_dist_allreduce_f32(struct mt_dist *d, float *buf, int64_t n, const char *what, int64_t step,
			  struct mt_err *err);
int mt_dist_reduce_scatter_f32(struct mt_dist *d, const float *send, const int64_t *counts, float *recv,
			       const char *what, int64_t step, struct mt_err *err);
/* Element-wise sum or maximum over ranks (order implementation-defined: not for results
 * that must be bit-exact). */
int mt_dist_allreduce_f64(struct mt_dist *d, double *buf, int64_t n, int max, const char *what, int64_t step,
			  struct mt_err *err);
/* Bytes from rank `root` to every rank (NCCL unique ids, decisions). */
int mt_dist_bcast(struct mt_dist *d, void *buf, int64_t n, int root, const char *what, struct mt_err *err);

/* Point to point (pipeline parallelism): one transfer in flight. The buffer must stay
 * untouched until the transfer is waited for. Shapes are the caller's (no size is
 * exchanged): a receive of another size than the send fails. */
struct mt_dist_req {
	int active;             /* started and not yet waited for */
	int send;               /* 1 send, 0 receive */
	int peer;               /* rank in the group it was started on */
	int64_t n;              /* floats */
	unsigned char mpi[16];  /* the MPI request */
};
/* Start sending (receiving) n floats to (from) rank `peer` of d, matched by tag (0 ..
 * 32767). Fails at once only on bad arguments. */
int mt_dist_isend_f32(struct mt_dist *d, const float *buf, int64_t n, int peer, int tag, struct mt_dist_req *r,
		      struct mt_err *err);
int mt_dist_irecv_f32(struct mt_dist *d, float *buf, int64_t n, int peer, int tag, struct mt_dist_req *r,
		      struct mt_err *err);
/* Wait for r (nothing when it is not active) up to d->timeout; what names the data
 * ("the activations of micro-batch 3 (chunk 0)"). A transfer past the deadline fails
 * naming this rank, the peer by world rank and coordinates, the data and the step. */
int mt_dist_wait(struct mt_dist *d, struct mt_dist_req *r, const char *what, int64_t step, struct mt_err *err);
/* Progress without waiting: 1 when r is complete (or not active), 0 when not yet, -1 on
 * an MPI failure. */
int mt_dist_test(struct mt_dist *d, struct mt_dist_req *r, struct mt_err *err);

/* The calls a GPU backend makes, through d->ops: the backends are also linked into tools
 * without MPI (mt-eval, mt-generate), which must not depend on this file. */
struct mt_dist_ops {
	int (*agree)(struct mt_dist *d, int64_t step, int flag, int *max_flag, struct mt_err *err);
	int (*bcast)(struct mt_dist *d, void *buf, int64_t n, int root, const char *what, struct mt_err *err);
	int (*gatherv_f32)(struct mt_dist *d, float *buf, const int64_t *counts, const int64_t *displs,
			   const char *what, int64_t step, struct mt_err *err);
	int (*allreduce_f64)(struct mt_dist *d, double *buf, int64_t n, int max, const char *what, int64_t step,
			     struct mt_err *err);
};

#endif
