// norm.cu: LayerNorm/RMSNorm forward and backward, and the row sums of the weight,
// bias and linear-bias gradients (see norm.h).
//
// Forward and the input gradient: one warp per row, fp32 sums. Parameter gradients:
// column sums in two passes: blocks of 32 columns x ROW_CHUNKS row ranges each write
// a partial sum (8 row-lanes summed in order), then one pass adds the partials in order.
#include "norm.h"

#include "common.cuh"

#define ROW_CHUNKS 256

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

// partial column sums: part[chunk][2][h]: of dout * xhat (x non-NULL) or of dout, and of dout
template <typename T>
__global__ void colsum_part_k(float *part, const T *dout, const T *x, const float *stats, int64_t N, int h)
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
		part[((int64_t)blockIdx.y * 2) * h + c] = t1;
		part[((int64_t)blockIdx.y * 2 + 1) * h + c] = t2;
	}
}

__global__ void colsum_final_k(float *d1, float *d2, const float *part, int nchunk, int h)
{
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	float t1 = 0, t2 = 0;

	if (c >= h)
		return;
	for (int k = 0; k < nchunk; k++) {
		t1 += part[(int64_t)(2 * k) * h + c];
		t2 += part[(int64_t)(2 * k + 1) * h + c];
	}
	if (d1)
		d1[c] += t1;
	if (d2)
		d2[c] += t2;
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

// partial column sums, vectorized: a block covers 32 * V::N columns x one row range
template <typename T>
__global__ void colsum_part_v(float *part, const T *dout, const T *x, const float *stats, int64_t N, int h)
{
	using V = vec16<T>;
	__shared__ float s1[8][32 * V::N], s2[8][32 * V::N];
	int c0 = (blockIdx.x * 32 + threadIdx.x) * V::N, ty = threadIdx.y;
	int64_t per = (N + gridDim.y - 1) / gridDim.y, r0 = (int64_t)blockIdx.y * per, r1 = r0 + per < N ? r0 + per : N;
	float a[V::N], bs[V::N], dv[V::N], xv[V::N];

	for (int k = 0; k < V::N; k++)
		a[k] = bs[k] = 0;
	if (c0 < h)
		for (int64_t r = r0 + ty; r < r1; r += 8) {
			V::load(dv, dout + r * h + c0);
			if (x) {
				float mean = stats[2 * r], rstd = stats[2 * r + 1];
				V::load(xv, x + r * h + c0);
				for (int k = 0; k < V::N; k++)
					a[k] += dv[k] * (xv[k] - mean) * rstd;
			}
			for (int k = 0; k < V::N; k++)
				bs[k] += dv[k];
		}
	for (int k = 0; k < V::N; k++) {
		s1[ty][threadIdx.x * V::N + k] = a[k];
		s2[ty][threadIdx.x * V::N + k] = bs[k];
	}
	__syncthreads();
	if (ty == 0 && c0 < h)
		for (int k = 0; k < V::N; k++) {
			float t1 = 0, t2 = 0;
			for (int q = 0; q < 8; q++) {
				t1 += s1[q][threadIdx.x * V::N + k];
				t2 += s2[q][threadIdx.x * V::N + k];
			}
			part[((int64_t)blockIdx.y * 2) * h + c0 + k] = t1;
			part[((int64_t)blockIdx.y * 2 + 1) * h + c0 + k] = t2;
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

extern "C" int64_t mt_norm_scratch_floats(int64_t h)
{
	return (int64_t)ROW_CHUNKS * 2 * h;
}

template <typename T>
static int colsum(float *d1, float *d2, const void *dout, const void *x, const float *stats, int64_t N, int64_t h,
		  float *scratch)
{
	int chunks = N < ROW_CHUNKS ? (int)N : ROW_CHUNKS;

	if (vec_ok<T>(h, dout, x, NULL, NULL)) {
		constexpr int VN = 16 / sizeof(T);
		colsum_part_v<T><<<dim3((unsigned)((h + 32 * VN - 1) / (32 * VN)), (unsigned)chunks), dim3(32, 8), 0, MT_STREAM>>>(
			scratch, (const T *)dout, (const T *)x, stats, N, (int)h);
		MT_LAUNCH_CHECK("colsum");
		colsum_final_k<<<(unsigned)((h + 255) / 256), 256, 0, MT_STREAM>>>(d1, d2, scratch, chunks, (int)h);
		MT_LAUNCH_CHECK("colsum");
		return 0;
	}
	colsum_part_k<T><<<dim3((unsigned)((h + 31) / 32), (unsigned)chunks), dim3(32, 8), 0, MT_STREAM>>>(
		scratch, (const T *)dout, (const T *)x, stats, N, (int)h);
	MT_LAUNCH_CHECK("colsum");
	colsum_final_k<<<(unsigned)((h + 255) / 256), 256, 0, MT_STREAM>>>(d1, d2, scratch, chunks, (int)h);
	MT_LAUNCH_CHECK("colsum");
	return 0;
}

template <typename T>
static int norm_fwd(void *out, float *stats, const void *x, const void *w, const void *b, int64_t N, int64_t h,
		    int rms, float eps)
{
	if (vec_ok<T>(h, out, x, w, b)) {
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

template <typename T>
static int norm_bwd(void *dx, int accumulate, float *dw, float *db, const void *dout, const void *x,
		    const float *stats, const void *w, int64_t N, int64_t h, int rms, float *scratch)
{
	if (vec_ok<T>(h, dx, dout, x, w)) {
		norm_bwd_dx_v<T><<<(unsigned)((N + 7) / 8), 256, 0, MT_STREAM>>>((T *)dx, accumulate, (const T *)dout, (const T *)x,
								     stats, (const T *)w, N, (int)h, rms);
		MT_LAUNCH_CHECK("norm_bwd");
		return colsum<T>(dw, db, dout, x, stats, N, h, scratch);
	}
	norm_bwd_dx_k<T><<<(unsigned)((N + 7) / 8), 256, 0, MT_STREAM>>>((T *)dx, accumulate, (const T *)dout, (const T *)x, stats,
							     (const T *)w, N, (int)h, rms);
	MT_LAUNCH_CHECK("norm_bwd");
	return colsum<T>(dw, db, dout, x, stats, N, h, scratch);
}

extern "C" int mt_norm_fwd(enum mt_dtype dt, void *out, float *stats, const void *x, const void *w, const void *b,
			   int64_t N, int64_t h, int rms, float eps)
{
	MT_REQUIRE(N > 0 && h > 0 && h < (1 << 30), "norm: bad shape %lld x %lld", (long long)N, (long long)h);
	return MT_DISPATCH(dt, norm_fwd, out, stats, x, w, b, N, h, rms, eps);
}

extern "C" int mt_norm_bwd(enum mt_dtype dt, void *dx, int accumulate, float *dw, float *db, const void *dout,
			   const void *x, const float *stats, const void *w, int64_t N, int64_t h, int rms,
			   float *scratch)
{
	MT_REQUIRE(N > 0 && h > 0 && h < (1 << 30), "norm: bad shape %lld x %lld", (long long)N, (long long)h);
	return MT_DISPATCH(dt, norm_bwd, dx, accumulate, dw, db, dout, x, stats, w, N, h, rms, scratch);
}

extern "C" int mt_bias_grad(enum mt_dtype dt, float *db, const void *dout, int64_t N, int64_t O, float *scratch)
{
	MT_REQUIRE(N > 0 && O > 0 && O < (1 << 30), "bias grad: bad shape %lld x %lld", (long long)N, (long long)O);
	return MT_DISPATCH(dt, colsum, NULL, db, dout, NULL, NULL, N, O, scratch);
}
