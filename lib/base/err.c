/* err.c: the error buffer (see err.h). Formatting only: no printing, no exit. */
#include "base/err.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int mt_err_vset(struct mt_err *err, int code, const char *fmt, va_list ap)
{
	if (!err)
		return -1;
	err->code = code;
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	return -1;
}

int mt_err_set(struct mt_err *err, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	mt_err_vset(err, code, fmt, ap);
	va_end(ap);
	return -1;
}

int mt_err_errno(struct mt_err *err, int code, const char *fmt, ...)
{
	int saved = errno;
	va_list ap;
	size_t n;

	if (!err)
		return -1;
	va_start(ap, fmt);
	mt_err_vset(err, code, fmt, ap);
	va_end(ap);
	n = strlen(err->msg);
	snprintf(err->msg + n, sizeof(err->msg) - n, ": %s", strerror(saved));
	errno = saved;
	return -1;
}

int mt_err_prefix(struct mt_err *err, const char *fmt, ...)
{
	char old[MT_ERR_LEN];
	va_list ap;
	size_t n;

	if (!err)
		return -1;
	memcpy(old, err->msg, sizeof(old));
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	n = strlen(err->msg);
	snprintf(err->msg + n, sizeof(err->msg) - n, ": %s", old);
	return -1;
}

void mt_err_clear(struct mt_err *err)
{
	if (err) {
		err->code = 0;
		err->msg[0] = '\0';
	}
}
