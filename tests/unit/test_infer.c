/* Unit tests for lib/infer/infer_cpu.c: the key/value-cache forward against gpt.c's full
 * forward of each whole sequence, GPT-2 style and Llama style (rope, RMSNorm, SwiGLU,
 * no biases, untied output, 4 heads in 2 groups). Three prompts of different lengths
 * are prefilled together into permuted slots (more rows than one chunk, so a prompt is
 * split across chunks), then decoded one token a step, the shorter ones finishing
 * first; every position's logits and the prompts' log-probabilities must equal the
 * full forward's to 1e-5 relative. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/gpt.h"
#include "infer/infer.h"
#include "tap.h"

#define T 50
#define NS 3

static void tiny(struct mt_config *c, int llama)
{
	memset(c, 0, sizeof(*c));
	c->num_layers = 2;
	c->hidden_size = 16;
	c->num_attention_heads = 4;
	c->num_query_groups = llama ? 2 : 4;
	c->ffn_hidden_size = 24;
	c->seq_length = T;
	c->vocab_size = 13;
	c->make_vocab_size_divisible_by = 8;
	c->add_bias_linear = !llama;
	c->position_embedding_type = llama ? MT_POS_ROPE : MT_POS_LEARNED;
	c->normalization = llama ? MT_NORM_RMSNORM : MT_NORM_LAYERNORM;
	c->swiglu = llama;
	c->untie_embeddings_and_output_weights = llama;
	c->init_method_std = 0.3;
	mt_config_defaults(c);
}

/* log-softmax over n of a row, from raw logits or from probabilities (gpt.c's forward
 * leaves the softmax in its logits buffer) */
static void logsoftmax(double *out, const float *z, int64_t n, int is_prob)
{
	double mx = -1e300, sum = 0;

	if (is_prob) {
		for (int64_t v = 0; v < n; v++)
			out[v] = log((double)z[v]);
		return;
	}
	for (int64_t v = 0; v < n; v++)
		mx = z[v] > mx ? z[v] : mx;
	for (int64_t v = 0; v < n; v++)
		sum += exp((double)z[v] - mx);
	for (int64_t v = 0; v < n; v++)
		out[v] = (double)z[v] - mx - log(sum);
}

static double rel(double a, double b) { return fabs(a - b) / fmax(1.0, fabs(b)); }

static void check_model(int llama)
{
	const char *name = llama ? "llama" : "gpt2";
	struct mt_config c;
	struct mt_params t;
	struct mt_gpt_acts a;
	struct mt_infer e;
	struct mt_err err = { 0 };
	int32_t tok[NS][T], tgt[T];
	static double ref[NS][T][16]; /* full forward: log-softmax over the padded vocabulary */
	int lens[NS] = { 37, 1, 49 }, slots[NS] = { 2, 0, 1 }, pos[NS];
	const int32_t *tp[NS];
	float *lp[NS], *logits;
	double worst = 0, worst_lp = 0, d[16];
	float *w;
	int64_t V, vocab;

	tiny(&c, llama);
	if (mt_config_validate(&c, &err) || mt_params_build(&t, &c, &err) || mt_gpt_acts_alloc(&a, &c, 1, T, 0, &err)) {
		ok(0, "%s: set up: %s", name, err.msg);
		return;
	}
	V = c.padded_vocab_size;
	vocab = c.vocab_size;
	w = malloc((size_t)t.total * sizeof(float));
	mt_params_init(&t, w, 7);
	for (int64_t k = 0; k < t.total; k++)
		w[k] += (float)(0.05 * sin((double)k));
	srand(3);
	for (int s = 0; s < NS; s++)
		for (int i = 0; i < T; i++)
			tok[s][i] = rand() % (int)vocab;
	for (int i = 0; i < T; i++)
		tgt[i] = -1;
	for (int s = 0; s < NS; s++) {
		const float *z;
		int is_prob = 1;
		mt_gpt_forward_f32(&c, &t, w, tok[s], tgt, &a, NULL);
		z = mt_gpt_probs_f32(&a);
		for (int i = 0; i < T && is_prob; i++) { /* probabilities or raw logits? */
			double sum = 0;
			for (int64_t v = 0; v < V; v++)
				sum += z[i * V + v];
			is_prob = fabs(sum - 1) < 1e-3;
		}
		for (int i = 0; i < T; i++)
			logsoftmax(ref[s][i], z + i * V, V, is_prob);
	}

	if (mt_infer_cpu.init(&e, &c, &t, w, NS, T, &err)) {
		ok(0, "%s: engine init: %s", name, err.msg);
		return;
	}
	logits = malloc((size_t)(NS * V) * sizeof(float));
	for (int s = 0; s < NS; s++) {
		tp[s] = tok[s];
		lp[s] = malloc(T * sizeof(float));
		pos[s] = lens[s];
	}
	ok(e.ops->prefill(&e, NS, slots, tp, lens, logits, lp, &err) == 0, "%s: prefill of prompts of 37, 1 and 49 tokens: %s",
	   name, err.msg);
	for (int s = 0; s < NS; s++) {
		logsoftmax(d, logits + s * V, V, 0);
		for (int64_t v = 0; v < V; v++)
			worst = fmax(worst, rel(d[v], ref[s][lens[s] - 1][v]));
		for (int j = 0; j + 1 < lens[s]; j++) {
			/* log p over the real vocabulary = padded log p - log(mass of the real ids) */
			double mass = 0;
			for (int64_t v = 0; v < vocab; v++)
				mass += exp(ref[s][j][v]);
			worst_lp = fmax(worst_lp, rel(lp[s][j], ref[s][j][tok[s][j + 1]] - log(mass)));
		}
	}
	ok(worst_lp < 1e-5, "%s: prompt log-probabilities equal the full forward's (worst relative %.2e)", name, worst_lp);
	/* decode: each step, the sequences not yet at T, in shrinking batches */
	for (;;) {
		int n = 0, sl[NS], who[NS];
		int32_t nt[NS];
		for (int s = 0; s < NS; s++)
			if (pos[s] < T) {
				who[n] = s;
				sl[n] = slots[s];
				nt[n] = tok[s][pos[s]];
				n++;
			}
		if (!n)
			break;
		if (e.ops->decode(&e, n, sl, nt, logits, &err)) {
			ok(0, "%s: decode: %s", name, err.msg);
			break;
		}
		for (int k = 0; k < n; k++) {
			int s = who[k];
			logsoftmax(d, logits + k * V, V, 0);
			for (int64_t v = 0; v < V; v++)
				worst = fmax(worst, rel(d[v], ref[s][pos[s]][v]));
			pos[s]++;
		}
	}
	ok(worst < 1e-5, "%s: prefill and cached decode logits equal the full forward's at every position (worst %.2e)",
	   name, worst);
	/* a full slot refuses another token; a bad id is refused */
	{
		int32_t one = 1, bad = (int32_t)V;
		int s0 = 0;
		ok(e.ops->decode(&e, 1, &s0, &one, logits, &err) == -1 && strstr(err.msg, "full"), "%s: a full slot: %s", name,
		   err.msg);
		ok(e.ops->prefill(&e, 1, &s0, (const int32_t *const[]){ &bad }, (int[]){ 1 }, logits, NULL, &err) == -1 &&
			   strstr(err.msg, "outside the vocabulary"),
		   "%s: an id outside the vocabulary: %s", name, err.msg);
	}
	e.ops->free(&e);
	for (int s = 0; s < NS; s++)
		free(lp[s]);
	free(logits);
	free(w);
	mt_gpt_acts_free(&a);
	mt_params_free(&t);
}

int main(void)
{
	check_model(0);
	check_model(1);
	return tap_done();
}
