/* estimate.c: the dry-run arithmetic (see estimate.h). */
#include "train/estimate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "parallel/dist.h"
#include "parallel/ppsched.h"
#include "model/params.h"

int64_t mt_rampup_batch(const int64_t rampup[3], int64_t gbs, int64_t consumed)
{
	int64_t inc, b;
	double per;

	if (rampup[0] <= 0 || consumed > rampup[2])
		return gbs;
	inc = (gbs - rampup[0]) / rampup[1];
	if (inc <= 0)
		return gbs;
	per = (double)rampup[2] / (double)inc;
	b = rampup[0] + (int64_t)((double)consumed / per) * rampup[1];
	return b < gbs ? b : gbs;
}

int64_t mt_rampup_train_iters(const int64_t rampup[3], int64_t gbs, int64_t train_samples)
{
	int64_t it = 0, consumed = 0;

	if (rampup[0] <= 0)
		return train_samples / gbs;
	while (consumed <= rampup[2] && consumed <= train_samples) {
		consumed += mt_rampup_batch(rampup, gbs, consumed);
		it++;
	}
	if (train_samples > consumed)
		it += (train_samples - consumed) / gbs;
	return it;
}

double mt_estimate_act_layer(double s, double b, double h, double a, int t, int sp, enum mt_recompute recompute,
			     const char **formula)
{
	double sbh = s * b * h, attn = 5 * a * s / (h * t);
	const char *f;
	double bytes;

	sp = sp && t > 1;
	if (recompute == MT_RECOMPUTE_FULL) {
		f = sp ? "full recompute, sequence parallel: 2*s*b*h/t" : "full recompute: 2*s*b*h";
		bytes = 2 * sbh / (sp ? t : 1);
	} else if (recompute == MT_RECOMPUTE_SELECTIVE) {
		f = sp ? "selective recompute, sequence parallel: s*b*h*34/t"
		       : t > 1 ? "selective recompute, tensor parallel: s*b*h*(10 + 24/t)" : "selective recompute: s*b*h*34";
		bytes = sbh * (sp ? 34.0 / t : 10 + 24.0 / t);
	} else if (sp) {
		f = "tensor + sequence parallel: s*b*h*(34/t + 5*a*s/(h*t))";
		bytes = sbh * (34.0 / t + attn);
	} else if (t > 1) {
		f = "tensor parallel: s*b*h*(10 + 24/t + 5*a*s/(h*t))";
		bytes = sbh * (10 + 24.0 / t + attn);
	} else {
		f = "no parallelism: s*b*h*(34 + 5*a*s/h)";
		bytes = sbh * (34 + attn);
	}
	if (formula)
		*formula = f;
	return bytes;
}

int mt_estimate(const struct mt_estimate_args *a, struct mt_estimate *e, struct mt_err *err)
{
	const struct mt_config *c = a->cfg;
	int64_t md = a->micro_batch_size * a->dp, v = c->padded_vocab_size;
	double s = c->seq_length, b = (double)a->micro_batch_size, t = a->tp;
	struct mt_params tab;
	struct mt_pp_split split = a->pipeline;
	int flash;

	memset(e, 0, sizeof(*e));
	split.size = a->pp;
	if (split.vp < 1)
		split.vp = 1;

	if (a->global_batch_size % md)
		return mt_err_set(err, MT_EXIT_USAGE,
				  "--global-batch-size %lld is not a multiple of --micro-batch-size %lld x %d data-parallel ranks",
				  (long long)a->global_batch_size, (long long)a->micro_batch_size, a->dp);
	if (mt_pp_split_check(c, &split, err))
		return -1;
	e->ramp_increments = e->ramp_samples_per_increment = 0;
	if (a->rampup[0] > 0) {
		if (a->rampup[1] <= 0 || a->rampup[2] <= 0 || a->rampup[0] > a->global_batch_size ||
		    (a->global_batch_size - a->rampup[0]) % a->rampup[1])
			return mt_err_set(err, MT_EXIT_USAGE,
					  "--rampup-batch-size %lld %lld %lld: the increment must divide global batch - start",
					  (long long)a->rampup[0], (long long)a->rampup[1], (long long)a->rampup[2]);
		if (a->rampup[0] % md || a->rampup[1] % md)
			return mt_err_set(err, MT_EXIT_USAGE,
					  "--rampup-batch-size %lld %lld %lld: start and increment must be multiples of "
					  "micro-batch x data-parallel size %lld", (long long)a->rampup[0], (long long)a->rampup[1],
					  (long long)a->rampup[2], (long long)md);
		e->ramp_increments = (a->global_batch_size - a->rampup[0]) / a->rampup[1];
		e->ramp_samples_per_increment = e->ramp_increments ? a->rampup[2] / e->ramp_increments : 0;
	}
	e->params = mt_config_num_params(c);
	flash = a->cuda_backend && a->recompute != MT_RECOMPUTE_FULL;
	e->act_layer = mt_estimate_act_layer(s, b, c->hidden_size, c->num_attention_heads, a->tp, a->sequence_parallel,
					     flash ? MT_RECOMPUTE_SELECTIVE : a->recompute, &e->act_formula);
	if (flash) {
		/* the same bytes as selective recompute: nothing of s x s is kept to recompute;
		 * with SP the CUDA backend keeps the two norms' outputs gathered (all s rows,
		 * 2 bytes each) for the weight gradients instead of gathering them again */
		e->act_formula = a->sequence_parallel && a->tp > 1
					 ? "flash attention, sequence parallel, the norms' outputs kept gathered: "
					   "s*b*h*(34/t + 4*(t-1)/t)"
				 : a->tp > 1 ? "flash attention, tensor parallel: s*b*h*(10 + 24/t)"
					     : "flash attention: s*b*h*34";
		if (a->sequence_parallel && a->tp > 1)
			e->act_layer += s * b * c->hidden_size * 4.0 * (t - 1) / t;
	}
	e->act_layer *= a->param_bytes == 4 ? 2 : 1;
	e->grad_accum = a->global_batch_size / md;
	if (a->pp > 1 && mt_pp_sched_check((enum mt_pp_kind)a->pp_schedule, a->pp, split.vp, (int)e->grad_accum,
					   a->pp_group, err))
		return -1;
	e->stages = calloc((size_t)a->pp, sizeof(*e->stages));
	if (!e->stages)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	e->nstages = a->pp;
	for (int r = 0; r < a->pp; r++) {
		struct mt_estimate_stage *st = &e->stages[r];
		struct mt_pp_sched sc;
		double live = 0, peak = 0, msg = s * b * c->hidden_size / (a->sequence_parallel && a->tp > 1 ? t : 1) *
					       (a->param_bytes == 4 ? 4 : 2);
		int lmax = 0;
		/* the stage's parameters on tensor-parallel rank 0: shards and whole replicas */
		if (mt_params_build_stage(&tab, c, a->tp, 0, a->sequence_parallel, &split, r, err)) {
			mt_estimate_free(e);
			return -1;
		}
		st->params = 0;
		for (int i = 0; i < tab.n; i++)
			st->params += tab.p[i].numel;
		st->layer_lo = tab.chunk_layers[0];
		st->layer_hi = tab.chunk_layers[2 * tab.nchunks - 1];
		st->weights = (double)st->params * a->param_bytes;
		st->grads = (double)st->params * 4;
		/* 16-bit weights: an fp32 master besides them; fp32 weights are their own
		 * master, except under the distributed optimizer, which shards the master and
		 * keeps the whole fp32 weights for the forward (what the CUDA backend allocates) */
		st->optimizer = (double)st->params * (a->param_bytes < 4 || a->distributed_optimizer ? 12 : 8) /
				(a->distributed_optimizer ? a->dp : 1);
		/* the activations the schedule keeps: layers of each chunk from its forward to
		 * its backward (its weight pass when split), at the peak of their sum */
		if (mt_pp_sched_make(&sc, a->pp > 1 ? (enum mt_pp_kind)a->pp_schedule : MT_PP_1F1B, a->pp, split.vp,
				     (int)e->grad_accum, r, a->pp_group, 0, err)) {
			mt_params_free(&tab);
			mt_estimate_free(e);
			return -1;
		}
		st->p2p_bytes = 0;
		for (int i = 0; i < sc.n; i++) {
			const struct mt_pp_action *x = &sc.a[i];
			int nl = tab.chunk_layers[2 * x->chunk + 1] - tab.chunk_layers[2 * x->chunk];
			if (x->op == MT_PP_FWD)
				live += nl;
			else if (x->op == MT_PP_BWD || x->op == MT_PP_BWD_WEIGHT)
				live -= nl;
			else if (x->op == MT_PP_SEND_FWD || x->op == MT_PP_SEND_BWD)
				st->p2p_bytes += msg;
			if (live > peak)
				peak = live;
		}
		if (tab.last_stage)
			lmax = sc.inflight[tab.nchunks - 1];
		mt_pp_sched_free(&sc);
		st->layers = 0;
		for (int k = 0, o = 0; k < tab.nchunks; k++) {
			int lo = tab.chunk_layers[2 * k], hi = tab.chunk_layers[2 * k + 1];
			st->layers += hi - lo;
			if (o >= 0 && o < (int)sizeof(st->chunks))
				o += snprintf(st->chunks + o, sizeof(st->chunks) - (size_t)o, "%s%d..%d", k ? "," : "", lo, hi - 1);
		}
		st->inflight = peak / (st->layers > 0 ? st->layers : 1);
		st->activations = e->act_layer * peak;
		/* the last stage's fp32 logits, one set a micro-batch in flight on its last chunk;
		 * the CUDA backend's one chunk of them at a time */
		if (!tab.last_stage)
			st->logits = 0;
		else if (a->cuda_backend)
			st->logits = fmin(s * b * (double)v / t * a->param_bytes, (double)MT_CUDA_LOGITS_BYTES);
		else
			st->logits = s * b * (double)v / t * 4 * (lmax > 0 ? lmax : 1);
		st->total = st->weights + st->grads + st->optimizer + st->activations + st->logits + a->runtime_bytes;
		if (st->total > e->stages[e->busiest].total)
			e->busiest = r;
		mt_params_free(&tab);
	}
	/* the first stage's figures, as the report has always given them */
	e->params_per_gpu = e->stages[0].params;
	e->weights = e->stages[0].weights;
	e->grads = e->stages[0].grads;
	e->optimizer = e->stages[0].optimizer;
	e->act_layers = e->stages[0].layers;
	e->act_inflight = e->stages[0].inflight;
	e->activations = e->stages[0].activations;
	e->logits = e->stages[0].logits;
	e->runtime = a->runtime_bytes;
	e->total = e->stages[0].total;
	e->bubble = a->pp > 1 ? mt_pp_bubble((enum mt_pp_kind)a->pp_schedule, a->pp, split.vp, (int)e->grad_accum, 1, 1, 1) : 0;
	e->flops_per_step = mt_config_flops_per_token(c) * s * (double)a->global_batch_size;
	e->flops_per_step_per_gpu = e->flops_per_step / a->world;
	return 0;
}

void mt_estimate_free(struct mt_estimate *e)
{
	free(e->stages);
	e->stages = NULL;
	e->nstages = 0;
}

static void group(FILE *out, const char *name, int world, int tp, int pp, int which)
{
	int n = 0, first = -1, last = -1, stride = 0, cnt = 0;

	fprintf(out, "  %-27s", name);
	for (int r = 0; r < world; r++) {
		int a, b, c;
		mt_dist_coords(world, tp, pp, r, &a, &b, &c);
		/* the group of rank 0: the other two coordinates are 0 */
		if ((which == 0 && b == 0 && c == 0) || (which == 1 && a == 0 && c == 0) || (which == 2 && a == 0 && b == 0)) {
			if (first < 0)
				first = r;
			else if (stride == 0)
				stride = r - first;
			last = r;
			cnt++;
		}
	}
	n = cnt;
	if (n == 1)
		fprintf(out, "%d\n", first);
	else
		fprintf(out, "%d..%d step %d (%d ranks)\n", first, last, stride, n);
}

void mt_estimate_print(FILE *out, const struct mt_estimate_args *a, const struct mt_estimate *e)
{
	const struct mt_config *c = a->cfg;
	const double G = 1e9, GiB = 1024.0 * 1024 * 1024;
	int nodes = (a->world + a->gpus_per_node - 1) / a->gpus_per_node;

	fprintf(out, "model: %d layers, hidden %d, %d heads, ffn %d, seq %d, vocab %lld (padded %lld)\n", c->num_layers,
		c->hidden_size, c->num_attention_heads, c->ffn_hidden_size, c->seq_length, (long long)c->vocab_size,
		(long long)c->padded_vocab_size);
	fprintf(out, "parameters: %lld (%.2f B)\n", (long long)e->params, (double)e->params / G);
	fprintf(out, "ranks: %d = tensor %d x data %d x pipeline %d (Megatron's order tp-cp-ep-dp-pp: tp fastest), "
		"%d node(s) of %d GPUs\n", a->world, a->tp, a->dp, a->pp, nodes, a->gpus_per_node);
	fprintf(out, "groups of rank 0:\n");
	group(out, "tensor-parallel", a->world, a->tp, a->pp, 0);
	group(out, "data-parallel", a->world, a->tp, a->pp, 1);
	group(out, "pipeline-parallel", a->world, a->tp, a->pp, 2);
	if (a->world <= 64) {
		fprintf(out, "rank\tnode\tlocal\ttp\tdp\tpp\n");
		for (int r = 0; r < a->world; r++) {
			int x, y, z;
			mt_dist_coords(a->world, a->tp, a->pp, r, &x, &y, &z);
			fprintf(out, "%d\t%d\t%d\t%d\t%d\t%d\n", r, r / a->gpus_per_node, r % a->gpus_per_node, x, y, z);
		}
	}
	fprintf(out, "batch: global %lld = micro %lld x data-parallel %d x %lld accumulation steps\n",
		(long long)a->global_batch_size, (long long)a->micro_batch_size, a->dp, (long long)e->grad_accum);
	if (a->rampup[0] > 0)
		fprintf(out, "batch rampup: from %lld by %lld in %lld increments of %lld samples each (%lld samples), "
			"then %lld\n", (long long)a->rampup[0], (long long)a->rampup[1], (long long)e->ramp_increments,
			(long long)e->ramp_samples_per_increment, (long long)a->rampup[2], (long long)a->global_batch_size);
	fprintf(out, "memory per GPU (first pipeline stage, %s weights%s):\n", a->dtype,
		a->distributed_optimizer ? ", distributed optimizer" : "");
	fprintf(out, "  parameters on it            %lld (%.3f B)\n", (long long)e->params_per_gpu, e->params_per_gpu / G);
	fprintf(out, "  weights                     %8.2f GiB\n", e->weights / GiB);
	fprintf(out, "  gradients (fp32)            %8.2f GiB\n", e->grads / GiB);
	fprintf(out, "  optimizer state             %8.2f GiB (%s", e->optimizer / GiB,
		a->param_bytes < 4 || a->distributed_optimizer ? "fp32 master + 2 moments" : "2 fp32 moments");
	if (a->distributed_optimizer)
		fprintf(out, "; 1/%d of them on each data-parallel rank", a->dp);
	fprintf(out, ")\n");
	fprintf(out, "  activations                 %8.2f GiB (Korthikanti et al. 2022, %s%s: %.3f GiB a layer and "
		"micro-batch x %lld layers x %.4g micro-batches in flight)\n", e->activations / GiB, e->act_formula,
		a->param_bytes == 4 ? ", x 2 for fp32" : "", e->act_layer / GiB, (long long)e->act_layers,
		e->act_inflight);
	fprintf(out, "  logits                      %8.2f GiB\n", e->logits / GiB);
	if (e->runtime > 0)
		fprintf(out, "  CUDA context, libraries     %8.2f GiB (%s, as measured on H200s)\n", e->runtime / GiB,
			a->world > 1 ? "with NCCL's buffers" : "one rank, no NCCL");
	fprintf(out, "  total                       %8.2f GiB\n", e->total / GiB);
	if (a->pp > 1) {
		int v = a->pipeline.vp > 1 ? a->pipeline.vp : 1;
		const char *k = mt_pp_kind_name((enum mt_pp_kind)a->pp_schedule);
		fprintf(out, "pipeline: %d stages x %d model chunk(s), schedule %s, %lld micro-batches a step: bubble %s = "
			"%.4f of the ideal step (%.1f%% of the step)\n", a->pp, v, k, (long long)e->grad_accum,
			a->pp_schedule == MT_PP_INTERLEAVED ? "(p-1)/(v m)" : a->pp_schedule == MT_PP_ZBH1
			? "(p-1)(T_F+T_B-T_W)/(m (T_F+T_B+T_W)), equal passes" : "(p-1)/m", e->bubble,
			100 * e->bubble / (1 + e->bubble));
		fprintf(out, "stage\tlayers\tparameters\tin flight\tactivations GiB\tlogits GiB\ttotal GiB\tp2p MB/step\n");
		for (int r = 0; r < e->nstages; r++) {
			const struct mt_estimate_stage *st = &e->stages[r];
			fprintf(out, "%d\t%s\t%lld\t%.2f\t%.2f\t%.2f\t%.2f\t%.1f\n", r, st->chunks, (long long)st->params, st->inflight, st->activations / GiB, st->logits / GiB, st->total / GiB,
				st->p2p_bytes / 1e6);
		}
		fprintf(out, "busiest stage: %d (%.2f GiB)\n", e->busiest, e->stages[e->busiest].total / GiB);
	}
	fprintf(out, "flops per step: %.4g (%.4g per GPU; 6 x matmul parameters + 6 x L x s x heads x head size per token, "
		"x seq %d x global batch %lld)\n", e->flops_per_step, e->flops_per_step_per_gpu, c->seq_length,
		(long long)a->global_batch_size);
}
