/* lt_algos.c: how far cuBLASLt's first heuristic choice is from the fastest of the ones it
 * offers (up to 16; eight on an H200), each timed alone, for the products of a GPT-2 124M
 * step (bf16 in, fp32 accumulation; the weight gradient accumulates into fp32) at N rows.
 * A measurement, not part of the build: kernels/bench/NOTES.md has what it showed and why
 * matmul.cu still takes the first choice (winners alone lost inside the step). The output
 * layer's line uses an unpadded vocabulary (50257 rows of output): slower than mt's. */
 *   nvcc -O2 -o lt_algos kernels/bench/lt_algos.c -lcublasLt && ./lt_algos [N]
 * Prints, per product: the first algorithm's time, the fastest one's, their ratio. */
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

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

/* column-major D[m,n] = op(A) op(B) + beta D; returns ms of the first and of the best */
static void run(const char *what, int ta, int tb, long m, long n, long k, long lda, long ldb, int f32out, float beta)
{
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t la, lb, lc;
	cublasLtMatmulPreference_t pref;
	cublasLtMatmulHeuristicResult_t res[16];
	cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
	cudaDataType_t tc = f32out ? CUDA_R_32F : CUDA_R_16BF;
	void *A, *B, *D;
	float alpha = 1, first = 0, best = 1e30f;
	int found = 0, bi = 0;
	cudaEvent_t e0, e1;

	CK(cudaMalloc(&A, (size_t)m * k * 2));
	CK(cudaMalloc(&B, (size_t)k * n * 2));
	CK(cudaMalloc(&D, (size_t)m * n * (f32out ? 4 : 2)));
	cudaMemset(A, 0, (size_t)m * k * 2), cudaMemset(B, 0, (size_t)k * n * 2), cudaMemset(D, 0, (size_t)m * n * (f32out ? 4 : 2));
	CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof(oa)));
	CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof(ob)));
	CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, ta ? k : m, ta ? m : k, lda));
	CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, tb ? n : k, tb ? k : n, ldb));
	CK(cublasLtMatrixLayoutCreate(&lc, tc, m, n, m));
	CK(cublasLtMatmulPreferenceCreate(&pref));
	CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb)));
	CK(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 16, res, &found));
	cudaEventCreate(&e0), cudaEventCreate(&e1);
	for (int i = 0; i < found; i++) {
		float ms = 0;
		if (res[i].state)
			continue;
		for (int r = 0; r < 3; r++)
			cublasLtMatmul(h, op, &alpha, A, la, B, lb, &beta, D, lc, D, lc, &res[i].algo, ws, wsb, 0);
		cudaEventRecord(e0, 0);
		for (int r = 0; r < 20; r++)
			cublasLtMatmul(h, op, &alpha, A, la, B, lb, &beta, D, lc, D, lc, &res[i].algo, ws, wsb, 0);
		cudaEventRecord(e1, 0);
		if (cudaEventSynchronize(e1) != cudaSuccess)
			continue;
		cudaEventElapsedTime(&ms, e0, e1);
		ms /= 20;
		if (i == 0)
			first = ms;
		if (ms < best)
			best = ms, bi = i;
	}
	printf("%-28s m %6ld n %6ld k %6ld: first %7.3f ms (%5.0f TFLOP/s), best #%-2d %7.3f ms, first/best %.3f (%d tried)\n",
	       what, m, n, k, first, 2.0 * m * n * k / first / 1e9, bi, best, first / best, found);
	cublasLtMatmulPreferenceDestroy(pref);
	cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(lc);
	cublasLtMatmulDescDestroy(op);
	cudaFree(A), cudaFree(B), cudaFree(D);
}

int main(int argc, char **argv)
{
	long N = argc > 1 ? atol(argv[1]) : 65536, chunk = 8192;
	static const long sh[][2] = { { 768, 2304 }, { 768, 768 }, { 768, 3072 }, { 3072, 768 }, { 768, 50257 } };
	static const char *nm[] = { "qkv", "proj", "fc1", "fc2", "output layer (chunk)" };

	CK(cublasLtCreate(&h));
	CK(cudaMalloc(&ws, wsb));
	for (int s = 0; s < 5; s++) {
		long IN = sh[s][0], O = sh[s][1], R = s == 4 ? chunk : N;
		char w[64];
		snprintf(w, sizeof(w), "%s fwd", nm[s]);
		run(w, 1, 0, O, R, IN, IN, IN, 0, 0);
		snprintf(w, sizeof(w), "%s bwd input", nm[s]);
		run(w, 0, 0, IN, R, O, IN, O, 0, 0);
		snprintf(w, sizeof(w), "%s bwd weight", nm[s]);
		run(w, 0, 1, IN, O, R, IN, O, 1, 1);
	}
	return 0;
}
