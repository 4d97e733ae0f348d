// classifier_score.cu: -log p of the target and whether the argmax hits it, per row of
// logits (see classifier_score.h). One block per row, fp32; the max, the argmax (the
// lowest index among equal maxima, as the CPU path chooses) and the sum of exponentials
// reduced over the block in a fixed order, so runs repeat bit for bit.
#include "classifier_score.h"

#include "common.cuh"

#define THREADS 256

// the larger value, the lower index on ties
__device__ __forceinline__ void better(float &m, int64_t &i, float m2, int64_t i2)
{
	if (m2 > m || (m2 == m && i2 < i)) {
		m = m2;
		i = i2;
	}
}

template <typename T>
__global__ void __launch_bounds__(THREADS) score_k(const T *logits, float *nll, int32_t *hit, const int32_t *target,
						   int64_t V, int64_t nv)
{
	__shared__ float sm[THREADS];
	__shared__ int64_t si[THREADS];
	__shared__ float ss[THREADS];
	int64_t n = blockIdx.x;
	const T *z = logits + n * V;
	int t = target[n];
	float mx = -INFINITY, sum = 0;
	int64_t arg = INT64_MAX;

	if (t < 0) {
		if (threadIdx.x == 0)
			nll[n] = 0, hit[n] = 0;
		return;
	}
	for (int64_t v = threadIdx.x; v < nv; v += THREADS)
		better(mx, arg, to_f(z[v]), v);
	sm[threadIdx.x] = mx;
	si[threadIdx.x] = arg;
	__syncthreads();
	for (int k = THREADS / 2; k > 0; k /= 2) {
		if (threadIdx.x < k) {
			float m2 = sm[threadIdx.x + k];
			int64_t i2 = si[threadIdx.x + k];
			better(mx, arg, m2, i2);
			sm[threadIdx.x] = mx;
			si[threadIdx.x] = arg;
		}
		__syncthreads();
	}
	mx = sm[0];
	arg = si[0];
	for (int64_t v = threadIdx.x; v < nv; v += THREADS)
		sum += expf(to_f(z[v]) - mx);
	ss[threadIdx.x] = sum;
	__syncthreads();
	for (int k = THREADS / 2; k > 0; k /= 2) {
		if (threadIdx.x < k)
			ss[threadIdx.x] += ss[threadIdx.x + k];
		__syncthreads();
	}
	if (threadIdx.x == 0) {
		nll[n] = logf(ss[0]) + mx - to_f(z[t]);
		hit[n] = arg == t;
	}
}

template <typename T>
static int score(const void *logits, float *nll, int32_t *hit, const int32_t *target, int64_t rows, int64_t V,
		 int64_t nv)
{
	score_k<T><<<(unsigned)rows, THREADS, 0, MT_STREAM>>>((const T *)logits, nll, hit, target, V, nv);
	MT_LAUNCH_CHECK("classifier_score");
	return 0;
}

extern "C" int mt_classifier_score(enum mt_dtype dt, const void *logits, float *nll, int32_t *hit,
				   const int32_t *target, int64_t rows, int64_t V, int64_t nv)
{
	MT_REQUIRE(rows > 0 && rows < (1ll << 31) && V > 0 && nv > 0 && nv <= V,
		   "classifier_score: bad shape %lld x %lld (%lld counted columns)", (long long)rows, (long long)V,
		   (long long)nv);
	return MT_DISPATCH(dt, score, logits, nll, hit, target, rows, V, nv);
}
