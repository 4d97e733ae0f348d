/* test_stage: the model cut into pipeline stages (params.h's stage tables, gpt.h's stage
 * passes) against the whole model, in one process: each stage's parameters start as
 * the whole model's (the tied embedding's copy on the last stage too), the activations
 * handed from stage to stage give the whole model's loss bit for bit, and the gradients
 * (the tied copy's added to the first stage's, as the embedding group's all-reduce adds
 * them) are the whole model's, with the backward pass whole or split into its B and W
 * passes. Splits: even over 1, 2 and 4 stages, uneven first and last stages, and two
 * model chunks a stage (interleaving); GPT-2 and Llama style. Also the split table's
 * refusals. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "model/gpt.h"
#include "model/params.h"
#include "tap.h"

#define MAXV 16 /* virtual stages */

static void check(const char *name, const struct mt_config *c, const struct mt_pp_split *s, int split)
{
	int p = s->size, v = s->vp, B = 2, T = c->seq_length, N = B * T, nv = p * v, bad = 0;
	struct mt_params whole, tab[MAXV];
	struct mt_gpt_acts a, acts[MAXV];
	struct mt_err e = { 0 };
	int32_t *tok = malloc((size_t)N * sizeof(int32_t)), *tgt = malloc((size_t)N * sizeof(int32_t));
	float *w, *g, *gs, *ws[MAXV], *gg[MAXV], *x[MAXV + 1], *dx[MAXV + 1];
	double l1, ls = 0, worst = 0;
	const char *worst_name = "";
	int init_same = 1;

	for (int n = 0; n < N; n++) {
		tok[n] = (int32_t)((n * 7 + 3) % c->vocab_size);
		tgt[n] = n % 5 == 4 ? -1 : (int32_t)((n * 11 + 1) % c->vocab_size);
	}
	memset(&a, 0, sizeof(a));
	if (mt_params_build(&whole, c, &e) || mt_gpt_acts_alloc(&a, c, B, T, 0, &e)) {
		ok(0, "%s: %s", name, e.msg);
		return;
	}
	w = malloc((size_t)whole.total * sizeof(float));
	g = calloc((size_t)whole.total, sizeof(float));
	gs = calloc((size_t)whole.total, sizeof(float));
	mt_params_init(&whole, w, 77);
	l1 = mt_gpt_forward_f32(c, &whole, w, tok, tgt, &a, NULL);
	mt_gpt_backward_f32(c, &whole, w, tok, tgt, &a, g);
	mt_gpt_acts_free(&a);

	for (int r = 0; r < p; r++) {
		if (mt_params_build_stage(&tab[r], c, 1, 0, 0, s, r, &e)) {
			ok(0, "%s: stage %d: %s", name, r, e.msg);
			return;
		}
		ws[r] = malloc((size_t)tab[r].total * sizeof(float));
		gg[r] = calloc((size_t)tab[r].total, sizeof(float));
		mt_params_init_shard(&tab[r], ws[r], 77);
		/* the same values as the whole model's (the tied copy: the embedding's) */
		{
			float *cut = malloc((size_t)tab[r].total * sizeof(float));
			mt_params_slice(&tab[r], 0, &whole, w, cut, 0);
			init_same &= memcmp(cut, ws[r], (size_t)tab[r].total * sizeof(float)) == 0;
			free(cut);
		}
	}
	/* virtual stage k = c p + r: chunk c of stage r */
	for (int k = 0; k <= nv; k++) {
		x[k] = calloc((size_t)N * c->hidden_size, sizeof(float));
		dx[k] = calloc((size_t)N * c->hidden_size, sizeof(float));
	}
	for (int k = 0; k < nv; k++) {
		int r = k % p, ch = k / p;
		struct mt_gpt_stage st = { tab[r].chunk_layers[2 * ch], tab[r].chunk_layers[2 * ch + 1], k == 0, k == nv - 1 };
		memset(&acts[k], 0, sizeof(acts[k]));
		if (mt_gpt_acts_alloc_stage(&acts[k], c, NULL, &st, split, B, T, 0, &e)) {
			ok(0, "%s: %s", name, e.msg);
			return;
		}
		ls = mt_gpt_stage_forward_f32(c, &tab[r], ws[r], tok, tgt, x[k], x[k + 1], &acts[k], NULL);
	}
	for (int k = nv - 1; k >= 0; k--) {
		int r = k % p;
		mt_gpt_stage_backward_f32(c, &tab[r], ws[r], tok, tgt, &acts[k], dx[k + 1], dx[k], gg[r], split);
		bad |= acts[k].failed;
	}
	/* the W passes after all B passes: any order gives the same sums per parameter */
	for (int k = 0; split && k < nv; k++) {
		mt_gpt_stage_weight_f32(c, &tab[k % p], ws[k % p], &acts[k], gg[k % p]);
		bad |= acts[k].failed;
	}
	for (int r = 0; r < p; r++) {
		mt_params_slice(&tab[r], 0, &whole, gs, gg[r], 1);
		/* the embedding group's sum: the last stage's copy into the first's */
		for (int i = 0; i < tab[r].n; i++)
			if (tab[r].p[i].tied_copy) {
				const struct mt_param *q = &tab[r].p[i], *o = &whole.p[q->lidx];
				for (int64_t j = 0; j < q->numel; j++)
					gs[o->offset + j] += gg[r][q->offset + j];
			}
	}
	for (int i = 0; i < whole.n; i++) {
		const struct mt_param *q = &whole.p[i];
		double md = 0, mr = 0;
		for (int64_t j = 0; j < q->numel; j++) {
			md = fmax(md, fabs((double)g[q->offset + j] - gs[q->offset + j]));
			mr = fmax(mr, fabs((double)g[q->offset + j]));
		}
		if (mr > 0 && md / mr > worst) {
			worst = md / mr;
			worst_name = q->name;
		}
	}
	ok(!bad && init_same && ls == l1 && worst < 1e-6,
	   "%s: %d stage(s)%s%s%s: same start %d, loss %.9f against %.9f, worst gradient %.2e (%s)", name, p,
	   v > 1 ? " x 2 chunks" : "", s->first || s->last ? " uneven" : "", split ? ", backward split into B and W" : "",
	   init_same, ls, l1, worst, worst_name);
	for (int k = 0; k < nv; k++)
		mt_gpt_acts_free(&acts[k]);
	for (int k = 0; k <= nv; k++)
		free(x[k]), free(dx[k]);
	for (int r = 0; r < p; r++) {
		free(ws[r]), free(gg[r]);
		mt_params_free(&tab[r]);
	}
	free(w), free(g), free(gs), free(tok), free(tgt);
	mt_params_free(&whole);
}

static void check_tables(const struct mt_config *c)
{
	struct mt_params t;
	struct mt_err e = { 0 };
	struct mt_pp_split s = { 2, 2, 0, 0 };
	int64_t total = 0;
	int names = 0, copies = 0;

	/* interleaving: chunk c of stage r holds block c p + r */
	ok(mt_params_build_stage(&t, c, 1, 0, 0, &s, 1, &e) == 0 && t.nchunks == 2 && t.chunk_layers[0] == 1 &&
		   t.chunk_layers[1] == 2 && t.chunk_layers[2] == 3 && t.chunk_layers[3] == 4 && t.last_stage &&
		   !t.first_stage && mt_params_find(&t, "decoder.layers.3.mlp.linear_fc2.weight") &&
		   !mt_params_find(&t, "decoder.layers.2.mlp.linear_fc2.weight"),
	   "4 layers over 2 stages x 2 chunks: stage 1 holds layers 1 and 3 (global names)");
	mt_params_free(&t);
	/* every parameter on exactly one stage, but the tied copy */
	s = (struct mt_pp_split){ 4, 1, 0, 0 };
	for (int r = 0; r < 4; r++) {
		if (mt_params_build_stage(&t, c, 1, 0, 0, &s, r, &e))
			break;
		for (int i = 0; i < t.n; i++) {
			copies += t.p[i].tied_copy;
			if (!t.p[i].tied_copy) {
				total += t.p[i].numel;
				names++;
			} else {
				ok(t.p[i].norm_skip && !strcmp(t.p[i].name, "embedding.word_embeddings.weight") &&
					   t.p[i].lidx == 0 && mt_params_get(&t, -1, MT_P_WORD_EMB) == &t.p[i],
				   "the last stage's tied copy: the embedding's name and row, counted by the first stage");
			}
		}
		mt_params_free(&t);
	}
	mt_params_build(&t, c, &e);
	ok(total == t.total && names == t.n && copies == 1, "4 stages hold every parameter once (%lld of %lld) and one copy",
	   (long long)total, (long long)t.total);
	mt_params_free(&t);
	s = (struct mt_pp_split){ 3, 1, 0, 0 };
	ok(mt_params_build_stage(&t, c, 1, 0, 0, &s, 0, &e) == -1 && e.code == MT_EXIT_USAGE &&
		   strstr(e.msg, "--num-layers 4") && strstr(e.msg, "--pipeline-model-parallel-size 3"),
	   "4 layers over 3 stages are refused: %s", e.msg);
	s = (struct mt_pp_split){ 2, 4, 0, 0 };
	ok(mt_params_build_stage(&t, c, 1, 0, 0, &s, 0, &e) == -1 && e.code == MT_EXIT_USAGE && strstr(e.msg, "virtual"),
	   "2 layers a stage in 4 chunks are refused: %s", e.msg);
	s = (struct mt_pp_split){ 3, 1, 2, 0 };
	ok(mt_params_build_stage(&t, c, 1, 0, 0, &s, 0, &e) == 0 && t.chunk_layers[1] == 2, "3 stages: first of 2 layers");
	mt_params_free(&t);
	ok(mt_params_build_stage(&t, c, 1, 0, 0, &s, 2, &e) == 0 && t.chunk_layers[0] == 3 && t.chunk_layers[1] == 4,
	   "3 stages: the last of 1 layer");
	mt_params_free(&t);
	s = (struct mt_pp_split){ 3, 1, 3, 0 };
	ok(mt_params_build_stage(&t, c, 1, 0, 0, &s, 0, &e) == -1 && strstr(e.msg, "the 2 other stages"),
	   "a first stage of 3 leaves 1 layer for 2 stages: refused: %s", e.msg);
}

int main(void)
{
	struct mt_config gpt, llama;
	struct mt_err e = { 0 };
	const struct mt_pp_split splits[] = { { 1, 1, 0, 0 }, { 2, 1, 0, 0 }, { 4, 1, 0, 0 }, { 2, 2, 0, 0 }, { 3, 1, 1, 2 } };

	memset(&gpt, 0, sizeof(gpt));
	gpt.num_layers = 4;
	gpt.hidden_size = 32;
	gpt.num_attention_heads = 4;
	gpt.seq_length = 8;
	gpt.vocab_size = 61;
	gpt.make_vocab_size_divisible_by = 16;
	gpt.add_bias_linear = 1;
	llama = gpt;
	mt_config_defaults(&gpt);
	llama.num_attention_heads = 8;
	llama.num_query_groups = 4;
	llama.ffn_hidden_size = 64;
	llama.position_embedding_type = MT_POS_ROPE;
	llama.normalization = MT_NORM_RMSNORM;
	llama.swiglu = 1;
	llama.add_bias_linear = 0;
	llama.untie_embeddings_and_output_weights = 1;
	mt_config_defaults(&llama);
	if (mt_config_validate(&gpt, &e) || mt_config_validate(&llama, &e)) {
		ok(0, "configs: %s", e.msg);
		return tap_done();
	}
	for (size_t i = 0; i < sizeof(splits) / sizeof(splits[0]); i++)
		for (int split = 0; split <= 1; split++) {
			check("gpt2", &gpt, &splits[i], split);
			check("llama", &llama, &splits[i], split);
		}
	check_tables(&gpt);
	return tap_done();
}
