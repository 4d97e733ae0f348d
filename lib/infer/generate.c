/* generate.c: prompts to generated tokens and text on an inference engine (generate.h). */
#include "infer/generate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/array.h"

int mt_gen_init(struct mt_gen *g, struct mt_infer *e, const struct mt_tokenizer *tok, struct mt_err *err)
{
	memset(g, 0, sizeof(*g));
	g->e = e;
	g->v = &tok->vocab;
	g->eod = tok->vocab.eod;
	if (mt_bpe_init(&g->bpe, &tok->vocab, &tok->pretok, err))
		return -1;
	if (mt_sampler_init(&g->smp, e->vocab, err)) {
		mt_bpe_free(&g->bpe);
		return -1;
	}
	g->logits = malloc((size_t)e->max_batch * (size_t)e->padded_vocab * sizeof(float));
	if (!g->logits) {
		mt_gen_free(g);
		return mt_err_set(err, MT_EXIT_IO, "out of memory for the logits of %d sequences", e->max_batch);
	}
	return 0;
}

void mt_gen_free(struct mt_gen *g)
{
	mt_bpe_free(&g->bpe);
	mt_sampler_free(&g->smp);
	free(g->logits);
	memset(g, 0, sizeof(*g));
}

void mt_gen_out_free(struct mt_gen_out *o)
{
	free(o->prompt_ids);
	free(o->ids);
	free(o->lp);
	free(o->top_ids);
	free(o->top_lp);
	free(o->text);
	memset(o, 0, sizeof(*o));
}

const char *mt_gen_finish_name(enum mt_gen_finish f)
{
	return f == MT_GEN_EOD ? "eod" : f == MT_GEN_STOP ? "stop" : "length";
}

int mt_gen_encode(struct mt_bpe *bpe, const char *prompt, size_t len, struct mt_gen_out *o, struct mt_err *err)
{
	struct mt_ids ids = { 0 };

	memset(o, 0, sizeof(*o));
	if (mt_bpe_encode(bpe, prompt, len, &ids, err)) {
		mt_ids_free(&ids);
		return -1;
	}
	if (ids.n == 0) {
		mt_ids_free(&ids);
		return mt_err_set(err, MT_EXIT_DATA, "the prompt is empty");
	}
	o->prompt_ids = ids.a;
	o->nprompt = (int)ids.n;
	return 0;
}

int mt_gen_check(const struct mt_gen *g, const struct mt_gen_opts *o, const struct mt_gen_out *outs, int n,
		 struct mt_err *err)
{
	if (o->max_tokens < 0)
		return mt_err_set(err, MT_EXIT_USAGE, "tokens_to_generate must be 0 or more");
	for (int i = 0; i < n; i++) {
		if ((int64_t)outs[i].nprompt + o->max_tokens > g->e->max_len)
			return mt_err_set(err, MT_EXIT_DATA,
					  "prompt %d: %d tokens + %d to generate exceed the %d positions available", i,
					  outs[i].nprompt, o->max_tokens, g->e->max_len);
		for (int k = 0; k < outs[i].nprompt; k++)
			if (outs[i].prompt_ids[k] < 0 || outs[i].prompt_ids[k] >= g->e->vocab)
				return mt_err_set(err, MT_EXIT_DATA, "prompt %d: token id %d is outside the model's vocabulary (%lld)",
						  i, (int)outs[i].prompt_ids[k], (long long)g->e->vocab);
	}
	return 0;
}

size_t mt_gen_token_text(const struct mt_vocab *v, int32_t id, const char **s, char buf[32])
{
	if (v->kind == MT_VOCAB_NULL) {
		*s = buf;
		return (size_t)snprintf(buf, 32, " %d", (int)id);
	}
	if (id < 0 || id >= v->n) {
		*s = "";
		return 0;
	}
	*s = v->arena + v->off[id];
	return v->len[id];
}

static int append(struct mt_gen_out *o, const char *s, size_t n, struct mt_err *err)
{
	if (mt_array_grow(&o->text, &o->text_cap, o->text_len + n + 1, 1, 256))
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	memcpy(o->text + o->text_len, s, n);
	o->text_len += n;
	o->text[o->text_len] = '\0';
	return 0;
}

/* the earliest stop string in the text that ends in its last `added` bytes; -1 if none */
static int64_t find_stop(const struct mt_gen_opts *o, const struct mt_gen_out *out, size_t added)
{
	int64_t best = -1;

	for (int i = 0; i < o->nstop; i++) {
		size_t sl = strlen(o->stop[i]), from;
		const char *hit;
		if (!sl || sl > out->text_len)
			continue;
		from = out->text_len - added >= sl - 1 ? out->text_len - added - (sl - 1) : 0;
		hit = memmem(out->text + from, out->text_len - from, o->stop[i], sl);
		if (hit && (best < 0 || hit - out->text < best))
			best = hit - out->text;
	}
	return best;
}

/* the log-probability of t at scored position `at` (lp's index), and the top k there */
static void score_at(const struct mt_gen *g, const struct mt_gen_opts *o, struct mt_gen_out *out, const float *z,
		     int at, int32_t t)
{
	int k = o->top_logprobs;

	out->lp[at] = (float)mt_sample_logprob(z, g->e->vocab, t);
	if (k > 0)
		mt_sample_top(z, g->e->vocab, k, out->top_ids + (int64_t)at * k, out->top_lp + (int64_t)at * k);
}

static int run_batch(struct mt_gen *g, const struct mt_gen_opts *o, struct mt_gen_out *outs, int nb, int64_t index0,
		     struct mt_err *err)
{
	struct mt_infer *e = g->e;
	const int32_t *toks[nb];
	int lens[nb], slots[nb], fed[nb];
	int32_t next[nb], ids[nb];
	double u[nb];
	float *lp[nb];
	int64_t V = e->padded_vocab;
	int nn = nb, k_top = o->logprobs && o->top_logprobs > 0 ? o->top_logprobs : 0;
	int steps = k_top && o->prompt_steps; /* the prompt through decode steps, a token each */
	/* the engine samples where the logits are, unless they are wanted here (log-probabilities) */
	int on_engine = e->ops->decode_sample && !o->logprobs, have_ids = 0;

	if (k_top > e->vocab)
		return mt_err_set(err, MT_EXIT_USAGE, "%d top log-probabilities asked for, the vocabulary has %lld ids", k_top,
				  (long long)e->vocab);
	for (int i = 0; i < nb; i++) {
		struct mt_gen_out *out = &outs[i];
		size_t npos = (size_t)(out->nprompt + o->max_tokens);
		free(out->ids);
		free(out->lp);
		free(out->top_ids);
		free(out->top_lp);
		out->top_ids = NULL;
		out->top_lp = NULL;
		out->ids = malloc((size_t)(o->max_tokens + 1) * sizeof(int32_t));
		out->lp = o->logprobs ? malloc(npos * sizeof(float)) : NULL;
		if (k_top) {
			out->top_ids = malloc(npos * (size_t)k_top * sizeof(int32_t));
			out->top_lp = malloc(npos * (size_t)k_top * sizeof(float));
		}
		if (!out->ids || (o->logprobs && !out->lp) || (k_top && (!out->top_ids || !out->top_lp)))
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
		out->n = 0;
		out->text_len = 0;
		if (append(out, "", 0, err))
			return -1;
		out->finish = MT_GEN_LENGTH;
		toks[i] = out->prompt_ids;
		lens[i] = steps ? 1 : out->nprompt;
		fed[i] = lens[i];
		lp[i] = out->lp;
		slots[i] = i;
	}
	if (e->ops->prefill(e, nb, NULL, toks, lens, g->logits, o->logprobs && !steps ? lp : NULL, err))
		return -1;
	if (o->max_tokens == 0 && !steps)
		return 0;
	/* logits row j belongs to sequence slots[j]; each step keeps the ones still going */
	for (;;) {
		int m = 0;
		for (int j = 0; j < nn; j++) {
			int k = slots[j];
			struct mt_gen_out *out = &outs[k];
			const float *z = g->logits + (int64_t)j * V;
			int32_t t;
			int done = 0;
			if (fed[k] < out->nprompt) { /* prompt_steps: the prompt's next token, scored */
				t = out->prompt_ids[fed[k]];
				score_at(g, o, out, z, fed[k] - 1, t);
				fed[k]++;
				done = fed[k] == out->nprompt && o->max_tokens == 0;
			} else if (o->max_tokens == 0) { /* prompt_steps with a one-token prompt */
				done = 1;
			} else {
				t = have_ids ? ids[j]
					     : mt_sample(&g->smp, z, &o->sp,
							 mt_sample_uniform(o->seed, (uint64_t)(index0 + k), (uint64_t)out->n));
				if (o->logprobs)
					score_at(g, o, out, z, out->nprompt - 1 + out->n, t);
				out->ids[out->n++] = t;
				if (t == g->eod) {
					out->finish = MT_GEN_EOD;
					done = 1;
				} else {
					char buf[32];
					const char *s;
					size_t sl = mt_gen_token_text(g->v, t, &s, buf);
					int64_t at;
					if (append(out, s, sl, err))
						return -1;
					if (o->nstop && (at = find_stop(o, out, sl)) >= 0) {
						out->text_len = (size_t)at;
						out->text[at] = '\0';
						out->finish = MT_GEN_STOP;
						done = 1;
					}
				}
				if (!done && out->n == o->max_tokens)
					done = 1;
			}
			if (!done) {
				slots[m] = k;
				next[m] = t;
				u[m] = mt_sample_uniform(o->seed, (uint64_t)(index0 + k), (uint64_t)out->n);
				m++;
			}
		}
		nn = m;
		if (!nn)
			break;
		have_ids = on_engine;
		if (have_ids ? e->ops->decode_sample(e, nn, slots, next, &o->sp, u, ids, err)
			     : e->ops->decode(e, nn, slots, next, g->logits, err))
			return -1;
	}
	return 0;
}

int mt_gen_run(struct mt_gen *g, const struct mt_gen_opts *o, struct mt_gen_out *outs, int n, int64_t index0,
	       struct mt_err *err)
{
	if (mt_sample_check(&o->sp, err) || mt_gen_check(g, o, outs, n, err))
		return -1;
	for (int b0 = 0; b0 < n; b0 += g->e->max_batch) {
		int nb = n - b0 < g->e->max_batch ? n - b0 : g->e->max_batch;
		if (run_batch(g, o, outs + b0, nb, index0 + b0, err))
			return -1;
	}
	return 0;
}
