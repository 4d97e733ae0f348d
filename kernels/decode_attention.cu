// decode_attention.cu: one query row a sequence over its cached keys and values (see
// decode_attention.h).
//
// split_k: a block of 4 warps per (split, head, row). The query, scaled by 1/sqrt(hd),
// goes to shared memory; each warp takes every 4th position of the split and computes
// its score with a warp sum; warp 0 takes the maximum m and turns the scores into
// exp(score - m) with their sum l; then each thread sums p_j v_j for one dimension over
// a share of the positions and the shares are added in order. The split leaves
// (o[hd], m, l) in scratch. combine_k: per (head, row), the splits that hold positions,
// rescaled to the largest m and summed in order; y = o / l. Splits past a row's length
// do nothing, so one launch shape serves every length (what a CUDA graph needs).
#include "decode_attention.h"

#include "common.cuh"

#define WARPS 4
#define MAXHD 128

template <typename T>
__global__ void __launch_bounds__(32 * WARPS) split_k(float *part, const T *qkv, const T *kc, const T *vc,
						     const int32_t *slot, const int32_t *pos, int np, int ng, int hd,
						     int max_len, int S, float scale)
{
	__shared__ float q[MAXHD], p[MT_DECODE_SPLIT], acc[32 * WARPS], ml[2];
	int s = blockIdx.x, hh = blockIdx.y, w = threadIdx.x / 32, lane = threadIdx.x % 32;
	int64_t r = blockIdx.z;
	int len = pos[r] + 1, j0 = s * MT_DECODE_SPLIT, cnt, per = np / ng, g = hh / per;
	const T *qr, *K, *V;

	if (j0 >= len)
		return;
	cnt = len - j0 < MT_DECODE_SPLIT ? len - j0 : MT_DECODE_SPLIT;
	qr = qkv + r * (int64_t)(np + 2 * ng) * hd + (int64_t)(g * (per + 2) + hh % per) * hd;
	K = kc + (((int64_t)slot[r] * ng + g) * max_len + j0) * hd;
	V = vc + (((int64_t)slot[r] * ng + g) * max_len + j0) * hd;
	for (int d = threadIdx.x; d < hd; d += blockDim.x)
		q[d] = to_f(qr[d]) * scale;
	__syncthreads();
	for (int j = w; j < cnt; j += WARPS) {
		float dot = 0;
		for (int d = lane; d < hd; d += 32)
			dot += q[d] * to_f(K[(int64_t)j * hd + d]);
		dot = warp_sum(dot);
		if (lane == 0)
			p[j] = dot;
	}
	__syncthreads();
	if (w == 0) {
		float m = -INFINITY, l = 0;
		for (int j = lane; j < cnt; j += 32)
			m = fmaxf(m, p[j]);
		m = warp_max(m);
		for (int j = lane; j < cnt; j += 32) {
			float e = expf(p[j] - m);
			p[j] = e;
			l += e;
		}
		l = warp_sum(l);
		if (lane == 0)
			ml[0] = m, ml[1] = l;
	}
	__syncthreads();
	{
		int G = blockDim.x / hd, d = threadIdx.x % hd, k = threadIdx.x / hd;
		float a = 0;
		if (k < G)
			for (int j = k; j < cnt; j += G)
				a += p[j] * to_f(V[(int64_t)j * hd + d]);
		acc[threadIdx.x] = a;
		__syncthreads();
		if (threadIdx.x < hd) {
			float *o = part + (((int64_t)r * np + hh) * S + s) * (hd + 2);
			float t = 0;
			for (int kk = 0; kk < G; kk++)
				t += acc[kk * hd + threadIdx.x];
			o[threadIdx.x] = t;
			if (threadIdx.x == 0)
				o[hd] = ml[0], o[hd + 1] = ml[1];
		}
	}
}

template <typename T>
__global__ void combine_k(T *y, const float *part, const int32_t *pos, int np, int hd, int S)
{
	int hh = blockIdx.x, d = threadIdx.x;
	int64_t r = blockIdx.y;
	int ns = (pos[r] + MT_DECODE_SPLIT) / MT_DECODE_SPLIT;
	const float *pr = part + ((int64_t)r * np + hh) * S * (hd + 2);
	float m = -INFINITY, l = 0, o = 0;

	if (d >= hd)
		return;
	for (int s = 0; s < ns; s++)
		m = fmaxf(m, pr[s * (hd + 2) + hd]);
	for (int s = 0; s < ns; s++) {
		float c = expf(pr[s * (hd + 2) + hd] - m);
		l += pr[s * (hd + 2) + hd + 1] * c;
		o += pr[s * (hd + 2) + d] * c;
	}
	y[r * (int64_t)np * hd + (int64_t)hh * hd + d] = from_f<T>(o / l);
}

static int splits(int max_len)
{
	return (max_len + MT_DECODE_SPLIT - 1) / MT_DECODE_SPLIT;
}

extern "C" int64_t mt_decode_attention_scratch(int64_t N, int np, int hd, int max_len)
{
	return N * np * splits(max_len) * (int64_t)(hd + 2);
}

template <typename T>
static int decode_attention(void *y, const void *qkv, const void *kc, const void *vc, const int32_t *slot,
			    const int32_t *pos, int64_t N, int np, int ng, int hd, int max_len, float *scratch)
{
	int S = splits(max_len);

	split_k<T><<<dim3((unsigned)S, (unsigned)np, (unsigned)N), 32 * WARPS, 0, MT_STREAM>>>(
		scratch, (const T *)qkv, (const T *)kc, (const T *)vc, slot, pos, np, ng, hd, max_len, S,
		(float)(1.0 / sqrt((double)hd)));
	MT_LAUNCH_CHECK("decode_attention");
	combine_k<T><<<dim3((unsigned)np, (unsigned)N), MAXHD, 0, MT_STREAM>>>((T *)y, scratch, pos, np, hd, S);
	MT_LAUNCH_CHECK("decode_attention combine");
	return 0;
}

extern "C" int mt_decode_attention(enum mt_dtype dt, void *y, const void *qkv, const void *kc, const void *vc,
				   const int32_t *slot, const int32_t *pos, int64_t N, int np, int ng, int hd,
				   int max_len, float *scratch)
{
	MT_REQUIRE(N > 0 && N < 65536 && ng > 0 && np % ng == 0 && np < 65536 && hd > 0 && hd <= MAXHD && hd % 2 == 0 &&
			   max_len > 0,
		   "decode_attention: bad shape (N %lld, heads %d/%d, head size %d)", (long long)N, np, ng, hd);
	return MT_DISPATCH(dt, decode_attention, y, qkv, kc, vc, slot, pos, N, np, ng, hd, max_len, scratch);
}
