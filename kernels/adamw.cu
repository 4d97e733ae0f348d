// adamw.cu: multi-tensor AdamW, the gradient's sum of squares, and weight copies (see
// adamw.h). One block per chunk of a parameter (a table built once by the backend),
// so one launch covers every parameter and the decay flag comes with the chunk.
//
// The update is lib/optim.c's, operation for operation: IEEE-rounded multiplies, adds,
// division and sqrtf written as intrinsics so that nvcc contracts nothing, and __fmaf_rn
// exactly where ATen's lerp_ and addcmul_ fuse.
#include "adamw.h"

#include "common.cuh"

// one element's update: p, m, v in place, the gradient gi already scaled
struct adamw_el {
	float dec, w1, beta2, omb2, bc2_sqrt, eps, nss;
	bool small;
	__device__ __forceinline__ void operator()(float &p, float gi, float &mi, float &vi) const
	{
		float d;
		p = __fmul_rn(p, dec);
		mi = small ? __fmaf_rn(w1, __fsub_rn(gi, mi), mi) : __fmaf_rn(__fsub_rn(w1, 1.0f), __fsub_rn(gi, mi), gi);
		vi = __fmul_rn(vi, beta2);
		vi = __fmaf_rn(__fmul_rn(omb2, gi), gi, vi);
		d = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
		p = __fadd_rn(p, __fdiv_rn(__fmul_rn(nss, mi), d));
	}
};

// Chunks whose parameter and state offsets are both multiples of 4 (all but ZeRO shard
// edges) go 16 bytes at a time, then a scalar tail: the scalar loop alone reached about
// 2.3 TB/s on an H100 (12.1 ms a step for the 0.93B Llama-style model's 30 bytes a
// parameter)
template <typename T>
__global__ void adamw_k(const mt_chunk *chunks, mt_adamw_scalars s, float gscale, float *w, const float *g, float *m,
			float *v, T *wc)
{
	mt_chunk c = chunks[blockIdx.x];
	adamw_el u = { c.decay ? s.decay : 1.0f, s.lerp_w, s.beta2, s.one_minus_beta2, s.bc2_sqrt, s.eps, s.neg_step_size,
		       s.lerp_w < 0.5f };
	int64_t k0 = 0;

	if (c.start % 4 == 0 && c.mstart % 4 == 0) {
		int64_t nv = c.len / 4;
		for (int64_t q = threadIdx.x; q < nv; q += blockDim.x) {
			int64_t i = c.start + 4 * q, j = c.mstart + 4 * q;
			float4 p = *(float4 *)(w + j), gi = *(const float4 *)(g + i), mi = *(float4 *)(m + j), vi = *(float4 *)(v + j);
			if (gscale != 1.0f) {
				gi.x = __fmul_rn(gi.x, gscale), gi.y = __fmul_rn(gi.y, gscale);
				gi.z = __fmul_rn(gi.z, gscale), gi.w = __fmul_rn(gi.w, gscale);
			}
			u(p.x, gi.x, mi.x, vi.x);
			u(p.y, gi.y, mi.y, vi.y);
			u(p.z, gi.z, mi.z, vi.z);
			u(p.w, gi.w, mi.w, vi.w);
			*(float4 *)(w + j) = p;
			*(float4 *)(m + j) = mi;
			*(float4 *)(v + j) = vi;
			if (wc) {
				T o[4] = { from_f<T>(p.x), from_f<T>(p.y), from_f<T>(p.z), from_f<T>(p.w) };
				if (sizeof(T) == 2)
					*(uint2 *)(wc + i) = *(const uint2 *)o;
				else
					for (int e = 0; e < 4; e++)
						wc[i + e] = o[e];
			}
		}
		k0 = 4 * nv;
	}
	for (int64_t k = k0 + threadIdx.x; k < c.len; k += blockDim.x) {
		int64_t i = c.start + k, j = c.mstart + k;
		float p = w[j], gi = g[i], mi = m[j], vi = v[j];

		if (gscale != 1.0f)
			gi = __fmul_rn(gi, gscale);
		u(p, gi, mi, vi);
		w[j] = p;
		m[j] = mi;
		v[j] = vi;
		if (wc)
			wc[i] = from_f<T>(p);
	}
}

// the sum of s over a block of 256 threads, in a fixed tree order; valid in thread 0
static __device__ double block_sum256(double s, double *buf)
{
	buf[threadIdx.x] = s;
	__syncthreads();
	for (int o = 128; o > 0; o >>= 1) {
		if (threadIdx.x < o)
			buf[threadIdx.x] += buf[threadIdx.x + o];
		__syncthreads();
	}
	return buf[0];
}

// Thread t sums the chunk's 4-element groups t, t + 256, ... in order, 16 bytes a load
// where the chunk starts on a 16-byte boundary (the same order, element by element,
// where it does not: ZeRO's shard edges), four groups in flight: 4-byte loads one at a
// time reached 2.1 TB/s on an H100 (0.57 ms for 296M parameters)
__global__ void sumsq_k(const mt_chunk *chunks, float *g, float scale, double *partial)
{
	__shared__ double buf[256];
	mt_chunk c = chunks[blockIdx.x];
	float *x = g + c.start;
	int64_t ng = (c.len + 3) / 4;
	bool vec = c.start % 4 == 0;
	double s = 0;

#pragma unroll 4
	for (int64_t q = threadIdx.x; q < ng; q += blockDim.x) {
		float4 v;
		if (vec && 4 * q + 4 <= c.len) {
			v = *(const float4 *)(x + 4 * q);
		} else {
			float e[4];
			for (int k = 0; k < 4; k++)
				e[k] = 4 * q + k < c.len ? x[4 * q + k] : 0.0f;
			v = make_float4(e[0], e[1], e[2], e[3]);
		}
		if (scale != 1.0f) {
			v.x = __fmul_rn(v.x, scale), v.y = __fmul_rn(v.y, scale);
			v.z = __fmul_rn(v.z, scale), v.w = __fmul_rn(v.w, scale);
			if (vec && 4 * q + 4 <= c.len) {
				*(float4 *)(x + 4 * q) = v;
			} else {
				float e[4] = { v.x, v.y, v.z, v.w };
				for (int k = 0; k < 4; k++)
					if (4 * q + k < c.len)
						x[4 * q + k] = e[k];
			}
		}
		s += (double)v.x * (double)v.x;
		s += (double)v.y * (double)v.y;
		s += (double)v.z * (double)v.z;
		s += (double)v.w * (double)v.w;
	}
	s = block_sum256(s, buf);
	if (threadIdx.x == 0)
		partial[blockIdx.x] = s;
}

__global__ void sum_partials_k(const double *partial, int64_t n, double *out)
{
	__shared__ double buf[256];
	double s = 0;

	for (int64_t k = threadIdx.x; k < n; k += blockDim.x)
		s += partial[k];
	s = block_sum256(s, buf);
	if (threadIdx.x == 0)
		*out = s;
}

__global__ void zero_k(const mt_chunk *chunks, float *g)
{
	mt_chunk c = chunks[blockIdx.x];
	int64_t k0 = 0;

	if (c.start % 4 == 0) {
		for (int64_t q = threadIdx.x; q < c.len / 4; q += blockDim.x)
			*(float4 *)(g + c.start + 4 * q) = make_float4(0, 0, 0, 0);
		k0 = c.len / 4 * 4;
	}
	for (int64_t k = k0 + threadIdx.x; k < c.len; k += blockDim.x)
		g[c.start + k] = 0;
}

template <typename T>
__global__ void convert_k(T *dst, const float *src, int64_t n)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
		dst[i] = from_f<T>(src[i]);
}

template <typename T>
static int adamw(const mt_chunk *chunks, int64_t nchunks, const mt_adamw_scalars *s, float gscale, float *w,
		 const float *g, float *m, float *v, void *wc)
{
	adamw_k<T><<<(unsigned)nchunks, 256, 0, MT_STREAM>>>(chunks, *s, gscale, w, g, m, v, (T *)wc);
	MT_LAUNCH_CHECK("adamw");
	return 0;
}

template <typename T>
static int convert(void *dst, const float *src, int64_t n)
{
	int64_t b = (n + 255) / 256;
	convert_k<T><<<(unsigned)(b < 65536 ? b : 65536), 256, 0, MT_STREAM>>>((T *)dst, src, n);
	MT_LAUNCH_CHECK("convert");
	return 0;
}

extern "C" int mt_adamw_apply(const struct mt_chunk *chunks, int64_t nchunks, const struct mt_adamw_scalars *s,
			      float gscale, float *w, const float *g, float *m, float *v, enum mt_dtype dt, void *wc)
{
	MT_REQUIRE(nchunks > 0 && nchunks < (1ll << 31), "adamw: %lld chunks", (long long)nchunks);
	if (!wc)
		return adamw<float>(chunks, nchunks, s, gscale, w, g, m, v, NULL);
	return MT_DISPATCH(dt, adamw, chunks, nchunks, s, gscale, w, g, m, v, wc);
}

extern "C" int mt_grad_sumsq_dev(const struct mt_chunk *chunks, int64_t nchunks, float *g, float scale,
				 double *partial, double *out)
{
	MT_REQUIRE(nchunks > 0 && nchunks < (1ll << 31), "sumsq: %lld chunks", (long long)nchunks);
	sumsq_k<<<(unsigned)nchunks, 256, 0, MT_STREAM>>>(chunks, g, scale, partial);
	MT_LAUNCH_CHECK("sumsq");
	sum_partials_k<<<1, 256, 0, MT_STREAM>>>(partial, nchunks, out);
	MT_LAUNCH_CHECK("sumsq");
	return 0;
}

extern "C" int mt_zero_chunks(const struct mt_chunk *chunks, int64_t nchunks, float *g)
{
	MT_REQUIRE(nchunks > 0 && nchunks < (1ll << 31), "zero: %lld chunks", (long long)nchunks);
	zero_k<<<(unsigned)nchunks, 256, 0, MT_STREAM>>>(chunks, g);
	MT_LAUNCH_CHECK("zero");
	return 0;
}

extern "C" int mt_convert_f32(enum mt_dtype dt, void *dst, const float *src, int64_t n)
{
	MT_REQUIRE(n > 0, "convert: empty");
	return MT_DISPATCH(dt, convert, dst, src, n);
}
