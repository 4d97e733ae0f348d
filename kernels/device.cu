// device.cu: device discovery for --version and for choosing the backend.
// Reports, never fails: a machine without a driver simply has 0 devices.
#include "device.h"

#include <cuda_runtime.h>
#include <stdio.h>

#ifndef MT_CUDA_ARCHS
#define MT_CUDA_ARCHS "unknown"
#endif

extern "C" int mt_cuda_device_count(void)
{
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		cudaGetLastError(); // clear the sticky error for later callers
		return 0;
	}
	return n;
}

extern "C" void mt_cuda_describe(char *buf, size_t n)
{
	int rt = 0, count = mt_cuda_device_count();
	size_t k;

	cudaRuntimeGetVersion(&rt);
	k = (size_t)snprintf(buf, n, "built for %s, runtime %d.%d, %d device%s visible", MT_CUDA_ARCHS,
			     rt / 1000, (rt % 1000) / 10, count, count == 1 ? "" : "s");
	for (int i = 0; i < count && k < n; i++) {
		cudaDeviceProp p;
		if (cudaGetDeviceProperties(&p, i) == cudaSuccess)
			k += (size_t)snprintf(buf + k, n - k, "%s%s (sm_%d%d)", i ? ", " : ": ", p.name,
					      p.major, p.minor);
	}
}
