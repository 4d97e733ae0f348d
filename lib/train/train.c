/* train.c: a training run (see train.h) and its step loop: the stages in order (setup.c
 * makes and frees them), each step's forward and backward passes (step.c), its update,
 * its report (steplog.c) and its boundary (signals, the time limit, saves); evaluation;
 * checkpoints, saved (atomically, in the background with --async-save) and loaded. The
 * state of the run is struct trainer (trainer.h). */
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
#include "train/trainer.h"

volatile sig_atomic_t mt_train_stop_requested;

/* The validation loss: --eval-iters batches of the valid split, from where the last
 * evaluation stopped (1: no valid split to evaluate on). */
int mt_trainer_evaluate(struct trainer *tr, double *loss, struct mt_err *err)
{
	const struct mt_train_args *a = tr->a;
	double sum = 0, n = 0;
	int64_t gbs = mt_trainer_batch_now(tr), local = gbs / (a->micro_batch_size * tr->d->dp);

	if (!a->mock_data && !tr->plan.split[MT_SPLIT_VALID].present)
		return 1; /* nothing to evaluate on */
	for (int64_t it = 0; it < a->eval_iters; it++) {
		double s, c;
		if (tr->ppon && mt_trainer_pp_run(tr, local, MT_SPLIT_VALID, tr->consumed_valid, 1, tr->iteration, err))
			return -1;
		for (int64_t k = 0; !tr->ppon && k < local; k++) {
			int64_t cnt = 0;
			if (mt_trainer_fetch(tr, MT_SPLIT_VALID, mt_trainer_first_sample(tr, tr->consumed_valid, k), err))
				return -1;
			for (int64_t q = 0; q < a->micro_batch_size * a->cfg.seq_length; q++)
				cnt += tr->tgt[q] >= 0;
			tr->lbuf[2 * k] = tr->b.ops->step_micro(&tr->b, tr->tok, tr->tgt, 0) * (double)cnt;
			tr->lbuf[2 * k + 1] = (double)cnt;
		}
		tr->consumed_valid += gbs;
		if (mt_trainer_gather_losses(tr, local, &s, &c, tr->iteration, err))
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

/* A step's update: the loss the mean over the tokens, the gradient clipped (its norm
 * before clipping, as Megatron logs it) and the weights moved by AdamW unless the loss or
 * the gradient is not finite (the step skipped, or the run stopped: Megatron's
 * --check-for-nan-in-loss-and-grad); the samples consumed and the schedule advanced. */
static int step_update(struct trainer *tr, struct mt_trainer_step *s, struct mt_train_result *r, struct mt_err *err)
{
	const struct mt_train_args *a = tr->a;
	int64_t step = s->step, gbs = s->gbs;
	double loss;

	if (tr->timing) {
		s->t_op = mt_now();
		s->sync0 = tr->tm[MT_T_ALL_GRADS_SYNC];
	}
	loss = s->loss = s->tokens > 0 ? s->loss / s->tokens : 0;
	/* the mean over micro-batches; the norm before clipping, as Megatron logs it */
	tr->lr = mt_sched_lr(&tr->sched);
	tr->adam.weight_decay = mt_sched_wd(&tr->sched);
	if (s->zero_dp) {
		if (mt_dp_zero_clip(&tr->dp, 1.0f / (float)s->micro, a->clip_grad, &tr->gnorm, &s->nonfinite, step, err))
			return -1;
		/* the first change of the weights and moments: a pending save's copy first */
		if (!s->nonfinite && isfinite(loss)) {
			copy_wait(tr, step);
			if (mt_dp_zero_update(&tr->dp, tr->b.ops->host_weights(&tr->b), &tr->adam, tr->lr, step, err))
				return -1;
		}
	} else {
		if (tr->have_dp && mt_dp_allgather_grads(&tr->dp, tr->b.ops->host_grads(&tr->b), step, err))
			return -1;
		if (tr->b.ops->grad_prepare(&tr->b, 1.0f / (float)s->micro, a->clip_grad, &tr->gnorm, &s->nonfinite, err))
			return -1;
	}
	if (tr->timing) {
		/* the gradient sum finished here (a device backend's wait, the replicated
		 * optimizer's gather) is forward-backward's, as Megatron's finalize_model_grads
		 * is; the rest is the optimizer's (ZeRO's clip and update timed by dp.c) */
		double synced = tr->tm[MT_T_ALL_GRADS_SYNC] - s->sync0, dt = mt_now() - s->t_op - synced;
		tr->tm[MT_T_FORWARD_BACKWARD] += synced;
		tr->tm[MT_T_OPTIMIZER] += dt;
		if (!s->zero_dp)
			tr->tm[MT_T_OPTIMIZER_CLIP] += dt;
	}
	tr->consumed_train += gbs;
	tr->iteration++;
	tr->tokens_since += gbs * a->cfg.seq_length;
	/* Megatron's --check-for-nan-in-loss-and-grad (fp16 overflows excepted: the loss
	 * scale handles them) */
	if ((!isfinite(loss) || (s->nonfinite && s->nonfinite != MT_GRAD_OVERFLOW)) && !a->skip_nonfinite_loss)
		return mt_err_set(err, MT_EXIT_DATA, "iteration %lld: the %s is %s: stopping (--no-check-for-nan-in-loss-and-grad "
				  "skips such steps instead)", (long long)tr->iteration, isfinite(loss) ? "gradient" : "loss",
				  isfinite(loss) ? "not finite" : isnan(loss) ? "nan" : "inf");
	if (!isfinite(loss) || s->nonfinite) {
		s->bad = 1;
		tr->skipped++;
		/* fp16 overflows lower the loss scale: routine, not divergence */
		if (s->nonfinite != MT_GRAD_OVERFLOW && ++tr->skipped_row > a->max_skipped_steps)
			return mt_err_set(err, MT_EXIT_DATA, "%lld steps in a row had a non-finite loss or gradient (iteration %lld): stopping",
					  (long long)tr->skipped_row, (long long)tr->iteration);
	} else {
		tr->skipped_row = 0;
		if (!s->zero_dp) {
			/* the first change of the weights and moments: a pending save's copy first */
			double cw = copy_wait(tr, step), ta = tr->timing ? mt_now() : 0, g0 = tr->tm[MT_T_PARAMS_ALL_GATHER];
			if (tr->timing)
				tr->tm[MT_T_OPTIMIZER] += cw;
			if (tr->b.ops->adamw_step(&tr->b, &tr->adam, tr->lr, err))
				return -1;
			if (tr->timing) {
				double dt = mt_now() - ta;
				tr->tm[MT_T_OPTIMIZER] += dt;
				tr->tm[MT_T_OPTIMIZER_INNER] += dt - (tr->tm[MT_T_PARAMS_ALL_GATHER] - g0);
			}
		}
		tr->loss_acc += loss;
		tr->loss_n++;
	}
	tr->b.timers = NULL;
	tr->dp.timers = NULL;
	tr->tm_its += tr->timing;
	mt_sched_step(&tr->sched, gbs);
	r->last_loss = loss;
	return 0;
}

/* A step boundary: every rank reports, and a signal to any (or the time limit, or the
 * exit interval) stops all here after a save; the saves that are due. *stop: the loop
 * ends. */
static int step_boundary(struct trainer *tr, struct mt_train_result *r, int *stop, struct mt_err *err)
{
	const struct mt_train_args *a = tr->a;
	int sig = 0, at_save;

	if (tr->d->world > 1 && tr->d->rank == a->hang_rank && tr->iteration == a->hang_step)
		for (;;)
			pause(); /* the test hook of a rank that hangs */
	/* a step boundary: every rank reports, and a signal to any stops all here */
	/* 2: a signal; 1: the time limit (clocks differ between ranks: agree on it too) */
	sig = mt_train_stop_requested ? 2 : a->exit_duration_mins > 0 && (mt_now() - tr->t0) / 60 >= a->exit_duration_mins;
	if (mt_dist_agree(tr->d, tr->iteration, sig, &sig, err))
		return -1;
	*stop = sig || (a->exit_interval > 0 && tr->iteration % a->exit_interval == 0);
	at_save = a->save && ((a->save_interval > 0 && tr->iteration % a->save_interval == 0) || *stop ||
			      tr->iteration == a->train_iters);
	/* an asynchronous save is committed at the first boundary all have finished */
	if (save_finish(tr, *stop != 0, err) < 0 || (at_save && save(tr, err)))
		return -1;
	if (*stop) {
		r->stopped_by_signal = sig == 2;
		if (!a->quiet)
			mt_info("stopping at iteration %lld (%s)", (long long)tr->iteration,
				sig == 2 ? "signal" : "exit interval or duration");
	}
	return 0;
}

/* The step loop: forward and backward passes (step.c), the update, the report
 * (steplog.c) and the boundary, until the iterations are done or a stop; then the last
 * save committed. */
static int train_loop(struct trainer *tr, struct mt_train_result *r, struct mt_err *err)
{
	while (tr->iteration < tr->a->train_iters) {
		struct mt_trainer_step s;
		int stop = 0;

		if (mt_trainer_forward_backward(tr, &s, err) || step_update(tr, &s, r, err) ||
		    mt_trainer_report(tr, &s, r, err) || step_boundary(tr, r, &stop, err))
			return -1;
		if (stop)
			break;
	}
	if (save_finish(tr, 1, err) < 0)
		return -1;
	r->iteration = tr->iteration;
	r->skipped = tr->skipped;
	return 0;
}

/* The stages in order: the grid, the backend, the data, a checkpoint to resume from, the
 * logs, the step loop; then the teardown (a pending save's writer first). */
int mt_train_run(const struct mt_train_args *a, struct mt_train_result *r, struct mt_err *err)
{
	struct trainer tr;
	double t0 = mt_now();
	int rc = -1;

	memset(&tr, 0, sizeof(tr));
	memset(r, 0, sizeof(*r));
	tr.a = a;
	tr.t0 = tr.tlog = t0;
	if (mt_trainer_grid(&tr, err))
		return -1; /* it freed what it made */
	if (mt_trainer_backend(&tr, err) || mt_trainer_data(&tr, err))
		goto out;
	if (a->load && load(&tr, err))
		goto out;
	if (a->batch_steps.n && mt_trainer_check_batch_steps(&tr, err))
		goto out;
	if (mt_trainer_logs(&tr, err) || train_loop(&tr, r, err))
		goto out;
	rc = 0;
out:
	if (tr.sv) {
		/* a failed run: the writer stops before the buffers go; no commit */
		copy_wait(&tr, 0);
		if (tr.sv->threaded)
			pthread_join(tr.sv->th, NULL);
		if (rc && tr.sv->pending && !tr.sv->solo)
			mt_ckpt_txn_abandon(&tr.sv->txn);
		saver_clear(tr.sv);
		pthread_mutex_destroy(&tr.sv->mu);
		pthread_cond_destroy(&tr.sv->cv);
		free(tr.sv);
	}
	return mt_trainer_free(&tr, rc, err);
}
