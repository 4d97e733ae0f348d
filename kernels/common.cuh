// common.cuh: what the kernel files share: element conversions, warp sums, the check
// macros, the launch stream and dispatch over mt_dtype. Included by kernels/*.cu only.
#ifndef MT_KERNELS_COMMON_CUH
#define MT_KERNELS_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_err.h"

#define MT_CUDA_CHECK(call)                                                                        \
	do {                                                                                       \
		cudaError_t e_ = (call);                                                           \
		if (e_ != cudaSuccess)                                                             \
			return mt_cuda_fail(__FILE__, __LINE__, "%s: %s", #call, cudaGetErrorString(e_)); \
	} while (0)

// the stream every launch goes to (cuda_err.h)
#define MT_STREAM ((cudaStream_t)mt_cuda_stream())

// after a launch: the configuration error, if any
#define MT_LAUNCH_CHECK(what) MT_CUDA_CHECK(cudaGetLastError())

// the current device's multiprocessors, read once (1 if the runtime cannot say)
inline int sm_count(void)
{
	static int n;
	if (!n) {
		int dev = 0;
		if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
			n = 1;
	}
	return n;
}

#define MT_REQUIRE(cond, ...)                                                                      \
	do {                                                                                       \
		if (!(cond))                                                                       \
			return mt_cuda_fail(__FILE__, __LINE__, __VA_ARGS__);                      \
	} while (0)

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }

__device__ __forceinline__ float warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float warp_max(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// 2^x, one MUFU instruction (ex2.approx.ftz: relative error ~2^-22; subnormal results
// flush to 0; -inf gives 0)
__device__ __forceinline__ float ex2(float x)
{
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
	return y;
}

// two floats to a register of two 16-bit values, lo in the low half (one conversion)
template <typename T> __device__ __forceinline__ unsigned pack2(float lo, float hi);
template <> __device__ __forceinline__ unsigned pack2<__nv_bfloat16>(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
	return *(unsigned *)&v;
}
template <> __device__ __forceinline__ unsigned pack2<__half>(float lo, float hi)
{
	__half2 v = __floats2half2_rn(lo, hi);
	return *(unsigned *)&v;
}

// the sum of the two 16-bit values of a register, in fp32
template <typename T> __device__ __forceinline__ float sum2(unsigned u)
{
	return to_f(__ushort_as_bfloat16((unsigned short)(u & 0xffffu))) +
	       to_f(__ushort_as_bfloat16((unsigned short)(u >> 16)));
}
template <> __device__ __forceinline__ float sum2<__half>(unsigned u)
{
	return __half2float(__ushort_as_half((unsigned short)(u & 0xffffu))) +
	       __half2float(__ushort_as_half((unsigned short)(u >> 16)));
}

// 16 bytes of T (8 bf16/fp16 or 4 fp32) as floats: one int4 load or store
template <typename T> struct vec16 {
	static constexpr int N = 16 / sizeof(T);
	__device__ __forceinline__ static void unpack(float *f, int4 raw)
	{
		const T *e = (const T *)&raw;
		for (int k = 0; k < N; k++)
			f[k] = to_f(e[k]);
	}
	__device__ __forceinline__ static int4 pack(const float *f)
	{
		int4 raw;
		T *e = (T *)&raw;
		for (int k = 0; k < N; k++)
			e[k] = from_f<T>(f[k]);
		return raw;
	}
	__device__ __forceinline__ static void load(float *f, const T *p) { unpack(f, *(const int4 *)p); }
	__device__ __forceinline__ static void store(T *p, const float *f) { *(int4 *)p = pack(f); }
};

// Programmatic dependent launch (sm_90 and above; nothing on earlier targets or when the
// kernel was launched without the attribute): pdl_launch lets the next kernel on the
// stream start now; pdl_wait blocks until the kernel before this one has finished and
// its writes are visible. A kernel reads nothing its predecessor writes, and writes
// nothing, before pdl_wait.
__device__ __forceinline__ void pdl_launch()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// k<<<grid, block, smem, MT_STREAM>>>(args...), as a programmatic dependent launch when
// mt_cuda_pdl() is on, in clusters of `cluster` blocks along x when above 1 (sm_90 on)
template <typename... KArgs, typename... Args>
static cudaError_t mt_launch_cluster(void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem, unsigned cluster,
				     Args... args)
{
	cudaLaunchConfig_t cfg = {};
	cudaLaunchAttribute at[2];

	cfg.gridDim = grid;
	cfg.blockDim = block;
	cfg.dynamicSmemBytes = smem;
	cfg.stream = MT_STREAM;
	cfg.attrs = at;
	if (mt_cuda_pdl()) {
		at[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
		at[cfg.numAttrs++].val.programmaticStreamSerializationAllowed = 1;
	}
	if (cluster > 1) {
		at[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
		at[cfg.numAttrs].val.clusterDim.x = cluster;
		at[cfg.numAttrs].val.clusterDim.y = 1;
		at[cfg.numAttrs++].val.clusterDim.z = 1;
	}
	return cudaLaunchKernelEx(&cfg, k, ((KArgs)args)...);
}
template <typename... KArgs, typename... Args>
static cudaError_t mt_launch(void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem, Args... args)
{
	return mt_launch_cluster(k, grid, block, smem, 1, args...);
}

// cp.async (sm_80 on): 16-byte (and 4-byte) copies global -> shared, completed by groups
__device__ __forceinline__ void cp16(void *dst, const void *src)
{
	unsigned sa = (unsigned)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(src));
}
__device__ __forceinline__ void cp4(void *dst, const void *src)
{
	unsigned sa = (unsigned)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(sa), "l"(src));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// call F<T>(args...) for the element type named by dt
#define MT_DISPATCH(dt, F, ...)                                                                    \
	((dt) == MT_F32 ? F<float>(__VA_ARGS__)                                                    \
	 : (dt) == MT_BF16 ? F<__nv_bfloat16>(__VA_ARGS__)                                         \
			   : F<__half>(__VA_ARGS__))

#endif
