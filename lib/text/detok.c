/* detok.c: Megatron's zero-shot detokenizers as ordered rewrite rules (see detok.h). */
#include "text/detok.h"

#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "text/zeroshot.h"

const char *const mt_detok_names[] = { "none", "wikitext", "ptb", "lambada", NULL };

enum mt_detok mt_detok_for_path(const char *path)
{
	if (strstr(path, "ptb"))
		return MT_DETOK_PTB;
	if (strstr(path, "wiki"))
		return MT_DETOK_WIKITEXT;
	if (strstr(path, "lambada"))
		return MT_DETOK_LAMBADA;
	return MT_DETOK_NONE;
}

int mt_detok_parse(const char *name)
{
	for (int i = 0; mt_detok_names[i]; i++)
		if (!strcmp(name, mt_detok_names[i]))
			return i;
	return -1;
}

/* one rule: a literal replacement (re 0) or a regular expression with $1 in `to` */
struct rule {
	int re;
	const char *from, *to;
};

static const struct rule wikitext[] = {
	{ 0, "s '", "s'" },
	{ 1, "/' [0-9]/", "/'[0-9]/" },
	{ 0, " @-@ ", "-" },
	{ 0, " @,@ ", "," },
	{ 0, " @.@ ", "." },
	{ 0, " : ", ": " },
	{ 0, " ; ", "; " },
	{ 0, " . ", ". " },
	{ 0, " ! ", "! " },
	{ 0, " ? ", "? " },
	{ 0, " , ", ", " },
	{ 1, "\\(\\s*([^\\)]*?)\\s*\\)", "($1)" },
	{ 1, "\\[\\s*([^\\]]*?)\\s*\\]", "[$1]" },
	{ 1, "\\{\\s*([^}]*?)\\s*\\}", "{$1}" },
	{ 1, "\"\\s*([^\"]*?)\\s*\"", "\"$1\"" },
	{ 1, "'\\s*([^']*?)\\s*'", "'$1'" },
	{ 0, "= = = =", "====" },
	{ 0, "= = =", "===" },
	{ 0, "= =", "==" },
	{ 0, " \xc2\xb0 ", "\xc2\xb0" },
	{ 0, " \n", "\n" },
	{ 0, "\n ", "\n" },
	{ 0, " N ", " 1 " },
	{ 0, " 's", "'s" },
	{ 0, NULL, NULL },
};

static const struct rule ptb[] = {
	{ 0, " '", "'" },
	{ 0, " \n", "\n" },
	{ 0, "\n ", "\n" },
	{ 0, " n't", "n't" },
	{ 0, " N ", "1 " },
	{ 0, "$ 1", "$1" },
	{ 0, "# 1", "#1" },
	{ 0, NULL, NULL },
};

static const struct rule lambada[] = {
	{ 0, "\xe2\x80\x9c", "\"" },
	{ 0, "\xe2\x80\x9d", "\"" },
	{ 0, NULL, NULL },
};

/* literal, non-overlapping, left to right */
static int replace(char **s, size_t *n, const char *from, const char *to, struct mt_err *err)
{
	size_t fl = strlen(from), tl = strlen(to), cnt = 0, o = 0;
	char *p = *s, *q, *out;

	for (q = p; (q = memmem(q, *n - (size_t)(q - p), from, fl)); q += fl)
		cnt++;
	if (!cnt)
		return 0;
	out = malloc(*n + cnt * tl + 1);
	if (!out)
		return mt_err_set(err, MT_EXIT_IO, "out of memory detokenizing");
	for (char *r = p; r < p + *n;) {
		q = memmem(r, *n - (size_t)(r - p), from, fl);
		if (!q) {
			memcpy(out + o, r, *n - (size_t)(r - p));
			o += *n - (size_t)(r - p);
			break;
		}
		memcpy(out + o, r, (size_t)(q - r));
		o += (size_t)(q - r);
		memcpy(out + o, to, tl);
		o += tl;
		r = q + fl;
	}
	out[o] = '\0';
	free(*s);
	*s = out;
	*n = o;
	return 0;
}

static int substitute(char **s, size_t *n, const char *pattern, const char *to, struct mt_err *err)
{
	int code;
	PCRE2_SIZE at, len;
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
	char *out;

	if (!re)
		return mt_err_set(err, MT_EXIT_IO, "detokenizer pattern '%s' does not compile (error %d)", pattern, code);
	len = *n * 2 + 64;
	for (;;) {
		out = malloc(len + 1);
		if (!out) {
			pcre2_code_free(re);
			return mt_err_set(err, MT_EXIT_IO, "out of memory detokenizing");
		}
		code = pcre2_substitute(re, (PCRE2_SPTR)*s, *n, 0,
					PCRE2_SUBSTITUTE_GLOBAL | PCRE2_SUBSTITUTE_OVERFLOW_LENGTH | PCRE2_NO_UTF_CHECK, NULL,
					NULL, (PCRE2_SPTR)to, PCRE2_ZERO_TERMINATED, (PCRE2_UCHAR *)out, &len);
		if (code != PCRE2_ERROR_NOMEMORY)
			break;
		free(out); /* len now says how much is needed */
	}
	pcre2_code_free(re);
	if (code < 0) {
		free(out);
		return mt_err_set(err, MT_EXIT_DATA, "detokenizing with '%s' failed (pcre2 error %d)", pattern, code);
	}
	out[len] = '\0';
	free(*s);
	*s = out;
	*n = len;
	return 0;
}

int mt_detok_apply(enum mt_detok kind, const char *text, size_t n, char **out, size_t *outn, struct mt_err *err)
{
	const struct rule *r = kind == MT_DETOK_WIKITEXT ? wikitext : kind == MT_DETOK_PTB ? ptb
							       : kind == MT_DETOK_LAMBADA ? lambada : NULL;
	char *s = malloc(n + 2);

	if (!s)
		return mt_err_set(err, MT_EXIT_IO, "out of memory detokenizing");
	memcpy(s, text, n);
	s[n] = '\0';
	for (; r && r->from; r++)
		if (r->re ? substitute(&s, &n, r->from, r->to, err) : replace(&s, &n, r->from, r->to, err)) {
			free(s);
			return -1;
		}
	if (kind == MT_DETOK_LAMBADA) {
		/* "\n" + text.strip(), with Python's whitespace */
		size_t b, len;
		mt_zs_strip(s, n, &b, &len);
		memmove(s + 1, s + b, len);
		s[0] = '\n';
		n = len + 1;
		s[n] = '\0';
	}
	*out = s;
	*outn = n;
	return 0;
}
