// gelu.cu: GELU (tanh approximation) forward and backward (see gelu.h); fp32 math.
#include "gelu.h"

#include "common.cuh"

#define GELU_C 0.7978845608028654f

template <typename T>
__global__ void gelu_fwd_k(T *out, const T *in, int64_t n)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
		float x = to_f(in[i]);
		out[i] = from_f<T>(0.5f * x * (1.0f + tanhf(GELU_C * (x + 0.044715f * x * x * x))));
	}
}

template <typename T>
__global__ void gelu_bwd_k(T *din, const T *dout, const T *in, int64_t n)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
		float x = to_f(in[i]), th = tanhf(GELU_C * (x + 0.044715f * x * x * x));
		float d = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GELU_C * (1.0f + 3.0f * 0.044715f * x * x);
		din[i] = from_f<T>(to_f(dout[i]) * d);
	}
}

static unsigned grid_for(int64_t n)
{
	int64_t b = (n + 255) / 256;
	return (unsigned)(b < 65536 ? b : 65536);
}

template <typename T>
static int gelu_fwd(void *out, const void *in, int64_t n)
{
	gelu_fwd_k<T><<<grid_for(n), 256, 0, MT_STREAM>>>((T *)out, (const T *)in, n);
	MT_LAUNCH_CHECK("gelu");
	return 0;
}

template <typename T>
static int gelu_bwd(void *din, const void *dout, const void *in, int64_t n)
{
	gelu_bwd_k<T><<<grid_for(n), 256, 0, MT_STREAM>>>((T *)din, (const T *)dout, (const T *)in, n);
	MT_LAUNCH_CHECK("gelu");
	return 0;
}

extern "C" int mt_gelu_fwd(enum mt_dtype dt, void *out, const void *in, int64_t n)
{
	MT_REQUIRE(n > 0, "gelu: empty");
	return MT_DISPATCH(dt, gelu_fwd, out, in, n);
}

extern "C" int mt_gelu_bwd(enum mt_dtype dt, void *din, const void *dout, const void *in, int64_t n)
{
	MT_REQUIRE(n > 0, "gelu: empty");
	return MT_DISPATCH(dt, gelu_bwd, din, dout, in, n);
}
