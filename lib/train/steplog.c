/* steplog.c: what a training step reports (see trainer.h), after its update: the
 * validation loss when an evaluation is due, the phase timers (the slowest rank's) and the
 * scalars to TensorBoard, and the log line (human, and JSON lines with the tensor-parallel
 * traffic and each pipeline stage's bubble) when one is due. Not the step itself (step.c,
 * train.c). */
#include <math.h>
#include <string.h>

#include "base/log.h"
#include "train/trainer.h"

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

int mt_trainer_report(struct trainer *tr, const struct mt_trainer_step *s, struct mt_train_result *r,
		      struct mt_err *err)
{
	const struct mt_train_args *a = tr->a;
	int64_t L = a->cfg.seq_length, gbs = s->gbs;
	double valid = NAN, now = mt_now();
	int at_log = a->log_interval > 0 && tr->iteration % a->log_interval == 0;
	double tmax[MT_T_N];
	int at_tb;

	if (a->eval_interval > 0 && a->eval_iters > 0 && tr->iteration % a->eval_interval == 0) {
		int e = mt_trainer_evaluate(tr, &valid, err);
		if (e < 0)
			return -1;
		if (e == 0) {
			r->last_valid_loss = valid;
			if (!a->quiet)
				mt_info("validation at iteration %lld | loss %.6f | ppl %.4f", (long long)tr->iteration, valid,
					exp(valid));
		}
	}
	at_tb = tr->timing && tr->iteration % (a->tensorboard.interval > 0 ? a->tensorboard.interval : 1) == 0;
	if (at_tb) {
		/* seconds an iteration since the last write, the slowest rank's (Megatron's
		 * Timers.write); every rank takes part */
		for (int k = 0; k < MT_T_N; k++)
			tmax[k] = tr->tm_its > 0 ? tr->tm[k] / (double)tr->tm_its : 0;
		if (mt_dist_allreduce_f64(tr->d, tmax, MT_T_N, 1, "the timers", tr->iteration, err))
			return -1;
		memset(tr->tm, 0, sizeof(tr->tm));
		tr->tm_its = 0;
	}
	if (tr->have_tb) {
		struct mt_tblog_step ts = { tr->iteration, tr->consumed_train, gbs, gbs * L, s->bad, s->loss, tr->lr, tr->gnorm,
					    tr->b.ops->loss_scale ? tr->b.ops->loss_scale(&tr->b) : 1.0, valid,
					    mt_config_flops_per_token(&a->cfg) * (double)(gbs * L), tr->d->world,
					    (double)tr->b.ops->bytes(&tr->b), at_tb ? tmax : NULL };
		if (mt_tblog_step(&tr->tb, &ts, err))
			return -1;
	}
	if (tr->ppon && (at_log || !isnan(valid)) && pp_gather_stats(tr, s->local, err))
		return -1;
	if (at_log || !isnan(valid)) {
		log_line(tr, tr->loss_n ? tr->loss_acc / (double)tr->loss_n : (s->bad ? NAN : s->loss), tr->lr, tr->gnorm,
			 (double)tr->tokens_since / (now - tr->tlog), now - tr->t0, tr->skipped, valid);
		tr->loss_acc = 0;
		tr->loss_n = 0;
		tr->tokens_since = 0;
		tr->tlog = now;
	}
	return 0;
}
