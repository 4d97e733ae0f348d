/* genapi.c: Megatron's PUT /api request and response, and mt-generate's JSON lines
 * (genapi.h). */
#include "infer/genapi.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"

json_t *mt_genapi_bytes(const char *s, size_t n)
{
	size_t replaced;
	char *fixed;
	json_t *j;

	if (mt_utf8_valid_prefix(s, n) == n)
		return json_stringn(s, n);
	fixed = malloc(3 * n + 1);
	if (!fixed)
		return NULL;
	n = mt_utf8_repair(s, n, fixed, &replaced);
	j = json_stringn(fixed, n);
	free(fixed);
	return j;
}

static json_t *ids_json(const int32_t *a, int n)
{
	json_t *j = json_array();

	for (int i = 0; i < n; i++)
		json_array_append_new(j, json_integer(a[i]));
	return j;
}

static json_t *floats_json(const float *a, int n)
{
	json_t *j = json_array();

	/* -inf (a token the model gives no mass) has no JSON form: the most negative double */
	for (int i = 0; i < n; i++)
		json_array_append_new(j, json_real(isfinite(a[i]) ? (double)a[i] : -1.7976931348623157e308));
	return j;
}

json_t *mt_genapi_result(const struct mt_gen_out *o, const char *prompt, size_t prompt_len, int logprobs)
{
	json_t *j = json_object();

	json_object_set_new(j, "prompt", mt_genapi_bytes(prompt, prompt_len));
	json_object_set_new(j, "text", mt_genapi_bytes(o->text ? o->text : "", o->text_len));
	json_object_set_new(j, "tokens", ids_json(o->ids, o->n));
	json_object_set_new(j, "prompt_tokens", ids_json(o->prompt_ids, o->nprompt));
	json_object_set_new(j, "finish_reason", json_string(mt_gen_finish_name(o->finish)));
	if (logprobs) {
		json_object_set_new(j, "logprobs", floats_json(o->lp + o->nprompt - 1, o->n));
		json_object_set_new(j, "prompt_logprobs", floats_json(o->lp, o->nprompt - 1));
	}
	return j;
}

static int bad(char **resp, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(char **resp, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	json_t *j;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	j = json_pack("{s:s}", "error", msg);
	*resp = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	return 400;
}

static int internal(char **resp, const char *msg)
{
	json_t *j = json_pack("{s:s}", "error", msg);

	*resp = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	return 500;
}

static int is_int(json_t *v) { return json_is_integer(v); }
static int is_num(json_t *v) { return json_is_integer(v) || json_is_real(v); }

/* keys Megatron checks the type of and then drops */
static const struct { const char *key; char type; double lo, hi; } ignored[] = {
	{ "top_p_decay", 'n', 0, 1 }, { "top_p_bound", 'n', 0, 1 }, { "add_BOS", 'b', 0, 0 },
	{ "stop_on_eol", 'b', 0, 0 }, { "stop_on_double_eol", 'b', 0, 0 }, { "prevent_newline_after_colon", 'b', 0, 0 },
	{ "stop_token", 'i', 0, 2147483647.0 }, { "length_penalty", 'n', -1e300, 1e300 },
};

int mt_genapi_handle(struct mt_gen *g, const char *body, size_t len, uint64_t default_seed, char **resp)
{
	json_error_t je;
	json_t *req = json_loadb(body, len, 0, &je), *v, *prompts, *out = NULL;
	struct mt_gen_opts o = { .max_tokens = 64, .sp = { .temperature = 1.0, .top_k = 0, .top_p = 0 } };
	struct mt_gen_out *res = NULL;
	const char **stop = NULL;
	struct mt_err err = { 0 };
	int np = 0, status = 200;
	size_t i;

	o.seed = default_seed;
	*resp = NULL;
	if (!req)
		return bad(resp, "the body is not JSON: %s (line %d, column %d)", je.text, je.line, je.column);
	if (!json_is_object(req)) {
		status = bad(resp, "the body must be a JSON object");
		goto done;
	}
	if (json_object_get(req, "max_len") || json_object_get(req, "sentences") || json_object_get(req, "beam_width")) {
		status = bad(resp, "max_len, sentences and beam_width are no longer supported: use tokens_to_generate and prompts");
		goto done;
	}
	prompts = json_object_get(req, "prompts");
	if (!prompts) {
		status = bad(resp, "prompts argument required");
		goto done;
	}
	if (!json_is_array(prompts)) {
		status = bad(resp, "prompts is not a list of strings");
		goto done;
	}
	np = (int)json_array_size(prompts);
	if (np == 0) {
		status = bad(resp, "prompts is empty");
		goto done;
	}
	if (np > MT_GENAPI_MAX_PROMPTS) {
		status = bad(resp, "at most %d prompts in one request (got %d)", MT_GENAPI_MAX_PROMPTS, np);
		goto done;
	}
	json_array_foreach(prompts, i, v)
		if (!json_is_string(v) || json_string_length(v) == 0) {
			status = bad(resp, "prompts[%zu] is %s", i, json_is_string(v) ? "empty" : "not a string");
			goto done;
		}
	if ((v = json_object_get(req, "tokens_to_generate"))) {
		if (!is_int(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000000) {
			status = bad(resp, "tokens_to_generate must be an integer greater than or equal to 0");
			goto done;
		}
		o.max_tokens = (int)json_integer_value(v);
	}
	if ((v = json_object_get(req, "logprobs"))) {
		if (!json_is_boolean(v)) {
			status = bad(resp, "logprobs must be a boolean value");
			goto done;
		}
		o.logprobs = json_is_true(v);
	}
	if (o.max_tokens == 0 && !o.logprobs) {
		status = bad(resp, "tokens_to_generate=0 implies logprobs should be true");
		goto done;
	}
	if ((v = json_object_get(req, "temperature"))) {
		if (!is_num(v) || !(json_number_value(v) >= 0 && json_number_value(v) <= 100)) {
			status = bad(resp, "temperature must be a number from 0 (greedy) to 100");
			goto done;
		}
		o.sp.temperature = json_number_value(v);
	}
	if ((v = json_object_get(req, "top_k"))) {
		if (!is_int(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000) {
			status = bad(resp, "top_k must be an integer from 0 to 1000");
			goto done;
		}
		o.sp.top_k = (int)json_integer_value(v);
	}
	if ((v = json_object_get(req, "top_p"))) {
		if (!is_num(v) || !(json_number_value(v) >= 0 && json_number_value(v) <= 1)) {
			status = bad(resp, "top_p must be a number from 0 to 1");
			goto done;
		}
		o.sp.top_p = json_number_value(v);
	}
	if (o.sp.top_k > 0 && o.sp.top_p > 0) {
		status = bad(resp, "cannot set both top_k and top_p");
		goto done;
	}
	if ((v = json_object_get(req, "random_seed"))) {
		if (!is_int(v) || json_integer_value(v) < 0) {
			status = bad(resp, "random_seed must be a non-negative integer");
			goto done;
		}
		o.seed = (uint64_t)json_integer_value(v);
	}
	for (size_t k = 0; k < sizeof(ignored) / sizeof(ignored[0]); k++) {
		char t = ignored[k].type;
		if (!(v = json_object_get(req, ignored[k].key)))
			continue;
		if ((t == 'b' && !json_is_boolean(v)) || (t == 'i' && !is_int(v)) || (t == 'n' && !is_num(v)) ||
		    (t != 'b' && !(json_number_value(v) >= ignored[k].lo && json_number_value(v) <= ignored[k].hi))) {
			status = bad(resp, "%s must be %s", ignored[k].key,
				     t == 'b' ? "a boolean" : t == 'i' ? "a non-negative integer" : "a number in range");
			goto done;
		}
	}
	if ((v = json_object_get(req, "stop"))) {
		json_t *s;
		if (!json_is_array(v) || json_array_size(v) > 16) {
			status = bad(resp, "stop must be a list of at most 16 strings");
			goto done;
		}
		stop = calloc(json_array_size(v) + 1, sizeof(*stop));
		json_array_foreach(v, i, s) {
			if (!json_is_string(s) || json_string_length(s) == 0) {
				status = bad(resp, "stop[%zu] must be a non-empty string", i);
				goto done;
			}
			stop[i] = json_string_value(s);
		}
		o.stop = stop;
		o.nstop = (int)json_array_size(v);
	}
	/* tokenize every prompt and check they fit before running any */
	res = calloc((size_t)np, sizeof(*res));
	if (!res) {
		status = internal(resp, "out of memory");
		goto done;
	}
	json_array_foreach(prompts, i, v)
		if (mt_gen_encode(&g->bpe, json_string_value(v), json_string_length(v), &res[i], &err)) {
			status = err.code == MT_EXIT_IO ? internal(resp, err.msg) : bad(resp, "prompts[%zu]: %s", i, err.msg);
			goto done;
		}
	if (mt_gen_check(g, &o, res, np, &err)) {
		status = bad(resp, "%s", err.msg);
		goto done;
	}
	if (mt_gen_run(g, &o, res, np, 0, &err)) {
		status = err.code == MT_EXIT_USAGE ? bad(resp, "%s", err.msg) : internal(resp, err.msg);
		goto done;
	}
	{
		json_t *text = json_array(), *segs = json_array(), *toks = json_array(), *lps = json_array();
		out = json_object();
		for (int k = 0; k < np; k++) {
			struct mt_gen_out *r = &res[k];
			const char *p = json_string_value(json_array_get(prompts, (size_t)k));
			size_t pl = json_string_length(json_array_get(prompts, (size_t)k));
			char *full = malloc(pl + r->text_len + 1);
			json_t *seg = json_array(), *all = json_array();
			memcpy(full, p, pl);
			memcpy(full + pl, r->text ? r->text : "", r->text_len);
			json_array_append_new(text, mt_genapi_bytes(full, pl + r->text_len));
			free(full);
			for (int t = 0; t < r->nprompt + r->n; t++) {
				int32_t id = t < r->nprompt ? r->prompt_ids[t] : r->ids[t - r->nprompt];
				char buf[32];
				const char *s;
				size_t sl = mt_gen_token_text(g->v, id, &s, buf);
				if (g->v->kind == MT_VOCAB_NULL && t == 0)
					s++, sl--; /* no space before the first id */
				json_array_append_new(seg, mt_genapi_bytes(s, sl));
				json_array_append_new(all, json_integer(id));
			}
			json_array_append_new(segs, seg);
			json_array_append_new(toks, all);
			if (o.logprobs)
				json_array_append_new(lps, floats_json(r->lp, r->nprompt - 1 + r->n));
		}
		json_object_set_new(out, "text", text);
		json_object_set_new(out, "segments", segs);
		json_object_set_new(out, "tokens", toks);
		if (o.logprobs)
			json_object_set_new(out, "logprobs", lps);
		else
			json_decref(lps);
		*resp = json_dumps(out, JSON_COMPACT | JSON_REAL_PRECISION(9));
		json_decref(out);
	}
done:
	if (res)
		for (int k = 0; k < np; k++)
			mt_gen_out_free(&res[k]);
	free(res);
	free(stop);
	json_decref(req);
	if (!*resp)
		status = internal(resp, "out of memory");
	return status;
}
