/* pipeline.h: the one executor of pipeline schedules (ppsched.h) over a pipeline group.
 *
 * It walks a stage's action list: receives are posted into its own buffers, a forward
 * or backward pass waits for its input and is handed it, its output goes into a buffer
 * of the executor that is sent without waiting, and a send is waited for only when its
 * buffer is needed again (or at the end of the step). The passes themselves are the
 * caller's (struct mt_pp_ops: the trainer's, over a backend), so this file knows no
 * model. Messages between stages have shapes fixed for the run (elems floats: rows x
 * hidden size, the rows of a sequence shard with sequence parallelism), so no shape is
 * exchanged. Every wait is bounded by the group's timeout and a wait that runs past it
 * names this rank, the stage it waited for, the micro-batch and the step. Time spent
 * computing and waiting is counted for the bubble's measurement. */
#ifndef MT_PIPELINE_H
#define MT_PIPELINE_H

#include <stdint.h>

#include "base/err.h"
#include "parallel/dist.h"
#include "parallel/ppsched.h"

/* The passes the executor calls (each returns 0 or -1 with its message in the caller's
 * keeping). slot: where the stage keeps this micro-batch's activations, mb modulo the
 * chunk's micro-batches in flight (they are freed in order, so no two live ones share a
 * slot). in is NULL on the first virtual stage (the tokens are the caller's), out NULL
 * on the last (the loss is the caller's); dout NULL on the last virtual stage, din
 * NULL on the first. */
struct mt_pp_ops {
	void *ctx;
	/* in, out, dout, din: buffers of the transport (host floats over MPI; a device
	 * transport's memory and element type) */
	int (*forward)(void *ctx, int chunk, int mb, int slot, const void *in, void *out);
	int (*backward)(void *ctx, int chunk, int mb, int slot, const void *dout, void *din, int split);
	int (*weight)(void *ctx, int chunk, int mb, int slot);
};

enum { MT_PP_T_FWD, MT_PP_T_BWD, MT_PP_T_BWD_INPUT, MT_PP_T_BWD_WEIGHT, MT_PP_T_NKINDS };

struct mt_pp_stats {
	double compute[MT_PP_T_NKINDS]; /* seconds in each kind of pass */
	int64_t passes[MT_PP_T_NKINDS];
	double wait;                    /* seconds waiting for a transfer */
	/* of them: for the activations received and sent, the gradients received and sent
	 * (Megatron's forward-recv, forward-send, backward-recv and backward-send timers;
	 * posting a transfer does not wait) */
	double wait_kind[4];
	double wall;                    /* seconds in mt_pp_exec_run */
	int64_t bytes_sent, messages;
};

struct mt_pp_buf {
	void *x;
	struct mt_dist_req r;           /* MPI's transfer */
	void *ev;                       /* a device transport's: its completion event */
	int busy;                       /* a device transport's transfer not yet waited for */
	int chan;                       /* and the channel it went over */
	int mb;                         /* whose data it holds (-1: none) */
};

/* How messages move. Without one (NULL): MPI over the group, host float buffers (dist.h),
 * matched by tags. A device backend may supply its own, e.g. NCCL send/recv between GPU
 * buffers on streams of their own, one ordered channel per direction and kind (the
 * activations to the next stage, the gradients to the previous); matching there is by
 * order alone, so the executor checks a schedule's order on every edge before it first
 * runs it (mt_pp_sched_order_check). send and recv start a transfer of buffer b (the
 * compute that wrote b comes first); wait returns once it is complete, bounded by the
 * group's timeout and naming what it waited for. */
struct mt_pp_transport {
	void *ctx;
	const char *name;
	int (*alloc)(void *ctx, struct mt_pp_buf *b, int64_t elems, struct mt_err *err);
	void (*release)(void *ctx, struct mt_pp_buf *b);
	int (*send)(void *ctx, struct mt_pp_buf *b, int64_t elems, int peer, int grad, struct mt_err *err);
	int (*recv)(void *ctx, struct mt_pp_buf *b, int64_t elems, int peer, int grad, struct mt_err *err);
	int (*wait)(void *ctx, struct mt_pp_buf *b, const char *what, int64_t step, struct mt_err *err);
};

struct mt_pp_exec {
	struct mt_dist *g;              /* the pipeline group: rank = stage */
	int p, v;
	int64_t elems;                  /* floats a message */
	/* per kind (activations in, activations out, gradient in, gradient out) and chunk,
	 * nslots[chunk] buffers */
	struct mt_pp_buf *buf[4];
	int *nslots;
	struct mt_pp_stats st;          /* summed over runs until reset */
	const struct mt_pp_transport *tr; /* NULL: MPI (set before the first run) */
	size_t elem_bytes;              /* of a message's element: 4, or the transport's */
	const struct mt_pp_sched *checked; /* the last list whose order was checked */
	int checked_m, checked_fo;
};

int mt_pp_exec_init(struct mt_pp_exec *x, struct mt_dist *pipeline_group, int vp, int64_t elems, struct mt_err *err);
void mt_pp_exec_free(struct mt_pp_exec *x);
/* Use transport tr (its elements of elem_bytes) instead of MPI; before the first run. */
void mt_pp_exec_set_transport(struct mt_pp_exec *x, const struct mt_pp_transport *tr, size_t elem_bytes);
/* Run one step's list s (made for this stage and the group's size). Returns when this
 * stage's actions are done and its sends delivered. On failure the transfers still in
 * flight are left to the abort that follows. */
int mt_pp_exec_run(struct mt_pp_exec *x, const struct mt_pp_sched *s, const struct mt_pp_ops *ops, int64_t step,
		   struct mt_err *err);
void mt_pp_exec_reset_stats(struct mt_pp_exec *x);

#endif
