/* setup.c: the stages of a training run before its step loop, and its teardown (see
 * trainer.h): the grid (the batch checks against the ranks, this rank's tensor-, data-
 * and pipeline-parallel groups, its part of the model and the logical table checkpoints
 * hold), the backend (the pipeline's ordered sums, the host buffers, the backend itself,
 * the data-parallel sums, the pipeline executor, the lines that describe the run, the
 * initial weights and the learning-rate schedule), the data (the plan, rank 0 first),
 * the logs (JSON lines, TensorBoard, the timers), and freeing all of it. The checkpoint
 * saver and loading are train.c's; the step's passes are step.c's. */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "train/trainer.h"

int mt_trainer_grid(struct trainer *tr, struct mt_err *err)
{
	const struct mt_train_args *a = tr->a;

	tr->d = a->dist;
	if (!tr->d) {
		tr->solo.world = tr->solo.local_world = tr->solo.tp = tr->solo.pp = tr->solo.dp = 1;
		tr->d = &tr->solo;
	}
	/* a step schedule's batches are checked once the consumed samples are known */
	if (a->micro_batch_size <= 0 || (!a->batch_steps.n && a->global_batch_size % a->micro_batch_size))
		return mt_err_set(err, MT_EXIT_USAGE, "--global-batch-size %lld must be a multiple of --micro-batch-size %lld",
				  (long long)a->global_batch_size, (long long)a->micro_batch_size);
	if (!a->batch_steps.n && a->global_batch_size % (a->micro_batch_size * tr->d->dp))
		return mt_err_set(err, MT_EXIT_USAGE,
				  "--global-batch-size %lld must be a multiple of --micro-batch-size %lld x %d data-parallel ranks",
				  (long long)a->global_batch_size, (long long)a->micro_batch_size, tr->d->dp);
	if (a->rampup[0] > 0 && (a->rampup[0] % (a->micro_batch_size * tr->d->dp) || a->rampup[1] % (a->micro_batch_size * tr->d->dp)))
		return mt_err_set(err, MT_EXIT_USAGE,
				  "--rampup-batch-size %lld %lld: start and increment must be multiples of --micro-batch-size %lld x %d "
				  "data-parallel ranks", (long long)a->rampup[0], (long long)a->rampup[1],
				  (long long)a->micro_batch_size, tr->d->dp);
	/* the most: a rampup only grows to the global batch; a step schedule may go anywhere */
	tr->micro = (a->batch_steps.n ? mt_batch_steps_max(&a->batch_steps) : a->global_batch_size) / a->micro_batch_size;
	tr->local = tr->micro / tr->d->dp;
	tr->dpd = tr->tpd = tr->ppd = tr->d;
	tr->lt = &tr->t;
	tr->lcfg = a->cfg;
	tr->ppon = tr->d->pp > 1;
	if (a->pipeline.size != tr->d->pp && (tr->ppon || a->pipeline.size > 1))
		return mt_err_set(err, MT_EXIT_USAGE, "%s: the layout has %d pipeline stages, the model's split %d", tr->d->where,
				  tr->d->pp, a->pipeline.size);
	if (tr->d->tp > 1 || tr->ppon) {
		/* tensor and pipeline parallelism: this rank's part of the model; the logical
		 * table for checkpoints, its vocabulary padded as this layout pads it (Megatron's
		 * multiple of divisible-by x TP: the padding rows train too, through the softmax,
		 * so a run resumes exactly only with its own) */
		const struct mt_pp_split whole = { 1, 1, 0, 0 };
		tr->tpd = mt_dist_group(tr->d, MT_GROUP_TP);
		tr->dpd = mt_dist_group(tr->d, MT_GROUP_DP);
		tr->ppd = mt_dist_group(tr->d, MT_GROUP_PP);
		tr->mpd = mt_dist_group(tr->d, MT_GROUP_MP);
		if (!tr->tpd || !tr->dpd || !tr->ppd || !tr->mpd)
			return mt_err_set(err, MT_EXIT_USAGE, "%s: no tensor-, data- or pipeline-parallel group (the layout was "
					  "not made)", tr->d->where);
		if (tr->d->tp > 1 && mt_tpcomm_init(&tr->tpc, tr->tpd, a->sequence_parallel, &tr->tp, err))
			return -1;
		tr->tpon = tr->d->tp > 1;
		tr->split = 1;
		if (mt_params_build_stage(&tr->t, &a->cfg, tr->d->tp, tr->d->tp_rank, a->sequence_parallel,
					  tr->ppon ? &a->pipeline : &whole, tr->d->pp_rank, err) ||
		    mt_params_build(&tr->lt_own, &tr->lcfg, err)) {
			if (tr->tpon)
				mt_tpcomm_free(&tr->tpc);
			mt_params_free(&tr->t);
			return -1;
		}
		tr->lt = &tr->lt_own;
	} else if (mt_params_build(&tr->t, &a->cfg, err)) {
		return -1;
	}
	return 0;
}

/* The pipeline's ordered sums over every model-parallel rank (the norm, the agreement on
 * non-finite gradients) and over the two copies of a tied embedding. */
static int pp_groups(struct trainer *tr, struct mt_err *err)
{
	if (mt_tpcomm_init(&tr->mpc, tr->mpd, 0, &tr->mp, err))
		return -1;
	tr->have_mp = 1;
	if (!tr->a->cfg.untie_embeddings_and_output_weights && (tr->t.first_stage || tr->t.last_stage)) {
		if (!(tr->embd = mt_dist_group(tr->d, MT_GROUP_EMB)))
			return mt_err_set(err, MT_EXIT_USAGE, "%s: no embedding group (the layout was not made)", tr->d->where);
		if (mt_tpcomm_init(&tr->embc, tr->embd, 0, &tr->emb, err))
			return -1;
		tr->have_emb = 1;
	}
	return 0;
}

/* The host copies of the weights and moments, a sample and the micro-batches' tokens
 * (two sets: one read ahead), and the losses of a step. */
static int buffers(struct trainer *tr, struct mt_err *err)
{
	const struct mt_train_args *a = tr->a;
	int64_t L = a->cfg.seq_length;

	tr->w = malloc((size_t)tr->t.total * sizeof(float));
	tr->m = calloc((size_t)tr->t.total, sizeof(float));
	tr->v = calloc((size_t)tr->t.total, sizeof(float));
	tr->buf = malloc((size_t)(L + 1) * sizeof(int32_t));
	tr->tok = malloc((size_t)(a->micro_batch_size * L) * sizeof(int32_t));
	tr->tgt = malloc((size_t)(a->micro_batch_size * L) * sizeof(int32_t));
	tr->pre.tok = malloc((size_t)(a->micro_batch_size * L) * sizeof(int32_t));
	tr->pre.tgt = malloc((size_t)(a->micro_batch_size * L) * sizeof(int32_t));
	tr->lbuf = malloc((size_t)tr->micro * 2 * sizeof(double));
	if (!tr->w || !tr->m || !tr->v || !tr->buf || !tr->tok || !tr->tgt || !tr->pre.tok || !tr->pre.tgt || !tr->lbuf)
		return mt_err_set(err, MT_EXIT_IO, "out of memory for %lld parameters", (long long)tr->t.total);
	return 0;
}

/* The backend's options from the run's, then the backend made for this rank's table. */
static int backend_init(struct trainer *tr, struct mt_err *err)
{
	const struct mt_train_args *a = tr->a;

	tr->b.ops = a->device_cuda ? &mt_backend_cuda : &mt_backend_cpu;
	tr->b.opt = a->backend;
	tr->b.opt.quiet = a->quiet;
	tr->b.overlap = mt_trainer_prefetch;
	tr->b.overlap_ctx = tr;
	/* a device backend reduces over the data-parallel group (the world without TP) */
	tr->b.opt.dist = tr->dpd;
	tr->b.opt.distributed_optimizer = a->distributed_optimizer;
	tr->b.opt.bucket_size = a->ddp_bucket_size;
	tr->b.opt.tp = tr->tpon ? &tr->tp : NULL;
	tr->b.opt.tp_dist = tr->tpon ? tr->tpd : NULL;
	tr->b.opt.tp_comm = a->tp_comm;
	tr->b.opt.label_smoothing = a->label_smoothing;
	tr->b.opt.mp = tr->ppon ? &tr->mp : NULL;
	tr->b.opt.split_backward = tr->ppon && a->pp_schedule == MT_PP_ZBH1;
	tr->b.opt.pp_comm = a->pp_comm;
	if (tr->ppon && (!tr->b.ops->stage_forward || !tr->b.ops->stage_backward || !tr->b.ops->stage_weight))
		return mt_err_set(err, MT_EXIT_USAGE, "--pipeline-model-parallel-size %d: the %s backend has no pipeline stages yet "
				  "(add --device cpu)", tr->d->pp, tr->b.ops->name);
	if (tr->b.ops->init(&tr->b, &a->cfg, &tr->t, (int)a->micro_batch_size, err))
		return -1;
	/* host buffers go through dp.c; a backend whose buffers live on a device reduces
	 * them itself (NCCL), bucketed under its backward pass */
	if (tr->b.ops->host_grads && tr->b.ops->host_grads(&tr->b)) {
		if (mt_dp_init(&tr->dp, tr->dpd, &tr->t, a->distributed_optimizer, err))
			return -1;
		tr->dp.tp = tr->ppon ? &tr->mp : tr->tpon ? &tr->tp : NULL;
		tr->have_dp = 1;
	} else if (tr->have_emb && !tr->b.ops->tie_grads) {
		return mt_err_set(err, MT_EXIT_USAGE, "--pipeline-model-parallel-size %d: the %s backend cannot sum the tied "
				  "embedding's copies (add --untie-embeddings-and-output-weights)", tr->d->pp, tr->b.ops->name);
	}
	return 0;
}

/* The pipeline executor over the stage's activations, a device backend's transport, and
 * every batch size the run will see checked against the schedule. */
static int executor(struct trainer *tr, struct mt_err *err)
{
	const struct mt_train_args *a = tr->a;
	/* the activations a stage sends: [rows][hidden], a sequence shard's rows with SP */
	int64_t rows = a->micro_batch_size * a->cfg.seq_length / (tr->tpon && a->sequence_parallel ? tr->d->tp : 1);

	if (mt_pp_exec_init(&tr->exec, tr->ppd, a->pipeline.vp, rows * a->cfg.hidden_size, err))
		return -1;
	tr->have_exec = 1;
	if (tr->b.ops->pp_transport) {
		/* a device backend's own transport between the stages (NCCL), if it has one */
		const struct mt_pp_transport *ptr;
		size_t eb;
		if (tr->b.ops->pp_transport(&tr->b, tr->ppd, &ptr, &eb, err))
			return -1;
		mt_pp_exec_set_transport(&tr->exec, ptr, eb);
	}
	/* every batch size the run will see must suit the schedule: refused now, not
	 * at the step where a rampup reaches it */
	for (int64_t gb = a->rampup[0] > 0 ? a->rampup[0] : a->global_batch_size; !a->batch_steps.n;
	     gb += a->rampup[0] > 0 ? a->rampup[1] : 0) {
		int64_t m = gb / (a->micro_batch_size * tr->d->dp);
		if (mt_pp_sched_check(a->pp_schedule, tr->d->pp, a->pipeline.vp, (int)m, a->pp_group, err))
			return -1;
		if (gb >= a->global_batch_size || a->rampup[1] <= 0)
			break;
	}
	return 0;
}

/* The lines that describe the run: its ranks, its pipeline and its model. */
static void describe(const struct trainer *tr)
{
	const struct mt_train_args *a = tr->a;
	int64_t L = a->cfg.seq_length, local = tr->local;

	if (!a->quiet && tr->d->world > 1)
		mt_info("%d ranks: data-parallel %d x tensor %d x pipeline %d; %lld micro-batches of %lld per rank and step%s%s",
			tr->d->world, tr->d->dp, tr->d->tp, tr->d->pp, (long long)local, (long long)a->micro_batch_size,
			a->distributed_optimizer ? "; distributed optimizer (ZeRO-1)" : "",
			tr->tpon && a->sequence_parallel ? "; sequence parallel" : "");
	if (!a->quiet && tr->ppon)
		mt_info("pipeline: %d stages of %d model chunk(s), schedule %s, %lld micro-batches a step; stage 0 holds "
			"the embeddings and layers %d..%d, the last stage the loss", tr->d->pp, a->pipeline.vp,
			mt_pp_kind_name(a->pp_schedule), (long long)local, tr->t.chunk_layers[0], tr->t.chunk_layers[1] - 1);
	if (!a->quiet)
		mt_info("model: %lld parameters%s; backend %s holds %.1f MB (weights, gradients, AdamW state and the "
			"activations of a micro-batch of %lld x %lld)",
			(long long)tr->t.total, tr->split ? " on rank 0" : "", tr->b.ops->name, tr->b.ops->bytes(&tr->b) / 1e6, (long long)a->micro_batch_size,
			(long long)L);
}

int mt_trainer_backend(struct trainer *tr, struct mt_err *err)
{
	const struct mt_train_args *a = tr->a;

	if (tr->ppon && pp_groups(tr, err))
		return -1;
	if (buffers(tr, err) || backend_init(tr, err))
		return -1;
	if (tr->ppon && executor(tr, err))
		return -1;
	describe(tr);
	if (tr->split)
		mt_params_init_shard(&tr->t, tr->w, a->seed); /* the part of the one-rank model */
	else
		mt_params_init(&tr->t, tr->w, a->seed);
	if (tr->b.ops->load_state(&tr->b, tr->w, NULL, NULL, err))
		return -1;
	tr->adam = a->adam;
	if (mt_sched_init_iters(&tr->sched, &a->sched, err))
		return -1;
	if (a->lr_decay_samples > 0) {
		/* Megatron's sample-based schedule: steps are samples, given as such */
		tr->sched.lr_decay_steps = a->lr_decay_samples;
		tr->sched.wd_incr_steps = a->train_samples;
		tr->sched.lr_warmup_steps = a->sched.lr_warmup_fraction >= 0
						    ? a->sched.lr_warmup_fraction * (double)a->lr_decay_samples
						    : (double)a->lr_warmup_samples;
		if (mt_sched_validate(&tr->sched, err))
			return -1;
	}
	return 0;
}

int mt_trainer_data(struct trainer *tr, struct mt_err *err)
{
	const struct mt_train_args *a = tr->a;
	double t = tr->d->timeout;
	int bad;

	if (a->mock_data)
		return 0;
	/* rank 0 writes the index caches; the others read them after it */
	if (tr->d->rank == 0 && mt_plan_make(a->data, MT_PLAN_WRITE | MT_PLAN_KEEP, &tr->plan, err))
		return -1;
	/* building a large blend's indices can take minutes: at least an hour here */
	if (t > 0 && t < 3600)
		tr->d->timeout = 3600;
	bad = mt_dist_barrier(tr->d, "waiting for rank 0's data plan", 0, err);
	tr->d->timeout = t;
	if (bad)
		return -1;
	if (tr->d->rank != 0 && mt_plan_make(a->data, MT_PLAN_KEEP, &tr->plan, err))
		return -1;
	tr->have_plan = 1;
	if (!tr->plan.split[MT_SPLIT_TRAIN].present)
		return mt_err_set(err, MT_EXIT_DATA, "the data path gives the train split no samples");
	return 0;
}

int mt_trainer_logs(struct trainer *tr, struct mt_err *err)
{
	const struct mt_train_args *a = tr->a;

	if (a->log_json && tr->d->rank == 0) {
		tr->json = fopen(a->log_json, "a");
		if (!tr->json)
			return mt_err_errno(err, MT_EXIT_IO, "cannot open '%s'", a->log_json);
	}
	if (a->tensorboard.dir && tr->d->rank == 0) {
		if (mt_tblog_open(&tr->tb, &a->tensorboard, err))
			return -1;
		tr->have_tb = 1;
	}
	/* every rank times, so that the write can take the maximum over them (Megatron's) */
	tr->timing = a->tensorboard.dir && a->tensorboard.timers;
	return 0;
}

int mt_trainer_free(struct trainer *tr, int rc, struct mt_err *err)
{
	if (tr->json)
		fclose(tr->json);
	if (tr->have_tb && mt_tblog_close(&tr->tb, rc ? NULL : err))
		rc = -1;
	if (tr->have_plan)
		mt_plan_free(&tr->plan);
	if (tr->have_dp)
		mt_dp_free(&tr->dp);
	/* the executor's buffers may be the backend's (a device transport): first */
	if (tr->have_exec)
		mt_pp_exec_free(&tr->exec);
	tr->have_exec = 0;
	if (tr->b.ops) {
		tr->b.failed = rc != 0;
		tr->b.ops->free(&tr->b);
	}
	free(tr->w), free(tr->m), free(tr->v), free(tr->buf), free(tr->tok), free(tr->tgt), free(tr->pre.tok), free(tr->pre.tgt), free(tr->lbuf);
	mt_params_free(&tr->t);
	if (tr->split)
		mt_params_free(&tr->lt_own);
	if (tr->tpon)
		mt_tpcomm_free(&tr->tpc);
	if (tr->have_mp)
		mt_tpcomm_free(&tr->mpc);
	if (tr->have_emb)
		mt_tpcomm_free(&tr->embc);
	if (tr->have_exec)
		mt_pp_exec_free(&tr->exec);
	mt_pp_sched_free(&tr->pps[0]);
	mt_pp_sched_free(&tr->pps[1]);
	return rc;
}
