/* openai.h: OpenAI's completions API on the generation loop (generate.h), the routes
 * that lm-evaluation-harness's local-completions model and OpenAI's own clients call:
 *
 *   POST /v1/completions   prompt (a string, a list of strings, a list of token ids or a
 *                          list of such lists), max_tokens (default 16, 0 allowed),
 *                          temperature (0..2, default 1; 0 greedy), top_p (0 < p <= 1),
 *                          top_k (vLLM's extension), n, seed, stop (a string or a list),
 *                          logprobs (0..20), echo; the answer is OpenAI's "text_completion"
 *                          object. Choice index i*n + c is prompt i's c-th sample, drawn
 *                          with random index i*n + c (sample.h), so a seed repeats it.
 *   GET  /v1/models        the one served model; GET /v1/models/ID that model or 404
 *   POST /tokenize, POST /detokenize, GET /tokenizer_info
 *                          vLLM's tokenizer routes, which lm-evaluation-harness finds and
 *                          uses instead of loading a tokenizer of its own
 *
 * Logprobs as OpenAI's legacy completions give them: tokens (each token's text),
 * token_logprobs (null for the first token of an echoed prompt), top_logprobs (per
 * position the `logprobs` most likely tokens and the chosen one, by text) and text_offset
 * (characters before each token in the choice's text). With echo and logprobs > 0 the
 * prompt goes through the decode step a token at a time, so the chosen token's value and
 * the alternatives come from the same logits (lm-eval's is_greedy compares them); a final
 * end-of-document token is left out of the lists as it is out of the text.
 *
 * Every error is OpenAI's shape, {"error": {"message", "type", "param", "code"}}: 400
 * invalid_request_error for a bad request (param names the field), 404 for an unknown
 * path or model, 405 for a wrong method, 413 for a body over the server's limit, 500
 * server_error when the engine fails. Unknown request fields are ignored, as vLLM
 * ignores them; streaming, suffix, logit_bias and penalties other than 0 are refused.
 * This file holds no HTTP: genserver.c routes the paths mt_openai_owns claims here. */
#ifndef MT_OPENAI_H
#define MT_OPENAI_H

#include <stddef.h>
#include <stdint.h>

#include "infer/generate.h"

#define MT_OPENAI_MAX_CHOICES 256 /* prompts x n in one request */
#define MT_OPENAI_MAX_LOGPROBS 20

struct mt_openai {
	struct mt_gen *g;
	char model[256];       /* the served model's id */
	uint64_t seed;         /* when a request has no seed */
	int64_t created;       /* unix time the server started */
	uint64_t served;       /* requests answered, for completion ids */
};

void mt_openai_init(struct mt_openai *a, struct mt_gen *g, const char *model, uint64_t seed);

/* 1 when url is one of this file's paths (anything under /v1/ and vLLM's tokenizer
 * routes), whatever the method. */
int mt_openai_owns(const char *url);

/* One request: returns the HTTP status and sets *resp to the JSON body (malloc'd). */
int mt_openai_handle(struct mt_openai *a, const char *method, const char *url, const char *body, size_t len,
		     char **resp);

/* An error body in OpenAI's shape (malloc'd); param and code may be NULL. */
char *mt_openai_error(int status, const char *message, const char *param, const char *code);

#endif
