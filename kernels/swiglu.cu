// swiglu.cu: SwiGLU forward and backward (see swiglu.h); fp32 math.
#include "swiglu.h"

#include "common.cuh"

template <typename T>
__global__ void swiglu_fwd_k(T *out, const T *in, int64_t N, int64_t f)
{
	for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < N * f; k += (int64_t)gridDim.x * blockDim.x) {
		int64_t n = k / f, i = k % f;
		float a = to_f(in[n * 2 * f + i]), b = to_f(in[n * 2 * f + f + i]);
		out[k] = from_f<T>(a / (1.0f + expf(-a)) * b);
	}
}

template <typename T>
__global__ void swiglu_bwd_k(T *din, const T *dout, const T *in, int64_t N, int64_t f)
{
	for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < N * f; k += (int64_t)gridDim.x * blockDim.x) {
		int64_t n = k / f, i = k % f;
		float a = to_f(in[n * 2 * f + i]), b = to_f(in[n * 2 * f + f + i]), g = to_f(dout[k]);
		float s = 1.0f / (1.0f + expf(-a));
		din[n * 2 * f + i] = from_f<T>(g * b * s * (1.0f + a * (1.0f - s)));
		din[n * 2 * f + f + i] = from_f<T>(g * a * s);
	}
}

static unsigned grid_for(int64_t n)
{
	int64_t b = (n + 255) / 256;
	return (unsigned)(b < 65536 ? b : 65536);
}

template <typename T>
static int swiglu_fwd(void *out, const void *in, int64_t N, int64_t f)
{
	swiglu_fwd_k<T><<<grid_for(N * f), 256, 0, MT_STREAM>>>((T *)out, (const T *)in, N, f);
	MT_LAUNCH_CHECK("swiglu");
	return 0;
}

template <typename T>
static int swiglu_bwd(void *din, const void *dout, const void *in, int64_t N, int64_t f)
{
	swiglu_bwd_k<T><<<grid_for(N * f), 256, 0, MT_STREAM>>>((T *)din, (const T *)dout, (const T *)in, N, f);
	MT_LAUNCH_CHECK("swiglu");
	return 0;
}

extern "C" int mt_swiglu_fwd(enum mt_dtype dt, void *out, const void *in, int64_t N, int64_t f)
{
	MT_REQUIRE(N > 0 && f > 0, "swiglu: empty");
	return MT_DISPATCH(dt, swiglu_fwd, out, in, N, f);
}

extern "C" int mt_swiglu_bwd(enum mt_dtype dt, void *din, const void *dout, const void *in, int64_t N, int64_t f)
{
	MT_REQUIRE(N > 0 && f > 0, "swiglu: empty");
	return MT_DISPATCH(dt, swiglu_bwd, din, dout, in, N, f);
}
