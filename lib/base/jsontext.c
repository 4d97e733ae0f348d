/* jsontext.c: a validating single-pass JSON scanner that decodes only the strings
 * under the requested keys of a top-level object (see jsontext.h). */
#include "base/jsontext.h"

#include <stdlib.h>
#include <string.h>

#include "base/array.h"

#define MAX_DEPTH 1000 /* about where Python's json gives up too */

struct scan {
	const unsigned char *s, *p, *end;
	struct mt_jsontext *j;
	const char *why;
	const unsigned char *at;
};

static int fail(struct scan *c, const unsigned char *at, const char *why)
{
	c->why = why;
	c->at = at;
	return -1;
}

static void ws(struct scan *c)
{
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
		c->p++;
}

static int grow(struct mt_jsontext *j, size_t more)
{
	return mt_array_grow(&j->buf, &j->cap, j->n + more, 1, 4096);
}

static int hex4(const unsigned char *p, unsigned *v)
{
	*v = 0;
	for (int i = 0; i < 4; i++) {
		unsigned char ch = p[i];
		unsigned d = ch >= '0' && ch <= '9' ? (unsigned)(ch - '0')
			   : ch >= 'a' && ch <= 'f' ? (unsigned)(ch - 'a' + 10)
			   : ch >= 'A' && ch <= 'F' ? (unsigned)(ch - 'A' + 10) : 16u;
		if (d > 15)
			return -1;
		*v = *v << 4 | d;
	}
	return 0;
}

static size_t put_utf8(char *o, unsigned cp)
{
	if (cp < 0x80)
		return o[0] = (char)cp, 1;
	if (cp < 0x800)
		return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F)), 2;
	if (cp < 0x10000)
		return o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)),
		       o[2] = (char)(0x80 | (cp & 0x3F)), 3;
	return o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 0x3F)),
	       o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), o[3] = (char)(0x80 | (cp & 0x3F)), 4;
}

/* Length of a well-formed UTF-8 sequence at p (2..4), or 0. */
static int utf8_len(const unsigned char *p, const unsigned char *end)
{
	unsigned char c = p[0], lo = 0x80, hi = 0xBF;
	int need;

	if (c >= 0xC2 && c <= 0xDF)
		need = 2;
	else if (c >= 0xE0 && c <= 0xEF)
		need = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
	else if (c >= 0xF0 && c <= 0xF4)
		need = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
	else
		return 0;
	if (end - p < need)
		return 0;
	for (int i = 1; i < need; i++) {
		if (p[i] < lo || p[i] > hi)
			return 0;
		lo = 0x80, hi = 0xBF;
	}
	return need;
}

/* A string at c->p (the opening quote). With decode, its text is appended to j->buf. */
static int string(struct scan *c, int decode)
{
	struct mt_jsontext *j = c->j;
	const unsigned char *p = c->p + 1;

	if (decode && grow(j, (size_t)(c->end - p) * 3 / 2 + 8))
		return fail(c, p, "out of memory");
	for (;;) {
		const unsigned char *run = p;
		/* plain ASCII runs: the common case */
		while (p < c->end && *p >= 0x20 && *p != '"' && *p != '\\' && *p < 0x80)
			p++;
		if (decode && p > run) {
			memcpy(j->buf + j->n, run, (size_t)(p - run));
			j->n += (size_t)(p - run);
		}
		if (p >= c->end)
			return fail(c, p, "unterminated string");
		if (*p == '"') {
			c->p = p + 1;
			return 0;
		}
		if (*p < 0x20)
			return fail(c, p, "control character in a string");
		if (*p >= 0x80) {
			int k = utf8_len(p, c->end);
			if (!k)
				return fail(c, p, "invalid UTF-8 in a string");
			if (decode) {
				memcpy(j->buf + j->n, p, (size_t)k);
				j->n += (size_t)k;
			}
			p += k;
			continue;
		}
		/* an escape */
		if (p + 1 >= c->end)
			return fail(c, p, "unterminated string");
		{
			unsigned char e = p[1];
			char out = 0;
			unsigned cp, lo;

			switch (e) {
			case '"': out = '"'; break;
			case '\\': out = '\\'; break;
			case '/': out = '/'; break;
			case 'b': out = '\b'; break;
			case 'f': out = '\f'; break;
			case 'n': out = '\n'; break;
			case 'r': out = '\r'; break;
			case 't': out = '\t'; break;
			case 'u':
				if (c->end - p < 6 || hex4(p + 2, &cp))
					return fail(c, p, "invalid \\u escape");
				p += 6;
				if (cp >= 0xD800 && cp <= 0xDBFF && c->end - p >= 6 && p[0] == '\\' && p[1] == 'u' &&
				    hex4(p + 2, &lo) == 0 && lo >= 0xDC00 && lo <= 0xDFFF) {
					cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
					p += 6;
				} else if (cp >= 0xD800 && cp <= 0xDFFF) {
					cp = 0xFFFD; /* a lone surrogate: tiktoken's replacement */
					j->surrogates++;
				}
				if (decode)
					j->n += put_utf8(j->buf + j->n, cp);
				continue;
			default:
				return fail(c, p, "invalid escape in a string");
			}
			if (decode)
				j->buf[j->n++] = out;
			p += 2;
		}
	}
}

static int literal(struct scan *c, const char *word)
{
	size_t n = strlen(word);

	if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0)
		return fail(c, c->p, "invalid literal");
	c->p += n;
	return 0;
}

static int number(struct scan *c)
{
	const unsigned char *p = c->p;

	if (p < c->end && *p == '-')
		p++;
	if (c->end - p >= 8 && memcmp(p, "Infinity", 8) == 0) {
		c->p = p + 8; /* Python's json accepts it */
		return 0;
	}
	if (p < c->end && *p == '0')
		p++;
	else if (p < c->end && *p >= '1' && *p <= '9')
		while (p < c->end && *p >= '0' && *p <= '9')
			p++;
	else
		return fail(c, c->p, "invalid number");
	if (p < c->end && *p == '.') {
		p++;
		if (p >= c->end || *p < '0' || *p > '9')
			return fail(c, p, "invalid number");
		while (p < c->end && *p >= '0' && *p <= '9')
			p++;
	}
	if (p < c->end && (*p == 'e' || *p == 'E')) {
		p++;
		if (p < c->end && (*p == '+' || *p == '-'))
			p++;
		if (p >= c->end || *p < '0' || *p > '9')
			return fail(c, p, "invalid number");
		while (p < c->end && *p >= '0' && *p <= '9')
			p++;
	}
	c->p = p;
	return 0;
}

static int value(struct scan *c, int depth);

static int add_part(struct mt_jsontext *j, size_t off)
{
	if (j->nparts == j->partcap) {
		int cap = j->partcap ? j->partcap * 2 : 64;
		size_t *no = realloc(j->off, (size_t)cap * sizeof(*no));
		size_t *nl;
		if (!no)
			return -1;
		j->off = no;
		nl = realloc(j->len, (size_t)cap * sizeof(*nl));
		if (!nl)
			return -1;
		j->len = nl;
		j->partcap = cap;
	}
	j->off[j->nparts] = off;
	j->len[j->nparts] = j->n - off;
	j->nparts++;
	return 0;
}

/* The value of a requested key: a string, a list of strings, or something else
 * (validated and recorded as not text). */
static int text_value(struct scan *c, int k)
{
	struct mt_jsontext *j = c->j;

	j->first[k] = j->nparts;
	j->bad_item[k] = -1;
	if (*c->p == '"') {
		size_t off = j->n;
		if (string(c, 1) || add_part(j, off))
			return c->why ? -1 : fail(c, c->p, "out of memory");
		j->count[k] = 1;
		return 0;
	}
	if (*c->p == '[') {
		int items = 0;
		c->p++;
		ws(c);
		j->count[k] = 0;
		if (c->p < c->end && *c->p == ']') {
			c->p++;
			return 0;
		}
		for (;;) {
			ws(c);
			if (c->p >= c->end)
				return fail(c, c->p, "unterminated list");
			if (*c->p == '"' && j->count[k] >= 0) {
				size_t off = j->n;
				if (string(c, 1) || add_part(j, off))
					return c->why ? -1 : fail(c, c->p, "out of memory");
				j->count[k]++;
			} else {
				if (j->count[k] >= 0) {
					j->count[k] = MT_JSONTEXT_NOT_TEXT;
					j->bad_item[k] = items;
				}
				if (value(c, 1))
					return -1;
			}
			items++;
			ws(c);
			if (c->p < c->end && *c->p == ',') {
				c->p++;
				continue;
			}
			if (c->p < c->end && *c->p == ']') {
				c->p++;
				return 0;
			}
			return fail(c, c->p, "expected ',' or ']' in a list");
		}
	}
	j->count[k] = MT_JSONTEXT_NOT_TEXT;
	return value(c, 1);
}

static int value(struct scan *c, int depth)
{
	if (depth > MAX_DEPTH)
		return fail(c, c->p, "nested too deeply");
	ws(c);
	if (c->p >= c->end)
		return fail(c, c->p, "expected a value");
	switch (*c->p) {
	case '"':
		return string(c, 0);
	case '{':
	case '[': {
		unsigned char close = *c->p == '{' ? '}' : ']';
		int obj = close == '}';
		c->p++;
		ws(c);
		if (c->p < c->end && *c->p == close) {
			c->p++;
			return 0;
		}
		for (;;) {
			ws(c);
			if (obj) {
				if (c->p >= c->end || *c->p != '"')
					return fail(c, c->p, "expected a string key");
				if (string(c, 0))
					return -1;
				ws(c);
				if (c->p >= c->end || *c->p != ':')
					return fail(c, c->p, "expected ':'");
				c->p++;
			}
			if (value(c, depth + 1))
				return -1;
			ws(c);
			if (c->p < c->end && *c->p == ',') {
				c->p++;
				continue;
			}
			if (c->p < c->end && *c->p == close) {
				c->p++;
				return 0;
			}
			return fail(c, c->p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
		}
	}
	case 't':
		return literal(c, "true");
	case 'f':
		return literal(c, "false");
	case 'n':
		return literal(c, "null");
	case 'N':
		return literal(c, "NaN");
	case 'I':
		return literal(c, "Infinity");
	case '-':
	case '0': case '1': case '2': case '3': case '4':
	case '5': case '6': case '7': case '8': case '9':
		return number(c);
	default:
		return fail(c, c->p, "expected a value");
	}
}

/* Which requested key is the key string at c->p? -1 if none. Keys with escapes
 * are compared after decoding. */
static int which_key(struct scan *c, const char *const *keys, int nkeys)
{
	struct mt_jsontext *j = c->j;
	size_t mark = j->n;
	int k = -1;

	if (string(c, 1))
		return -2;
	for (int i = 0; i < nkeys; i++)
		if (strlen(keys[i]) == j->n - mark && memcmp(j->buf + mark, keys[i], j->n - mark) == 0)
			k = i;
	j->n = mark; /* the key's text is not kept */
	return k;
}

int mt_jsontext_parse(struct mt_jsontext *j, const char *s, size_t n, const char *const *keys,
		      int nkeys, struct mt_err *err)
{
	struct scan c = { (const unsigned char *)s, (const unsigned char *)s, (const unsigned char *)s + n,
			  j, NULL, NULL };

	j->n = 0;
	j->nparts = 0;
	j->surrogates = 0;
	for (int k = 0; k < nkeys; k++)
		j->count[k] = MT_JSONTEXT_MISSING;
	ws(&c);
	if (c.p >= c.end || *c.p != '{') {
		/* valid JSON that is not an object is not a record either */
		if (value(&c, 0) == 0) {
			ws(&c);
			if (c.p == c.end)
				return mt_err_set(err, MT_EXIT_DATA, "line is not a JSON object");
			fail(&c, c.p, "extra data after the value");
		}
		goto bad;
	}
	c.p++;
	ws(&c);
	if (c.p < c.end && *c.p == '}') {
		c.p++;
	} else {
		for (;;) {
			int k;
			ws(&c);
			if (c.p >= c.end || *c.p != '"') {
				fail(&c, c.p, "expected a string key");
				goto bad;
			}
			k = which_key(&c, keys, nkeys);
			if (k == -2)
				goto bad;
			ws(&c);
			if (c.p >= c.end || *c.p != ':') {
				fail(&c, c.p, "expected ':'");
				goto bad;
			}
			c.p++;
			ws(&c);
			if (c.p >= c.end) {
				fail(&c, c.p, "expected a value");
				goto bad;
			}
			if (k >= 0 ? text_value(&c, k) : value(&c, 1))
				goto bad;
			ws(&c);
			if (c.p < c.end && *c.p == ',') {
				c.p++;
				continue;
			}
			if (c.p < c.end && *c.p == '}') {
				c.p++;
				break;
			}
			fail(&c, c.p, "expected ',' or '}'");
			goto bad;
		}
	}
	ws(&c);
	if (c.p != c.end) {
		fail(&c, c.p, "extra data after the object");
		goto bad;
	}
	return 0;
bad:
	return mt_err_set(err, MT_EXIT_DATA, "invalid JSON at column %ld: %s", (long)(c.at - c.s) + 1, c.why);
}

void mt_jsontext_free(struct mt_jsontext *j)
{
	free(j->buf);
	free(j->off);
	free(j->len);
	memset(j, 0, sizeof(*j));
}
