/* step.c: one training step's forward and backward passes (see trainer.h): the global
 * batch of the step, this rank's micro-batches and their samples (read ahead while the
 * device computes), one after another or, with pipeline parallelism, a stage's schedule
 * (parallel/ppsched.h) run by the executor (parallel/pipeline.h) over the backend's stage
 * passes, the tied embedding's copies summed, and the losses of every rank gathered in
 * global order. Not the update (train.c) nor what a step reports (steplog.c). */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "base/mix.h"
#include "train/estimate.h"
#include "train/trainer.h"

/* The global batch of the next iteration (Megatron's step schedule or rampup, else
 * --global-batch-size): from the samples consumed, which checkpoints keep, so a resumed
 * run goes on with the batch it would have had. */
int64_t mt_trainer_batch_now(const struct trainer *tr)
{
	if (tr->a->batch_steps.n)
		return mt_batch_steps_batch(&tr->a->batch_steps, tr->a->cfg.seq_length, tr->consumed_train);
	return mt_rampup_batch(tr->a->rampup, tr->a->global_batch_size, tr->consumed_train);
}

/* A step schedule from the samples consumed on: every batch still to come divides among
 * the ranks and suits the pipeline schedule (refused now, not at the step that reaches
 * it). */
int mt_trainer_check_batch_steps(struct trainer *tr, struct mt_err *err)
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
int64_t mt_trainer_first_sample(const struct trainer *tr, int64_t consumed, int64_t k)
{
	return consumed + (k * tr->d->dp + tr->d->dp_rank) * tr->a->micro_batch_size;
}

/* Gather the (summed loss, counted targets) pairs of every rank's n micro-batches into
 * lbuf and return both sums, in global micro-batch order: the loss logged is their
 * quotient, a token-weighted mean over the global batch (Megatron's). */
int mt_trainer_gather_losses(struct trainer *tr, int64_t n, double *sum, double *count, int64_t step,
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
int mt_trainer_fetch(struct trainer *tr, int split, int64_t first, struct mt_err *err)
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
void mt_trainer_prefetch(void *ctx)
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
		if (mt_trainer_fetch(tr, tr->pp_data_split, mt_trainer_first_sample(tr, tr->pp_consumed, mb), &tr->pp_err))
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
int mt_trainer_pp_run(struct trainer *tr, int64_t n, int data_split, int64_t consumed, int eval, int64_t step,
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
/* A step through the pipeline: the stage's schedule (every micro-batch's gradient added
 * in the backend), the tied embedding's two copies summed, then the data-parallel sum of
 * the whole step's gradient in rank order; the executor's clocks and counters kept. */
static int pp_step(struct trainer *tr, const struct mt_trainer_step *s, struct mt_err *err)
{
	const struct mt_train_args *a = tr->a;
	double ts = mt_now();

	tr->b.ops->zero_grad(&tr->b);
	if (tr->d->world > 1 && tr->d->rank == a->hang_rank && s->step == a->hang_step && a->hang_backward)
		for (;;)
			pause(); /* the test hook of a stage that stops in its schedule */
	mt_pp_exec_reset_stats(&tr->exec);
	if (mt_trainer_pp_run(tr, s->local, MT_SPLIT_TRAIN, tr->consumed_train, 0, s->step, err))
		return -1;
	if (tr->timing) {
		/* the executor's clocks: the passes, and its waits for each kind of transfer */
		const struct mt_pp_stats *st = &tr->exec.st;
		tr->tm[MT_T_FORWARD_COMPUTE] += st->compute[MT_PP_T_FWD];
		tr->tm[MT_T_BACKWARD_COMPUTE] += st->compute[MT_PP_T_BWD] + st->compute[MT_PP_T_BWD_INPUT] +
						 st->compute[MT_PP_T_BWD_WEIGHT];
		tr->tm[MT_T_FORWARD_RECV] += st->wait_kind[0];
		tr->tm[MT_T_FORWARD_SEND] += st->wait_kind[1];
		tr->tm[MT_T_BACKWARD_RECV] += st->wait_kind[2];
		tr->tm[MT_T_BACKWARD_SEND] += st->wait_kind[3];
	}
	for (int k = 0; k < MT_PP_T_NKINDS; k++) {
		tr->pp_stat[0] += tr->exec.st.compute[k];
		tr->pp_stat[2 + k] += tr->exec.st.compute[k];
		tr->pp_stat[6 + k] += (double)tr->exec.st.passes[k];
	}
	tr->pp_stat[1] += mt_now() - ts;
	tr->pp_stat[10] += (double)tr->exec.st.bytes_sent;
	tr->pp_steps++;
	if (tr->have_emb) {
		double te = tr->timing ? mt_now() : 0;
		if (tie_embeddings(tr, s->step, err))
			return -1;
		mt_timer_add(tr->b.timers, MT_T_EMBEDDING_GRADS, te);
	}
	/* a device backend reduces over the data-parallel group in grad_prepare */
	if (tr->have_dp && mt_dp_accumulate(&tr->dp, tr->b.ops->host_grads(&tr->b), s->step, err))
		return -1;
	return 0;
}

/* A step without a pipeline: this rank's micro-batches one after another, each one's loss
 * into lbuf, each one's gradient added to the step's sum (dp.c) or by the backend. */
static int micro_steps(struct trainer *tr, const struct mt_trainer_step *s, struct mt_err *err)
{
	const struct mt_train_args *a = tr->a;
	int64_t L = a->cfg.seq_length, local = s->local, step = s->step, gbs = s->gbs, cnt;

	for (int64_t k = 0; k < local; k++) {
		double tf = tr->timing ? mt_now() : 0;
		if (mt_trainer_fetch(tr, MT_SPLIT_TRAIN, mt_trainer_first_sample(tr, tr->consumed_train, k), err))
			return -1;
		mt_timer_add(tr->b.timers, MT_T_BATCH_GENERATOR, tf);
		if (tr->have_dp)
			tr->b.ops->zero_grad(&tr->b);
		if (tr->d->world > 1 && tr->d->rank == a->hang_rank && step == a->hang_step && a->hang_backward &&
		    k == local - 1)
			for (;;)
				pause(); /* the test hook of a rank that hangs before its reduction */
		/* the last micro-batch's backward pass starts a device backend's reduction */
		cnt = 0;
		for (int64_t q = 0; q < a->micro_batch_size * L; q++)
			cnt += tr->tgt[q] >= 0;
		/* the next micro-batch is read while the device runs this one: this step's
		 * next, or the next step's first (after an evaluation in between, which
		 * fetches other samples, fetch reads it anew) */
		if (k + 1 < local || step < a->train_iters) {
			tr->pre.split = MT_SPLIT_TRAIN;
			tr->pre.first = k + 1 < local ? mt_trainer_first_sample(tr, tr->consumed_train, k + 1)
						      : mt_trainer_first_sample(tr, tr->consumed_train + gbs, 0);
			tr->pre.want = 1;
		}
		tr->lbuf[2 * k] = tr->b.ops->step_micro(&tr->b, tr->tok, tr->tgt, k == local - 1 ? MT_BACKWARD_LAST : 1) *
				  (double)cnt;
		tr->lbuf[2 * k + 1] = (double)cnt;
		if (tr->have_dp && mt_dp_accumulate(&tr->dp, tr->b.ops->host_grads(&tr->b), step, err))
			return -1;
	}
	return 0;
}

int mt_trainer_forward_backward(struct trainer *tr, struct mt_trainer_step *s, struct mt_err *err)
{
	const struct mt_train_args *a = tr->a;

	memset(s, 0, sizeof(*s));
	s->step = tr->iteration + 1;
	s->gbs = mt_trainer_batch_now(tr);
	s->zero_dp = a->distributed_optimizer && tr->have_dp;
	s->micro = s->gbs / a->micro_batch_size;
	s->local = s->micro / tr->d->dp;
	tr->b.step = s->step;
	tr->tpc.step = s->step;
	tr->mpc.step = s->step;
	if (tr->timing) {
		tr->b.timers = tr->tm;
		tr->dp.timers = tr->have_dp ? tr->tm : NULL;
		s->t_fb = mt_now();
	}

	/* each micro-batch's gradient alone, then added to the step's sum in the global
	 * micro-batch order (dp.h): the same arithmetic for one rank or many */
	if (tr->have_dp)
		mt_dp_begin(&tr->dp);
	else
		tr->b.ops->zero_grad(&tr->b); /* the backend sums the micro-batches itself */
	if (tr->ppon ? pp_step(tr, s, err) : micro_steps(tr, s, err))
		return -1;
	/* a device backend reduces on its own streams: first a heartbeat, so that rank
	 * 0 names a rank that did not finish its backward pass (dp.c has its own) */
	if (!tr->have_dp && tr->d->world > 1) {
		int x;
		if (mt_dist_agree(tr->d, s->step, 0, &x, err))
			return -1;
	}
	if (mt_trainer_gather_losses(tr, s->local, &s->loss, &s->tokens, s->step, err))
		return -1;
	mt_timer_add(tr->b.timers, MT_T_FORWARD_BACKWARD, s->t_fb);
	return 0;
}
