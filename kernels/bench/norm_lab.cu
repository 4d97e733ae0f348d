// norm_lab.cu: the norms and column sums of kernels/norm.cu at the training step's shapes:
// each launcher checked against a CPU reference in double (bf16 limit 1e-2 of the
// largest reference value, as tests/unit/test_cuda.c), then timed, with the bytes it
// must move at the least and the rate that makes; then one step's worth (GPT-2 124M at
// B=64, T=1024: 25 norms forward, 25 backward, the QKV and fc1 bias gradients of 12
// layers; the projection and fc2 bias gradients come with the norm backward as its
// column sum of dx) and the classifier's rows (kernels/classifier.cu) for comparison.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -Ikernels -Ilib kernels/bench/norm_lab.cu
//        kernels/norm.cu kernels/classifier.cu kernels/cuda_err.cu -o norm_lab
//   ./norm_lab [llama]      (llama: RMSNorm at h = 2048, N = 16384 as well)
// -DMT_NORM_OLD_API times a kernels/norm.cu of before the column sum of dx (commit 48b4cda
// and earlier: that sum then is mt_bias_grad's over dx): copy this file beside that
// version's norm.h and classifier.h (it includes them as ../*.h) and build it there.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

include "../classifier.h"
include "../norm.h"

#define CK(call)                                                                                   \
	do {                                                                                       \
		cudaError_t e_ = (call);                                                           \
		if (e_ != cudaSuccess) {                                                           \
			fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)
#define OK(call)                                                                                   \
	do {                                                                                       \
		if (call) {                                                                        \
			fprintf(stderr, "%s\n", mt_cuda_error());                                  \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static int fails;

#ifdef MT_NORM_OLD_API
static int nbwd(enum mt_dtype dt, void *dx, int acc, float *dw, float *db, float *ds, const void *dy, const void *x,
		const float *st, const void *w, int64_t N, int64_t h, int rms, float *scr)
{
	if (mt_norm_bwd(dt, dx, acc, dw, db, dy, x, st, w, N, h, rms, scr))
		return -1;
	return ds ? mt_bias_grad(dt, ds, dx, N, h, scr) : 0;
}
#define SCRATCH(h, o) mt_norm_scratch_floats((h) > (o) ? (h) : (o))
#else
#define nbwd mt_norm_bwd
#define SCRATCH(h, o) mt_norm_scratch_floats(h, o)
#endif

__global__ void fill_k(__nv_bfloat16 *p, int64_t n, uint32_t seed, float scale)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
		uint32_t u = (uint32_t)i * 2654435761u ^ seed;
		u ^= u >> 15, u *= 2246822519u, u ^= u >> 13, u *= 3266489917u, u ^= u >> 16;
		p[i] = __float2bfloat16((u * (2.0f / 4294967296.0f) - 1.0f) * scale);
	}
}

__global__ void fill_f_k(float *p, int64_t n, float v)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
		p[i] = v;
}

static __nv_bfloat16 *bf(int64_t n, uint32_t seed, float scale)
{
	__nv_bfloat16 *p;
	CK(cudaMalloc(&p, (size_t)n * 2));
	fill_k<<<1024, 256>>>(p, n, seed, scale);
	return p;
}

static float *fz(int64_t n)
{
	float *p;
	CK(cudaMalloc(&p, (size_t)n * 4));
	fill_f_k<<<256, 256>>>(p, n, 0.0f);
	return p;
}

static float *host_bf(const __nv_bfloat16 *d, int64_t n)
{
	uint16_t *t = (uint16_t *)malloc((size_t)n * 2);
	float *f = (float *)malloc((size_t)n * 4);
	CK(cudaMemcpy(t, d, (size_t)n * 2, cudaMemcpyDeviceToHost));
	for (int64_t i = 0; i < n; i++) {
		uint32_t u = (uint32_t)t[i] << 16;
		memcpy(&f[i], &u, 4);
	}
	free(t);
	return f;
}

static float *host_f(const float *d, int64_t n)
{
	float *f = (float *)malloc((size_t)n * 4);
	CK(cudaMemcpy(f, d, (size_t)n * 4, cudaMemcpyDeviceToHost));
	return f;
}

static void check(const char *what, const float *got, const double *ref, int64_t n)
{
	double md = 0, mr = 0;
	for (int64_t i = 0; i < n; i++) {
		double d = fabs((double)got[i] - ref[i]);
		if (isnan(got[i]))
			d = INFINITY;
		md = d > md ? d : md;
		mr = fabs(ref[i]) > mr ? fabs(ref[i]) : mr;
	}
	md = mr > 0 ? md / mr : md;
	printf("  check %-40s rel error %.3g %s\n", what, md, md < 1e-2 ? "ok" : "FAIL");
	fails += !(md < 1e-2);
}

// the mean of reps calls of f after one untimed call, in microseconds
template <typename F> static double timed(F f, int reps)
{
	cudaEvent_t a, b;
	float ms;
	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	f();
	CK(cudaEventRecord(a));
	for (int i = 0; i < reps; i++)
		f();
	CK(cudaEventRecord(b));
	CK(cudaEventSynchronize(b));
	CK(cudaEventElapsedTime(&ms, a, b));
	cudaEventDestroy(a), cudaEventDestroy(b);
	return 1e3 * ms / reps;
}

static void rate(const char *what, double us, double bytes)
{
	printf("  %-48s %8.1f us  %6.0f GB/s  (%.0f MB at the least)\n", what, us, bytes / us * 1e-3, bytes * 1e-6);
}

// a norm forward and backward of [N, h]: checked, then timed; returns the step's share in us
// (fwd x nf, bwd accumulating x nb, bwd overwriting x 1; the column sum of dx with_ds)
static double norm_case(int64_t N, int64_t h, int rms, int with_ds, int nf, int nb, float *scr)
{
	__nv_bfloat16 *x = bf(N * h, 1, 2.0f), *w = bf(h, 2, 1.0f), *b = bf(h, 3, 1.0f), *y = bf(N * h, 4, 1.0f);
	__nv_bfloat16 *dy = bf(N * h, 5, 1.0f), *dx = bf(N * h, 6, 1.0f);
	float *st = fz(2 * N), *dw = fz(h), *db = fz(h), *ds = fz(h);
	double eb = 2, tf, tb, tb0;
	const void *bb = rms ? NULL : b;
	float *dbb = rms ? NULL : db, *dss = with_ds ? ds : NULL;

	printf("%s N=%lld h=%lld\n", rms ? "rmsnorm" : "layernorm", (long long)N, (long long)h);
	{
		float *hx = host_bf(x, N * h), *hw = host_bf(w, h), *hb = host_bf(b, h), *hdy = host_bf(dy, N * h);
		float *hdx0 = host_bf(dx, N * h), *hy, *hdx, *hdw, *hdb, *hds;
		double *ry = (double *)calloc((size_t)(N * h), 8), *rdw = (double *)calloc(h, 8),
		       *rdb = (double *)calloc(h, 8), *rds = (double *)calloc(h, 8);

		OK(mt_norm_fwd(MT_BF16, y, st, x, w, bb, N, h, rms, 1e-5f));
		OK(nbwd(MT_BF16, dx, 1, dw, dbb, ds, dy, x, st, w, N, h, rms, scr));
		CK(cudaDeviceSynchronize());
		hy = host_bf(y, N * h), hdx = host_bf(dx, N * h), hdw = host_f(dw, h), hdb = host_f(db, h);
		hds = host_f(ds, h);
		for (int64_t n = 0; n < N; n++) {
			const float *xr = hx + n * h, *dr = hdy + n * h;
			double mean = 0, var = 0, rstd;
			if (!rms) {
				for (int64_t i = 0; i < h; i++)
					mean += xr[i];
				mean /= (double)h;
			}
			for (int64_t i = 0; i < h; i++)
				var += (xr[i] - mean) * (xr[i] - mean);
			rstd = 1 / sqrt(var / (double)h + 1e-5);
			for (int64_t i = 0; i < h; i++) {
				double xh = (xr[i] - mean) * rstd;
				ry[n * h + i] = xh * hw[i] + (rms ? 0 : hb[i]);
				rdw[i] += dr[i] * xh, rdb[i] += dr[i];
				rds[i] += hdx[n * h + i];
			}
		}
		check("forward", hy, ry, N * h);
		for (int64_t n = 0; n < N; n++) {
			const float *xr = hx + n * h, *dr = hdy + n * h;
			double mean = 0, var = 0, rstd, sdy = 0, sdyx = 0;
			if (!rms) {
				for (int64_t i = 0; i < h; i++)
					mean += xr[i];
				mean /= (double)h;
			}
			for (int64_t i = 0; i < h; i++)
				var += (xr[i] - mean) * (xr[i] - mean);
			rstd = 1 / sqrt(var / (double)h + 1e-5);
			for (int64_t i = 0; i < h; i++) {
				double xh = (xr[i] - mean) * rstd, d = (double)dr[i] * hw[i];
				sdy += d, sdyx += d * xh;
			}
			sdy /= (double)h, sdyx /= (double)h;
			for (int64_t i = 0; i < h; i++) {
				double xh = (xr[i] - mean) * rstd, d = (double)dr[i] * hw[i];
				ry[n * h + i] = hdx0[n * h + i] + rstd * (d - (rms ? 0 : sdy) - xh * sdyx);
			}
		}
		check("backward input (accumulated)", hdx, ry, N * h);
		check("backward weight", hdw, rdw, h);
		if (!rms)
			check("backward bias", hdb, rdb, h);
		check("column sum of dx", hds, rds, h);
		free(hx), free(hw), free(hb), free(hdy), free(hdx0), free(hy), free(hdx), free(hdw), free(hdb), free(hds);
		free(ry), free(rdw), free(rdb), free(rds);
	}
	tf = timed([&] { OK(mt_norm_fwd(MT_BF16, y, st, x, w, bb, N, h, rms, 1e-5f)); }, 20);
	rate("forward", tf, eb * 2 * N * h);
	tb = timed([&] { OK(nbwd(MT_BF16, dx, 1, dw, dbb, dss, dy, x, st, w, N, h, rms, scr)); }, 20);
	rate(with_ds ? "backward, accumulated, column sum of dx" : "backward, accumulated", tb, eb * 4 * N * h);
	tb0 = timed([&] { OK(nbwd(MT_BF16, dx, 0, dw, dbb, dss, dy, x, st, w, N, h, rms, scr)); }, 20);
	rate(with_ds ? "backward, written, column sum of dx" : "backward, written", tb0, eb * 3 * N * h);
	cudaFree(x), cudaFree(w), cudaFree(b), cudaFree(y), cudaFree(dy), cudaFree(dx);
	cudaFree(st), cudaFree(dw), cudaFree(db), cudaFree(ds);
	return nf * tf + nb * tb + tb0;
}

static double bias_case(int64_t N, int64_t O, float *scr)
{
	__nv_bfloat16 *d = bf(N * O, 7, 1.0f);
	float *db = fz(O), *h, *hd;
	double *r = (double *)calloc(O, 8), t;
	char what[64];

	OK(mt_bias_grad(MT_BF16, db, d, N, O, scr));
	CK(cudaDeviceSynchronize());
	h = host_bf(d, N * O), hd = host_f(db, O);
	for (int64_t n = 0; n < N; n++)
		for (int64_t i = 0; i < O; i++)
			r[i] += h[n * O + i];
	snprintf(what, sizeof(what), "bias grad %lld x %lld", (long long)N, (long long)O);
	check(what, hd, r, O);
	t = timed([&] { OK(mt_bias_grad(MT_BF16, db, d, N, O, scr)); }, 20);
	rate(what, t, 2.0 * N * O);
	free(h), free(hd), free(r);
	cudaFree(d), cudaFree(db);
	return t;
}

int main(int argc, char **argv)
{
	int64_t N = 65536, h = 768;
	float *scr;
	double step = 0, t;
	cudaDeviceProp p;

	CK(cudaGetDeviceProperties(&p, 0));
	printf("%s, %d SMs\n", p.name, p.multiProcessorCount);
	CK(cudaMalloc(&scr, (size_t)SCRATCH(2048, 3072) * 4));
	step += norm_case(N, h, 0, 1, 25, 24, scr);
	step += 12 * bias_case(N, 2304, scr);
	step += 12 * bias_case(N, 3072, scr);
	printf("GPT-2 B=64 step: norms (with the projection and fc2 bias gradients) and the QKV and fc1 "
	       "bias gradients: %.2f ms\n", step * 1e-3);
	{
		int64_t rows = 5336, V = 50304; // GPT-2's chunk of logits: 512 MiB of bf16
		__nv_bfloat16 *z = bf(rows * V, 9, 4.0f);
		float *loss = fz(rows);
		int32_t *tg, *htg = (int32_t *)malloc(rows * 4);
		for (int64_t n = 0; n < rows; n++)
			htg[n] = (int32_t)((n * 7919) % 50257);
		CK(cudaMalloc(&tg, rows * 4));
		CK(cudaMemcpy(tg, htg, rows * 4, cudaMemcpyHostToDevice));
		t = timed([&] { OK(mt_classifier(MT_BF16, z, loss, tg, rows, V, 1, 1e-4f)); }, 10);
		rate("classifier, one chunk (gradient in place)", t, 4.0 * rows * V);
		printf("GPT-2 B=64 step: classifier %.2f ms (%.1f chunks)\n", t * 65536.0 / rows * 1e-3, 65536.0 / rows);
		cudaFree(z), cudaFree(loss), cudaFree(tg);
		free(htg);
	}
	if (argc > 1 && !strcmp(argv[1], "llama")) {
		t = norm_case(16384, 2048, 1, 0, 33, 32, scr);
		printf("Llama-style 0.93B B=8 step: norms %.2f ms\n", t * 1e-3);
	}
	printf("%s\n", fails ? "SOME CHECKS FAILED" : "all checks passed");
	return fails != 0;
}
