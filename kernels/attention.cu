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

template <typename T>
static int attn_fwd(void *y, float *lse, const void *qkv, int B, int T_, int np, int ng, int hd)
{
	geo g = make_geo(T_, np, ng, hd);
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
		    int np, int ng, int hd, float *scratch)
{
	geo g = make_geo(T_, np, ng, hd);
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
	return MT_DISPATCH(dt, attn_fwd, y, lse, qkv, B, T_, np, ng, hd);
}

extern "C" int mt_attention_bwd(enum mt_dtype dt, void *dqkv, const void *dy, const void *y, const float *lse,
				const void *qkv, int B, int T_, int np, int ng, int hd, float *scratch)
{
	MT_REQUIRE(B > 0 && T_ > 0 && ng > 0 && np % ng == 0 && B < 65536 && np < 65536, "attention: bad shape");
	return MT_DISPATCH(dt, attn_bwd, dqkv, dy, y, lse, qkv, B, T_, np, ng, hd, scratch);
}
