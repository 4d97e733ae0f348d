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
	attn_fwd_k<T, HD, BK><<<dim3((unsigned)((g.T + ROWS - 1) / ROWS), (unsigned)g.np, (unsigned)B), ROWS, 0, MT_STREAM>>>(
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
	attn_bwd_dq_k<T, HD, BK><<<dim3(tiles, (unsigned)g.np, (unsigned)B), ROWS, 0, MT_STREAM>>>(
		(T *)dqkv, scratch, (const T *)dy, (const T *)y, lse, (const T *)qkv, g);
	MT_LAUNCH_CHECK("attention");
	attn_bwd_dkv_k<T, HD, BK><<<dim3(tiles, (unsigned)g.ng, (unsigned)B), ROWS, 0, MT_STREAM>>>(
		(T *)dqkv, scratch, (const T *)dy, lse, (const T *)qkv, g);
	MT_LAUNCH_CHECK("attention");
	return 0;
}


// ---- tensor-core path (bf16/fp16, head size 64 or 128) ----
//
// Tiles of 64 queries x 64 keys, four warps of 16 rows each, WMMA 16x16x16 products
// with fp32 accumulation; scores and probabilities stay in registers (below), for bf16
// and fp16 alike. Forward: online softmax. Backward in two kernels, as above: query rows
// (dQ, and D), then key/value rows (dK, dV over the group's heads in order): no atomics.

#include <mma.h>

namespace wm = nvcuda::wmma;

#define TC_TILE 64
#define TC_THREADS 128

template <int HD> struct tcdims {
	static constexpr int LDT = HD + 8;   // T tiles [64][LDT]
};

// ---- forward with scores and probabilities in registers ----
//
// For 16-bit 16x16x16 WMMA on sm_80 and later, element e of a thread's fp32 accumulator
// and of its matrix_a fragment sit at the same place: row lane/4 + 8 * ((e >> 1) & 1),
// column 2 * (lane % 4) + (e & 1) + 8 * (e >> 2) (two m16n8k16 products side by side).
// So a block of scores becomes, element for element, the matrix_a fragment of its
// probabilities for the P.V product, and the softmax runs on registers with shuffles
// inside each group of four lanes (one row's 16 columns). tests/unit/test_cuda.c holds
// this kernel to the CPU reference, so a different layout would fail there.

// cp.async: 16-byte copies global -> shared, completed by groups
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

// rows [r0, r0 + 64) of a strided T matrix (HD columns) into a [64][LDT] tile through
// cp.async; rows past nrows zeroed by ordinary stores
template <typename T, int HD>
__device__ __forceinline__ void tc_load_async(T *dst, const T *src, int64_t stride, int r0, int nrows)
{
	constexpr int LDT = tcdims<HD>::LDT, VPR = HD / 8;
	for (int v = threadIdx.x; v < TC_TILE * VPR; v += TC_THREADS) {
		int r = v / VPR, c = (v % VPR) * 8;
		if (r0 + r < nrows)
			cp16(dst + r * LDT + c, src + (int64_t)(r0 + r) * stride + c);
		else
			*(int4 *)(dst + r * LDT + c) = make_int4(0, 0, 0, 0);
	}
}

#define LOG2E 1.4426950408889634f

__device__ __forceinline__ int fr_row(int lane, int e) { return lane / 4 + 8 * ((e >> 1) & 1); }
__device__ __forceinline__ int fr_col(int lane, int e) { return 2 * (lane % 4) + (e & 1) + 8 * (e >> 2); }

template <typename T, int HD>
__global__ void __launch_bounds__(TC_THREADS, HD == 64 ? 4 : 1) attn_fwd_reg(T *y, float *lse, const T *qkv, geo g)
{
	using D = tcdims<HD>;
	extern __shared__ __align__(128) unsigned char sm[];
	// two key/value buffers: (Ks, Vs) and (Qs, Xs), Qs free once its rows are in registers
	T *Qs = (T *)sm, *Ks = Qs + TC_TILE * D::LDT, *Vs = Ks + TC_TILE * D::LDT, *Xs = Vs + TC_TILE * D::LDT;
	int qt = gridDim.x - 1 - blockIdx.x, b = blockIdx.z, hh = blockIdx.y;
	int w = threadIdx.x / 32, lane = threadIdx.x % 32;
	int q0 = qt * TC_TILE, rbase = q0 + 16 * w, nt = min(qt + 1, (g.T + TC_TILE - 1) / TC_TILE);
	int ko = k_off(g, hh / g.per, HD), vo = ko + HD, qo = q_off(g, hh, HD);
	const T *base = qkv + (int64_t)b * g.T * g.row;
	float m[2] = { -INFINITY, -INFINITY }, l[2] = { 0, 0 }, sl2 = g.scale * LOG2E; // m in log2 units
	wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::row_major> qf[HD / 16];
	wm::fragment<wm::accumulator, 16, 16, 16, float> of[HD / 16];

	tc_load_async<T, HD>(Qs, base + qo, g.row, q0, g.T);
	cp_commit();
	tc_load_async<T, HD>(Ks, base + ko, g.row, 0, g.T);
	tc_load_async<T, HD>(Vs, base + vo, g.row, 0, g.T);
	cp_commit();
	cp_wait<1>();
	__syncthreads();
	for (int k = 0; k < HD / 16; k++) {
		wm::load_matrix_sync(qf[k], Qs + 16 * w * D::LDT + 16 * k, D::LDT);
		wm::fill_fragment(of[k], 0.0f);
	}
	__syncthreads();
	for (int t = 0; t < nt; t++) {
		wm::fragment<wm::accumulator, 16, 16, 16, float> sf[TC_TILE / 16];
		wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::row_major> pf[TC_TILE / 16];
		float mx[2] = { -INFINITY, -INFINITY }, corr[2];
		const T *Kt = (t & 1) ? Qs : Ks, *Vt = (t & 1) ? Xs : Vs;
		int j0 = t * TC_TILE;
		bool diag = j0 + TC_TILE > rbase || j0 + TC_TILE > g.T;

		if (t + 1 < nt) {
			tc_load_async<T, HD>((t & 1) ? Ks : Qs, base + ko, g.row, j0 + TC_TILE, g.T);
			tc_load_async<T, HD>((t & 1) ? Vs : Xs, base + vo, g.row, j0 + TC_TILE, g.T);
		}
		cp_commit();
		cp_wait<1>();
		__syncthreads();
		for (int n = 0; n < TC_TILE / 16; n++) {
			wm::fill_fragment(sf[n], 0.0f);
			for (int k = 0; k < HD / 16; k++) {
				wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::col_major> kf;
				wm::load_matrix_sync(kf, Kt + 16 * n * D::LDT + 16 * k, D::LDT);
				wm::mma_sync(sf[n], qf[k], kf, sf[n]);
			}
			for (int e = 0; e < 8; e++) {
				int i = rbase + fr_row(lane, e), j = j0 + 16 * n + fr_col(lane, e);
				float v = sf[n].x[e] * sl2;
				if (diag && !(j <= i && j < g.T))
					v = -INFINITY;
				sf[n].x[e] = v;
				mx[(e >> 1) & 1] = fmaxf(mx[(e >> 1) & 1], v);
			}
		}
		for (int h2 = 0; h2 < 2; h2++) {
			float mn;
			mx[h2] = fmaxf(mx[h2], __shfl_xor_sync(0xffffffffu, mx[h2], 1));
			mx[h2] = fmaxf(mx[h2], __shfl_xor_sync(0xffffffffu, mx[h2], 2));
			mn = fmaxf(m[h2], mx[h2]);
			corr[h2] = exp2f(m[h2] - mn);
			m[h2] = mn;
			l[h2] *= corr[h2];
		}
		for (int n = 0; n < TC_TILE / 16; n++)
			for (int e = 0; e < 8; e++) {
				float p = exp2f(sf[n].x[e] - m[(e >> 1) & 1]);
				T pb = from_f<T>(p);
				l[(e >> 1) & 1] += to_f(pb); // the sum of what P.V multiplies
				pf[n].x[e] = pb;
			}
		for (int n = 0; n < HD / 16; n++) {
			for (int e = 0; e < 8; e++)
				of[n].x[e] *= corr[(e >> 1) & 1];
			for (int k = 0; k < TC_TILE / 16; k++) {
				wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::row_major> vf;
				wm::load_matrix_sync(vf, Vt + 16 * k * D::LDT + 16 * n, D::LDT);
				wm::mma_sync(of[n], pf[k], vf, of[n]);
			}
		}
		__syncthreads(); // the buffer read here is the one the next step loads into
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
				lse[((int64_t)b * g.np + hh) * g.T + i] = (m[h2] + log2f(l[h2])) * (1.0f / LOG2E);
		}
}

template <typename T, int HD>
static int fwd_reg(void *y, float *lse, const void *qkv, int B, geo g)
{
	size_t sm = (size_t)TC_TILE * 4 * tcdims<HD>::LDT * 2;
	MT_CUDA_CHECK(cudaFuncSetAttribute(attn_fwd_reg<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
	attn_fwd_reg<T, HD><<<dim3((unsigned)((g.T + TC_TILE - 1) / TC_TILE), (unsigned)g.np, (unsigned)B), TC_THREADS, sm, MT_STREAM>>>(
		(T *)y, lse, (const T *)qkv, g);
	MT_LAUNCH_CHECK("attention");
	return 0;
}


// the 16-bit backward (bf16 and fp16), the same way: scores and their gradients stay in
// registers and become matrix_a fragments of the dQ, dK and dV products. The streamed
// tiles (keys/values in the dQ kernel, queries/output gradients in the dK/dV kernel)
// come in by cp.async, two buffers deep: the next tile loads while this one is worked
// on. The second buffer is the shared memory that held the block's own rows, free once
// they are in registers, so the blocks need no more shared memory than before.
// Probabilities as exp2(s * scale * log2(e) - lse * log2(e)).


template <typename T, int HD>
__global__ void __launch_bounds__(TC_THREADS) attn_bwd_dq_reg(T *dqkv, float *Dsum, const T *dy, const T *y,
							      const float *lse, const T *qkv, geo g)
{
	using D = tcdims<HD>;
	extern __shared__ __align__(128) unsigned char sm[];
	T *Qs = (T *)sm, *dOs = Qs + TC_TILE * D::LDT, *Ks = dOs + TC_TILE * D::LDT, *Vs = Ks + TC_TILE * D::LDT;
	float *Lr = (float *)(Vs + TC_TILE * D::LDT), *Dr_s = Lr + TC_TILE;
	int qt = gridDim.x - 1 - blockIdx.x, b = blockIdx.z, hh = blockIdx.y;
	int w = threadIdx.x / 32, lane = threadIdx.x % 32, r = 16 * w + lane / 2, half = lane % 2;
	int q0 = qt * TC_TILE, i = q0 + r, nt = min(qt + 1, (g.T + TC_TILE - 1) / TC_TILE);
	int ko = k_off(g, hh / g.per, HD), vo = ko + HD, qo = q_off(g, hh, HD);
	const T *base = qkv + (int64_t)b * g.T * g.row;
	const T *dyb = dy + (int64_t)b * g.T * g.np * HD + hh * HD;
	float Dr = 0, Lrow[2], Drow[2], sl2 = g.scale * LOG2E;
	wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::row_major> qf[HD / 16], df[HD / 16];
	wm::fragment<wm::accumulator, 16, 16, 16, float> dq[HD / 16];

	tc_load_async<T, HD>(Qs, base + qo, g.row, q0, g.T);
	tc_load_async<T, HD>(dOs, dyb, (int64_t)g.np * HD, q0, g.T);
	cp_commit();
	tc_load_async<T, HD>(Ks, base + ko, g.row, 0, g.T);
	tc_load_async<T, HD>(Vs, base + vo, g.row, 0, g.T);
	cp_commit();
	cp_wait<1>();
	__syncthreads();
	if (i < g.T) {
		const T *yr = y + ((int64_t)b * g.T + i) * g.np * HD + hh * HD;
		for (int c = half * (HD / 2); c < (half + 1) * (HD / 2); c++)
			Dr += to_f(dOs[r * D::LDT + c]) * to_f(yr[c]);
	}
	Dr += __shfl_xor_sync(0xffffffffu, Dr, 1);
	if (half == 0) {
		Dr_s[r] = Dr;
		Lr[r] = i < g.T ? lse[((int64_t)b * g.np + hh) * g.T + i] * LOG2E : 0.0f;
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
	__syncthreads(); // Qs and dOs become the second key/value buffer
	for (int t = 0; t < nt; t++) {
		const T *Kt = (t & 1) ? Qs : Ks, *Vt = (t & 1) ? dOs : Vs;
		int j0 = t * TC_TILE;
		bool diag = j0 + TC_TILE > q0 + 16 * w || j0 + TC_TILE > g.T || q0 + 16 * w + 16 > g.T;

		if (t + 1 < nt) {
			tc_load_async<T, HD>((t & 1) ? Ks : Qs, base + ko, g.row, j0 + TC_TILE, g.T);
			tc_load_async<T, HD>((t & 1) ? Vs : dOs, base + vo, g.row, j0 + TC_TILE, g.T);
		}
		cp_commit();
		cp_wait<1>();
		__syncthreads();
		for (int n = 0; n < TC_TILE / 16; n++) {
			wm::fragment<wm::accumulator, 16, 16, 16, float> sf, dp;
			wm::fill_fragment(sf, 0.0f);
			wm::fill_fragment(dp, 0.0f);
			for (int k = 0; k < HD / 16; k++) {
				wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::col_major> kf, vf;
				wm::load_matrix_sync(kf, Kt + 16 * n * D::LDT + 16 * k, D::LDT);
				wm::load_matrix_sync(vf, Vt + 16 * n * D::LDT + 16 * k, D::LDT);
				wm::mma_sync(sf, qf[k], kf, sf);
				wm::mma_sync(dp, df[k], vf, dp);
			}
			wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::row_major> dsf;
			for (int e = 0; e < 8; e++) {
				int h2 = (e >> 1) & 1, ii = q0 + 16 * w + fr_row(lane, e), j = j0 + 16 * n + fr_col(lane, e);
				float p = exp2f(sf.x[e] * sl2 - Lrow[h2]);
				if (diag && !(j <= ii && j < g.T && ii < g.T))
					p = 0.0f;
				dsf.x[e] = from_f<T>(p * (dp.x[e] - Drow[h2]));
			}
			// this block of 16 keys' share of dQ at once: one dS fragment live, not four
			for (int c = 0; c < HD / 16; c++) {
				wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::row_major> kf;
				wm::load_matrix_sync(kf, Kt + 16 * n * D::LDT + 16 * c, D::LDT);
				wm::mma_sync(dq[c], dsf, kf, dq[c]);
			}
		}
		__syncthreads(); // the buffer read here is the one the next step loads into
	}
	for (int n = 0; n < HD / 16; n++)
		for (int e = 0; e < 8; e++) {
			int ii = q0 + 16 * w + fr_row(lane, e), c = 16 * n + fr_col(lane, e);
			if (ii < g.T)
				dqkv[((int64_t)b * g.T + ii) * g.row + qo + c] = from_f<T>(dq[n].x[e] * g.scale);
		}
}

template <typename T, int HD>
__global__ void __launch_bounds__(TC_THREADS) attn_bwd_dkv_reg(T *dqkv, const float *Dsum, const T *dy,
							       const float *lse, const T *qkv, geo g)
{
	using D = tcdims<HD>;
	extern __shared__ __align__(128) unsigned char sm[];
	T *Ks = (T *)sm, *Vs = Ks + TC_TILE * D::LDT, *Qs = Vs + TC_TILE * D::LDT, *dOs = Qs + TC_TILE * D::LDT;
	float *LD = (float *)(dOs + TC_TILE * D::LDT); // [2 buffers][lse, D][64]
	int kt = blockIdx.x, b = blockIdx.z, grp = blockIdx.y;
	int w = threadIdx.x / 32, lane = threadIdx.x % 32;
	int k0 = kt * TC_TILE, tiles = (g.T + TC_TILE - 1) / TC_TILE, nq = tiles - kt, nt = nq * g.per;
	int ko = k_off(g, grp, HD), vo = ko + HD;
	const T *base = qkv + (int64_t)b * g.T * g.row;
	float sl2 = g.scale * LOG2E;
	wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::row_major> kf[HD / 16], vf[HD / 16];
	wm::fragment<wm::accumulator, 16, 16, 16, float> dk[HD / 16], dv[HD / 16];

	// query tile t: head grp * per + t / nq, rows k0 + (t % nq) * 64
	auto load = [&](int t, int buf) {
		int hh = grp * g.per + t / nq, i0 = k0 + (t % nq) * TC_TILE;
		float *Lb = LD + buf * 2 * TC_TILE;
		tc_load_async<T, HD>(buf ? Ks : Qs, base + q_off(g, hh, HD), g.row, i0, g.T);
		tc_load_async<T, HD>(buf ? Vs : dOs, dy + (int64_t)b * g.T * g.np * HD + hh * HD, (int64_t)g.np * HD, i0, g.T);
		for (int c = threadIdx.x; c < TC_TILE; c += TC_THREADS) {
			int64_t at = ((int64_t)b * g.np + hh) * g.T + i0 + c;
			if (i0 + c < g.T) {
				cp4(Lb + c, lse + at);
				cp4(Lb + TC_TILE + c, Dsum + at);
			} else {
				Lb[c] = 0;
				Lb[TC_TILE + c] = 0;
			}
		}
	};

	tc_load_async<T, HD>(Ks, base + ko, g.row, k0, g.T);
	tc_load_async<T, HD>(Vs, base + vo, g.row, k0, g.T);
	cp_commit();
	load(0, 0);
	cp_commit();
	cp_wait<1>();
	__syncthreads();
	for (int k = 0; k < HD / 16; k++) {
		wm::load_matrix_sync(kf[k], Ks + 16 * w * D::LDT + 16 * k, D::LDT);
		wm::load_matrix_sync(vf[k], Vs + 16 * w * D::LDT + 16 * k, D::LDT);
		wm::fill_fragment(dk[k], 0.0f);
		wm::fill_fragment(dv[k], 0.0f);
	}
	__syncthreads(); // Ks and Vs become the second query buffer
	for (int t = 0; t < nt; t++) {
		const T *Qt = (t & 1) ? Ks : Qs, *Ot = (t & 1) ? Vs : dOs;
		const float *Ls = LD + (t & 1) * 2 * TC_TILE, *Ds = Ls + TC_TILE;
		int i0 = k0 + (t % nq) * TC_TILE;
		bool diag = i0 < k0 + 16 * w + 16 || i0 + TC_TILE > g.T || k0 + 16 * w + 16 > g.T;

		if (t + 1 < nt)
			load(t + 1, (t + 1) & 1);
		cp_commit();
		cp_wait<1>();
		__syncthreads();
		for (int n = 0; n < TC_TILE / 16; n++) {
			wm::fragment<wm::accumulator, 16, 16, 16, float> sf, dp;
			wm::fill_fragment(sf, 0.0f);
			wm::fill_fragment(dp, 0.0f);
			for (int k = 0; k < HD / 16; k++) {
				wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::col_major> qb, db;
				wm::load_matrix_sync(qb, Qt + 16 * n * D::LDT + 16 * k, D::LDT);
				wm::load_matrix_sync(db, Ot + 16 * n * D::LDT + 16 * k, D::LDT);
				wm::mma_sync(sf, kf[k], qb, sf);
				wm::mma_sync(dp, vf[k], db, dp);
			}
			wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::row_major> pt, dst;
			for (int e = 0; e < 8; e++) {
				int c = 16 * n + fr_col(lane, e), ii = i0 + c, j = k0 + 16 * w + fr_row(lane, e);
				float p = exp2f(sf.x[e] * sl2 - Ls[c] * LOG2E);
				if (diag && !(ii >= j && ii < g.T && j < g.T))
					p = 0.0f;
				pt.x[e] = from_f<T>(p);
				dst.x[e] = from_f<T>(p * (dp.x[e] - Ds[c]));
			}
			// this block of 16 queries' share of dV and dK at once
			for (int c = 0; c < HD / 16; c++) {
				wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::row_major> ob, qb;
				wm::load_matrix_sync(ob, Ot + 16 * n * D::LDT + 16 * c, D::LDT);
				wm::load_matrix_sync(qb, Qt + 16 * n * D::LDT + 16 * c, D::LDT);
				wm::mma_sync(dv[c], pt, ob, dv[c]);
				wm::mma_sync(dk[c], dst, qb, dk[c]);
			}
		}
		__syncthreads(); // the buffer read here is the one the next step loads into
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

template <typename T, int HD>
static int bwd_reg(void *dqkv, const void *dy, const void *y, const float *lse, const void *qkv, int B, geo g,
		   float *scratch)
{
	unsigned tiles = (unsigned)((g.T + TC_TILE - 1) / TC_TILE);
	size_t sm = (size_t)TC_TILE * 4 * tcdims<HD>::LDT * 2 + 4 * TC_TILE * 4;
	MT_CUDA_CHECK(cudaFuncSetAttribute(attn_bwd_dq_reg<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
	MT_CUDA_CHECK(cudaFuncSetAttribute(attn_bwd_dkv_reg<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
	attn_bwd_dq_reg<T, HD><<<dim3(tiles, (unsigned)g.np, (unsigned)B), TC_THREADS, sm, MT_STREAM>>>(
		(T *)dqkv, scratch, (const T *)dy, (const T *)y, lse, (const T *)qkv, g);
	MT_LAUNCH_CHECK("attention");
	attn_bwd_dkv_reg<T, HD><<<dim3(tiles, (unsigned)g.ng, (unsigned)B), TC_THREADS, sm, MT_STREAM>>>(
		(T *)dqkv, scratch, (const T *)dy, lse, (const T *)qkv, g);
	MT_LAUNCH_CHECK("attention");
	return 0;
}

// the tensor-core path where it applies: 16-bit types, head size 64 or 128
template <typename T> static int try_fwd_tc(void *, float *, const void *, int, geo, int) { return 1; }
template <typename T> static int try_bwd_tc(void *, const void *, const void *, const float *, const void *, int, geo, float *, int) { return 1; }
template <> int try_fwd_tc<__nv_bfloat16>(void *y, float *lse, const void *qkv, int B, geo g, int hd)
{
	return hd == 64 ? fwd_reg<__nv_bfloat16, 64>(y, lse, qkv, B, g) : hd == 128 ? fwd_reg<__nv_bfloat16, 128>(y, lse, qkv, B, g) : 1;
}
template <> int try_fwd_tc<__half>(void *y, float *lse, const void *qkv, int B, geo g, int hd)
{
	return hd == 64 ? fwd_reg<__half, 64>(y, lse, qkv, B, g) : hd == 128 ? fwd_reg<__half, 128>(y, lse, qkv, B, g) : 1;
}
template <> int try_bwd_tc<__nv_bfloat16>(void *dqkv, const void *dy, const void *y, const float *lse, const void *qkv, int B,
					  geo g, float *scratch, int hd)
{
	return hd == 64 ? bwd_reg<__nv_bfloat16, 64>(dqkv, dy, y, lse, qkv, B, g, scratch)
	       : hd == 128 ? bwd_reg<__nv_bfloat16, 128>(dqkv, dy, y, lse, qkv, B, g, scratch) : 1;
}
template <> int try_bwd_tc<__half>(void *dqkv, const void *dy, const void *y, const float *lse, const void *qkv, int B,
				   geo g, float *scratch, int hd)
{
	return hd == 64 ? bwd_reg<__half, 64>(dqkv, dy, y, lse, qkv, B, g, scratch)
	       : hd == 128 ? bwd_reg<__half, 128>(dqkv, dy, y, lse, qkv, B, g, scratch) : 1;
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
