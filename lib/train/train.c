/* train.c: the training loop (see train.h): micro-batches one after another, or with
 * pipeline parallelism a stage's schedule (dist/ppsched.h) run by the executor
 * (dist/pipeline.h) over the backend's stage passes. */
#include "train/train.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "ckpt/ckpt.h"
#include "ckpt/txn.h"
#include "parallel/dp.h"
#include "parallel/pipeline.h"
#include "parallel/tpcomm.h"
#include "train/estimate.h"
#include "base/atomic.h"
#include "base/knobs.h"
#include "base/log.h"
#include "base/mix.h"
#include "model/params.h"
#include "base/progress.h"
#include "base/timers.h"

volatile sig_atomic_t mt_train_stop_requested;

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
};

/* The global batch of the next iteration (Megatron's step schedule or rampup, else
 * --global-batch-size): from the samples consumed, which checkpoints keep, so a resumed
 * run goes on with the batch it would have had. */
static int64_t batch_now(const struct trainer *tr)
{
	if (tr->a->batch_steps.n)
		return mt_batch_steps_batch(&tr->a->batch_steps, tr->a->cfg.seq_length, tr->consumed_train);
	return mt_rampup_batch(tr->a->rampup, tr->a->global_batch_size, tr->consumed_train);
}

/* A step schedule from the samples consumed on: every batch still to come divides among
 * the ranks and suits the pipeline schedule (refused now, not at the step that reaches
 * it). */
static int check_batch_steps(struct trainer *tr, struct mt_err *err)
{
	const struct mt_train_args *a = tr->a;
	const struct mt_batch_steps *s = &a->batch_steps;
	int64_t md = a->micro_batch_size * tr->d->dp;

	if (mt_batch_steps_check(s, a->cfg.seq_length, md, tr->consumed_train, err))
		return -1;
	for (int k = mt_batch_steps_entry(s, a->cfg.seq_length, tr->consumed_train); tr->ppon && k < s->n; k++)
		if (mt_pp_sched_check(a->pp_schedule, tr->d->pp, a->pipeline.vp, (int)(s->batch[k] / md), a->pp_group, err))
			return mt_err_prefix(err, "--step-batch-size-schedule '%s'", s->word[k]);
	return 0;
}

/* Micro-batch k of this rank is micro-batch k * dp + r of the global batch; its first
 * sample (Megatron's MegatronPretrainingSampler). */
static int64_t first_sample(const struct trainer *tr, int64_t consumed, int64_t k)
{
	return consumed + (k * tr->d->dp + tr->d->dp_rank) * tr->a->micro_batch_size;
}

/* Gather the (summed loss, counted targets) pairs of every rank's n micro-batches into
 * lbuf and return both sums, in global micro-batch order: the loss logged is their
 * quotient, a token-weighted mean over the global batch (Megatron's). */
static int gather_losses(struct trainer *tr, int64_t n, double *sum, double *count, int64_t step,
			 struct mt_err *err)
{
	int D = tr->d->dp;
	int64_t cnt[1024], dsp[1024];

	/* over the data-parallel group: the tensor-parallel ranks of a replica agree */

	if (D > 1) {
		if (D > 1024)
			return mt_err_set(err, MT_EXIT_USAGE, "more than 1024 data-parallel ranks");
		for (int q = 0; q < D; q++) {
			cnt[q] = 2 * n;
			dsp[q] = 2 * n * q;
		}
		memmove(tr->lbuf + 2 * n * tr->d->dp_rank, tr->lbuf, (size_t)(2 * n) * sizeof(double));
		if (mt_dist_allgatherv_f64(tr->dpd, tr->lbuf, cnt, dsp, "the loss gather", step, err))
			return -1;
	}
	*sum = 0;
	*count = 0;
	for (int64_t j = 0; j < n * D; j++) {
		const double *x = tr->lbuf + 2 * ((j % D) * n + j / D);
		*sum += x[0];
		*count += x[1];
	}
	return 0;
}

/* Fill tokens/targets of one micro-batch from samples [first, first + mbs) of a split. */
static int fetch_into(struct trainer *tr, int split, int64_t first, int32_t *tok, int32_t *tgt, struct mt_err *err)
{
	const struct mt_train_args *a = tr->a;
	int64_t L = a->cfg.seq_length, mbs = a->micro_batch_size;

	for (int64_t b = 0; b < mbs; b++) {
		int32_t *s = tr->buf;
		if (a->mock_data) {
			for (int64_t j = 0; j <= L; j++)
				s[j] = (int32_t)(mt_mix64(a->seed ^ mt_mix64((uint64_t)(first + b) * 2 + (uint64_t)split) ^ (uint64_t)j) %
						 (uint64_t)a->cfg.vocab_size);
		} else if (mt_plan_sample(&tr->plan, split, first + b, s, err)) {
			return -1;
		}
		for (int64_t j = 0; j < L; j++) {
			/* Megatron: the loss mask is 0 where the label is padding; pad ids become 0 */
			tok[b * L + j] = s[j] < 0 ? 0 : s[j];
			tgt[b * L + j] = s[j + 1];
			if (s[j] >= a->cfg.vocab_size || s[j + 1] >= a->cfg.vocab_size)
				return mt_err_set(err, MT_EXIT_DATA, "token id %d is not below the vocabulary size %lld",
						  s[j] >= a->cfg.vocab_size ? s[j] : s[j + 1], (long long)a->cfg.vocab_size);
		}
	}
	return 0;
}

/* micro-batch (split, first) into tr->tok and tr->tgt: the one read ahead when it is that
 * one (its buffers swapped in), else read now */
static int fetch(struct trainer *tr, int split, int64_t first, struct mt_err *err)
{
	if (tr->pre.have && tr->pre.split == split && tr->pre.first == first) {
		int32_t *t = tr->tok, *g = tr->tgt;
		tr->pre.have = 0;
		if (tr->pre.rc) {
			*err = tr->pre.err;
			return -1;
		}
		tr->tok = tr->pre.tok, tr->tgt = tr->pre.tgt;
		tr->pre.tok = t, tr->pre.tgt = g;
		return 0;
	}
	tr->pre.have = 0;
	return fetch_into(tr, split, first, tr->tok, tr->tgt, err);
}

/* the backend's overlap hook: the micro-batch asked for, read into the spare buffers (an
 * error is kept for the fetch that takes it) */
static void prefetch(void *ctx)
{
	struct trainer *tr = ctx;

	if (!tr->pre.want)
		return;
	tr->pre.want = 0;
	tr->pre.rc = fetch_into(tr, tr->pre.split, tr->pre.first, tr->pre.tok, tr->pre.tgt, &tr->pre.err);
	tr->pre.have = 1;
}

/* The tied word embedding's gradient: the first stage's and the last stage's copy summed
 * (in stage order, the same bits on both), so the two copies stay equal. */
static int tie_embeddings(struct trainer *tr, int64_t step, struct mt_err *err)
{
	const struct mt_param *p = mt_params_get(&tr->t, -1, MT_P_WORD_EMB);
	float *g = tr->b.ops->host_grads ? tr->b.ops->host_grads(&tr->b) : NULL;

	tr->embc.step = step;
	if (!g) {
		/* a device backend sums its own copy */
		if (tr->b.ops->tie_grads(&tr->b, &tr->emb, err)) {
			if (tr->embc.failed)
				*err = tr->embc.err;
			return -1;
		}
		return 0;
	}
	if (!p || tr->emb.allreduce(tr->emb.ctx, g + p->offset, p->numel)) {
		*err = tr->embc.err;
		if (!p)
			mt_err_set(err, MT_EXIT_USAGE, "%s: no word embedding on a stage of the embedding group", tr->d->where);
		return -1;
	}
	return 0;
}

/* The passes the pipeline executor calls: the backend's stage passes, the data read by
 * the model's first chunk (tokens) and last chunk (targets, and the loss kept in lbuf). */
static int is_first_chunk(const struct trainer *tr, int chunk) { return tr->t.first_stage && chunk == 0; }
static int is_last_chunk(const struct trainer *tr, int chunk)
{
	return tr->t.last_stage && chunk == tr->t.nchunks - 1;
}

static int pp_forward(void *ctx, int chunk, int mb, int slot, const void *in, void *out)
{
	struct trainer *tr = ctx;
	int first = is_first_chunk(tr, chunk), last = is_last_chunk(tr, chunk);
	int64_t cnt = 0;
	double loss;

	if (first || last) {
		double t0 = tr->b.timers ? mt_now() : 0;
		if (fetch(tr, tr->pp_data_split, first_sample(tr, tr->pp_consumed, mb), &tr->pp_err))
			return -1;
		mt_timer_add(tr->b.timers, MT_T_BATCH_GENERATOR, t0);
	}
	loss = tr->b.ops->stage_forward(&tr->b, chunk, slot, tr->tok, tr->tgt, in, out, &cnt);
	if (last) {
		/* a non-finite loss is the step's to judge (skipped), not a failure here */
		tr->lbuf[2 * mb] = loss * (double)cnt;
		tr->lbuf[2 * mb + 1] = (double)cnt;
		return 0;
	}
	if (isnan(loss))
		return mt_err_set(&tr->pp_err, MT_EXIT_IO, "%s: the forward pass of micro-batch %d (chunk %d) failed",
				  tr->d->where, mb, chunk);
	return 0;
}

static int pp_backward(void *ctx, int chunk, int mb, int slot, const void *dout, void *din, int split)
{
	struct trainer *tr = ctx;

	if (tr->b.ops->stage_backward(&tr->b, chunk, slot, dout, din, split))
		return mt_err_set(&tr->pp_err, MT_EXIT_IO, "%s: the backward pass of micro-batch %d (chunk %d) failed",
				  tr->d->where, mb, chunk);
	return 0;
}

static int pp_weight(void *ctx, int chunk, int mb, int slot)
{
	struct trainer *tr = ctx;

	if (tr->b.ops->stage_weight(&tr->b, chunk, slot))
		return mt_err_set(&tr->pp_err, MT_EXIT_IO, "%s: the weight-gradient pass of micro-batch %d (chunk %d) failed",
				  tr->d->where, mb, chunk);
	return 0;
}

/* This stage's schedule for n micro-batches (kept until n changes, as with a rampup). */
static const struct mt_pp_sched *pp_schedule(struct trainer *tr, int64_t n, int eval, struct mt_err *err)
{
	const struct mt_train_args *a = tr->a;

	if (tr->pps_m[eval] != n) {
		mt_pp_sched_free(&tr->pps[eval]);
		tr->pps_m[eval] = 0;
		if (mt_pp_sched_make(&tr->pps[eval], a->pp_schedule, tr->d->pp, a->pipeline.vp, (int)n, tr->d->pp_rank,
				     a->pp_group, eval, err))
			return NULL;
		tr->pps_m[eval] = n;
	}
	return &tr->pps[eval];
}

/* One step's n micro-batches through the pipeline: the gradient added to the backend's
 * (unless eval), the loss of each micro-batch into lbuf on every stage (summed over the
 * pipeline group from the last stage, where the others hold zeros: exact). */
static int pp_run(struct trainer *tr, int64_t n, int data_split, int64_t consumed, int eval, int64_t step,
		  struct mt_err *err)
{
	const struct mt_pp_sched *sc = pp_schedule(tr, n, eval, err);
	struct mt_pp_ops ops = { tr, pp_forward, pp_backward, pp_weight };
	int rc;

	if (!sc)
		return -1;
	memset(tr->lbuf, 0, (size_t)(2 * n) * sizeof(double));
	tr->pp_data_split = data_split;
	tr->pp_eval = eval;
	tr->b.stage_eval = eval;
	tr->pp_consumed = consumed;
	memset(&tr->pp_err, 0, sizeof(tr->pp_err));
	rc = mt_pp_exec_run(&tr->exec, sc, &ops, step, err);
	/* a pass's own message (a split point's first of all) before the executor's */
	if (rc && tr->tpon && tr->tpc.failed)
		*err = tr->tpc.err;
	else if (rc && tr->pp_err.msg[0])
		*err = tr->pp_err;
	if (rc)
		return -1;
	if (tr->tpon && tr->tpc.failed) {
		*err = tr->tpc.err;
		return -1;
	}
	return mt_dist_allreduce_f64(tr->ppd, tr->lbuf, 2 * n, 0, "the loss from the last stage", step, err);
}

static int evaluate(struct trainer *tr, double *loss, struct mt_err *err)
{
	const struct mt_train_args *a = tr->a;
	double sum = 0, n = 0;
	int64_t gbs = batch_now(tr), local = gbs / (a->micro_batch_size * tr->d->dp);

	if (!a->mock_data && !tr->plan.split[MT_SPLIT_VALID].present)
		return 1; /* nothing to evaluate on */
	for (int64_t it = 0; it < a->eval_iters; it++) {
		double s, c;
		if (tr->ppon && pp_run(tr, local, MT_SPLIT_VALID, tr->consumed_valid, 1, tr->iteration, err))
			return -1;
		for (int64_t k = 0; !tr->ppon && k < local; k++) {
			int64_t cnt = 0;
			if (fetch(tr, MT_SPLIT_VALID, first_sample(tr, tr->consumed_valid, k), err))
				return -1;
			for (int64_t q = 0; q < a->micro_batch_size * a->cfg.seq_length; q++)
				cnt += tr->tgt[q] >= 0;
			tr->lbuf[2 * k] = tr->b.ops->step_micro(&tr->b, tr->tok, tr->tgt, 0) * (double)cnt;
			tr->lbuf[2 * k + 1] = (double)cnt;
		}
		tr->consumed_valid += gbs;
		if (gather_losses(tr, local, &s, &c, tr->iteration, err))
			return -1;
		sum += s;
		n += c;
	}
	*loss = n > 0 ? sum / n : NAN;
	return 0;
}

/* ---- checkpoints --------------------------------------------------------------------------
 * One process writes one self-contained model.h5 (ckpt.h). Several write a sharded set
 * through the checkpoint transaction (txn.h): each rank its part (its tensor- and
 * pipeline-parallel shard; of that, the parameters its data-parallel shard owns, dp.h:
 * ZeRO-1's share of weights and moments, or the same share of the replicas without ZeRO),
 * all at once, then rank 0 the index and the commit once every part is durable; the
 * transaction is the state this saver keeps for it. With --async-save a thread writes the
 * part while the steps go on; the set is committed at the first step boundary where every
 * rank's thread has finished (a second save, the end of the run or a stop wait for it). The
 * thread does the HDF5 calls of this process while it runs: the step loop makes none. The
 * thread also scans the part for NaN and infinities, and where the backend's save_state may
 * run beside the passes (backend.h, concurrent_save: the CPU backend) it first copies the
 * state to the host buffers itself: the step loop goes on with the next step's forward and
 * backward passes and waits for that copy (copy_wait) only before it changes the weights or
 * moments, at the optimizer step, or when it waits for the whole save. */
struct saver {
	int pending, solo;              /* a save under way; written by one process alone */
	pthread_t th;
	int threaded;                   /* th runs saver_run (else it ran inline) */
	volatile int done;              /* the thread finished (its result in failed, err) */
	int failed;
	struct mt_err err;
	int64_t iteration;
	struct mt_ckpt_txn txn;         /* several processes: the sharded save under way */
	char tmpdir[4096];              /* its temporary directory (txn.tmpdir), for a failed run's cleanup */
	char what[4200];                /* the checkpoint, as the scan's messages name it */
	struct mt_ckpt_part pt;
	char *cfg, *sch;
	struct mt_ckpt_state s;
	const struct mt_params *t;      /* solo: the table and whole buffers */
	const float *w, *m, *v;
	const char *dir;
	int keep_last;
	double t0, blocked;             /* when the save began; how long the step loop waited for it */
	double copy_s;                  /* the copy of the state to host memory */
	/* what the thread does before writing: copy the state (copy_state) and scan the part */
	struct trainer *tr;
	int copy, scan;
	/* the copy's hand-over, under mu: copied once the host buffers hold the state; wanted
	 * once the step loop waits for it (at site). waited: the step loop has had it (its own) */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int copied, wanted, waited;
	char site[80];
	int late;                       /* MT_TEST_ASYNC_SAVE_LATE (test-only): see saver_run */
};

static void saver_clear(struct saver *sv)
{
	free(sv->cfg), free(sv->sch);
	sv->cfg = sv->sch = NULL;
	sv->pending = 0;
}

/* This rank's state into the host buffers: the weights of its part of the model, and its
 * moments (every data-parallel rank's own share under ZeRO-1; a device backend gathers
 * its own, whole on data-parallel rank 0). These buffers are the copy the writer reads:
 * nothing else writes them until the next save, which waits for this one first. */
static int copy_state(struct trainer *tr, struct mt_err *err)
{
	int zero = tr->a->distributed_optimizer && tr->have_dp, rc;

	if (tr->have_dp)
		rc = tr->b.ops->save_state(&tr->b, tr->w, zero ? NULL : tr->m, zero ? NULL : tr->v, err);
	else
		rc = tr->b.ops->save_state(&tr->b, tr->w, tr->m, tr->v, err);
	if (rc == 0 && zero) {
		memcpy(tr->m + tr->dp.lo, tr->dp.m, (size_t)(tr->dp.hi - tr->dp.lo) * sizeof(float));
		memcpy(tr->v + tr->dp.lo, tr->dp.v, (size_t)(tr->dp.hi - tr->dp.lo) * sizeof(float));
	}
	return rc;
}

/* The writer: the thread of an asynchronous save, or the step loop itself. */
static void *saver_run(void *arg)
{
	struct saver *sv = arg;
	int bad = 0;

	if (sv->copy) {
		double t0;
		pthread_mutex_lock(&sv->mu);
		/* MT_TEST_ASYNC_SAVE_LATE=1, for tests only: the copy starts no sooner than the
		 * step loop waits for it, so that a change of the state made before that wait
		 * shows in the checkpoint; where the step loop asked for it goes to stderr */
		while (sv->late && !sv->wanted)
			pthread_cond_wait(&sv->cv, &sv->mu);
		if (sv->late)
			fprintf(stderr, "MT_TEST_ASYNC_SAVE_LATE: the copy of iteration %lld's state began at %s\n",
				(long long)sv->iteration, sv->site);
		pthread_mutex_unlock(&sv->mu);
		/* a kill from here on leaves the previous checkpoint too (tests kill here) */
		mt_atomic_step("checkpoint: the background copy to host memory");
		t0 = mt_now();
		bad = copy_state(sv->tr, &sv->err) != 0;
		sv->copy_s = mt_now() - t0;
		pthread_mutex_lock(&sv->mu);
		sv->copied = 1;
		pthread_cond_broadcast(&sv->cv);
		pthread_mutex_unlock(&sv->mu);
	}
	if (!bad && sv->scan)
		bad = mt_ckpt_part_check(&sv->pt, sv->what, &sv->err) != 0;
	if (!bad && sv->solo)
		bad = mt_ckpt_save(sv->dir, sv->t, sv->w, sv->m, sv->v, &sv->s, sv->keep_last, &sv->err) != 0;
	else if (!bad)
		bad = mt_ckpt_txn_write(&sv->txn, &sv->pt, &sv->err) != 0;
	sv->failed = bad;
	__atomic_store_n(&sv->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* The step loop is about to change the state a pending save copies (the optimizer step
 * of iteration step), or waits for the whole save (step 0): first the thread's copy of
 * it, if that is still to come. The wait counts as the save's; its seconds are returned. */
static double copy_wait(struct trainer *tr, int64_t step)
{
	struct saver *sv = tr->sv;
	double t0;

	if (!sv || !sv->pending || sv->waited)
		return 0;
	t0 = mt_now();
	pthread_mutex_lock(&sv->mu);
	if (!sv->wanted) {
		if (step > 0)
			snprintf(sv->site, sizeof(sv->site), "the optimizer step of iteration %lld", (long long)step);
		else
			snprintf(sv->site, sizeof(sv->site), "a wait for the whole save");
		sv->wanted = 1;
		pthread_cond_broadcast(&sv->cv);
	}
	while (!sv->copied)
		pthread_cond_wait(&sv->cv, &sv->mu);
	pthread_mutex_unlock(&sv->mu);
	sv->waited = 1;
	t0 = mt_now() - t0;
	sv->blocked += t0;
	return t0;
}

/* Finish the pending save: wait for this rank's writer (block) or only look (!block);
 * with several ranks, agree on every rank's and commit on rank 0. 1 when it is still
 * under way (only without block), 0 when finished, -1 on failure. */
static int save_finish(struct trainer *tr, int block, struct mt_err *err)
{
	struct saver *sv = tr->sv;
	const struct mt_train_args *a = tr->a;
	int flag, all = 0, rc = 0;

	if (!sv || !sv->pending)
		return 0;
	if (!block && sv->solo && !__atomic_load_n(&sv->done, __ATOMIC_ACQUIRE))
		return 1;
	if (block)
		copy_wait(tr, 0);
	if (block && sv->threaded)
		pthread_join(sv->th, NULL), sv->threaded = 0;
	if (!sv->solo) {
		/* 2: this rank is still writing; 1: it failed; the maximum over ranks decides */
		flag = !__atomic_load_n(&sv->done, __ATOMIC_ACQUIRE) ? 2 : sv->failed;
		if (mt_ckpt_txn_agree(&sv->txn, flag, &all, err))
			return -1;
		if (all == 2)
			return 1;
	}
	if (sv->threaded)
		pthread_join(sv->th, NULL), sv->threaded = 0;
	if (sv->solo) {
		if (sv->failed) {
			*err = sv->err;
			rc = -1;
		}
	} else {
		/* every part is durable, or some rank failed: rank 0 commits or abandons, and
		 * every rank learns which */
		if (sv->failed)
			*err = sv->err;
		rc = mt_ckpt_txn_finish(&sv->txn, tr->lt, &sv->s, sv->failed, all, err);
	}
	if (rc == 0) {
		/* the slowest rank's wait and copy: the step loop of the job runs at its pace */
		double x[2] = { sv->threaded || a->async_save ? sv->blocked : mt_now() - sv->t0, sv->copy_s };
		if (!sv->solo && mt_dist_allreduce_f64(tr->d, x, 2, 1, "the checkpoint's timings", sv->iteration, err))
			rc = -1;
		else if (!a->quiet && sv->copy)
			/* the copy ran beside the steps: it may take longer than the wait */
			mt_info("saved checkpoint at iteration %lld to %s in %.3f s (the step loop waited %.3f s; the writer thread "
				"copied the state to host memory in %.3f s)",
				(long long)sv->iteration, a->save, mt_now() - sv->t0, x[0], x[1]);
		else if (!a->quiet)
			mt_info("saved checkpoint at iteration %lld to %s in %.3f s (the step loop waited %.3f s, %.3f s of it copying the state to host memory)",
				(long long)sv->iteration, a->save, mt_now() - sv->t0, x[0], x[1]);
	}
	saver_clear(sv);
	return rc;
}

static int save(struct trainer *tr, struct mt_err *err)
{
	const struct mt_train_args *a = tr->a;
	struct saver *sv;
	int rc = 0;

	/* a second save waits for the first */
	if (save_finish(tr, 1, err))
		return -1;
	if (!tr->sv) {
		if (!(tr->sv = calloc(1, sizeof(*tr->sv))))
			return mt_err_set(err, MT_EXIT_IO, "%s: out of memory for the checkpoint", tr->d->where);
		pthread_mutex_init(&tr->sv->mu, NULL);
		pthread_cond_init(&tr->sv->cv, NULL);
	}
	sv = tr->sv;
	sv->t0 = mt_now();
	memset(&sv->err, 0, sizeof(sv->err));
	sv->iteration = tr->iteration;
	sv->done = 0;
	sv->failed = 0;
	sv->cfg = mt_config_to_json(&tr->lcfg);
	sv->sch = mt_sched_to_json(&tr->sched);
	sv->s = (struct mt_ckpt_state){ tr->iteration, tr->consumed_train, tr->consumed_valid, tr->adam.step, sv->cfg,
					a->train_args_json ? a->train_args_json : "{}", sv->sch, NULL, 0 };
	sv->solo = tr->d->world == 1;
	sv->tr = tr;
	/* --async-save: the thread scans the part (one process's mt_ckpt_save scans anyway),
	 * and copies the state too where the backend allows it beside the passes; otherwise
	 * the state is copied here, in the step loop */
	sv->copy = a->async_save && tr->b.ops->concurrent_save;
	sv->scan = a->async_save && !sv->solo;
	sv->copied = !sv->copy;
	sv->wanted = sv->waited = 0;
	sv->site[0] = 0;
	sv->late = sv->copy && mt_knob_int(MT_KNOB_TEST_ASYNC_SAVE_LATE) > 0;
	sv->copy_s = 0;
	if (!sv->copy) {
		rc = copy_state(tr, err);
		sv->copy_s = mt_now() - sv->t0;
	}
	if (sv->solo) {
		sv->t = &tr->t, sv->w = tr->w, sv->m = tr->m, sv->v = tr->v;
		if (a->no_save_optim)
			sv->m = sv->v = NULL;
		sv->dir = a->save;
		sv->keep_last = a->keep_last;
	} else {
		struct mt_ckpt_part *pt = &sv->pt;

		memset(pt, 0, sizeof(*pt));
		pt->t = &tr->t;
		if (tr->have_dp) {
			pt->p0 = tr->dp.pfirst[tr->d->dp_rank];
			pt->p1 = tr->dp.pfirst[tr->d->dp_rank + 1];
		} else {
			pt->p0 = 0;
			pt->p1 = tr->d->dp_rank == 0 ? tr->t.n : 0;
		}
		pt->w = tr->w, pt->m = a->no_save_optim ? NULL : tr->m, pt->v = a->no_save_optim ? NULL : tr->v;
		pt->rank = tr->d->rank, pt->tp_rank = tr->d->tp_rank, pt->pp_rank = tr->d->pp_rank, pt->dp_rank = tr->d->dp_rank;
		pt->world = tr->d->world, pt->tp = tr->d->tp, pt->pp = tr->d->pp, pt->dp = tr->d->dp;
		mt_ckpt_iter_dir(sv->what, sizeof(sv->what), a->save, tr->iteration, NULL);
		if (rc == 0 && !sv->scan)
			rc = mt_ckpt_part_check(pt, sv->what, err);
		/* rank 0 makes the temporary directory and names it to all; --async-save: the
		 * thread scans the part, and a rank whose copy, scan or write fails marks its
		 * writer failed, which the agreement at the commit (save_finish) makes every rank
		 * abandon; otherwise every rank learns whether each can write before any starts */
		if (mt_ckpt_txn_begin(&sv->txn, a->save, tr->iteration, a->keep_last, tr->d, 0, 0, 0, !sv->scan, rc != 0,
				      err)) {
			saver_clear(sv);
			return -1;
		}
		memcpy(sv->tmpdir, sv->txn.tmpdir, sizeof(sv->tmpdir));
	}
	if (rc && sv->solo) {
		saver_clear(sv);
		return -1;
	}
	sv->pending = 1;
	sv->threaded = 0;
	if (rc) {
		/* asynchronous, and this rank's copy failed: the others write, and all learn of
		 * it when finishing */
		sv->failed = 1;
		sv->err = *err;
		sv->done = 1;
		sv->copied = 1;
	} else if (a->async_save && pthread_create(&sv->th, NULL, saver_run, sv) == 0) {
		sv->threaded = 1;
	} else {
		sv->wanted = 1; /* no thread to hand the copy over to */
		saver_run(sv);
	}
	sv->blocked = mt_now() - sv->t0;
	return a->async_save ? 0 : save_finish(tr, 1, err);
}

/* Load one checkpoint; *secs is how long this rank took (logged by the caller, or here
 * with say). */
static int load_one(struct trainer *tr, const char *path, int say, double *secs, struct mt_err *err)
{
	char dir[4096];
	int64_t it;
	struct mt_ckpt_loaded st;
	struct mt_config c;
	double t0 = mt_now();

	if (mt_ckpt_resolve(path, dir, sizeof(dir), &it, err))
		return -1;
	if (mt_ckpt_read_state(dir, &st, err))
		return -1;
	if (mt_config_from_json(&c, st.config_json, err)) {
		mt_ckpt_loaded_free(&st);
		err->code = MT_EXIT_DATA; /* a stored config that does not validate is bad data */
		return mt_err_prefix(err, "checkpoint '%s': attribute 'config'", dir);
	}
	if (mt_ckpt_check_config(dir, &c, NULL, err)) {
		mt_ckpt_loaded_free(&st);
		return -1;
	}
	{
		/* the first field that differs, named as its flag */
		const struct mt_config *h = &tr->lcfg;
		char why[256] = "";
#define DIFF(cond, flag, fmt, x, y)                                                                          \
	if (!why[0] && (cond))                                                                               \
		snprintf(why, sizeof(why), "%s " fmt " here, " fmt " in the checkpoint", flag, x, y)
		DIFF(c.num_layers != h->num_layers, "--num-layers", "%d", h->num_layers, c.num_layers);
		DIFF(c.hidden_size != h->hidden_size, "--hidden-size", "%d", h->hidden_size, c.hidden_size);
		DIFF(c.num_attention_heads != h->num_attention_heads, "--num-attention-heads", "%d", h->num_attention_heads,
		     c.num_attention_heads);
		DIFF(c.num_query_groups != h->num_query_groups, "--num-query-groups", "%d", h->num_query_groups,
		     c.num_query_groups);
		DIFF(c.kv_channels != h->kv_channels, "--kv-channels", "%d", h->kv_channels, c.kv_channels);
		DIFF(c.ffn_hidden_size != h->ffn_hidden_size, "--ffn-hidden-size", "%d", h->ffn_hidden_size, c.ffn_hidden_size);
		DIFF(c.vocab_size != h->vocab_size, "the vocabulary size (the tokenizer's, or --vocab-size; NullTokenizer "
		     "adds its end-of-document id)", "%lld", (long long)h->vocab_size, (long long)c.vocab_size);
		DIFF(c.max_position_embeddings != h->max_position_embeddings, "--max-position-embeddings", "%d",
		     h->max_position_embeddings, c.max_position_embeddings);
		DIFF(c.position_embedding_type != h->position_embedding_type, "--position-embedding-type", "%s",
		     h->position_embedding_type == MT_POS_ROPE ? "rope" : "learned_absolute",
		     c.position_embedding_type == MT_POS_ROPE ? "rope" : "learned_absolute");
		DIFF(c.normalization != h->normalization, "--normalization", "%s",
		     h->normalization == MT_NORM_RMSNORM ? "RMSNorm" : "LayerNorm",
		     c.normalization == MT_NORM_RMSNORM ? "RMSNorm" : "LayerNorm");
		DIFF(c.swiglu != h->swiglu, "--swiglu", "%s", h->swiglu ? "on" : "off", c.swiglu ? "on" : "off");
		DIFF(c.add_bias_linear != h->add_bias_linear, "--disable-bias-linear", "%s", h->add_bias_linear ? "off" : "on",
		     c.add_bias_linear ? "off" : "on");
		DIFF(c.untie_embeddings_and_output_weights != h->untie_embeddings_and_output_weights,
		     "--untie-embeddings-and-output-weights", "%s", h->untie_embeddings_and_output_weights ? "on" : "off",
		     c.untie_embeddings_and_output_weights ? "on" : "off");
#undef DIFF
		if (why[0]) {
			mt_ckpt_loaded_free(&st);
			return mt_err_set(err, MT_EXIT_USAGE, "checkpoint '%s' holds another model: %s (or --use-checkpoint-args)",
					  dir, why);
		}
	}
	/* every rank reads its slices of the logical tensors (of the checkpoint's own table:
	 * its vocabulary padded for the layout that wrote it; padding rows one has and the
	 * other lacks dropped or zero), so any layout reads any checkpoint; with ZeRO-1 the
	 * moments of its own share only (dp.c's, or the device backend's, which takes it
	 * from the whole buffers) */
	int dpzero = tr->a->distributed_optimizer && tr->have_dp, m0 = 0, m1 = tr->t.n, bad;
	/* --finetune and --no-load-optim: the weights alone (the moments start at zero) */
	int opt = st.has_optimizer && !tr->a->finetune && !tr->a->no_load_optim;

	if (!st.has_optimizer && !tr->a->finetune && !tr->a->no_load_optim && st.iteration > 0 && !tr->a->quiet &&
	    tr->d->rank == 0)
		mt_warn("checkpoint '%s' holds no optimizer state: the AdamW moments start at zero (Megatron asks for "
			"--no-load-optim or --finetune here)", dir);
	struct mt_config cc = tr->lcfg;
	struct mt_params ct;
	cc.padded_vocab_size = c.padded_vocab_size;
	if (mt_params_build(&ct, &cc, err)) {
		mt_ckpt_loaded_free(&st);
		return mt_err_prefix(err, "checkpoint '%s'", dir);
	}
	if (dpzero) {
		m0 = tr->dp.pfirst[tr->d->dp_rank];
		m1 = tr->dp.pfirst[tr->d->dp_rank + 1];
	}
	bad = mt_ckpt_load_part(dir, &ct, &tr->t, tr->w, opt ? tr->m : NULL, opt ? tr->v : NULL, m0, m1, 0, err);
	mt_params_free(&ct);
	if (bad || tr->b.ops->load_state(&tr->b, tr->w, opt && !dpzero ? tr->m : NULL, opt && !dpzero ? tr->v : NULL, err)) {
		mt_ckpt_loaded_free(&st);
		return -1;
	}
	if (dpzero)
		mt_dp_set_moments(&tr->dp, opt ? tr->m : NULL, opt ? tr->v : NULL);
	/* Megatron: --finetune starts at iteration 0 with no samples consumed; without the
	 * optimizer state the learning-rate schedule starts again too */
	tr->iteration = tr->a->finetune ? 0 : st.iteration;
	tr->consumed_train = tr->a->finetune ? 0 : st.consumed_train_samples;
	tr->consumed_valid = tr->a->finetune ? 0 : st.consumed_valid_samples;
	tr->adam.step = opt ? st.optimizer_step : 0;
	if (opt && st.scheduler_json && mt_sched_from_json(&tr->sched, st.scheduler_json, err)) {
		mt_ckpt_loaded_free(&st);
		return -1;
	}
	mt_ckpt_loaded_free(&st);
	*secs = mt_now() - t0;
	if (say && !tr->a->quiet)
		mt_info("loaded checkpoint '%s' at iteration %lld (%lld samples consumed) in %.3f s", dir, (long long)tr->iteration,
			(long long)tr->consumed_train, *secs);
	return 0;
}

/* --load: a checkpoint directory falls back from a latest that does not read (a garbled
 * marker, a missing or damaged iteration) to the newest iteration that does, with a
 * warning naming what was skipped; all ranks agree on each try, so they load the same. */
static int load(struct trainer *tr, struct mt_err *err)
{
	int64_t *its;
	size_t n;
	char note[600], dir[4096];
	struct mt_err first = { 0 }, e = { 0 };
	int all = 0, say = tr->d->rank == 0;
	double secs = 0;

	if (mt_ckpt_candidates(tr->a->load, &its, &n, note, sizeof(note), err))
		return -1;
	if (n == 0)
		return load_one(tr, tr->a->load, 1, &secs, err);
	if (note[0] && say)
		mt_ckpt_warn("%s: falling back to the newest iteration of '%s' that reads", note, tr->a->load);
	for (size_t i = 0; i < n; i++) {
		int bad;
		if (mt_ckpt_iter_dir(dir, sizeof(dir), tr->a->load, its[i], &e))
			break;
		mt_err_clear(&e);
		bad = load_one(tr, dir, 0, &secs, &e) ? 1 : 0;
		if (mt_dist_agree(tr->d, its[i], bad, &all, err)) {
			free(its);
			return -1;
		}
		if (!all) {
			/* every rank has read its slices: the slowest one's time */
			if (tr->d->world > 1 && mt_dist_allreduce_f64(tr->d, &secs, 1, 1, "the load's time", its[i], err)) {
				free(its);
				return -1;
			}
			if (say && !tr->a->quiet)
				mt_info("loaded checkpoint '%s' at iteration %lld (%lld samples consumed) in %.3f s%s", dir,
					(long long)tr->iteration, (long long)tr->consumed_train, secs,
					tr->d->world > 1 ? " (the slowest rank)" : "");
			if (i > 0 && say)
				mt_ckpt_warn("resumed from '%s' instead (the newest checkpoint of '%s' that reads)", dir, tr->a->load);
			free(its);
			return 0;
		}
		if (!bad)
			mt_err_set(&e, MT_EXIT_DATA, "another rank could not read its slices of it");
		if (say || bad) /* rank 0, and every rank with a reason of its own */
			mt_ckpt_warn("skipping checkpoint '%s': %s", dir, e.msg);
		if (!first.code)
			first = e;
	}
	free(its);
	*err = first;
	if (!err->code)
		mt_err_set(err, MT_EXIT_DATA, "no checkpoint of '%s' reads", tr->a->load);
	else
		mt_err_prefix(err, "no checkpoint of '%s' reads; the newest", tr->a->load);
	return -1;
}

/* Every stage's counters since the last log line to every stage of the pipeline group
 * (rank 0 logs them), then zeroed. */
static int pp_gather_stats(struct trainer *tr, int64_t m, struct mt_err *err)
{
	int p = tr->d->pp, n = (int)(sizeof(tr->pp_stat) / sizeof(tr->pp_stat[0]));
	int64_t cnt[64], dsp[64];

	if (p > 64) {
		tr->pp_log_n = 0;
		return 0;
	}
	for (int q = 0; q < p; q++) {
		cnt[q] = n;
		dsp[q] = (int64_t)q * n;
	}
	for (int k = 0; k < n; k++)
		tr->pp_log[tr->d->pp_rank * n + k] = tr->pp_stat[k] / (double)(tr->pp_steps ? tr->pp_steps : 1);
	if (mt_dist_allgatherv_f64(tr->ppd, tr->pp_log, cnt, dsp, "the pipeline's counters", tr->iteration, err))
		return -1;
	tr->pp_log_n = p;
	tr->pp_log_m = m;
	memset(tr->pp_stat, 0, sizeof(tr->pp_stat));
	tr->pp_steps = 0;
	return 0;
}

static void log_line(struct trainer *tr, double loss, double lr, double gnorm, double tps, double elapsed,
		     int64_t skipped, double valid)
{
	const struct mt_train_args *a = tr->a;

	if (!a->quiet)
		mt_info("iteration %lld/%lld | loss %.6f | lr %.4e | grad norm %.4f | %.0f tokens/s | elapsed %.1f s | skipped %lld",
			(long long)tr->iteration, (long long)a->train_iters, loss, lr, gnorm, tps, elapsed, (long long)skipped);
	if (tr->json) {
		fprintf(tr->json,
			"{\"iteration\": %lld, \"consumed_samples\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, "
			"\"tokens_per_second\": %.6g, \"elapsed\": %.6g, \"skipped\": %lld",
			(long long)tr->iteration, (long long)tr->consumed_train, loss, lr, gnorm, tps, elapsed, (long long)skipped);
		if (!isnan(valid))
			fprintf(tr->json, ", \"valid_loss\": %.9g, \"valid_ppl\": %.9g", valid, exp(valid));
		if (tr->tpon) {
			/* this rank's tensor-parallel traffic since the last line: bytes sent a step,
			 * and the elements its operations moved (the analytical volume's unit) */
			int64_t by = 0, el = 0, n = tr->iteration - tr->tp_logged;
			for (int k = 0; k < MT_TPC_NKINDS; k++) {
				by += tr->tpc.bytes[k];
				el += k == MT_TPC_F64 ? 0 : tr->tpc.elems[k];
			}
			fprintf(tr->json, ", \"tp_bytes_per_step\": %.6g, \"tp_elems_per_step\": %.6g",
				n > 0 ? (double)by / (double)n : 0.0, n > 0 ? (double)el / (double)n : 0.0);
			mt_tpcomm_reset_counts(&tr->tpc);
			tr->tp_logged = tr->iteration;
		}
		if (tr->ppon && tr->pp_log_n > 0) {
			/* each stage's measured bubble (idle over compute time, the papers' unit) and
			 * the formula's from the measured pass times averaged over the stages */
			const int n = (int)(sizeof(tr->pp_stat) / sizeof(tr->pp_stat[0]));
			double t[MT_PP_T_NKINDS] = { 0 }, c[MT_PP_T_NKINDS] = { 0 }, by = 0;
			fprintf(tr->json, ", \"pp_schedule\": \"%s\", \"pp_bubble\": [", mt_pp_kind_name(tr->a->pp_schedule));
			for (int q = 0; q < tr->pp_log_n; q++) {
				const double *x = tr->pp_log + q * n;
				fprintf(tr->json, "%s%.6g", q ? ", " : "", x[0] > 0 ? (x[1] - x[0]) / x[0] : 0.0);
				for (int k = 0; k < MT_PP_T_NKINDS; k++) {
					t[k] += x[2 + k];
					c[k] += x[6 + k];
				}
				by += x[10];
			}
			for (int k = 0; k < MT_PP_T_NKINDS; k++)
				t[k] = c[k] > 0 ? t[k] / c[k] : 0;
			fprintf(tr->json, "], \"pp_bubble_formula\": %.6g, \"pp_pass_seconds\": {\"forward\": %.6g, "
				"\"backward\": %.6g, \"backward_input\": %.6g, \"backward_weight\": %.6g}, "
				"\"pp_bytes_per_step\": %.6g",
				mt_pp_bubble(tr->a->pp_schedule, tr->d->pp, tr->a->pipeline.vp, (int)tr->pp_log_m, t[MT_PP_T_FWD],
					     t[MT_PP_T_BWD_INPUT], t[MT_PP_T_BWD_WEIGHT]),
				t[MT_PP_T_FWD], t[MT_PP_T_BWD], t[MT_PP_T_BWD_INPUT], t[MT_PP_T_BWD_WEIGHT], by / tr->pp_log_n);
		}
		fprintf(tr->json, "}\n");
		fflush(tr->json);
	}
}

int mt_train_run(const struct mt_train_args *a, struct mt_train_result *r, struct mt_err *err)
{
	struct trainer tr;
	int64_t L = a->cfg.seq_length, micro, local, skipped_row = 0, skipped = 0, tokens_since = 0;
	double t0 = mt_now(), tlog = t0, loss_acc = 0, gnorm = 0, lr = 0;
	int64_t loss_n = 0;
	int rc = -1;

	memset(&tr, 0, sizeof(tr));
	memset(r, 0, sizeof(*r));
	tr.a = a;
	tr.d = a->dist;
	if (!tr.d) {
		tr.solo.world = tr.solo.local_world = tr.solo.tp = tr.solo.pp = tr.solo.dp = 1;
		tr.d = &tr.solo;
	}
	/* a step schedule's batches are checked once the consumed samples are known */
	if (a->micro_batch_size <= 0 || (!a->batch_steps.n && a->global_batch_size % a->micro_batch_size))
		return mt_err_set(err, MT_EXIT_USAGE, "--global-batch-size %lld must be a multiple of --micro-batch-size %lld",
				  (long long)a->global_batch_size, (long long)a->micro_batch_size);
	if (!a->batch_steps.n && a->global_batch_size % (a->micro_batch_size * tr.d->dp))
		return mt_err_set(err, MT_EXIT_USAGE,
				  "--global-batch-size %lld must be a multiple of --micro-batch-size %lld x %d data-parallel ranks",
				  (long long)a->global_batch_size, (long long)a->micro_batch_size, tr.d->dp);
	if (a->rampup[0] > 0 && (a->rampup[0] % (a->micro_batch_size * tr.d->dp) || a->rampup[1] % (a->micro_batch_size * tr.d->dp)))
		return mt_err_set(err, MT_EXIT_USAGE,
				  "--rampup-batch-size %lld %lld: start and increment must be multiples of --micro-batch-size %lld x %d "
				  "data-parallel ranks", (long long)a->rampup[0], (long long)a->rampup[1],
				  (long long)a->micro_batch_size, tr.d->dp);
	/* the most: a rampup only grows to the global batch; a step schedule may go anywhere */
	micro = (a->batch_steps.n ? mt_batch_steps_max(&a->batch_steps) : a->global_batch_size) / a->micro_batch_size;
	local = micro / tr.d->dp;
	tr.dpd = tr.tpd = tr.ppd = tr.d;
	tr.lt = &tr.t;
	tr.lcfg = a->cfg;
	tr.ppon = tr.d->pp > 1;
	if (a->pipeline.size != tr.d->pp && (tr.ppon || a->pipeline.size > 1))
		return mt_err_set(err, MT_EXIT_USAGE, "%s: the layout has %d pipeline stages, the model's split %d", tr.d->where,
				  tr.d->pp, a->pipeline.size);
	if (tr.d->tp > 1 || tr.ppon) {
		/* tensor and pipeline parallelism: this rank's part of the model; the logical
		 * table for checkpoints, its vocabulary padded as this layout pads it (Megatron's
		 * multiple of divisible-by x TP: the padding rows train too, through the softmax,
		 * so a run resumes exactly only with its own) */
		const struct mt_pp_split whole = { 1, 1, 0, 0 };
		tr.tpd = mt_dist_group(tr.d, MT_GROUP_TP);
		tr.dpd = mt_dist_group(tr.d, MT_GROUP_DP);
		tr.ppd = mt_dist_group(tr.d, MT_GROUP_PP);
		tr.mpd = mt_dist_group(tr.d, MT_GROUP_MP);
		if (!tr.tpd || !tr.dpd || !tr.ppd || !tr.mpd)
			return mt_err_set(err, MT_EXIT_USAGE, "%s: no tensor-, data- or pipeline-parallel group (the layout was "
					  "not made)", tr.d->where);
		if (tr.d->tp > 1 && mt_tpcomm_init(&tr.tpc, tr.tpd, a->sequence_parallel, &tr.tp, err))
			return -1;
		tr.tpon = tr.d->tp > 1;
		tr.split = 1;
		if (mt_params_build_stage(&tr.t, &a->cfg, tr.d->tp, tr.d->tp_rank, a->sequence_parallel,
					  tr.ppon ? &a->pipeline : &whole, tr.d->pp_rank, err) ||
		    mt_params_build(&tr.lt_own, &tr.lcfg, err)) {
			if (tr.tpon)
				mt_tpcomm_free(&tr.tpc);
			mt_params_free(&tr.t);
			return -1;
		}
		tr.lt = &tr.lt_own;
	} else if (mt_params_build(&tr.t, &a->cfg, err)) {
		return -1;
	}
	if (tr.ppon) {
		/* ordered sums over every model-parallel rank (the norm, the agreement on
		 * non-finite gradients) and over the two copies of a tied embedding */
		if (mt_tpcomm_init(&tr.mpc, tr.mpd, 0, &tr.mp, err))
			goto out;
		tr.have_mp = 1;
		if (!a->cfg.untie_embeddings_and_output_weights && (tr.t.first_stage || tr.t.last_stage)) {
			if (!(tr.embd = mt_dist_group(tr.d, MT_GROUP_EMB))) {
				mt_err_set(err, MT_EXIT_USAGE, "%s: no embedding group (the layout was not made)", tr.d->where);
				goto out;
			}
			if (mt_tpcomm_init(&tr.embc, tr.embd, 0, &tr.emb, err))
				goto out;
			tr.have_emb = 1;
		}
	}
	tr.w = malloc((size_t)tr.t.total * sizeof(float));
	tr.m = calloc((size_t)tr.t.total, sizeof(float));
	tr.v = calloc((size_t)tr.t.total, sizeof(float));
	tr.buf = malloc((size_t)(L + 1) * sizeof(int32_t));
	tr.tok = malloc((size_t)(a->micro_batch_size * L) * sizeof(int32_t));
	tr.tgt = malloc((size_t)(a->micro_batch_size * L) * sizeof(int32_t));
	tr.pre.tok = malloc((size_t)(a->micro_batch_size * L) * sizeof(int32_t));
	tr.pre.tgt = malloc((size_t)(a->micro_batch_size * L) * sizeof(int32_t));
	tr.lbuf = malloc((size_t)micro * 2 * sizeof(double));
	if (!tr.w || !tr.m || !tr.v || !tr.buf || !tr.tok || !tr.tgt || !tr.pre.tok || !tr.pre.tgt || !tr.lbuf) {
		mt_err_set(err, MT_EXIT_IO, "out of memory for %lld parameters", (long long)tr.t.total);
		goto out;
	}
	tr.b.ops = a->device_cuda ? &mt_backend_cuda : &mt_backend_cpu;
	tr.b.opt = a->backend;
	tr.b.opt.quiet = a->quiet;
	tr.b.overlap = prefetch;
	tr.b.overlap_ctx = &tr;
	/* a device backend reduces over the data-parallel group (the world without TP) */
	tr.b.opt.dist = tr.dpd;
	tr.b.opt.distributed_optimizer = a->distributed_optimizer;
	tr.b.opt.bucket_size = a->ddp_bucket_size;
	tr.b.opt.tp = tr.tpon ? &tr.tp : NULL;
	tr.b.opt.tp_dist = tr.tpon ? tr.tpd : NULL;
	tr.b.opt.tp_comm = a->tp_comm;
	tr.b.opt.label_smoothing = a->label_smoothing;
	tr.b.opt.mp = tr.ppon ? &tr.mp : NULL;
	tr.b.opt.split_backward = tr.ppon && a->pp_schedule == MT_PP_ZBH1;
	tr.b.opt.pp_comm = a->pp_comm;
	if (tr.ppon && (!tr.b.ops->stage_forward || !tr.b.ops->stage_backward || !tr.b.ops->stage_weight)) {
		mt_err_set(err, MT_EXIT_USAGE, "--pipeline-model-parallel-size %d: the %s backend has no pipeline stages yet "
			   "(add --device cpu)", tr.d->pp, tr.b.ops->name);
		goto out;
	}
	if (tr.b.ops->init(&tr.b, &a->cfg, &tr.t, (int)a->micro_batch_size, err))
		goto out;
	/* host buffers go through dp.c; a backend whose buffers live on a device reduces
	 * them itself (NCCL), bucketed under its backward pass */
	if (tr.b.ops->host_grads && tr.b.ops->host_grads(&tr.b)) {
		if (mt_dp_init(&tr.dp, tr.dpd, &tr.t, a->distributed_optimizer, err))
			goto out;
		tr.dp.tp = tr.ppon ? &tr.mp : tr.tpon ? &tr.tp : NULL;
		tr.have_dp = 1;
	} else if (tr.have_emb && !tr.b.ops->tie_grads) {
		mt_err_set(err, MT_EXIT_USAGE, "--pipeline-model-parallel-size %d: the %s backend cannot sum the tied "
			   "embedding's copies (add --untie-embeddings-and-output-weights)", tr.d->pp, tr.b.ops->name);
		goto out;
	}
	if (tr.ppon) {
		/* the activations a stage sends: [rows][hidden], a sequence shard's rows with SP */
		int64_t rows = a->micro_batch_size * L / (tr.tpon && a->sequence_parallel ? tr.d->tp : 1);
		if (mt_pp_exec_init(&tr.exec, tr.ppd, a->pipeline.vp, rows * a->cfg.hidden_size, err))
			goto out;
		tr.have_exec = 1;
		if (tr.b.ops->pp_transport) {
			/* a device backend's own transport between the stages (NCCL), if it has one */
			const struct mt_pp_transport *ptr;
			size_t eb;
			if (tr.b.ops->pp_transport(&tr.b, tr.ppd, &ptr, &eb, err))
				goto out;
			mt_pp_exec_set_transport(&tr.exec, ptr, eb);
		}
		/* every batch size the run will see must suit the schedule: refused now, not
		 * at the step where a rampup reaches it */
		for (int64_t gb = a->rampup[0] > 0 ? a->rampup[0] : a->global_batch_size; !a->batch_steps.n;
		     gb += a->rampup[0] > 0 ? a->rampup[1] : 0) {
			int64_t m = gb / (a->micro_batch_size * tr.d->dp);
			if (mt_pp_sched_check(a->pp_schedule, tr.d->pp, a->pipeline.vp, (int)m, a->pp_group, err))
				goto out;
			if (gb >= a->global_batch_size || a->rampup[1] <= 0)
				break;
		}
	}
	if (!a->quiet && tr.d->world > 1)
		mt_info("%d ranks: data-parallel %d x tensor %d x pipeline %d; %lld micro-batches of %lld per rank and step%s%s",
			tr.d->world, tr.d->dp, tr.d->tp, tr.d->pp, (long long)local, (long long)a->micro_batch_size,
			a->distributed_optimizer ? "; distributed optimizer (ZeRO-1)" : "",
			tr.tpon && a->sequence_parallel ? "; sequence parallel" : "");
	if (!a->quiet && tr.ppon)
		mt_info("pipeline: %d stages of %d model chunk(s), schedule %s, %lld micro-batches a step; stage 0 holds "
			"the embeddings and layers %d..%d, the last stage the loss", tr.d->pp, a->pipeline.vp,
			mt_pp_kind_name(a->pp_schedule), (long long)local, tr.t.chunk_layers[0], tr.t.chunk_layers[1] - 1);
	if (!a->quiet)
		mt_info("model: %lld parameters%s; backend %s holds %.1f MB (weights, gradients, AdamW state and the "
			"activations of a micro-batch of %lld x %lld)",
			(long long)tr.t.total, tr.split ? " on rank 0" : "", tr.b.ops->name, tr.b.ops->bytes(&tr.b) / 1e6, (long long)a->micro_batch_size,
			(long long)L);
	if (tr.split)
		mt_params_init_shard(&tr.t, tr.w, a->seed); /* the part of the one-rank model */
	else
		mt_params_init(&tr.t, tr.w, a->seed);
	if (tr.b.ops->load_state(&tr.b, tr.w, NULL, NULL, err))
		goto out;
	tr.adam = a->adam;
	if (mt_sched_init_iters(&tr.sched, &a->sched, err))
		goto out;
	if (a->lr_decay_samples > 0) {
		/* Megatron's sample-based schedule: steps are samples, given as such */
		tr.sched.lr_decay_steps = a->lr_decay_samples;
		tr.sched.wd_incr_steps = a->train_samples;
		tr.sched.lr_warmup_steps = a->sched.lr_warmup_fraction >= 0
						   ? a->sched.lr_warmup_fraction * (double)a->lr_decay_samples
						   : (double)a->lr_warmup_samples;
		if (mt_sched_validate(&tr.sched, err))
			goto out;
	}
	if (!a->mock_data) {
		/* rank 0 writes the index caches; the others read them after it */
		if (tr.d->rank == 0 && mt_plan_make(a->data, MT_PLAN_WRITE | MT_PLAN_KEEP, &tr.plan, err))
			goto out;
		/* building a large blend's indices can take minutes: at least an hour here */
		{
			double t = tr.d->timeout;
			int bad;
			if (t > 0 && t < 3600)
				tr.d->timeout = 3600;
			bad = mt_dist_barrier(tr.d, "waiting for rank 0's data plan", 0, err);
			tr.d->timeout = t;
			if (bad)
				goto out;
		}
		if (tr.d->rank != 0 && mt_plan_make(a->data, MT_PLAN_KEEP, &tr.plan, err))
			goto out;
		tr.have_plan = 1;
		if (!tr.plan.split[MT_SPLIT_TRAIN].present) {
			mt_err_set(err, MT_EXIT_DATA, "the data path gives the train split no samples");
			goto out;
		}
	}
	if (a->load && load(&tr, err))
		goto out;
	if (a->batch_steps.n && check_batch_steps(&tr, err))
		goto out;
	if (a->log_json && tr.d->rank == 0) {
		tr.json = fopen(a->log_json, "a");
		if (!tr.json) {
			mt_err_errno(err, MT_EXIT_IO, "cannot open '%s'", a->log_json);
			goto out;
		}
	}
	if (a->tensorboard.dir && tr.d->rank == 0) {
		if (mt_tblog_open(&tr.tb, &a->tensorboard, err))
			goto out;
		tr.have_tb = 1;
	}
	/* every rank times, so that the write can take the maximum over them (Megatron's) */
	tr.timing = a->tensorboard.dir && a->tensorboard.timers;
	while (tr.iteration < a->train_iters) {
		double loss = 0, t_fb = 0, t_op = 0, sync0 = 0;
		int bad = 0;

		int nonfinite;

		int64_t step = tr.iteration + 1, cnt, gbs = batch_now(&tr);
		double tokens;
		int zero_dp = a->distributed_optimizer && tr.have_dp;

		micro = gbs / a->micro_batch_size;
		local = micro / tr.d->dp;
		tr.b.step = step;
		tr.tpc.step = step;
		tr.mpc.step = step;
		if (tr.timing) {
			tr.b.timers = tr.tm;
			tr.dp.timers = tr.have_dp ? tr.tm : NULL;
			t_fb = mt_now();
		}

		/* each micro-batch's gradient alone, then added to the step's sum in the global
		 * micro-batch order (dp.h): the same arithmetic for one rank or many */
		if (tr.have_dp)
			mt_dp_begin(&tr.dp);
		else
			tr.b.ops->zero_grad(&tr.b); /* the backend sums the micro-batches itself */
		if (tr.ppon) {
			/* the stage's schedule: every micro-batch's gradient added in the backend,
			 * the tied embedding's two copies summed, then the data-parallel sum of the
			 * whole step's gradient in rank order */
			double ts = mt_now();
			tr.b.ops->zero_grad(&tr.b);
			if (tr.d->world > 1 && tr.d->rank == a->hang_rank && step == a->hang_step && a->hang_backward)
				for (;;)
					pause(); /* the test hook of a stage that stops in its schedule */
			mt_pp_exec_reset_stats(&tr.exec);
			if (pp_run(&tr, local, MT_SPLIT_TRAIN, tr.consumed_train, 0, step, err))
				goto out;
			if (tr.timing) {
				/* the executor's clocks: the passes, and its waits for each kind of transfer */
				const struct mt_pp_stats *st = &tr.exec.st;
				tr.tm[MT_T_FORWARD_COMPUTE] += st->compute[MT_PP_T_FWD];
				tr.tm[MT_T_BACKWARD_COMPUTE] += st->compute[MT_PP_T_BWD] + st->compute[MT_PP_T_BWD_INPUT] +
								st->compute[MT_PP_T_BWD_WEIGHT];
				tr.tm[MT_T_FORWARD_RECV] += st->wait_kind[0];
				tr.tm[MT_T_FORWARD_SEND] += st->wait_kind[1];
				tr.tm[MT_T_BACKWARD_RECV] += st->wait_kind[2];
				tr.tm[MT_T_BACKWARD_SEND] += st->wait_kind[3];
			}
			for (int k = 0; k < MT_PP_T_NKINDS; k++) {
				tr.pp_stat[0] += tr.exec.st.compute[k];
				tr.pp_stat[2 + k] += tr.exec.st.compute[k];
				tr.pp_stat[6 + k] += (double)tr.exec.st.passes[k];
			}
			tr.pp_stat[1] += mt_now() - ts;
			tr.pp_stat[10] += (double)tr.exec.st.bytes_sent;
			tr.pp_steps++;
			if (tr.have_emb) {
				double te = tr.timing ? mt_now() : 0;
				if (tie_embeddings(&tr, step, err))
					goto out;
				mt_timer_add(tr.b.timers, MT_T_EMBEDDING_GRADS, te);
			}
			/* a device backend reduces over the data-parallel group in grad_prepare */
			if (tr.have_dp && mt_dp_accumulate(&tr.dp, tr.b.ops->host_grads(&tr.b), step, err))
				goto out;
		}
		for (int64_t k = 0; !tr.ppon && k < local; k++) {
			double tf = tr.timing ? mt_now() : 0;
			if (fetch(&tr, MT_SPLIT_TRAIN, first_sample(&tr, tr.consumed_train, k), err))
				goto out;
			mt_timer_add(tr.b.timers, MT_T_BATCH_GENERATOR, tf);
			if (tr.have_dp)
				tr.b.ops->zero_grad(&tr.b);
			if (tr.d->world > 1 && tr.d->rank == a->hang_rank && step == a->hang_step && a->hang_backward &&
			    k == local - 1)
				for (;;)
					pause(); /* the test hook of a rank that hangs before its reduction */
			/* the last micro-batch's backward pass starts a device backend's reduction */
			cnt = 0;
			for (int64_t q = 0; q < a->micro_batch_size * L; q++)
				cnt += tr.tgt[q] >= 0;
			/* the next micro-batch is read while the device runs this one: this step's
			 * next, or the next step's first (after an evaluation in between, which
			 * fetches other samples, fetch reads it anew) */
			if (k + 1 < local || step < a->train_iters) {
				tr.pre.split = MT_SPLIT_TRAIN;
				tr.pre.first = k + 1 < local ? first_sample(&tr, tr.consumed_train, k + 1)
							     : first_sample(&tr, tr.consumed_train + gbs, 0);
				tr.pre.want = 1;
			}
			tr.lbuf[2 * k] = tr.b.ops->step_micro(&tr.b, tr.tok, tr.tgt, k == local - 1 ? MT_BACKWARD_LAST : 1) *
					 (double)cnt;
			tr.lbuf[2 * k + 1] = (double)cnt;
			if (tr.have_dp && mt_dp_accumulate(&tr.dp, tr.b.ops->host_grads(&tr.b), step, err))
				goto out;
		}
		/* a device backend reduces on its own streams: first a heartbeat, so that rank
		 * 0 names a rank that did not finish its backward pass (dp.c has its own) */
		if (!tr.have_dp && tr.d->world > 1) {
			int x;
			if (mt_dist_agree(tr.d, step, 0, &x, err))
				goto out;
		}
		if (gather_losses(&tr, local, &loss, &tokens, step, err))
			goto out;
		mt_timer_add(tr.b.timers, MT_T_FORWARD_BACKWARD, t_fb);
		if (tr.timing) {
			t_op = mt_now();
			sync0 = tr.tm[MT_T_ALL_GRADS_SYNC];
		}
		loss = tokens > 0 ? loss / tokens : 0;
		/* the mean over micro-batches; the norm before clipping, as Megatron logs it */
		lr = mt_sched_lr(&tr.sched);
		tr.adam.weight_decay = mt_sched_wd(&tr.sched);
		if (zero_dp) {
			if (mt_dp_zero_clip(&tr.dp, 1.0f / (float)micro, a->clip_grad, &gnorm, &nonfinite, step, err))
				goto out;
			/* the first change of the weights and moments: a pending save's copy first */
			if (!nonfinite && isfinite(loss)) {
				copy_wait(&tr, step);
				if (mt_dp_zero_update(&tr.dp, tr.b.ops->host_weights(&tr.b), &tr.adam, lr, step, err))
					goto out;
			}
		} else {
			if (tr.have_dp && mt_dp_allgather_grads(&tr.dp, tr.b.ops->host_grads(&tr.b), step, err))
				goto out;
			if (tr.b.ops->grad_prepare(&tr.b, 1.0f / (float)micro, a->clip_grad, &gnorm, &nonfinite, err))
				goto out;
		}
		if (tr.timing) {
			/* the gradient sum finished here (a device backend's wait, the replicated
			 * optimizer's gather) is forward-backward's, as Megatron's finalize_model_grads
			 * is; the rest is the optimizer's (ZeRO's clip and update timed by dp.c) */
			double synced = tr.tm[MT_T_ALL_GRADS_SYNC] - sync0, dt = mt_now() - t_op - synced;
			tr.tm[MT_T_FORWARD_BACKWARD] += synced;
			tr.tm[MT_T_OPTIMIZER] += dt;
			if (!zero_dp)
				tr.tm[MT_T_OPTIMIZER_CLIP] += dt;
		}
		tr.consumed_train += gbs;
		tr.iteration++;
		tokens_since += gbs * L;
		/* Megatron's --check-for-nan-in-loss-and-grad (fp16 overflows excepted: the loss
		 * scale handles them) */
		if ((!isfinite(loss) || (nonfinite && nonfinite != MT_GRAD_OVERFLOW)) && !a->skip_nonfinite_loss) {
			mt_err_set(err, MT_EXIT_DATA, "iteration %lld: the %s is %s: stopping (--no-check-for-nan-in-loss-and-grad "
				   "skips such steps instead)", (long long)tr.iteration, isfinite(loss) ? "gradient" : "loss",
				   isfinite(loss) ? "not finite" : isnan(loss) ? "nan" : "inf");
			goto out;
		}
		if (!isfinite(loss) || nonfinite) {
			bad = 1;
			skipped++;
			/* fp16 overflows lower the loss scale: routine, not divergence */
			if (nonfinite != MT_GRAD_OVERFLOW && ++skipped_row > a->max_skipped_steps) {
				mt_err_set(err, MT_EXIT_DATA, "%lld steps in a row had a non-finite loss or gradient (iteration %lld): stopping",
					   (long long)skipped_row, (long long)tr.iteration);
				goto out;
			}
		} else {
			skipped_row = 0;
			if (!zero_dp) {
				/* the first change of the weights and moments: a pending save's copy first */
				double cw = copy_wait(&tr, step), ta = tr.timing ? mt_now() : 0, g0 = tr.tm[MT_T_PARAMS_ALL_GATHER];
				if (tr.timing)
					tr.tm[MT_T_OPTIMIZER] += cw;
				if (tr.b.ops->adamw_step(&tr.b, &tr.adam, lr, err))
					goto out;
				if (tr.timing) {
					double dt = mt_now() - ta;
					tr.tm[MT_T_OPTIMIZER] += dt;
					tr.tm[MT_T_OPTIMIZER_INNER] += dt - (tr.tm[MT_T_PARAMS_ALL_GATHER] - g0);
				}
			}
			loss_acc += loss;
			loss_n++;
		}
		tr.b.timers = NULL;
		tr.dp.timers = NULL;
		tr.tm_its += tr.timing;
		mt_sched_step(&tr.sched, gbs);
		r->last_loss = loss;
		{
			double valid = NAN, now = mt_now();
			int at_log = a->log_interval > 0 && tr.iteration % a->log_interval == 0;
			if (a->eval_interval > 0 && a->eval_iters > 0 && tr.iteration % a->eval_interval == 0) {
				int e = evaluate(&tr, &valid, err);
				if (e < 0)
					goto out;
				if (e == 0) {
					r->last_valid_loss = valid;
					if (!a->quiet)
						mt_info("validation at iteration %lld | loss %.6f | ppl %.4f", (long long)tr.iteration,
							valid, exp(valid));
				}
			}
			double tmax[MT_T_N];
			int at_tb = tr.timing && tr.iteration % (a->tensorboard.interval > 0 ? a->tensorboard.interval : 1) == 0;
			if (at_tb) {
				/* seconds an iteration since the last write, the slowest rank's (Megatron's
				 * Timers.write); every rank takes part */
				for (int k = 0; k < MT_T_N; k++)
					tmax[k] = tr.tm_its > 0 ? tr.tm[k] / (double)tr.tm_its : 0;
				if (mt_dist_allreduce_f64(tr.d, tmax, MT_T_N, 1, "the timers", tr.iteration, err))
					goto out;
				memset(tr.tm, 0, sizeof(tr.tm));
				tr.tm_its = 0;
			}
			if (tr.have_tb) {
				struct mt_tblog_step ts = { tr.iteration, tr.consumed_train, gbs, gbs * L, bad, loss, lr, gnorm,
							    tr.b.ops->loss_scale ? tr.b.ops->loss_scale(&tr.b) : 1.0, valid,
							    mt_config_flops_per_token(&a->cfg) * (double)(gbs * L), tr.d->world,
							    (double)tr.b.ops->bytes(&tr.b), at_tb ? tmax : NULL };
				if (mt_tblog_step(&tr.tb, &ts, err))
					goto out;
			}
			if (tr.ppon && (at_log || !isnan(valid)) && pp_gather_stats(&tr, local, err))
				goto out;
			if (at_log || !isnan(valid)) {
				log_line(&tr, loss_n ? loss_acc / (double)loss_n : (bad ? NAN : loss), lr, gnorm,
					 (double)tokens_since / (now - tlog), now - t0, skipped, valid);
				loss_acc = 0;
				loss_n = 0;
				tokens_since = 0;
				tlog = now;
			}
		}
		{
			int sig = 0, stop;
			if (tr.d->world > 1 && tr.d->rank == a->hang_rank && tr.iteration == a->hang_step)
				for (;;)
					pause(); /* the test hook of a rank that hangs */
			/* a step boundary: every rank reports, and a signal to any stops all here */
			/* 2: a signal; 1: the time limit (clocks differ between ranks: agree on it too) */
			sig = mt_train_stop_requested ? 2 : a->exit_duration_mins > 0 && (mt_now() - t0) / 60 >= a->exit_duration_mins;
			if (mt_dist_agree(tr.d, tr.iteration, sig, &sig, err))
				goto out;
			stop = sig ||
				   (a->exit_interval > 0 && tr.iteration % a->exit_interval == 0);
			int at_save = a->save && ((a->save_interval > 0 && tr.iteration % a->save_interval == 0) ||
						  stop || tr.iteration == a->train_iters);
			/* an asynchronous save is committed at the first boundary all have finished */
			if (save_finish(&tr, stop != 0, err) < 0 || (at_save && save(&tr, err)))
				goto out;
			if (stop) {
				r->stopped_by_signal = sig == 2;
				if (!a->quiet)
					mt_info("stopping at iteration %lld (%s)", (long long)tr.iteration,
						sig == 2 ? "signal" : "exit interval or duration");
				break;
			}
		}
	}
	if (save_finish(&tr, 1, err) < 0)
		goto out;
	r->iteration = tr.iteration;
	r->skipped = skipped;
	rc = 0;
out:
	if (tr.sv) {
		/* a failed run: the writer stops before the buffers go; no commit */
		copy_wait(&tr, 0);
		if (tr.sv->threaded)
			pthread_join(tr.sv->th, NULL);
		if (rc && tr.sv->pending && tr.d->rank == 0 && !tr.sv->solo)
			mt_ckpt_abandon(tr.sv->tmpdir);
		saver_clear(tr.sv);
		pthread_mutex_destroy(&tr.sv->mu);
		pthread_cond_destroy(&tr.sv->cv);
		free(tr.sv);
	}
	if (tr.json)
		fclose(tr.json);
	if (tr.have_tb && mt_tblog_close(&tr.tb, rc ? NULL : err))
		rc = -1;
	if (tr.have_plan)
		mt_plan_free(&tr.plan);
	if (tr.have_dp)
		mt_dp_free(&tr.dp);
	/* the executor's buffers may be the backend's (a device transport): first */
	if (tr.have_exec)
		mt_pp_exec_free(&tr.exec);
	tr.have_exec = 0;
	if (tr.b.ops) {
		tr.b.failed = rc != 0;
		tr.b.ops->free(&tr.b);
	}
	free(tr.w), free(tr.m), free(tr.v), free(tr.buf), free(tr.tok), free(tr.tgt), free(tr.pre.tok), free(tr.pre.tgt), free(tr.lbuf);
	mt_params_free(&tr.t);
	if (tr.split)
		mt_params_free(&tr.lt_own);
	if (tr.tpon)
		mt_tpcomm_free(&tr.tpc);
	if (tr.have_mp)
		mt_tpcomm_free(&tr.mpc);
	if (tr.have_emb)
		mt_tpcomm_free(&tr.embc);
	if (tr.have_exec)
		mt_pp_exec_free(&tr.exec);
	mt_pp_sched_free(&tr.pps[0]);
	mt_pp_sched_free(&tr.pps[1]);
	return rc;
}
