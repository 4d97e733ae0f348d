// classifier.cu: cross-entropy and its gradient over a chunk of logits rows (see
// classifier.h). One block per row; max, then the sum of exponentials, in fp32; block
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

template <typename T>
__global__ void __launch_bounds__(THREADS) classifier_k(T *logits, float *loss, const int32_t *target, int64_t V,
							int grad, float gscale)
{
	int64_t n = blockIdx.x;
	T *z = logits + n * V;
	int t = target[n];
	float mx = -INFINITY, sum = 0;

	if (t < 0) {
		if (threadIdx.x == 0)
			loss[n] = 0;
		if (grad)
			for (int64_t v = threadIdx.x; v < V; v += THREADS)
				z[v] = from_f<T>(0.0f);
		return;
	}
	for (int64_t v = threadIdx.x; v < V; v += THREADS)
		mx = fmaxf(mx, to_f(z[v]));
	mx = block_reduce(mx, 1);
	for (int64_t v = threadIdx.x; v < V; v += THREADS)
		sum += expf(to_f(z[v]) - mx);
	sum = block_reduce(sum, 0);
	if (threadIdx.x == 0)
		loss[n] = logf(sum) + mx - to_f(z[t]);
	__syncthreads(); // z[t] read before it is overwritten
	if (grad) {
		float inv = 1.0f / sum;
		for (int64_t v = threadIdx.x; v < V; v += THREADS) {
			float p = expf(to_f(z[v]) - mx) * inv;
			z[v] = from_f<T>((p - (v == t ? 1.0f : 0.0f)) * gscale);
		}
	}
}

template <typename T>
static int classifier(void *logits, float *loss, const int32_t *target, int64_t rows, int64_t V, int grad,
		      float gscale)
{
	classifier_k<T><<<(unsigned)rows, THREADS>>>((T *)logits, loss, target, V, grad, gscale);
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
