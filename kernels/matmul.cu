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

// a pick, and the algorithm it was last matched to (for the pointers' alignments then)
struct lt_entry {
	struct mt_lt_pick p;
	int have;
	uint32_t al[4];
	cublasLtMatmulAlgo_t algo;
};

struct mt_lt {
	cublasLtHandle_t h;
	void *ws;
	size_t ws_bytes;
	struct lt_entry *e;
	int ne, cap;
	double sustain_ms;
	void (*tuned)(void *ctx, const struct mt_lt_pick *p, const char *msg);
	void *ctx;
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
	free(lt->e);
	free(lt);
}

extern "C" void mt_lt_tuning(struct mt_lt *lt, double sustain_ms,
			     void (*tuned)(void *ctx, const struct mt_lt_pick *p, const char *msg), void *ctx)
{
	lt->sustain_ms = sustain_ms > 0 ? sustain_ms : 0;
	lt->tuned = tuned;
	lt->ctx = ctx;
}

static struct lt_entry *find(struct mt_lt *lt, const struct mt_lt_key *k)
{
	for (int i = 0; i < lt->ne; i++)
		if (!memcmp(&lt->e[i].p.key, k, sizeof(*k)))
			return &lt->e[i];
	return NULL;
}

static_assert(sizeof(struct mt_lt_key) == 4 * sizeof(int) + 6 * sizeof(int64_t) + 2 * sizeof(int),
	      "mt_lt_key is compared whole: no padding");

extern "C" int mt_lt_add_pick(struct mt_lt *lt, const struct mt_lt_pick *p)
{
	struct lt_entry *e = find(lt, &p->key);

	if (!e) {
		if (lt->ne == lt->cap) {
			int cap = lt->cap ? 2 * lt->cap : 32;
			struct lt_entry *ne = (struct lt_entry *)realloc(lt->e, (size_t)cap * sizeof(*ne));
			if (!ne)
				return mt_cuda_fail(__FILE__, __LINE__, "out of host memory");
			lt->e = ne, lt->cap = cap;
		}
		e = &lt->e[lt->ne++];
	}
	memset(e, 0, sizeof(*e));
	e->p = *p;
	return 0;
}

extern "C" int mt_lt_ident(char *buf, size_t n)
{
	cudaDeviceProp prop;
	int dev = 0;

	if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
		return mt_cuda_fail(__FILE__, __LINE__, "cannot read the device's properties");
	snprintf(buf, n, "%s\tcuBLASLt %zu", prop.name, cublasLtGetVersion());
	return 0;
}

static const cublasLtMatmulAlgoConfigAttributes_t cfg_attr[MT_LT_CFG] = {
	CUBLASLT_ALGO_CONFIG_ID,          CUBLASLT_ALGO_CONFIG_TILE_ID,       CUBLASLT_ALGO_CONFIG_STAGES_ID,
	CUBLASLT_ALGO_CONFIG_SPLITK_NUM,  CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,
	CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID,
};

// an algorithm's configuration as the tuning file records it (the attributes are 16- or
// 32-bit, and cuBLASLt refuses a buffer of another size: each one's size asked first)
static void algo_cfg(const cublasLtMatmulAlgo_t *a, int *cfg)
{
	for (int i = 0; i < MT_LT_CFG; i++) {
		size_t sz = 0;
		uint32_t v32 = 0;
		uint16_t v16 = 0;
		cfg[i] = -1;
		if (cublasLtMatmulAlgoConfigGetAttribute(a, cfg_attr[i], NULL, 0, &sz) != CUBLAS_STATUS_SUCCESS)
			continue;
		if (sz == 4 && cublasLtMatmulAlgoConfigGetAttribute(a, cfg_attr[i], &v32, 4, &sz) == CUBLAS_STATUS_SUCCESS)
			cfg[i] = (int)v32;
		else if (sz == 2 && cublasLtMatmulAlgoConfigGetAttribute(a, cfg_attr[i], &v16, 2, &sz) == CUBLAS_STATUS_SUCCESS)
			cfg[i] = (int)v16;
	}
}

// ms a product with algorithm a, the output to S: launches in fives for about ms_total,
// the mean over those after the first 40% of it added to *tot / *cnt; 1 when a launch failed
static int sustain(struct mt_lt *lt, cublasLtMatmulDesc_t op, const void *A, cublasLtMatrixLayout_t la, const void *B,
		   cublasLtMatrixLayout_t lb, float beta, const void *C, cublasLtMatrixLayout_t lc, void *S,
		   const cublasLtMatmulAlgo_t *a, cudaEvent_t e0, cudaEvent_t e1, double *tot, long *cnt)
{
	float alpha = 1.0f;
	cudaEvent_t t0;
	float el = 0, ms = 0;

	if (cudaEventCreate(&t0) != cudaSuccess)
		return 1;
	cudaEventRecord(t0, MT_STREAM);
	for (;;) {
		cudaEventRecord(e0, MT_STREAM);
		for (int r = 0; r < 5; r++)
			if (cublasLtMatmul(lt->h, op, &alpha, A, la, B, lb, &beta, C, lc, S, lc, a, lt->ws, lt->ws_bytes,
					   MT_STREAM) != CUBLAS_STATUS_SUCCESS) {
				cudaEventSynchronize(e0);
				cudaEventDestroy(t0);
				return 1;
			}
		cudaEventRecord(e1, MT_STREAM);
		if (cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess ||
		    cudaEventElapsedTime(&el, t0, e1) != cudaSuccess) {
			cudaEventDestroy(t0);
			return 1;
		}
		if (el > 0.4 * lt->sustain_ms)
			*tot += ms, *cnt += 5;
		if (el >= lt->sustain_ms)
			break;
	}
	cudaEventDestroy(t0);
	return 0;
}

// time the candidates (split-K ones but the first left out: their partial sums may meet in
// any order, which the first choice, the default, would do anyway) and
// return the index of the pick, filling p; -1 where nothing was timed (p->ncand 0)
static int tune(struct mt_lt *lt, const struct mt_lt_key *k, cublasLtMatmulDesc_t op, const void *A,
		cublasLtMatrixLayout_t la, const void *B, cublasLtMatrixLayout_t lb, float beta, const void *C,
		cublasLtMatrixLayout_t lc, const cublasLtMatmulHeuristicResult_t *cand, int found, struct mt_lt_pick *p)
{
	size_t esz = k->cd == MT_F32 ? 4 : 2, bytes = ((size_t)k->ldd * (size_t)(k->n - 1) + (size_t)k->m) * esz;
	double tot[16] = { 0 };
	long cnt[16] = { 0 };
	int cfg[16][MT_LT_CFG], best = 0;
	cudaEvent_t e0 = NULL, e1 = NULL;
	void *S = NULL;

	memset(p, 0, sizeof(*p));
	p->key = *k;
	if (cudaMalloc(&S, bytes) != cudaSuccess) {
		cudaGetLastError();
		return -1;
	}
	if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
		cudaFree(S);
		return -1;
	}
	for (int i = 0; i < found && i < 16; i++)
		algo_cfg(&cand[i].algo, cfg[i]);
	for (int round = 0; round < 2; round++)
		for (int i = 0; i < found && i < 16; i++)
			if (!cand[i].state && (i == 0 || cfg[i][3] <= 1) && cnt[i] >= 0 &&
			    sustain(lt, op, A, la, B, lb, beta, beta != 0.0f ? C : S, lc, S, &cand[i].algo, e0, e1, &tot[i],
				    &cnt[i]))
				cnt[i] = -1;
	cudaGetLastError();
	for (int i = 0; i < found && i < 16; i++) {
		if (cnt[i] <= 0)
			continue;
		p->ncand++;
		if (cnt[best] <= 0 || tot[i] / cnt[i] < tot[best] / cnt[best])
			best = i;
	}
	if (cnt[0] > 0 && tot[best] / cnt[best] > 0.99 * tot[0] / cnt[0])
		best = 0;
	cudaEventDestroy(e0), cudaEventDestroy(e1);
	cudaFree(S);
	if (!p->ncand || cnt[best] <= 0)
		return -1;
	memcpy(p->cfg, cfg[best], sizeof(p->cfg));
	p->ms = (float)(tot[best] / cnt[best]);
	p->first_ms = cnt[0] > 0 ? (float)(tot[0] / cnt[0]) : p->ms;
	return best;
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

static int mt_type(cudaDataType_t t)
{
	return t == CUDA_R_32F ? MT_F32 : t == CUDA_R_16BF ? MT_BF16 : MT_F16;
}

// the algorithm of a product whose key may have a pick, or that tuning is to time: the
// pick's (matched among the heuristic's candidates, then remembered for these alignments),
// a new pick's, or the first candidate; 1 when cuBLASLt has none, -1 on an error
static int choose(struct mt_lt *lt, int ta, int tb, int64_t m, int64_t n, int64_t k, cudaDataType_t tab,
		  const void *A, int64_t lda, const void *B, int64_t ldb, float beta, cudaDataType_t tcd, const void *C,
		  void *D, int64_t ldd, cublasLtEpilogue_t epi, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la,
		  cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc, cublasLtMatmulPreference_t pref,
		  cublasLtMatmulAlgo_t *algo)
{
	cublasLtMatmulHeuristicResult_t cand[16];
	cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
	struct mt_lt_key key;
	struct mt_lt_pick p;
	struct lt_entry *e;
	uint32_t al[4] = { align_of(A), align_of(B), align_of(C ? C : D), align_of(D) };
	int found = 0, idx = -1;

	key.ab = mt_type(tab), key.cd = mt_type(tcd), key.ta = ta, key.tb = tb;
	key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldd = ldd;
	key.beta = beta != 0.0f, key.epi = (int)epi;
	e = find(lt, &key);
	if (e && e->have && !memcmp(e->al, al, sizeof(al))) {
		*algo = e->algo;
		return 0;
	}
	if (cublasLtMatmulAlgoGetHeuristic(lt->h, op, la, lb, lc, lc, pref, 16, cand, &found) != CUBLAS_STATUS_SUCCESS ||
	    !found)
		return 1;
	if (e) {
		for (int i = 0; i < found && idx < 0; i++) {
			int cfg[MT_LT_CFG];
			algo_cfg(&cand[i].algo, cfg);
			if (!cand[i].state && !memcmp(cfg, e->p.cfg, sizeof(cfg)))
				idx = i;
		}
		if (idx < 0 && lt->tuned && e->p.ncand)
			lt->tuned(lt->ctx, &e->p, "its pick is not among cuBLASLt's candidates here: the first taken");
	} else if (lt->sustain_ms > 0 && cudaStreamIsCapturing(MT_STREAM, &cap) == cudaSuccess &&
		   cap == cudaStreamCaptureStatusNone) {
		idx = tune(lt, &key, op, A, la, B, lb, beta, C ? C : D, lc, cand, found, &p);
		if (cudaPeekAtLastError() != cudaSuccess)
			return mt_cuda_fail(__FILE__, __LINE__, "tuning a product: %s", cudaGetErrorString(cudaGetLastError()));
		if (lt->tuned)
			lt->tuned(lt->ctx, &p, idx < 0 ? "not tuned (no scratch memory for its output)" : NULL);
		if (idx >= 0 && mt_lt_add_pick(lt, &p))
			return -1;
		e = find(lt, &key);
	}
	if (idx < 0)
		idx = 0;
	*algo = cand[idx].algo;
	if (!e) {
		// not tuned: remembered as the first candidate, not to be tried again
		memset(&p, 0, sizeof(p));
		p.key = key;
		algo_cfg(&cand[0].algo, p.cfg);
		if (mt_lt_add_pick(lt, &p))
			return -1;
		e = find(lt, &key);
	}
	e->have = 1;
	memcpy(e->al, al, sizeof(al));
	e->algo = *algo;
	return 0;
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
	cublasLtMatmulAlgo_t algo;
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
	if (lt->ne || lt->sustain_ms > 0) {
		rc = choose(lt, ta, tb, m, n, k, tab, A, lda, B, ldb, beta, tcd, C, D, ldd, epi, op, la, lb, lc, pref, &algo);
		if (rc) {
			rc = rc > 0 && !aux ? mt_cuda_fail(__FILE__, __LINE__, "cuBLASLt has no algorithm for %lld x %lld x %lld",
							  (long long)m, (long long)n, (long long)k)
					    : rc;
			goto out;
		}
	} else if (cublasLtMatmulAlgoGetHeuristic(lt->h, op, la, lb, lc, lc, pref, 1, &res, &found) != CUBLAS_STATUS_SUCCESS ||
		   !found) {
		rc = aux ? 1
			 : mt_cuda_fail(__FILE__, __LINE__, "cuBLASLt has no algorithm for %lld x %lld x %lld", (long long)m,
					(long long)n, (long long)k);
		goto out;
	} else {
		algo = res.algo;
	}
	LT_CHECK(cublasLtMatmul(lt->h, op, &alpha, A, la, B, lb, &beta, C ? C : D, lc, D, lc, &algo, lt->ws,
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
