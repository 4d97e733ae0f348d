// classifier.cu: cross-entropy and its gradient over a chunk of logits rows (see
// classifier.h). One block per row; the max and the sum of exponentials in one pass
// (each thread's running pair, rescaled as its max grows), 16-byte loads, fp32; block
// sums in a fixed tree order.
#include "classifier.h"

#include "common.cuh"

#define THREADS 512

__device__ float block_reduce(float v, int is_max)
{
	__shared__ float buf[THREADS / 32];
	int lane = threadIdx.x % 32, w = threadIdx.x / 32;

	v = is_max ? warp_max(v) : warp_sum(v);
	__syncthreads();
	if (lane == 0)
		buf[w] = v;
	__syncthreads();
	v = lane < THREADS / 32 ? buf[lane] : (is_max ? -INFINITY : 0.0f);
	v = is_max ? warp_max(v) : warp_sum(v);
	return v;
}

// a row in three parts: elements up to the first 16-byte boundary, 16-byte vectors, the
// rest (rows of an odd V start anywhere)
template <typename T> struct rowparts {
	static constexpr int VEC = 16 / sizeof(T);
	int64_t head, end; // [0, head) and [end, V) element by element, [head, end) in vectors
	__device__ rowparts(const T *z, int64_t V)
	{
		head = (int64_t)((16 - ((uintptr_t)z & 15)) & 15) / (int64_t)sizeof(T);
		head = head < V ? head : V;
		end = head + (V - head) / VEC * VEC;
	}
};

// 16 bytes as one int4 or as its elements
template <typename T> union pack16 {
	int4 v;
	T e[16 / sizeof(T)];
};

// e^(x - m) as 2^(x log2 e - m log2 e) with ml = m log2 e: one FFMA and one MUFU.EX2
// (ex2.approx.ftz: relative error ~2^-22, plus the rounding of ml; results below 2^-126,
// which vanish beside a row's sum >= 1, flush to 0; -inf gives 0). expf took about four
// instructions more, twice an element of a 50,304-wide row.
#define L2E 1.4426950408889634f
__device__ __forceinline__ float exp_m(float x, float ml) { return ex2(fmaf(x, L2E, -ml)); }

// running max and sum of exp(x - max), x taken in groups of n
template <int N> __device__ __forceinline__ void online(float &mx, float &sum, const float *x)
{
	float vm = x[0], ml;
	for (int k = 1; k < N; k++)
		vm = fmaxf(vm, x[k]);
	if (vm > mx) {
		sum *= ex2((mx - vm) * L2E);
		mx = vm;
	}
	ml = mx * L2E;
	for (int k = 0; k < N; k++)
		sum += exp_m(x[k], ml);
}

template <typename T>
__global__ void __launch_bounds__(THREADS) classifier_k(T *logits, float *loss, const int32_t *target, int64_t V,
							int grad, float gscale)
{
	constexpr int VEC = rowparts<T>::VEC;
	int64_t n = blockIdx.x;
	T *z = logits + n * V;
	int t = target[n];
	float mx = -INFINITY, sum = 0, zt = 0;
	rowparts<T> rp(z, V);

	if (t < 0) {
		if (threadIdx.x == 0)
			loss[n] = 0;
		if (grad)
			for (int64_t v = threadIdx.x; v < V; v += THREADS)
				z[v] = from_f<T>(0.0f);
		return;
	}
	if (threadIdx.x == 0)
		zt = to_f(z[t]); // read before the gradient overwrites it (the reductions below order the two)
	// one pass: each thread's running max and sum, then the block's, in a fixed order
	for (int64_t v = threadIdx.x; v < rp.head; v += THREADS) {
		float x = to_f(z[v]);
		online<1>(mx, sum, &x);
	}
	for (int64_t v = rp.head + (int64_t)threadIdx.x * VEC; v < rp.end; v += (int64_t)THREADS * VEC) {
		pack16<T> u;
		float x[VEC];
		u.v = *(const int4 *)(z + v);
		for (int k = 0; k < VEC; k++)
			x[k] = to_f(u.e[k]);
		online<VEC>(mx, sum, x);
	}
	for (int64_t v = rp.end + threadIdx.x; v < V; v += THREADS) {
		float x = to_f(z[v]);
		online<1>(mx, sum, &x);
	}
	{
		float bm = block_reduce(mx, 1);
		sum = block_reduce(sum > 0 ? sum * ex2((mx - bm) * L2E) : 0.0f, 0);
		mx = bm;
	}
	if (threadIdx.x == 0)
		loss[n] = logf(sum) + mx - zt;
	if (grad) {
		float inv = 1.0f / sum, ml = mx * L2E;
		for (int64_t v = threadIdx.x; v < rp.head; v += THREADS)
			z[v] = from_f<T>((exp_m(to_f(z[v]), ml) * inv - (v == t ? 1.0f : 0.0f)) * gscale);
		for (int64_t v = rp.head + (int64_t)threadIdx.x * VEC; v < rp.end; v += (int64_t)THREADS * VEC) {
			pack16<T> u;
			u.v = *(const int4 *)(z + v);
			for (int k = 0; k < VEC; k++)
				u.e[k] = from_f<T>((exp_m(to_f(u.e[k]), ml) * inv - (v + k == t ? 1.0f : 0.0f)) * gscale);
			*(int4 *)(z + v) = u.v;
		}
		for (int64_t v = rp.end + threadIdx.x; v < V; v += THREADS)
			z[v] = from_f<T>((exp_m(to_f(z[v]), ml) * inv - (v == t ? 1.0f : 0.0f)) * gscale);
	}
}

// the same for rows of up to REG_NV vectors a thread (13: 53,248 bf16 logits, GPT-2's 50257
// and its padded 50304 among them): the vectors stay on chip from the first pass to the
// gradient, so the row is read once, not twice; each thread takes the same elements in
// the same order as above (same bits). REG_QR of them in registers, the rest in shared
// memory (72 KB a block), so that two blocks fit an SM (64 registers a thread) and one
// block's loads overlap the other's exponentials and stores; with the whole row in
// registers (128 a thread) one block held an SM and its phases ran one after another.
#define REG_NV 13
#define REG_QR 4
#define REG_SMEM ((size_t)(REG_NV - REG_QR) * THREADS * sizeof(int4))
template <typename T>
__global__ void __launch_bounds__(THREADS, 2) classifier_reg_k(T *logits, float *loss, const int32_t *target, int64_t V,
							       int grad, float gscale)
{
	constexpr int VEC = rowparts<T>::VEC;
	int64_t n = blockIdx.x;
	T *z = logits + n * V;
	int t = target[n];
	float mx = -INFINITY, sum = 0, zt = 0;
	rowparts<T> rp(z, V);
	extern __shared__ int4 su[]; // [REG_NV - REG_QR][THREADS]
	pack16<T> u[REG_QR];

	if (t < 0) {
		if (threadIdx.x == 0)
			loss[n] = 0;
		if (grad)
			for (int64_t v = threadIdx.x; v < V; v += THREADS)
				z[v] = from_f<T>(0.0f);
		return;
	}
	if (threadIdx.x == 0)
		zt = to_f(z[t]);
	// the shared-memory part by cp.async (no registers in between; each thread reads back
	// only its own copies, after waiting for them), then the registers' part
#pragma unroll
	for (int q = REG_QR; q < REG_NV; q++) {
		int64_t v = rp.head + ((int64_t)q * THREADS + threadIdx.x) * VEC;
		if (v < rp.end)
			cp16(&su[(q - REG_QR) * THREADS + threadIdx.x], z + v);
	}
	cp_commit();
#pragma unroll
	for (int q = 0; q < REG_QR; q++) {
		int64_t v = rp.head + ((int64_t)q * THREADS + threadIdx.x) * VEC;
		if (v < rp.end)
			u[q].v = *(const int4 *)(z + v);
	}
	for (int64_t v = threadIdx.x; v < rp.head; v += THREADS) {
		float x = to_f(z[v]);
		online<1>(mx, sum, &x);
	}
#pragma unroll
	for (int q = 0; q < REG_NV; q++) {
		int64_t v = rp.head + ((int64_t)q * THREADS + threadIdx.x) * VEC;
		float x[VEC];
		pack16<T> w;
		if (v >= rp.end)
			break;
		if (q == REG_QR)
			cp_wait<0>();
		w.v = q < REG_QR ? u[q].v : su[(q - REG_QR) * THREADS + threadIdx.x];
		for (int k = 0; k < VEC; k++)
			x[k] = to_f(w.e[k]);
		online<VEC>(mx, sum, x);
	}
	for (int64_t v = rp.end + threadIdx.x; v < V; v += THREADS) {
		float x = to_f(z[v]);
		online<1>(mx, sum, &x);
	}
	{
		float bm = block_reduce(mx, 1);
		sum = block_reduce(sum > 0 ? sum * ex2((mx - bm) * L2E) : 0.0f, 0);
		mx = bm;
	}
	if (threadIdx.x == 0)
		loss[n] = logf(sum) + mx - zt;
	if (grad) {
		float inv = 1.0f / sum, ml = mx * L2E;
		for (int64_t v = threadIdx.x; v < rp.head; v += THREADS)
			z[v] = from_f<T>((exp_m(to_f(z[v]), ml) * inv - (v == t ? 1.0f : 0.0f)) * gscale);
#pragma unroll
		for (int q = 0; q < REG_NV; q++) {
			int64_t v = rp.head + ((int64_t)q * THREADS + threadIdx.x) * VEC;
			pack16<T> w;
			if (v >= rp.end)
				break;
			w.v = q < REG_QR ? u[q].v : su[(q - REG_QR) * THREADS + threadIdx.x];
			for (int k = 0; k < VEC; k++)
				w.e[k] = from_f<T>((exp_m(to_f(w.e[k]), ml) * inv - (v + k == t ? 1.0f : 0.0f)) * gscale);
			*(int4 *)(z + v) = w.v;
		}
		for (int64_t v = rp.end + threadIdx.x; v < V; v += THREADS)
			z[v] = from_f<T>((exp_m(to_f(z[v]), ml) * inv - (v == t ? 1.0f : 0.0f)) * gscale);
	}
}

template <typename T>
static int classifier(void *logits, float *loss, const int32_t *target, int64_t rows, int64_t V, int grad,
		      float gscale)
{
	if (V <= (int64_t)REG_NV * THREADS * rowparts<T>::VEC) { // (a row's head and tail are fewer than a vector)
		MT_CUDA_CHECK(cudaFuncSetAttribute(classifier_reg_k<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
						   (int)REG_SMEM));
		classifier_reg_k<T><<<(unsigned)rows, THREADS, REG_SMEM, MT_STREAM>>>((T *)logits, loss, target, V, grad,
										      gscale);
		MT_LAUNCH_CHECK("classifier");
		return 0;
	}
	classifier_k<T><<<(unsigned)rows, THREADS, 0, MT_STREAM>>>((T *)logits, loss, target, V, grad, gscale);
	MT_LAUNCH_CHECK("classifier");
	return 0;
}

extern "C" int mt_classifier(enum mt_dtype dt, void *logits, float *loss, const int32_t *target, int64_t rows,
			     int64_t V, int grad, float gscale)
{
	MT_REQUIRE(rows > 0 && rows < (1ll << 31) && V > 0, "classifier: bad shape %lld x %lld", (long long)rows,
		   (long long)V);
	return MT_DISPATCH(dt, classifier, logits, loss, target, rows, V, grad, gscale);
}
