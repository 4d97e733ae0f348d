// decode_linear.cu: the fused linear layers of a decode step (see decode_linear.h).
//
// A block of 8 warps works on groups of MB tiles of 16 weight rows (MB = 1; a head of
// rows for the rotary embedding, whose pairs lie hd/2 apart; the gate and up tiles of
// SwiGLU), the warps splitting each tile's inputs into 8 / MB contiguous ranges; the
// grid is no larger than what the GPU holds at once, each block taking every gridDim-th
// group. A warp streams its 16 rows 32 inputs at a time, each lane loading 16 bytes of
// two rows (row g and g + 8 of the tile, g = lane / 4, inputs 8t..8t+7 of the 32,
// t = lane % 4) with loads that bypass L1, several chunks in flight.
//
// bf16: mma.sync m16n8k16 with the weights as A and up to 32 input rows as B (n-tiles of
// 8). The k order inside an mma does not matter as long as A and B agree, so each lane
// uses its own 16 bytes of weights as its A fragments of two mmas (elements 0-3 as k
// 2t, 2t+1, 2t+8, 2t+9 of the first, 4-7 of the second) and 16 bytes of input row g at
// the same inputs as its B fragment: no shuffles, no shared-memory staging of weights.
// fp32: the same loads and plain FMAs, the four lanes of a row summed by shuffles at the
// end (no TF32: the fp32 engine stays as close to the CPU as cuBLASLt's fp32).
//
// With a norm, the block first writes its rows (or the embedding's) to shared memory,
// normalizes them there (a warp a row, two passes in fp32, rounded to the type as the
// norm kernel's output is) and reads its B fragments from there. The warps' partial sums
// meet in shared memory, are added in warp order, and the epilogue writes each output
// element once. With programmatic dependent launch the first chunks of weights, the
// first group's bias and the norm's weights (into shared memory) are loaded before
// waiting for the previous kernel. On sm_90, a bf16 layer of few tiles and long rows
// runs in clusters: CS blocks a tile, each taking 1/CS of every warp's inputs, the first
// adding the others' sums through distributed shared memory (see cluster_of).
//
// Batch-1 tokens/s (GPT-2 124M bf16, H200, 8 x 1000 greedy tokens, kernels/bench/NOTES.md):
// 2,740-2,760 before these three; 3,076-3,084 with them; 2,817-2,836 without clusters;
// 2,898-2,910 with the norm's weights read after the wait. Read through a generic pointer
// (shared or global chosen at run time) instead of the two loops below, the same norm
// weights cost 4% where they were shared and 25% where global.
#include "decode_linear.h"

#include <type_traits>

#include "common.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
#define DL_CLUSTERS 1
#endif

#define WARPS 8
#define THREADS (32 * WARPS)
#define GELU_C 0.7978845608028654f

struct dl {
	struct mt_dlin a;
	int N, IN, O, f;          // f: SwiGLU's half of O
	int MB, KS, ngroups, ldxs; // tiles a group, input ranges a tile, groups, shared row stride
	int nsm;                   // the norm's weights read ahead into shared memory (16-byte aligned)
	int CS;                    // blocks a cluster, each taking 1/CS of every warp's inputs (sm_90)
};

__device__ __forceinline__ int tile_row(const dl &d, int grp, int mt)
{
	return d.a.epi == MT_DLIN_SWIGLU ? mt * d.f + 16 * grp : (grp * d.MB + mt) * 16;
}

template <typename T> __device__ __forceinline__ float rnd(float v) { return to_f(from_f<T>(v)); }

__device__ __forceinline__ void mma_bf16(float *c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
					 unsigned b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
		     "{%0,%1,%2,%3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// U chunks of 32 inputs from chunk ch (those below c1) of rows r0 + g and r0 + g + 8:
// SZ 16-byte loads a chunk, row g's first
template <typename T, int U, int SZ>
__device__ __forceinline__ void load_w(int4 (&wf)[U][SZ], const T *W, int r0, int IN, int ch, int c1, int g, int t)
{
	const T *p0 = W + (int64_t)(r0 + g) * IN + 8 * t, *p1 = p0 + (int64_t)8 * IN;
#pragma unroll
	for (int u = 0; u < U; u++)
		if (ch + u < c1) {
#pragma unroll
			for (int j = 0; j < SZ / 2; j++) {
				wf[u][j] = __ldcs((const int4 *)(p0 + (ch + u) * 32) + j);
				wf[u][SZ / 2 + j] = __ldcs((const int4 *)(p1 + (ch + u) * 32) + j);
			}
		}
}

// y = (x - mean) * rstd * w + b over a row in shared memory, w and b (b may be NULL) where
// the caller has them: in shared memory (read ahead) or global
template <typename T>
__device__ __forceinline__ void norm_row(T *xr, int IN, int lane, float mean, float rstd, const T *w, const T *b)
{
	for (int i = lane; i < IN; i += 32) {
		float y = (to_f(xr[i]) - mean) * rstd * to_f(w[i]);
		if (b)
			y += to_f(b[i]);
		xr[i] = from_f<T>(y);
	}
}

// the input rows (or the embedding) normalized into xs [8 NT][ldxs]; rows past N zero;
// nws, nbs: the norm's weights read ahead into shared memory (d.nsm), else read here
template <typename T, int NT> __device__ void prologue(const dl &d, T *xs, const T *nws, const T *nbs)
{
	using V = vec16<T>;
	const struct mt_dlin &a = d.a;
	const int IN = d.IN, vpr = IN / V::N, lane = threadIdx.x & 31;
	const T *nw = (const T *)a.norm_w, *nb = (const T *)a.norm_b;

	for (int idx = threadIdx.x; idx < 8 * NT * vpr; idx += THREADS) {
		int n = idx / vpr, i = (idx % vpr) * V::N;
		float f[V::N];
		if (n >= d.N) {
#pragma unroll
			for (int e = 0; e < V::N; e++)
				f[e] = 0;
		} else if (a.tok) {
			V::load(f, (const T *)a.wte + (int64_t)a.tok[n] * IN + i);
			if (a.wpe) {
				float pe[V::N];
				V::load(pe, (const T *)a.wpe + (int64_t)a.pos[n] * IN + i);
#pragma unroll
				for (int e = 0; e < V::N; e++)
					f[e] += pe[e];
			}
			if (blockIdx.x == 0)
				V::store((T *)a.x_out + n * a.ldx + i, f);
		} else {
			V::load(f, (const T *)a.x + n * a.ldx + i);
		}
		V::store(xs + n * d.ldxs + i, f);
	}
	__syncthreads();
	for (int n = threadIdx.x / 32; n < d.N; n += WARPS) {
		T *xr = xs + n * d.ldxs;
		float mean = 0, var = 0, rstd;
		if (!a.rms) {
			for (int i = lane; i < IN; i += 32)
				mean += to_f(xr[i]);
			mean = warp_sum(mean) / (float)IN;
		}
		for (int i = lane; i < IN; i += 32) {
			float v = to_f(xr[i]) - mean;
			var += v * v;
		}
		var = warp_sum(var) / (float)IN;
		rstd = rsqrtf(var + a.eps);
		if (d.nsm)
			norm_row(xr, IN, lane, mean, rstd, nws, nb ? nbs : (const T *)nullptr);
		else
			norm_row(xr, IN, lane, mean, rstd, nw, nb);
	}
}

// the warps' partial sums of row rr of tile mt for input row n, in input order: with
// clusters, every block's (read through distributed shared memory) in rank order
template <int NC> __device__ __forceinline__ float tile_acc(const dl &d, const float *red, int mt, int rr, int n)
{
	float s = 0;
#ifdef DL_CLUSTERS
	if (d.CS > 1) {
		cg::cluster_group cl = cg::this_cluster();
		for (int r = 0; r < d.CS; r++) {
			const float *rd = cl.map_shared_rank(const_cast<float *>(red), r);
			for (int ks = 0; ks < d.KS; ks++)
				s += rd[((mt * d.KS + ks) * 16 + rr) * NC + n];
		}
		return s;
	}
#endif
	for (int ks = 0; ks < d.KS; ks++)
		s += red[((mt * d.KS + ks) * 16 + rr) * NC + n];
	return s;
}

// all threads of the block, or of the cluster
__device__ __forceinline__ void dl_sync(const dl &d)
{
#ifdef DL_CLUSTERS
	if (d.CS > 1) {
		cg::this_cluster().sync();
		return;
	}
#endif
	__syncthreads();
}

// the bias of row rho of the group (rho < MB * 16): read ahead into bs for the block's
// first group, else from global memory
template <typename T> __device__ __forceinline__ float bias_of(const dl &d, const float *bs, int grp, int rho)
{
	if (!d.a.bias)
		return 0.0f;
	if (grp == (int)blockIdx.x / d.CS)
		return bs[rho];
	return to_f(((const T *)d.a.bias)[tile_row(d, grp, rho / 16) + rho % 16]);
}

template <typename T, int NC> __device__ void epilogue(const dl &d, const float *red, const float *bs, int grp)
{
	const struct mt_dlin &a = d.a;
	const int R = a.epi == MT_DLIN_SWIGLU ? 16 : d.MB * 16;
	T *out = (T *)a.out;

	for (int idx = threadIdx.x; idx < R * d.N; idx += THREADS) {
		int rho = idx % R, n = idx / R, o = tile_row(d, grp, rho / 16) + rho % 16;
		float v = tile_acc<NC>(d, red, rho / 16, rho % 16, n) + bias_of<T>(d, bs, grp, rho);
		int64_t at = n * a.ldo + o;
		switch (a.epi) {
		case MT_DLIN_STORE:
			out[at] = from_f<T>(v);
			break;
		case MT_DLIN_RESID:
			out[at] = from_f<T>(to_f(out[at]) + v);
			break;
		case MT_DLIN_GELU:
			out[at] = from_f<T>(0.5f * v * (1.0f + tanhf(GELU_C * (v + 0.044715f * v * v * v))));
			break;
		case MT_DLIN_F32:
			((float *)a.out)[at] = v;
			break;
		case MT_DLIN_SWIGLU: {
			float ga = rnd<T>(v), up = rnd<T>(tile_acc<NC>(d, red, 1, rho, n) + bias_of<T>(d, bs, grp, 16 + rho));
			out[at] = from_f<T>(ga / (1.0f + expf(-ga)) * up);
			break;
		}
		default: { // MT_DLIN_QKV
			int hd = a.hd, per = a.np / a.ng, hb = o / hd, dd = o % hd, gi = hb / (per + 2), rk = hb % (per + 2);
			int p = a.pos[n];
			T y;
			v = rnd<T>(v);
			if (a.cs && rk <= per) { // a query or key head: rotate the pair (i, i + hd/2)
				int half = hd / 2, i = dd % half, lo = dd < half, rho2 = lo ? rho + half : rho - half;
				float v2 = rnd<T>(tile_acc<NC>(d, red, rho2 / 16, rho2 % 16, n) + bias_of<T>(d, bs, grp, rho2));
				float c = a.cs[((int64_t)p * half + i) * 2], s = a.cs[((int64_t)p * half + i) * 2 + 1];
				v = lo ? v * c - v2 * s : v * c + v2 * s;
			}
			y = from_f<T>(v);
			out[at] = y;
			if (rk >= per)
				((T *)(rk == per ? a.kc : a.vc))[(((int64_t)a.slot[n] * a.ng + gi) * a.max_len + p) * hd + dd] = y;
		}
		}
	}
}

// The block's first U chunks loaded before pdl_wait (loading a block's next group while
// the last one's sums meet lost 2% of batch-1 tokens/s: H200, GPT-2 124M)
template <typename T, int NT> __global__ void __launch_bounds__(THREADS) dlin_k(const dl d)
{
	using V = vec16<T>;
	constexpr bool F32 = std::is_same<T, float>::value;
	constexpr int E = 16 / sizeof(T);  // elements in 16 bytes
	constexpr int SZ = 2 * (8 / E);    // 16-byte weight loads a chunk (two rows)
	// chunks of 32 inputs a warp keeps in flight (bf16: 12, a 3072-input row's whole,
	// measured slower; at 170 registers a thread, probably because fewer blocks could wait
	// beside the kernel before)
	constexpr int U = F32 ? 2 : 4;
	constexpr int NC = 8 * NT;         // input rows of the tile
	extern __shared__ __align__(16) unsigned char sm[];
	float *red = (float *)sm; // [WARPS][16][NC]
	float *bs = red + WARPS * 16 * NC; // [MB * 16 <= 128]: the first group's bias
	T *xs = (T *)(bs + 128);           // [8 NT][ldxs], then the norm's weights [IN] and bias [IN]
	T *nws = xs + 8 * NT * d.ldxs, *nbs = nws + d.IN;
	const struct mt_dlin &a = d.a;
	const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	const int mt = w / d.KS, rank = blockIdx.x % d.CS, ks = rank * d.KS + w % d.KS, nch = d.IN / 32;
	const int c0 = ks * nch / (d.KS * d.CS), c1 = (ks + 1) * nch / (d.KS * d.CS), gstride = gridDim.x / d.CS;
	const T *W = (const T *)a.W;
	const T *X = a.norm_w ? xs : (const T *)a.x;
	const int64_t ldx = a.norm_w ? d.ldxs : a.ldx;
	int4 wf[U][SZ], nwr = make_int4(0, 0, 0, 0), nbr = nwr;
	float bpre = 0;
	int grp = blockIdx.x / d.CS;
	bool have = grp < d.ngroups;

	pdl_launch();
	// what reads nothing the kernels before write: the weights, the bias, the norm's weights
	if (have) {
		load_w<T, U, SZ>(wf, W, tile_row(d, grp, mt), d.IN, c0, c1, g, t);
		if (a.bias && threadIdx.x < d.MB * 16)
			bpre = to_f(((const T *)a.bias)[tile_row(d, grp, threadIdx.x / 16) + threadIdx.x % 16]);
	}
	if (d.nsm && threadIdx.x < d.IN / V::N) {
		nwr = ((const int4 *)a.norm_w)[threadIdx.x];
		if (a.norm_b)
			nbr = ((const int4 *)a.norm_b)[threadIdx.x];
	}
	pdl_wait();
	if (threadIdx.x < 128)
		bs[threadIdx.x] = bpre;
	if (d.nsm && threadIdx.x < d.IN / V::N) {
		((int4 *)nws)[threadIdx.x] = nwr;
		((int4 *)nbs)[threadIdx.x] = nbr;
	}
	if (a.norm_w) {
		prologue<T, NT>(d, xs, nws, nbs);
		__syncthreads();
	}
	for (; grp < d.ngroups; grp += gstride) {
		const int r0 = tile_row(d, grp, mt);
		float c[NT][4], acc[F32 ? 2 : 1][F32 ? NC : 1];

#pragma unroll
		for (int nt = 0; nt < NT; nt++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				c[nt][e] = 0;
		if constexpr (F32)
#pragma unroll
			for (int n = 0; n < NC; n++)
				acc[0][n] = acc[1][n] = 0;
		for (int ch = c0; ch < c1; ch += U) {
			if (!have)
				load_w<T, U, SZ>(wf, W, r0, d.IN, ch, c1, g, t);
			have = false;
#pragma unroll
			for (int u = 0; u < U; u++) {
				const int k = (ch + u) * 32 + 8 * t;
				if (ch + u >= c1)
					break;
				if constexpr (F32) {
					const float w0[8] = { __int_as_float(wf[u][0].x), __int_as_float(wf[u][0].y),
							      __int_as_float(wf[u][0].z), __int_as_float(wf[u][0].w),
							      __int_as_float(wf[u][1].x), __int_as_float(wf[u][1].y),
							      __int_as_float(wf[u][1].z), __int_as_float(wf[u][1].w) };
					const float w1[8] = { __int_as_float(wf[u][2].x), __int_as_float(wf[u][2].y),
							      __int_as_float(wf[u][2].z), __int_as_float(wf[u][2].w),
							      __int_as_float(wf[u][3].x), __int_as_float(wf[u][3].y),
							      __int_as_float(wf[u][3].z), __int_as_float(wf[u][3].w) };
#pragma unroll
					for (int n = 0; n < NC; n++)
						if (n < d.N) {
							float4 xa = *(const float4 *)(X + n * ldx + k), xb = *(const float4 *)(X + n * ldx + k + 4);
							acc[0][n] += w0[0] * xa.x + w0[1] * xa.y + w0[2] * xa.z + w0[3] * xa.w + w0[4] * xb.x +
								     w0[5] * xb.y + w0[6] * xb.z + w0[7] * xb.w;
							acc[1][n] += w1[0] * xa.x + w1[1] * xa.y + w1[2] * xa.z + w1[3] * xa.w + w1[4] * xb.x +
								     w1[5] * xb.y + w1[6] * xb.z + w1[7] * xb.w;
						}
				} else {
					const int4 wa = wf[u][0], wb = wf[u][1];
#pragma unroll
					for (int nt = 0; nt < NT; nt++) {
						int n = nt * 8 + g;
						int4 xb = n < d.N ? *(const int4 *)(X + n * ldx + k) : make_int4(0, 0, 0, 0);
						mma_bf16(c[nt], wa.x, wb.x, wa.y, wb.y, xb.x, xb.y);
						mma_bf16(c[nt], wa.z, wb.z, wa.w, wb.w, xb.z, xb.w);
					}
				}
			}
		}
		{
			float *rw = red + (size_t)w * 16 * NC;
			if constexpr (F32) {
#pragma unroll
				for (int n = 0; n < NC; n++) {
					float v0 = acc[0][n], v1 = acc[1][n];
					v0 += __shfl_xor_sync(0xffffffffu, v0, 1);
					v0 += __shfl_xor_sync(0xffffffffu, v0, 2);
					v1 += __shfl_xor_sync(0xffffffffu, v1, 1);
					v1 += __shfl_xor_sync(0xffffffffu, v1, 2);
					if ((n & 3) == t) {
						rw[g * NC + n] = v0;
						rw[(g + 8) * NC + n] = v1;
					}
				}
			} else {
#pragma unroll
				for (int nt = 0; nt < NT; nt++) {
					rw[g * NC + nt * 8 + 2 * t] = c[nt][0];
					rw[g * NC + nt * 8 + 2 * t + 1] = c[nt][1];
					rw[(g + 8) * NC + nt * 8 + 2 * t] = c[nt][2];
					rw[(g + 8) * NC + nt * 8 + 2 * t + 1] = c[nt][3];
				}
			}
		}
		// with clusters the first block of each writes the tile, its sums read from all,
		// which stay until it has
		dl_sync(d);
		if (rank == 0)
			epilogue<T, NC>(d, red, bs, grp);
		dl_sync(d);
	}
}

// ---- host side ----

static int max_smem(void)
{
	static int m;
	if (!m) {
		int dev = 0;
		if (cudaGetDevice(&dev) != cudaSuccess ||
		    cudaDeviceGetAttribute(&m, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
			m = 48 << 10;
	}
	return m;
}

static size_t es(enum mt_dtype dt) { return dt == MT_F32 ? 4 : 2; }

// shared memory row stride of the normalized rows: 64 bytes past a multiple of 128, so
// the eight rows of an n-tile's B loads fall on different banks
static int ldxs_of(enum mt_dtype dt, int IN)
{
	size_t b = (size_t)IN * es(dt);
	return (int)((b + (64 - b % 128 + 128) % 128) / es(dt));
}

// the warps' sums, the first group's bias, and with a norm the rows and its weights
static size_t smem_of(enum mt_dtype dt, const struct mt_dlin *a, int N, int IN)
{
	int NT = (N + 7) / 8;
	return (size_t)WARPS * 16 * 8 * NT * sizeof(float) + 128 * sizeof(float) +
	       (a->norm_w ? ((size_t)8 * NT * ldxs_of(dt, IN) + 2 * (size_t)IN) * es(dt) : 0);
}

static int aligned(const void *p) { return ((uintptr_t)p & 15) == 0; }

#define NOFIT(...) return mt_cuda_fail(__FILE__, __LINE__, __VA_ARGS__), 0

extern "C" int mt_decode_linear_fits(enum mt_dtype dt, const struct mt_dlin *a, int N, int IN, int O)
{
	size_t e = es(dt);

	if (dt != MT_F32 && dt != MT_BF16)
		NOFIT("decode_linear: fp32 or bf16 only");
	if (N < 1 || N > MT_DLIN_MAX_ROWS || IN < 32 || IN % 32 || O < 16 || O % 16)
		NOFIT("decode_linear: %d rows of %d inputs, %d outputs (1-%d rows, inputs a multiple of 32, outputs of 16)",
		      N, IN, O, MT_DLIN_MAX_ROWS);
	if (a->epi < MT_DLIN_STORE || a->epi > MT_DLIN_QKV)
		NOFIT("decode_linear: epilogue %d", a->epi);
	if (a->epi == MT_DLIN_SWIGLU && O % 32)
		NOFIT("decode_linear: SwiGLU over %d outputs (halves of a multiple of 16)", O);
	if (!aligned(a->W))
		NOFIT("decode_linear: the weights are not 16-byte aligned");
	if (a->tok) {
		if (!a->norm_w || !a->pos || !a->wte || !a->x_out || !aligned(a->wte) || !aligned(a->x_out) ||
		    (a->wpe && !aligned(a->wpe)) || ((size_t)a->ldx * e) % 16)
			NOFIT("decode_linear: the embedding needs a norm, positions and 16-byte aligned rows");
	} else if (!a->x || !aligned(a->x) || ((size_t)a->ldx * e) % 16) {
		NOFIT("decode_linear: the input rows are not 16-byte aligned");
	}
	if (a->epi == MT_DLIN_QKV) {
		if (a->ng < 1 || a->np % a->ng || a->hd < 2 || a->hd % 2 || (int64_t)(a->np + 2 * a->ng) * a->hd != O ||
		    !a->kc || !a->vc || !a->slot || !a->pos || a->max_len < 1)
			NOFIT("decode_linear: QKV shape (%d heads, %d groups, head size %d, %d outputs)", a->np, a->ng, a->hd, O);
		if (a->cs && a->hd != 16 && a->hd != 32 && a->hd != 64 && a->hd != 128)
			NOFIT("decode_linear: rotary heads of 16, 32, 64 or 128, not %d", a->hd);
	}
	if (smem_of(dt, a, N, IN) > (size_t)max_smem())
		NOFIT("decode_linear: %zu bytes of shared memory for %d rows of %d", smem_of(dt, a, N, IN), N, IN);
	return 1;
}

template <typename T, int NT> static int launch(dl d, size_t smem)
{
	static size_t smem_set, occ_smem = (size_t)-1;
	static int occ, arch;
	void (*k)(const dl) = dlin_k<T, NT>;
	int grid;

	if (!arch) {
		// clusters where the code that runs was built for sm_90 on (so on such a GPU,
		// and not JIT-compiled from older PTX)
		cudaFuncAttributes fa;
		MT_CUDA_CHECK(cudaFuncGetAttributes(&fa, k));
		arch = fa.binaryVersion;
	}
	if (arch < 90)
		d.CS = 1;

	if (smem > (48u << 10) && smem > smem_set) {
		MT_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
		smem_set = smem;
	}
	if (smem != occ_smem) {
		MT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k, THREADS, smem));
		occ_smem = smem;
	}
	grid = (occ > 0 ? occ : 1) * sm_count() / d.CS;
	if (grid > d.ngroups)
		grid = d.ngroups;
	MT_CUDA_CHECK(mt_launch_cluster(k, dim3((unsigned)(grid * d.CS)), dim3(THREADS), smem, (unsigned)d.CS, d));
	return 0;
}

// Blocks a cluster: a layer of fewer tiles than the GPU has multiprocessors (GPT-2's
// 768 outputs: 48) would stream all its weights through that many of them, each at what
// one multiprocessor's loads in flight allow; clusters of CS blocks split every tile's
// inputs so that about every multiprocessor streams, and the first block of each adds
// the others' sums through distributed shared memory (sm_90 on, bf16; at most 4, and at
// least 4 chunks of 32 inputs a warp). Only for long rows (8 chunks a warp or more
// without clusters): at GPT-2's 768 -> 768, 1 chunk a warp, the cluster's two barriers
// cost more than the loads they spread (ncu, H200: 6.6 against 5.2 us), at 3072 -> 768
// they gain (7.7 against 9.0 us). MT_DECODE_CLUSTER=n sets it (1: none), for comparing,
// through mt_decode_linear_set_cluster.
// launch() keeps 1 where the kernel's code is older than sm_90.
static int cluster_blocks; // mt_decode_linear_set_cluster; 0 (default): from the shape

extern "C" void mt_decode_linear_set_cluster(int blocks)
{
	cluster_blocks = blocks;
}

static int cluster_of(enum mt_dtype dt, int ngroups, int KS, int nch)
{
	int cs;

	if (dt != MT_BF16 || (cluster_blocks <= 0 && nch < 8 * KS))
		return 1;
	cs = cluster_blocks > 0 ? cluster_blocks : (sm_count() + ngroups - 1) / ngroups;
	if (cs > 4)
		cs = 4;
	while (cs > 1 && 4 * KS * cs > nch)
		cs--;
	return cs < 1 ? 1 : cs;
}

template <typename T> static int launch_nt(const dl &d, size_t smem)
{
	switch ((d.N + 7) / 8) {
	case 1:
		return launch<T, 1>(d, smem);
	case 2:
		return launch<T, 2>(d, smem);
	case 3:
		return launch<T, 3>(d, smem);
	default:
		return launch<T, 4>(d, smem);
	}
}

extern "C" int mt_decode_linear(enum mt_dtype dt, const struct mt_dlin *a, int N, int IN, int O)
{
	dl d;

	if (!mt_decode_linear_fits(dt, a, N, IN, O))
		return -1;
	d.a = *a;
	d.N = N;
	d.IN = IN;
	d.O = O;
	d.f = O / 2;
	d.MB = a->epi == MT_DLIN_QKV && a->cs ? a->hd / 16 : a->epi == MT_DLIN_SWIGLU ? 2 : 1;
	d.KS = WARPS / d.MB;
	d.ngroups = a->epi == MT_DLIN_SWIGLU ? d.f / 16 : O / (16 * d.MB);
	d.ldxs = ldxs_of(dt, IN);
	d.nsm = a->norm_w && aligned(a->norm_w) && (!a->norm_b || aligned(a->norm_b)) &&
		(size_t)IN * es(dt) <= (size_t)THREADS * 16;
	d.CS = cluster_of(dt, d.ngroups, d.KS, IN / 32);
	if (dt == MT_F32)
		return launch_nt<float>(d, smem_of(dt, a, N, IN));
	return launch_nt<__nv_bfloat16>(d, smem_of(dt, a, N, IN));
}
