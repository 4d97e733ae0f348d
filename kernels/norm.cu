// norm.cu: LayerNorm/RMSNorm forward and backward, and the row sums of the weight,
// bias and linear-bias gradients (see norm.h).
//
// Forward and the input gradient: one warp per row, fp32 sums. Rows of up to 32 lanes x
// NV_MAX 16-byte vectors are held in registers: the forward reads x once, and the
// backward is one pass that writes dx and keeps the column sums (weight, bias, dx) per
// warp in shared memory, a partial per block of rows. Wider rows, and the linear bias
// gradients: column sums in a pass of their own: blocks of 32 columns (32 vectors of
// columns) x ROW_CHUNKS row ranges each write a partial sum (8 row-lanes summed in
// order). Then one pass adds the partials in a fixed order. Every partition depends on
// the shapes and the device alone (the one-pass backward takes as many blocks as the
// device holds at once), so the sums are the same bits run to run.
#include "norm.h"

#include "common.cuh"

#define ROW_CHUNKS 256
// rows held in registers (the forward and the one-pass backward): up to NV_MAX vectors a
// lane, h <= 2048 in bf16/fp16, 1024 in fp32 (a Llama-style 2,048-wide row: the
// two-pass forms read x and dout a second time, 4.5 rows of traffic for the backward's
// input gradient and 2 more for its column sums, against 4 in one pass); the backward's
// blocks take NB_ROWS rows at least and are NB_MAX at most
#ifndef NV_MAX
#define NV_MAX 8
#endif
#define NB_ROWS 32
#ifndef NB_MAX
#define NB_MAX 1024
#endif

template <typename T>
__global__ void norm_fwd_k(T *out, float *stats, const T *x, const T *w, const T *b, int64_t N, int h, int rms,
			   float eps)
{
	int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
	int lane = threadIdx.x % 32;
	const T *xr = x + row * h;
	float mean = 0, var = 0, rstd;

	if (row >= N)
		return;
	if (!rms) {
		for (int i = lane; i < h; i += 32)
			mean += to_f(xr[i]);
		mean = warp_sum(mean) / (float)h;
	}
	for (int i = lane; i < h; i += 32) {
		float d = to_f(xr[i]) - mean;
		var += d * d;
	}
	var = warp_sum(var) / (float)h;
	rstd = rsqrtf(var + eps);
	if (lane == 0) {
		stats[2 * row] = mean;
		stats[2 * row + 1] = rstd;
	}
	for (int i = lane; i < h; i += 32) {
		float y = (to_f(xr[i]) - mean) * rstd * to_f(w[i]);
		if (b)
			y += to_f(b[i]);
		out[row * h + i] = from_f<T>(y);
	}
}

template <typename T>
__global__ void norm_bwd_dx_k(T *dx, int accumulate, const T *dout, const T *x, const float *stats, const T *w,
			      int64_t N, int h, int rms)
{
	int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
	int lane = threadIdx.x % 32;
	const T *xr = x + row * h, *dr = dout + row * h;
	float mean, rstd, sdy = 0, sdyx = 0;

	if (row >= N)
		return;
	mean = stats[2 * row];
	rstd = stats[2 * row + 1];
	for (int i = lane; i < h; i += 32) {
		float xhat = (to_f(xr[i]) - mean) * rstd, dy = to_f(dr[i]) * to_f(w[i]);
		sdy += dy;
		sdyx += dy * xhat;
	}
	sdy = warp_sum(sdy) / (float)h;
	sdyx = warp_sum(sdyx) / (float)h;
	for (int i = lane; i < h; i += 32) {
		float xhat = (to_f(xr[i]) - mean) * rstd, dy = to_f(dr[i]) * to_f(w[i]);
		float g = rstd * (dy - (rms ? 0.0f : sdy) - xhat * sdyx);
		if (accumulate)
			g += to_f(dx[row * h + i]);
		dx[row * h + i] = from_f<T>(g);
	}
}

// partial column sums: p1[chunk][h] of dout * xhat (x non-NULL), p2[chunk][h] of dout
template <typename T>
__global__ void colsum_part_k(float *p1, float *p2, const T *dout, const T *x, const float *stats, int64_t N, int h)
{
	__shared__ float s1[8][33], s2[8][33];
	int c = blockIdx.x * 32 + threadIdx.x, ty = threadIdx.y;
	int64_t per = (N + gridDim.y - 1) / gridDim.y, r0 = (int64_t)blockIdx.y * per, r1 = r0 + per < N ? r0 + per : N;
	float a = 0, bsum = 0;

	if (c < h)
		for (int64_t r = r0 + ty; r < r1; r += 8) {
			float d = to_f(dout[r * h + c]);
			if (x)
				a += d * (to_f(x[r * h + c]) - stats[2 * r]) * stats[2 * r + 1];
			bsum += d;
		}
	s1[ty][threadIdx.x] = a;
	s2[ty][threadIdx.x] = bsum;
	__syncthreads();
	if (ty == 0 && c < h) {
		float t1 = 0, t2 = 0;
		for (int k = 0; k < 8; k++) {
			t1 += s1[k][threadIdx.x];
			t2 += s2[k][threadIdx.x];
		}
		if (x)
			p1[(int64_t)blockIdx.y * h + c] = t1;
		p2[(int64_t)blockIdx.y * h + c] = t2;
	}
}

// d[c] += sum over k < n of p[k][c], for up to three (d, p) pairs (blockIdx.y picks one; a
// NULL d is skipped): a block takes 32 columns, its 32 row-lanes every 32nd partial each,
// then the lanes' sums in order
#define FINAL_LANES 32
__global__ void __launch_bounds__(32 * FINAL_LANES) colsum_final_k(float *d1, float *d2, float *d3, const float *p1,
								   const float *p2, const float *p3, int n, int h)
{
	__shared__ float sh[FINAL_LANES][33];
	int c = blockIdx.x * 32 + threadIdx.x, ty = threadIdx.y;
	float *d = blockIdx.y == 0 ? d1 : blockIdx.y == 1 ? d2 : d3;
	const float *p = blockIdx.y == 0 ? p1 : blockIdx.y == 1 ? p2 : p3;
	float t = 0;

	if (!d)
		return;
	if (c < h) {
#pragma unroll 4
		for (int k = ty; k < n; k += FINAL_LANES)
			t += p[(int64_t)k * h + c];
	}
	sh[ty][threadIdx.x] = t;
	__syncthreads();
	if (ty == 0 && c < h) {
		for (int q = 1; q < FINAL_LANES; q++)
			t += sh[q][threadIdx.x];
		d[c] += t;
	}
}

static int colsum_final(float *d1, float *d2, float *d3, const float *p1, const float *p2, const float *p3, int n,
			int64_t h)
{
	colsum_final_k<<<dim3((unsigned)((h + 31) / 32), d3 ? 3 : 2), dim3(32, FINAL_LANES), 0, MT_STREAM>>>(
		d1, d2, d3, p1, p2, p3, n, (int)h);
	MT_LAUNCH_CHECK("colsum");
	return 0;
}

// ---- vectorized forms: 16-byte loads, rows whose length is a multiple of the vector ----
// (one warp per row; the row's second and third passes come from L1)

template <typename T>
__global__ void norm_fwd_v(T *out, float *stats, const T *x, const T *w, const T *b, int64_t N, int h, int rms,
			   float eps)
{
	using V = vec16<T>;
	int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
	int lane = threadIdx.x % 32;
	const T *xr = x + row * h;
	float mean = 0, var = 0, rstd, xv[V::N], wv[V::N], bv[V::N];

	if (row >= N)
		return;
	if (!rms) {
		for (int i = lane * V::N; i < h; i += 32 * V::N) {
			V::load(xv, xr + i);
			for (int k = 0; k < V::N; k++)
				mean += xv[k];
		}
		mean = warp_sum(mean) / (float)h;
	}
	for (int i = lane * V::N; i < h; i += 32 * V::N) {
		V::load(xv, xr + i);
		for (int k = 0; k < V::N; k++)
			var += (xv[k] - mean) * (xv[k] - mean);
	}
	var = warp_sum(var) / (float)h;
	rstd = rsqrtf(var + eps);
	if (lane == 0) {
		stats[2 * row] = mean;
		stats[2 * row + 1] = rstd;
	}
	for (int i = lane * V::N; i < h; i += 32 * V::N) {
		V::load(xv, xr + i);
		V::load(wv, w + i);
		if (b)
			V::load(bv, b + i);
		for (int k = 0; k < V::N; k++)
			xv[k] = (xv[k] - mean) * rstd * wv[k] + (b ? bv[k] : 0.0f);
		V::store(out + row * h + i, xv);
	}
}

template <typename T>
__global__ void norm_bwd_dx_v(T *dx, int accumulate, const T *dout, const T *x, const float *stats, const T *w,
			      int64_t N, int h, int rms)
{
	using V = vec16<T>;
	int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
	int lane = threadIdx.x % 32;
	const T *xr = x + row * h, *dr = dout + row * h;
	float mean, rstd, sdy = 0, sdyx = 0, xv[V::N], dv[V::N], wv[V::N], ov[V::N];

	if (row >= N)
		return;
	mean = stats[2 * row];
	rstd = stats[2 * row + 1];
	for (int i = lane * V::N; i < h; i += 32 * V::N) {
		V::load(xv, xr + i);
		V::load(dv, dr + i);
		V::load(wv, w + i);
		for (int k = 0; k < V::N; k++) {
			float xhat = (xv[k] - mean) * rstd, dy = dv[k] * wv[k];
			sdy += dy;
			sdyx += dy * xhat;
		}
	}
	sdy = warp_sum(sdy) / (float)h;
	sdyx = warp_sum(sdyx) / (float)h;
	for (int i = lane * V::N; i < h; i += 32 * V::N) {
		V::load(xv, xr + i);
		V::load(dv, dr + i);
		V::load(wv, w + i);
		if (accumulate)
			V::load(ov, dx + row * h + i);
		for (int k = 0; k < V::N; k++) {
			float xhat = (xv[k] - mean) * rstd, dy = dv[k] * wv[k];
			float g = rstd * (dy - (rms ? 0.0f : sdy) - xhat * sdyx);
			ov[k] = accumulate ? ov[k] + g : g;
		}
		V::store(dx + row * h + i, ov);
	}
}

// partial column sums, vectorized: a block covers 32 * V::N columns x one row range of
// per rows, each of its 8 warps every 8th row, four rows' loads in flight at a time;
// X: with the dout * xhat sums (p1) beside those of dout (p2)
template <typename T, bool X>
__global__ void __launch_bounds__(256) colsum_part_v(float *p1, float *p2, const T *dout, const T *x,
						     const float *stats, int64_t N, int h, int64_t per)
{
	using V = vec16<T>;
	constexpr int VN = V::N, U = 4;
	__shared__ float sh[8][32 * VN];
	int c0 = (blockIdx.x * 32 + threadIdx.x) * VN, ty = threadIdx.y;
	int64_t r0 = (int64_t)blockIdx.y * per, r1 = r0 + per < N ? r0 + per : N;
	float a[VN], bs[VN], f[VN], xf[VN];

	for (int k = 0; k < VN; k++)
		a[k] = bs[k] = 0;
	if (c0 < h) {
		int64_t r = r0 + ty;
		for (; r + 8 * (U - 1) < r1; r += 8 * U) {
			int4 dv[U], xv[U];
			float mean[U], rstd[U];
#pragma unroll
			for (int u = 0; u < U; u++) {
				dv[u] = *(const int4 *)(dout + (r + 8 * u) * h + c0);
				if (X) {
					xv[u] = *(const int4 *)(x + (r + 8 * u) * h + c0);
					mean[u] = stats[2 * (r + 8 * u)];
					rstd[u] = stats[2 * (r + 8 * u) + 1];
				}
			}
#pragma unroll
			for (int u = 0; u < U; u++) {
				V::unpack(f, dv[u]);
				if (X) {
					V::unpack(xf, xv[u]);
					for (int k = 0; k < VN; k++)
						a[k] += f[k] * (xf[k] - mean[u]) * rstd[u];
				}
				for (int k = 0; k < VN; k++)
					bs[k] += f[k];
			}
		}
		for (; r < r1; r += 8) {
			V::load(f, dout + r * h + c0);
			if (X) {
				float mean = stats[2 * r], rstd = stats[2 * r + 1];
				V::load(xf, x + r * h + c0);
				for (int k = 0; k < VN; k++)
					a[k] += f[k] * (xf[k] - mean) * rstd;
			}
			for (int k = 0; k < VN; k++)
				bs[k] += f[k];
		}
	}
	// the 8 row-lanes' sums in order, one array at a time
	for (int q = X ? 0 : 1; q < 2; q++) {
		float *src = q ? bs : a, *dst = q ? p2 : p1;
		if (q == 1)
			__syncthreads();
		for (int k = 0; k < VN; k++)
			sh[ty][threadIdx.x * VN + k] = src[k];
		__syncthreads();
		// 256 threads, 32 * VN columns: each thread VN / 8 columns (or one, fp32: 128 columns)
		for (int j = ty * 32 + threadIdx.x; j < 32 * VN; j += 256) {
			float t = 0;
			for (int w = 0; w < 8; w++)
				t += sh[w][j];
			if (blockIdx.x * 32 * VN + j < h)
				dst[(int64_t)blockIdx.y * h + blockIdx.x * 32 * VN + j] = t;
		}
	}
}

// ---- rows in registers: a lane holds NV vectors of the row (h <= 32 * NV * V::N) ----

// the forward: the row read once (the vectorized form above reads it three times, twice
// from L1); the same sums in the same order
template <typename T, int NV>
__global__ void __launch_bounds__(256) norm_fwd_r(T *out, float *stats, const T *x, const T *w, const T *b, int64_t N,
						  int h, int rms, float eps)
{
	using V = vec16<T>;
	constexpr int VN = V::N;
	int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
	int lane = threadIdx.x % 32;
	float mean = 0, var = 0, rstd, f[VN], wf[VN], bf[VN];
	int4 xv[NV];

	if (row >= N)
		return;
#pragma unroll
	for (int j = 0; j < NV; j++)
		if ((lane + 32 * j) * VN < h)
			xv[j] = *(const int4 *)(x + row * h + (lane + 32 * j) * VN);
	if (!rms) {
#pragma unroll
		for (int j = 0; j < NV; j++)
			if ((lane + 32 * j) * VN < h) {
				V::unpack(f, xv[j]);
				for (int k = 0; k < VN; k++)
					mean += f[k];
			}
		mean = warp_sum(mean) / (float)h;
	}
#pragma unroll
	for (int j = 0; j < NV; j++)
		if ((lane + 32 * j) * VN < h) {
			V::unpack(f, xv[j]);
			for (int k = 0; k < VN; k++)
				var += (f[k] - mean) * (f[k] - mean);
		}
	var = warp_sum(var) / (float)h;
	rstd = rsqrtf(var + eps);
	if (lane == 0) {
		stats[2 * row] = mean;
		stats[2 * row + 1] = rstd;
	}
#pragma unroll
	for (int j = 0; j < NV; j++) {
		int i = (lane + 32 * j) * VN;
		if (i < h) {
			V::unpack(f, xv[j]);
			V::load(wf, w + i);
			if (b)
				V::load(bf, b + i);
			for (int k = 0; k < VN; k++)
				f[k] = (f[k] - mean) * rstd * wf[k] + (b ? bf[k] : 0.0f);
			V::store(out + row * h + i, f);
		}
	}
}

// the one-pass backward: a block takes per rows (its 8 warps every 8th), each row's x,
// dout (and dx) read once into registers and the input gradient written; the column sums
// of dout * xhat, of dout (DB) and of the new dx as stored (DS) go to each warp's own
// region of shared memory (NA sums x W = 32 * NV * V::N floats: each lane its own
// columns, so a warp's rows add in order and no two warps share a word), then the 8
// warps' regions are added in order to part[sum][block][h]; colsum_final adds the
// blocks' partials in order. Registers hold only the row: a lane's sums in registers as
// well would spill at GPT-2's width (3 x 24 floats beside 36 registers of row).
// acc[p * 32 * NV + lane + 32 * j] += v[4 p .. 4 p + 3]: a lane's vector j of sums, as
// float4s (a warp's 32 lanes on 512 contiguous bytes)
template <int NV, int VN> __device__ __forceinline__ void sm_add(float4 *acc, int lane, int j, const float *v)
{
#pragma unroll
	for (int p = 0; p < VN / 4; p++) {
		float4 a = acc[p * 32 * NV + lane + 32 * j];
		a.x += v[4 * p], a.y += v[4 * p + 1], a.z += v[4 * p + 2], a.w += v[4 * p + 3];
		acc[p * 32 * NV + lane + 32 * j] = a;
	}
}

// Rows of more than 4 vectors a lane load dx (accumulate) where it is added, not with x and
// dout, so that the row fits the registers of two blocks an SM.
template <typename T, int NV, bool DB, bool DS>
__global__ void __launch_bounds__(256, NV <= 3 ? 3 : 2) norm_bwd_r(T *dx, int accumulate, float *part, const T *dout, const T *x,
						  const float *stats, const T *w, int64_t N, int h, int rms, int64_t per)
{
	using V = vec16<T>;
	constexpr int VN = V::N, W = 32 * NV * VN, NA = 1 + DB + DS;
	constexpr bool EARLY = NV <= 4;
	extern __shared__ float4 sm4[];
	float *sm = (float *)sm4;
	int wp = threadIdx.x / 32, lane = threadIdx.x % 32;
	int64_t r0 = (int64_t)blockIdx.x * per, r1 = r0 + per < N ? r0 + per : N, nb = gridDim.x;
	float4 *mine = sm4 + wp * NA * (W / 4);
	float xf[VN], df[VN], wf[VN], of[VN], cw[VN], cb[VN];

	for (int q = lane; q < NA * W / 4; q += 32)
		mine[q] = make_float4(0, 0, 0, 0);
	__syncwarp();
	for (int64_t r = r0 + wp; r < r1; r += 8) {
		float mean = stats[2 * r], rstd = stats[2 * r + 1], sdy = 0, sdyx = 0;
		int4 xv[NV], dv[NV], ov[NV]; // ov unused (no registers) unless EARLY
#pragma unroll
		for (int j = 0; j < NV; j++) {
			int i = (lane + 32 * j) * VN;
			if (i < h) {
				xv[j] = *(const int4 *)(x + r * h + i);
				dv[j] = *(const int4 *)(dout + r * h + i);
				if (EARLY && accumulate)
					ov[j] = *(const int4 *)(dx + r * h + i);
			}
		}
#pragma unroll
		for (int j = 0; j < NV; j++) {
			int i = (lane + 32 * j) * VN;
			if (i < h) {
				V::unpack(xf, xv[j]);
				V::unpack(df, dv[j]);
				V::load(wf, w + i);
				for (int k = 0; k < VN; k++) {
					float xhat = (xf[k] - mean) * rstd, dy = df[k] * wf[k];
					sdy += dy;
					sdyx += dy * xhat;
				}
			}
		}
		sdy = warp_sum(sdy) / (float)h;
		sdyx = warp_sum(sdyx) / (float)h;
#pragma unroll
		for (int j = 0; j < NV; j++) {
			int i = (lane + 32 * j) * VN;
			if (i < h) {
				V::unpack(xf, xv[j]);
				V::unpack(df, dv[j]);
				V::load(wf, w + i);
				if (accumulate)
					V::unpack(of, EARLY ? ov[j] : *(const int4 *)(dx + r * h + i));
				for (int k = 0; k < VN; k++) {
					float xhat = (xf[k] - mean) * rstd, dy = df[k] * wf[k];
					float g = rstd * (dy - (rms ? 0.0f : sdy) - xhat * sdyx);
					of[k] = accumulate ? of[k] + g : g;
					cw[k] = df[k] * xhat;
				}
				int4 o4 = V::pack(of);
				*(int4 *)(dx + r * h + i) = o4;
				sm_add<NV, VN>(mine, lane, j, cw);
				if (DB)
					sm_add<NV, VN>(mine + W / 4, lane, j, df);
				if (DS) {
					V::unpack(cb, o4);
					sm_add<NV, VN>(mine + (NA - 1) * (W / 4), lane, j, cb);
				}
			}
		}
	}
	__syncthreads();
	for (int e = threadIdx.x; e < NA * W; e += 256) {
		int q = e / W, o = e % W, v = o / 4, c = (v % (32 * NV)) * VN + (v / (32 * NV)) * 4 + o % 4;
		float t = 0;
		for (int k = 0; k < 8; k++)
			t += sm[(k * NA + q) * W + o];
		if (c < h)
			part[(q * nb + blockIdx.x) * (int64_t)h + c] = t;
	}
}

// whether rows of h elements of T can take 16-byte loads (base pointers are 16-byte aligned)
template <typename T> static bool vec_ok(int64_t h, const void *p0, const void *p1, const void *p2, const void *p3)
{
	const void *ps[4] = { p0, p1, p2, p3 };
	if (h % (16 / sizeof(T)))
		return false;
	for (int i = 0; i < 4; i++)
		if (ps[i] && ((uintptr_t)ps[i] % 16))
			return false;
	return true;
}

extern "C" int64_t mt_norm_scratch_floats(int64_t h, int64_t o)
{
	int64_t a = (int64_t)ROW_CHUNKS * 2 * (h > o ? h : o), b = (int64_t)NB_MAX * 3 * h;
	return a > b ? a : b;
}

// d1 += sum over rows of dout * xhat (x non-NULL), d2 += sum over rows of dout (either
// may be NULL): ROW_CHUNKS partial rows per sum in scratch, then the final pass
template <typename T>
static int colsum(float *d1, float *d2, const void *dout, const void *x, const float *stats, int64_t N, int64_t h,
		  float *scratch)
{
	int chunks = N < ROW_CHUNKS ? (int)N : ROW_CHUNKS;
	float *p1 = scratch, *p2 = scratch + (int64_t)chunks * h;

	if (!x)
		d1 = NULL;
	if (vec_ok<T>(h, dout, x, NULL, NULL)) {
		constexpr int VN = 16 / sizeof(T);
		dim3 grid((unsigned)((h + 32 * VN - 1) / (32 * VN)), (unsigned)chunks);
		int64_t per = (N + chunks - 1) / chunks;
		if (x)
			colsum_part_v<T, true><<<grid, dim3(32, 8), 0, MT_STREAM>>>(p1, p2, (const T *)dout, (const T *)x, stats,
										  N, (int)h, per);
		else
			colsum_part_v<T, false><<<grid, dim3(32, 8), 0, MT_STREAM>>>(p1, p2, (const T *)dout, NULL, NULL, N,
										   (int)h, per);
		MT_LAUNCH_CHECK("colsum");
	} else {
		colsum_part_k<T><<<dim3((unsigned)((h + 31) / 32), (unsigned)chunks), dim3(32, 8), 0, MT_STREAM>>>(
			p1, p2, (const T *)dout, (const T *)x, stats, N, (int)h);
		MT_LAUNCH_CHECK("colsum");
	}
	return colsum_final(d1, d2, NULL, p1, p2, NULL, chunks, h);
}

// the vectors a lane holds for rows of h (0: more than NV_MAX, the rows are not held)
template <typename T> static int lane_vectors(int64_t h)
{
	int64_t nv = (h + 32 * (16 / sizeof(T)) - 1) / (32 * (16 / sizeof(T)));
	return nv <= NV_MAX ? (int)nv : 0;
}

template <typename T, int NV>
static int norm_fwd_regs(void *out, float *stats, const void *x, const void *w, const void *b, int64_t N, int64_t h,
			 int rms, float eps)
{
	norm_fwd_r<T, NV><<<(unsigned)((N + 7) / 8), 256, 0, MT_STREAM>>>((T *)out, stats, (const T *)x, (const T *)w,
									  (const T *)b, N, (int)h, rms, eps);
	MT_LAUNCH_CHECK("norm_fwd");
	return 0;
}

template <typename T>
static int norm_fwd(void *out, float *stats, const void *x, const void *w, const void *b, int64_t N, int64_t h,
		    int rms, float eps)
{
	if (vec_ok<T>(h, out, x, w, b)) {
		switch (lane_vectors<T>(h)) {
		case 1: return norm_fwd_regs<T, 1>(out, stats, x, w, b, N, h, rms, eps);
		case 2: return norm_fwd_regs<T, 2>(out, stats, x, w, b, N, h, rms, eps);
		case 3: return norm_fwd_regs<T, 3>(out, stats, x, w, b, N, h, rms, eps);
		case 4: return norm_fwd_regs<T, 4>(out, stats, x, w, b, N, h, rms, eps);
		case 5:
		case 6: return norm_fwd_regs<T, 6>(out, stats, x, w, b, N, h, rms, eps);
		case 7:
		case 8: return norm_fwd_regs<T, 8>(out, stats, x, w, b, N, h, rms, eps);
		}
		norm_fwd_v<T><<<(unsigned)((N + 7) / 8), 256, 0, MT_STREAM>>>((T *)out, stats, (const T *)x, (const T *)w, (const T *)b,
								  N, (int)h, rms, eps);
		MT_LAUNCH_CHECK("norm_fwd");
		return 0;
	}
	norm_fwd_k<T><<<(unsigned)((N + 7) / 8), 256, 0, MT_STREAM>>>((T *)out, stats, (const T *)x, (const T *)w, (const T *)b, N,
							  (int)h, rms, eps);
	MT_LAUNCH_CHECK("norm_fwd");
	return 0;
}

// the one-pass backward: blocks of per rows (at least NB_ROWS, at most NB_MAX blocks),
// the partial sums in scratch, then colsum_final
template <typename T, int NV, bool DB, bool DS>
static int norm_bwd_regs(void *dx, int accumulate, float *dw, float *db, float *ds, const void *dout, const void *x,
			 const float *stats, const void *w, int64_t N, int64_t h, int rms, float *scratch)
{
	constexpr int NA = 1 + DB + DS;
	constexpr size_t smem = (size_t)8 * NA * 32 * NV * (16 / sizeof(T)) * sizeof(float);
	int64_t per, nb, most = NB_MAX;

	if (smem > 48 * 1024) // (a device's setting: asked for on every call, whichever device is current)
		MT_CUDA_CHECK(cudaFuncSetAttribute(norm_bwd_r<T, NV, DB, DS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
						   (int)smem));
	// as many blocks as the device holds at once, when the rows allow: one wave, no tail
	// (GPT-2's norms at 65,536 rows: 1,024 blocks took 2.6 waves, 130 us against 122)
	static int occ = -1; // (the device's, read once)
	if (occ < 0)
		MT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, norm_bwd_r<T, NV, DB, DS>, 256, smem));
	if (occ > 0 && (int64_t)occ * sm_count() < NB_MAX)
		most = (int64_t)occ * sm_count();
	per = (N + most - 1) / most;
	per = per > NB_ROWS ? per : NB_ROWS;
	nb = (N + per - 1) / per;
	norm_bwd_r<T, NV, DB, DS><<<(unsigned)nb, 256, smem, MT_STREAM>>>((T *)dx, accumulate, scratch, (const T *)dout,
									    (const T *)x, stats, (const T *)w, N, (int)h, rms,
									    per);
	MT_LAUNCH_CHECK("norm_bwd");
	return colsum_final(dw, DB ? db : NULL, DS ? ds : NULL, scratch, scratch + nb * h,
			    scratch + (DB ? 2 : 1) * nb * h, (int)nb, h);
}

template <typename T, int NV>
static int norm_bwd_nv(void *dx, int accumulate, float *dw, float *db, float *ds, const void *dout, const void *x,
		       const float *stats, const void *w, int64_t N, int64_t h, int rms, float *scratch)
{
	if (db && ds)
		return norm_bwd_regs<T, NV, true, true>(dx, accumulate, dw, db, ds, dout, x, stats, w, N, h, rms, scratch);
	if (db)
		return norm_bwd_regs<T, NV, true, false>(dx, accumulate, dw, db, ds, dout, x, stats, w, N, h, rms, scratch);
	if (ds)
		return norm_bwd_regs<T, NV, false, true>(dx, accumulate, dw, db, ds, dout, x, stats, w, N, h, rms, scratch);
	return norm_bwd_regs<T, NV, false, false>(dx, accumulate, dw, db, ds, dout, x, stats, w, N, h, rms, scratch);
}

template <typename T>
static int norm_bwd(void *dx, int accumulate, float *dw, float *db, float *ds, const void *dout, const void *x,
		    const float *stats, const void *w, int64_t N, int64_t h, int rms, float *scratch)
{
	if (vec_ok<T>(h, dx, dout, x, w)) {
		switch (lane_vectors<T>(h)) {
		case 1: return norm_bwd_nv<T, 1>(dx, accumulate, dw, db, ds, dout, x, stats, w, N, h, rms, scratch);
		case 2: return norm_bwd_nv<T, 2>(dx, accumulate, dw, db, ds, dout, x, stats, w, N, h, rms, scratch);
		case 3: return norm_bwd_nv<T, 3>(dx, accumulate, dw, db, ds, dout, x, stats, w, N, h, rms, scratch);
		case 4: return norm_bwd_nv<T, 4>(dx, accumulate, dw, db, ds, dout, x, stats, w, N, h, rms, scratch);
		case 5:
		case 6: return norm_bwd_nv<T, 6>(dx, accumulate, dw, db, ds, dout, x, stats, w, N, h, rms, scratch);
		case 7:
		case 8: return norm_bwd_nv<T, 8>(dx, accumulate, dw, db, ds, dout, x, stats, w, N, h, rms, scratch);
		}
		norm_bwd_dx_v<T><<<(unsigned)((N + 7) / 8), 256, 0, MT_STREAM>>>((T *)dx, accumulate, (const T *)dout, (const T *)x,
								     stats, (const T *)w, N, (int)h, rms);
		MT_LAUNCH_CHECK("norm_bwd");
	} else {
		norm_bwd_dx_k<T><<<(unsigned)((N + 7) / 8), 256, 0, MT_STREAM>>>((T *)dx, accumulate, (const T *)dout, (const T *)x,
								     stats, (const T *)w, N, (int)h, rms);
		MT_LAUNCH_CHECK("norm_bwd");
	}
	if (colsum<T>(dw, db, dout, x, stats, N, h, scratch))
		return -1;
	return ds ? colsum<T>(NULL, ds, dx, NULL, NULL, N, h, scratch) : 0;
}

extern "C" int mt_norm_fwd(enum mt_dtype dt, void *out, float *stats, const void *x, const void *w, const void *b,
			   int64_t N, int64_t h, int rms, float eps)
{
	MT_REQUIRE(N > 0 && h > 0 && h < (1 << 30), "norm: bad shape %lld x %lld", (long long)N, (long long)h);
	return MT_DISPATCH(dt, norm_fwd, out, stats, x, w, b, N, h, rms, eps);
}

extern "C" int mt_norm_bwd(enum mt_dtype dt, void *dx, int accumulate, float *dw, float *db, float *dsum,
			   const void *dout, const void *x, const float *stats, const void *w, int64_t N, int64_t h,
			   int rms, float *scratch)
{
	MT_REQUIRE(N > 0 && h > 0 && h < (1 << 30), "norm: bad shape %lld x %lld", (long long)N, (long long)h);
	return MT_DISPATCH(dt, norm_bwd, dx, accumulate, dw, db, dsum, dout, x, stats, w, N, h, rms, scratch);
}

extern "C" int mt_bias_grad(enum mt_dtype dt, float *db, const void *dout, int64_t N, int64_t O, float *scratch)
{
	MT_REQUIRE(N > 0 && O > 0 && O < (1 << 30), "bias grad: bad shape %lld x %lld", (long long)N, (long long)O);
	return MT_DISPATCH(dt, colsum, NULL, db, dout, NULL, NULL, N, O, scratch);
}
