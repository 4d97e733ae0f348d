// attention.cu: causal GQA attention, forward and backward, without the T x T matrix
// (see attention.h).
//
// Two paths. bf16/fp16 at head sizes 64 and 128 (the models' case) take the tensor-core
// kernels below: PTX mma.sync products from ldmatrix operands. Everything else (fp32,
// other head sizes) takes the CUDA-core kernels first in this file: one thread owns one
// row, a query row in the forward and the query-gradient kernel, a key/value row in the
// key/value-gradient kernel, with the other side streamed through shared memory in tiles.
// Both: the forward is the online softmax (running max and sum); the backward recomputes
// each probability from the saved log-sum-exp, the query gradients in one kernel, the
// key/value gradients in another. Keys and values are shared by the heads of a group:
// their gradients sum the group's heads in order, so there are no atomics and every run
// gives the same bits. fp32 accumulation throughout.
#include "attention.h"
#include "rope.h"
#include "norm.h"

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


// ---- tensor-core path (bf16/fp16, head sizes 64 and 128) ----
//
// cp.async (cp16, cp4, cp_commit, cp_wait), ex2, pack2, sum2: common.cuh

#define LOG2E 1.4426950408889634f

// Tiles of 64 keys (or queries) streamed through shared memory by cp.async, two buffers
// deep, scores and probabilities kept in registers (never the T x T matrix). At head size
// 64 each warp of the forward and the query-gradient kernel owns 32 query rows (blocks of
// 128 queries), so one key or value fragment read from shared memory feeds two products
// and there are twice the independent accumulators (WMMA kernels with 16 rows a warp were
// latency-bound at about an eighth of the tensor cores' rate); at 128 the forward keeps
// 32 rows too (its queries left in shared memory), the query-gradient kernel 16 rows
// (registers). The key/value-gradient kernel keeps 16 key rows a warp (its dK and dV
// accumulators would not fit twice) and takes its queries 32 (16) at a time. Products are
// PTX m16n8k16 (fp32 accumulation), operands come from shared memory by ldmatrix. In
// the accumulator of an m16n8k16 product a thread holds row lane/4 (elements 0, 1) and
// row lane/4 + 8 (2, 3), columns 2 * (lane % 4) and the next; the A operand's registers
// 0-3 hold (row, k) = (lane/4, 2(lane%4)), (+8, same), (same, +8), (+8, +8), so two
// accumulators of adjacent column blocks become one A operand without leaving registers
// (tests/unit/test_cuda.c holds the kernels to the CPU reference). Every reduction is in
// a fixed order and the gradients need no atomics: the same bits on every run.

#define FA_THREADS 128

__device__ __forceinline__ void ldsm4(unsigned *r, const void *p)
{
	unsigned a = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void ldsm4t(unsigned *r, const void *p)
{
	unsigned a = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

template <typename T> __device__ __forceinline__ void mma16816(float *c, const unsigned *a, unsigned b0, unsigned b1);
template <> __device__ __forceinline__ void mma16816<__nv_bfloat16>(float *c, const unsigned *a, unsigned b0, unsigned b1)
{
	asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
	    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <> __device__ __forceinline__ void mma16816<__half>(float *c, const unsigned *a, unsigned b0, unsigned b1)
{
	asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
	    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// A operand (16 rows x 16 columns at p, row stride ld) or, the same addresses, the
// transposed B operand of two 8-column blocks (rows of p are the k index)
template <typename T> __device__ __forceinline__ const T *at_a(const T *p, int ld, int lane)
{
	return p + (lane % 16) * ld + (lane / 16) * 8;
}
// B operand of two 8-column blocks from 16 rows of p that are the n index (k along a row):
// registers 0, 1 for rows 0-7 and 2, 3 for rows 8-15
template <typename T> __device__ __forceinline__ const T *at_b(const T *p, int ld, int lane)
{
	return p + ((lane / 16) * 8 + lane % 8) * ld + ((lane / 8) % 2) * 8;
}

// R rows [r0, r0 + R) of a strided matrix (HD columns) into [R][HD + 8] by cp.async;
// rows past nrows zeroed
template <typename T, int HD, int R>
__device__ __forceinline__ void fa_load(T *dst, const T *src, int64_t stride, int r0, int nrows)
{
	constexpr int LDT = HD + 8, VPR = HD / 8;
	for (int v = threadIdx.x; v < R * VPR; v += FA_THREADS) {
		int r = v / VPR, c = (v % VPR) * 8;
		if (r0 + r < nrows)
			cp16(dst + r * LDT + c, src + (int64_t)(r0 + r) * stride + c);
		else
			*(int4 *)(dst + r * LDT + c) = make_int4(0, 0, 0, 0);
	}
}

// forward: a block of 64 * MI queries, four warps of 16 * MI rows, keys and values in
// tiles of 64 through two cp.async buffers (the second is the query tile's space once
// the queries are in registers, at least 128 rows of it). Scores stay unscaled until the
// exponent (one FFMA: s * scale * log2(e) - max); masks only on the tiles that cross the
// diagonal or the end; the row sums add the probabilities as rounded for P.V (what it
// multiplies).
template <typename T, int HD, int MI, bool QSM>
__global__ void __launch_bounds__(FA_THREADS, 2) fa_fwd(T *y, float *lse, const T *qkv, geo g)
{
	constexpr int LDT = HD + 8, NK = HD / 16, KT = 64, QT = 64 * MI, QR = QT > 2 * KT ? QT : 2 * KT, RW = 16 * MI;
	extern __shared__ __align__(128) unsigned char sm[];
	// QSM: the queries stay in shared memory (read by ldmatrix each key tile) and the
	// second key/value buffer has its own space; else they move to registers
	T *Qs = (T *)sm, *K0 = Qs + (QSM ? QT : QR) * LDT, *V0 = K0 + KT * LDT;
	T *K1 = QSM ? V0 + KT * LDT : Qs, *V1 = QSM ? K1 + KT * LDT : Qs + KT * LDT;
	int qt = gridDim.x - 1 - blockIdx.x, b = blockIdx.z, hh = blockIdx.y;
	int w = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, tc = 2 * (lane % 4);
	int q0 = qt * QT, rbase = q0 + RW * w, nt = min((q0 + QT + KT - 1) / KT, (g.T + KT - 1) / KT);
	int ko = k_off(g, hh / g.per, HD), vo = ko + HD, qo = q_off(g, hh, HD);
	const T *base = qkv + (int64_t)b * g.T * g.row;
	float sl2 = g.scale * LOG2E, m[MI][2], l[MI][2], o[MI][HD / 8][4]; // m: scaled, log2 units
	unsigned qf[QSM ? 1 : MI][QSM ? 1 : NK][4];

	fa_load<T, HD, QT>(Qs, base + qo, g.row, q0, g.T);
	cp_commit();
	fa_load<T, HD, KT>(K0, base + ko, g.row, 0, g.T);
	fa_load<T, HD, KT>(V0, base + vo, g.row, 0, g.T);
	cp_commit();
	cp_wait<1>();
	__syncthreads();
#pragma unroll
	for (int mi = 0; mi < MI; mi++) {
		if constexpr (!QSM)
#pragma unroll
			for (int k = 0; k < NK; k++)
				ldsm4(qf[mi][k], at_a(Qs + (RW * w + 16 * mi) * LDT + 16 * k, LDT, lane));
#pragma unroll
		for (int n = 0; n < HD / 8; n++)
			o[mi][n][0] = o[mi][n][1] = o[mi][n][2] = o[mi][n][3] = 0.0f;
		m[mi][0] = m[mi][1] = -INFINITY;
		l[mi][0] = l[mi][1] = 0.0f;
	}
	__syncthreads(); // the query tile's space becomes the second key/value buffer
	for (int t = 0; t < nt; t++) {
		const T *Kt = (t & 1) ? K1 : K0, *Vt = (t & 1) ? V1 : V0;
		int j0 = t * KT;

		if (t + 1 < nt) {
			fa_load<T, HD, KT>((t & 1) ? K0 : K1, base + ko, g.row, j0 + KT, g.T);
			fa_load<T, HD, KT>((t & 1) ? V0 : V1, base + vo, g.row, j0 + KT, g.T);
		}
		cp_commit();
		cp_wait<1>();
		__syncthreads();
		if (j0 <= rbase + RW - 1) { // else every key of the tile is after this warp's rows
			float s[MI][KT / 8][4];
#pragma unroll
			for (int mi = 0; mi < MI; mi++)
#pragma unroll
				for (int n = 0; n < KT / 8; n++)
					s[mi][n][0] = s[mi][n][1] = s[mi][n][2] = s[mi][n][3] = 0.0f;
#pragma unroll
			for (int k = 0; k < NK; k++) {
				unsigned qa[QSM ? MI : 1][4];
				if constexpr (QSM)
#pragma unroll
					for (int mi = 0; mi < MI; mi++)
						ldsm4(qa[mi], at_a(Qs + (RW * w + 16 * mi) * LDT + 16 * k, LDT, lane));
#pragma unroll
				for (int n = 0; n < KT / 16; n++) {
					unsigned kb[4];
					ldsm4(kb, at_b(Kt + 16 * n * LDT + 16 * k, LDT, lane));
#pragma unroll
					for (int mi = 0; mi < MI; mi++) {
						const unsigned *a;
						if constexpr (QSM)
							a = qa[mi];
						else
							a = qf[mi][k];
						mma16816<T>(s[mi][2 * n], a, kb[0], kb[1]);
						mma16816<T>(s[mi][2 * n + 1], a, kb[2], kb[3]);
					}
				}
			}
			if (j0 + KT - 1 > rbase || j0 + KT > g.T) // keys after some row, or past the end
#pragma unroll
				for (int mi = 0; mi < MI; mi++)
#pragma unroll
					for (int n = 0; n < KT / 8; n++)
#pragma unroll
						for (int e = 0; e < 4; e++) {
							int i = rbase + 16 * mi + gr + 8 * (e >> 1), j = j0 + 8 * n + tc + (e & 1);
							if (j > i || j >= g.T)
								s[mi][n][e] = -INFINITY;
						}
#pragma unroll
			for (int mi = 0; mi < MI; mi++)
#pragma unroll
				for (int h = 0; h < 2; h++) {
					float mx = -INFINITY, mn, corr;
#pragma unroll
					for (int n = 0; n < KT / 8; n++)
						mx = fmaxf(mx, fmaxf(s[mi][n][2 * h], s[mi][n][2 * h + 1]));
					mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
					mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
					mn = fmaxf(m[mi][h], mx * sl2);
					corr = ex2(m[mi][h] - mn);
					m[mi][h] = mn;
					l[mi][h] *= corr;
#pragma unroll
					for (int n = 0; n < HD / 8; n++) {
						o[mi][n][2 * h] *= corr;
						o[mi][n][2 * h + 1] *= corr;
					}
				}
#pragma unroll
			for (int kk = 0; kk < KT / 16; kk++) {
				unsigned pf[MI][4];
#pragma unroll
				for (int mi = 0; mi < MI; mi++)
#pragma unroll
					for (int r = 0; r < 4; r++) {
						// register r: keys block 2kk + r/2, row half r%2
						const float *sv = s[mi][2 * kk + r / 2] + 2 * (r % 2);
						float p0 = ex2(sv[0] * sl2 - m[mi][r % 2]), p1 = ex2(sv[1] * sl2 - m[mi][r % 2]);
						pf[mi][r] = pack2<T>(p0, p1);
						l[mi][r % 2] += sum2<T>(pf[mi][r]); // the sum of what P.V multiplies
					}
#pragma unroll
				for (int n = 0; n < HD / 16; n++) {
					unsigned vb[4];
					ldsm4t(vb, at_a(Vt + 16 * kk * LDT + 16 * n, LDT, lane));
#pragma unroll
					for (int mi = 0; mi < MI; mi++) {
						mma16816<T>(o[mi][2 * n], pf[mi], vb[0], vb[1]);
						mma16816<T>(o[mi][2 * n + 1], pf[mi], vb[2], vb[3]);
					}
				}
			}
		}
		__syncthreads(); // the buffer read here is the one the next step loads into
	}
#pragma unroll
	for (int mi = 0; mi < MI; mi++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			int i = rbase + 16 * mi + gr + 8 * h;
			float inv;
			l[mi][h] += __shfl_xor_sync(0xffffffffu, l[mi][h], 1);
			l[mi][h] += __shfl_xor_sync(0xffffffffu, l[mi][h], 2);
			inv = 1.0f / l[mi][h];
			if (i >= g.T)
				continue;
			T *yr = y + ((int64_t)b * g.T + i) * g.np * HD + hh * HD;
#pragma unroll
			for (int n = 0; n < HD / 8; n++)
				*(unsigned *)(yr + 8 * n + tc) = pack2<T>(o[mi][n][2 * h] * inv, o[mi][n][2 * h + 1] * inv);
			if (lane % 4 == 0)
				lse[((int64_t)b * g.np + hh) * g.T + i] = (m[mi][h] + log2f(l[mi][h])) * (1.0f / LOG2E);
		}
}

// query gradients: a block of 64 * MI queries, four warps of 16 * MI rows, keys and
// values streamed as in the forward; writes D = sum(dy * y) of each row for the next
// kernel
template <typename T, int HD, int MI>
__global__ void __launch_bounds__(FA_THREADS, 2) fa_bwd_dq(T *dqkv, float *Dsum, const T *dy, const T *y,
							   const float *lse, const T *qkv, geo g)
{
	constexpr int LDT = HD + 8, NK = HD / 16, KT = 64, QT = 64 * MI, RW = 16 * MI;
	extern __shared__ __align__(128) unsigned char sm[];
	// the second key/value buffer is the query and output-gradient tiles' space (>= 128 rows)
	T *Qs = (T *)sm, *dOs = Qs + QT * LDT, *K0 = dOs + QT * LDT, *V0 = K0 + KT * LDT, *K1 = Qs, *V1 = Qs + KT * LDT;
	float *Ls = (float *)(V0 + KT * LDT), *Ds = Ls + QT;
	int qt = gridDim.x - 1 - blockIdx.x, b = blockIdx.z, hh = blockIdx.y;
	int w = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, tc = 2 * (lane % 4);
	int q0 = qt * QT, rbase = q0 + RW * w, nt = min((q0 + QT + KT - 1) / KT, (g.T + KT - 1) / KT);
	int ko = k_off(g, hh / g.per, HD), vo = ko + HD, qo = q_off(g, hh, HD);
	const T *base = qkv + (int64_t)b * g.T * g.row;
	const T *dyb = dy + (int64_t)b * g.T * g.np * HD + hh * HD;
	float sl2 = g.scale * LOG2E, Lr[MI][2], Dr[MI][2], dq[MI][HD / 8][4];
	unsigned qf[MI][NK][4], df[MI][NK][4];

	fa_load<T, HD, QT>(Qs, base + qo, g.row, q0, g.T);
	fa_load<T, HD, QT>(dOs, dyb, (int64_t)g.np * HD, q0, g.T);
	cp_commit();
	fa_load<T, HD, KT>(K0, base + ko, g.row, 0, g.T);
	fa_load<T, HD, KT>(V0, base + vo, g.row, 0, g.T);
	cp_commit();
	cp_wait<1>();
	__syncthreads();
	for (int r = threadIdx.x; r < QT; r += FA_THREADS) { // D and lse, one row a thread
		int i = q0 + r;
		float D = 0.0f;
		if (i < g.T) {
			const T *yr = y + ((int64_t)b * g.T + i) * g.np * HD + hh * HD;
#pragma unroll
			for (int c = 0; c < HD; c += 8) {
				int4 a = *(const int4 *)(dOs + r * LDT + c), v = *(const int4 *)(yr + c);
				const T *ae = (const T *)&a, *ve = (const T *)&v;
#pragma unroll
				for (int e = 0; e < 8; e++)
					D += to_f(ae[e]) * to_f(ve[e]);
			}
			Dsum[((int64_t)b * g.np + hh) * g.T + i] = D;
		}
		Ds[r] = D;
		Ls[r] = i < g.T ? lse[((int64_t)b * g.np + hh) * g.T + i] * LOG2E : 0.0f;
	}
	__syncthreads();
#pragma unroll
	for (int mi = 0; mi < MI; mi++) {
#pragma unroll
		for (int k = 0; k < NK; k++) {
			ldsm4(qf[mi][k], at_a(Qs + (RW * w + 16 * mi) * LDT + 16 * k, LDT, lane));
			ldsm4(df[mi][k], at_a(dOs + (RW * w + 16 * mi) * LDT + 16 * k, LDT, lane));
		}
#pragma unroll
		for (int n = 0; n < HD / 8; n++)
			dq[mi][n][0] = dq[mi][n][1] = dq[mi][n][2] = dq[mi][n][3] = 0.0f;
#pragma unroll
		for (int h = 0; h < 2; h++) {
			Lr[mi][h] = Ls[RW * w + 16 * mi + gr + 8 * h];
			Dr[mi][h] = Ds[RW * w + 16 * mi + gr + 8 * h];
		}
	}
	__syncthreads(); // the query tile's space becomes the second key/value buffer
	for (int t = 0; t < nt; t++) {
		const T *Kt = (t & 1) ? K1 : K0, *Vt = (t & 1) ? V1 : V0;
		int j0 = t * KT;

		if (t + 1 < nt) {
			fa_load<T, HD, KT>((t & 1) ? K0 : K1, base + ko, g.row, j0 + KT, g.T);
			fa_load<T, HD, KT>((t & 1) ? V0 : V1, base + vo, g.row, j0 + KT, g.T);
		}
		cp_commit();
		cp_wait<1>();
		__syncthreads();
#pragma unroll
		for (int n = 0; n < KT / 16; n++) { // 16 keys at a time
			float s[MI][2][4], dp[MI][2][4];
			unsigned ds[MI][4];
			if (j0 + 16 * n > rbase + RW - 1) // every key after this warp's rows
				break;
#pragma unroll
			for (int mi = 0; mi < MI; mi++)
#pragma unroll
				for (int h = 0; h < 2; h++)
#pragma unroll
					for (int e = 0; e < 4; e++)
						s[mi][h][e] = dp[mi][h][e] = 0.0f;
#pragma unroll
			for (int k = 0; k < NK; k++) {
				unsigned kb[4], vb[4];
				ldsm4(kb, at_b(Kt + 16 * n * LDT + 16 * k, LDT, lane));
				ldsm4(vb, at_b(Vt + 16 * n * LDT + 16 * k, LDT, lane));
#pragma unroll
				for (int mi = 0; mi < MI; mi++) {
					mma16816<T>(s[mi][0], qf[mi][k], kb[0], kb[1]);
					mma16816<T>(s[mi][1], qf[mi][k], kb[2], kb[3]);
					mma16816<T>(dp[mi][0], df[mi][k], vb[0], vb[1]);
					mma16816<T>(dp[mi][1], df[mi][k], vb[2], vb[3]);
				}
			}
#pragma unroll
			for (int mi = 0; mi < MI; mi++)
#pragma unroll
				for (int hb = 0; hb < 2; hb++)
#pragma unroll
					for (int e = 0; e < 4; e++)
						s[mi][hb][e] = ex2(s[mi][hb][e] * sl2 - Lr[mi][e >> 1]); // P
			// keys after some row, or keys or rows past the end
			if (j0 + 16 * n + 15 > rbase || j0 + 16 * n + 16 > g.T || rbase + RW > g.T)
#pragma unroll
				for (int mi = 0; mi < MI; mi++)
#pragma unroll
					for (int hb = 0; hb < 2; hb++)
#pragma unroll
						for (int e = 0; e < 4; e++) {
							int i = rbase + 16 * mi + gr + 8 * (e >> 1), j = j0 + 16 * n + 8 * hb + tc + (e & 1);
							if (j > i || j >= g.T || i >= g.T)
								s[mi][hb][e] = 0.0f;
						}
#pragma unroll
			for (int mi = 0; mi < MI; mi++)
#pragma unroll
				for (int r = 0; r < 4; r++) { // register r: keys 8 (r / 2), row half r % 2
					const float *p = s[mi][r / 2] + 2 * (r % 2), *d = dp[mi][r / 2] + 2 * (r % 2);
					ds[mi][r] = pack2<T>(p[0] * (d[0] - Dr[mi][r % 2]), p[1] * (d[1] - Dr[mi][r % 2]));
				}
			// these 16 keys' share of dQ
#pragma unroll
			for (int c = 0; c < HD / 16; c++) {
				unsigned kb[4];
				ldsm4t(kb, at_a(Kt + 16 * n * LDT + 16 * c, LDT, lane));
#pragma unroll
				for (int mi = 0; mi < MI; mi++) {
					mma16816<T>(dq[mi][2 * c], ds[mi], kb[0], kb[1]);
					mma16816<T>(dq[mi][2 * c + 1], ds[mi], kb[2], kb[3]);
				}
			}
		}
		__syncthreads(); // the buffer read here is the one the next step loads into
	}
#pragma unroll
	for (int mi = 0; mi < MI; mi++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			int i = rbase + 16 * mi + gr + 8 * h;
			if (i >= g.T)
				continue;
			T *dr = dqkv + ((int64_t)b * g.T + i) * g.row + qo;
#pragma unroll
			for (int n = 0; n < HD / 8; n++)
				*(unsigned *)(dr + 8 * n + tc) = pack2<T>(dq[mi][n][2 * h] * g.scale, dq[mi][n][2 * h + 1] * g.scale);
		}
}

// key and value gradients: a block of 64 keys, four warps of 16 key rows, the query
// tiles of the group's heads (queries, output gradients, lse, D) streamed through two
// cp.async buffers, 32 queries at a time (16 at head size 128); S and dP are computed transposed (keys as
// rows) so that P^T and dS^T are A operands of the dV and dK products straight away
template <typename T, int HD>
__global__ void __launch_bounds__(FA_THREADS, HD <= 64 ? 3 : 2) fa_bwd_dkv(T *dqkv, const float *Dsum, const T *dy,
							    const float *lse, const T *qkv, geo g)
{
	constexpr int LDT = HD + 8, NK = HD / 16, KT = 64, QT = 64, QB = HD <= 64 ? 2 : 1; // QB: 16-query blocks a step
	extern __shared__ __align__(128) unsigned char sm[];
	T *Ks = (T *)sm, *Vs = Ks + KT * LDT, *Q0 = Vs + KT * LDT, *O0 = Q0 + QT * LDT, *Q1 = Ks, *O1 = Vs;
	float *LD = (float *)(O0 + QT * LDT); // [2 buffers][lse, D][64]
	int kt = blockIdx.x, b = blockIdx.z, grp = blockIdx.y;
	int w = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, tc = 2 * (lane % 4);
	int k0 = kt * KT, kr = k0 + 16 * w, tiles = (g.T + QT - 1) / QT, nq = tiles - kt, nt = nq * g.per;
	int ko = k_off(g, grp, HD), vo = ko + HD;
	const T *base = qkv + (int64_t)b * g.T * g.row;
	float sl2 = g.scale * LOG2E, dk[HD / 8][4], dv[HD / 8][4];
	unsigned kf[NK][4], vf[NK][4];

	// query tile t: head grp * per + t / nq, rows k0 + (t % nq) * 64
	auto load = [&](int t, int buf) {
		int hh = grp * g.per + t / nq, i0 = k0 + (t % nq) * QT;
		float *Lb = LD + buf * 2 * QT;
		fa_load<T, HD, QT>(buf ? Q1 : Q0, base + q_off(g, hh, HD), g.row, i0, g.T);
		fa_load<T, HD, QT>(buf ? O1 : O0, dy + (int64_t)b * g.T * g.np * HD + hh * HD, (int64_t)g.np * HD, i0, g.T);
		for (int c = threadIdx.x; c < QT; c += FA_THREADS) {
			int64_t at = ((int64_t)b * g.np + hh) * g.T + i0 + c;
			if (i0 + c < g.T) {
				cp4(Lb + c, lse + at);
				cp4(Lb + QT + c, Dsum + at);
			} else {
				Lb[c] = 0;
				Lb[QT + c] = 0;
			}
		}
	};

	fa_load<T, HD, KT>(Ks, base + ko, g.row, k0, g.T);
	fa_load<T, HD, KT>(Vs, base + vo, g.row, k0, g.T);
	cp_commit();
	load(0, 0);
	cp_commit();
	cp_wait<1>();
	__syncthreads();
#pragma unroll
	for (int k = 0; k < NK; k++) {
		ldsm4(kf[k], at_a(Ks + 16 * w * LDT + 16 * k, LDT, lane));
		ldsm4(vf[k], at_a(Vs + 16 * w * LDT + 16 * k, LDT, lane));
	}
#pragma unroll
	for (int n = 0; n < HD / 8; n++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			dk[n][e] = dv[n][e] = 0.0f;
	__syncthreads(); // the key/value tile's space becomes the second query buffer
	for (int t = 0; t < nt; t++) {
		const T *Qt = (t & 1) ? Q1 : Q0, *Ot = (t & 1) ? O1 : O0;
		const float *Lt = LD + (t & 1) * 2 * QT, *Dt = Lt + QT;
		int i0 = k0 + (t % nq) * QT;
		bool diag = i0 < kr + 15 || i0 + QT > g.T || kr + 16 > g.T;

		if (t + 1 < nt)
			load(t + 1, (t + 1) & 1);
		cp_commit();
		cp_wait<1>();
		__syncthreads();
#pragma unroll
		for (int n2 = 0; n2 < QT / (16 * QB); n2++) {
			float s[QB][2][4], dp[QB][2][4]; // [16-query block][8-query half][element]
			unsigned pt[QB][4], dst[QB][4];
			if (i0 + 16 * QB * (n2 + 1) - 1 < kr) // every query before this warp's keys
				continue;
#pragma unroll
			for (int q = 0; q < QB; q++)
#pragma unroll
				for (int h = 0; h < 2; h++)
#pragma unroll
					for (int e = 0; e < 4; e++)
						s[q][h][e] = dp[q][h][e] = 0.0f;
#pragma unroll
			for (int k = 0; k < NK; k++)
#pragma unroll
				for (int q = 0; q < QB; q++) {
					unsigned qb[4], ob[4];
					ldsm4(qb, at_b(Qt + (16 * QB * n2 + 16 * q) * LDT + 16 * k, LDT, lane));
					ldsm4(ob, at_b(Ot + (16 * QB * n2 + 16 * q) * LDT + 16 * k, LDT, lane));
					mma16816<T>(s[q][0], kf[k], qb[0], qb[1]);
					mma16816<T>(s[q][1], kf[k], qb[2], qb[3]);
					mma16816<T>(dp[q][0], vf[k], ob[0], ob[1]);
					mma16816<T>(dp[q][1], vf[k], ob[2], ob[3]);
				}
#pragma unroll
			for (int q = 0; q < QB; q++)
#pragma unroll
				for (int hb = 0; hb < 2; hb++)
#pragma unroll
					for (int e = 0; e < 4; e++) // P^T
						s[q][hb][e] = ex2(s[q][hb][e] * sl2 - Lt[16 * QB * n2 + 16 * q + 8 * hb + tc + (e & 1)] * LOG2E);
			if (diag)
#pragma unroll
				for (int q = 0; q < QB; q++)
#pragma unroll
					for (int hb = 0; hb < 2; hb++)
#pragma unroll
						for (int e = 0; e < 4; e++) {
							int i = i0 + 16 * QB * n2 + 16 * q + 8 * hb + tc + (e & 1), j = kr + gr + 8 * (e >> 1);
							if (i < j || i >= g.T || j >= g.T)
								s[q][hb][e] = 0.0f;
						}
#pragma unroll
			for (int q = 0; q < QB; q++)
#pragma unroll
				for (int r = 0; r < 4; r++) { // register r: queries 8 (r / 2), key half r % 2
					int c = 16 * QB * n2 + 16 * q + 8 * (r / 2) + tc;
					const float *p = s[q][r / 2] + 2 * (r % 2), *d = dp[q][r / 2] + 2 * (r % 2);
					pt[q][r] = pack2<T>(p[0], p[1]);
					dst[q][r] = pack2<T>(p[0] * (d[0] - Dt[c]), p[1] * (d[1] - Dt[c + 1]));
				}
			// these queries' share of dV and dK
#pragma unroll
			for (int q = 0; q < QB; q++)
#pragma unroll
				for (int c = 0; c < HD / 16; c++) {
					unsigned ob[4], qb[4];
					ldsm4t(ob, at_a(Ot + (16 * QB * n2 + 16 * q) * LDT + 16 * c, LDT, lane));
					ldsm4t(qb, at_a(Qt + (16 * QB * n2 + 16 * q) * LDT + 16 * c, LDT, lane));
					mma16816<T>(dv[2 * c], pt[q], ob[0], ob[1]);
					mma16816<T>(dv[2 * c + 1], pt[q], ob[2], ob[3]);
					mma16816<T>(dk[2 * c], dst[q], qb[0], qb[1]);
					mma16816<T>(dk[2 * c + 1], dst[q], qb[2], qb[3]);
				}
		}
		__syncthreads(); // the buffer read here is the one the next step loads into
	}
#pragma unroll
	for (int h = 0; h < 2; h++) {
		int j = kr + gr + 8 * h;
		if (j >= g.T)
			continue;
		T *kr_ = dqkv + ((int64_t)b * g.T + j) * g.row + ko, *vr = kr_ + HD;
#pragma unroll
		for (int n = 0; n < HD / 8; n++) {
			*(unsigned *)(kr_ + 8 * n + tc) = pack2<T>(dk[n][2 * h] * g.scale, dk[n][2 * h + 1] * g.scale);
			*(unsigned *)(vr + 8 * n + tc) = pack2<T>(dv[n][2 * h], dv[n][2 * h + 1]);
		}
	}
}

// 32 query rows a warp at both head sizes; at 128 the queries stay in shared memory (in
// registers with the 32 rows' accumulators they would spill). Against 16 rows a warp with
// the queries in registers, the Llama-style 0.93B's forward went from 11.7 to 9.4 ms a
// step (H100, T=2048); the query-gradient kernel the same way gained nothing (39.8 ms
// of backward either way), so it keeps 16 rows at 128.
template <typename T, int HD>
static int fa_fwd_launch(void *y, float *lse, const void *qkv, int B, geo g)
{
	constexpr int MI = 2, QT = 64 * MI;
	constexpr bool QSM = HD > 64;
	size_t sm = (size_t)(QSM ? QT + 256 : QT + 128) * (HD + 8) * sizeof(T);
	MT_CUDA_CHECK(cudaFuncSetAttribute(fa_fwd<T, HD, MI, QSM>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
	fa_fwd<T, HD, MI, QSM><<<dim3((unsigned)((g.T + QT - 1) / QT), (unsigned)g.np, (unsigned)B), FA_THREADS, sm, MT_STREAM>>>(
		(T *)y, lse, (const T *)qkv, g);
	MT_LAUNCH_CHECK("attention");
	return 0;
}

template <typename T, int HD>
static int fa_bwd_launch(void *dqkv, const void *dy, const void *y, const float *lse, const void *qkv, int B, geo g,
			 float *scratch)
{
	constexpr int MI = HD <= 64 ? 2 : 1, QT = 64 * MI;
	size_t smq = (size_t)(2 * QT + 128) * (HD + 8) * sizeof(T) + 2 * QT * 4;
	size_t smk = (size_t)256 * (HD + 8) * sizeof(T) + 4 * 64 * 4;
	MT_CUDA_CHECK(cudaFuncSetAttribute(fa_bwd_dq<T, HD, MI>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smq));
	MT_CUDA_CHECK(cudaFuncSetAttribute(fa_bwd_dkv<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smk));
	fa_bwd_dq<T, HD, MI><<<dim3((unsigned)((g.T + QT - 1) / QT), (unsigned)g.np, (unsigned)B), FA_THREADS, smq, MT_STREAM>>>(
		(T *)dqkv, scratch, (const T *)dy, (const T *)y, lse, (const T *)qkv, g);
	MT_LAUNCH_CHECK("attention");
	fa_bwd_dkv<T, HD><<<dim3((unsigned)((g.T + 63) / 64), (unsigned)g.ng, (unsigned)B), FA_THREADS, smk, MT_STREAM>>>(
		(T *)dqkv, scratch, (const T *)dy, lse, (const T *)qkv, g);
	MT_LAUNCH_CHECK("attention");
	return 0;
}

// the tensor-core path where it applies: 16-bit types, head size 64 or 128
template <typename T> static int try_fwd_tc(void *, float *, const void *, int, geo, int) { return 1; }
template <typename T> static int try_bwd_tc(void *, const void *, const void *, const float *, const void *, int, geo, float *, int) { return 1; }
template <> int try_fwd_tc<__nv_bfloat16>(void *y, float *lse, const void *qkv, int B, geo g, int hd)
{
	return hd == 64 ? fa_fwd_launch<__nv_bfloat16, 64>(y, lse, qkv, B, g) : hd == 128 ? fa_fwd_launch<__nv_bfloat16, 128>(y, lse, qkv, B, g) : 1;
}
template <> int try_fwd_tc<__half>(void *y, float *lse, const void *qkv, int B, geo g, int hd)
{
	return hd == 64 ? fa_fwd_launch<__half, 64>(y, lse, qkv, B, g) : hd == 128 ? fa_fwd_launch<__half, 128>(y, lse, qkv, B, g) : 1;
}
template <> int try_bwd_tc<__nv_bfloat16>(void *dqkv, const void *dy, const void *y, const float *lse, const void *qkv, int B,
					  geo g, float *scratch, int hd)
{
	return hd == 64 ? fa_bwd_launch<__nv_bfloat16, 64>(dqkv, dy, y, lse, qkv, B, g, scratch)
	       : hd == 128 ? fa_bwd_launch<__nv_bfloat16, 128>(dqkv, dy, y, lse, qkv, B, g, scratch) : 1;
}
template <> int try_bwd_tc<__half>(void *dqkv, const void *dy, const void *y, const float *lse, const void *qkv, int B,
				   geo g, float *scratch, int hd)
{
	return hd == 64 ? fa_bwd_launch<__half, 64>(dqkv, dy, y, lse, qkv, B, g, scratch)
	       : hd == 128 ? fa_bwd_launch<__half, 128>(dqkv, dy, y, lse, qkv, B, g, scratch) : 1;
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
	int rc;

	MT_REQUIRE(B > 0 && T_ > 0 && ng > 0 && np % ng == 0 && B < 65536 && np < 65536, "attention: bad shape");
	if (mt_attention_tensor_cores && (rc = mt_attention_fwd_sm90(dt, y, lse, qkv, B, T_, np, ng, hd)) <= 0)
		return rc;
	return MT_DISPATCH(dt, attn_fwd, y, lse, qkv, B, T_, np, ng, hd, mt_attention_tensor_cores);
}

extern "C" int mt_attention_bwd(enum mt_dtype dt, void *dqkv, const void *dy, const void *y, const float *lse,
				const void *qkv, int B, int T_, int np, int ng, int hd, float *dbias, float *scratch,
				const float *rope)
{
	int rc;

	MT_REQUIRE(B > 0 && T_ > 0 && ng > 0 && np % ng == 0 && B < 65536 && np < 65536, "attention: bad shape");
	if (mt_attention_tensor_cores &&
	    (rc = mt_attention_bwd_sm90(dt, dqkv, dy, y, lse, qkv, B, T_, np, ng, hd, dbias, scratch, rope)) <= 0)
		return rc;
	if ((rc = MT_DISPATCH(dt, attn_bwd, dqkv, dy, y, lse, qkv, B, T_, np, ng, hd, scratch, mt_attention_tensor_cores)))
		return rc;
	if (rope && mt_rope(dt, dqkv, rope, (int64_t)B * T_, T_, np, ng, hd, 1))
		return -1;
	if (!dbias)
		return 0;
	/* the scratch is free again once the kernels above are done (stream order) */
	return mt_bias_grad(dt, dbias, dqkv, (int64_t)B * T_, (int64_t)(np + 2 * ng) * hd, scratch);
}
