/* strbuf.c: the growing byte string (see strbuf.h). */
#include "base/strbuf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/array.h"

#define FIRST_CAP 256

void mt_strbuf_init(struct mt_strbuf *b)
{
	b->s = NULL;
	b->n = b->cap = 0;
}

int mt_strbuf_grow(struct mt_strbuf *b, size_t extra)
{
	int first = !b->s;

	if (extra > (size_t)-1 - b->n - 1) {
		errno = ENOMEM;
		return -1;
	}
	if (mt_array_grow(&b->s, &b->cap, b->n + extra + 1, 1, FIRST_CAP))
		return -1;
	if (first)
		b->s[0] = '\0';
	return 0;
}

int mt_strbuf_append(struct mt_strbuf *b, const void *s, size_t n)
{
	if (mt_strbuf_grow(b, n))
		return -1;
	if (n)
		memcpy(b->s + b->n, s, n);
	b->n += n;
	b->s[b->n] = '\0';
	return 0;
}

int mt_strbuf_appends(struct mt_strbuf *b, const char *s)
{
	return mt_strbuf_append(b, s, strlen(s));
}

int mt_strbuf_vappendf(struct mt_strbuf *b, const char *fmt, va_list ap)
{
	va_list aq;
	int k;

	va_copy(aq, ap);
	k = vsnprintf(NULL, 0, fmt, aq);
	va_end(aq);
	if (k < 0)
		return -1;
	if (mt_strbuf_grow(b, (size_t)k))
		return -1;
	vsnprintf(b->s + b->n, (size_t)k + 1, fmt, ap);
	b->n += (size_t)k;
	return 0;
}

int mt_strbuf_appendf(struct mt_strbuf *b, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = mt_strbuf_vappendf(b, fmt, ap);
	va_end(ap);
	return rc;
}

void mt_strbuf_reset(struct mt_strbuf *b)
{
	b->n = 0;
	if (b->s)
		b->s[0] = '\0';
}

char *mt_strbuf_detach(struct mt_strbuf *b, size_t *n)
{
	char *s = b->s;

	if (n)
		*n = b->n;
	mt_strbuf_init(b);
	return s;
}

void mt_strbuf_free(struct mt_strbuf *b)
{
	free(b->s);
	mt_strbuf_init(b);
}
