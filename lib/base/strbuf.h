/* strbuf.h: a growing byte string: append bytes or formatted text, keep it NUL-terminated.
 *
 * One buffer type instead of a hand-grown copy per file. The bytes may hold NULs; s is
 * always NUL-terminated once anything (even zero bytes) was appended, and NULL before.
 * Out of memory is the only failure: a call returns -1 with errno ENOMEM and leaves the
 * buffer as it was, and the caller reports it (mt_err_set(err, MT_EXIT_IO, "out of
 * memory")), so a run of appends can be checked once (`bad |= mt_strbuf_append(...)`).
 * This file does not grow arrays of other types (array.h does). */
#ifndef MT_STRBUF_H
#define MT_STRBUF_H

#include <stdarg.h>
#include <stddef.h>

struct mt_strbuf {
	char *s;     /* the bytes, NUL-terminated; NULL until the first append */
	size_t n;    /* bytes in s, the NUL not counted */
	size_t cap;  /* bytes allocated */
};

#define MT_STRBUF_INIT { NULL, 0, 0 }

void mt_strbuf_init(struct mt_strbuf *b);
/* Room for extra more bytes and the NUL; 0 or -1. */
int mt_strbuf_grow(struct mt_strbuf *b, size_t extra);
int mt_strbuf_append(struct mt_strbuf *b, const void *s, size_t n);
/* Append a NUL-terminated string. */
int mt_strbuf_appends(struct mt_strbuf *b, const char *s);
int mt_strbuf_appendf(struct mt_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int mt_strbuf_vappendf(struct mt_strbuf *b, const char *fmt, va_list ap);
/* Empty the string, keeping the memory. */
void mt_strbuf_reset(struct mt_strbuf *b);
/* Hand the bytes to the caller (who frees them; *n their length when n is not NULL) and
 * leave the buffer empty. NULL when nothing was appended. */
char *mt_strbuf_detach(struct mt_strbuf *b, size_t *n);
void mt_strbuf_free(struct mt_strbuf *b);

#endif
