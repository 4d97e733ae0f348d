/* openai.c: OpenAI's completions API and vLLM's tokenizer routes on the generation
 * loop (openai.h). */
#include "infer/openai.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/strbuf.h"
#include "infer/genapi.h"

void mt_openai_init(struct mt_openai *a, struct mt_gen *g, const char *model, uint64_t seed)
{
	memset(a, 0, sizeof(*a));
	a->g = g;
	snprintf(a->model, sizeof(a->model), "%s", model && *model ? model : "mt");
	a->seed = seed;
	a->created = (int64_t)time(NULL);
}

int mt_openai_owns(const char *url)
{
	return !strncmp(url, "/v1/", 4) || !strcmp(url, "/v1") || !strcmp(url, "/tokenize") ||
	       !strcmp(url, "/detokenize") || !strcmp(url, "/tokenizer_info");
}

char *mt_openai_error(int status, const char *message, const char *param, const char *code)
{
	json_t *e = json_object(), *j = json_object();
	char *s;

	json_object_set_new(e, "message", json_string(message));
	json_object_set_new(e, "type", json_string(status >= 500 ? "server_error" : "invalid_request_error"));
	json_object_set_new(e, "param", param ? json_string(param) : json_null());
	json_object_set_new(e, "code", code ? json_string(code) : json_null());
	json_object_set_new(j, "error", e);
	s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(j);
	return s;
}

static int fail(char **resp, int status, const char *param, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static int fail(char **resp, int status, const char *param, const char *code, const char *fmt, ...)
{
	char msg[600];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	free(*resp);
	*resp = mt_openai_error(status, msg, param, code);
	return status;
}

static char *dump(json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));

	json_decref(j);
	return s;
}

static json_t *model_json(const struct mt_openai *a)
{
	return json_pack("{s:s, s:s, s:I, s:s}", "id", a->model, "object", "model", "created", (json_int_t)a->created,
			 "owned_by", "mt");
}

/* characters (code points) in s[0..n): bytes that do not continue a UTF-8 sequence */
static int64_t chars(const char *s, size_t n)
{
	int64_t c = 0;

	for (size_t i = 0; i < n; i++)
		c += ((unsigned char)s[i] & 0xC0) != 0x80;
	return c;
}

static size_t token_text(const struct mt_gen *g, int32_t id, int first, const char **s, char buf[32])
{
	size_t n = mt_gen_token_text(g->v, id, s, buf);

	if (g->v->kind == MT_VOCAB_NULL && first && n) /* no space before the first id */
		(*s)++, n--;
	return n;
}

/* the value a JSON number or null must have; 0 when absent or null (*v untouched) */
static int number(json_t *req, const char *key, double lo, double hi, int lo_open, double *v, char **resp, int *status)
{
	json_t *j = json_object_get(req, key);
	double x;

	if (!j || json_is_null(j))
		return 0;
	x = json_number_value(j);
	if (!json_is_number(j) || !(lo_open ? x > lo : x >= lo) || !(x <= hi)) {
		*status = fail(resp, 400, key, NULL, "%s must be a number %s %g and at most %g, or null", key,
			       lo_open ? "greater than" : "from", lo, hi);
		return -1;
	}
	*v = x;
	return 0;
}

static int integer(json_t *req, const char *key, long long lo, long long hi, long long *v, char **resp, int *status)
{
	json_t *j = json_object_get(req, key);

	if (!j || json_is_null(j))
		return 0;
	if (!json_is_integer(j) || json_integer_value(j) < lo || json_integer_value(j) > hi) {
		*status = fail(resp, 400, key, NULL, "%s must be an integer from %lld to %lld, or null", key, lo, hi);
		return -1;
	}
	*v = json_integer_value(j);
	return 0;
}

/* prompts as a list of items, each a JSON string or a list of ids; *np set */
static int prompt_list(json_t *p, json_t **list, int *np, char **resp, int *status)
{
	size_t i;
	json_t *v;

	*list = NULL;
	if (json_is_string(p) || (json_is_array(p) && json_array_size(p) && json_is_integer(json_array_get(p, 0)))) {
		*list = json_pack("[O]", p);
	} else if (json_is_array(p) && json_array_size(p)) {
		*list = json_incref(p);
	} else {
		*status = fail(resp, 400, "prompt", NULL,
			       "prompt must be a string, a list of strings, a list of token ids or a list of lists of token ids%s",
			       json_is_array(p) ? ", not empty" : "");
		return -1;
	}
	*np = (int)json_array_size(*list);
	json_array_foreach(*list, i, v) {
		size_t k;
		json_t *t;
		if (json_is_string(v)) {
			if (!json_string_length(v)) {
				*status = fail(resp, 400, "prompt", NULL, "prompt %zu is empty", i);
				return -1;
			}
			continue;
		}
		if (!json_is_array(v) || !json_array_size(v)) {
			*status = fail(resp, 400, "prompt", NULL, "prompt %zu must be a non-empty string or list of token ids", i);
			return -1;
		}
		json_array_foreach(v, k, t)
			if (!json_is_integer(t)) {
				*status = fail(resp, 400, "prompt", NULL, "prompt %zu: item %zu is not a token id (an integer)", i, k);
				return -1;
			}
	}
	return 0;
}

/* prompt item -> ids in o (o zeroed) and its text in *text (bytes, malloc'd) */
static int prompt_encode(struct mt_gen *g, json_t *v, int i, struct mt_gen_out *o, struct mt_strbuf *text, char **resp,
			 int *status)
{
	struct mt_err err = { 0 };

	memset(o, 0, sizeof(*o));
	if (json_is_string(v)) {
		if (mt_gen_encode(&g->bpe, json_string_value(v), json_string_length(v), o, &err)) {
			*status = fail(resp, err.code == MT_EXIT_IO ? 500 : 400, "prompt", NULL, "prompt %d: %s", i, err.msg);
			return -1;
		}
		if (mt_strbuf_append(text, json_string_value(v), json_string_length(v)))
			goto oom;
		return 0;
	}
	o->nprompt = (int)json_array_size(v);
	if (!(o->prompt_ids = malloc((size_t)o->nprompt * sizeof(int32_t))))
		goto oom;
	for (int k = 0; k < o->nprompt; k++) {
		json_int_t id = json_integer_value(json_array_get(v, (size_t)k));
		const char *s;
		char b[32];
		size_t n;
		if (id < 0 || id >= g->e->vocab) {
			*status = fail(resp, 400, "prompt", NULL, "prompt %d: token id %lld is outside the model's vocabulary (0..%lld)", i,
				       (long long)id, (long long)g->e->vocab - 1);
			return -1;
		}
		o->prompt_ids[k] = (int32_t)id;
		n = token_text(g, (int32_t)id, k == 0, &s, b);
		if (mt_strbuf_append(text, s, n))
			goto oom;
	}
	return 0;
oom:
	*status = fail(resp, 500, NULL, NULL, "out of memory");
	return -1;
}

/* {"text": id's log-probability, ...} for the k most likely at position `at` and the chosen one */
static json_t *top_json(const struct mt_gen *g, const struct mt_gen_out *r, int k, int at, int32_t chosen, float chosen_lp)
{
	json_t *d = json_object();
	const char *s;
	char b[32];

	for (int q = 0; q < k; q++) {
		int32_t id = r->top_ids[(int64_t)at * k + q];
		size_t n = token_text(g, id, 0, &s, b);
		json_t *key = mt_genapi_bytes(s, n);
		if (key && !json_object_get(d, json_string_value(key)))
			json_object_set_new(d, json_string_value(key), json_real(r->top_lp[(int64_t)at * k + q]));
		json_decref(key);
	}
	{
		size_t n = token_text(g, chosen, 0, &s, b);
		json_t *key = mt_genapi_bytes(s, n);
		if (key && !json_object_get(d, json_string_value(key)))
			json_object_set_new(d, json_string_value(key), json_real(chosen_lp));
		json_decref(key);
	}
	return d;
}

static json_t *lp_value(float x)
{
	/* -inf (a token the model gives no mass) has no JSON form: the most negative double */
	return json_real(isfinite(x) ? (double)x : -1.7976931348623157e308);
}

/* one choice: text and logprobs */
static json_t *choice_json(const struct mt_gen *g, const struct mt_gen_out *r, const struct mt_strbuf *ptext, int index,
			   int echo, int logprobs, int steps)
{
	json_t *c = json_object(), *lp = NULL;
	struct mt_strbuf t = MT_STRBUF_INIT;
	int ngen = r->n - (r->n && r->ids[r->n - 1] == g->eod && r->finish == MT_GEN_EOD);

	if (echo)
		mt_strbuf_append(&t, ptext->s ? ptext->s : "", ptext->n);
	mt_strbuf_append(&t, r->text ? r->text : "", r->text_len);
	json_object_set_new(c, "text", mt_genapi_bytes(t.s ? t.s : "", t.n));
	json_object_set_new(c, "index", json_integer(index));
	if (logprobs >= 0) {
		json_t *toks = json_array(), *tlp = json_array(), *top = json_array(), *off = json_array();
		size_t at = 0; /* bytes of the choice's text before the token */
		const char *s;
		char b[32];
		if (echo)
			for (int p = 0; p < r->nprompt; p++) {
				int32_t id = r->prompt_ids[p];
				size_t n = token_text(g, id, p == 0, &s, b);
				json_array_append_new(toks, mt_genapi_bytes(s, n));
				json_array_append_new(off, json_integer(chars(t.s, at < t.n ? at : t.n)));
				at += n;
				if (p == 0) {
					json_array_append_new(tlp, json_null());
					json_array_append_new(top, json_null());
					continue;
				}
				json_array_append_new(tlp, lp_value(r->lp[p - 1]));
				json_array_append_new(top, steps ? top_json(g, r, logprobs, p - 1, id, r->lp[p - 1])
								 : top_json(g, r, 0, p - 1, id, r->lp[p - 1]));
			}
		for (int q = 0; q < ngen; q++) {
			int32_t id = r->ids[q];
			int at_lp = r->nprompt - 1 + q;
			size_t n = token_text(g, id, 0, &s, b);
			json_array_append_new(toks, mt_genapi_bytes(s, n));
			json_array_append_new(off, json_integer(chars(t.s, at < t.n ? at : t.n)));
			at += n;
			json_array_append_new(tlp, lp_value(r->lp[at_lp]));
			json_array_append_new(top, top_json(g, r, logprobs, at_lp, id, r->lp[at_lp]));
		}
		lp = json_object();
		json_object_set_new(lp, "tokens", toks);
		json_object_set_new(lp, "token_logprobs", tlp);
		json_object_set_new(lp, "top_logprobs", top);
		json_object_set_new(lp, "text_offset", off);
	}
	json_object_set_new(c, "logprobs", lp ? lp : json_null());
	json_object_set_new(c, "finish_reason", json_string(r->finish == MT_GEN_LENGTH ? "length" : "stop"));
	mt_strbuf_free(&t);
	return c;
}

static int completions(struct mt_openai *a, const char *body, size_t len, char **resp)
{
	struct mt_gen *g = a->g;
	json_error_t je;
	json_t *req = json_loadb(body, len, 0, &je), *v, *prompts = NULL, *out, *choices;
	struct mt_gen_opts o = { .max_tokens = 16, .sp = { .temperature = 1.0 } };
	struct mt_gen_out *res = NULL;
	struct mt_strbuf *ptext = NULL;
	const char **stop = NULL;
	struct mt_err err = { 0 };
	long long n = 1, max_tokens = 16, logprobs = -1, top_k = 0, seed;
	double temperature = 1, top_p = 1;
	int np = 0, status = 200, echo = 0, nres = 0;
	int64_t prompt_tokens = 0, completion_tokens = 0;
	char id[64];

	if (!req)
		return fail(resp, 400, NULL, NULL, "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line,
			    je.column);
	if (!json_is_object(req)) {
		status = fail(resp, 400, NULL, NULL, "the body must be a JSON object");
		goto done;
	}
	seed = (long long)a->seed;
	if ((v = json_object_get(req, "model")) && !json_is_string(v) && !json_is_null(v)) {
		status = fail(resp, 400, "model", NULL, "model must be a string");
		goto done;
	}
	if (!(v = json_object_get(req, "prompt"))) {
		status = fail(resp, 400, "prompt", NULL, "prompt is required");
		goto done;
	}
	if (prompt_list(v, &prompts, &np, resp, &status))
		goto done;
	if (integer(req, "max_tokens", 0, 1 << 24, &max_tokens, resp, &status) ||
	    integer(req, "n", 1, MT_OPENAI_MAX_CHOICES, &n, resp, &status) ||
	    integer(req, "logprobs", 0, MT_OPENAI_MAX_LOGPROBS, &logprobs, resp, &status) ||
	    integer(req, "top_k", -1, 1 << 30, &top_k, resp, &status) ||
	    integer(req, "seed", INT64_MIN, INT64_MAX, &seed, resp, &status) ||
	    number(req, "temperature", 0, 2, 0, &temperature, resp, &status) ||
	    number(req, "top_p", 0, 1, 1, &top_p, resp, &status))
		goto done;
	if ((v = json_object_get(req, "best_of")) && !json_is_null(v) &&
	    (!json_is_integer(v) || json_integer_value(v) != n)) {
		status = fail(resp, 400, "best_of", NULL, "best_of must equal n or be null: mt-generate returns every sample");
		goto done;
	}
	if ((v = json_object_get(req, "echo")) && !json_is_null(v)) {
		if (!json_is_boolean(v)) {
			status = fail(resp, 400, "echo", NULL, "echo must be a boolean");
			goto done;
		}
		echo = json_is_true(v);
	}
	if ((v = json_object_get(req, "stream")) && json_is_true(v)) {
		status = fail(resp, 400, "stream", NULL, "stream is not supported: ask without it for the whole answer");
		goto done;
	}
	if ((v = json_object_get(req, "suffix")) && !json_is_null(v)) {
		status = fail(resp, 400, "suffix", NULL, "suffix is not supported");
		goto done;
	}
	if ((v = json_object_get(req, "logit_bias")) && !json_is_null(v) && !(json_is_object(v) && !json_object_size(v))) {
		status = fail(resp, 400, "logit_bias", NULL, "logit_bias is not supported");
		goto done;
	}
	{
		static const char *const pen[] = { "presence_penalty", "frequency_penalty" };
		for (int k = 0; k < 2; k++)
			if ((v = json_object_get(req, pen[k])) && !json_is_null(v) &&
			    (!json_is_number(v) || json_number_value(v) != 0)) {
				status = fail(resp, 400, pen[k], NULL, "%s other than 0 is not supported", pen[k]);
				goto done;
			}
	}
	if ((v = json_object_get(req, "stop")) && !json_is_null(v)) {
		json_t *list = json_is_string(v) ? json_pack("[O]", v) : json_incref(v), *s;
		size_t i;
		if (!json_is_array(list) || json_array_size(list) > 16) {
			json_decref(list);
			status = fail(resp, 400, "stop", NULL, "stop must be a string or a list of at most 16 strings");
			goto done;
		}
		json_object_set_new(req, "stop", list); /* keeps the strings alive */
		stop = calloc(json_array_size(list) + 1, sizeof(*stop));
		json_array_foreach(list, i, s) {
			if (!json_is_string(s) || !json_string_length(s)) {
				status = fail(resp, 400, "stop", NULL, "stop[%zu] must be a non-empty string", i);
				goto done;
			}
			stop[i] = json_string_value(s);
		}
		o.stop = stop;
		o.nstop = (int)json_array_size(list);
	}
	if ((long long)np * n > MT_OPENAI_MAX_CHOICES) {
		status = fail(resp, 400, "n", NULL, "%d prompts x n %lld is more than the %d choices one request may ask for", np,
			      n, MT_OPENAI_MAX_CHOICES);
		goto done;
	}
	o.max_tokens = (int)max_tokens;
	o.sp.temperature = temperature;
	o.sp.top_k = top_k > 0 ? (int)top_k : 0;
	o.sp.top_p = top_p < 1 ? top_p : 0;
	if (o.sp.top_k > 1 && o.sp.top_p > 0) {
		status = fail(resp, 400, "top_k", NULL, "top_k and a top_p below 1 cannot be used together");
		goto done;
	}
	o.seed = (uint64_t)seed;
	o.logprobs = logprobs >= 0;
	o.top_logprobs = logprobs > 0 ? (int)logprobs : 0;
	o.prompt_steps = echo && logprobs > 0;
	if (o.top_logprobs > g->e->vocab)
		o.top_logprobs = (int)g->e->vocab;
	/* every prompt encoded and checked before any runs; prompt i's c-th sample is i*n + c */
	nres = np * (int)n;
	res = calloc((size_t)nres, sizeof(*res));
	ptext = calloc((size_t)np, sizeof(*ptext));
	if (!res || !ptext) {
		status = fail(resp, 500, NULL, NULL, "out of memory");
		goto done;
	}
	for (int i = 0; i < np; i++) {
		if (prompt_encode(g, json_array_get(prompts, (size_t)i), i, &res[i * n], &ptext[i], resp, &status))
			goto done;
		prompt_tokens += res[i * n].nprompt;
		for (int c = 1; c < n; c++) {
			struct mt_gen_out *d = &res[i * n + c];
			d->nprompt = res[i * n].nprompt;
			if (!(d->prompt_ids = malloc((size_t)d->nprompt * sizeof(int32_t)))) {
				status = fail(resp, 500, NULL, NULL, "out of memory");
				goto done;
			}
			memcpy(d->prompt_ids, res[i * n].prompt_ids, (size_t)d->nprompt * sizeof(int32_t));
		}
	}
	for (int i = 0; i < np; i++)
		if ((int64_t)res[i * n].nprompt + o.max_tokens > g->e->max_len) {
			status = fail(resp, 400, "max_tokens", "context_length_exceeded",
				      "this model's maximum context length is %d tokens, however you requested %lld tokens "
				      "(%d in prompt %d, %d for the completion)",
				      g->e->max_len, (long long)res[i * n].nprompt + o.max_tokens, res[i * n].nprompt, i,
				      o.max_tokens);
			goto done;
		}
	if (mt_gen_run(g, &o, res, nres, 0, &err)) {
		status = err.code == MT_EXIT_IO || err.code == 0 ? fail(resp, 500, NULL, NULL, "%s", err.msg)
								 : fail(resp, 400, NULL, NULL, "%s", err.msg);
		goto done;
	}
	choices = json_array();
	for (int k = 0; k < nres; k++) {
		json_array_append_new(choices, choice_json(g, &res[k], &ptext[k / n], k, echo, (int)logprobs, o.prompt_steps));
		completion_tokens += res[k].n;
	}
	a->served++;
	snprintf(id, sizeof(id), "cmpl-%llx%06llx", (unsigned long long)a->created, (unsigned long long)a->served);
	out = json_object();
	json_object_set_new(out, "id", json_string(id));
	json_object_set_new(out, "object", json_string("text_completion"));
	json_object_set_new(out, "created", json_integer((json_int_t)time(NULL)));
	json_object_set_new(out, "model", json_string(a->model));
	json_object_set_new(out, "choices", choices);
	json_object_set_new(out, "usage", json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)prompt_tokens,
						    "completion_tokens", (json_int_t)completion_tokens, "total_tokens",
						    (json_int_t)(prompt_tokens + completion_tokens)));
	free(*resp);
	*resp = dump(out);
done:
	if (res)
		for (int k = 0; k < nres; k++)
			mt_gen_out_free(&res[k]);
	free(res);
	if (ptext)
		for (int i = 0; i < np; i++)
			mt_strbuf_free(&ptext[i]);
	free(ptext);
	free(stop);
	json_decref(prompts);
	json_decref(req);
	if (!*resp)
		status = fail(resp, 500, NULL, NULL, "out of memory");
	return status;
}

/* vLLM's POST /tokenize {"prompt": text} -> {"tokens", "count", "max_model_len"}; a
 * prompt that is exactly the end-of-document token's text gives its id, as the
 * Hugging Face tokenizers give a special token's */
static int tokenize(struct mt_openai *a, json_t *req, char **resp)
{
	struct mt_gen *g = a->g;
	json_t *p = json_object_get(req, "prompt"), *ids;
	struct mt_ids t = { 0 };
	struct mt_err err = { 0 };
	const char *s;
	char b[32];
	size_t n;

	if (!json_is_string(p))
		return fail(resp, 400, "prompt", NULL, "prompt must be a string");
	n = g->eod >= 0 ? mt_gen_token_text(g->v, g->eod, &s, b) : 0;
	if (n && g->v->kind != MT_VOCAB_NULL && json_string_length(p) == n && !memcmp(s, json_string_value(p), n)) {
		if (mt_ids_push(&t, g->eod))
			return fail(resp, 500, NULL, NULL, "out of memory");
	} else if (mt_bpe_encode(&g->bpe, json_string_value(p), json_string_length(p), &t, &err)) {
		mt_ids_free(&t);
		return fail(resp, 400, "prompt", NULL, "%s", err.msg);
	}
	ids = json_array();
	for (size_t i = 0; i < t.n; i++)
		json_array_append_new(ids, json_integer(t.a[i]));
	*resp = dump(json_pack("{s:o, s:I, s:i}", "tokens", ids, "count", (json_int_t)t.n, "max_model_len", g->e->max_len));
	mt_ids_free(&t);
	return 200;
}

static int detokenize(struct mt_openai *a, json_t *req, char **resp)
{
	struct mt_gen *g = a->g;
	json_t *ids = json_object_get(req, "tokens"), *v;
	struct mt_strbuf t = MT_STRBUF_INIT;
	size_t i;

	if (!json_is_array(ids))
		return fail(resp, 400, "tokens", NULL, "tokens must be a list of token ids");
	json_array_foreach(ids, i, v) {
		const char *s;
		char b[32];
		size_t n;
		if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= g->e->vocab) {
			mt_strbuf_free(&t);
			return fail(resp, 400, "tokens", NULL, "tokens[%zu] is not a token id of the model (0..%lld)", i,
				    (long long)g->e->vocab - 1);
		}
		n = token_text(g, (int32_t)json_integer_value(v), i == 0, &s, b);
		if (mt_strbuf_append(&t, s, n)) {
			mt_strbuf_free(&t);
			return fail(resp, 500, NULL, NULL, "out of memory");
		}
	}
	*resp = dump(json_pack("{s:o}", "prompt", mt_genapi_bytes(t.s ? t.s : "", t.n)));
	mt_strbuf_free(&t);
	return 200;
}

static int tokenizer_info(struct mt_openai *a, char **resp)
{
	struct mt_gen *g = a->g;
	json_t *j = json_object();
	const char *s;
	char b[32];

	if (g->eod >= 0 && g->v->kind != MT_VOCAB_NULL) {
		size_t n = mt_gen_token_text(g->v, g->eod, &s, b);
		json_object_set_new(j, "eos_token", mt_genapi_bytes(s, n));
	} else {
		json_object_set_new(j, "eos_token", json_null());
	}
	json_object_set_new(j, "bos_token", json_null());
	json_object_set_new(j, "pad_token", json_null());
	json_object_set_new(j, "model_max_length", json_integer(g->e->max_len));
	json_object_set_new(j, "tokenizer_class", json_string("mt"));
	*resp = dump(j);
	return 200;
}

int mt_openai_handle(struct mt_openai *a, const char *method, const char *url, const char *body, size_t len,
		     char **resp)
{
	int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");

	*resp = NULL;
	if (!strcmp(url, "/v1/completions") || !strcmp(url, "/tokenize") || !strcmp(url, "/detokenize")) {
		json_error_t je;
		json_t *req;
		int status;
		if (!post)
			return fail(resp, 405, NULL, NULL, "method %.20s not allowed on %s: use POST", method, url);
		if (!strcmp(url, "/v1/completions"))
			return completions(a, body, len, resp);
		if (!(req = json_loadb(body, len, 0, &je)) || !json_is_object(req)) {
			json_decref(req);
			return fail(resp, 400, NULL, NULL, "the body must be a JSON object");
		}
		status = !strcmp(url, "/tokenize") ? tokenize(a, req, resp) : detokenize(a, req, resp);
		json_decref(req);
		return status;
	}
	if (!strcmp(url, "/v1/models") || !strncmp(url, "/v1/models/", 11) || !strcmp(url, "/tokenizer_info")) {
		if (!get)
			return fail(resp, 405, NULL, NULL, "method %.20s not allowed on %s: use GET", method, url);
		if (!strcmp(url, "/tokenizer_info"))
			return tokenizer_info(a, resp);
		if (!strcmp(url, "/v1/models")) {
			*resp = dump(json_pack("{s:s, s:[o]}", "object", "list", "data", model_json(a)));
			return 200;
		}
		if (strcmp(url + 11, a->model))
			return fail(resp, 404, "model", "model_not_found", "the model '%.200s' does not exist: this server has '%s'",
				    url + 11, a->model);
		*resp = dump(model_json(a));
		return 200;
	}
	return fail(resp, 404, NULL, NULL, "invalid URL (%.20s %.200s): the routes are POST /v1/completions and GET /v1/models",
		    method, url);
}
