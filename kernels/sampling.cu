// sampling.cu: one token a row of logits on the GPU (see sampling.h).
//
// A block of 1024 threads a row. First the largest logit and its lowest id (greedy stops
// there). Otherwise each id's weight is exp(z / T - zmax / T) in double (sample.c's
// arithmetic), held as an integer in units of 2^-40. Top-k: the k-th largest logit by a
// radix select over the logits' bits (four passes of 8 bits, counts in shared memory);
// every logit at least that one is kept. Top-p: the same four passes with the weight of
// each bin beside its count find the smallest logit z* whose larger logits together weigh
// at most top_p of the total; the ids above z* are kept, and of the ids equal to z*
// (ties, taken in id order as a sort would) those whose predecessors still weigh at most
// top_p. The draw: each thread sums the kept weights of a contiguous range of ids, a
// block scan gives each range its start, and the thread whose range holds u x total
// walks it to the id where the running sum passes it. Integer sums do not depend on the
// threads' order, so the choice is the same every run.
#include "sampling.h"

#include <limits.h>

#include "common.cuh"

#define THREADS 1024
#define NW (THREADS / 32)

typedef unsigned long long u64;

// logits as unsigned keys in the same order (-0 as +0, so equal logits have equal keys)
__device__ __forceinline__ uint32_t key_of(float z)
{
	uint32_t b = __float_as_uint(z);
	if (b == 0x80000000u)
		b = 0;
	return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float z_of(uint32_t k)
{
	return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// exp(z / t - mx) in units of 2^-40 (at most 2^40: sums of up to 2^23 ids fit 63 bits)
__device__ __forceinline__ u64 weight(float z, double t, double mx)
{
	return __double2ull_rn(exp((double)z / t - mx) * 0x1p40);
}

// inclusive prefix sum over the warp's lanes
template <typename U> __device__ __forceinline__ U warp_scan(U v, int lane)
{
	for (int o = 1; o < 32; o <<= 1) {
		U y = __shfl_up_sync(0xffffffffu, v, o);
		if (lane >= o)
			v += y;
	}
	return v;
}

// exclusive prefix sum over the block in thread order; *total: the sum of all
__device__ u64 block_scan(u64 v, u64 *total, u64 *sh)
{
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	u64 x = warp_scan(v, lane), r;

	if (lane == 31)
		sh[w] = x;
	__syncthreads();
	if (w == 0) {
		sh[lane] = warp_scan(sh[lane], lane);
	}
	__syncthreads();
	r = (w ? sh[w - 1] : 0) + x - v;
	*total = sh[NW - 1];
	__syncthreads();
	return r;
}

__global__ void __launch_bounds__(THREADS) sample_k(int32_t *ids, const float *logits, int64_t ld, int vocab,
						   const struct mt_sample_dev *sp, const double *u)
{
	__shared__ float s_val[NW];
	__shared__ int s_id[NW];
	__shared__ uint32_t cnt[256];
	__shared__ u64 mass[256];
	__shared__ u64 s_scan[NW];
	__shared__ uint32_t s_sel[2];
	__shared__ u64 s_sel64[2];
	const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
	const int C = (vocab + THREADS - 1) / THREADS;
	const int v0 = min(tid * C, vocab), v1 = min(v0 + C, vocab);
	const float *z;
	float bv = -INFINITY;
	int bi = INT_MAX, mode = 0, K;
	double T, P, mx;
	uint32_t kth = 0, prefix = 0, pmask = 0, ties = 0;
	u64 above = 0, plim = 0, keep_ties = 0, tie_base = 0, S = 0, base, W, R, tot;

	pdl_launch();
	pdl_wait();
	z = logits + (int64_t)blockIdx.x * ld;
	T = sp->temperature;
	P = sp->top_p;
	K = sp->top_k;

	// the largest logit, the lowest id on ties
	for (int v = tid; v < vocab; v += THREADS) {
		float x = z[v];
		if (x > bv || bi == INT_MAX)
			bv = x, bi = v;
	}
	for (int o = 16; o > 0; o >>= 1) {
		float ov = __shfl_xor_sync(0xffffffffu, bv, o);
		int oi = __shfl_xor_sync(0xffffffffu, bi, o);
		if (oi != INT_MAX && (bi == INT_MAX || ov > bv || (ov == bv && oi < bi)))
			bv = ov, bi = oi;
	}
	if (lane == 0)
		s_val[w] = bv, s_id[w] = bi;
	__syncthreads();
	if (w == 0) {
		bv = s_val[lane];
		bi = s_id[lane];
		for (int o = 16; o > 0; o >>= 1) {
			float ov = __shfl_xor_sync(0xffffffffu, bv, o);
			int oi = __shfl_xor_sync(0xffffffffu, bi, o);
			if (oi != INT_MAX && (bi == INT_MAX || ov > bv || (ov == bv && oi < bi)))
				bv = ov, bi = oi;
		}
		if (lane == 0)
			s_val[0] = bv, s_id[0] = bi;
	}
	__syncthreads();
	bv = s_val[0];
	bi = s_id[0];
	if (T == 0 || K == 1) {
		if (tid == 0)
			ids[blockIdx.x] = bi;
		return;
	}
	mx = (double)bv / T;

	if (K > 1 && K < vocab) {
		// top-k: the K-th largest key, 8 bits a pass from the top
		uint32_t want = (uint32_t)K;
		mode = 1;
		for (int pass = 0; pass < 4; pass++) {
			int shift = 24 - 8 * pass;
			if (tid < 256)
				cnt[tid] = 0;
			__syncthreads();
			for (int v = tid; v < vocab; v += THREADS) {
				uint32_t k = key_of(z[v]);
				if ((k & pmask) == prefix)
					atomicAdd(&cnt[(k >> shift) & 255], 1u);
			}
			__syncthreads();
			if (w == 0) {
				// lane l holds bins 255 - 8l down to 248 - 8l
				uint32_t loc = 0, inc, c, before = 0;
				int found = -1;
				unsigned bal;
				for (int i = 0; i < 8; i++)
					loc += cnt[255 - 8 * lane - i];
				inc = warp_scan(loc, lane);
				c = inc - loc;
				for (int i = 0; i < 8; i++) {
					int b = 255 - 8 * lane - i;
					if (found < 0 && c + cnt[b] >= want)
						found = b, before = c;
					c += cnt[b];
				}
				bal = __ballot_sync(0xffffffffu, found >= 0);
				if (lane == __ffs(bal) - 1)
					s_sel[0] = (uint32_t)found, s_sel[1] = want - before;
			}
			__syncthreads();
			prefix |= s_sel[0] << shift;
			pmask |= 255u << shift;
			want = s_sel[1];
			__syncthreads();
		}
		kth = prefix;
	} else if (P > 0 && P < 1) {
		// top-p: the smallest key z* with the weight of the larger keys at most P of the
		// total; bins hold counts and weights
		mode = 2;
		for (int pass = 0; pass < 4; pass++) {
			int shift = 24 - 8 * pass;
			if (tid < 256)
				cnt[tid] = 0, mass[tid] = 0;
			__syncthreads();
			for (int v = tid; v < vocab; v += THREADS) {
				float x = z[v];
				uint32_t k = key_of(x);
				if ((k & pmask) == prefix) {
					int b = (k >> shift) & 255;
					atomicAdd(&cnt[b], 1u);
					atomicAdd(&mass[b], weight(x, T, mx));
				}
			}
			__syncthreads();
			if (w == 0) {
				u64 loc = 0, inc, acc, cacc = 0;
				int cand = -1;
				unsigned bal;
				for (int i = 0; i < 8; i++)
					loc += mass[255 - 8 * lane - i];
				inc = warp_scan(loc, lane);
				if (pass == 0) /* every id is in the first pass's bins */
					plim = (u64)(P * (double)__shfl_sync(0xffffffffu, inc, 31));
				acc = above + inc - loc;
				for (int i = 0; i < 8; i++) {
					int b = 255 - 8 * lane - i;
					if (cnt[b] && acc <= plim)
						cand = b, cacc = acc;
					acc += mass[b];
				}
				bal = __ballot_sync(0xffffffffu, cand >= 0);
				if (lane == 31 - __clz(bal)) {
					s_sel[0] = (uint32_t)cand;
					s_sel[1] = cnt[cand];
					s_sel64[0] = cacc;
					s_sel64[1] = plim;
				}
			}
			__syncthreads();
			prefix |= s_sel[0] << shift;
			pmask |= 255u << shift;
			ties = s_sel[1];
			above = s_sel64[0];
			plim = s_sel64[1];
			__syncthreads();
		}
		{
			// of the ties at z*, the first m in id order: each one's predecessors weigh
			// above + j q* <= plim
			u64 q = weight(z_of(prefix), T, mx), m = q ? (plim - above) / q + 1 : ties;
			uint32_t tc = 0;
			keep_ties = m < ties ? m : ties;
			for (int v = v0; v < v1; v++)
				tc += key_of(z[v]) == prefix;
			tie_base = block_scan(tc, &tot, s_scan);
		}
	}

	// the draw: kept weights summed over contiguous ranges of ids
#define KEPT(k, tr) (mode == 0 || (mode == 1 ? (k) >= kth : (k) > prefix || ((k) == prefix && (tr)++ < keep_ties)))
	{
		u64 tr = tie_base;
		for (int v = v0; v < v1; v++) {
			float x = z[v];
			uint32_t k = key_of(x);
			if (KEPT(k, tr))
				S += weight(x, T, mx);
		}
	}
	base = block_scan(S, &W, s_scan);
	R = (u64)(u[blockIdx.x] * (double)W);
	if (R >= W)
		R = W - 1;
	if (W == 0 && tid == 0) /* not reached: the largest logit always stays, weighing 2^40 */
		ids[blockIdx.x] = bi;
	if (S > 0 && base <= R && R - base < S) {
		u64 tr = tie_base, acc = base;
		for (int v = v0; v < v1; v++) {
			float x = z[v];
			uint32_t k = key_of(x);
			if (KEPT(k, tr)) {
				acc += weight(x, T, mx);
				if (acc > R) {
					ids[blockIdx.x] = v;
					break;
				}
			}
		}
	}
#undef KEPT
}

extern "C" int mt_sample_rows(int32_t *ids, const float *logits, int64_t ld, int64_t vocab, int N,
			      const struct mt_sample_dev *p, const double *u)
{
	MT_REQUIRE(N > 0 && N < 65536 && vocab > 0 && vocab <= ld && vocab < (1 << 23),
		   "sample_rows: bad shape (%d rows, vocabulary %lld of %lld)", N, (long long)vocab, (long long)ld);
	MT_CUDA_CHECK(mt_launch(sample_k, dim3((unsigned)N), dim3(THREADS), 0, ids, logits, ld, (int)vocab, p, u));
	return 0;
}
