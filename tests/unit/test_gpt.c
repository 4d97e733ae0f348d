/* Unit tests for lib/model/gpt.c: every parameter's gradient against central finite
 * differences in fp64, for GPT-2 style and Llama style models (every architecture
 * option), and the fp32 pass against the fp64 one. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/gpt.h"
#include "tap.h"

static void tiny(struct mt_config *c, int llama)
{
	memset(c, 0, sizeof(*c));
	c->num_layers = 2;
	c->hidden_size = 8;
	c->num_attention_heads = llama ? 4 : 2;
	c->num_query_groups = llama ? 2 : 2;
	c->ffn_hidden_size = 12;
	c->seq_length = 5;
	c->vocab_size = 13;
	c->make_vocab_size_divisible_by = 8;
	c->add_bias_linear = !llama;
	c->position_embedding_type = llama ? MT_POS_ROPE : MT_POS_LEARNED;
	c->normalization = llama ? MT_NORM_RMSNORM : MT_NORM_LAYERNORM;
	c->swiglu = llama;
	c->untie_embeddings_and_output_weights = llama;
	c->init_method_std = 0.3; /* large, so that every path carries signal */
	mt_config_defaults(c);
}

static void check_model(int llama)
{
	struct mt_config c;
	struct mt_params t;
	struct mt_gpt_acts a64, a32;
	struct mt_err e = { 0 };
	int32_t tok[10] = { 1, 5, 7, 2, 12, 3, 3, 0, 9, 11 }, tgt[10] = { 5, 7, 2, 12, -1, 3, 0, 9, 11, 4 };
	const char *name = llama ? "llama" : "gpt2";
	float *w32, *g32;
	double *w, *g, worst = 0, worst32 = 0;
	const char *worst_name = "";
	int64_t n;

	tiny(&c, llama);
	if (mt_config_validate(&c, &e) || mt_params_build(&t, &c, &e) || mt_gpt_acts_alloc(&a64, &c, 2, 5, 1, &e) ||
	    mt_gpt_acts_alloc(&a32, &c, 2, 5, 0, &e)) {
		ok(0, "%s: set up: %s", name, e.msg);
		return;
	}
	w32 = malloc((size_t)t.total * sizeof(float));
	g32 = calloc((size_t)t.total, sizeof(float));
	w = malloc((size_t)t.total * sizeof(double));
	g = calloc((size_t)t.total, sizeof(double));
	mt_params_init(&t, w32, 42);
	/* norm weights and biases away from their 1 / 0 starts, so their gradients are general */
	for (int64_t k = 0; k < t.total; k++)
		w[k] = w32[k] + 0.05 * sin((double)k);
	for (int64_t k = 0; k < t.total; k++)
		w32[k] = (float)w[k];
	mt_gpt_forward_f64(&c, &t, w, tok, tgt, &a64, &n);
	is_int(n, 9, "%s: the -1 target is not counted", name);
	mt_gpt_backward_f64(&c, &t, w, tok, tgt, &a64, g);
	for (int i = 0; i < t.n; i++) {
		const struct mt_param *p = &t.p[i];
		double pworst = 0;
		for (int64_t k = 0; k < p->numel; k++) {
			double *x = &w[p->offset + k], keep = *x, hstep = 1e-5, lp, lm, num, an = g[p->offset + k], rel;
			*x = keep + hstep;
			lp = mt_gpt_forward_f64(&c, &t, w, tok, tgt, &a64, NULL);
			*x = keep - hstep;
			lm = mt_gpt_forward_f64(&c, &t, w, tok, tgt, &a64, NULL);
			*x = keep;
			num = (lp - lm) / (2 * hstep);
			rel = fabs(an - num) / fmax(fabs(an) + fabs(num), 1e-7);
			if (fabs(an - num) > 1e-9 && rel > pworst)
				pworst = rel;
		}
		if (pworst > worst) {
			worst = pworst;
			worst_name = p->name;
		}
	}
	ok(worst < 1e-5, "%s: every gradient of %d tensors matches central differences (worst relative %.2e, %s)",
	   name, t.n, worst, worst_name);
	/* fp32 against fp64 */
	{
		double l64 = mt_gpt_forward_f64(&c, &t, w, tok, tgt, &a64, NULL);
		double l32 = mt_gpt_forward_f32(&c, &t, w32, tok, tgt, &a32, NULL);
		mt_gpt_backward_f32(&c, &t, w32, tok, tgt, &a32, g32);
		ok(fabs(l64 - l32) / l64 < 1e-6, "%s: fp32 loss %.9f matches fp64 %.9f", name, l32, l64);
		for (int64_t k = 0; k < t.total; k++) {
			double d = fabs(g32[k] - g[k]) / fmax(fabs(g[k]), 1e-4);
			if (d > worst32)
				worst32 = d;
		}
		ok(worst32 < 1e-3, "%s: fp32 gradients match fp64 (worst relative %.2e)", name, worst32);
	}
	{
		/* the loss of an untrained model is about log(vocab) */
		double l = mt_gpt_forward_f64(&c, &t, w, tok, tgt, &a64, NULL);
		ok(l > 0.3 * log(16.0) && l < 4 * log(16.0), "%s: loss %.3f is plausible", name, l);
	}
	free(w32), free(g32), free(w), free(g);
	mt_gpt_acts_free(&a64);
	mt_gpt_acts_free(&a32);
	mt_params_free(&t);
}

static void test_gpt_params_table(void)
{
	struct mt_config c;
	struct mt_params t;
	struct mt_err e = { 0 };

	tiny(&c, 0);
	mt_params_build(&t, &c, &e);
	is_int(t.total, mt_config_num_params(&c), "gpt2: the table's size is the config's parameter count");
	ok(mt_params_find(&t, "decoder.layers.1.mlp.linear_fc1.weight") != NULL, "Megatron-core names");
	is_int(mt_params_find(&t, "decoder.layers.0.self_attention.linear_qkv.weight")->shape[0], 24,
	       "fused qkv rows: heads + 2 groups, times the head size");
	ok(!mt_params_find(&t, "decoder.layers.0.input_layernorm.bias")->weight_decay &&
	   mt_params_find(&t, "embedding.word_embeddings.weight")->weight_decay, "no decay on norms and biases");
	mt_params_free(&t);
	tiny(&c, 1);
	mt_params_build(&t, &c, &e);
	is_int(t.total, mt_config_num_params(&c), "llama: the table's size is the config's parameter count");
	ok(!mt_params_find(&t, "embedding.position_embeddings.weight") && mt_params_find(&t, "output_layer.weight") &&
	   !mt_params_find(&t, "decoder.layers.0.self_attention.linear_qkv.bias"),
	   "rope, untied output, no biases");
	is_int(mt_params_find(&t, "decoder.layers.0.mlp.linear_fc1.weight")->shape[0], 24, "swiglu doubles fc1");
	mt_params_free(&t);
}

int main(void)
{
	test_gpt_params_table();
	check_model(0);
	check_model(1);
	return tap_done();
}
