// lt_sustained.cu: cuBLASLt's candidates for the Llama-style model's products (bench/train-gpu.sh
// MODEL=llama: 16,384 rows, hidden 2048, QKV 3072, SwiGLU 2 x 5632, vocabulary 50,304 in chunks of
// 4,096 rows), each timed in a burst and then sustained for about half a second, on random
// operands. The H100 runs mt's training step at its power limit: there a product's time is
// its energy over the capped power, and the candidate that wins a burst on zeros (lt_algos.c)
// need not win. A measurement, not part of the build: kernels/bench/NOTES.md has what it showed.
//   nvcc -O2 -arch=sm_90a -o lt_sustained kernels/bench/lt_sustained.cu -lcublasLt
//   ./lt_sustained [PRODUCT_FILTER] [SUSTAIN_MS] [vary]
// Prints, per product and candidate: the algorithm's configuration (id, tile, stages, split-K,
// swizzle, cluster shape), its burst and sustained ms and TFLOP/s, and the time of day (to set
// beside `nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw -lms 100`).
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#define CK(x)                                                                      \
	do {                                                                       \
		int e_ = (int)(x);                                                 \
		if (e_) {                                                          \
			fprintf(stderr, "%s:%d: %s: %d\n", __FILE__, __LINE__, #x, e_); \
			exit(1);                                                   \
		}                                                                  \
	} while (0)

static cublasLtHandle_t h;
static void *ws;
static size_t wsb = 32u << 20;
static double sustain_ms = 500;
static int vary; // 1: then one-at-a-time variations of the fastest (custom option, cluster shape, swizzling)

static double now(void)
{
	struct timeval tv;
	gettimeofday(&tv, NULL);
	return tv.tv_sec + tv.tv_usec * 1e-6;
}

// roughly normal values (a sum of four uniforms) times scale, from a hash of the index
__global__ void fill_k(__nv_bfloat16 *x, size_t n, float scale, unsigned seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		unsigned v = (unsigned)i * 2654435761u ^ seed;
		float s = 0;
		for (int k = 0; k < 4; k++) {
			v ^= v << 13, v ^= v >> 17, v ^= v << 5;
			s += (v >> 8) * (1.0f / 16777216.0f) - 0.5f;
		}
		x[i] = __float2bfloat16(s * 1.7320508f * scale);
	}
}

static void fill(void *x, size_t n, float scale, unsigned seed)
{
	fill_k<<<1024, 256>>>((__nv_bfloat16 *)x, n, scale, seed);
	CK(cudaGetLastError());
}

// a configuration attribute (16- or 32-bit: its size asked first), -1 where unreadable
static int attr(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t w)
{
	uint32_t v32 = 0;
	uint16_t v16 = 0;
	size_t sz = 0;
	if (cublasLtMatmulAlgoConfigGetAttribute(a, w, NULL, 0, &sz) != CUBLAS_STATUS_SUCCESS)
		return -1;
	if (sz == 4 && cublasLtMatmulAlgoConfigGetAttribute(a, w, &v32, 4, &sz) == CUBLAS_STATUS_SUCCESS)
		return (int)v32;
	if (sz == 2 && cublasLtMatmulAlgoConfigGetAttribute(a, w, &v16, 2, &sz) == CUBLAS_STATUS_SUCCESS)
		return (int)v16;
	return -1;
}

// ms a product over the launches of [t0 + skip, end) in batches of 5, as long as sustain_ms
static float timed(cublasLtMatmulDesc_t op, const void *A, cublasLtMatrixLayout_t la, const void *B,
		   cublasLtMatrixLayout_t lb, float beta, void *D, cublasLtMatrixLayout_t lc, const cublasLtMatmulAlgo_t *algo,
		   double ms_total, float *burst)
{
	cudaEvent_t e[2];
	float alpha = 1, ms = 0, tot = 0;
	int n = 0, batches = 0;
	double t0 = now();

	cudaEventCreate(&e[0]), cudaEventCreate(&e[1]);
	for (;;) {
		cudaEventRecord(e[0], 0);
		for (int r = 0; r < 5; r++)
			if (cublasLtMatmul(h, op, &alpha, A, la, B, lb, &beta, D, lc, D, lc, algo, ws, wsb, 0))
				return -1;
		cudaEventRecord(e[1], 0);
		if (cudaEventSynchronize(e[1]) != cudaSuccess)
			return -1;
		cudaEventElapsedTime(&ms, e[0], e[1]);
		if (batches++ == 0)
			*burst = ms / 5;
		double el = (now() - t0) * 1e3;
		if (el > ms_total * 0.4)
			tot += ms, n += 5;
		if (el > ms_total)
			break;
	}
	cudaEventDestroy(e[0]), cudaEventDestroy(e[1]);
	return tot / n;
}

// column-major D[m,n] = op(A) op(B) (+ beta D)
static void run(const char *what, int ta, int tb, long m, long n, long k, long lda, long ldb, int f32out)
{
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t la, lb, lc;
	cublasLtMatmulPreference_t pref;
	cublasLtMatmulHeuristicResult_t res[32];
	cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
	cudaDataType_t tc = f32out ? CUDA_R_32F : CUDA_R_16BF;
	void *A, *B, *D;
	int found = 0;
	double fl = 2.0 * m * n * k;

	CK(cudaMalloc(&A, (size_t)m * k * 2));
	CK(cudaMalloc(&B, (size_t)k * n * 2));
	CK(cudaMalloc(&D, (size_t)m * n * (f32out ? 4 : 2)));
	fill(A, (size_t)m * k, 1.0f, 12345u), fill(B, (size_t)k * n, 0.02f, 777u);
	CK(cudaMemset(D, 0, (size_t)m * n * (f32out ? 4 : 2)));
	CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof(oa)));
	CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof(ob)));
	CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, ta ? k : m, ta ? m : k, lda));
	CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, tb ? n : k, tb ? k : n, ldb));
	CK(cublasLtMatrixLayoutCreate(&lc, tc, m, n, m));
	CK(cublasLtMatmulPreferenceCreate(&pref));
	CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb)));
	CK(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 32, res, &found));
	printf("## %s m %ld n %ld k %ld: %d candidates\n", what, m, n, k, found);
	for (int i = 0; i < found && !vary; i++) {
		float burst = 0, ms;
		double t = now();
		if (res[i].state)
			continue;
		ms = timed(op, A, la, B, lb, 0.0f, D, lc, &res[i].algo, sustain_ms, &burst);
		printf("%-22s #%-2d id %3d tile %3d stages %3d splitk %2d swz %d cluster %3d waves %5.2f | burst %7.3f ms "
		       "%4.0f TF/s | sustained %7.3f ms %4.0f TF/s | t %.1f\n",
		       what, i, attr(&res[i].algo, CUBLASLT_ALGO_CONFIG_ID), attr(&res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
		       attr(&res[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID), attr(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
		       attr(&res[i].algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
		       attr(&res[i].algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID), res[i].wavesCount, burst,
		       fl / burst / 1e9, ms, fl / ms / 1e9, t);
		fflush(stdout);
	}
	if (vary) {
		cublasLtMatmulAlgo_t a;
		cublasLtMatmulHeuristicResult_t chk;
		char lab[64];
		float best = 1e30f;
		int bi = -1;
		for (int i = 0; i < found; i++) {
			float burst, ms;
			if (res[i].state)
				continue;
			ms = timed(op, A, la, B, lb, 0.0f, D, lc, &res[i].algo, sustain_ms / 2, &burst);
			if (ms > 0 && ms < best)
				best = ms, bi = i;
		}
		int cmax = 0;
		size_t got;
		if (bi < 0)
			goto done;
		cublasLtMatmulAlgoCapGetAttribute(&res[bi].algo, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX, &cmax, sizeof(cmax), &got);
		printf("## %s: variations of #%d (%.3f ms; custom options 0-%d)\n", what, bi, best, cmax);
		for (int v = 0; v < 64; v++) {
			float burst, ms;
			a = res[bi].algo;
			if (v <= cmax && v < 16) {
				uint32_t c = (uint32_t)v;
				cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &c, sizeof(c));
				snprintf(lab, sizeof(lab), "custom %d", v);
			} else if (v >= 16 && v < 24) {
				static const uint16_t cl[] = { 2, 3, 4, 5, 6, 7, 8, 9 };
				uint16_t c = cl[v - 16];
				cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &c, sizeof(c));
				snprintf(lab, sizeof(lab), "cluster id %d", c);
			} else if (v >= 24 && v < 26) {
				uint32_t c = (uint32_t)(v - 24);
				cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &c, sizeof(c));
				snprintf(lab, sizeof(lab), "swizzle %d", v - 24);
			} else
				continue;
			if (cublasLtMatmulAlgoCheck(h, op, la, lb, lc, lc, &a, &chk) != CUBLAS_STATUS_SUCCESS)
				continue;
			ms = timed(op, A, la, B, lb, 0.0f, D, lc, &a, sustain_ms / 2, &burst);
			printf("%-22s %-14s tile %3d stages %3d cluster %2d custom %2d swz %d | sustained %7.3f ms (best of the "
			       "heuristic's %.3f: %.3f)\n",
			       what, lab, attr(&a, CUBLASLT_ALGO_CONFIG_TILE_ID), attr(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
			       attr(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID), attr(&a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION),
			       attr(&a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING), ms, best, ms / best);
			fflush(stdout);
		}
	done:;
	}
	cublasLtMatmulPreferenceDestroy(pref);
	cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(lc);
	cublasLtMatmulDescDestroy(op);
	cudaFree(A), cudaFree(B), cudaFree(D);
}

int main(int argc, char **argv)
{
	const char *filter = argc > 1 ? argv[1] : "";
	long N = 16384, chunk = 4096;
	static const long sh[][2] = { { 2048, 3072 }, { 2048, 2048 }, { 2048, 11264 }, { 5632, 2048 }, { 2048, 50304 } };
	static const char *nm[] = { "qkv", "proj", "fc1", "fc2", "out" };

	if (argc > 2)
		sustain_ms = atof(argv[2]);
	vary = argc > 3 && !strcmp(argv[3], "vary");
	CK(cublasLtCreate(&h));
	CK(cudaMalloc(&ws, wsb));
	for (int s = 0; s < 5; s++) {
		long IN = sh[s][0], O = sh[s][1], R = s == 4 ? chunk : N;
		char w[64];
		snprintf(w, sizeof(w), "%s fwd", nm[s]);
		if (strstr(w, filter))
			run(w, 1, 0, O, R, IN, IN, IN, 0);
		snprintf(w, sizeof(w), "%s din", nm[s]);
		if (strstr(w, filter))
			run(w, 0, 0, IN, R, O, IN, O, 0);
		snprintf(w, sizeof(w), "%s dw", nm[s]);
		if (strstr(w, filter))
			run(w, 0, 1, IN, O, R, IN, O, 1);
	}
	return 0;
}
