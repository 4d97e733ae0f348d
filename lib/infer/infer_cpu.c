/* infer_cpu.c: the CPU inference engine of infer.h (fp32, OpenBLAS, OpenMP).
 *
 * Prompts are packed end to end (no padding) and processed in chunks of up to CHUNK
 * rows; each row knows its slot and position. Per layer, a chunk's keys and values go
 * into the cache first, then each row attends over its slot's cache up to and
 * including its own position, which is causal attention whether the earlier tokens came
 * in this chunk, an earlier chunk or an earlier call. A decode step is a chunk of one
 * row per slot. The cache is [layer][slot][group][position][head size] for keys and the
 * same for values, so one head's history is contiguous. The arithmetic is gpt_impl.h's
 * (norm statistics in double, the same rotary angles) except where speed asked for float:
 * attention's dot products and sums go to gemv, and the activations use expf; the
 * logits agree with gpt.c's forward to ~1e-6 (tests/unit/test_infer.c holds them to 1e-5). */
#include "infer/infer.h"
#include "model/gpt.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_MIN 128

struct cpu {
	const struct mt_config *c;
	const struct mt_params *t;
	const float *w;
	int64_t L, h, np, ng, hd, q, kv, qkv, f, fc1, V, vocab;
	int chunk;
	float *kc, *vc;         /* caches */
	int *pos;               /* tokens cached per slot */
	double *rcos, *rsin;    /* rotary tables [max_len][hd/2] */
	/* scratch for one chunk */
	float *x, *ln, *stats, *qkvb, *y, *mid, *fc1b, *act, *logits;
	int *row_slot, *row_pos, *row_k; /* slot, position, prompt of each row */
	int32_t *row_tok;
	size_t bytes;
};

size_t mt_infer_cache_bytes(const struct mt_config *c, int max_batch, int max_len)
{
	return (size_t)c->num_layers * 2 * (size_t)max_batch * (size_t)c->num_query_groups * (size_t)max_len *
	       (size_t)c->kv_channels * sizeof(float);
}

static const float *P(const struct cpu *s, int layer, enum mt_param_kind k)
{
	const struct mt_param *p = mt_params_get(s->t, layer, k);
	return p ? s->w + p->offset : NULL;
}

/* row offsets in a fused qkv row (params.h: per group, its query heads, key, value) */
static int64_t qoff(const struct cpu *s, int64_t hh)
{
	int64_t per = s->np / s->ng, g = hh / per;
	return (g * (per + 2) + hh % per) * s->hd;
}
static int64_t koff(const struct cpu *s, int64_t g) { return (g * (s->np / s->ng + 2) + s->np / s->ng) * s->hd; }

static void cpu_free(struct mt_infer *e)
{
	struct cpu *s = e->state;

	if (!s)
		return;
	free(s->kc);
	free(s->vc);
	free(s->pos);
	free(s->rcos);
	free(s->rsin);
	free(s->x);
	free(s->ln);
	free(s->stats);
	free(s->qkvb);
	free(s->y);
	free(s->mid);
	free(s->fc1b);
	free(s->act);
	free(s->logits);
	free(s->row_slot);
	free(s->row_pos);
	free(s->row_k);
	free(s->row_tok);
	free(s);
	e->state = NULL;
}

static void *alloc_f(struct cpu *s, size_t n, size_t es)
{
	s->bytes += n * es;
	return malloc(n > 0 ? n * es : 1);
}

static int cpu_init(struct mt_infer *e, const struct mt_config *c, const struct mt_params *t, const float *w,
		    int max_batch, int max_len, struct mt_err *err)
{
	struct cpu *s = calloc(1, sizeof(*s));
	size_t cache;
	int64_t ch;

	if (!s)
		return mt_err_set(err, MT_EXIT_IO, "out of memory for the inference engine");
	memset(e, 0, sizeof(*e));
	e->ops = &mt_infer_cpu;
	e->state = s;
	if (mt_infer_setup(e, c, max_batch, max_len, INT_MAX, err)) {
		cpu_free(e);
		return -1;
	}
	s->c = c;
	s->t = t;
	s->w = w;
	s->L = c->num_layers;
	s->h = c->hidden_size;
	s->np = c->num_attention_heads;
	s->ng = c->num_query_groups;
	s->hd = c->kv_channels;
	s->q = s->np * s->hd;
	s->kv = s->ng * s->hd;
	s->qkv = s->q + 2 * s->kv;
	s->f = c->ffn_hidden_size;
	s->fc1 = c->swiglu ? 2 * s->f : s->f;
	s->V = c->padded_vocab_size;
	s->vocab = c->vocab_size;
	s->chunk = max_batch > CHUNK_MIN ? max_batch : CHUNK_MIN;
	ch = s->chunk;
	cache = mt_infer_cache_bytes(c, max_batch, max_len) / sizeof(float);
	s->kc = alloc_f(s, cache / 2, sizeof(float));
	s->vc = alloc_f(s, cache / 2, sizeof(float));
	s->pos = alloc_f(s, (size_t)max_batch, sizeof(int));
	s->rcos = alloc_f(s, (size_t)max_len * (size_t)(s->hd / 2), sizeof(double));
	s->rsin = alloc_f(s, (size_t)max_len * (size_t)(s->hd / 2), sizeof(double));
	s->x = alloc_f(s, (size_t)(ch * s->h), sizeof(float));
	s->ln = alloc_f(s, (size_t)(ch * s->h), sizeof(float));
	s->stats = alloc_f(s, (size_t)(2 * ch), sizeof(float)); /* the norms' mean and 1/std, unused */
	s->qkvb = alloc_f(s, (size_t)(ch * s->qkv), sizeof(float));
	s->y = alloc_f(s, (size_t)(ch * s->q), sizeof(float));
	s->mid = alloc_f(s, (size_t)(ch * s->h), sizeof(float));
	s->fc1b = alloc_f(s, (size_t)(ch * s->fc1), sizeof(float));
	s->act = alloc_f(s, (size_t)(ch * s->f), sizeof(float));
	s->logits = alloc_f(s, (size_t)(ch * s->V), sizeof(float));
	s->row_slot = alloc_f(s, (size_t)ch, sizeof(int));
	s->row_pos = alloc_f(s, (size_t)ch, sizeof(int));
	s->row_k = alloc_f(s, (size_t)ch, sizeof(int));
	s->row_tok = alloc_f(s, (size_t)ch, sizeof(int32_t));
	if (!s->kc || !s->vc || !s->pos || !s->rcos || !s->rsin || !s->x || !s->ln || !s->stats || !s->qkvb || !s->y ||
	    !s->mid || !s->fc1b || !s->act || !s->logits || !s->row_slot || !s->row_pos || !s->row_k || !s->row_tok) {
		size_t b = s->bytes;
		cpu_free(e);
		return mt_err_set(err, MT_EXIT_IO, "out of memory: the inference engine needs %zu MB (batch %d, length %d)",
				  b >> 20, max_batch, max_len);
	}
	memset(s->pos, 0, (size_t)max_batch * sizeof(int));
	/* the angles of gpt_impl.h's rope(), once per position */
	for (int64_t p = 0; p < max_len; p++)
		for (int64_t i = 0; i < s->hd / 2; i++) {
			double ang = (double)p * pow(c->rotary_base, -2.0 * (double)i / (double)s->hd);
			s->rcos[p * (s->hd / 2) + i] = cos(ang);
			s->rsin[p * (s->hd / 2) + i] = sin(ang);
		}
	return 0;
}

static size_t cpu_bytes(const struct mt_infer *e)
{
	const struct cpu *s = e->state;
	return s ? s->bytes : 0;
}

/* out[N,O] = in[N,IN] @ W[O,IN]^T + b */
static void linear(float *out, const float *in, const float *W, const float *b, int64_t N, int64_t IN, int64_t O)
{
	if (N == 1) /* a decode step at batch 1: OpenBLAS's gemv is faster than its gemm with one row */
		cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)O, (int)IN, 1, W, (int)IN, in, 1, 0, out, 1);
	else
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)N, (int)O, (int)IN, 1, in, (int)IN, W, (int)IN, 0,
			    out, (int)O);
	if (b) {
		#pragma omp parallel for if (N * O > 65536)
		for (int64_t n = 0; n < N; n++)
			for (int64_t o = 0; o < O; o++)
				out[n * O + o] += b[o];
	}
}

static void rope_row(const struct cpu *s, float *x, int pos)
{
	int64_t half = s->hd / 2;
	const double *cs = s->rcos + (int64_t)pos * half, *sn = s->rsin + (int64_t)pos * half;

	for (int64_t i = 0; i < half; i++) {
		double x1 = x[i], x2 = x[i + half];
		x[i] = (float)(x1 * cs[i] - x2 * sn[i]);
		x[i + half] = (float)(x2 * cs[i] + x1 * sn[i]);
	}
}

#define GELU_C 0.7978845608028654 /* sqrt(2/pi) */

/* One chunk of n rows (s->row_*): embeddings to final norm, leaving the normalized
 * hidden states in s->ln. max_len bounds the cache index. */
static void chunk_forward(struct mt_infer *e, int64_t n)
{
	struct cpu *s = e->state;
	const struct mt_config *c = s->c;
	int rms = c->normalization == MT_NORM_RMSNORM;
	const float *wte = P(s, -1, MT_P_WORD_EMB), *wpe = P(s, -1, MT_P_POS_EMB);
	int64_t per = s->np / s->ng, ML = e->max_len;
	double scale = 1.0 / sqrt((double)s->hd);

	for (int64_t r = 0; r < n; r++)
		for (int64_t i = 0; i < s->h; i++)
			s->x[r * s->h + i] = wte[(int64_t)s->row_tok[r] * s->h + i] +
					     (wpe ? wpe[(int64_t)s->row_pos[r] * s->h + i] : 0);
	for (int l = 0; l < s->L; l++) {
		float *kc = s->kc + (int64_t)l * e->max_batch * s->ng * ML * s->hd;
		float *vc = s->vc + (int64_t)l * e->max_batch * s->ng * ML * s->hd;

		mt_gpt_norm_f32(s->ln, s->stats, s->x, P(s, l, MT_P_LN1_W), P(s, l, MT_P_LN1_B), n, s->h, rms, c->norm_epsilon);
		linear(s->qkvb, s->ln, P(s, l, MT_P_QKV_W), P(s, l, MT_P_QKV_B), n, s->h, s->qkv);
		/* rotary positions, then keys and values into the cache */
		#pragma omp parallel for if (n > 1)
		for (int64_t r = 0; r < n; r++) {
			float *row = s->qkvb + r * s->qkv;
			if (c->position_embedding_type == MT_POS_ROPE)
				for (int64_t hh = 0; hh < s->np + s->ng; hh++)
					rope_row(s, row + (hh < s->np ? qoff(s, hh) : koff(s, hh - s->np)), s->row_pos[r]);
			for (int64_t g = 0; g < s->ng; g++) {
				int64_t at = (((int64_t)s->row_slot[r] * s->ng + g) * ML + s->row_pos[r]) * s->hd;
				memcpy(kc + at, row + koff(s, g), (size_t)s->hd * sizeof(float));
				memcpy(vc + at, row + koff(s, g) + s->hd, (size_t)s->hd * sizeof(float));
			}
		}
		/* each row's query heads over its slot's cache, positions 0..its own */
		#pragma omp parallel for collapse(2) schedule(dynamic, 1)
		for (int64_t r = 0; r < n; r++)
			for (int64_t hh = 0; hh < s->np; hh++) {
				int64_t g = hh / per, T = s->row_pos[r] + 1;
				const float *q = s->qkvb + r * s->qkv + qoff(s, hh);
				const float *K = kc + ((int64_t)s->row_slot[r] * s->ng + g) * ML * s->hd;
				const float *Vv = vc + ((int64_t)s->row_slot[r] * s->ng + g) * ML * s->hd;
				float *yr = s->y + r * s->q + hh * s->hd;
				float p[T];
				double sum = 0;
				float mx = -INFINITY;
				/* scores = scale * K q and y = V^T softmax(scores), as gemv calls (single-threaded
				 * inside this parallel loop): float sums where gpt.c sums in double */
				cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)T, (int)s->hd, (float)scale, K, (int)s->hd, q, 1, 0, p, 1);
				for (int64_t j = 0; j < T; j++)
					mx = p[j] > mx ? p[j] : mx;
				for (int64_t j = 0; j < T; j++) {
					p[j] = expf(p[j] - mx);
					sum += p[j];
				}
				for (int64_t j = 0; j < T; j++)
					p[j] = (float)(p[j] / sum);
				cblas_sgemv(CblasRowMajor, CblasTrans, (int)T, (int)s->hd, 1, Vv, (int)s->hd, p, 1, 0, yr, 1);
			}
		linear(s->mid, s->y, P(s, l, MT_P_PROJ_W), P(s, l, MT_P_PROJ_B), n, s->q, s->h);
		for (int64_t k = 0; k < n * s->h; k++)
			s->mid[k] += s->x[k];
		mt_gpt_norm_f32(s->ln, s->stats, s->mid, P(s, l, MT_P_LN2_W), P(s, l, MT_P_LN2_B), n, s->h, rms, c->norm_epsilon);
		linear(s->fc1b, s->ln, P(s, l, MT_P_FC1_W), P(s, l, MT_P_FC1_B), n, s->h, s->fc1);
		#pragma omp parallel for if (n * s->f > 65536)
		for (int64_t r = 0; r < n; r++)
			for (int64_t i = 0; i < s->f; i++) {
				/* in float (gpt.c works in double and rounds): libm's double tanh was
				 * an eighth of a batch-32 decode step; the difference is a few ulps */
				if (c->swiglu) {
					float a = s->fc1b[r * s->fc1 + i], b = s->fc1b[r * s->fc1 + s->f + i];
					s->act[r * s->f + i] = a / (1 + expf(-a)) * b;
				} else {
					/* 0.5 x (1 + tanh(u)) = x sigmoid(2u) */
					float x = s->fc1b[r * s->f + i];
					s->act[r * s->f + i] = x / (1 + expf(-2 * (float)GELU_C * (x + 0.044715f * x * x * x)));
				}
			}
		linear(s->x, s->act, P(s, l, MT_P_FC2_W), P(s, l, MT_P_FC2_B), n, s->f, s->h);
		for (int64_t k = 0; k < n * s->h; k++)
			s->x[k] += s->mid[k];
	}
	mt_gpt_norm_f32(s->ln, s->stats, s->x, P(s, -1, MT_P_FINAL_W), P(s, -1, MT_P_FINAL_B), n, s->h, rms, c->norm_epsilon);
}

static const float *output_weight(const struct cpu *s)
{
	return s->c->untie_embeddings_and_output_weights ? P(s, -1, MT_P_OUTPUT) : P(s, -1, MT_P_WORD_EMB);
}

/* log-softmax over the real vocabulary of a logits row, at token `tok` */
static float logprob(const float *z, int64_t vocab, int32_t tok)
{
	double mx = -1e300, sum = 0;

	for (int64_t v = 0; v < vocab; v++)
		if (z[v] > mx)
			mx = z[v];
	for (int64_t v = 0; v < vocab; v++)
		sum += exp((double)z[v] - mx);
	return (float)((double)z[tok] - mx - log(sum));
}

static int cpu_prefill(struct mt_infer *e, int n, const int *slots, const int32_t *const *tokens, const int *lens,
		       float *logits, float *const *lp, struct mt_err *err)
{
	struct cpu *s = e->state;
	const float *wout = output_weight(s);
	int i = 0, j = 0; /* next token: prompt i, position j */

	if (mt_infer_check_prefill(e, n, slots, tokens, lens, lp != NULL, err))
		return -1;
	for (int k = 0; k < n; k++)
		s->pos[slots ? slots[k] : k] = 0;
	while (i < n) {
		int64_t m = 0, nl = 0;
		/* fill a chunk with the next rows, prompt after prompt */
		while (i < n && m < s->chunk) {
			s->row_k[m] = i;
			s->row_slot[m] = slots ? slots[i] : i;
			s->row_pos[m] = j;
			s->row_tok[m] = tokens[i][j];
			m++;
			if (++j == lens[i]) {
				i++;
				j = 0;
			}
		}
		chunk_forward(e, m);
		/* rows that need logits: every row when log-probabilities are asked, else the
		 * last row of each prompt; gathered to the front of s->ln */
		for (int64_t r = 0; r < m; r++) {
			int k = s->row_k[r];
			if (lp || s->row_pos[r] == lens[k] - 1) {
				if (nl != r)
					memcpy(s->ln + nl * s->h, s->ln + r * s->h, (size_t)s->h * sizeof(float));
				s->row_k[nl] = k;
				s->row_pos[nl] = s->row_pos[r];
				nl++;
			}
		}
		if (!nl)
			continue;
		linear(s->logits, s->ln, wout, NULL, nl, s->h, s->V);
		#pragma omp parallel for if (nl > 1)
		for (int64_t r = 0; r < nl; r++) {
			int k = s->row_k[r], p = s->row_pos[r];
			const float *z = s->logits + r * s->V;
			if (p == lens[k] - 1)
				memcpy(logits + (int64_t)k * s->V, z, (size_t)s->V * sizeof(float));
			else
				lp[k][p] = logprob(z, s->vocab, tokens[k][p + 1]);
		}
	}
	for (int k = 0; k < n; k++)
		s->pos[slots ? slots[k] : k] = lens[k];
	return 0;
}

static int cpu_decode(struct mt_infer *e, int n, const int *slots, const int32_t *tokens, float *logits,
		      struct mt_err *err)
{
	struct cpu *s = e->state;

	if (mt_infer_check_decode(e, n, slots, tokens, s->pos, err))
		return -1;
	for (int k = 0; k < n; k++) { /* n <= max_batch <= chunk */
		int slot = slots ? slots[k] : k;
		s->row_slot[k] = slot;
		s->row_pos[k] = s->pos[slot];
		s->row_tok[k] = tokens[k];
	}
	chunk_forward(e, n);
	linear(logits, s->ln, output_weight(s), NULL, n, s->h, s->V);
	for (int k = 0; k < n; k++)
		s->pos[slots ? slots[k] : k]++;
	return 0;
}

const struct mt_infer_ops mt_infer_cpu = {
	.name = "cpu",
	.init = cpu_init,
	.free = cpu_free,
	.prefill = cpu_prefill,
	.decode = cpu_decode,
	.bytes = cpu_bytes,
};
