// rope.cu: rotary embedding in place on a fused QKV buffer (see rope.h).
#include "rope.h"

#include "common.cuh"

// the offset in a QKV row of rotated head hh: the np query heads, then the ng key heads
// (Megatron's layout: per query group its query heads, its key head, its value head)
__device__ __forceinline__ int rope_head_off(int hh, int np, int per, int hd)
{
	return hh < np ? ((hh / per) * (per + 2) + hh % per) * hd : ((hh - np) * (per + 2) + per) * hd;
}

template <typename T>
__global__ void rope_k(T *qkv, const float *cs, int64_t N, int T_, int np, int ng, int hd, int inverse)
{
	int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	int half = hd / 2, per = np / ng, heads = np + ng, row = (np + 2 * ng) * hd;
	int64_t n;
	int hh, i, off, t;
	float c, s, x1, x2;

	if (idx >= N * heads * half)
		return;
	i = (int)(idx % half);
	hh = (int)((idx / half) % heads);
	n = idx / half / heads;
	t = (int)(n % T_);
	off = rope_head_off(hh, np, per, hd);
	c = cs[((int64_t)t * half + i) * 2];
	s = cs[((int64_t)t * half + i) * 2 + 1];
	if (inverse)
		s = -s;
	T *x = qkv + n * row + off;
	x1 = to_f(x[i]);
	x2 = to_f(x[i + half]);
	x[i] = from_f<T>(x1 * c - x2 * s);
	x[i + half] = from_f<T>(x2 * c + x1 * s);
}

// The vector path (16-bit types, where 8 elements are 16 bytes): 8 consecutive pairs
// (i, i + hd/2) of a head a thread, a token row per block row: no 64-bit
// division per element (see swiglu.cu for what the scalar kernel cost)
template <typename T>
__global__ void rope_v(T *qkv, const float *cs, int64_t N, int T_, int np, int ng, int hd, int inverse)
{
	int half = hd / 2, per = np / ng, heads = np + ng, row = (np + 2 * ng) * hd;
	int v = blockIdx.x * blockDim.x + threadIdx.x, hh = v / (half / 8), i = (v % (half / 8)) * 8, off;
	if (hh >= heads)
		return;
	off = rope_head_off(hh, np, per, hd);
	for (int64_t n = blockIdx.y; n < N; n += gridDim.y) {
		const float4 *c4 = (const float4 *)(cs + ((int64_t)(n % T_) * half + i) * 2);
		T *x = qkv + n * row + off + i;
		float a[8], b[8];
		vec16<T>::load(a, x);
		vec16<T>::load(b, x + half);
#pragma unroll
		for (int q = 0; q < 4; q++) {
			float4 t = c4[q]; // cos, sin of pair 2q, then of 2q + 1
			float s0 = inverse ? -t.y : t.y, s1 = inverse ? -t.w : t.w;
			float a0 = a[2 * q], b0 = b[2 * q], a1 = a[2 * q + 1], b1 = b[2 * q + 1];
			a[2 * q] = a0 * t.x - b0 * s0;
			b[2 * q] = b0 * t.x + a0 * s0;
			a[2 * q + 1] = a1 * t.z - b1 * s1;
			b[2 * q + 1] = b1 * t.z + a1 * s1;
		}
		vec16<T>::store(x, a);
		vec16<T>::store(x + half, b);
	}
}

template <typename T>
static int rope(void *qkv, const float *cs, int64_t N, int64_t T_, int np, int ng, int hd, int inverse)
{
	int64_t total = N * (np + ng) * (hd / 2);

	if constexpr (sizeof(T) == 2) {
		if (hd % 16 == 0 && (uintptr_t)qkv % 16 == 0 && (uintptr_t)cs % 16 == 0) {
			int vecs = (np + ng) * (hd / 16);
			dim3 grid((unsigned)((vecs + 127) / 128), (unsigned)(N < 65535 ? N : 65535));
			rope_v<T><<<grid, 128, 0, MT_STREAM>>>((T *)qkv, cs, N, (int)T_, np, ng, hd, inverse);
			MT_LAUNCH_CHECK("rope");
			return 0;
		}
	}
	rope_k<T><<<(unsigned)((total + 255) / 256), 256, 0, MT_STREAM>>>((T *)qkv, cs, N, (int)T_, np, ng, hd, inverse);
	MT_LAUNCH_CHECK("rope");
	return 0;
}

extern "C" int mt_rope(enum mt_dtype dt, void *qkv, const float *cs, int64_t N, int64_t T_, int np, int ng, int hd,
		       int inverse)
{
	MT_REQUIRE(N > 0 && T_ > 0 && ng > 0 && np % ng == 0 && hd % 2 == 0, "rope: bad shape");
	return MT_DISPATCH(dt, rope, qkv, cs, N, T_, np, ng, hd, inverse);
}
