/* generate.h: text generation from prompts, on an inference engine (infer.h).
 *
 * Prompts are tokenized, checked to fit (prompt + tokens to generate within the
 * engine's length, as Megatron limits them to max_position_embeddings) and run in
 * batches of up to the engine's max_batch: one prefill of the batch's prompts together,
 * then one decode step a token for the prompts still going. A prompt stops at its
 * max_tokens-th token, at the end-of-document token (kept in the ids and
 * log-probabilities, left out of the text) or when its generated text contains a stop
 * string (the text is cut before it; the ids keep the token that completed it). Each
 * prompt's random numbers come from (seed, its index, the step) (sample.h), so results
 * do not depend on the batching. Where the engine has decode_sample and no
 * log-probabilities are asked for, the engine chooses the tokens of the decode steps
 * itself with the same numbers (the GPU's: only ids come back); the first token of each
 * prompt is sampled here from the prefill's logits.
 *
 * For the OpenAI endpoint's logprobs, the k most likely ids at each scored position
 * (top_logprobs); with prompt_steps the prompt goes in one token at a time through the
 * decode step instead of one prefill, so that its positions have them too (echo). This
 * file holds no HTTP and no output format. */
#ifndef MT_GENERATE_H
#define MT_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "text/bpe.h"
#include "base/err.h"
#include "infer/infer.h"
#include "infer/sample.h"
#include "text/tokenizer.h"

enum mt_gen_finish { MT_GEN_LENGTH, MT_GEN_EOD, MT_GEN_STOP };

struct mt_gen_opts {
	int max_tokens;              /* Megatron's tokens_to_generate; may be 0 */
	struct mt_sample_params sp;
	uint64_t seed;
	int logprobs;                /* log-probabilities of the prompt's tokens after the first and the generated ones */
	const char *const *stop;     /* stop strings */
	int nstop;
	int top_logprobs;            /* k > 0 (with logprobs): the k most likely ids at each scored position */
	int prompt_steps;            /* with top_logprobs: the prompt's positions too, fed one token a step */
};

struct mt_gen_out {
	int32_t *prompt_ids;
	int nprompt;
	int32_t *ids;                /* generated */
	int n;
	float *lp;                   /* logprobs: nprompt - 1 + n values, prompt's then generated */
	int32_t *top_ids;            /* top_logprobs k: k ids a position, positions as lp (the prompt's */
	float *top_lp;               /* only with prompt_steps), and their log-probabilities */
	char *text;                  /* generated text, NUL-terminated (bytes; may be invalid UTF-8) */
	size_t text_len, text_cap;
	enum mt_gen_finish finish;
};

struct mt_gen {
	struct mt_infer *e;
	const struct mt_vocab *v;
	struct mt_bpe bpe;
	struct mt_sampler smp;
	float *logits;               /* [max_batch][padded vocab] */
	int32_t eod;
};

int mt_gen_init(struct mt_gen *g, struct mt_infer *e, const struct mt_tokenizer *tok, struct mt_err *err);
void mt_gen_free(struct mt_gen *g);

/* Tokenize a prompt into o (o zeroed first). An empty prompt (no tokens) is an error. */
int mt_gen_encode(struct mt_bpe *bpe, const char *prompt, size_t len, struct mt_gen_out *o, struct mt_err *err);

/* Check that n encoded prompts fit with o->max_tokens; the message names the prompt
 * by its number (from 0). */
int mt_gen_check(const struct mt_gen *g, const struct mt_gen_opts *o, const struct mt_gen_out *outs, int n,
		 struct mt_err *err);

/* Generate for n encoded prompts; index0 is the first one's index for the random
 * numbers (prompt i uses index0 + i). */
int mt_gen_run(struct mt_gen *g, const struct mt_gen_opts *o, struct mt_gen_out *outs, int n, int64_t index0,
	       struct mt_err *err);

/* The text of one token (special tokens give their text); NULL-tokenizer ids are
 * written in decimal after a space. Returns the length written to buf (< 32) or a
 * pointer into the vocabulary through *s. */
size_t mt_gen_token_text(const struct mt_vocab *v, int32_t id, const char **s, char buf[32]);

const char *mt_gen_finish_name(enum mt_gen_finish f);
void mt_gen_out_free(struct mt_gen_out *o);

#endif
