/* evaltext.c: the zero-shot text tasks from text to figures (see evaltext.h). */
#include "eval/evaltext.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "text/zeroshot.h"

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

/* score rows [0, nrows) micro-batch by micro-batch, with progress in tokens */
static int score(const struct mt_evaltext *x, int64_t nrows, const int32_t *rows, const uint8_t *mask,
		 struct mt_lmeval_row *out, struct mt_err *err)
{
	int64_t T = x->ev->T, B = x->ev->B;

	for (int64_t i = 0; i < nrows; i += B) {
		int64_t q = nrows - i < B ? nrows - i : B;
		if (mt_lmeval_score(x->ev, q, rows + i * (T + 1), mask + i * T, out + i, err))
			return -1;
		if (x->progress)
			x->progress(x->ctx, (i + q) * T, nrows * T);
	}
	return 0;
}

int mt_evaltext_wikitext(const struct mt_evaltext *x, const char *text, size_t n, const char *name,
			 enum mt_detok detok, int64_t stride, struct mt_wikitext_result *r, struct mt_err *err)
{
	int64_t L = x->ev->T, B = x->ev->B, count = 0;
	struct mt_ids toks = { 0 };
	struct mt_lmeval_row *out = NULL;
	int32_t *rows = NULL;
	uint8_t *mask = NULL;
	char *dt;
	size_t dn;
	double sum = 0;
	int rc = -1;

	memset(r, 0, sizeof(*r));
	if (stride < 1 || stride > L)
		return mt_err_set(err, MT_EXIT_USAGE, "the window stride %lld must be 1..seq-length %lld (else targets are skipped)",
				  (long long)stride, (long long)L);
	r->words = mt_zs_word_count(text, n); /* before detokenizing, as Megatron counts */
	if (mt_detok_apply(detok, text, n, &dt, &dn, err))
		return mt_err_prefix(err, "'%s'", name);
	rc = encode(x, dt, dn, &toks, name, err);
	free(dt);
	if (rc)
		goto out;
	rc = -1;
	if (toks.n < 2) {
		mt_err_set(err, MT_EXIT_DATA, "'%s': %zu tokens: nothing to predict", name, toks.n);
		goto out;
	}
	r->windows = mt_zs_windows((int64_t)toks.n, stride);
	/* windows are cut a micro-batch at a time: memory does not grow with the text */
	rows = malloc((size_t)(B * (L + 1)) * sizeof(*rows));
	mask = malloc((size_t)(B * L));
	out = malloc((size_t)B * sizeof(*out));
	if (!rows || !mask || !out) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out;
	}
	for (int64_t k = 0; k < r->windows; k += B) {
		int64_t q = r->windows - k < B ? r->windows - k : B;
		for (int64_t b = 0; b < q; b++)
			mt_zs_window(toks.a, (int64_t)toks.n, L, stride, k + b, x->eod, rows + b * (L + 1), mask + b * L);
		if (mt_lmeval_score(x->ev, q, rows, mask, out, err))
			goto out;
		for (int64_t b = 0; b < q; b++) {
			sum += out[b].loss;
			count += out[b].count;
		}
		if (x->progress)
			x->progress(x->ctx, (k + q) * L, r->windows * L);
	}
	if (count != (int64_t)toks.n - 1) {
		mt_err_set(err, MT_EXIT_DATA, "'%s': %lld targets counted of %zu", name, (long long)count, toks.n - 1);
		goto out;
	}
	r->targets = count;
	r->token_loss = sum / (double)count;
	r->token_ppl = exp(fmin(20, r->token_loss));
	r->ratio = r->words > 1 ? (double)count / (double)(r->words - 1) : NAN;
	r->word_ppl = exp(fmin(20, r->token_loss * r->ratio));
	rc = 0;
out:
	mt_ids_free(&toks);
	free(rows), free(mask), free(out);
	return rc;
}

int mt_evaltext_lambada(const struct mt_evaltext *x, const char *text, size_t n, const char *name,
			struct mt_lambada_result *r, struct mt_err *err)
{
	int64_t L = x->ev->T, lineno = 0, cap = 0, nrows = 0;
	struct mt_ids ids = { 0 }, ctx = { 0 }, ans = { 0 };
	struct mt_lmeval_row *out = NULL;
	int32_t *rows = NULL;
	uint8_t *mask = NULL;
	const char *p = text;
	char where[4200], *w = NULL;
	int rc = -1;

	memset(r, 0, sizeof(*r));
	/* two rows per example: non-strict, then strict */
	while (p < text + n) {
		const char *nl = memchr(p, '\n', (size_t)(text + n - p));
		size_t len = nl ? (size_t)(nl - p) : (size_t)(text + n - p), b, ln, sn, cb, cl, wb, wl;
		json_t *j, *jt;
		json_error_t je;
		const char *s;
		int64_t dr;

		lineno++;
		snprintf(where, sizeof(where), "%s:%lld", name, (long long)lineno);
		mt_zs_strip(p, len, &b, &ln);
		if (ln == 0) {
			p += len + 1;
			continue;
		}
		if (!(j = json_loadb(p, len, 0, &je))) {
			mt_err_set(err, MT_EXIT_DATA, "%s: not JSON: %s", where, je.text);
			goto out;
		}
		jt = json_object_get(j, "text");
		if (!json_is_string(jt)) {
			json_decref(j);
			mt_err_set(err, MT_EXIT_DATA, "%s: no \"text\" string", where);
			goto out;
		}
		s = json_string_value(jt);
		sn = json_string_length(jt);
		if (nrows + 2 > cap) {
			int32_t *nr;
			uint8_t *nm;
			cap = cap ? cap * 2 : 512;
			nr = realloc(rows, (size_t)(cap * (L + 1)) * sizeof(*rows));
			if (nr)
				rows = nr;
			nm = realloc(mask, (size_t)(cap * L));
			if (nm)
				mask = nm;
			if (!nr || !nm) {
				json_decref(j);
				mt_err_set(err, MT_EXIT_IO, "out of memory for %lld rows", (long long)cap);
				goto out;
			}
		}
		/* non-strict: the last token is the answer */
		if (encode(x, s, sn, &ids, where, err) || (ids.n < 1 && mt_err_set(err, MT_EXIT_DATA, "%s: the text is empty", where)) ||
		    (mt_zs_cloze_row(ids.a, (int64_t)ids.n - 1, ids.a + ids.n - 1, 1, L, x->eod, rows + nrows * (L + 1),
				     mask + nrows * L, &dr) &&
		     mt_err_set(err, MT_EXIT_DATA, "%s: the answer does not fit in seq-length %lld", where, (long long)L))) {
			json_decref(j);
			goto out;
		}
		r->truncated += dr > 0;
		nrows++;
		/* strict: the last word, tokenized with a space before it, after the stripped context */
		if (mt_zs_last_word(s, sn, &cb, &cl, &wb, &wl)) {
			json_decref(j);
			mt_err_set(err, MT_EXIT_DATA, "%s: the text has no word", where);
			goto out;
		}
		free(w);
		if (!(w = malloc(wl + 1))) {
			json_decref(j);
			mt_err_set(err, MT_EXIT_IO, "out of memory");
			goto out;
		}
		w[0] = ' ';
		memcpy(w + 1, s + wb, wl);
		if (encode(x, s + cb, cl, &ctx, where, err) || encode(x, w, wl + 1, &ans, where, err) ||
		    (mt_zs_cloze_row(ctx.a, (int64_t)ctx.n, ans.a, (int64_t)ans.n, L, x->eod, rows + nrows * (L + 1),
				     mask + nrows * L, &dr) &&
		     mt_err_set(err, MT_EXIT_DATA, "%s: the last word does not fit in seq-length %lld", where, (long long)L))) {
			json_decref(j);
			goto out;
		}
		r->truncated += dr > 0;
		nrows++;
		r->examples++;
		json_decref(j);
		p += len + 1;
	}
	if (r->examples == 0) {
		mt_err_set(err, MT_EXIT_DATA, "'%s': no examples", name);
		goto out;
	}
	if (!(out = malloc((size_t)nrows * sizeof(*out)))) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out;
	}
	if (score(x, nrows, rows, mask, out, err))
		goto out;
	for (int64_t i = 0; i < nrows; i++) {
		int right = out[i].correct == out[i].count;
		if (i & 1)
			r->correct_strict += right;
		else
			r->correct += right;
		r->targets += out[i].count;
	}
	rc = 0;
out:
	mt_ids_free(&ids), mt_ids_free(&ctx), mt_ids_free(&ans);
	free(w), free(rows), free(mask), free(out);
	return rc;
}
