// attention.cu: causal GQA attention, forward and backward, without the T x T matrix
// (see attention.h).
//
// One thread owns one row: a query row in the forward and the query-gradient kernel, a
// key/value row in the key/value-gradient kernel, with the other side streamed through
// shared memory in tiles. The forward is the online softmax (running max and sum); the
// backward recomputes each probability from the saved log-sum-exp. Keys and values are
// shared by the heads of a group: their gradients sum the group's heads in order, in
// one thread, so there are no atomics and every run gives the same bits. fp32 math from
// T inputs. This is the plain CUDA-core version; a tensor-core one is the next step.
#include "attention.h"

#include "common.cuh"

#define ROWS 64

extern "C" int mt_attention_tensor_cores = 1;

struct geo {
	int T, np, ng, per, row;
	float scale;
};

__device__ __forceinline__ int q_off(const geo &g, int hh, int hd) { return ((hh / g.per) * (g.per + 2) + hh % g.per) * hd; }
__device__ __forceinline__ int k_off(const geo &g, int grp, int hd) { return (grp * (g.per + 2) + g.per) * hd; }

template <typename T, int HD, int BK>
__global__ void __launch_bounds__(ROWS) attn_fwd_k(T *y, float *lse, const T *qkv, geo g)
{
	__shared__ float ks[BK][HD], vs[BK][HD];
	int b = blockIdx.z, hh = blockIdx.y, i = blockIdx.x * ROWS + threadIdx.x;
	int ko = k_off(g, hh / g.per, HD), vo = ko + HD, qo = q_off(g, hh, HD);
	const T *base = qkv + (int64_t)b * g.T * g.row;
	int last = min(g.T - 1, (int)(blockIdx.x * ROWS + ROWS - 1));
	float q[HD], acc[HD], m = -INFINITY, l = 0;
	bool valid = i < g.T;

	for (int e = 0; e < HD; e++) {
		q[e] = valid ? to_f(base[(int64_t)i * g.row + qo + e]) : 0.0f;
		acc[e] = 0;
	}
	for (int j0 = 0; j0 <= last; j0 += BK) {
		__syncthreads();
		for (int idx = threadIdx.x; idx < BK * HD; idx += ROWS) {
			int jj = idx / HD, e = idx % HD, j = j0 + jj;
			ks[jj][e] = j < g.T ? to_f(base[(int64_t)j * g.row + ko + e]) : 0.0f;
			vs[jj][e] = j < g.T ? to_f(base[(int64_t)j * g.row + vo + e]) : 0.0f;
		}
		__syncthreads();
		if (!valid)
			continue;
		for (int jj = 0; jj < BK && j0 + jj <= i; jj++) {
			float s = 0, mn, c, p;
			for (int e = 0; e < HD; e++)
				s += q[e] * ks[jj][e];
			s *= g.scale;
			mn = fmaxf(m, s);
			c = expf(m - mn);
			p = expf(s - mn);
			l = l * c + p;
			for (int e = 0; e < HD; e++)
				acc[e] = acc[e] * c + p * vs[jj][e];
			m = mn;
		}
	}
	if (!valid)
		return;
	for (int e = 0; e < HD; e++)
		y[((int64_t)b * g.T + i) * g.np * HD + hh * HD + e] = from_f<T>(acc[e] / l);
	lse[((int64_t)b * g.np + hh) * g.T + i] = m + logf(l);
}

// dq rows; writes D = sum(dy * y) of each row for the key/value kernel
template <typename T, int HD, int BK>
__global__ void __launch_bounds__(ROWS) attn_bwd_dq_k(T *dqkv, float *Dsum, const T *dy, const T *y, const float *lse,
						       const T *qkv, geo g)
{
	__shared__ float ks[BK][HD], vs[BK][HD];
	int b = blockIdx.z, hh = blockIdx.y, i = blockIdx.x * ROWS + threadIdx.x;
	int ko = k_off(g, hh / g.per, HD), vo = ko + HD, qo = q_off(g, hh, HD);
	const T *base = qkv + (int64_t)b * g.T * g.row;
	int last = min(g.T - 1, (int)(blockIdx.x * ROWS + ROWS - 1));
	float q[HD], dO[HD], dq[HD], D = 0, L = 0;
	bool valid = i < g.T;
	int64_t yrow = ((int64_t)b * g.T + i) * g.np * HD + hh * HD;

	for (int e = 0; e < HD; e++) {
		q[e] = valid ? to_f(base[(int64_t)i * g.row + qo + e]) : 0.0f;
		dO[e] = valid ? to_f(dy[yrow + e]) : 0.0f;
		D += valid ? dO[e] * to_f(y[yrow + e]) : 0.0f;
		dq[e] = 0;
	}
	if (valid) {
		L = lse[((int64_t)b * g.np + hh) * g.T + i];
		Dsum[((int64_t)b * g.np + hh) * g.T + i] = D;
	}
	for (int j0 = 0; j0 <= last; j0 += BK) {
		__syncthreads();
		for (int idx = threadIdx.x; idx < BK * HD; idx += ROWS) {
			int jj = idx / HD, e = idx % HD, j = j0 + jj;
			ks[jj][e] = j < g.T ? to_f(base[(int64_t)j * g.row + ko + e]) : 0.0f;
			vs[jj][e] = j < g.T ? to_f(base[(int64_t)j * g.row + vo + e]) : 0.0f;
		}
		__syncthreads();
		if (!valid)
			continue;
		for (int jj = 0; jj < BK && j0 + jj <= i; jj++) {
			float s = 0, dp = 0, p, ds;
			for (int e = 0; e < HD; e++) {
				s += q[e] * ks[jj][e];
				dp += dO[e] * vs[jj][e];
			}
			p = expf(s * g.scale - L);
			ds = p * (dp - D);
			for (int e = 0; e < HD; e++)
				dq[e] += ds * ks[jj][e];
		}
	}
	if (!valid)
		return;
	for (int e = 0; e < HD; e++)
		dqkv[((int64_t)b * g.T + i) * g.row + qo + e] = from_f<T>(dq[e] * g.scale);
}

template <typename T, int HD, int BQ>
__global__ void __launch_bounds__(ROWS) attn_bwd_dkv_k(T *dqkv, const float *Dsum, const T *dy, const float *lse,
							const T *qkv, geo g)
{
	__shared__ float qs[BQ][HD], ds_[BQ][HD], ls[BQ], Ds[BQ];
	int b = blockIdx.z, grp = blockIdx.y, j = blockIdx.x * ROWS + threadIdx.x;
	int ko = k_off(g, grp, HD), vo = ko + HD;
	const T *base = qkv + (int64_t)b * g.T * g.row;
	float k[HD], v[HD], dk[HD], dv[HD];
	bool valid = j < g.T;

	for (int e = 0; e < HD; e++) {
		k[e] = valid ? to_f(base[(int64_t)j * g.row + ko + e]) : 0.0f;
		v[e] = valid ? to_f(base[(int64_t)j * g.row + vo + e]) : 0.0f;
		dk[e] = dv[e] = 0;
	}
	for (int hh = grp * g.per; hh < (grp + 1) * g.per; hh++) {
		int qo = q_off(g, hh, HD);
		for (int i0 = blockIdx.x * ROWS; i0 < g.T; i0 += BQ) {
			__syncthreads();
			for (int idx = threadIdx.x; idx < BQ * HD; idx += ROWS) {
				int ii = idx / HD, e = idx % HD, i = i0 + ii;
				bool in = i < g.T;
				qs[ii][e] = in ? to_f(base[(int64_t)i * g.row + qo + e]) : 0.0f;
				ds_[ii][e] = in ? to_f(dy[((int64_t)b * g.T + i) * g.np * HD + hh * HD + e]) : 0.0f;
			}
			for (int ii = threadIdx.x; ii < BQ; ii += ROWS) {
				int i = i0 + ii;
				ls[ii] = i < g.T ? lse[((int64_t)b * g.np + hh) * g.T + i] : 0.0f;
				Ds[ii] = i < g.T ? Dsum[((int64_t)b * g.np + hh) * g.T + i] : 0.0f;
			}
			__syncthreads();
			if (!valid)
				continue;
			for (int ii = 0; ii < BQ && i0 + ii < g.T; ii++) {
				float s = 0, dp = 0, p, dsc;
				if (i0 + ii < j)
					continue;
				for (int e = 0; e < HD; e++) {
					s += qs[ii][e] * k[e];
					dp += ds_[ii][e] * v[e];
				}
				p = expf(s * g.scale - ls[ii]);
				dsc = p * (dp - Ds[ii]);
				for (int e = 0; e < HD; e++) {
					dv[e] += p * ds_[ii][e];
					dk[e] += dsc * qs[ii][e];
				}
			}
		}
	}
	if (!valid)
		return;
	for (int e = 0; e < HD; e++) {
		dqkv[((int64_t)b * g.T + j) * g.row + ko + e] = from_f<T>(dk[e] * g.scale);
		dqkv[((int64_t)b * g.T + j) * g.row + vo + e] = from_f<T>(dv[e]);
	}
}

static geo make_geo(int T_, int np, int ng, int hd)
{
	geo g;
	g.T = T_;
	g.np = np;
	g.ng = ng;
	g.per = np / ng;
	g.row = (np + 2 * ng) * hd;
	g.scale = 1.0f / sqrtf((float)hd);
	return g;
}

template <typename T, int HD>
static int fwd_hd(void *y, float *lse, const void *qkv, int B, geo g)
{
	constexpr int BK = HD >= 128 ? 32 : 64;
	attn_fwd_k<T, HD, BK><<<dim3((unsigned)((g.T + ROWS - 1) / ROWS), (unsigned)g.np, (unsigned)B), ROWS>>>(
		(T *)y, lse, (const T *)qkv, g);
	MT_LAUNCH_CHECK("attention");
	return 0;
}

template <typename T, int HD>
static int bwd_hd(void *dqkv, const void *dy, const void *y, const float *lse, const void *qkv, int B, geo g,
		  float *scratch)
{
	constexpr int BK = HD >= 128 ? 32 : 64;
	unsigned tiles = (unsigned)((g.T + ROWS - 1) / ROWS);
	attn_bwd_dq_k<T, HD, BK><<<dim3(tiles, (unsigned)g.np, (unsigned)B), ROWS>>>(
		(T *)dqkv, scratch, (const T *)dy, (const T *)y, lse, (const T *)qkv, g);
	MT_LAUNCH_CHECK("attention");
	attn_bwd_dkv_k<T, HD, BK><<<dim3(tiles, (unsigned)g.ng, (unsigned)B), ROWS>>>(
		(T *)dqkv, scratch, (const T *)dy, lse, (const T *)qkv, g);
	MT_LAUNCH_CHECK("attention");
	return 0;
}


// ---- tensor-core path (bf16/fp16, head size 64 or 128) ----
//
// Tiles of 64 queries x 64 keys, four warps of 16 rows each, WMMA 16x16x16 products
// with fp32 accumulation. Scores and probabilities pass through shared memory, where
// each lane owns half a row for the softmax arithmetic (so no fragment layout is
// assumed). Forward: online softmax, the output accumulator kept in shared memory and
// rescaled per row. Backward in two kernels, as above: query rows (dQ, and D), then
// key/value rows (dK, dV over the group's heads in order): no atomics.

#include <mma.h>

namespace wm = nvcuda::wmma;

#define TC_TILE 64
#define TC_THREADS 128

template <int HD> struct tcdims {
	static constexpr int LDT = HD + 8;   // T tiles [64][LDT]
	static constexpr int LDP = TC_TILE + 8;  // T probabilities [64][LDP]
	static constexpr int LDS = TC_TILE + 4;  // float scores [64][LDS]
	static constexpr int LDO = HD + 4;   // float outputs [64][LDO]
};

// rows [r0, r0 + 64) of a strided T matrix (HD columns from col) into smem; zeros past nrows
template <typename T, int HD>
__device__ __forceinline__ void tc_load(T *dst, const T *src, int64_t stride, int r0, int nrows)
{
	constexpr int LDT = tcdims<HD>::LDT, VPR = HD / 8;
	for (int v = threadIdx.x; v < TC_TILE * VPR; v += TC_THREADS) {
		int r = v / VPR, c = (v % VPR) * 8;
		int4 x = make_int4(0, 0, 0, 0);
		if (r0 + r < nrows)
			x = *(const int4 *)(src + (int64_t)(r0 + r) * stride + c);
		*(int4 *)(dst + r * LDT + c) = x;
	}
}

template <typename T, int HD>
__global__ void __launch_bounds__(TC_THREADS) attn_fwd_tc(T *y, float *lse, const T *qkv, geo g)
{
	using D = tcdims<HD>;
	extern __shared__ __align__(128) unsigned char sm[];
	T *Qs = (T *)sm, *Ks = Qs + TC_TILE * D::LDT, *Vs = Ks + TC_TILE * D::LDT, *Ps = Vs + TC_TILE * D::LDT;
	float *Ss = (float *)(Ps + TC_TILE * D::LDP), *Os = Ss + TC_TILE * D::LDS;
	int qt = gridDim.x - 1 - blockIdx.x, b = blockIdx.z, hh = blockIdx.y;
	int w = threadIdx.x / 32, lane = threadIdx.x % 32, r = 16 * w + lane / 2, half = lane % 2;
	int q0 = qt * TC_TILE, i = q0 + r;
	int ko = k_off(g, hh / g.per, HD), vo = ko + HD, qo = q_off(g, hh, HD);
	const T *base = qkv + (int64_t)b * g.T * g.row;
	float m = -INFINITY, l = 0;
	wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::row_major> qf[HD / 16];

	tc_load<T, HD>(Qs, base + qo, g.row, q0, g.T);
	for (int c = lane; c < HD; c += 32)
		for (int rr = 0; rr < 16; rr++)
			Os[(16 * w + rr) * D::LDO + c] = 0;
	__syncthreads();
	for (int k = 0; k < HD / 16; k++)
		wm::load_matrix_sync(qf[k], Qs + 16 * w * D::LDT + 16 * k, D::LDT);
	for (int j0 = 0; j0 <= q0 && j0 < g.T; j0 += TC_TILE) {
		__syncthreads();
		tc_load<T, HD>(Ks, base + ko, g.row, j0, g.T);
		tc_load<T, HD>(Vs, base + vo, g.row, j0, g.T);
		__syncthreads();
		for (int n = 0; n < TC_TILE / 16; n++) {
			wm::fragment<wm::accumulator, 16, 16, 16, float> acc;
			wm::fill_fragment(acc, 0.0f);
			for (int k = 0; k < HD / 16; k++) {
				wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::col_major> kf;
				wm::load_matrix_sync(kf, Ks + 16 * n * D::LDT + 16 * k, D::LDT);
				wm::mma_sync(acc, qf[k], kf, acc);
			}
			wm::store_matrix_sync(Ss + 16 * w * D::LDS + 16 * n, acc, D::LDS, wm::mem_row_major);
		}
		__syncwarp();
		{
			float *sr = Ss + r * D::LDS + half * 32, mx = -INFINITY, sum = 0, mn, corr;
			T *pr = Ps + r * D::LDP + half * 32;
			// columns staggered by lane: the 32 lanes touch 32 different banks
			for (int cc = 0; cc < 32; cc++) {
				int c = (cc + lane) & 31, j = j0 + half * 32 + c;
				float s = (j <= i && j < g.T) ? sr[c] * g.scale : -INFINITY;
				sr[c] = s;
				mx = fmaxf(mx, s);
			}
			mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
			mn = fmaxf(m, mx);
			corr = expf(m - mn);
			for (int cc = 0; cc < 32; cc++) {
				int c = (cc + lane) & 31;
				float p = expf(sr[c] - mn);
				sum += p;
				pr[c] = from_f<T>(p);
			}
			sum += __shfl_xor_sync(0xffffffffu, sum, 1);
			l = l * corr + sum;
			m = mn;
			for (int cc = 0; cc < HD / 2; cc++)
				Os[r * D::LDO + half * (HD / 2) + ((cc + lane) % (HD / 2))] *= corr;
		}
		__syncwarp();
		for (int n = 0; n < HD / 16; n++) {
			wm::fragment<wm::accumulator, 16, 16, 16, float> acc;
			wm::load_matrix_sync(acc, Os + 16 * w * D::LDO + 16 * n, D::LDO, wm::mem_row_major);
			for (int k = 0; k < TC_TILE / 16; k++) {
				wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::row_major> pf;
				wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::row_major> vf;
				wm::load_matrix_sync(pf, Ps + 16 * w * D::LDP + 16 * k, D::LDP);
				wm::load_matrix_sync(vf, Vs + 16 * k * D::LDT + 16 * n, D::LDT);
				wm::mma_sync(acc, pf, vf, acc);
			}
			wm::store_matrix_sync(Os + 16 * w * D::LDO + 16 * n, acc, D::LDO, wm::mem_row_major);
		}
		__syncwarp();
	}
	if (i >= g.T)
		return;
	for (int c = half * (HD / 2); c < (half + 1) * (HD / 2); c++)
		y[((int64_t)b * g.T + i) * g.np * HD + hh * HD + c] = from_f<T>(Os[r * D::LDO + c] / l);
	if (half == 0)
		lse[((int64_t)b * g.np + hh) * g.T + i] = m + logf(l);
}

// per-warp scratch of the backward kernels: two 16 x 16 fp32 blocks (scores, and the
// probability gradient), SCR_LD wide
#define SCR_LD 20
#define SCR_FLOATS (2 * 16 * SCR_LD)

template <typename T, int HD>
__global__ void __launch_bounds__(TC_THREADS) attn_bwd_dq_tc(T *dqkv, float *Dsum, const T *dy, const T *y,
							     const float *lse, const T *qkv, geo g)
{
	using D = tcdims<HD>;
	extern __shared__ __align__(128) unsigned char sm[];
	T *Qs = (T *)sm, *dOs = Qs + TC_TILE * D::LDT, *Ks = dOs + TC_TILE * D::LDT, *Vs = Ks + TC_TILE * D::LDT;
	T *dSs = Vs + TC_TILE * D::LDT;
	float *scr = (float *)(dSs + TC_TILE * D::LDP) + (threadIdx.x / 32) * SCR_FLOATS;
	float *Of = (float *)Ks; // after the loop: the K and V tiles are done with
	int qt = gridDim.x - 1 - blockIdx.x, b = blockIdx.z, hh = blockIdx.y;
	int w = threadIdx.x / 32, lane = threadIdx.x % 32, r = 16 * w + lane / 2, half = lane % 2, rr = lane / 2;
	int q0 = qt * TC_TILE, i = q0 + r;
	int ko = k_off(g, hh / g.per, HD), vo = ko + HD, qo = q_off(g, hh, HD);
	const T *base = qkv + (int64_t)b * g.T * g.row;
	const T *dyb = dy + (int64_t)b * g.T * g.np * HD + hh * HD;
	float Dr = 0, L = 0;
	wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::row_major> qf[HD / 16], df[HD / 16];
	wm::fragment<wm::accumulator, 16, 16, 16, float> dq[HD / 16];

	tc_load<T, HD>(Qs, base + qo, g.row, q0, g.T);
	tc_load<T, HD>(dOs, dyb, (int64_t)g.np * HD, q0, g.T);
	__syncthreads();
	if (i < g.T) {
		const T *yr = y + ((int64_t)b * g.T + i) * g.np * HD + hh * HD;
		for (int c = half * (HD / 2); c < (half + 1) * (HD / 2); c++)
			Dr += to_f(dOs[r * D::LDT + c]) * to_f(yr[c]);
		L = lse[((int64_t)b * g.np + hh) * g.T + i];
	}
	Dr += __shfl_xor_sync(0xffffffffu, Dr, 1);
	if (i < g.T && half == 0)
		Dsum[((int64_t)b * g.np + hh) * g.T + i] = Dr;
	for (int k = 0; k < HD / 16; k++) {
		wm::load_matrix_sync(qf[k], Qs + 16 * w * D::LDT + 16 * k, D::LDT);
		wm::load_matrix_sync(df[k], dOs + 16 * w * D::LDT + 16 * k, D::LDT);
		wm::fill_fragment(dq[k], 0.0f);
	}
	for (int j0 = 0; j0 <= q0 && j0 < g.T; j0 += TC_TILE) {
		__syncthreads();
		tc_load<T, HD>(Ks, base + ko, g.row, j0, g.T);
		tc_load<T, HD>(Vs, base + vo, g.row, j0, g.T);
		__syncthreads();
		for (int n = 0; n < TC_TILE / 16; n++) {
			wm::fragment<wm::accumulator, 16, 16, 16, float> sf, dp;
			wm::fill_fragment(sf, 0.0f);
			wm::fill_fragment(dp, 0.0f);
			for (int k = 0; k < HD / 16; k++) {
				wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::col_major> kf, vf;
				wm::load_matrix_sync(kf, Ks + 16 * n * D::LDT + 16 * k, D::LDT);
				wm::load_matrix_sync(vf, Vs + 16 * n * D::LDT + 16 * k, D::LDT);
				wm::mma_sync(sf, qf[k], kf, sf);
				wm::mma_sync(dp, df[k], vf, dp);
			}
			wm::store_matrix_sync(scr, sf, SCR_LD, wm::mem_row_major);
			wm::store_matrix_sync(scr + 16 * SCR_LD, dp, SCR_LD, wm::mem_row_major);
			__syncwarp();
			for (int e = 0; e < 8; e++) {
				int c = half * 8 + e, j = j0 + 16 * n + c;
				float p = (j <= i && j < g.T && i < g.T) ? expf(scr[rr * SCR_LD + c] * g.scale - L) : 0.0f;
				dSs[r * D::LDP + 16 * n + c] = from_f<T>(p * (scr[16 * SCR_LD + rr * SCR_LD + c] - Dr));
			}
			__syncwarp();
		}
		for (int n = 0; n < HD / 16; n++)
			for (int k = 0; k < TC_TILE / 16; k++) {
				wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::row_major> af;
				wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::row_major> kf;
				wm::load_matrix_sync(af, dSs + 16 * w * D::LDP + 16 * k, D::LDP);
				wm::load_matrix_sync(kf, Ks + 16 * k * D::LDT + 16 * n, D::LDT);
				wm::mma_sync(dq[n], af, kf, dq[n]);
			}
	}
	__syncthreads();
	for (int n = 0; n < HD / 16; n++)
		wm::store_matrix_sync(Of + 16 * w * D::LDO + 16 * n, dq[n], D::LDO, wm::mem_row_major);
	__syncwarp();
	if (i < g.T)
		for (int c = half * (HD / 2); c < (half + 1) * (HD / 2); c++)
			dqkv[((int64_t)b * g.T + i) * g.row + qo + c] = from_f<T>(Of[r * D::LDO + c] * g.scale);
}

template <typename T, int HD>
__global__ void __launch_bounds__(TC_THREADS) attn_bwd_dkv_tc(T *dqkv, const float *Dsum, const T *dy,
							      const float *lse, const T *qkv, geo g)
{
	using D = tcdims<HD>;
	extern __shared__ __align__(128) unsigned char sm[];
	T *Ks = (T *)sm, *Vs = Ks + TC_TILE * D::LDT, *Qs = Vs + TC_TILE * D::LDT, *dOs = Qs + TC_TILE * D::LDT;
	T *Pt = dOs + TC_TILE * D::LDT, *dSt = Pt + TC_TILE * D::LDP;
	float *Ls = (float *)(dSt + TC_TILE * D::LDP), *Ds = Ls + TC_TILE;
	float *scr = Ds + TC_TILE + (threadIdx.x / 32) * SCR_FLOATS;
	float *Of = (float *)Qs; // after the loops: the Q and dO tiles are done with
	int kt = blockIdx.x, b = blockIdx.z, grp = blockIdx.y;
	int w = threadIdx.x / 32, lane = threadIdx.x % 32, r = 16 * w + lane / 2, half = lane % 2, rr = lane / 2;
	int k0 = kt * TC_TILE, j = k0 + r;
	int ko = k_off(g, grp, HD), vo = ko + HD;
	const T *base = qkv + (int64_t)b * g.T * g.row;
	wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::row_major> kf[HD / 16], vf[HD / 16];
	wm::fragment<wm::accumulator, 16, 16, 16, float> dk[HD / 16], dv[HD / 16];

	tc_load<T, HD>(Ks, base + ko, g.row, k0, g.T);
	tc_load<T, HD>(Vs, base + vo, g.row, k0, g.T);
	__syncthreads();
	for (int k = 0; k < HD / 16; k++) {
		wm::load_matrix_sync(kf[k], Ks + 16 * w * D::LDT + 16 * k, D::LDT);
		wm::load_matrix_sync(vf[k], Vs + 16 * w * D::LDT + 16 * k, D::LDT);
		wm::fill_fragment(dk[k], 0.0f);
		wm::fill_fragment(dv[k], 0.0f);
	}
	for (int hh = grp * g.per; hh < (grp + 1) * g.per; hh++) {
		int qo = q_off(g, hh, HD);
		const T *dyb = dy + (int64_t)b * g.T * g.np * HD + hh * HD;
		for (int i0 = k0; i0 < g.T; i0 += TC_TILE) {
			__syncthreads();
			tc_load<T, HD>(Qs, base + qo, g.row, i0, g.T);
			tc_load<T, HD>(dOs, dyb, (int64_t)g.np * HD, i0, g.T);
			for (int c = threadIdx.x; c < TC_TILE; c += TC_THREADS) {
				int ii = i0 + c;
				Ls[c] = ii < g.T ? lse[((int64_t)b * g.np + hh) * g.T + ii] : 0.0f;
				Ds[c] = ii < g.T ? Dsum[((int64_t)b * g.np + hh) * g.T + ii] : 0.0f;
			}
			__syncthreads();
			for (int n = 0; n < TC_TILE / 16; n++) {
				wm::fragment<wm::accumulator, 16, 16, 16, float> sf, dp;
				wm::fill_fragment(sf, 0.0f);
				wm::fill_fragment(dp, 0.0f);
				for (int k = 0; k < HD / 16; k++) {
					wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::col_major> qb, db;
					wm::load_matrix_sync(qb, Qs + 16 * n * D::LDT + 16 * k, D::LDT);
					wm::load_matrix_sync(db, dOs + 16 * n * D::LDT + 16 * k, D::LDT);
					wm::mma_sync(sf, kf[k], qb, sf);
					wm::mma_sync(dp, vf[k], db, dp);
				}
				wm::store_matrix_sync(scr, sf, SCR_LD, wm::mem_row_major);
				wm::store_matrix_sync(scr + 16 * SCR_LD, dp, SCR_LD, wm::mem_row_major);
				__syncwarp();
				for (int e = 0; e < 8; e++) {
					int c = 16 * n + half * 8 + e, ii = i0 + c;
					bool in = ii >= j && ii < g.T && j < g.T;
					float p = in ? expf(scr[rr * SCR_LD + half * 8 + e] * g.scale - Ls[c]) : 0.0f;
					Pt[r * D::LDP + c] = from_f<T>(p);
					dSt[r * D::LDP + c] = from_f<T>(p * (scr[16 * SCR_LD + rr * SCR_LD + half * 8 + e] - Ds[c]));
				}
				__syncwarp();
			}
			for (int n = 0; n < HD / 16; n++)
				for (int k = 0; k < TC_TILE / 16; k++) {
					wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::row_major> pa, sa;
					wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::row_major> ob, qb;
					wm::load_matrix_sync(pa, Pt + 16 * w * D::LDP + 16 * k, D::LDP);
					wm::load_matrix_sync(sa, dSt + 16 * w * D::LDP + 16 * k, D::LDP);
					wm::load_matrix_sync(ob, dOs + 16 * k * D::LDT + 16 * n, D::LDT);
					wm::load_matrix_sync(qb, Qs + 16 * k * D::LDT + 16 * n, D::LDT);
					wm::mma_sync(dv[n], pa, ob, dv[n]);
					wm::mma_sync(dk[n], sa, qb, dk[n]);
				}
		}
	}
	__syncthreads();
	for (int n = 0; n < HD / 16; n++)
		wm::store_matrix_sync(Of + 16 * w * D::LDO + 16 * n, dk[n], D::LDO, wm::mem_row_major);
	__syncwarp();
	if (j < g.T)
		for (int c = half * (HD / 2); c < (half + 1) * (HD / 2); c++)
			dqkv[((int64_t)b * g.T + j) * g.row + ko + c] = from_f<T>(Of[r * D::LDO + c] * g.scale);
	__syncwarp();
	for (int n = 0; n < HD / 16; n++)
		wm::store_matrix_sync(Of + 16 * w * D::LDO + 16 * n, dv[n], D::LDO, wm::mem_row_major);
	__syncwarp();
	if (j < g.T)
		for (int c = half * (HD / 2); c < (half + 1) * (HD / 2); c++)
			dqkv[((int64_t)b * g.T + j) * g.row + vo + c] = from_f<T>(Of[r * D::LDO + c]);
}


// ---- bf16 forward with scores and probabilities in registers ----
//
// For bf16 16x16x16 WMMA on sm_80 and later, element e of a thread's fp32 accumulator
// and of its matrix_a fragment sit at the same place: row lane/4 + 8 * ((e >> 1) & 1),
// column 2 * (lane % 4) + (e & 1) + 8 * (e >> 2) (two m16n8k16 products side by side).
// So a block of scores becomes, element for element, the matrix_a fragment of its
// probabilities for the P.V product, and the softmax runs on registers with shuffles
// inside each group of four lanes (one row's 16 columns). tests/unit/test_cuda.c holds
// this kernel to the CPU reference, so a different layout would fail there.

__device__ __forceinline__ int fr_row(int lane, int e) { return lane / 4 + 8 * ((e >> 1) & 1); }
__device__ __forceinline__ int fr_col(int lane, int e) { return 2 * (lane % 4) + (e & 1) + 8 * (e >> 2); }

template <int HD>
__global__ void __launch_bounds__(TC_THREADS, HD == 64 ? 4 : 1) attn_fwd_reg(__nv_bfloat16 *y, float *lse, const __nv_bfloat16 *qkv, geo g)
{
	typedef __nv_bfloat16 T;
	using D = tcdims<HD>;
	extern __shared__ __align__(128) unsigned char sm[];
	T *Qs = (T *)sm, *Ks = Qs + TC_TILE * D::LDT, *Vs = Ks + TC_TILE * D::LDT;
	int qt = gridDim.x - 1 - blockIdx.x, b = blockIdx.z, hh = blockIdx.y;
	int w = threadIdx.x / 32, lane = threadIdx.x % 32;
	int q0 = qt * TC_TILE, rbase = q0 + 16 * w;
	int ko = k_off(g, hh / g.per, HD), vo = ko + HD, qo = q_off(g, hh, HD);
	const T *base = qkv + (int64_t)b * g.T * g.row;
	float m[2] = { -INFINITY, -INFINITY }, l[2] = { 0, 0 };
	wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::row_major> qf[HD / 16];
	wm::fragment<wm::accumulator, 16, 16, 16, float> of[HD / 16];

	tc_load<T, HD>(Qs, base + qo, g.row, q0, g.T);
	__syncthreads();
	for (int k = 0; k < HD / 16; k++) {
		wm::load_matrix_sync(qf[k], Qs + 16 * w * D::LDT + 16 * k, D::LDT);
		wm::fill_fragment(of[k], 0.0f);
	}
	for (int j0 = 0; j0 <= q0 && j0 < g.T; j0 += TC_TILE) {
		wm::fragment<wm::accumulator, 16, 16, 16, float> sf[TC_TILE / 16];
		wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::row_major> pf[TC_TILE / 16];
		float mx[2] = { -INFINITY, -INFINITY }, corr[2];

		__syncthreads();
		tc_load<T, HD>(Ks, base + ko, g.row, j0, g.T);
		tc_load<T, HD>(Vs, base + vo, g.row, j0, g.T);
		__syncthreads();
		for (int n = 0; n < TC_TILE / 16; n++) {
			wm::fill_fragment(sf[n], 0.0f);
			for (int k = 0; k < HD / 16; k++) {
				wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::col_major> kf;
				wm::load_matrix_sync(kf, Ks + 16 * n * D::LDT + 16 * k, D::LDT);
				wm::mma_sync(sf[n], qf[k], kf, sf[n]);
			}
			for (int e = 0; e < 8; e++) {
				int i = rbase + fr_row(lane, e), j = j0 + 16 * n + fr_col(lane, e);
				float v = (j <= i && j < g.T) ? sf[n].x[e] * g.scale : -INFINITY;
				sf[n].x[e] = v;
				mx[(e >> 1) & 1] = fmaxf(mx[(e >> 1) & 1], v);
			}
		}
		for (int h2 = 0; h2 < 2; h2++) {
			float mn;
			mx[h2] = fmaxf(mx[h2], __shfl_xor_sync(0xffffffffu, mx[h2], 1));
			mx[h2] = fmaxf(mx[h2], __shfl_xor_sync(0xffffffffu, mx[h2], 2));
			mn = fmaxf(m[h2], mx[h2]);
			corr[h2] = expf(m[h2] - mn);
			m[h2] = mn;
			l[h2] *= corr[h2];
		}
		for (int n = 0; n < TC_TILE / 16; n++)
			for (int e = 0; e < 8; e++) {
				float p = expf(sf[n].x[e] - m[(e >> 1) & 1]);
				T pb = from_f<T>(p);
				l[(e >> 1) & 1] += to_f(pb); // the sum of what P.V multiplies
				pf[n].x[e] = pb;
			}
		for (int n = 0; n < HD / 16; n++) {
			for (int e = 0; e < 8; e++)
				of[n].x[e] *= corr[(e >> 1) & 1];
			for (int k = 0; k < TC_TILE / 16; k++) {
				wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::row_major> vf;
				wm::load_matrix_sync(vf, Vs + 16 * k * D::LDT + 16 * n, D::LDT);
				wm::mma_sync(of[n], pf[k], vf, of[n]);
			}
		}
	}
	for (int h2 = 0; h2 < 2; h2++) {
		l[h2] += __shfl_xor_sync(0xffffffffu, l[h2], 1);
		l[h2] += __shfl_xor_sync(0xffffffffu, l[h2], 2);
	}
	for (int n = 0; n < HD / 16; n++)
		for (int e = 0; e < 8; e++) {
			int i = rbase + fr_row(lane, e), c = 16 * n + fr_col(lane, e);
			if (i < g.T)
				y[((int64_t)b * g.T + i) * g.np * HD + hh * HD + c] = from_f<T>(of[n].x[e] / l[(e >> 1) & 1]);
		}
	if (lane % 4 == 0)
		for (int h2 = 0; h2 < 2; h2++) {
			int i = rbase + lane / 4 + 8 * h2;
			if (i < g.T)
				lse[((int64_t)b * g.np + hh) * g.T + i] = m[h2] + logf(l[h2]);
		}
}

template <int HD>
static int fwd_reg(void *y, float *lse, const void *qkv, int B, geo g)
{
	size_t sm = (size_t)TC_TILE * 3 * tcdims<HD>::LDT * 2;
	MT_CUDA_CHECK(cudaFuncSetAttribute(attn_fwd_reg<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
	attn_fwd_reg<HD><<<dim3((unsigned)((g.T + TC_TILE - 1) / TC_TILE), (unsigned)g.np, (unsigned)B), TC_THREADS, sm>>>(
		(__nv_bfloat16 *)y, lse, (const __nv_bfloat16 *)qkv, g);
	MT_LAUNCH_CHECK("attention");
	return 0;
}


// the bf16 backward, the same way: scores and their gradients stay in registers and
// become matrix_a fragments of the dQ, dK and dV products
template <int HD>
__global__ void __launch_bounds__(TC_THREADS) attn_bwd_dq_reg(__nv_bfloat16 *dqkv, float *Dsum, const __nv_bfloat16 *dy,
							      const __nv_bfloat16 *y, const float *lse,
							      const __nv_bfloat16 *qkv, geo g)
{
	typedef __nv_bfloat16 T;
	using D = tcdims<HD>;
	extern __shared__ __align__(128) unsigned char sm[];
	T *Qs = (T *)sm, *dOs = Qs + TC_TILE * D::LDT, *Ks = dOs + TC_TILE * D::LDT, *Vs = Ks + TC_TILE * D::LDT;
	float *Lr = (float *)(Vs + TC_TILE * D::LDT), *Dr_s = Lr + TC_TILE;
	int qt = gridDim.x - 1 - blockIdx.x, b = blockIdx.z, hh = blockIdx.y;
	int w = threadIdx.x / 32, lane = threadIdx.x % 32, r = 16 * w + lane / 2, half = lane % 2;
	int q0 = qt * TC_TILE, i = q0 + r;
	int ko = k_off(g, hh / g.per, HD), vo = ko + HD, qo = q_off(g, hh, HD);
	const T *base = qkv + (int64_t)b * g.T * g.row;
	const T *dyb = dy + (int64_t)b * g.T * g.np * HD + hh * HD;
	float Dr = 0, Lrow[2], Drow[2];
	wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::row_major> qf[HD / 16], df[HD / 16];
	wm::fragment<wm::accumulator, 16, 16, 16, float> dq[HD / 16];

	tc_load<T, HD>(Qs, base + qo, g.row, q0, g.T);
	tc_load<T, HD>(dOs, dyb, (int64_t)g.np * HD, q0, g.T);
	__syncthreads();
	if (i < g.T) {
		const T *yr = y + ((int64_t)b * g.T + i) * g.np * HD + hh * HD;
		for (int c = half * (HD / 2); c < (half + 1) * (HD / 2); c++)
			Dr += to_f(dOs[r * D::LDT + c]) * to_f(yr[c]);
	}
	Dr += __shfl_xor_sync(0xffffffffu, Dr, 1);
	if (half == 0) {
		Dr_s[r] = Dr;
		Lr[r] = i < g.T ? lse[((int64_t)b * g.np + hh) * g.T + i] : 0.0f;
		if (i < g.T)
			Dsum[((int64_t)b * g.np + hh) * g.T + i] = Dr;
	}
	__syncwarp();
	for (int h2 = 0; h2 < 2; h2++) {
		Lrow[h2] = Lr[16 * w + lane / 4 + 8 * h2];
		Drow[h2] = Dr_s[16 * w + lane / 4 + 8 * h2];
	}
	for (int k = 0; k < HD / 16; k++) {
		wm::load_matrix_sync(qf[k], Qs + 16 * w * D::LDT + 16 * k, D::LDT);
		wm::load_matrix_sync(df[k], dOs + 16 * w * D::LDT + 16 * k, D::LDT);
		wm::fill_fragment(dq[k], 0.0f);
	}
	for (int j0 = 0; j0 <= q0 && j0 < g.T; j0 += TC_TILE) {
		wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::row_major> dsf[TC_TILE / 16];

		__syncthreads();
		tc_load<T, HD>(Ks, base + ko, g.row, j0, g.T);
		tc_load<T, HD>(Vs, base + vo, g.row, j0, g.T);
		__syncthreads();
		for (int n = 0; n < TC_TILE / 16; n++) {
			wm::fragment<wm::accumulator, 16, 16, 16, float> sf, dp;
			wm::fill_fragment(sf, 0.0f);
			wm::fill_fragment(dp, 0.0f);
			for (int k = 0; k < HD / 16; k++) {
				wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::col_major> kf, vf;
				wm::load_matrix_sync(kf, Ks + 16 * n * D::LDT + 16 * k, D::LDT);
				wm::load_matrix_sync(vf, Vs + 16 * n * D::LDT + 16 * k, D::LDT);
				wm::mma_sync(sf, qf[k], kf, sf);
				wm::mma_sync(dp, df[k], vf, dp);
			}
			for (int e = 0; e < 8; e++) {
				int h2 = (e >> 1) & 1, ii = q0 + 16 * w + fr_row(lane, e), j = j0 + 16 * n + fr_col(lane, e);
				float p = (j <= ii && j < g.T && ii < g.T) ? expf(sf.x[e] * g.scale - Lrow[h2]) : 0.0f;
				dsf[n].x[e] = from_f<T>(p * (dp.x[e] - Drow[h2]));
			}
		}
		for (int n = 0; n < HD / 16; n++)
			for (int k = 0; k < TC_TILE / 16; k++) {
				wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::row_major> kf;
				wm::load_matrix_sync(kf, Ks + 16 * k * D::LDT + 16 * n, D::LDT);
				wm::mma_sync(dq[n], dsf[k], kf, dq[n]);
			}
	}
	for (int n = 0; n < HD / 16; n++)
		for (int e = 0; e < 8; e++) {
			int ii = q0 + 16 * w + fr_row(lane, e), c = 16 * n + fr_col(lane, e);
			if (ii < g.T)
				dqkv[((int64_t)b * g.T + ii) * g.row + qo + c] = from_f<T>(dq[n].x[e] * g.scale);
		}
}

template <int HD>
__global__ void __launch_bounds__(TC_THREADS) attn_bwd_dkv_reg(__nv_bfloat16 *dqkv, const float *Dsum,
							       const __nv_bfloat16 *dy, const float *lse,
							       const __nv_bfloat16 *qkv, geo g)
{
	typedef __nv_bfloat16 T;
	using D = tcdims<HD>;
	extern __shared__ __align__(128) unsigned char sm[];
	T *Ks = (T *)sm, *Vs = Ks + TC_TILE * D::LDT, *Qs = Vs + TC_TILE * D::LDT, *dOs = Qs + TC_TILE * D::LDT;
	float *Ls = (float *)(dOs + TC_TILE * D::LDT), *Ds = Ls + TC_TILE;
	int kt = blockIdx.x, b = blockIdx.z, grp = blockIdx.y;
	int w = threadIdx.x / 32, lane = threadIdx.x % 32;
	int k0 = kt * TC_TILE;
	int ko = k_off(g, grp, HD), vo = ko + HD;
	const T *base = qkv + (int64_t)b * g.T * g.row;
	wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::row_major> kf[HD / 16], vf[HD / 16];
	wm::fragment<wm::accumulator, 16, 16, 16, float> dk[HD / 16], dv[HD / 16];

	tc_load<T, HD>(Ks, base + ko, g.row, k0, g.T);
	tc_load<T, HD>(Vs, base + vo, g.row, k0, g.T);
	__syncthreads();
	for (int k = 0; k < HD / 16; k++) {
		wm::load_matrix_sync(kf[k], Ks + 16 * w * D::LDT + 16 * k, D::LDT);
		wm::load_matrix_sync(vf[k], Vs + 16 * w * D::LDT + 16 * k, D::LDT);
		wm::fill_fragment(dk[k], 0.0f);
		wm::fill_fragment(dv[k], 0.0f);
	}
	for (int hh = grp * g.per; hh < (grp + 1) * g.per; hh++) {
		int qo = q_off(g, hh, HD);
		const T *dyb = dy + (int64_t)b * g.T * g.np * HD + hh * HD;
		for (int i0 = k0; i0 < g.T; i0 += TC_TILE) {
			wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::row_major> pt[TC_TILE / 16], dst[TC_TILE / 16];

			__syncthreads();
			tc_load<T, HD>(Qs, base + qo, g.row, i0, g.T);
			tc_load<T, HD>(dOs, dyb, (int64_t)g.np * HD, i0, g.T);
			for (int c = threadIdx.x; c < TC_TILE; c += TC_THREADS) {
				int ii = i0 + c;
				Ls[c] = ii < g.T ? lse[((int64_t)b * g.np + hh) * g.T + ii] : 0.0f;
				Ds[c] = ii < g.T ? Dsum[((int64_t)b * g.np + hh) * g.T + ii] : 0.0f;
			}
			__syncthreads();
			for (int n = 0; n < TC_TILE / 16; n++) {
				wm::fragment<wm::accumulator, 16, 16, 16, float> sf, dp;
				wm::fill_fragment(sf, 0.0f);
				wm::fill_fragment(dp, 0.0f);
				for (int k = 0; k < HD / 16; k++) {
					wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::col_major> qb, db;
					wm::load_matrix_sync(qb, Qs + 16 * n * D::LDT + 16 * k, D::LDT);
					wm::load_matrix_sync(db, dOs + 16 * n * D::LDT + 16 * k, D::LDT);
					wm::mma_sync(sf, kf[k], qb, sf);
					wm::mma_sync(dp, vf[k], db, dp);
				}
				for (int e = 0; e < 8; e++) {
					int c = 16 * n + fr_col(lane, e), ii = i0 + c, j = k0 + 16 * w + fr_row(lane, e);
					bool in = ii >= j && ii < g.T && j < g.T;
					float p = in ? expf(sf.x[e] * g.scale - Ls[c]) : 0.0f;
					pt[n].x[e] = from_f<T>(p);
					dst[n].x[e] = from_f<T>(p * (dp.x[e] - Ds[c]));
				}
			}
			for (int n = 0; n < HD / 16; n++)
				for (int k = 0; k < TC_TILE / 16; k++) {
					wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::row_major> ob, qb;
					wm::load_matrix_sync(ob, dOs + 16 * k * D::LDT + 16 * n, D::LDT);
					wm::load_matrix_sync(qb, Qs + 16 * k * D::LDT + 16 * n, D::LDT);
					wm::mma_sync(dv[n], pt[k], ob, dv[n]);
					wm::mma_sync(dk[n], dst[k], qb, dk[n]);
				}
		}
	}
	for (int n = 0; n < HD / 16; n++)
		for (int e = 0; e < 8; e++) {
			int j = k0 + 16 * w + fr_row(lane, e), c = 16 * n + fr_col(lane, e);
			if (j < g.T) {
				dqkv[((int64_t)b * g.T + j) * g.row + ko + c] = from_f<T>(dk[n].x[e] * g.scale);
				dqkv[((int64_t)b * g.T + j) * g.row + vo + c] = from_f<T>(dv[n].x[e]);
			}
		}
}

template <int HD>
static int bwd_reg(void *dqkv, const void *dy, const void *y, const float *lse, const void *qkv, int B, geo g,
		   float *scratch)
{
	typedef __nv_bfloat16 T;
	unsigned tiles = (unsigned)((g.T + TC_TILE - 1) / TC_TILE);
	size_t sm = (size_t)TC_TILE * 4 * tcdims<HD>::LDT * 2 + 2 * TC_TILE * 4;
	MT_CUDA_CHECK(cudaFuncSetAttribute(attn_bwd_dq_reg<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
	MT_CUDA_CHECK(cudaFuncSetAttribute(attn_bwd_dkv_reg<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
	attn_bwd_dq_reg<HD><<<dim3(tiles, (unsigned)g.np, (unsigned)B), TC_THREADS, sm>>>(
		(T *)dqkv, scratch, (const T *)dy, (const T *)y, lse, (const T *)qkv, g);
	MT_LAUNCH_CHECK("attention");
	attn_bwd_dkv_reg<HD><<<dim3(tiles, (unsigned)g.ng, (unsigned)B), TC_THREADS, sm>>>(
		(T *)dqkv, scratch, (const T *)dy, lse, (const T *)qkv, g);
	MT_LAUNCH_CHECK("attention");
	return 0;
}

template <int HD> static size_t tc_fwd_smem()
{
	using D = tcdims<HD>;
	return (size_t)TC_TILE * (3 * D::LDT + D::LDP) * 2 + (size_t)TC_TILE * (D::LDS + D::LDO) * 4;
}
// (the fp32 output tile Of aliases two T tiles: 64 x (HD + 4) floats fit in 2 x 64 x (HD + 8) T)
template <int HD> static size_t tc_dq_smem()
{
	using D = tcdims<HD>;
	return (size_t)TC_TILE * (4 * D::LDT + D::LDP) * 2 + (size_t)(TC_THREADS / 32) * SCR_FLOATS * 4;
}
template <int HD> static size_t tc_dkv_smem()
{
	using D = tcdims<HD>;
	return (size_t)TC_TILE * (4 * D::LDT + 2 * D::LDP) * 2 + ((size_t)2 * TC_TILE + (TC_THREADS / 32) * SCR_FLOATS) * 4;
}

template <typename T, int HD>
static int fwd_tc(void *y, float *lse, const void *qkv, int B, geo g)
{
	size_t sm = tc_fwd_smem<HD>();
	MT_CUDA_CHECK(cudaFuncSetAttribute(attn_fwd_tc<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
	attn_fwd_tc<T, HD><<<dim3((unsigned)((g.T + TC_TILE - 1) / TC_TILE), (unsigned)g.np, (unsigned)B), TC_THREADS, sm>>>(
		(T *)y, lse, (const T *)qkv, g);
	MT_LAUNCH_CHECK("attention");
	return 0;
}

template <typename T, int HD>
static int bwd_tc(void *dqkv, const void *dy, const void *y, const float *lse, const void *qkv, int B, geo g,
		  float *scratch)
{
	unsigned tiles = (unsigned)((g.T + TC_TILE - 1) / TC_TILE);
	size_t s1 = tc_dq_smem<HD>(), s2 = tc_dkv_smem<HD>();
	MT_CUDA_CHECK(cudaFuncSetAttribute(attn_bwd_dq_tc<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s1));
	MT_CUDA_CHECK(cudaFuncSetAttribute(attn_bwd_dkv_tc<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s2));
	attn_bwd_dq_tc<T, HD><<<dim3(tiles, (unsigned)g.np, (unsigned)B), TC_THREADS, s1>>>(
		(T *)dqkv, scratch, (const T *)dy, (const T *)y, lse, (const T *)qkv, g);
	MT_LAUNCH_CHECK("attention");
	attn_bwd_dkv_tc<T, HD><<<dim3(tiles, (unsigned)g.ng, (unsigned)B), TC_THREADS, s2>>>(
		(T *)dqkv, scratch, (const T *)dy, lse, (const T *)qkv, g);
	MT_LAUNCH_CHECK("attention");
	return 0;
}

// the tensor-core path where it applies: 16-bit types, head size 64 or 128
template <typename T> static int try_fwd_tc(void *, float *, const void *, int, geo, int) { return 1; }
template <typename T> static int try_bwd_tc(void *, const void *, const void *, const float *, const void *, int, geo, float *, int) { return 1; }
template <> int try_fwd_tc<__nv_bfloat16>(void *y, float *lse, const void *qkv, int B, geo g, int hd)
{
	return hd == 64 ? fwd_reg<64>(y, lse, qkv, B, g) : hd == 128 ? fwd_reg<128>(y, lse, qkv, B, g) : 1;
}
template <> int try_fwd_tc<__half>(void *y, float *lse, const void *qkv, int B, geo g, int hd)
{
	return hd == 64 ? fwd_tc<__half, 64>(y, lse, qkv, B, g) : hd == 128 ? fwd_tc<__half, 128>(y, lse, qkv, B, g) : 1;
}
template <> int try_bwd_tc<__nv_bfloat16>(void *dqkv, const void *dy, const void *y, const float *lse, const void *qkv, int B,
					  geo g, float *scratch, int hd)
{
	return hd == 64 ? bwd_reg<64>(dqkv, dy, y, lse, qkv, B, g, scratch)
	       : hd == 128 ? bwd_reg<128>(dqkv, dy, y, lse, qkv, B, g, scratch) : 1;
}
template <> int try_bwd_tc<__half>(void *dqkv, const void *dy, const void *y, const float *lse, const void *qkv, int B,
				   geo g, float *scratch, int hd)
{
	return hd == 64 ? bwd_tc<__half, 64>(dqkv, dy, y, lse, qkv, B, g, scratch)
	       : hd == 128 ? bwd_tc<__half, 128>(dqkv, dy, y, lse, qkv, B, g, scratch) : 1;
}

template <typename T>
static int attn_fwd(void *y, float *lse, const void *qkv, int B, int T_, int np, int ng, int hd, int use_tc)
{
	geo g = make_geo(T_, np, ng, hd);
	int rc = use_tc ? try_fwd_tc<T>(y, lse, qkv, B, g, hd) : 1;

	if (rc <= 0)
		return rc;
	switch (hd) {
	case 8: return fwd_hd<T, 8>(y, lse, qkv, B, g);
	case 16: return fwd_hd<T, 16>(y, lse, qkv, B, g);
	case 32: return fwd_hd<T, 32>(y, lse, qkv, B, g);
	case 64: return fwd_hd<T, 64>(y, lse, qkv, B, g);
	case 128: return fwd_hd<T, 128>(y, lse, qkv, B, g);
	}
	return mt_cuda_fail(__FILE__, __LINE__, "attention: head size %d is not one of 8, 16, 32, 64, 128", hd);
}

template <typename T>
static int attn_bwd(void *dqkv, const void *dy, const void *y, const float *lse, const void *qkv, int B, int T_,
		    int np, int ng, int hd, float *scratch, int use_tc)
{
	geo g = make_geo(T_, np, ng, hd);
	int rc = use_tc ? try_bwd_tc<T>(dqkv, dy, y, lse, qkv, B, g, scratch, hd) : 1;

	if (rc <= 0)
		return rc;
	switch (hd) {
	case 8: return bwd_hd<T, 8>(dqkv, dy, y, lse, qkv, B, g, scratch);
	case 16: return bwd_hd<T, 16>(dqkv, dy, y, lse, qkv, B, g, scratch);
	case 32: return bwd_hd<T, 32>(dqkv, dy, y, lse, qkv, B, g, scratch);
	case 64: return bwd_hd<T, 64>(dqkv, dy, y, lse, qkv, B, g, scratch);
	case 128: return bwd_hd<T, 128>(dqkv, dy, y, lse, qkv, B, g, scratch);
	}
	return mt_cuda_fail(__FILE__, __LINE__, "attention: head size %d is not one of 8, 16, 32, 64, 128", hd);
}

extern "C" int mt_attention_fwd(enum mt_dtype dt, void *y, float *lse, const void *qkv, int B, int T_, int np, int ng,
				int hd)
{
	MT_REQUIRE(B > 0 && T_ > 0 && ng > 0 && np % ng == 0 && B < 65536 && np < 65536, "attention: bad shape");
	return MT_DISPATCH(dt, attn_fwd, y, lse, qkv, B, T_, np, ng, hd, mt_attention_tensor_cores);
}

extern "C" int mt_attention_bwd(enum mt_dtype dt, void *dqkv, const void *dy, const void *y, const float *lse,
				const void *qkv, int B, int T_, int np, int ng, int hd, float *scratch)
{
	MT_REQUIRE(B > 0 && T_ > 0 && ng > 0 && np % ng == 0 && B < 65536 && np < 65536, "attention: bad shape");
	return MT_DISPATCH(dt, attn_bwd, dqkv, dy, y, lse, qkv, B, T_, np, ng, hd, scratch, mt_attention_tensor_cores);
}
