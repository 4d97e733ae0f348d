/* infer_cuda.c: the CUDA inference engine of infer.h: one GPU, weights, activations and
 * the key/value cache in bf16 (mt_infer_cuda) or fp32 (mt_infer_cuda_fp32), the logits
 * in fp32. decode and prefill return logits, which sample.c reads on the host as it
 * reads the CPU engine's; decode_sample chooses the next tokens on the GPU
 * (kernels/sampling.cu: sample.h's rules) and copies back only the ids.
 *
 * Memory is planned at init: one device allocation for the weights (converted to the
 * compute type on the host), one for everything else (the cache of every layer,
 * [layer][slot][group][position][head size] for keys and the same for values, the
 * activations of one prefill chunk, the logits, the rotary table, cuBLASLt's
 * workspace), filled with NaN bytes so that a read of something never written shows;
 * a plan larger than the GPU's free memory is refused before anything is allocated.
 *
 * Prefill packs whole prompts end to end (no padding) into chunks of at least max_len
 * rows, so a prompt never straddles two chunks, and runs the training kernels on them:
 * norms, cuBLASLt linears with their bias, residual and GELU epilogues, SwiGLU, and the
 * causal flash-attention forward once per prompt; kvcache.cu rotates each row at its
 * own position and stores its keys and values in its slot. Logits are made only for
 * each prompt's last row, or for every row when log-probabilities are asked
 * (classifier_score.cu gives log p of the next token over the real vocabulary).
 *
 * A decode step of up to 16 rows (one per slot) runs five kernels a layer
 * (kernels/decode_linear.cu, decode_attention.cu): the first norm, the QKV product, its
 * bias, the rotary embedding and the cache append in one (the first layer's also makes
 * the embedding); the attention over each slot's cache, split over positions and
 * combined in the same kernel; the output projection with its bias and the residual
 * add; the second norm, fc1, its bias and GELU or SwiGLU; fc2 with its bias and the
 * residual add; then the final norm with the logits in one kernel, and for
 * decode_sample the sampling kernel. Each streams its weights once; on compute
 * capability 9.0 and above each may start while the one before it finishes
 * (programmatic dependent launch), loading its first weights before it waits. More rows,
 * or shapes those kernels do not take, run the prefill's layer sequence on one row per
 * slot with decode_attention.cu instead. MT_DECODE_FUSED=0 in the environment takes that
 * path at every row count, MT_CUDA_PDL=0 launches without programmatic dependence (both
 * for comparing). A step's launches are captured once per row count (and per kind:
 * logits or sampled ids) in a CUDA graph, with the copy of the step's inputs (tokens,
 * slots, positions, sampling parameters and uniform numbers) from pinned host memory at
 * its start and the copy of the logits or the ids back at its end, so a step costs one
 * graph launch and one wait on the host. MT_CUDA_GRAPHS=0 launches them one by one
 * instead (for comparing). Init ends with a warm-up (a prefill and decode steps at
 * batch 1 and max_batch, with and without sampling) so that module loading, cuBLASLt's
 * first calls and the four most used captures are paid there, not by the first
 * request. */
#include "infer/infer.h"

#include <stdlib.h>
#include <string.h>

#ifdef MT_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <math.h>

#include "../../kernels/attention.h"
#include "../../kernels/classifier_score.h"
#include "../../kernels/decode_attention.h"
#include "../../kernels/decode_linear.h"
#include "../../kernels/embed.h"
#include "../../kernels/kvcache.h"
#include "../../kernels/matmul.h"
#include "../../kernels/norm.h"
#include "../../kernels/sampling.h"
#include "../../kernels/swiglu.h"
#include "base/log.h"
#include "base/knobs.h"
#include "infer/sample.h"

#define WORKSPACE (32u << 20)
#define CHUNK_MIN 2048   /* prefill rows of one forward, at least max_len */
#define LOGIT_ROWS 128   /* logits made at a time in prefill, at least max_batch */

struct gpu {
	const struct mt_config *c;
	const struct mt_params *t;
	enum mt_dtype dt;
	size_t es;
	int64_t L, h, np, ng, hd, q, qkv, f, fc1, V, vocab;
	int64_t chunk, lrows, cache_elems; /* cache_elems: one layer's keys */
	size_t bytes[2], cache_bytes;
	void *mem[2];
	void *wc;                          /* weights in dt, params.h's layout */
	void *kc, *vc;
	void *x, *ln, *qkvb, *y, *mid, *fc1b, *act;
	float *stats, *lse, *scratch, *rope_cs, *logits, *nll;
	int32_t *rows, *hit;               /* device: [4][chunk] token, slot, position, target */
	void *dec;                         /* device: a decode step's inputs (struct dec_in) */
	int32_t *ids;                      /* device: sampled ids [max_batch] */
	int32_t *h_rows, *h_ids;           /* pinned host copies */
	void *h_dec;
	size_t dec_bytes;
	float *h_logits, *h_nll;           /* pinned: [max_batch][V], [chunk] */
	int *pos;                          /* tokens cached per slot */
	int *p_off, *p_len;                /* prompts of a chunk: first row, length */
	cudaStream_t st;
	struct mt_lt *lt;
	cudaGraphExec_t *graph[2];         /* [max_batch + 1]: the decode step for n rows, giving logits / ids */
	int use_graphs, failed;
	int fused;                         /* decode steps of up to FUSED_MAX_ROWS rows on decode_linear.h */
	int pdl;                           /* with programmatic dependent launch */
};

/* A decode step's inputs, one copy to the device: [3][max_batch] token, slot and position,
 * then the uniform numbers and the sampling parameters of decode_sample */
struct dec_in {
	int32_t *tok, *slot, *pos;
	double *u;
	struct mt_sample_dev *sp;
};

static struct dec_in dec_at(void *base, int B)
{
	struct dec_in d;
	size_t off = ((size_t)3 * (size_t)B * sizeof(int32_t) + 15) & ~(size_t)15;

	d.tok = base;
	d.slot = d.tok + B;
	d.pos = d.slot + B;
	d.u = (double *)((char *)base + off);
	d.sp = (struct mt_sample_dev *)(d.u + B);
	return d;
}

static size_t dec_size(int B)
{
	return (((size_t)3 * (size_t)B * sizeof(int32_t) + 15) & ~(size_t)15) + (size_t)B * sizeof(double) +
	       sizeof(struct mt_sample_dev);
}

static void *wp(const struct gpu *s, int layer, enum mt_param_kind k)
{
	const struct mt_param *p = mt_params_get(s->t, layer, k);
	return p ? (char *)s->wc + (size_t)p->offset * s->es : NULL;
}

static void *at(const struct gpu *s, void *base, int64_t r, int64_t width)
{
	return (char *)base + (size_t)(r * width) * s->es;
}

static int fail(struct gpu *s, struct mt_err *err, const char *what)
{
	s->failed = 1;
	return mt_err_set(err, MT_EXIT_IO, "CUDA inference engine: %s: %s", what, mt_cuda_error());
}

static int rt_fail(struct gpu *s, struct mt_err *err, const char *what, cudaError_t e)
{
	s->failed = 1;
	return mt_err_set(err, MT_EXIT_IO, "CUDA inference engine: %s: %s", what, cudaGetErrorString(e));
}

/* a launcher's failure: record and leave the function */
#define K(call)                                                                                    \
	do {                                                                                       \
		if ((call))                                                                        \
			return fail(s, err, #call);                                                \
	} while (0)
#define RT(call)                                                                                   \
	do {                                                                                       \
		cudaError_t e_ = (call);                                                           \
		if (e_ != cudaSuccess)                                                             \
			return rt_fail(s, err, #call, e_);                                         \
	} while (0)

/* ---- the plan ---- */

struct carve {
	char *base;
	size_t off;
};

static void *take(struct carve *k, size_t bytes)
{
	void *p = k->base ? k->base + k->off : NULL;
	k->off += (bytes + 255) & ~(size_t)255;
	return p;
}

/* lay out (base NULL: only measure) everything but the weights */
static size_t plan(struct gpu *s, struct mt_infer *e, char *base)
{
	struct carve k = { base, 0 };
	size_t es = s->es, n = (size_t)s->chunk;

	s->kc = take(&k, (size_t)s->L * (size_t)s->cache_elems * es);
	s->vc = take(&k, (size_t)s->L * (size_t)s->cache_elems * es);
	s->cache_bytes = k.off;
	s->x = take(&k, n * (size_t)s->h * es);
	s->ln = take(&k, n * (size_t)s->h * es);
	s->mid = take(&k, n * (size_t)s->h * es);
	s->qkvb = take(&k, n * (size_t)s->qkv * es);
	s->y = take(&k, n * (size_t)s->q * es);
	s->fc1b = take(&k, n * (size_t)s->fc1 * es);
	s->act = take(&k, n * (size_t)s->f * es);
	s->stats = take(&k, n * 2 * sizeof(float));
	s->lse = take(&k, n * (size_t)s->np * sizeof(float));
	s->scratch = take(&k, (size_t)mt_decode_attention_scratch(e->max_batch, (int)s->np, (int)s->hd, e->max_len) *
				      sizeof(float));
	s->ids = take(&k, (size_t)e->max_batch * sizeof(int32_t));
	s->rope_cs = take(&k, (size_t)e->max_len * (size_t)s->hd * sizeof(float));
	s->logits = take(&k, (size_t)s->lrows * (size_t)s->V * sizeof(float));
	s->nll = take(&k, n * sizeof(float));
	s->hit = take(&k, n * sizeof(int32_t));
	s->rows = take(&k, 4 * n * sizeof(int32_t));
	s->dec_bytes = dec_size(e->max_batch);
	s->dec = take(&k, s->dec_bytes);
	take(&k, WORKSPACE);
	return k.off;
}

static void gpu_free(struct mt_infer *e)
{
	struct gpu *s = e->state;

	if (!s)
		return;
	for (int k = 0; k < 2; k++) {
		if (s->graph[k])
			for (int n = 0; n <= e->max_batch; n++)
				if (s->graph[k][n])
					cudaGraphExecDestroy(s->graph[k][n]);
		free(s->graph[k]);
	}
	mt_lt_destroy(s->lt);
	if (s->st)
		cudaStreamDestroy(s->st);
	for (int i = 0; i < 2; i++)
		if (s->mem[i])
			cudaFree(s->mem[i]);
	if (s->h_rows)
		cudaFreeHost(s->h_rows);
	if (s->h_dec)
		cudaFreeHost(s->h_dec);
	if (s->h_ids)
		cudaFreeHost(s->h_ids);
	if (s->h_logits)
		cudaFreeHost(s->h_logits);
	if (s->h_nll)
		cudaFreeHost(s->h_nll);
	free(s->pos);
	free(s->p_off);
	free(s->p_len);
	free(s);
	e->state = NULL;
}

static double mib(size_t n) { return (double)n / (1024.0 * 1024.0); }

static uint16_t to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
	u += 0x7fffu + ((u >> 16) & 1u);     /* round to nearest even, as __float2bfloat16_rn */
	return (uint16_t)(u >> 16);
}

/* the weights to the device in the compute type */
static int upload(struct gpu *s, const float *w, struct mt_err *err)
{
	size_t n = (size_t)s->t->total;
	uint16_t *b;

	if (s->dt == MT_F32) {
		RT(cudaMemcpy(s->wc, w, n * sizeof(float), cudaMemcpyHostToDevice));
		return 0;
	}
	if (!(b = malloc(n * sizeof(uint16_t))))
		return mt_err_set(err, MT_EXIT_IO, "out of memory converting the weights to bf16");
	#pragma omp parallel for if (n > 65536)
	for (size_t i = 0; i < n; i++)
		b[i] = to_bf16(w[i]);
	{
		cudaError_t e = cudaMemcpy(s->wc, b, n * sizeof(uint16_t), cudaMemcpyHostToDevice);
		free(b);
		RT(e);
	}
	return 0;
}

static int setup(struct gpu *s, struct mt_infer *e, const float *w, struct mt_err *err);
static void choose_decode(struct gpu *s, struct mt_infer *e);
static int warm_up(struct mt_infer *e, struct mt_err *err);

static int gpu_init_dt(struct mt_infer *e, const struct mt_config *c, const struct mt_params *t, const float *w,
		       int max_batch, int max_len, enum mt_dtype dt, const struct mt_infer_ops *ops, struct mt_err *err)
{
	struct gpu *s = calloc(1, sizeof(*s));
	size_t free_b = 0, total_b = 0;
	int ndev = 0;
	cudaError_t ce;

	if (!s)
		return mt_err_set(err, MT_EXIT_IO, "out of memory for the inference engine");
	mt_knobs_to_kernels();
	memset(e, 0, sizeof(*e));
	e->ops = ops;
	e->state = s;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		cudaGetLastError();
		gpu_free(e);
		return mt_err_set(err, MT_EXIT_IO, "no CUDA device is visible: use --device cpu");
	}
	if (mt_infer_setup(e, c, max_batch, max_len, 65535, err)) { /* a grid dimension */
		gpu_free(e);
		return -1;
	}
	if (c->kv_channels != 8 && c->kv_channels != 16 && c->kv_channels != 32 && c->kv_channels != 64 &&
	    c->kv_channels != 128) {
		int hd = c->kv_channels;
		gpu_free(e);
		return mt_err_set(err, MT_EXIT_USAGE,
				  "the CUDA inference engine supports head sizes 8, 16, 32, 64 and 128, not %d: use --device cpu", hd);
	}
	s->c = c;
	s->t = t;
	s->dt = dt;
	s->es = dt == MT_F32 ? 4 : 2;
	s->L = c->num_layers;
	s->h = c->hidden_size;
	s->np = c->num_attention_heads;
	s->ng = c->num_query_groups;
	s->hd = c->kv_channels;
	s->q = s->np * s->hd;
	s->qkv = s->q + 2 * s->ng * s->hd;
	s->f = c->ffn_hidden_size;
	s->fc1 = c->swiglu ? 2 * s->f : s->f;
	s->V = c->padded_vocab_size;
	s->vocab = c->vocab_size;
	s->chunk = (int64_t)max_batch * max_len < CHUNK_MIN ? (int64_t)max_batch * max_len : CHUNK_MIN;
	if (s->chunk < max_len)
		s->chunk = max_len;
	s->lrows = max_batch > LOGIT_ROWS ? max_batch : LOGIT_ROWS;
	s->cache_elems = (int64_t)max_batch * s->ng * max_len * s->hd;
	s->use_graphs = mt_knob_on(MT_KNOB_CUDA_GRAPHS);
	s->bytes[0] = (size_t)t->total * s->es;
	s->bytes[1] = plan(s, e, NULL);
	s->pos = calloc((size_t)max_batch, sizeof(int));
	s->p_off = malloc((size_t)max_batch * sizeof(int));
	s->p_len = malloc((size_t)max_batch * sizeof(int));
	s->graph[0] = calloc((size_t)max_batch + 1, sizeof(*s->graph[0]));
	s->graph[1] = calloc((size_t)max_batch + 1, sizeof(*s->graph[1]));
	if (!s->pos || !s->p_off || !s->p_len || !s->graph[0] || !s->graph[1]) {
		gpu_free(e);
		return mt_err_set(err, MT_EXIT_IO, "out of memory for the inference engine");
	}
	ce = cudaMemGetInfo(&free_b, &total_b);
	if (ce != cudaSuccess) {
		gpu_free(e);
		return mt_err_set(err, MT_EXIT_IO, "cannot query the GPU's memory: %s", cudaGetErrorString(ce));
	}
	if (s->bytes[0] + s->bytes[1] + (64u << 20) > free_b) {
		size_t w0 = s->bytes[0], w1 = s->bytes[1], cb = s->cache_bytes;
		gpu_free(e);
		return mt_err_set(err, MT_EXIT_IO,
				  "the model does not fit the GPU: it needs %.0f MiB (weights %.0f, key/value cache %.0f, "
				  "activations %.0f) and %.0f MiB are free: lower --batch-size or --max-tokens",
				  mib(w0 + w1), mib(w0), mib(cb), mib(w1 - cb), mib(free_b));
	}
	for (int i = 0; i < 2; i++)
		if ((ce = cudaMalloc(&s->mem[i], s->bytes[i])) != cudaSuccess) {
			size_t b = s->bytes[i];
			gpu_free(e);
			return mt_err_set(err, MT_EXIT_IO, "cannot allocate %.0f MiB of GPU memory for the %s: %s", mib(b),
					  i ? "key/value cache and activations" : "weights", cudaGetErrorString(ce));
		}
	s->wc = s->mem[0];
	plan(s, e, s->mem[1]);
	if (setup(s, e, w, err) || warm_up(e, err)) {
		gpu_free(e);
		return -1;
	}
	return 0;
}

/* what init does once the device memory is there */
static int setup(struct gpu *s, struct mt_infer *e, const float *w, struct mt_err *err)
{
	const struct mt_config *c = s->c;
	int max_batch = e->max_batch, max_len = e->max_len;
	cudaError_t ce;
	float *cs;

	RT(cudaMallocHost((void **)&s->h_rows, 4 * (size_t)s->chunk * sizeof(int32_t)));
	RT(cudaMallocHost(&s->h_dec, s->dec_bytes));
	RT(cudaMallocHost((void **)&s->h_ids, (size_t)max_batch * sizeof(int32_t)));
	RT(cudaMallocHost((void **)&s->h_logits, (size_t)max_batch * (size_t)s->V * sizeof(float)));
	RT(cudaMallocHost((void **)&s->h_nll, (size_t)s->chunk * sizeof(float)));
	RT(cudaStreamCreateWithFlags(&s->st, cudaStreamNonBlocking));
	if (mt_lt_create(&s->lt, (char *)s->mem[1] + s->bytes[1] - WORKSPACE, WORKSPACE))
		return fail(s, err, "cuBLASLt");
	RT(cudaMemset(s->mem[1], 0xff, s->bytes[1])); /* NaN in every precision */
	{
		/* the attention's counters, after the fill on the same (legacy) stream */
		void *prev = mt_cuda_stream();
		int rc;
		mt_cuda_set_stream(NULL);
		rc = mt_decode_attention_reset(s->scratch, max_batch, (int)s->np, (int)s->hd, max_len);
		mt_cuda_set_stream(prev);
		if (rc)
			return fail(s, err, "decode attention");
	}
	if (upload(s, w, err))
		return -1;
	/* rotary table, in double as gpt.c computes it, rounded once */
	if (!(cs = malloc((size_t)max_len * (size_t)s->hd * sizeof(float))))
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	for (int64_t p = 0; p < max_len; p++)
		for (int64_t i = 0; i < s->hd / 2; i++) {
			double ang = (double)p * pow(c->rotary_base, -2.0 * (double)i / (double)s->hd);
			cs[(p * (s->hd / 2) + i) * 2] = (float)cos(ang);
			cs[(p * (s->hd / 2) + i) * 2 + 1] = (float)sin(ang);
		}
	ce = cudaMemcpy(s->rope_cs, cs, (size_t)max_len * (size_t)s->hd * sizeof(float), cudaMemcpyHostToDevice);
	free(cs);
	RT(ce);
	RT(cudaDeviceSynchronize());
	choose_decode(s, e);
	return 0;
}

static int gpu_init(struct mt_infer *e, const struct mt_config *c, const struct mt_params *t, const float *w,
		    int max_batch, int max_len, struct mt_err *err)
{
	return gpu_init_dt(e, c, t, w, max_batch, max_len, MT_BF16, &mt_infer_cuda, err);
}

static int gpu_init_fp32(struct mt_infer *e, const struct mt_config *c, const struct mt_params *t, const float *w,
			 int max_batch, int max_len, struct mt_err *err)
{
	return gpu_init_dt(e, c, t, w, max_batch, max_len, MT_F32, &mt_infer_cuda_fp32, err);
}

static size_t gpu_bytes(const struct mt_infer *e)
{
	const struct gpu *s = e->state;
	return s ? s->bytes[0] + s->bytes[1] : 0;
}

size_t mt_infer_cuda_cache_bytes(const struct mt_infer *e)
{
	const struct gpu *s = e->state;
	return s ? s->cache_bytes : 0;
}

/* ---- the forward pass ---- */

/* n rows (tokens, slots, positions: device arrays) from the embedding to the final norm,
 * leaving the normalized hidden states in s->ln. decode: each row attends over its slot's
 * cache; otherwise the rows are np_ whole prompts (s->p_off, s->p_len), each from position 0 */
static int forward(struct gpu *s, struct mt_infer *e, int64_t n, const int32_t *tok, const int32_t *slot,
		   const int32_t *pos, int decode, int np_, struct mt_err *err)
{
	const struct mt_config *c = s->c;
	enum mt_dtype dt = s->dt;
	int rms = c->normalization == MT_NORM_RMSNORM;
	float eps = (float)c->norm_epsilon;
	const float *cs = c->position_embedding_type == MT_POS_ROPE ? s->rope_cs : NULL;

	K(mt_embed_rows(dt, s->x, tok, pos, wp(s, -1, MT_P_WORD_EMB), wp(s, -1, MT_P_POS_EMB), n, s->h));
	for (int l = 0; l < s->L; l++) {
		void *kc = at(s, s->kc, l, s->cache_elems), *vc = at(s, s->vc, l, s->cache_elems);
		K(mt_norm_fwd(dt, s->ln, s->stats, s->x, wp(s, l, MT_P_LN1_W), wp(s, l, MT_P_LN1_B), n, s->h, rms, eps));
		K(mt_linear_fwd(s->lt, dt, s->qkvb, s->ln, wp(s, l, MT_P_QKV_W), wp(s, l, MT_P_QKV_B), NULL, n, s->h, s->qkv));
		K(mt_kv_append(dt, s->qkvb, kc, vc, slot, pos, cs, n, (int)s->np, (int)s->ng, (int)s->hd, e->max_len));
		if (decode) {
			K(mt_decode_attention(dt, s->y, s->qkvb, kc, vc, slot, pos, n, (int)s->np, (int)s->ng, (int)s->hd,
					      e->max_len, s->scratch, e->max_batch));
		} else {
			for (int k = 0; k < np_; k++)
				K(mt_attention_fwd(dt, at(s, s->y, s->p_off[k], s->q), s->lse, at(s, s->qkvb, s->p_off[k], s->qkv),
						   1, s->p_len[k], (int)s->np, (int)s->ng, (int)s->hd));
		}
		K(mt_linear_fwd(s->lt, dt, s->mid, s->y, wp(s, l, MT_P_PROJ_W), wp(s, l, MT_P_PROJ_B), s->x, n, s->q, s->h));
		K(mt_norm_fwd(dt, s->ln, s->stats, s->mid, wp(s, l, MT_P_LN2_W), wp(s, l, MT_P_LN2_B), n, s->h, rms, eps));
		if (c->swiglu) {
			K(mt_linear_fwd(s->lt, dt, s->fc1b, s->ln, wp(s, l, MT_P_FC1_W), wp(s, l, MT_P_FC1_B), NULL, n, s->h,
					s->fc1));
			K(mt_swiglu_fwd(dt, s->act, s->fc1b, n, s->f));
		} else {
			K(mt_linear_fwd_gelu(s->lt, dt, s->act, s->fc1b, s->ln, wp(s, l, MT_P_FC1_W), wp(s, l, MT_P_FC1_B), n,
					     s->h, s->fc1));
		}
		K(mt_linear_fwd(s->lt, dt, s->x, s->act, wp(s, l, MT_P_FC2_W), wp(s, l, MT_P_FC2_B), s->mid, n, s->f, s->h));
	}
	K(mt_norm_fwd(dt, s->ln, s->stats, s->x, wp(s, -1, MT_P_FINAL_W), wp(s, -1, MT_P_FINAL_B), n, s->h, rms, eps));
	return 0;
}

static void *output_weight(const struct gpu *s)
{
	return s->c->untie_embeddings_and_output_weights ? wp(s, -1, MT_P_OUTPUT) : wp(s, -1, MT_P_WORD_EMB);
}

/* ---- the fused decode step ---- */

enum { D_QKV, D_PROJ, D_FC1, D_FC2, D_HEAD };

/* decode_linear's arguments for kernel `which` of layer l (D_HEAD: the final norm and the
 * logits) and its inputs and outputs */
static void dlin_of(struct gpu *s, const struct mt_infer *e, int l, int which, const struct dec_in *d,
		    struct mt_dlin *a, int *in, int *out)
{
	const struct mt_config *c = s->c;

	memset(a, 0, sizeof(*a));
	a->rms = c->normalization == MT_NORM_RMSNORM;
	a->eps = (float)c->norm_epsilon;
	switch (which) {
	case D_QKV:
		a->x = s->x;
		a->ldx = s->h;
		a->norm_w = wp(s, l, MT_P_LN1_W);
		a->norm_b = wp(s, l, MT_P_LN1_B);
		if (l == 0) { /* the embedding, made by every block, kept by one */
			a->tok = d->tok;
			a->wte = wp(s, -1, MT_P_WORD_EMB);
			a->wpe = wp(s, -1, MT_P_POS_EMB);
			a->x_out = s->x;
		}
		a->W = wp(s, l, MT_P_QKV_W);
		a->bias = wp(s, l, MT_P_QKV_B);
		a->epi = MT_DLIN_QKV;
		a->out = s->qkvb;
		a->ldo = s->qkv;
		a->kc = at(s, s->kc, l, s->cache_elems);
		a->vc = at(s, s->vc, l, s->cache_elems);
		a->slot = d->slot;
		a->pos = d->pos;
		a->cs = c->position_embedding_type == MT_POS_ROPE ? s->rope_cs : NULL;
		a->np = (int)s->np;
		a->ng = (int)s->ng;
		a->hd = (int)s->hd;
		a->max_len = e->max_len;
		*in = (int)s->h;
		*out = (int)s->qkv;
		break;
	case D_PROJ:
		a->x = s->y;
		a->ldx = s->q;
		a->W = wp(s, l, MT_P_PROJ_W);
		a->bias = wp(s, l, MT_P_PROJ_B);
		a->epi = MT_DLIN_RESID;
		a->out = s->x;
		a->ldo = s->h;
		*in = (int)s->q;
		*out = (int)s->h;
		break;
	case D_FC1:
		a->x = s->x;
		a->ldx = s->h;
		a->norm_w = wp(s, l, MT_P_LN2_W);
		a->norm_b = wp(s, l, MT_P_LN2_B);
		a->W = wp(s, l, MT_P_FC1_W);
		a->bias = wp(s, l, MT_P_FC1_B);
		a->epi = c->swiglu ? MT_DLIN_SWIGLU : MT_DLIN_GELU;
		a->out = s->act;
		a->ldo = s->f;
		*in = (int)s->h;
		*out = (int)s->fc1;
		break;
	case D_FC2:
		a->x = s->act;
		a->ldx = s->f;
		a->W = wp(s, l, MT_P_FC2_W);
		a->bias = wp(s, l, MT_P_FC2_B);
		a->epi = MT_DLIN_RESID;
		a->out = s->x;
		a->ldo = s->h;
		*in = (int)s->f;
		*out = (int)s->h;
		break;
	default:
		a->x = s->x;
		a->ldx = s->h;
		a->norm_w = wp(s, -1, MT_P_FINAL_W);
		a->norm_b = wp(s, -1, MT_P_FINAL_B);
		a->W = output_weight(s);
		a->epi = MT_DLIN_F32;
		a->out = s->logits;
		a->ldo = s->V;
		*in = (int)s->h;
		*out = (int)s->V;
	}
}

/* The fused step up to 16 rows, the prefill's layer sequence (cuBLASLt) above: on an H200
 * (2026-11-27, GPT-2 124M bf16, 1000 greedy tokens, GPU sampling either way) the fused
 * kernels gave 2,677 against 1,903 tokens/s at one row, 16,761 against 13,893 at 8, 25,070
 * against 24,886 at 16, but 29,340 against 41,877 at 32, where the products are big enough
 * for cuBLASLt's tensor-core tiles. */
#define FUSED_MAX_ROWS 16
_Static_assert(FUSED_MAX_ROWS <= MT_DLIN_MAX_ROWS, "the fused kernels take at most MT_DLIN_MAX_ROWS rows");

/* whether decode steps of up to FUSED_MAX_ROWS rows take the fused kernels (every one
 * of them fits the model at the largest such row count), and with programmatic
 * dependent launch */
static void choose_decode(struct gpu *s, struct mt_infer *e)
{
	int N = e->max_batch < FUSED_MAX_ROWS ? e->max_batch : FUSED_MAX_ROWS, dev = 0, major = 0, in, out;
	struct dec_in d = dec_at(s->dec, e->max_batch);
	struct mt_dlin a;

	s->fused = mt_knob_on(MT_KNOB_DECODE_FUSED);
	for (int l = 0; l < s->L && s->fused; l++)
		for (int k = D_QKV; k <= D_FC2 && s->fused; k++) {
			dlin_of(s, e, l, k, &d, &a, &in, &out);
			s->fused = mt_decode_linear_fits(s->dt, &a, N, in, out);
		}
	if (s->fused) {
		dlin_of(s, e, 0, D_HEAD, &d, &a, &in, &out);
		s->fused = mt_decode_linear_fits(s->dt, &a, N, in, out);
	}
	if (!s->fused && mt_knob_on(MT_KNOB_DECODE_FUSED))
		mt_debug("CUDA inference engine: decode steps on the prefill's kernels: %s", mt_cuda_error());
	s->pdl = s->fused && mt_knob_on(MT_KNOB_CUDA_PDL) && cudaGetDevice(&dev) == cudaSuccess &&
		 cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 9;
}

/* the fused step's launches: five a layer, then the logits */
static int fused_step(struct gpu *s, struct mt_infer *e, int n, const struct dec_in *d, struct mt_err *err)
{
	struct mt_dlin a;
	int in, out;

	for (int l = 0; l < s->L; l++) {
		dlin_of(s, e, l, D_QKV, d, &a, &in, &out);
		K(mt_decode_linear(s->dt, &a, n, in, out));
		mt_cuda_set_pdl(s->pdl); /* from the second launch on: the first follows the inputs' copy */
		K(mt_decode_attention(s->dt, s->y, s->qkvb, a.kc, a.vc, d->slot, d->pos, n, (int)s->np, (int)s->ng,
				      (int)s->hd, e->max_len, s->scratch, e->max_batch));
		for (int k = D_PROJ; k <= D_FC2; k++) {
			dlin_of(s, e, l, k, d, &a, &in, &out);
			K(mt_decode_linear(s->dt, &a, n, in, out));
		}
	}
	dlin_of(s, e, 0, D_HEAD, d, &a, &in, &out);
	K(mt_decode_linear(s->dt, &a, n, in, out));
	return 0;
}

/* one chunk of prefill: prompts [i0, i1) packed from row 0, m rows */
static int prefill_chunk(struct gpu *s, struct mt_infer *e, int i0, int i1, int64_t m, const int *slots,
			 const int32_t *const *tokens, const int *lens, float *logits, float *const *lp,
			 struct mt_err *err)
{
	int32_t *ht = s->h_rows, *hs = ht + s->chunk, *hp = hs + s->chunk, *hg = hp + s->chunk;
	int32_t *dt_ = s->rows, *ds = dt_ + s->chunk, *dp = ds + s->chunk, *dg = dp + s->chunk;
	int npr = i1 - i0;
	int64_t r = 0, nrows;
	void *src;

	RT(cudaStreamSynchronize(s->st)); /* the pinned rows of the last chunk are read */
	for (int i = i0; i < i1; i++) {
		s->p_off[i - i0] = (int)r;
		s->p_len[i - i0] = lens[i];
		for (int j = 0; j < lens[i]; j++, r++) {
			ht[r] = tokens[i][j];
			hs[r] = slots ? slots[i] : i;
			hp[r] = j;
			hg[r] = j + 1 < lens[i] ? tokens[i][j + 1] : -1;
		}
	}
	for (int k = 0; k < 4; k++)
		RT(cudaMemcpyAsync(s->rows + k * s->chunk, s->h_rows + k * s->chunk, (size_t)m * sizeof(int32_t),
				   cudaMemcpyHostToDevice, s->st));
	if (forward(s, e, m, dt_, ds, dp, 0, npr, err))
		return -1;
	/* the rows that need logits: all of them with log-probabilities, else each prompt's
	 * last, gathered into s->mid */
	if (lp) {
		src = s->ln;
		nrows = m;
	} else {
		for (int k = 0; k < npr; k++)
			RT(cudaMemcpyAsync(at(s, s->mid, k, s->h), at(s, s->ln, s->p_off[k] + s->p_len[k] - 1, s->h),
					   (size_t)s->h * s->es, cudaMemcpyDeviceToDevice, s->st));
		src = s->mid;
		nrows = npr;
	}
	for (int64_t r0 = 0; r0 < nrows; r0 += s->lrows) {
		int64_t rows = nrows - r0 < s->lrows ? nrows - r0 : s->lrows;
		K(mt_linear_fwd_f32(s->lt, s->dt, s->logits, at(s, src, r0, s->h), output_weight(s), rows, s->h, s->V));
		if (lp)
			K(mt_classifier_score(MT_F32, s->logits, s->nll + r0, s->hit + r0, dg + r0, rows, s->V, s->vocab));
		for (int k = 0; k < npr; k++) {
			int64_t last = lp ? s->p_off[k] + s->p_len[k] - 1 : k;
			if (last >= r0 && last < r0 + rows)
				RT(cudaMemcpyAsync(logits + (int64_t)(i0 + k) * s->V, s->logits + (last - r0) * s->V,
						   (size_t)s->V * sizeof(float), cudaMemcpyDeviceToHost, s->st));
		}
	}
	if (lp) {
		RT(cudaMemcpyAsync(s->h_nll, s->nll, (size_t)m * sizeof(float), cudaMemcpyDeviceToHost, s->st));
		RT(cudaStreamSynchronize(s->st));
		for (int k = 0; k < npr; k++)
			for (int j = 0; j + 1 < s->p_len[k]; j++)
				lp[i0 + k][j] = -s->h_nll[s->p_off[k] + j];
	}
	return 0;
}

static int gpu_prefill(struct mt_infer *e, int n, const int *slots, const int32_t *const *tokens, const int *lens,
		       float *logits, float *const *lp, struct mt_err *err)
{
	struct gpu *s = e->state;
	void *prev = mt_cuda_stream();
	int i = 0, rc = 0;

	if (s->failed)
		return mt_err_set(err, MT_EXIT_IO, "CUDA inference engine: unusable after an earlier failure");
	if (mt_infer_check_prefill(e, n, slots, tokens, lens, lp != NULL, err))
		return -1;
	for (int k = 0; k < n; k++)
		s->pos[slots ? slots[k] : k] = 0;
	mt_cuda_set_stream(s->st);
	while (i < n && !rc) {
		int i1 = i;
		int64_t m = 0;
		while (i1 < n && m + lens[i1] <= s->chunk)
			m += lens[i1++];
		rc = prefill_chunk(s, e, i, i1, m, slots, tokens, lens, logits, lp, err);
		i = i1;
	}
	if (!rc) {
		cudaError_t ce = cudaStreamSynchronize(s->st);
		if (ce != cudaSuccess)
			rc = rt_fail(s, err, "prefill", ce);
	}
	mt_cuda_set_stream(prev);
	if (rc)
		return -1;
	for (int k = 0; k < n; k++)
		s->pos[slots ? slots[k] : k] = lens[k];
	return 0;
}

/* the launches of one decode step of n rows, the inputs in s->h_dec: logits, or with
 * sample the chosen ids, copied back */
static int step_launches(struct gpu *s, struct mt_infer *e, int n, int sample, struct mt_err *err)
{
	struct dec_in d = dec_at(s->dec, e->max_batch);

	RT(cudaMemcpyAsync(s->dec, s->h_dec, s->dec_bytes, cudaMemcpyHostToDevice, s->st));
	if (s->fused && n <= FUSED_MAX_ROWS) {
		if (fused_step(s, e, n, &d, err))
			return -1;
	} else {
		if (forward(s, e, n, d.tok, d.slot, d.pos, 1, 0, err))
			return -1;
		K(mt_linear_fwd_f32(s->lt, s->dt, s->logits, s->ln, output_weight(s), n, s->h, s->V));
	}
	if (sample) {
		K(mt_sample_rows(s->ids, s->logits, s->V, s->vocab, n, d.sp, d.u));
		mt_cuda_set_pdl(0);
		RT(cudaMemcpyAsync(s->h_ids, s->ids, (size_t)n * sizeof(int32_t), cudaMemcpyDeviceToHost, s->st));
	} else {
		mt_cuda_set_pdl(0);
		RT(cudaMemcpyAsync(s->h_logits, s->logits, (size_t)n * (size_t)s->V * sizeof(float), cudaMemcpyDeviceToHost,
				   s->st));
	}
	return 0;
}

static int step(struct gpu *s, struct mt_infer *e, int n, int sample, struct mt_err *err)
{
	int rc = step_launches(s, e, n, sample, err);

	mt_cuda_set_pdl(0);
	return rc;
}

static int capture(struct gpu *s, struct mt_infer *e, int n, int sample, struct mt_err *err)
{
	cudaGraph_t g = NULL;
	cudaError_t ce;
	int rc;

	RT(cudaStreamBeginCapture(s->st, cudaStreamCaptureModeThreadLocal));
	rc = step(s, e, n, sample, err);
	ce = cudaStreamEndCapture(s->st, &g);
	if (rc) {
		if (g)
			cudaGraphDestroy(g);
		return -1;
	}
	if (ce != cudaSuccess)
		return rt_fail(s, err, "capturing the decode step", ce);
	ce = cudaGraphInstantiate(&s->graph[sample][n], g, 0);
	cudaGraphDestroy(g);
	if (ce != cudaSuccess) {
		s->graph[sample][n] = NULL;
		return rt_fail(s, err, "instantiating the decode step", ce);
	}
	return 0;
}

/* a decode step: the inputs checked and staged, the graph (captured the first time) or
 * the launches, and the wait; sp and u with sample */
static int run_step(struct mt_infer *e, int n, const int *slots, const int32_t *tokens,
		    const struct mt_sample_params *sp, const double *u, int sample, struct mt_err *err)
{
	struct gpu *s = e->state;
	struct dec_in h = dec_at(s->h_dec, e->max_batch);
	void *prev = mt_cuda_stream();
	int rc = 0;

	if (s->failed)
		return mt_err_set(err, MT_EXIT_IO, "CUDA inference engine: unusable after an earlier failure");
	if (mt_infer_check_decode(e, n, slots, tokens, s->pos, err))
		return -1;
	if (sample && mt_sample_check(sp, err))
		return -1;
	for (int k = 0; k < n; k++) {
		int sl = slots ? slots[k] : k;
		h.tok[k] = tokens[k];
		h.slot[k] = sl;
		h.pos[k] = s->pos[sl];
		if (sample)
			h.u[k] = u[k];
	}
	if (sample) {
		h.sp->temperature = sp->temperature;
		h.sp->top_p = sp->top_p;
		h.sp->top_k = sp->top_k;
		h.sp->pad = 0;
	}
	mt_cuda_set_stream(s->st);
	if (s->use_graphs && !s->graph[sample][n] && s->pdl && capture(s, e, n, sample, err)) {
		/* a driver that cannot capture programmatic dependences: without them */
		mt_warn("CUDA inference engine: no CUDA graph of the decode step with programmatic dependent launch (%s): "
			"launching without it",
			err->msg);
		cudaGetLastError();
		s->pdl = 0;
		s->failed = 0;
	}
	if (s->use_graphs && !s->graph[sample][n] && capture(s, e, n, sample, err)) {
		/* launched one by one from now on, as MT_CUDA_GRAPHS=0 */
		mt_warn("CUDA inference engine: no CUDA graph for the decode step (%s): launching its kernels one by one",
			err->msg);
		cudaGetLastError();
		s->use_graphs = 0;
		s->failed = 0;
	}
	if (s->use_graphs) {
		cudaError_t ce = cudaGraphLaunch(s->graph[sample][n], s->st);
		if (ce != cudaSuccess)
			rc = rt_fail(s, err, "launching the decode step", ce);
	} else {
		rc = step(s, e, n, sample, err);
	}
	if (!rc) {
		cudaError_t ce = cudaStreamSynchronize(s->st);
		if (ce != cudaSuccess)
			rc = rt_fail(s, err, "decode step", ce);
	}
	mt_cuda_set_stream(prev);
	if (rc)
		return -1;
	for (int k = 0; k < n; k++)
		s->pos[h.slot[k]]++;
	return 0;
}

static int gpu_decode(struct mt_infer *e, int n, const int *slots, const int32_t *tokens, float *logits,
		      struct mt_err *err)
{
	struct gpu *s = e->state;

	if (run_step(e, n, slots, tokens, NULL, NULL, 0, err))
		return -1;
	memcpy(logits, s->h_logits, (size_t)n * (size_t)s->V * sizeof(float));
	return 0;
}

static int gpu_decode_sample(struct mt_infer *e, int n, const int *slots, const int32_t *tokens,
			     const struct mt_sample_params *sp, const double *u, int32_t *next, struct mt_err *err)
{
	struct gpu *s = e->state;

	if (run_step(e, n, slots, tokens, sp, u, 1, err))
		return -1;
	memcpy(next, s->h_ids, (size_t)n * sizeof(int32_t));
	return 0;
}

/* One prefill of max_batch one-token prompts, then decode steps of max_batch rows and of
 * one, giving logits and sampled ids: the kernels' modules load, cuBLASLt picks its
 * algorithms and the four most used decode graphs are captured here rather than in the
 * first request. Slot 0 holds the most tokens; every step needs room there. The slots
 * are empty again afterwards. */
static int warm_up(struct mt_infer *e, struct mt_err *err)
{
	struct gpu *s = e->state;
	int B = e->max_batch, rc = -1;
	int32_t *tok = calloc((size_t)B, sizeof(int32_t)), *ids = malloc((size_t)B * sizeof(int32_t));
	int *len = malloc((size_t)B * sizeof(int));
	const int32_t **tp = malloc((size_t)B * sizeof(*tp));
	float *z = malloc((size_t)B * (size_t)s->V * sizeof(float));
	double *u = calloc((size_t)B, sizeof(double));
	struct mt_sample_params greedy = { 0, 0, 0 };
	int rows[4] = { B, B, 1, 1 };

	if (!tok || !ids || !len || !tp || !z || !u) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out;
	}
	for (int i = 0; i < B; i++) {
		len[i] = 1;
		tp[i] = tok + i;
	}
	if (gpu_prefill(e, B, NULL, tp, len, z, NULL, err))
		goto out;
	for (int k = 0; k < 4; k++) {
		if (s->pos[0] >= e->max_len || (k >= 2 && B == 1))
			break;
		if (k % 2 ? gpu_decode_sample(e, rows[k], NULL, tok, &greedy, u, ids, err)
			  : gpu_decode(e, rows[k], NULL, tok, z, err))
			goto out;
	}
	memset(s->pos, 0, (size_t)B * sizeof(int));
	rc = 0;
out:
	free(tok);
	free(ids);
	free(len);
	free(tp);
	free(z);
	free(u);
	return rc;
}

#else /* no CUDA in this build */

static int gpu_refuse(struct mt_infer *e, struct mt_err *err)
{
	memset(e, 0, sizeof(*e));
	return mt_err_set(err, MT_EXIT_USAGE, "this build has no CUDA inference engine (nvcc was not found): use --device cpu");
}
static int gpu_init(struct mt_infer *e, const struct mt_config *c, const struct mt_params *t, const float *w,
		    int max_batch, int max_len, struct mt_err *err)
{
	(void)c, (void)t, (void)w, (void)max_batch, (void)max_len;
	return gpu_refuse(e, err);
}
static int gpu_init_fp32(struct mt_infer *e, const struct mt_config *c, const struct mt_params *t, const float *w,
			 int max_batch, int max_len, struct mt_err *err)
{
	(void)c, (void)t, (void)w, (void)max_batch, (void)max_len;
	return gpu_refuse(e, err);
}
static void gpu_free(struct mt_infer *e) { (void)e; }
static int gpu_prefill(struct mt_infer *e, int n, const int *slots, const int32_t *const *tokens, const int *lens,
		       float *logits, float *const *lp, struct mt_err *err)
{
	(void)e, (void)n, (void)slots, (void)tokens, (void)lens, (void)logits, (void)lp;
	return mt_err_set(err, MT_EXIT_USAGE, "this build has no CUDA inference engine");
}
static int gpu_decode(struct mt_infer *e, int n, const int *slots, const int32_t *tokens, float *logits,
		      struct mt_err *err)
{
	(void)e, (void)n, (void)slots, (void)tokens, (void)logits;
	return mt_err_set(err, MT_EXIT_USAGE, "this build has no CUDA inference engine");
}
static int gpu_decode_sample(struct mt_infer *e, int n, const int *slots, const int32_t *tokens,
			     const struct mt_sample_params *sp, const double *u, int32_t *next, struct mt_err *err)
{
	(void)e, (void)n, (void)slots, (void)tokens, (void)sp, (void)u, (void)next;
	return mt_err_set(err, MT_EXIT_USAGE, "this build has no CUDA inference engine");
}
static size_t gpu_bytes(const struct mt_infer *e)
{
	(void)e;
	return 0;
}
size_t mt_infer_cuda_cache_bytes(const struct mt_infer *e)
{
	(void)e;
	return 0;
}
#endif

const struct mt_infer_ops mt_infer_cuda = {
	.name = "cuda",
	.init = gpu_init,
	.free = gpu_free,
	.prefill = gpu_prefill,
	.decode = gpu_decode,
	.decode_sample = gpu_decode_sample,
	.bytes = gpu_bytes,
};

const struct mt_infer_ops mt_infer_cuda_fp32 = {
	.name = "cuda",
	.init = gpu_init_fp32,
	.free = gpu_free,
	.prefill = gpu_prefill,
	.decode = gpu_decode,
	.decode_sample = gpu_decode_sample,
	.bytes = gpu_bytes,
};
