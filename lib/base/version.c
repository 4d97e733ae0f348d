/* version.c: version and build features, from the Makefile's -D flags. */
#include "base/version.h"

#include <archive.h>
#include <jansson.h>
#include <stdio.h>

#ifndef MT_VERSION
#define MT_VERSION "unknown"
#endif

#ifdef MT_HAVE_CUDA
#include "../../kernels/device.h"
#endif

const char *mt_version(void) { return MT_VERSION; }

void mt_version_features(char *buf, size_t n)
{
	size_t k = 0;

	k += (size_t)snprintf(buf + k, n - k, "libarchive: %s\njansson: %s\n",
			      archive_version_details(), JANSSON_VERSION);
#ifdef MT_HAVE_CUDA
	if (k < n) {
		char dev[256];
		mt_cuda_describe(dev, sizeof(dev));
		k += (size_t)snprintf(buf + k, n - k, "cuda: %s\n", dev);
	}
#else
	if (k < n)
		k += (size_t)snprintf(buf + k, n - k, "cuda: not built (CPU only)\n");
#endif
	(void)k;
}
