// tpsplit.cu: the element-wise pieces around a tensor-parallel layer's collectives (see
// tpsplit.h). Memory-bound and small next to the matmuls: plain grid-stride loops, one
// block a row where a row is reduced, block sums in a fixed tree order.
#include "tpsplit.h"

#include "common.cuh"

#define THREADS 256

template <typename T>
__global__ void bias_residual_k(T *y, const T *b, const T *r, int64_t n, int h)
{
	for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x) {
		float v = to_f(y[k]);
		if (b)
			v += to_f(b[k % h]);
		if (r)
			v += to_f(r[k]);
		y[k] = from_f<T>(v);
	}
}

template <typename T>
__global__ void embed_vocab_k(T *x, const int32_t *tok, const T *wte, int64_t v0, int64_t nv, int h)
{
	int64_t n = blockIdx.x, id = (int64_t)tok[n] - v0;

	for (int i = threadIdx.x; i < h; i += blockDim.x)
		x[n * h + i] = id >= 0 && id < nv ? wte[id * h + i] : from_f<T>(0.0f);
}

template <typename T>
__global__ void pos_add_k(T *x, const T *wpe, int64_t r0, int T_, int h)
{
	int64_t n = blockIdx.x, p = (r0 + n) % T_;

	for (int i = threadIdx.x; i < h; i += blockDim.x)
		x[n * h + i] = from_f<T>(to_f(x[n * h + i]) + to_f(wpe[p * h + i]));
}

template <typename T>
__global__ void pos_bwd_k(float *gwpe, const T *dx, int64_t r0, int64_t N, int T_, int h)
{
	int t = blockIdx.x, i = blockIdx.y * blockDim.x + threadIdx.x;
	int64_t first = ((int64_t)t - r0 % T_ + T_) % T_; // the first local row at position t
	float s = 0;

	if (i >= h)
		return;
	for (int64_t n = first; n < N; n += T_)
		s += to_f(dx[n * h + i]);
	gwpe[(int64_t)t * h + i] += s;
}

__device__ float block_sum_max(float v, int is_max)
{
	__shared__ float buf[THREADS / 32];
	int lane = threadIdx.x % 32, w = threadIdx.x / 32;

	v = is_max ? warp_max(v) : warp_sum(v);
	__syncthreads();
	if (lane == 0)
		buf[w] = v;
	__syncthreads();
	v = lane < THREADS / 32 ? buf[lane] : (is_max ? -INFINITY : 0.0f);
	return is_max ? warp_max(v) : warp_sum(v);
}

template <typename T>
__global__ void __launch_bounds__(THREADS) stats_k(const T *logits, float *mx, float *sum, int64_t V)
{
	const T *z = logits + (int64_t)blockIdx.x * V;
	float m = -INFINITY, s = 0;

	for (int64_t v = threadIdx.x; v < V; v += THREADS)
		m = fmaxf(m, to_f(z[v]));
	m = block_sum_max(m, 1);
	for (int64_t v = threadIdx.x; v < V; v += THREADS)
		s += expf(to_f(z[v]) - m);
	s = block_sum_max(s, 0);
	if (threadIdx.x == 0) {
		mx[blockIdx.x] = m;
		sum[blockIdx.x] = s;
	}
}

template <typename T>
__global__ void __launch_bounds__(THREADS) vocab_k(T *logits, float *loss, const int32_t *target, const float *gmx,
						   const float *gsum, int64_t v0, int64_t V, int grad, float gscale)
{
	int64_t n = blockIdx.x, t = target[n] < 0 ? -1 : (int64_t)target[n] - v0;
	T *z = logits + n * V;
	float m = gmx[n], inv = 1.0f / gsum[n];

	if (threadIdx.x == 0)
		loss[n] = target[n] >= 0 && t >= 0 && t < V ? logf(gsum[n]) + m - to_f(z[t]) : 0.0f;
	if (!grad)
		return;
	__syncthreads(); // the target's logit is read before the gradient replaces it
	for (int64_t v = threadIdx.x; v < V; v += THREADS)
		z[v] = from_f<T>(target[n] < 0 ? 0.0f : (expf(to_f(z[v]) - m) * inv - (v == t ? 1.0f : 0.0f)) * gscale);
}

static unsigned blocks_for(int64_t n)
{
	int64_t b = (n + THREADS - 1) / THREADS;
	return (unsigned)(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

template <typename T> static int bias_residual(void *y, const void *b, const void *r, int64_t rows, int64_t h)
{
	bias_residual_k<T><<<blocks_for(rows * h), THREADS, 0, MT_STREAM>>>((T *)y, (const T *)b, (const T *)r, rows * h,
									   (int)h);
	MT_LAUNCH_CHECK("bias_residual");
	return 0;
}

template <typename T>
static int embed_vocab(void *x, const int32_t *tok, const void *wte, int64_t v0, int64_t nv, int64_t N, int64_t h)
{
	embed_vocab_k<T><<<(unsigned)N, THREADS, 0, MT_STREAM>>>((T *)x, tok, (const T *)wte, v0, nv, (int)h);
	MT_LAUNCH_CHECK("embed_fwd_vocab");
	return 0;
}

template <typename T> static int pos_add(void *x, const void *wpe, int64_t r0, int64_t N, int64_t T_, int64_t h)
{
	pos_add_k<T><<<(unsigned)N, THREADS, 0, MT_STREAM>>>((T *)x, (const T *)wpe, r0, (int)T_, (int)h);
	MT_LAUNCH_CHECK("embed_pos_add");
	return 0;
}

template <typename T>
static int pos_bwd(float *gwpe, const void *dx, int64_t r0, int64_t N, int64_t T_, int64_t h)
{
	pos_bwd_k<T><<<dim3((unsigned)T_, (unsigned)((h + THREADS - 1) / THREADS)), THREADS, 0, MT_STREAM>>>(
		gwpe, (const T *)dx, r0, N, (int)T_, (int)h);
	MT_LAUNCH_CHECK("embed_pos_bwd");
	return 0;
}

template <typename T> static int stats(const void *logits, float *mx, float *sum, int64_t rows, int64_t V)
{
	stats_k<T><<<(unsigned)rows, THREADS, 0, MT_STREAM>>>((const T *)logits, mx, sum, V);
	MT_LAUNCH_CHECK("classifier_stats");
	return 0;
}

template <typename T>
static int vocab(void *logits, float *loss, const int32_t *target, const float *gmx, const float *gsum, int64_t v0,
		 int64_t rows, int64_t V, int grad, float gscale)
{
	vocab_k<T><<<(unsigned)rows, THREADS, 0, MT_STREAM>>>((T *)logits, loss, target, gmx, gsum, v0, V, grad, gscale);
	MT_LAUNCH_CHECK("classifier_vocab");
	return 0;
}

extern "C" int mt_bias_residual(enum mt_dtype dt, void *y, const void *b, const void *r, int64_t rows, int64_t h)
{
	MT_REQUIRE(rows > 0 && h > 0 && h < (1 << 30), "bias_residual: bad shape");
	return MT_DISPATCH(dt, bias_residual, y, b, r, rows, h);
}

extern "C" int mt_embed_fwd_vocab(enum mt_dtype dt, void *x, const int32_t *tok, const void *wte, int64_t v0, int64_t nv,
				  int64_t N, int64_t h)
{
	MT_REQUIRE(N > 0 && N < (1ll << 31) && nv > 0 && v0 >= 0 && h > 0, "embed_fwd_vocab: bad shape");
	return MT_DISPATCH(dt, embed_vocab, x, tok, wte, v0, nv, N, h);
}

extern "C" int mt_embed_pos_add(enum mt_dtype dt, void *x, const void *wpe, int64_t r0, int64_t N, int64_t T_, int64_t h)
{
	MT_REQUIRE(N > 0 && N < (1ll << 31) && T_ > 0 && r0 >= 0 && h > 0, "embed_pos_add: bad shape");
	return MT_DISPATCH(dt, pos_add, x, wpe, r0, N, T_, h);
}

extern "C" int mt_embed_pos_bwd(enum mt_dtype dt, float *gwpe, const void *dx, int64_t r0, int64_t N, int64_t T_, int64_t h)
{
	MT_REQUIRE(N > 0 && T_ > 0 && T_ < (1ll << 31) && r0 >= 0 && h > 0, "embed_pos_bwd: bad shape");
	return MT_DISPATCH(dt, pos_bwd, gwpe, dx, r0, N, T_, h);
}

extern "C" int mt_classifier_stats(enum mt_dtype dt, const void *logits, float *mx, float *sum, int64_t rows, int64_t V)
{
	MT_REQUIRE(rows > 0 && rows < (1ll << 31) && V > 0, "classifier_stats: bad shape");
	return MT_DISPATCH(dt, stats, logits, mx, sum, rows, V);
}

extern "C" int mt_classifier_vocab(enum mt_dtype dt, void *logits, float *loss, const int32_t *target, const float *gmx,
				   const float *gsum, int64_t v0, int64_t rows, int64_t V, int grad, float gscale)
{
	MT_REQUIRE(rows > 0 && rows < (1ll << 31) && V > 0 && v0 >= 0, "classifier_vocab: bad shape");
	return MT_DISPATCH(dt, vocab, logits, loss, target, gmx, gsum, v0, rows, V, grad, gscale);
}
