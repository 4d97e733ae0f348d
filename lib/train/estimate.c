/* estimate.c: the dry-run arithmetic (see estimate.h). */
#include "train/estimate.h"

#include "dist/dist.h"
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
	int64_t layers = c->num_layers / (a->pp > 0 ? a->pp : 1);
	double s = c->seq_length, b = (double)a->micro_batch_size, t = a->tp;
	struct mt_params tab;

	if (a->global_batch_size % md)
		return mt_err_set(err, MT_EXIT_USAGE,
				  "--global-batch-size %lld is not a multiple of --micro-batch-size %lld x %d data-parallel ranks",
				  (long long)a->global_batch_size, (long long)a->micro_batch_size, a->dp);
	if (c->num_layers % a->pp)
		return mt_err_set(err, MT_EXIT_USAGE, "--num-layers %d is not a multiple of --pipeline-model-parallel-size %d",
				  c->num_layers, a->pp);
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
	/* the first stage's parameters on tensor-parallel rank 0: shards and whole replicas */
	if (mt_params_build_tp(&tab, c, a->tp, 0, a->sequence_parallel, err))
		return -1;
	e->params = mt_config_num_params(c);
	e->params_per_gpu = 0;
	for (int i = 0; i < tab.n; i++) {
		const struct mt_param *p = &tab.p[i];
		if (p->layer >= 0 ? p->layer < layers
				  : p->kind == MT_P_WORD_EMB || p->kind == MT_P_POS_EMB || a->pp == 1)
			e->params_per_gpu += p->numel;
	}
	mt_params_free(&tab);
	e->weights = (double)e->params_per_gpu * a->param_bytes;
	e->grads = (double)e->params_per_gpu * 4;
	/* 16-bit weights: an fp32 master besides them; fp32 weights are their own master,
	 * except under the distributed optimizer, which shards the master and keeps the
	 * whole fp32 weights for the forward (what the CUDA backend allocates) */
	e->optimizer = (double)e->params_per_gpu * (a->param_bytes < 4 || a->distributed_optimizer ? 12 : 8) /
		       (a->distributed_optimizer ? a->dp : 1);
	/* Korthikanti et al.'s bytes are for 16-bit activations; fp32 holds each in 4 */
	e->act_layer = mt_estimate_act_layer(s, b, c->hidden_size, c->num_attention_heads, a->tp, a->sequence_parallel,
					     a->recompute, &e->act_formula) * (a->param_bytes == 4 ? 2 : 1);
	e->grad_accum = a->global_batch_size / md;
	/* 1F1B: the first stage holds up to pp micro-batches' activations */
	e->act_layers = layers;
	e->act_inflight = a->pp < e->grad_accum ? a->pp : e->grad_accum;
	e->activations = e->act_layer * (double)layers * (double)e->act_inflight;
	e->logits = a->pp == 1 ? s * b * (double)v / t * 4 : 0; /* on the last stage otherwise */
	e->total = e->weights + e->grads + e->optimizer + e->activations + e->logits;
	e->flops_per_step = mt_config_flops_per_token(c) * s * (double)a->global_batch_size;
	e->flops_per_step_per_gpu = e->flops_per_step / a->world;
	return 0;
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
		"micro-batch x %lld layers x %lld micro-batches in flight)\n", e->activations / GiB, e->act_formula,
		a->param_bytes == 4 ? ", x 2 for fp32" : "", e->act_layer / GiB, (long long)e->act_layers,
		(long long)e->act_inflight);
	fprintf(out, "  logits                      %8.2f GiB\n", e->logits / GiB);
	fprintf(out, "  total                       %8.2f GiB\n", e->total / GiB);
	fprintf(out, "flops per step: %.4g (%.4g per GPU; 6 x matmul parameters + 6 x L x s x heads x head size per token, "
		"x seq %d x global batch %lld)\n", e->flops_per_step, e->flops_per_step_per_gpu, c->seq_length,
		(long long)a->global_batch_size);
}
