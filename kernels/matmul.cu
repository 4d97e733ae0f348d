// matmul.cu: cuBLASLt behind the row-major linear layers of matmul.h.
//
// Row-major X[r][c] is column-major X^T, so out = in @ W^T becomes, column-major,
// out^T (O x N) = W^T-as-stored (op T of the IN x O matrix) times in^T (IN x N). The
// bias rides on the BIAS epilogue, the residual on C (beta = 1). Compute is fp32 in
// every precision (CUBLAS_COMPUTE_32F: no TF32 for fp32 inputs, so fp32 runs match the
// CPU backend closely). One algorithm per call from the heuristic, with the pointers'
// real alignment declared, so odd offsets into the flat buffers stay legal.
#include "matmul.h"

#include <cublasLt.h>
#include <stdlib.h>

#include "common.cuh"
#include "gelu.h"

struct mt_lt {
	cublasLtHandle_t h;
	void *ws;
	size_t ws_bytes;
};

#define LT_CHECK(call)                                                                             \
	do {                                                                                       \
		cublasStatus_t s_ = (call);                                                        \
		if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
			rc = mt_cuda_fail(__FILE__, __LINE__, "%s: cuBLAS status %d", #call, (int)s_); \
			goto out;                                                                  \
		}                                                                                  \
	} while (0)

extern "C" int mt_lt_create(struct mt_lt **lt, void *workspace, size_t bytes)
{
	struct mt_lt *p = (struct mt_lt *)calloc(1, sizeof(*p));
	int rc = 0;

	*lt = NULL;
	if (!p)
		return mt_cuda_fail(__FILE__, __LINE__, "out of host memory");
	LT_CHECK(cublasLtCreate(&p->h));
	p->ws = workspace;
	p->ws_bytes = bytes;
	*lt = p;
	return 0;
out:
	free(p);
	return rc;
}

extern "C" void mt_lt_destroy(struct mt_lt *lt)
{
	if (!lt)
		return;
	cublasLtDestroy(lt->h);
	free(lt);
}

static cudaDataType_t cuda_type(enum mt_dtype dt)
{
	return dt == MT_F32 ? CUDA_R_32F : dt == MT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

static uint32_t align_of(const void *p)
{
	uintptr_t a = (uintptr_t)p;
	uint32_t al = 256;

	while (al > 1 && (a % al))
		al >>= 1;
	return al;
}

// column-major D[m,n] = op(A) op(B) + beta C (+ bias[m]); C may equal D
// epi: CUBLASLT_EPILOGUE_DEFAULT (then BIAS when bias is given), or a GELU one with aux;
// returns 1, having done nothing, when cuBLASLt has no algorithm for that epilogue
static int lt_gemm_epi(struct mt_lt *lt, int ta, int tb, int64_t m, int64_t n, int64_t k, cudaDataType_t tab,
		       const void *A, int64_t lda, const void *B, int64_t ldb, float beta, cudaDataType_t tcd,
		       const void *C, void *D, int64_t ldd, const void *bias, cublasLtEpilogue_t epi, const void *aux,
		       int64_t auxld)
{
	cublasLtMatmulDesc_t op = NULL;
	cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
	cublasLtMatmulPreference_t pref = NULL;
	cublasLtMatmulHeuristicResult_t res;
	cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
	float alpha = 1.0f;
	int found = 0, rc = 0;
	uint32_t al;

	LT_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
	LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
	if (bias && epi == CUBLASLT_EPILOGUE_DEFAULT)
		epi = CUBLASLT_EPILOGUE_BIAS;
	if (epi != CUBLASLT_EPILOGUE_DEFAULT)
		LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
	if (bias)
		LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
	if (aux) {
		LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
		LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &auxld, sizeof(auxld)));
	}
	LT_CHECK(cublasLtMatrixLayoutCreate(&la, tab, ta ? k : m, ta ? m : k, lda));
	LT_CHECK(cublasLtMatrixLayoutCreate(&lb, tab, tb ? n : k, tb ? k : n, ldb));
	LT_CHECK(cublasLtMatrixLayoutCreate(&lc, tcd, m, n, ldd));
	LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
	LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &lt->ws_bytes,
						      sizeof(lt->ws_bytes)));
	al = align_of(A);
	LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof(al)));
	al = align_of(B);
	LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof(al)));
	al = align_of(C ? C : D);
	LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof(al)));
	al = align_of(D);
	LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof(al)));
	if (cublasLtMatmulAlgoGetHeuristic(lt->h, op, la, lb, lc, lc, pref, 1, &res, &found) != CUBLAS_STATUS_SUCCESS ||
	    !found) {
		rc = aux ? 1
			 : mt_cuda_fail(__FILE__, __LINE__, "cuBLASLt has no algorithm for %lld x %lld x %lld", (long long)m,
					(long long)n, (long long)k);
		goto out;
	}
	LT_CHECK(cublasLtMatmul(lt->h, op, &alpha, A, la, B, lb, &beta, C ? C : D, lc, D, lc, &res.algo, lt->ws,
				lt->ws_bytes, MT_STREAM));
out:
	if (pref)
		cublasLtMatmulPreferenceDestroy(pref);
	if (lc)
		cublasLtMatrixLayoutDestroy(lc);
	if (lb)
		cublasLtMatrixLayoutDestroy(lb);
	if (la)
		cublasLtMatrixLayoutDestroy(la);
	if (op)
		cublasLtMatmulDescDestroy(op);
	return rc;
}

static int lt_gemm(struct mt_lt *lt, int ta, int tb, int64_t m, int64_t n, int64_t k, cudaDataType_t tab,
		   const void *A, int64_t lda, const void *B, int64_t ldb, float beta, cudaDataType_t tcd,
		   const void *C, void *D, int64_t ldd, const void *bias)
{
	return lt_gemm_epi(lt, ta, tb, m, n, k, tab, A, lda, B, ldb, beta, tcd, C, D, ldd, bias, CUBLASLT_EPILOGUE_DEFAULT,
			   NULL, 0);
}

extern "C" int mt_linear_fwd(struct mt_lt *lt, enum mt_dtype dt, void *out, const void *in, const void *W,
			     const void *bias, const void *resid, int64_t N, int64_t IN, int64_t O)
{
	cudaDataType_t t = cuda_type(dt);

	MT_REQUIRE(N > 0 && IN > 0 && O > 0, "linear: empty shape %lld x %lld x %lld", (long long)N, (long long)IN,
		   (long long)O);
	return lt_gemm(lt, 1, 0, O, N, IN, t, W, IN, in, IN, resid ? 1.0f : 0.0f, t, resid, out, O, bias);
}

extern "C" int mt_linear_fwd_f32(struct mt_lt *lt, enum mt_dtype dt, float *out, const void *in, const void *W,
				 int64_t N, int64_t IN, int64_t O)
{
	MT_REQUIRE(N > 0 && IN > 0 && O > 0, "linear: empty shape %lld x %lld x %lld", (long long)N, (long long)IN,
		   (long long)O);
	return lt_gemm(lt, 1, 0, O, N, IN, cuda_type(dt), W, IN, in, IN, 0.0f, CUDA_R_32F, NULL, out, O, NULL);
}

extern "C" int mt_linear_bwd_in(struct mt_lt *lt, enum mt_dtype dt, void *din, const void *dout, const void *W,
				int64_t N, int64_t IN, int64_t O, int accumulate)
{
	cudaDataType_t t = cuda_type(dt);

	return lt_gemm(lt, 0, 0, IN, N, O, t, W, IN, dout, O, accumulate ? 1.0f : 0.0f, t, accumulate ? din : NULL,
		       din, IN, NULL);
}

extern "C" int mt_linear_bwd_w(struct mt_lt *lt, enum mt_dtype dt, float *dW, const void *dout, const void *in,
			       int64_t N, int64_t IN, int64_t O, int accumulate)
{
	return lt_gemm(lt, 0, 1, IN, O, N, cuda_type(dt), in, IN, dout, O, accumulate ? 1.0f : 0.0f, CUDA_R_32F, dW, dW,
		       IN, NULL);
}

extern "C" int mt_linear_fwd_gelu(struct mt_lt *lt, enum mt_dtype dt, void *act, void *pre, const void *in, const void *W,
				  const void *bias, int64_t N, int64_t IN, int64_t O)
{
	cudaDataType_t t = cuda_type(dt);
	int rc = O % 8 ? 1
		 : lt_gemm_epi(lt, 1, 0, O, N, IN, t, W, IN, in, IN, 0.0f, t, NULL, act, O, bias,
			       bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX, pre, O);

	if (rc <= 0)
		return rc;
	if (mt_linear_fwd(lt, dt, pre, in, W, bias, NULL, N, IN, O))
		return -1;
	return mt_gelu_fwd(dt, act, pre, N * O);
}

extern "C" int mt_linear_bwd_in_dgelu(struct mt_lt *lt, enum mt_dtype dt, void *din, const void *dout, const void *W,
				      const void *pre, int64_t N, int64_t IN, int64_t O)
{
	cudaDataType_t t = cuda_type(dt);
	int rc = IN % 8 ? 1
		 : lt_gemm_epi(lt, 0, 0, IN, N, O, t, W, IN, dout, O, 0.0f, t, NULL, din, IN, NULL, CUBLASLT_EPILOGUE_DGELU,
			       pre, IN);

	if (rc <= 0)
		return rc;
	if (mt_linear_bwd_in(lt, dt, din, dout, W, N, IN, O, 0))
		return -1;
	return mt_gelu_bwd(dt, din, din, pre, N * IN);
}
