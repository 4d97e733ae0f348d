// rope.cu: rotary embedding in place on a fused QKV buffer (see rope.h).
#include "rope.h"

#include "common.cuh"

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
	if (hh < np)
		off = ((hh / per) * (per + 2) + hh % per) * hd;
	else
		off = ((hh - np) * (per + 2) + per) * hd;
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

template <typename T>
static int rope(void *qkv, const float *cs, int64_t N, int64_t T_, int np, int ng, int hd, int inverse)
{
	int64_t total = N * (np + ng) * (hd / 2);

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
