/* trainer.h: the state of one training run (struct trainer) and the stages of
 * mt_train_run that work on it, shared by the files of lib/train/ that run training:
 * train.c (the run, the step loop's update and boundary, evaluation, checkpoints),
 * setup.c (the stages before the loop and the teardown), step.c (a step's forward and
 * backward passes over the data) and steplog.c (what a step reports). Internal to
 * lib/train/: the tools include train.h. */
#ifndef MT_TRAINER_H
#define MT_TRAINER_H

#include <stdint.h>
#include <stdio.h>

#include "backend/backend.h"
#include "base/timers.h"
#include "data/dataplan.h"
#include "model/params.h"
#include "parallel/dp.h"
#include "parallel/pipeline.h"
#include "parallel/tpcomm.h"
#include "train/tblog.h"
#include "train/train.h"

struct trainer {
	const struct mt_train_args *a;
	struct mt_params t;             /* this rank's: its part of the model (params.h) */
	/* what checkpoints hold: the logical table and config (the vocabulary padded as this
	 * layout pads it), the same as t and a->cfg without tensor or pipeline parallelism */
	struct mt_params lt_own;
	const struct mt_params *lt;
	struct mt_config lcfg;
	struct mt_dist *dpd, *tpd;      /* this rank's data- and tensor-parallel groups */
	struct mt_tpcomm tpc;
	struct mt_tp tp;
	int tpon;
	/* pipeline parallelism: the pipeline, model-parallel (tensor x pipeline) and
	 * embedding groups; ordered sums over the last two (the gradient norm and the
	 * agreement on non-finite gradients; the tied embedding's two copies) */
	int ppon, split;                /* split: this rank's table is not the logical one */
	struct mt_dist *ppd, *mpd, *embd;
	struct mt_tpcomm mpc, embc;
	struct mt_tp mp, emb;
	int have_mp, have_emb;
	struct mt_pp_exec exec;
	int have_exec;
	struct mt_pp_sched pps[2];      /* training and evaluation, for pps_m[] micro-batches */
	int64_t pps_m[2];
	/* what the passes read: which split and samples, and whether the step evaluates */
	int pp_data_split, pp_eval;
	int64_t pp_consumed;
	/* since the last log line: compute and step seconds, seconds and counts of each
	 * kind of pass, bytes sent (PP_STATS doubles), over pp_steps steps */
	double pp_stat[11];
	int64_t pp_steps;
	double pp_log[64 * 11];         /* every stage's, gathered for the log line */
	int pp_log_n;
	int64_t pp_log_m;
	struct mt_err pp_err;           /* a pass's failure, for the executor's caller */
	int64_t tp_logged;              /* the iteration the traffic counters were last logged */
	struct mt_backend b;
	float *w, *m, *v;               /* host copies, for initialization and checkpoints */
	struct mt_sched sched;
	struct mt_adamw adam;
	struct mt_plan plan;
	int have_plan;
	int32_t *buf, *tok, *tgt;
	/* the next micro-batch, read while the device computes this one (the backend's
	 * overlap hook): asked for (want) by split and first sample, then held (have) in
	 * pre.tok and pre.tgt, with what reading it gave (rc, err), until fetch takes it */
	struct {
		int32_t *tok, *tgt;
		int64_t first;
		int split, want, have, rc;
		struct mt_err err;
	} pre;
	int64_t consumed_train, consumed_valid, iteration;
	FILE *json;
	struct mt_tblog tb;             /* --tensorboard-dir (rank 0), open when have_tb */
	int have_tb;
	/* --log-timers-to-tensorboard (on every rank): this rank's seconds in each phase of
	 * the training steps since the last TensorBoard write (base/timers.h), over tm_its
	 * steps; the backend and dp.c add theirs while b.timers is set (the step, not the
	 * evaluation) */
	int timing;
	double tm[MT_T_N];
	int64_t tm_its;
	struct mt_dist solo, *d;        /* the ranks (a world of one without a launcher) */
	struct mt_dp dp;
	int have_dp;
	double *lbuf;                   /* per micro-batch losses of every rank, 2 per micro-batch */
	struct saver *sv;               /* the checkpoint being saved (NULL: none yet) */
	/* the most micro-batches a step holds (of all data-parallel ranks, of this one):
	 * the buffers' size */
	int64_t micro, local;
	/* the step loop's running counts: the run's start and the last log line's time, the
	 * losses and tokens since that line, steps skipped (in all, in a row), and the last
	 * step's learning rate and gradient norm */
	double t0, tlog, loss_acc, lr, gnorm;
	int64_t loss_n, skipped, skipped_row, tokens_since;
};

/* One iteration of the step loop: its number, its global batch and the micro-batches
 * of all ranks and of this one, the loss (summed, then the mean over the tokens), what the
 * gradient was (a backend's MT_GRAD_* or 0), whether the step was skipped, whether the
 * distributed optimizer updates (ZeRO-1), and the timers' marks. */
struct mt_trainer_step {
	int64_t step, gbs, micro, local;
	double loss, tokens;
	int nonfinite, bad, zero_dp;
	double t_fb, t_op, sync0;
};

/* setup.c: the stages before the loop, in order. grid: the batch checks, this rank's
 * groups and its part of the model (on failure it has freed what it made: no teardown);
 * backend: the pipeline's groups, the buffers, the backend, the data-parallel sums, the
 * pipeline executor, the lines that describe the run, the initial weights and the
 * schedule; data: the data plan (rank 0 first); logs: the JSON lines file, TensorBoard
 * and the timers. free: everything but the checkpoint saver (train.c), the backend told
 * whether the run failed (rc); returns rc, or -1 when closing TensorBoard fails. */
int mt_trainer_grid(struct trainer *tr, struct mt_err *err);
int mt_trainer_backend(struct trainer *tr, struct mt_err *err);
int mt_trainer_data(struct trainer *tr, struct mt_err *err);
int mt_trainer_logs(struct trainer *tr, struct mt_err *err);
int mt_trainer_free(struct trainer *tr, int rc, struct mt_err *err);

/* step.c */
/* The global batch of the next iteration (Megatron's step schedule or rampup, else
 * --global-batch-size), from the samples consumed. */
int64_t mt_trainer_batch_now(const struct trainer *tr);
/* A step schedule from the samples consumed on suits the ranks and the pipeline. */
int mt_trainer_check_batch_steps(struct trainer *tr, struct mt_err *err);
/* The first sample of this rank's micro-batch k of a global batch from `consumed`. */
int64_t mt_trainer_first_sample(const struct trainer *tr, int64_t consumed, int64_t k);
/* Every rank's (summed loss, counted targets) of n micro-batches, summed in global order. */
int mt_trainer_gather_losses(struct trainer *tr, int64_t n, double *sum, double *count, int64_t step,
			     struct mt_err *err);
/* A micro-batch of a split into tr->tok and tr->tgt (the one read ahead when it is that one). */
int mt_trainer_fetch(struct trainer *tr, int split, int64_t first, struct mt_err *err);
/* The backend's overlap hook (ctx: the trainer): the micro-batch asked for, read ahead. */
void mt_trainer_prefetch(void *ctx);
/* n micro-batches through the pipeline (the gradient kept unless eval; losses in lbuf). */
int mt_trainer_pp_run(struct trainer *tr, int64_t n, int data_split, int64_t consumed, int eval, int64_t step,
		      struct mt_err *err);
/* The next iteration's forward and backward passes: s filled (its batch, the loss summed
 * over every rank's micro-batches and the tokens counted), the gradient summed. */
int mt_trainer_forward_backward(struct trainer *tr, struct mt_trainer_step *s, struct mt_err *err);

/* train.c: the validation loss over --eval-iters batches (1: no validation split). */
int mt_trainer_evaluate(struct trainer *tr, double *loss, struct mt_err *err);

/* steplog.c: after a step's update: the evaluation when due, the timers and scalars to
 * TensorBoard, the pipeline's counters and the log line when due. */
int mt_trainer_report(struct trainer *tr, const struct mt_trainer_step *s, struct mt_train_result *r,
		      struct mt_err *err);

#endif
