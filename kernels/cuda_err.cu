// cuda_err.cu: the per-thread error message and launch stream of the CUDA launchers
// (see cuda_err.h).
#include "cuda_err.h"

#include <stdarg.h>
#include <stdio.h>

static thread_local char msg[512];
static thread_local void *stream;
static thread_local int pdl;

extern "C" const char *mt_cuda_error(void)
{
	return msg;
}

extern "C" int mt_cuda_fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	int k = snprintf(msg, sizeof(msg), "%s:%d: ", file, line);

	va_start(ap, fmt);
	if (k > 0 && k < (int)sizeof(msg))
		vsnprintf(msg + k, sizeof(msg) - (size_t)k, fmt, ap);
	va_end(ap);
	return -1;
}

extern "C" void mt_cuda_set_stream(void *s)
{
	stream = s;
}

extern "C" void *mt_cuda_stream(void)
{
	return stream;
}

extern "C" void mt_cuda_set_pdl(int on)
{
	pdl = on;
}

extern "C" int mt_cuda_pdl(void)
{
	return pdl;
}
