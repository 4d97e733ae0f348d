/* evalchoice.c: multiple-choice tasks as lm-evaluation-harness scores them (see
 * evalchoice.h). */
#include "eval/evalchoice.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"
#include "base/utf8.h"
#include "text/zeroshot.h"

/* one choice of one question: its tokens and, once scored, its log-likelihood */
struct cand {
	int32_t *ctx, *cont;
	int64_t nctx, ncont;
	double len;     /* len(choice) in characters */
	double ll;
};

/* s.replace(from, to), Python's: non-overlapping, left to right */
static int replace(struct mt_strbuf *s, const char *from, const char *to)
{
	struct mt_strbuf o = MT_STRBUF_INIT;
	size_t fl = strlen(from), i = 0;

	if (mt_strbuf_appends(&o, ""))
		return -1;
	while (i < s->n) {
		if (i + fl <= s->n && !memcmp(s->s + i, from, fl)) {
			if (mt_strbuf_appends(&o, to))
				goto oom;
			i += fl;
		} else {
			if (mt_strbuf_append(&o, s->s + i, 1))
				goto oom;
			i++;
		}
	}
	mt_strbuf_free(s);
	*s = o;
	return 0;
oom:
	mt_strbuf_free(&o);
	return -1;
}

int mt_evalchoice_hellaswag_text(const char *s, size_t n, char **out, size_t *outn)
{
	struct mt_strbuf a = MT_STRBUF_INIT, b = MT_STRBUF_INIT;
	size_t beg, len, i = 0;

	/* text.strip() */
	mt_zs_strip(s, n, &beg, &len);
	if (mt_strbuf_append(&a, s + beg, len) || mt_strbuf_appends(&a, "") || replace(&a, " [title]", ". "))
		goto oom;
	/* re.sub("\\[.*?\\]", "", text): '.' stops at a newline */
	if (mt_strbuf_appends(&b, ""))
		goto oom;
	while (i < a.n) {
		if (a.s[i] == '[') {
			size_t j = i + 1;
			while (j < a.n && a.s[j] != ']' && a.s[j] != '\n')
				j++;
			if (j < a.n && a.s[j] == ']') {
				i = j + 1;
				continue;
			}
		}
		if (mt_strbuf_append(&b, a.s + i, 1))
			goto oom;
		i++;
	}
	if (replace(&b, "  ", " "))
		goto oom;
	mt_strbuf_free(&a);
	*out = mt_strbuf_detach(&b, outn);
	return 0;
oom:
	mt_strbuf_free(&a);
	mt_strbuf_free(&b);
	return -1;
}

static double chars(const char *s, size_t n)
{
	double c = 0;

	for (size_t i = 0; i < n; i++)
		c += ((unsigned char)s[i] & 0xC0) != 0x80;
	return c;
}

static int encode(const struct mt_evaltext *x, const char *s, size_t n, struct mt_ids *out, const char *where,
		  struct mt_err *err)
{
	out->n = 0;
	if (mt_utf8_valid_prefix(s, n) != n)
		return mt_err_set(err, MT_EXIT_DATA, "%s: not valid UTF-8", where);
	if (mt_bpe_encode(x->bpe, s, n, out, err))
		return mt_err_prefix(err, "%s", where);
	return 0;
}

static int32_t *dup_ids(const int32_t *a, int64_t n)
{
	int32_t *p = malloc((size_t)(n ? n : 1) * sizeof(*p));

	if (p && n)
		memcpy(p, a, (size_t)n * sizeof(*p));
	return p;
}

/* the label as an index: an integer or a string of digits */
static int label_index(json_t *v, int64_t *g)
{
	if (json_is_integer(v)) {
		*g = json_integer_value(v);
		return 0;
	}
	if (json_is_string(v) && json_string_length(v)) {
		char *end;
		long long k = strtoll(json_string_value(v), &end, 10);
		if (!*end) {
			*g = k;
			return 0;
		}
	}
	return -1;
}

static int is_str(json_t *o, const char *k)
{
	return json_is_string(json_object_get(o, k));
}

static const char *sv(json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

static size_t sl(json_t *o, const char *k)
{
	return json_string_length(json_object_get(o, k));
}

/* One question's context, choices (a new JSON array of strings) and gold index. */
static int question(json_t *j, const char *where, struct mt_strbuf *ctx, json_t **choices, int64_t *gold, const char **form,
		    struct mt_err *err)
{
	json_t *ch = NULL, *v;
	size_t i;

	*choices = NULL;
	mt_strbuf_reset(ctx);
	if (mt_strbuf_appends(ctx, ""))
		goto oom;
	if (json_is_array(json_object_get(j, "endings")) && !json_object_get(j, "context")) {
		/* HellaSwag */
		json_t *e = json_object_get(j, "endings");
		struct mt_strbuf raw = MT_STRBUF_INIT;
		char *t;
		size_t tn;
		*form = "hellaswag";
		if (is_str(j, "ctx_a") && is_str(j, "ctx_b") && is_str(j, "activity_label")) {
			size_t k;
			if (mt_strbuf_append(&raw, sv(j, "activity_label"), sl(j, "activity_label")) || mt_strbuf_appends(&raw, ": ") ||
			    mt_strbuf_append(&raw, sv(j, "ctx_a"), sl(j, "ctx_a")) || mt_strbuf_appends(&raw, " "))
				goto oom_raw;
			k = raw.n;
			if (mt_strbuf_append(&raw, sv(j, "ctx_b"), sl(j, "ctx_b")))
				goto oom_raw;
			/* str.capitalize(), for ASCII letters */
			for (size_t q = k; q < raw.n; q++) {
				char c = raw.s[q];
				if (q == k && c >= 'a' && c <= 'z')
					raw.s[q] = (char)(c - 'a' + 'A');
				else if (q > k && c >= 'A' && c <= 'Z')
					raw.s[q] = (char)(c - 'A' + 'a');
			}
		} else if (is_str(j, "ctx")) {
			if (mt_strbuf_append(&raw, sv(j, "ctx"), sl(j, "ctx")) || mt_strbuf_appends(&raw, ""))
				goto oom_raw;
		} else {
			return mt_err_set(err, MT_EXIT_DATA, "%s: a HellaSwag line needs \"activity_label\", \"ctx_a\" and \"ctx_b\", or \"ctx\"", where);
		}
		if (mt_evalchoice_hellaswag_text(raw.s, raw.n, &t, &tn))
			goto oom_raw;
		mt_strbuf_free(&raw);
		free(ctx->s);
		ctx->s = t;
		ctx->n = ctx->cap = tn;
		ctx->cap++;
		ch = json_array();
		json_array_foreach(e, i, v) {
			if (!json_is_string(v)) {
				json_decref(ch);
				return mt_err_set(err, MT_EXIT_DATA, "%s: endings[%zu] is not a string", where, i);
			}
			if (mt_evalchoice_hellaswag_text(json_string_value(v), json_string_length(v), &t, &tn)) {
				json_decref(ch);
				goto oom;
			}
			json_array_append_new(ch, json_stringn(t, tn));
			free(t);
		}
		if (label_index(json_object_get(j, "label"), gold)) {
			json_decref(ch);
			return mt_err_set(err, MT_EXIT_DATA, "%s: \"label\" is not an index (an integer or a string of digits)", where);
		}
		*choices = ch;
		return 0;
oom_raw:
		mt_strbuf_free(&raw);
		goto oom;
	}
	if (is_str(j, "goal") && is_str(j, "sol1") && is_str(j, "sol2")) {
		*form = "piqa";
		if (mt_strbuf_appends(ctx, "Question: ") || mt_strbuf_append(ctx, sv(j, "goal"), sl(j, "goal")) || mt_strbuf_appends(ctx, "\nAnswer:"))
			goto oom;
		*choices = json_pack("[OO]", json_object_get(j, "sol1"), json_object_get(j, "sol2"));
		if (label_index(json_object_get(j, "label"), gold))
			return mt_err_set(err, MT_EXIT_DATA, "%s: \"label\" is not an index (an integer or a string of digits)", where);
		return 0;
	}
	if (is_str(j, "question") && json_is_object(json_object_get(j, "choices"))) {
		json_t *c = json_object_get(j, "choices"), *text = json_object_get(c, "text"), *lab = json_object_get(c, "label");
		json_t *key = json_object_get(j, "answerKey");
		*form = "arc";
		if (!json_is_array(text) || !json_is_array(lab) || json_array_size(text) != json_array_size(lab) ||
		    !json_is_string(key))
			return mt_err_set(err, MT_EXIT_DATA,
					  "%s: an ARC line needs \"choices\": {\"text\": [...], \"label\": [...]} of one length and an \"answerKey\" string", where);
		if (mt_strbuf_appends(ctx, "Question: ") || mt_strbuf_append(ctx, sv(j, "question"), sl(j, "question")) || mt_strbuf_appends(ctx, "\nAnswer:"))
			goto oom;
		*gold = -1;
		json_array_foreach(lab, i, v)
			if (json_is_string(v) && json_equal(v, key))
				*gold = (int64_t)i;
		if (*gold < 0)
			return mt_err_set(err, MT_EXIT_DATA, "%s: answerKey \"%s\" is not one of the choices' labels", where,
					  json_string_value(key));
		*choices = json_incref(text);
		return 0;
	}
	if ((is_str(j, "context") || is_str(j, "query")) &&
	    (json_is_array(json_object_get(j, "choices")) || json_is_array(json_object_get(j, "endings")))) {
		const char *k = is_str(j, "context") ? "context" : "query";
		json_t *g = json_object_get(j, "label") ? json_object_get(j, "label") : json_object_get(j, "gold");
		*form = "generic";
		if (mt_strbuf_append(ctx, sv(j, k), sl(j, k)))
			goto oom;
		ch = json_object_get(j, "choices");
		*choices = json_incref(json_is_array(ch) ? ch : json_object_get(j, "endings"));
		if (label_index(g, gold))
			return mt_err_set(err, MT_EXIT_DATA, "%s: \"label\" is not an index (an integer or a string of digits)", where);
		return 0;
	}
	return mt_err_set(err, MT_EXIT_DATA,
			  "%s: not a multiple-choice line: want HellaSwag's \"endings\", PIQA's \"goal\"/\"sol1\"/\"sol2\", "
			  "ARC's \"question\"/\"choices\"/\"answerKey\", or \"context\", \"choices\" and \"label\"", where);
oom:
	return mt_err_set(err, MT_EXIT_IO, "out of memory");
}

int mt_evalchoice_run(const struct mt_evaltext *x, const char *text, size_t n, const char *name, FILE *samples,
		      struct mt_choice_result *r, struct mt_err *err)
{
	int64_t L = x->ev->T, B = x->ev->B, lineno = 0, ncand = 0, capc = 0, nq = 0, capq = 0;
	struct cand *cand = NULL;
	int64_t *qfirst = NULL, *qgold = NULL, *qline = NULL;
	int *qn = NULL;
	struct mt_ids ce = { 0 }, we = { 0 };
	struct mt_strbuf ctx = MT_STRBUF_INIT, whole = MT_STRBUF_INIT;
	struct mt_lmeval_row *out = NULL;
	int32_t *rows = NULL;
	uint8_t *mask = NULL;
	const char *p = text;
	char where[4200];
	int rc = -1;

	memset(r, 0, sizeof(*r));
	while (p < text + n) {
		const char *nl = memchr(p, '\n', (size_t)(text + n - p));
		size_t len = nl ? (size_t)(nl - p) : (size_t)(text + n - p), b, ln, i;
		json_t *j, *choices, *v;
		json_error_t je;
		const char *form;
		int64_t gold;
		size_t cb, cn;

		lineno++;
		snprintf(where, sizeof(where), "%s:%lld", name, (long long)lineno);
		mt_zs_strip(p, len, &b, &ln);
		if (ln == 0) {
			p += len + 1;
			continue;
		}
		if (!(j = json_loadb(p, len, 0, &je)) || !json_is_object(j)) {
			json_decref(j);
			mt_err_set(err, MT_EXIT_DATA, "%s: not a JSON object%s%s", where, j ? "" : ": ", j ? "" : je.text);
			goto out;
		}
		if (question(j, where, &ctx, &choices, &gold, &form, err)) {
			json_decref(j);
			goto out;
		}
		json_decref(j);
		if (json_array_size(choices) < 1 || gold < 0 || gold >= (int64_t)json_array_size(choices)) {
			mt_err_set(err, MT_EXIT_DATA, "%s: the gold index %lld is not one of the %zu choices", where, (long long)gold,
				   json_array_size(choices));
			json_decref(choices);
			goto out;
		}
		if (nq == capq) {
			capq = capq ? 2 * capq : 256;
			qfirst = realloc(qfirst, (size_t)capq * sizeof(*qfirst));
			qgold = realloc(qgold, (size_t)capq * sizeof(*qgold));
			qline = realloc(qline, (size_t)capq * sizeof(*qline));
			qn = realloc(qn, (size_t)capq * sizeof(*qn));
			if (!qfirst || !qgold || !qline || !qn) {
				json_decref(choices);
				mt_err_set(err, MT_EXIT_IO, "out of memory");
				goto out;
			}
		}
		qfirst[nq] = ncand;
		qgold[nq] = gold;
		qline[nq] = lineno;
		qn[nq] = (int)json_array_size(choices);
		nq++;
		/* context whitespace moves to the continuation (lm-eval's _encode_pair) */
		for (cn = ctx.n; cn > 0;) {
			size_t s = mt_zs_space_before(ctx.s, cn);
			if (!s)
				break;
			cn -= s;
		}
		if (cn) {
			if (encode(x, ctx.s, cn, &ce, where, err)) {
				json_decref(choices);
				goto out;
			}
		} else {
			ce.n = 0;
			if (mt_ids_push(&ce, x->eod)) {
				json_decref(choices);
				mt_err_set(err, MT_EXIT_IO, "out of memory");
				goto out;
			}
		}
		json_array_foreach(choices, i, v) {
			struct cand *c;
			if (!json_is_string(v)) {
				json_decref(choices);
				mt_err_set(err, MT_EXIT_DATA, "%s: choice %zu is not a string", where, i);
				goto out;
			}
			/* whole = context + trailing space + " " + choice */
			mt_strbuf_reset(&whole);
			cb = cn;
			if (mt_strbuf_append(&whole, ctx.s, ctx.n) || mt_strbuf_appends(&whole, " ") || mt_strbuf_append(&whole, json_string_value(v), json_string_length(v))) {
				json_decref(choices);
				mt_err_set(err, MT_EXIT_IO, "out of memory");
				goto out;
			}
			if (ncand == capc) {
				struct cand *nc;
				capc = capc ? 2 * capc : 1024;
				if (!(nc = realloc(cand, (size_t)capc * sizeof(*cand)))) {
					json_decref(choices);
					mt_err_set(err, MT_EXIT_IO, "out of memory");
					goto out;
				}
				cand = nc;
			}
			c = &cand[ncand];
			memset(c, 0, sizeof(*c));
			c->len = chars(json_string_value(v), json_string_length(v));
			if (cn) {
				if (encode(x, whole.s, whole.n, &we, where, err)) {
					json_decref(choices);
					goto out;
				}
				c->nctx = (int64_t)ce.n;
				c->ncont = we.n > ce.n ? (int64_t)(we.n - ce.n) : 0;
				c->ctx = dup_ids(ce.a, c->nctx);
				c->cont = dup_ids(we.a + ce.n, c->ncont);
			} else {
				/* empty context: the end-of-document token, then the continuation alone */
				if (encode(x, whole.s + cb, whole.n - cb, &we, where, err)) {
					json_decref(choices);
					goto out;
				}
				c->nctx = 1;
				c->ncont = (int64_t)we.n;
				c->ctx = dup_ids(ce.a, 1);
				c->cont = dup_ids(we.a, c->ncont);
			}
			ncand++;
			if (!c->ctx || !c->cont) {
				json_decref(choices);
				mt_err_set(err, MT_EXIT_IO, "out of memory");
				goto out;
			}
			if (c->ncont < 1 || c->ncont > L) {
				json_decref(choices);
				mt_err_set(err, MT_EXIT_DATA, "%s: choice %zu has %lld tokens: %s", where, i, (long long)c->ncont,
					   c->ncont < 1 ? "nothing to score" : "more than seq-length");
				goto out;
			}
		}
		json_decref(choices);
		p += len + 1;
	}
	if (nq == 0) {
		mt_err_set(err, MT_EXIT_DATA, "'%s': no questions", name);
		goto out;
	}
	/* score the choices a micro-batch at a time */
	rows = malloc((size_t)(B * (L + 1)) * sizeof(*rows));
	mask = malloc((size_t)(B * L));
	out = malloc((size_t)B * sizeof(*out));
	if (!rows || !mask || !out) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out;
	}
	for (int64_t k = 0; k < ncand; k += B) {
		int64_t q = ncand - k < B ? ncand - k : B;
		for (int64_t b = 0; b < q; b++) {
			struct cand *c = &cand[k + b];
			int64_t dropped;
			mt_zs_cloze_row(c->ctx, c->nctx, c->cont, c->ncont, L, x->eod, rows + b * (L + 1), mask + b * L, &dropped);
			r->truncated += dropped > 0;
		}
		if (mt_lmeval_score(x->ev, q, rows, mask, out, err))
			goto out;
		for (int64_t b = 0; b < q; b++) {
			cand[k + b].ll = -out[b].loss;
			r->targets += out[b].count;
		}
		if (x->progress)
			x->progress(x->ctx, (k + q) * L, ncand * L);
	}
	r->choices = ncand;
	for (int64_t i = 0; i < nq; i++) {
		struct cand *c = cand + qfirst[i];
		int pred = 0, pred_norm = 0;
		for (int k = 1; k < qn[i]; k++) {
			if (c[k].ll > c[pred].ll)
				pred = k;
			if (c[k].ll / c[k].len > c[pred_norm].ll / c[pred_norm].len)
				pred_norm = k;
		}
		r->examples++;
		r->correct += pred == qgold[i];
		r->correct_norm += pred_norm == qgold[i];
		if (samples) {
			json_t *s = json_object(), *lls = json_array(), *lens = json_array();
			char *line;
			for (int k = 0; k < qn[i]; k++) {
				json_array_append_new(lls, json_real(c[k].ll));
				json_array_append_new(lens, json_integer((json_int_t)c[k].len));
			}
			json_object_set_new(s, "doc", json_integer(i));
			json_object_set_new(s, "line", json_integer(qline[i]));
			json_object_set_new(s, "gold", json_integer(qgold[i]));
			json_object_set_new(s, "loglikelihoods", lls);
			json_object_set_new(s, "lengths", lens);
			json_object_set_new(s, "pred", json_integer(pred));
			json_object_set_new(s, "pred_norm", json_integer(pred_norm));
			line = json_dumps(s, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
			json_decref(s);
			if (!line || fprintf(samples, "%s\n", line) < 0) {
				free(line);
				mt_err_set(err, MT_EXIT_IO, "cannot write the samples");
				goto out;
			}
			free(line);
		}
	}
	rc = 0;
out:
	for (int64_t i = 0; i < ncand; i++) {
		free(cand[i].ctx);
		free(cand[i].cont);
	}
	free(cand);
	free(qfirst), free(qgold), free(qline), free(qn);
	mt_ids_free(&ce), mt_ids_free(&we);
	mt_strbuf_free(&ctx), mt_strbuf_free(&whole), free(rows), free(mask), free(out);
	return rc;
}
