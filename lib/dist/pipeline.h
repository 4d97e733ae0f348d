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
#include "dist/dist.h"
#include "dist/ppsched.h"

/* The passes the executor calls (each returns 0 or -1 with its message in the caller's
 * keeping). slot: where the stage keeps this micro-batch's activations, mb modulo the
 * chunk's micro-batches in flight (they are freed in order, so no two live ones share a
 * slot). in is NULL on the first virtual stage (the tokens are the caller's), out NULL
 * on the last (the loss is the caller's); dout NULL on the last virtual stage, din
 * NULL on the first. */
struct mt_pp_ops {
	void *ctx;
	int (*forward)(void *ctx, int chunk, int mb, int slot, const float *in, float *out);
	int (*backward)(void *ctx, int chunk, int mb, int slot, const float *dout, float *din, int split);
	int (*weight)(void *ctx, int chunk, int mb, int slot);
};

enum { MT_PP_T_FWD, MT_PP_T_BWD, MT_PP_T_BWD_INPUT, MT_PP_T_BWD_WEIGHT, MT_PP_T_NKINDS };

struct mt_pp_stats {
	double compute[MT_PP_T_NKINDS]; /* seconds in each kind of pass */
	int64_t passes[MT_PP_T_NKINDS];
	double wait;                    /* seconds waiting for a transfer */
	double wall;                    /* seconds in mt_pp_exec_run */
	int64_t bytes_sent, messages;
};

struct mt_pp_buf {
	float *x;
	struct mt_dist_req r;
	int mb;                         /* whose data it holds (-1: none) */
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
};

int mt_pp_exec_init(struct mt_pp_exec *x, struct mt_dist *pipeline_group, int vp, int64_t elems, struct mt_err *err);
void mt_pp_exec_free(struct mt_pp_exec *x);
/* Run one step's list s (made for this stage and the group's size). Returns when this
 * stage's actions are done and its sends delivered. On failure the transfers still in
 * flight are left to the abort that follows. */
int mt_pp_exec_run(struct mt_pp_exec *x, const struct mt_pp_sched *s, const struct mt_pp_ops *ops, int64_t step,
		   struct mt_err *err);
void mt_pp_exec_reset_stats(struct mt_pp_exec *x);

#endif
