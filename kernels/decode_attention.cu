// decode_attention.cu: one query row a sequence over its cached keys and values (see
// decode_attention.h).
//
// One kernel, a block of 128 threads per (split of MT_DECODE_SPLIT positions, head, row).
// The query, scaled by 1/sqrt(hd), goes to shared memory; two threads a position take
// half of its key each (16-byte loads) and add their halves with a shuffle; warp 0 takes
// the maximum m and turns the scores into exp(score - m) with their sum l; then each
// thread sums p_j v_j for 16 bytes of dimensions over a share of the positions, and the
// shares are added in order. A row of one split writes y = o / l at once. Otherwise each
// split leaves (o, m, l) in scratch and counts itself done on its (row, head) counter; the
// last to finish rescales the splits to the largest m and sums them in split order (the
// same bits whichever finishes last), writes y and sets the counter back to zero. Splits
// past a row's length do nothing, so one launch shape serves every length (what a CUDA
// graph needs). Under programmatic dependent launch a block loads its earlier positions'
// keys and values before waiting for the QKV kernel (only the newest position's come from
// it): batch 1 3,208-3,259 against 3,060-3,106 tokens/s (GPT-2 124M bf16, H200, 8 x 1000
// greedy tokens, same call, same tokens).
#include "decode_attention.h"

#include "common.cuh"

#define THREADS 128
#define SPLIT MT_DECODE_SPLIT
static_assert(THREADS == 2 * SPLIT, "two threads a position");

// n elements of T from p as floats: 16-byte loads where n fills them
template <typename T, int n> __device__ __forceinline__ void load_n(float *f, const T *p)
{
	using V = vec16<T>;
	if constexpr (n % V::N == 0) {
#pragma unroll
		for (int i = 0; i < n; i += V::N)
			V::load(f + i, p + i);
	} else {
#pragma unroll
		for (int i = 0; i < n; i++)
			f[i] = to_f(p[i]);
	}
}

template <typename T, int HD>
__global__ void __launch_bounds__(THREADS) attn_k(T *y, float *part, int *done, const T *qkv, const T *kc,
						 const T *vc, const int32_t *slot, const int32_t *pos, int np, int ng,
						 int max_len, int S, float scale)
{
	constexpr int VN = HD % vec16<T>::N == 0 ? vec16<T>::N : 1; // dimensions a thread sums
	constexpr int DV = HD / VN, PG = THREADS / DV;                // dimension groups, position groups
	__shared__ float q[HD], p[SPLIT], acc[PG][HD + 1], ml[2];
	__shared__ int last;
	const int s = blockIdx.x, hh = blockIdx.y, tid = threadIdx.x;
	const int64_t r = blockIdx.z;
	const int per = np / ng, g = hh / per;
	int len, j0, cnt, ns;
	const T *qr, *K, *V;
	float *o;

	constexpr int VP = (SPLIT + PG - 1) / PG;                     // positions a thread sums
	const int jk = tid >> 1, h0 = (tid & 1) * (HD / 2), c = tid % DV, pg = tid / DV;
	float kv[HD / 2], vv[VP][VN];

	pdl_launch();
	// Before the wait, what no kernel of this step writes: the step's positions and slots
	// (copied before its first kernel, which every later one starts after), and the keys
	// and values of the earlier positions. The newest position's come from the QKV kernel
	// just before, so they are read after the wait, with the query.
	len = pos[r] + 1;
	j0 = s * SPLIT;
	if (j0 >= len)
		return;
	cnt = len - j0 < SPLIT ? len - j0 : SPLIT;
	ns = (len + SPLIT - 1) / SPLIT;
	K = kc + (((int64_t)slot[r] * ng + g) * max_len + j0) * HD;
	V = vc + (((int64_t)slot[r] * ng + g) * max_len + j0) * HD;
	if (jk < cnt && j0 + jk < len - 1)
		load_n<T, HD / 2>(kv, K + (int64_t)jk * HD + h0);
#pragma unroll
	for (int i = 0; i < VP; i++) {
		int j = pg + i * PG;
		if (pg < PG && j < cnt && j0 + j < len - 1)
			load_n<T, VN>(vv[i], V + (int64_t)j * HD + c * VN);
	}
	pdl_wait();
	qr = qkv + r * (int64_t)(np + 2 * ng) * HD + (int64_t)(g * (per + 2) + hh % per) * HD;
	for (int d = tid; d < HD; d += THREADS)
		q[d] = to_f(qr[d]) * scale;
	__syncthreads();
	{
		// scores: two threads a position (SPLIT = THREADS / 2)
		float dot = 0;
		if (jk < cnt) {
			if (j0 + jk == len - 1)
				load_n<T, HD / 2>(kv, K + (int64_t)jk * HD + h0);
#pragma unroll
			for (int d = 0; d < HD / 2; d++)
				dot += q[h0 + d] * kv[d];
		}
		dot += __shfl_xor_sync(0xffffffffu, dot, 1);
		if (jk < cnt && !(tid & 1))
			p[jk] = dot;
	}
	__syncthreads();
	if (tid < 32) {
		float m = -INFINITY, l = 0;
		for (int j = tid; j < cnt; j += 32)
			m = fmaxf(m, p[j]);
		m = warp_max(m);
		for (int j = tid; j < cnt; j += 32) {
			float e = expf(p[j] - m);
			p[j] = e;
			l += e;
		}
		l = warp_sum(l);
		if (tid == 0)
			ml[0] = m, ml[1] = l;
	}
	__syncthreads();
	{
		float a[VN];
#pragma unroll
		for (int e = 0; e < VN; e++)
			a[e] = 0;
#pragma unroll
		for (int i = 0; i < VP; i++) {
			int j = pg + i * PG;
			if (pg < PG && j < cnt) {
				float pj = p[j];
				if (j0 + j == len - 1)
					load_n<T, VN>(vv[i], V + (int64_t)j * HD + c * VN);
#pragma unroll
				for (int e = 0; e < VN; e++)
					a[e] += pj * vv[i][e];
			}
		}
		if (pg < PG)
#pragma unroll
			for (int e = 0; e < VN; e++)
				acc[pg][c * VN + e] = a[e];
	}
	__syncthreads();
	if (ns == 1) {
		for (int d = tid; d < HD; d += THREADS) {
			float t = 0;
			for (int k = 0; k < PG; k++)
				t += acc[k][d];
			y[r * (int64_t)np * HD + (int64_t)hh * HD + d] = from_f<T>(t / ml[1]);
		}
		return;
	}
	o = part + (((int64_t)r * np + hh) * S + s) * (HD + 2);
	for (int d = tid; d < HD; d += THREADS) {
		float t = 0;
		for (int k = 0; k < PG; k++)
			t += acc[k][d];
		o[d] = t;
	}
	if (tid == 0)
		o[HD] = ml[0], o[HD + 1] = ml[1];
	__threadfence();
	__syncthreads();
	if (tid == 0)
		last = atomicAdd(&done[r * np + hh], 1) == ns - 1;
	__syncthreads();
	if (!last)
		return;
	__threadfence();
	{
		const float *pr = part + ((int64_t)r * np + hh) * S * (HD + 2);
		float m = -INFINITY;
		for (int k = 0; k < ns; k++)
			m = fmaxf(m, __ldcg(pr + k * (HD + 2) + HD));
		for (int d = tid; d < HD; d += THREADS) {
			float l = 0, t = 0;
			for (int k = 0; k < ns; k++) {
				float c = expf(__ldcg(pr + k * (HD + 2) + HD) - m);
				l += __ldcg(pr + k * (HD + 2) + HD + 1) * c;
				t += __ldcg(pr + k * (HD + 2) + d) * c;
			}
			y[r * (int64_t)np * HD + (int64_t)hh * HD + d] = from_f<T>(t / l);
		}
		if (tid == 0)
			done[r * np + hh] = 0;
	}
}

static int splits(int max_len)
{
	return (max_len + SPLIT - 1) / SPLIT;
}

static int64_t part_floats(int64_t N, int np, int hd, int max_len)
{
	return (N * np * splits(max_len) * (int64_t)(hd + 2) + 3) & ~(int64_t)3;
}

extern "C" int64_t mt_decode_attention_scratch(int64_t N, int np, int hd, int max_len)
{
	return part_floats(N, np, hd, max_len) + N * np;
}

extern "C" int mt_decode_attention_reset(float *scratch, int64_t N, int np, int hd, int max_len)
{
	MT_CUDA_CHECK(cudaMemsetAsync(scratch + part_floats(N, np, hd, max_len), 0, (size_t)(N * np) * sizeof(int),
				      MT_STREAM));
	return 0;
}

template <typename T, int HD>
static int launch(void *y, const void *qkv, const void *kc, const void *vc, const int32_t *slot, const int32_t *pos,
		  int64_t N, int np, int ng, int max_len, float *scratch, int64_t slots_n)
{
	int S = splits(max_len);

	MT_CUDA_CHECK(mt_launch(attn_k<T, HD>, dim3((unsigned)S, (unsigned)np, (unsigned)N), dim3(THREADS), 0, (T *)y,
				scratch, (int *)(scratch + part_floats(slots_n, np, HD, max_len)), (const T *)qkv,
				(const T *)kc, (const T *)vc, slot, pos, np, ng, max_len, S, (float)(1.0 / sqrt((double)HD))));
	return 0;
}

template <typename T>
static int decode_attention(void *y, const void *qkv, const void *kc, const void *vc, const int32_t *slot,
			    const int32_t *pos, int64_t N, int np, int ng, int hd, int max_len, float *scratch,
			    int64_t slots_n)
{
	switch (hd) {
	case 8:
		return launch<T, 8>(y, qkv, kc, vc, slot, pos, N, np, ng, max_len, scratch, slots_n);
	case 16:
		return launch<T, 16>(y, qkv, kc, vc, slot, pos, N, np, ng, max_len, scratch, slots_n);
	case 32:
		return launch<T, 32>(y, qkv, kc, vc, slot, pos, N, np, ng, max_len, scratch, slots_n);
	case 64:
		return launch<T, 64>(y, qkv, kc, vc, slot, pos, N, np, ng, max_len, scratch, slots_n);
	default:
		return launch<T, 128>(y, qkv, kc, vc, slot, pos, N, np, ng, max_len, scratch, slots_n);
	}
}

extern "C" int mt_decode_attention(enum mt_dtype dt, void *y, const void *qkv, const void *kc, const void *vc,
				   const int32_t *slot, const int32_t *pos, int64_t N, int np, int ng, int hd,
				   int max_len, float *scratch, int64_t scratch_rows)
{
	MT_REQUIRE(N > 0 && N <= scratch_rows && N < 65536 && ng > 0 && np % ng == 0 && np < 65536 &&
			   (hd == 8 || hd == 16 || hd == 32 || hd == 64 || hd == 128) && max_len > 0,
		   "decode_attention: bad shape (N %lld of %lld, heads %d/%d, head size %d)", (long long)N,
		   (long long)scratch_rows, np, ng, hd);
	return MT_DISPATCH(dt, decode_attention, y, qkv, kc, vc, slot, pos, N, np, ng, hd, max_len, scratch, scratch_rows);
}
