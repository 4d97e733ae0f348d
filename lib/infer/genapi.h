/* genapi.h: Megatron's text generation request and response (PUT /api), as JSON, and
 * mt-generate's own JSON line per prompt.
 *
 * A request is checked completely before anything runs: "prompts" a list of 1..128
 * non-empty strings; "tokens_to_generate" an integer >= 0 (default 64); "logprobs" a
 * boolean (must be true when tokens_to_generate is 0); "temperature" a number 0..100
 * (default 1; Megatron refuses 0, mt takes it as greedy); "top_k" an integer 0..1000;
 * "top_p" a number 0..1, not together with top_k > 1; the keys Megatron validates
 * without using them (top_p_decay, top_p_bound, add_BOS, stop_on_eol,
 * stop_on_double_eol, prevent_newline_after_colon, stop_token, length_penalty) are type
 * checked and ignored, except "random_seed" (an integer >= 0), which mt uses as the
 * sampling seed (default: the server's --seed); "stop", a list of strings, is mt's
 * addition; the retired keys max_len, sentences and beam_width are refused. Every
 * problem is HTTP 400 with {"error": "..."}; Megatron answers some of them with 200,
 * mt does not. The response is Megatron's: {"text": [prompt + generated text],
 * "segments": [[each token's text]], "tokens": [[prompt and generated ids]],
 * "logprobs": [[log p of every token after the first]] (only when asked)}. */
#ifndef MT_GENAPI_H
#define MT_GENAPI_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "infer/generate.h"

#define MT_GENAPI_MAX_PROMPTS 128

/* One PUT /api body: returns the HTTP status (200, 400, or 500 when the engine
 * fails) and sets *resp to the JSON body (malloc'd). default_seed: when the request
 * has no random_seed. */
int mt_genapi_handle(struct mt_gen *g, const char *body, size_t len, uint64_t default_seed, char **resp);

/* JSON string of bytes that may not be valid UTF-8 (ill-formed parts become U+FFFD). */
json_t *mt_genapi_bytes(const char *s, size_t n);

/* mt-generate's JSON line for one prompt: {"prompt", "text" (generated), "tokens"
 * (generated ids), "prompt_tokens", "finish_reason" (length, eod or stop), and with
 * logprobs "logprobs" (of the generated tokens) and "prompt_logprobs" (of the prompt's
 * tokens after the first)}. */
json_t *mt_genapi_result(const struct mt_gen_out *o, const char *prompt, size_t prompt_len, int logprobs);

#endif
