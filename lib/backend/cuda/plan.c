/* plan.c: the CUDA backend's state and memory (see backend.h; struct cu in cu.h): one
 * GPU, the model of gpt.c in fp32, bf16 or fp16, kernels from kernels/ (cuBLASLt for the
 * linear layers). init picks the GPU (one rank per GPU with data parallelism), sets the
 * dimensions (a tensor-parallel rank's share), plans the memory and fills the tables; free
 * gives it all back. Here too the helpers every file of the backend calls: the CUDA error
 * checks and MT_CUDA_PROFILE's timing of kernel calls.
 *
 * Memory is planned at init, four device allocations: parameters (fp32 master weights
 * plus their bf16/fp16 compute copy), gradients (fp32), AdamW state (fp32 m and v) and
 * activations (everything a micro-batch needs, scratch and the cuBLASLt workspace
 * included). The totals are logged, and a plan larger than the free device memory is
 * refused with its numbers before anything is allocated. Nothing is allocated after
 * init (but a pipeline stage's micro-batches in flight, on first use). The flat layouts
 * are params.h's, so checkpoints go through the same fp32 host buffers as on the CPU and
 * move between the backends.
 *
 * Elsewhere in lib/backend/cuda/: tensor parallelism (tensor_parallel.c), data
 * parallelism (data_parallel.c), pipeline parallelism (pipeline_parallel.c) and the
 * state's copies and the optimizer step (optimizer.c).
 *
 * Activations and their gradients are in the compute type; norms, softmax, attention
 * and the loss sum in fp32; weight gradients accumulate in fp32. The logits are made a
 * chunk of rows at a time, their loss and gradient computed in place and consumed by
 * the two output matmuls before the next chunk. --recompute-granularity full keeps
 * only each layer's input and recomputes its forward in the backward pass. Every
 * kernel sums in a fixed order, so runs repeat bit for bit, but for the sm_90a attention
 * backward's query gradients, which --deterministic (mt_attention_deterministic) puts
 * in a fixed order too. */
#include "backend/backend.h"

#ifdef MT_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../../kernels/adamw.h"
#include "../../../kernels/attention.h"
#include "../../../kernels/classifier.h"
#include "../../../kernels/classifier_score.h"
#include "../../../kernels/cuda_err.h"
#include "../../../kernels/device.h"
#include "../../../kernels/embed.h"
#include "../../../kernels/matmul.h"
#include "../../../kernels/norm.h"
#include "../../../kernels/rope.h"
#include "../../../kernels/swiglu.h"
#include "../../../kernels/tpsplit.h"
#include "backend/cuda/cu.h"
#include "backend/lttune.h"
#include "base/log.h"
#include "base/timers.h"
#include "parallel/ncclcomm.h"
#include "parallel/ddpplan.h"

/* cuBLASLt's workspace: 32 MiB, or MT_CUDA_WORKSPACE_MB from the environment */
static size_t workspace_bytes(void)
{
	const char *e = getenv("MT_CUDA_WORKSPACE_MB");
	return (e && atoi(e) > 0 ? (size_t)atoi(e) : 32) << 20;
}

static const char *const pcat_name[P_NCAT] = { "matmul fwd", "matmul bwd input", "matmul bwd weight", "matmul output layer", "attention fwd", "attention bwd", "norm", "bias grad", "activation+rope", "classifier",
					       "embedding", "optimizer" };

void mt_cu_prof_mark(struct cu *s, int cat)
{
	if (!s->prof || s->nev + 2 > PROF_MAX)
		return;
	s->evcat[s->nev / 2] = cat;
	cudaEventRecord(s->ev[s->nev++], 0);
}

void mt_cu_prof_collect(struct cu *s)
{
	if (!s->prof)
		return;
	cudaDeviceSynchronize();
	for (int k = 0; k + 1 < s->nev; k += 2) {
		float ms = 0;
		cudaEventElapsedTime(&ms, s->ev[k], s->ev[k + 1]);
		s->ptime[s->evcat[k / 2]] += ms;
	}
	s->nev = 0;
}

int mt_cu_fail(struct cu *s)
{
	if (!s->failed)
		mt_error("CUDA backend: %s", mt_cuda_error());
	s->failed = 1;
	return -1;
}

int mt_cu_rt_check(struct cu *s, cudaError_t e, const char *what, const char *file, int line)
{
	if (e == cudaSuccess)
		return 0;
	mt_cuda_fail(file, line, "%s: %s", what, cudaGetErrorString(e));
	return mt_cu_fail(s);
}

/* whether the first weight-gradient product of a step writes the parameter's gradient
 * whole: the linear layers' weights (the output layer's when untied; a tied one also
 * takes the embedding's rows) */
int mt_cu_overwritten(const struct cu *s, const struct mt_param *p)
{
	if (!s->first_write || p->tied_copy)
		return 0;
	switch (p->kind) {
	case MT_P_QKV_W:
	case MT_P_PROJ_W:
	case MT_P_FC1_W:
	case MT_P_FC2_W:
		return p->layer >= 0;
	case MT_P_OUTPUT:
		return 1;
	default:
		return 0;
	}
}

/* the chunks of the gradients zero_grad zeroes (out NULL: their count) */
static int64_t zero_chunks(const struct cu *s, struct mt_chunk *out)
{
	int64_t n = 0;

	for (int i = 0; s->first_write && i < s->t->n; i++) {
		const struct mt_param *p = &s->t->p[i];
		if (mt_cu_overwritten(s, p))
			continue;
		for (int64_t o = 0; o < p->numel; o += MT_ADAMW_CHUNK, n++)
			if (out)
				out[n] = (struct mt_chunk){ p->offset + o,
							    (int32_t)(p->numel - o < MT_ADAMW_CHUNK ? p->numel - o : MT_ADAMW_CHUNK),
							    0, 0 };
	}
	return n;
}

/* dW += dout^T in for the gradient of a parameter (layer, kind), or dW = dout^T in for the
 * step's first product of it (see zero_grad) */
static int lin_bwd_w(struct cu *s, int layer, enum mt_param_kind k, const void *dout, const void *in, int64_t N,
		     int64_t IN, int64_t O)
{
	const struct mt_param *p = mt_params_get(s->t, layer, k);
	int i = (int)(p - s->t->p), add = !s->gfresh[i];

	s->gfresh[i] = 0;
	return mt_linear_bwd_w(s->lt, s->dt, s->g + p->offset, dout, in, N, IN, O, add);
}

/* whether the attention's backward adds the QKV bias gradient (a bias, and no rotation of
 * the queries and keys after the attention's gradient) */
static int qkv_bias_fused(const struct cu *s)
{
	return s->c->add_bias_linear && s->c->position_embedding_type != MT_POS_ROPE;
}

static void *take(struct carve *k, size_t bytes)
{
	void *p = k->base ? k->base + k->off : NULL;
	k->off += (bytes + 255) & ~(size_t)255;
	return p;
}

/* one layer's activations kept for its backward pass */
static void carve_layer(struct cu *s, struct carve *k, struct slot *sl)
{
	size_t es = s->es, N = (size_t)s->N, R = (size_t)s->Nr, LR = s->sp_keep ? N : R;

	sl->ln1 = take(k, LR * (size_t)s->h * es);
	sl->ln1s = take(k, R * 2 * sizeof(float));
	sl->qkv = take(k, N * (size_t)s->qkv * es);
	sl->atty = take(k, N * (size_t)s->q * es);
	sl->lse = take(k, N * (size_t)s->np * sizeof(float));
	sl->mid = take(k, R * (size_t)s->h * es);
	sl->ln2 = take(k, LR * (size_t)s->h * es);
	sl->ln2s = take(k, R * 2 * sizeof(float));
	sl->fc1 = take(k, N * (size_t)s->fc1 * es);
	sl->act = take(k, N * (size_t)s->f * es);
}

size_t mt_cu_carve_pslot(struct cu *s, struct carve *k, struct pslot *x, int first, int last)
{
	size_t es = s->es, N = (size_t)s->N, R = (size_t)s->Nr, h = (size_t)s->h;

	x->res = take(k, (size_t)(x->nl + 1) * R * h * es);
	for (int l = 0; !s->o.recompute_full && l < x->nl; l++)
		carve_layer(s, k, &x->ls[l]);
	for (int l = 0; x->dsave && l < x->nl; l++) {
		x->dsave[4 * l] = take(k, N * h * es);
		x->dsave[4 * l + 1] = take(k, N * (size_t)s->fc1 * es);
		x->dsave[4 * l + 2] = take(k, N * h * es);
		x->dsave[4 * l + 3] = take(k, N * (size_t)s->qkv * es);
	}
	if (first) {
		x->tok = take(k, N * sizeof(int32_t));
		x->u_tok = take(k, N * sizeof(int32_t));
		x->u_start = take(k, (N + 1) * sizeof(int32_t));
		x->u_pos = take(k, N * sizeof(int32_t));
	}
	if (last) {
		x->tgt = take(k, N * sizeof(int32_t));
		x->lnf = take(k, R * h * es);
		x->dlnf = take(k, R * h * es);
		x->lnfs = take(k, R * 2 * sizeof(float));
	}
	return k->off;
}

/* lay out (or, with base NULL, only measure) the activations */
static size_t plan_acts(struct cu *s, char *base)
{
	struct carve k = { base, 0 };
	size_t es = s->es, N = (size_t)s->N;
	int64_t big = s->qkv > s->fc1 ? s->qkv : s->fc1, small = s->q > s->f ? s->q : s->f;
	int64_t wide = big > s->h ? big : s->h;

	size_t R = (size_t)s->Nr; /* the residual stream's rows (1/t of N with SP) */

	/* a pipeline stage keeps these per micro-batch in flight (pslot) */
	if (!s->stage)
		s->res = take(&k, (size_t)(s->L + 1) * R * (size_t)s->h * es);
	for (int64_t l = 0; l < s->nslots; l++)
		carve_layer(s, &k, &s->slots[l]);
	if (!s->stage) {
		s->lnf = take(&k, R * (size_t)s->h * es);
		s->lnfs = take(&k, R * 2 * sizeof(float));
	}
	if (s->tpn > 1) {
		s->full = take(&k, N * (size_t)s->h * es);
		s->part = take(&k, N * (size_t)s->h * es);
		s->cmx = take(&k, (size_t)s->chunk_rows * sizeof(float));
		s->csum = take(&k, (size_t)s->chunk_rows * sizeof(float));
	}
	s->dres = take(&k, N * (size_t)s->h * es);
	s->dln = take(&k, N * (size_t)s->h * es);
	s->dbig = take(&k, N * (size_t)big * es);
	s->dsmall = take(&k, N * (size_t)small * es);
	s->logits = take(&k, (size_t)s->chunk_rows * (size_t)s->V * es);
	s->rowloss = take(&k, N * sizeof(float));
	s->scratch = take(&k, (size_t)mt_norm_scratch_floats(s->h, wide) * sizeof(float));
	s->dsum = take(&k, (size_t)mt_attention_bwd_scratch_floats(s->dt, (int)s->B, (int)s->T, (int)s->np, (int)s->ng,
								   (int)s->hd, qkv_bias_fused(s)) *
				   sizeof(float));
	s->rope_cs = take(&k, (size_t)s->T * (size_t)s->hd * sizeof(float));
	s->tok = take(&k, N * sizeof(int32_t));
	s->tgt = take(&k, N * sizeof(int32_t));
	s->hit = take(&k, N * sizeof(int32_t));
	s->u_tok = take(&k, N * sizeof(int32_t));
	s->u_start = take(&k, (N + 1) * sizeof(int32_t));
	s->u_pos = take(&k, N * sizeof(int32_t));
	s->chunks = take(&k, (size_t)s->nchunks * sizeof(struct mt_chunk));
	s->zchunks = take(&k, (size_t)(s->nzchunks ? s->nzchunks : 1) * sizeof(struct mt_chunk));
	s->partial = take(&k, (size_t)s->nchunks * sizeof(double));
	s->sumsq = take(&k, 2 * sizeof(double));
	take(&k, workspace_bytes());
	return k.off;
}

void mt_cu_free(struct mt_backend *b)
{
	struct cu *s = b->state;

	if (!s)
		return;
	if (s->tpnccl) {
		mt_nccl_close(s->tpnccl, s->failed || b->failed);
		s->tpnccl = NULL;
		if (!(s->failed || b->failed)) {
			cudaEventDestroy(s->tpev);
			cudaEventDestroy(s->tpev_in);
			cudaEventDestroy(s->tpev_out);
			cudaStreamDestroy(s->tpst);
			if (!s->bev)
				cudaStreamDestroy(s->comm);
		}
	}
	if (s->nccl && (s->failed || b->failed)) {
		/* a failed data-parallel run: abort the communicator (its kernels stop waiting
		 * for a lost peer; ncclcomm.h does not wait for the abort) and make no other
		 * CUDA call, since cudaFree and cuBLASLt's teardown wait for the whole device;
		 * the process is about to stop */
		mt_nccl_close(s->nccl, 1);
		mt_cu_ppx_close(s);
		free(s->bev), mt_ddp_plan_free(&s->plan), free(s->g_cnt), free(s->slots), free(s->ev), free(s->evcat);
		free(s->h_count), free(s->h_hit), free(s->gfresh);
		if (!s->h_pin)
			free(s->h_u); /* page-locked: left to the process's end (no CUDA call here) */
		free(s);
		b->state = NULL;
		return;
	}
	if (s->prof) {
		double tot = 0;
		for (int i = 0; i < P_NCAT; i++)
			tot += s->ptime[i];
		for (int i = 0; i < P_NCAT; i++)
			mt_info("cuda profile: %-16s %9.1f ms %5.1f%%", pcat_name[i], s->ptime[i], tot > 0 ? 100 * s->ptime[i] / tot : 0);
		/* what the kinds above leave out of the steps: the device idle between kernels
		 * (the host's work between passes, waits, copies) and unprofiled calls */
		if (s->psteps)
			mt_info("cuda profile: %d steps, %.2f ms a step on the host's clock, %.2f in the kinds above, %.2f outside them",
				s->psteps, 1e3 * s->pwall / s->psteps, tot / s->psteps, (1e3 * s->pwall - tot) / s->psteps);
		for (int i = 0; i < PROF_MAX; i++)
			cudaEventDestroy(s->ev[i]);
		free(s->ev), free(s->evcat);
	}
	mt_cu_ppx_close(s);
	mt_lt_destroy(s->lt);
	mt_lttune_free(s->lttune);
	mt_nccl_close(s->nccl, 0);
	if (s->bev) {
		for (int j = 0; j < s->plan.nb; j++)
			cudaEventDestroy(s->bev[j]);
		cudaEventDestroy(s->done);
		cudaStreamDestroy(s->comm);
	}
	free(s->bev), mt_ddp_plan_free(&s->plan), free(s->g_cnt);
	for (int i = 0; i < 4; i++)
		if (s->mem[i])
			cudaFree(s->mem[i]);
	free(s->slots);
	for (int c = 0; s->ps && c < s->t->nchunks; c++) {
		for (int i = 0; i < s->nps[c]; i++) {
			if (s->ps[c][i].mem)
				cudaFree(s->ps[c][i].mem);
			free(s->ps[c][i].ls), free(s->ps[c][i].dsave);
		}
		free(s->ps[c]);
	}
	free(s->ps), free(s->nps), free(s->h_emb);
	free(s->h_count), free(s->h_hit);
	if (s->h_pin)
		cudaFreeHost(s->h_pin);
	else
		free(s->h_u);
	free(s->h_a), free(s->h_b), free(s->h_16), free(s->h_cmx), free(s->h_csum), free(s->h_d), free(s->h_partial);
	free(s->chunk_norm), free(s->gfresh);
	free(s);
	b->state = NULL;
}

double mt_cu_gib(size_t n)
{
	return (double)n / (1024.0 * 1024.0 * 1024.0);
}

static size_t align256(size_t n)
{
	return (n + 255) & ~(size_t)255;
}

/* One rank per GPU: the node-local rank's GPU, or the only one visible when the
 * launcher gave each rank its own (Slurm's --gpus-per-task); then no two ranks may
 * have the same GPU. */
static int pick_gpu(struct cu *s, int count, struct mt_err *err)
{
	struct mt_dist *d = s->d;
	struct cudaDeviceProp p;
	unsigned char mine[16], other[16];
	int clash = -1;
	cudaError_t e;

	if (count > 1 && count < d->local_world)
		return mt_err_set(err, MT_EXIT_USAGE,
				  "rank %d: %d ranks on this node but %d GPUs are visible: start one rank per GPU",
				  d->rank, d->local_world, count);
	e = cudaSetDevice(count > 1 ? d->local_rank : 0);
	if (e == cudaSuccess)
		e = cudaGetDeviceProperties(&p, count > 1 ? d->local_rank : 0);
	if (e != cudaSuccess)
		return mt_err_set(err, MT_EXIT_IO, "rank %d: cannot use GPU %d: %s", d->rank, count > 1 ? d->local_rank : 0,
				  cudaGetErrorString(e));
	memcpy(mine, p.uuid.bytes, 16);
	/* every rank's GPU to every rank (all take part to the end, so none waits alone) */
	for (int q = 0; q < d->world; q++) {
		memcpy(other, mine, 16);
		if (d->ops->bcast(d, other, 16, q, "the GPU check", err))
			return -1;
		if (q != d->rank && !memcmp(other, mine, 16) && clash < 0)
			clash = q;
	}
	if (clash >= 0)
		return mt_err_set(err, MT_EXIT_USAGE,
				  "ranks %d and %d share GPU %d on this node: start one rank per GPU (%d ranks on the node, "
				  "%d GPU%s visible to each)", clash < d->rank ? clash : d->rank, clash < d->rank ? d->rank : clash,
				  count > 1 ? d->local_rank : 0, d->local_world, count, count == 1 ? "" : "s");
	return 0;
}

/* Whether every rank of group g has a GPU of its own (NCCL refuses two ranks of one
 * communicator on one GPU): the current device's UUID to every rank (collective over g);
 * *dev is this rank's device */
int mt_cu_group_gpus(struct mt_dist *g, const char *what, int *dev, int *distinct, struct mt_err *err)
{
	struct cudaDeviceProp p;
	unsigned char mine[16], other[16];

	*distinct = 1;
	if (cudaGetDevice(dev) != cudaSuccess || cudaGetDeviceProperties(&p, *dev) != cudaSuccess)
		return mt_err_set(err, MT_EXIT_IO, "%s: cannot read the GPU's properties", g->where);
	memcpy(mine, p.uuid.bytes, 16);
	for (int q = 0; q < g->world; q++) {
		memcpy(other, mine, 16);
		if (g->ops->bcast(g, other, 16, q, what, err))
			return -1;
		if (q != g->rank && !memcmp(other, mine, 16))
			*distinct = 0;
	}
	return 0;
}

int mt_cu_init(struct mt_backend *b, const struct mt_config *c, const struct mt_params *t, int micro_batch,
	       struct mt_err *err)
{
	struct cu *s = calloc(1, sizeof(*s));
	static const char *const what[4] = { "parameters", "gradients", "optimizer state", "activations" };
	size_t free_b = 0, total_b = 0, need;
	int64_t nchunks = 0;
	struct mt_chunk *hc;
	float *cs;
	int n = 0;
	cudaError_t e;

	b->state = s;
	if (!s)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		cudaGetLastError();
		return mt_err_set(err, MT_EXIT_IO, "no CUDA device is visible: use --device cpu");
	}
	s->c = c;
	s->t = t;
	s->o = b->opt;
	s->d = s->o.dist;
	s->dp = s->d && !s->o.inference ? s->d->dp : 1;
	s->me = s->dp > 1 ? s->d->dp_rank : 0;
	s->zero = s->dp > 1 && s->o.distributed_optimizer;
	s->next = -1; /* no reduction in flight */
	if (mt_ddp_plan_init(&s->plan, t, s->o.bucket_size > 0 ? s->o.bucket_size : MT_DDP_BUCKET_DEFAULT, s->dp, s->me,
			     s->zero, err))
		return -1;
	if (mt_tp_on(s->o.tp) && s->o.inference)
		return mt_err_set(err, MT_EXIT_USAGE, "tensor parallelism on the CUDA backend: not for evaluation");
	s->stage = t->pp_size > 1;
	if (s->stage && s->o.inference)
		return mt_err_set(err, MT_EXIT_USAGE, "pipeline parallelism on the CUDA backend: not for evaluation");
	if (s->stage && s->o.split_backward && s->o.recompute_full)
		return mt_err_set(err, MT_EXIT_USAGE, "--pipeline-schedule zb-h1 with --recompute-granularity full: the CUDA "
				  "backend's weight-gradient passes need each layer's activations kept (use 1f1b, or "
				  "selective recompute)");
	/* before anything makes a CUDA context; tensor-parallel ranks alone may share a GPU
	 * (their collectives go through host memory) */
	if (s->dp > 1 && pick_gpu(s, n, err))
		return -1;
	if (s->dp == 1 && (mt_tp_on(s->o.tp) || s->stage) && s->d && n > 1 &&
	    cudaSetDevice(s->d->local_rank % n) != cudaSuccess)
		return mt_err_set(err, MT_EXIT_IO, "%s: cannot use GPU %d", s->d->where, s->d->local_rank % n);
	s->dt = s->o.precision == MT_PREC_BF16 ? MT_BF16 : s->o.precision == MT_PREC_FP16 ? MT_F16 : MT_F32;
	s->es = s->dt == MT_F32 ? 4 : 2;
	mt_attention_deterministic = s->o.deterministic;
	s->B = micro_batch;
	s->T = c->seq_length;
	s->N = s->B * s->T;
	s->L = c->num_layers;
	s->h = c->hidden_size;
	/* tensor parallelism: this rank's share of heads, groups, ffn and vocabulary (the
	 * table t is its shard, params.h) */
	s->tp = mt_tp_on(s->o.tp) ? s->o.tp : NULL;
	s->tpn = s->tp ? s->tp->size : 1;
	s->sp = s->tp && s->tp->sequence_parallel;
	s->np = c->num_attention_heads / s->tpn;
	s->ng = c->num_query_groups / s->tpn;
	s->hd = c->kv_channels;
	s->q = s->np * s->hd;
	s->qkv = s->q + 2 * s->ng * s->hd;
	s->f = c->ffn_hidden_size / s->tpn;
	s->fc1 = c->swiglu ? 2 * s->f : s->f;
	s->V = c->padded_vocab_size / s->tpn;
	s->v0 = s->tp ? s->tp->rank * s->V : 0;
	s->Nr = s->sp ? s->N / s->tpn : s->N;
	s->r0 = s->sp ? s->tp->rank * s->Nr : 0;
	/* inference keeps nothing for a backward pass: one layer's slot serves them all */
	s->nslots = s->o.recompute_full || s->o.inference ? 1 : s->L;
	if (s->stage)
		s->nslots = s->o.recompute_full ? 1 : 0; /* the rest in each micro-batch's pslot */
	s->chunk_rows = (int64_t)(MT_CUDA_LOGITS_BYTES / ((size_t)s->V * s->es));
	if (s->chunk_rows < 1)
		s->chunk_rows = 1;
	if (s->chunk_rows > s->N)
		s->chunk_rows = s->N;
	/* a last chunk under an eighth of the others streams the output weight and its fp32
	 * gradient for little work (the Llama-style model's 16,384 rows made chunks of 5,336,
	 * 5,336, 5,336 and 376): then the rows go evenly (a multiple of 64 where that fits;
	 * 0.4 ms a step there on an H100). GPT-2's chunks (last 752 of 5,336 rows at 32,768,
	 * 1,504 at 65,536) lost up to 0.9 ms so, and stay as they are. MT_CUDA_EQUAL_CHUNKS=0:
	 * never; 2: always (comparisons) */
	{
		const char *ev = getenv("MT_CUDA_EQUAL_CHUNKS");
		int mode = ev ? atoi(ev) : 1;
		int64_t nc = (s->N + s->chunk_rows - 1) / s->chunk_rows, last = s->N - (nc - 1) * s->chunk_rows;
		if (nc > 1 && (mode == 2 || (mode == 1 && last * 8 < s->chunk_rows))) {
			int64_t r = (s->N + nc - 1) / nc, r64 = (r + 63) / 64 * 64;
			s->chunk_rows = r64 <= s->chunk_rows ? r64 : r;
		}
	}
	s->gclip = 1.0f;
	s->scale = s->o.precision != MT_PREC_FP16 ? 1.0
		   : s->o.loss_scale > 0 ? s->o.loss_scale : s->o.initial_loss_scale;
	s->hyst = s->o.hysteresis;
	if (getenv("MT_CUDA_PROFILE") && atoi(getenv("MT_CUDA_PROFILE")) > 0) {
		s->ev = calloc(PROF_MAX, sizeof(*s->ev));
		s->evcat = calloc(PROF_MAX / 2, sizeof(int));
		if (!s->ev || !s->evcat)
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
		for (int i = 0; i < PROF_MAX; i++)
			cudaEventCreate(&s->ev[i]);
		s->prof = 1;
	}
	if (s->hd != 8 && s->hd != 16 && s->hd != 32 && s->hd != 64 && s->hd != 128)
		return mt_err_set(err, MT_EXIT_USAGE, "the CUDA backend supports head sizes 8, 16, 32, 64 and 128, not %lld",
				  (long long)s->hd);
	if (s->dp > 1 && mt_cu_dp_init(s, err))
		return -1;
	if (mt_cu_tp_init(s, err))
		return -1;
	nchunks = mt_ddp_plan_chunks(&s->plan, t, NULL, &s->npiece_chunks);
	s->nchunks = nchunks;
	s->first_write = !s->o.inference && !(getenv("MT_CUDA_FIRST_WRITE") && !atoi(getenv("MT_CUDA_FIRST_WRITE")));
	s->nzchunks = zero_chunks(s, NULL);
	if (!(s->gfresh = calloc((size_t)t->n + 1, 1)))
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	s->slots = calloc((size_t)(s->nslots ? s->nslots : 1), sizeof(*s->slots));
	s->h_count = calloc((size_t)s->V + 1, sizeof(int32_t));
	s->h_hit = malloc((size_t)s->N * sizeof(int32_t));
	{
		size_t nn = (size_t)s->N, bytes = (6 * nn + 1) * sizeof(int32_t);
		int32_t *p;
		if (cudaMallocHost(&s->h_pin, bytes) != cudaSuccess) {
			cudaGetLastError();
			s->h_pin = NULL;
			p = malloc(bytes);
		} else {
			p = s->h_pin;
		}
		if (p) {
			s->h_u = p, s->h_start = p + nn, s->h_pos = p + 2 * nn + 1, s->h_tok = p + 3 * nn + 1;
			s->h_tgt = p + 4 * nn + 1, s->h_loss = (float *)(p + 5 * nn + 1);
		}
	}
	if (!s->slots || !s->h_count || !s->h_u || !s->h_hit)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	if (s->tpn > 1 || s->stage) {
		/* host staging of the split points and of the activations a stage sends; the
		 * norm's chunks (a tied copy is counted on the first stage) */
		size_t nh = (size_t)(s->N * s->h);
		s->h_a = malloc(nh * sizeof(float));
		s->h_b = malloc(nh * sizeof(float));
		s->h_16 = malloc(nh * sizeof(uint16_t));
		s->h_cmx = malloc((size_t)s->N * sizeof(float));
		s->h_csum = malloc((size_t)s->N * sizeof(float));
		s->h_d = malloc((size_t)s->N * sizeof(double));
		s->h_partial = malloc((size_t)(nchunks > 0 ? nchunks : 1) * sizeof(double));
		s->chunk_norm = calloc((size_t)(nchunks > 0 ? nchunks : 1), 1);
		if (!s->h_a || !s->h_b || !s->h_16 || !s->h_cmx || !s->h_csum || !s->h_d || !s->h_partial || !s->chunk_norm)
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}

	/* with ZeRO: the fp32 master shard, then the whole compute copy (a separate buffer
	 * in fp32 too) */
	s->bytes[0] = s->zero ? align256((size_t)s->plan.shard * 4) + (size_t)t->total * s->es + 256
		      : (size_t)t->total * (4 + (s->dt == MT_F32 ? 0 : s->es)) + 256;
	s->bytes[1] = s->o.inference ? 0 : (size_t)t->total * 4;
	s->bytes[2] = s->o.inference ? 0 : (size_t)s->plan.shard * 8 + 256;
	s->bytes[3] = plan_acts(s, NULL);
	need = s->bytes[0] + s->bytes[1] + s->bytes[2] + s->bytes[3];
	e = cudaMemGetInfo(&free_b, &total_b);
	if (e != cudaSuccess)
		return mt_err_set(err, MT_EXIT_IO, "cannot query the GPU's memory: %s", cudaGetErrorString(e));
	if (!s->o.quiet)
		mt_info("cuda: memory plan %.2f GiB: parameters %.2f, gradients %.2f, optimizer state %.2f%s, activations "
			"%.2f (%s, micro-batch %lld x %lld, recompute %s); %.2f GiB free of %.2f",
			mt_cu_gib(need), mt_cu_gib(s->bytes[0]), mt_cu_gib(s->bytes[1]), mt_cu_gib(s->bytes[2]),
			s->zero ? " (ZeRO-1: master weights and moments of this rank's shard)" : "", mt_cu_gib(s->bytes[3]),
			s->dt == MT_F32 ? "fp32" : s->dt == MT_BF16 ? "bf16" : "fp16", (long long)s->B, (long long)s->T,
			s->o.recompute_full ? "full" : "selective", mt_cu_gib(free_b), mt_cu_gib(total_b));
	if (need + (64u << 20) > free_b)
		return mt_err_set(err, MT_EXIT_IO,
				  "the model does not fit the GPU: it needs %.2f GiB (parameters %.2f, gradients %.2f, "
				  "optimizer state %.2f, activations %.2f) and %.2f GiB are free: lower --micro-batch-size "
				  "or use --recompute-granularity full",
				  mt_cu_gib(need), mt_cu_gib(s->bytes[0]), mt_cu_gib(s->bytes[1]), mt_cu_gib(s->bytes[2]), mt_cu_gib(s->bytes[3]), mt_cu_gib(free_b));
	for (int i = 0; i < 4; i++) {
		if (!s->bytes[i])
			continue;
		e = cudaMalloc(&s->mem[i], s->bytes[i]);
		if (e != cudaSuccess)
			return mt_err_set(err, MT_EXIT_IO, "cannot allocate %.2f GiB of GPU memory for the %s: %s",
					  mt_cu_gib(s->bytes[i]), what[i], cudaGetErrorString(e));
	}
	s->w = s->mem[0];
	s->wc = s->dt == MT_F32 && !s->zero ? (void *)s->w : (void *)((char *)s->mem[0] + align256((size_t)s->plan.shard * 4));
	s->g = s->mem[1];
	s->m = s->mem[2];
	s->v = s->m ? (float *)((char *)s->mem[2] + align256((size_t)s->plan.shard * 4)) : NULL;
	plan_acts(s, s->mem[3]);
	if (mt_lt_create(&s->lt, (char *)s->mem[3] + s->bytes[3] - workspace_bytes(), workspace_bytes()))
		return mt_err_set(err, MT_EXIT_IO, "cuBLASLt: %s", mt_cuda_error());
	if (mt_lttune_setup(s->lt, &s->lttune, err))
		return -1;

	/* the chunk table of the multi-tensor kernels */
	hc = malloc((size_t)nchunks * sizeof(*hc));
	cs = malloc((size_t)s->T * (size_t)s->hd * sizeof(float));
	if (!hc || !cs) {
		free(hc), free(cs);
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	mt_ddp_plan_chunks(&s->plan, t, hc, NULL);
	/* the chunks the gradient norm counts: not the replicas another rank counts */
	for (int64_t i = 0; s->chunk_norm && i < nchunks; i++) {
		int skip = 0;
		for (int q = 0; q < t->n; q++)
			if (hc[i].start >= t->p[q].offset && hc[i].start < t->p[q].offset + t->p[q].numel)
				skip = t->p[q].norm_skip;
		s->chunk_norm[i] = !skip;
	}
	/* rotary table, in double as gpt.c computes it, rounded once */
	for (int64_t tt = 0; tt < s->T; tt++)
		for (int64_t i = 0; i < s->hd / 2; i++) {
			double ang = (double)tt * pow(c->rotary_base, -2.0 * (double)i / (double)s->hd);
			cs[(tt * (s->hd / 2) + i) * 2] = (float)cos(ang);
			cs[(tt * (s->hd / 2) + i) * 2 + 1] = (float)sin(ang);
		}
	e = cudaMemcpy(s->chunks, hc, (size_t)nchunks * sizeof(*hc), cudaMemcpyHostToDevice);
	free(hc);
	hc = NULL;
	if (e == cudaSuccess && s->nzchunks) {
		if (!(hc = malloc((size_t)s->nzchunks * sizeof(*hc)))) {
			free(cs);
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
		}
		zero_chunks(s, hc);
		e = cudaMemcpy(s->zchunks, hc, (size_t)s->nzchunks * sizeof(*hc), cudaMemcpyHostToDevice);
	}
	if (e == cudaSuccess)
		e = cudaMemcpy(s->rope_cs, cs, (size_t)s->T * (size_t)s->hd * sizeof(float), cudaMemcpyHostToDevice);
	free(hc);
	free(cs);
	if (e == cudaSuccess && s->g)
		e = cudaMemset(s->g, 0, s->bytes[1]);
	if (e != cudaSuccess)
		return mt_err_set(err, MT_EXIT_IO, "GPU copy: %s", cudaGetErrorString(e));
	return 0;
}

int mt_cu_layer_fwd(struct cu *s, int l, struct slot *sl)
{
	const struct mt_config *c = s->c;
	enum mt_dtype dt = s->dt;
	int rms = c->normalization == MT_NORM_RMSNORM;
	void *xin = row(s, s->res, (l - s->lbase) * s->Nr, s->h), *xout = row(s, s->res, (l + 1 - s->lbase) * s->Nr, s->h);
	void *in;

	KP(P_NORM, mt_norm_fwd(dt, mt_cu_ln_rows(s, sl->ln1), sl->ln1s, xin, wp(s, l, MT_P_LN1_W), wp(s, l, MT_P_LN1_B), s->Nr,
			       s->h, rms, (float)c->norm_epsilon));
	/* column-parallel QKV: its input whole on every rank (gathered with SP) */
	if (!(in = mt_cu_ln_whole(s, sl->ln1)))
		return -1;
	KP(P_MATMUL, mt_linear_fwd(s->lt, dt, sl->qkv, in, wp(s, l, MT_P_QKV_W), wp(s, l, MT_P_QKV_B), NULL, s->N, s->h, s->qkv));
	if (c->position_embedding_type == MT_POS_ROPE)
		KP(P_ACT, mt_rope(dt, sl->qkv, s->rope_cs, s->N, s->T, (int)s->np, (int)s->ng, (int)s->hd, 0));
	KP(P_ATTN, mt_attention_fwd(dt, sl->atty, sl->lse, sl->qkv, (int)s->B, (int)s->T, (int)s->np, (int)s->ng, (int)s->hd));
	if (s->tpn > 1) {
		/* row-parallel projection: the partial products summed, then bias and residual */
		KP(P_MATMUL, mt_linear_fwd(s->lt, dt, s->part, sl->atty, wp(s, l, MT_P_PROJ_W), NULL, NULL, s->N, s->q, s->h));
		if (mt_cu_tp_reduce(s, sl->mid, s->part, s->h))
			return -1;
		KP(P_ACT, mt_bias_residual(dt, sl->mid, wp(s, l, MT_P_PROJ_B), xin, s->Nr, s->h));
	} else {
		KP(P_MATMUL, mt_linear_fwd(s->lt, dt, sl->mid, sl->atty, wp(s, l, MT_P_PROJ_W), wp(s, l, MT_P_PROJ_B), xin, s->N,
					   s->q, s->h));
	}
	KP(P_NORM, mt_norm_fwd(dt, mt_cu_ln_rows(s, sl->ln2), sl->ln2s, sl->mid, wp(s, l, MT_P_LN2_W), wp(s, l, MT_P_LN2_B),
			       s->Nr, s->h, rms, (float)c->norm_epsilon));
	if (!(in = mt_cu_ln_whole(s, sl->ln2)))
		return -1;
	if (c->swiglu) {
		KP(P_MATMUL, mt_linear_fwd(s->lt, dt, sl->fc1, in, wp(s, l, MT_P_FC1_W), wp(s, l, MT_P_FC1_B), NULL, s->N,
					   s->h, s->fc1));
		KP(P_ACT, mt_swiglu_fwd(dt, sl->act, sl->fc1, s->N, s->f));
	} else {
		KP(P_MATMUL, mt_linear_fwd_gelu(s->lt, dt, sl->act, sl->fc1, in, wp(s, l, MT_P_FC1_W),
						wp(s, l, MT_P_FC1_B), s->N, s->h, s->fc1));
	}
	if (s->tpn > 1) {
		KP(P_MATMUL, mt_linear_fwd(s->lt, dt, s->part, sl->act, wp(s, l, MT_P_FC2_W), NULL, NULL, s->N, s->f, s->h));
		if (mt_cu_tp_reduce(s, xout, s->part, s->h))
			return -1;
		KP(P_ACT, mt_bias_residual(dt, xout, wp(s, l, MT_P_FC2_B), sl->mid, s->Nr, s->h));
	} else {
		KP(P_MATMUL, mt_linear_fwd(s->lt, dt, xout, sl->act, wp(s, l, MT_P_FC2_W), wp(s, l, MT_P_FC2_B), sl->mid, s->N,
					   s->f, s->h));
	}
	return 0;
}

/* the backward of a column-parallel layer (fc1, QKV: weight wk, bias gradient gb or NULL,
 * n output columns) from its output gradient in s->dbig: kept in save for layer_w, or its
 * weight gradient against the norm's output ln (gathered again under SP); then its
 * input gradient, a partial sum under tensor parallelism, reduced into s->dln. overlap
 * (over NCCL, whole passes): the input gradient first, its sum under the weight
 * gradient (MT_TP_OVERLAP=0: in sequence, for comparisons) */
static int col_bwd(struct cu *s, int l, void *ln, enum mt_param_kind wk, float *gb, int64_t n, void *save, int overlap)
{
	enum mt_dtype dt = s->dt;
	int tp = s->tpn > 1;
	void *in;

	if (save) {
		RT(cudaMemcpyAsync(save, s->dbig, (size_t)(s->N * n) * s->es, cudaMemcpyDeviceToDevice, 0));
	} else {
		if (!(in = mt_cu_ln_kept(s, ln)))
			return -1;
		if (overlap) {
			KP(P_MM_DIN, mt_linear_bwd_in(s->lt, dt, s->part, s->dbig, wp(s, l, wk), s->N, s->h, n, 0));
			if (mt_cu_tp_reduce_begin(s, s->dln, s->part, s->h))
				return -1;
		}
		KP(P_MM_DW, lin_bwd_w(s, l, wk, s->dbig, in, s->N, s->h, n));
	}
	if (gb)
		KP(P_BIAS, mt_bias_grad(dt, gb, s->dbig, s->N, n, s->scratch));
	if (overlap)
		return mt_cu_tp_reduce_end(s);
	KP(P_MM_DIN, mt_linear_bwd_in(s->lt, dt, tp ? s->part : s->dln, s->dbig, wp(s, l, wk), s->N, s->h, n, 0));
	return tp && mt_cu_tp_reduce(s, s->dln, s->part, s->h) ? -1 : 0;
}

/* s->dres holds d loss / d res[l + 1] on entry and d loss / d res[l] on return (this
 * rank's Nr rows). With tensor parallelism the row-parallel layers take the output
 * gradient whole (gathered with SP; their biases from this rank's rows), and the
 * column-parallel layers' input gradients are partial sums, reduced into s->dln.
 * dsave (zero-bubble schedules' split backward; NULL: the whole pass): the four linear
 * layers' output gradients (fc2, fc1, projection, QKV) are kept there for layer_w and
 * their weight gradients left to it. */
int mt_cu_layer_bwd(struct cu *s, int l, struct slot *sl, void *const *dsave)
{
	const struct mt_config *c = s->c;
	enum mt_dtype dt = s->dt;
	int rms = c->normalization == MT_NORM_RMSNORM, tp = s->tpn > 1;
	/* over NCCL, whole passes: the column-parallel input gradients' sums overlapped */
	int overlap = tp && s->tpnccl && !dsave && s->tp_overlap;
	void *xin = row(s, s->res, (l - s->lbase) * s->Nr, s->h), *dfull;
	float *gb;

	/* MLP */
	if (!(dfull = tp ? mt_cu_tp_gather(s, s->dres, s->h) : s->dres))
		return -1;
	if (dsave)
		RT(cudaMemcpyAsync(dsave[0], dfull, (size_t)(s->N * s->h) * s->es, cudaMemcpyDeviceToDevice, 0));
	else
		KP(P_MM_DW, lin_bwd_w(s, l, MT_P_FC2_W, dfull, sl->act, s->N, s->f, s->h));
	if ((gb = gp(s, l, MT_P_FC2_B)) && !s->dres_summed)
		KP(P_BIAS, mt_bias_grad(dt, gb, s->dres, s->Nr, s->h, s->scratch));
	s->dres_summed = 0;
	if (c->swiglu) {
		KP(P_MM_DIN, mt_linear_bwd_in(s->lt, dt, s->dsmall, dfull, wp(s, l, MT_P_FC2_W), s->N, s->f, s->h, 0));
		KP(P_ACT, mt_swiglu_bwd(dt, s->dbig, s->dsmall, sl->fc1, s->N, s->f));
	} else {
		KP(P_MM_DIN, mt_linear_bwd_in_dgelu(s->lt, dt, s->dbig, dfull, wp(s, l, MT_P_FC2_W), sl->fc1, s->N, s->f,
						    s->h));
	}
	if (col_bwd(s, l, sl->ln2, MT_P_FC1_W, gp(s, l, MT_P_FC1_B), s->fc1, dsave ? dsave[1] : NULL, overlap))
		return -1;
	/* the projection's bias gradient: the column sum of the new s->dres, taken there */
	KP(P_NORM, mt_norm_bwd(dt, s->dres, 1, gp(s, l, MT_P_LN2_W), gp(s, l, MT_P_LN2_B), gp(s, l, MT_P_PROJ_B), s->dln,
			       sl->mid, sl->ln2s, wp(s, l, MT_P_LN2_W), s->Nr, s->h, rms, s->scratch));
	/* attention */
	if (!(dfull = tp ? mt_cu_tp_gather(s, s->dres, s->h) : s->dres))
		return -1;
	if (dsave)
		RT(cudaMemcpyAsync(dsave[2], dfull, (size_t)(s->N * s->h) * s->es, cudaMemcpyDeviceToDevice, 0));
	else
		KP(P_MM_DW, lin_bwd_w(s, l, MT_P_PROJ_W, dfull, sl->atty, s->N, s->q, s->h));
	KP(P_MM_DIN, mt_linear_bwd_in(s->lt, dt, s->dsmall, dfull, wp(s, l, MT_P_PROJ_W), s->N, s->q, s->h, 0));
	/* the QKV bias gradient comes with the attention's backward where no rotation follows
	 * (the sm_90a kernels sum it as they go) */
	gb = qkv_bias_fused(s) ? gp(s, l, MT_P_QKV_B) : NULL;
	KP(P_ATTN_B, mt_attention_bwd(dt, s->dbig, s->dsmall, sl->atty, sl->lse, sl->qkv, (int)s->B, (int)s->T, (int)s->np,
			   (int)s->ng, (int)s->hd, gb, s->dsum,
			   c->position_embedding_type == MT_POS_ROPE ? s->rope_cs : NULL));
	if (col_bwd(s, l, sl->ln1, MT_P_QKV_W, qkv_bias_fused(s) ? NULL : gp(s, l, MT_P_QKV_B), s->qkv,
		    dsave ? dsave[3] : NULL, overlap))
		return -1;
	/* the new s->dres is the output gradient of the layer below's fc2: its bias gradient
	 * taken here when that layer comes next in this pass */
	gb = l - 1 >= s->lbase ? gp(s, l - 1, MT_P_FC2_B) : NULL;
	KP(P_NORM, mt_norm_bwd(dt, s->dres, 1, gp(s, l, MT_P_LN1_W), gp(s, l, MT_P_LN1_B), gb, s->dln, xin, sl->ln1s,
			       wp(s, l, MT_P_LN1_W), s->Nr, s->h, rms, s->scratch));
	s->dres_summed = gb != NULL;
	return 0;
}

/* the weight-gradient pass after a split layer_bwd: the four linear layers' weight
 * gradients from the output gradients it kept in dsave and the layer's inputs (the
 * column-parallel ones gathered again under sequence parallelism) */
int mt_cu_layer_w(struct cu *s, int l, struct slot *sl, void *const *dsave)
{
	void *in;

	KP(P_MM_DW, lin_bwd_w(s, l, MT_P_FC2_W, dsave[0], sl->act, s->N, s->f, s->h));
	if (!(in = mt_cu_ln_kept(s, sl->ln2)))
		return -1;
	KP(P_MM_DW, lin_bwd_w(s, l, MT_P_FC1_W, dsave[1], in, s->N, s->h, s->fc1));
	KP(P_MM_DW, lin_bwd_w(s, l, MT_P_PROJ_W, dsave[2], sl->atty, s->N, s->q, s->h));
	if (!(in = mt_cu_ln_kept(s, sl->ln1)))
		return -1;
	KP(P_MM_DW, lin_bwd_w(s, l, MT_P_QKV_W, dsave[3], in, s->N, s->h, s->qkv));
	return 0;
}

/* group the batch's positions by token for the embedding backward (a counting sort);
 * with tensor parallelism only the tokens of this rank's vocabulary rows, as row
 * numbers of its shard */
static int64_t group_tokens(struct cu *s, const int32_t *tokens)
{
	int32_t *cnt = s->h_count;
	int64_t nu = 0, acc = 0;

	if (s->tpn > 1) {
		for (int64_t n = 0; n < s->N; n++)
			if (tokens[n] >= s->v0 && tokens[n] < s->v0 + s->V)
				cnt[tokens[n] - s->v0]++;
		for (int64_t v = 0; v < s->V; v++) {
			int32_t k = cnt[v];
			if (!k)
				continue;
			s->h_u[nu] = (int32_t)v;
			s->h_start[nu] = (int32_t)acc;
			cnt[v] = (int32_t)acc;
			acc += k;
			nu++;
		}
		s->h_start[nu] = (int32_t)acc;
		for (int64_t n = 0; n < s->N; n++)
			if (tokens[n] >= s->v0 && tokens[n] < s->v0 + s->V)
				s->h_pos[cnt[tokens[n] - s->v0]++] = (int32_t)n;
		for (int64_t k = 0; k < nu; k++)
			cnt[s->h_u[k]] = 0;
		return nu;
	}
	for (int64_t n = 0; n < s->N; n++)
		cnt[tokens[n]]++;
	for (int64_t v = 0; v < s->V; v++) {
		int32_t k = cnt[v];
		if (!k)
			continue;
		s->h_u[nu] = (int32_t)v;
		s->h_start[nu] = (int32_t)acc;
		cnt[v] = (int32_t)acc; /* now the next free place of token v */
		acc += k;
		nu++;
	}
	s->h_start[nu] = (int32_t)acc;
	for (int64_t n = 0; n < s->N; n++)
		s->h_pos[cnt[tokens[n]]++] = (int32_t)n;
	for (int64_t k = 0; k < nu; k++)
		cnt[s->h_u[k]] = 0;
	return nu;
}

static int ready(struct cu *s, int64_t lo)
{
	return mt_cu_tp_grads_ready(s, lo) || mt_cu_grads_ready(s, lo) ? -1 : 0;
}

/* tokens and targets (targets may be NULL) onto the device, s->tok and s->tgt, through
 * the page-locked h_tok and h_tgt: the copies queue behind the kernels before them, and
 * the host goes on. Callers wait for the device (a loss read back) before the next call
 * writes h_tok again. */
int mt_cu_tokens_in(struct cu *s, const int32_t *tokens, const int32_t *targets)
{
	size_t n = (size_t)s->N * sizeof(int32_t);

	memcpy(s->h_tok, tokens, n);
	RT(cudaMemcpyAsync(s->tok, s->h_tok, n, cudaMemcpyHostToDevice, 0));
	if (targets) {
		memcpy(s->h_tgt, targets, n);
		RT(cudaMemcpyAsync(s->tgt, s->h_tgt, n, cudaMemcpyHostToDevice, 0));
	}
	return 0;
}

/* the tokens grouped by token for the embedding's gradient onto the device (s->u_tok,
 * s->u_start, s->u_pos; *nu unique tokens): made on the host while the device runs the
 * forward pass queued before, copied in stream order before the backward pass */
int mt_cu_groups_in(struct cu *s, const int32_t *tokens, int64_t *nu)
{
	*nu = group_tokens(s, tokens);
	RT(cudaMemcpyAsync(s->u_tok, s->h_u, (size_t)*nu * sizeof(int32_t), cudaMemcpyHostToDevice, 0));
	RT(cudaMemcpyAsync(s->u_start, s->h_start, (size_t)(*nu + 1) * sizeof(int32_t), cudaMemcpyHostToDevice, 0));
	RT(cudaMemcpyAsync(s->u_pos, s->h_pos, (size_t)s->N * sizeof(int32_t), cudaMemcpyHostToDevice, 0));
	return 0;
}

/* the embeddings into s->res's first rows */
int mt_cu_embed_fwd(struct cu *s)
{
	enum mt_dtype dt = s->dt;

	if (s->tpn > 1) {
		/* vocabulary-parallel embedding: this rank's rows looked up, the rest zero, the
		 * partial rows summed (scattered along the sequence with SP), then positions */
		KP(P_EMBED, mt_embed_fwd_vocab(dt, s->part, s->tok, wp(s, -1, MT_P_WORD_EMB), s->v0, s->V, s->N, s->h));
		if (mt_cu_tp_reduce(s, s->res, s->part, s->h))
			return -1;
		if (wp(s, -1, MT_P_POS_EMB))
			KP(P_EMBED, mt_embed_pos_add(dt, s->res, wp(s, -1, MT_P_POS_EMB), s->r0, s->Nr, s->T, s->h));
		return 0;
	}
	KP(P_EMBED, mt_embed_fwd(dt, s->res, s->tok, wp(s, -1, MT_P_WORD_EMB), wp(s, -1, MT_P_POS_EMB), s->N, s->T, s->h));
	return 0;
}

/* the embeddings' gradient from s->dres (d loss / d res[0]) */
int mt_cu_embed_bwd(struct cu *s, int64_t nu)
{
	enum mt_dtype dt = s->dt;

	if (s->tpn > 1) {
		/* the word rows of this rank's vocabulary from every row (gathered with SP);
		 * the positions from this rank's rows */
		void *dfull = mt_cu_tp_gather(s, s->dres, s->h);
		if (!dfull)
			return -1;
		KP(P_EMBED, mt_embed_bwd(dt, gp(s, -1, MT_P_WORD_EMB), NULL, dfull, s->u_tok, s->u_start, s->u_pos, nu, s->N,
					 s->T, s->h));
		if (gp(s, -1, MT_P_POS_EMB))
			KP(P_EMBED, mt_embed_pos_bwd(dt, gp(s, -1, MT_P_POS_EMB), s->dres, s->r0, s->Nr, s->T, s->h));
		return 0;
	}
	KP(P_EMBED, mt_embed_bwd(dt, gp(s, -1, MT_P_WORD_EMB), gp(s, -1, MT_P_POS_EMB), s->dres, s->u_tok, s->u_start,
				 s->u_pos, nu, s->N, s->T, s->h));
	return 0;
}

/* The head: the final norm of xL (the last layer's output) into s->lnf, then per chunk
 * of rows the logits, each row's loss into s->rowloss (targets s->tgt, count of them
 * counted) and, with backward, the output layer's gradient and d loss / d lnf into dln
 * (this rank's rows, reduced over the tensor-parallel group). */
int mt_cu_head(struct cu *s, void *xL, int backward, int64_t count, void *dln)
{
	const struct mt_config *c = s->c;
	enum mt_dtype dt = s->dt;
	int untied = c->untie_embeddings_and_output_weights;
	void *wout = untied ? wp(s, -1, MT_P_OUTPUT) : wp(s, -1, MT_P_WORD_EMB);
	void *lnf;

	KP(P_NORM, mt_norm_fwd(dt, s->lnf, s->lnfs, xL, wp(s, -1, MT_P_FINAL_W), wp(s, -1, MT_P_FINAL_B), s->Nr, s->h,
			       c->normalization == MT_NORM_RMSNORM, (float)c->norm_epsilon));
	if (!(lnf = s->tpn > 1 ? mt_cu_tp_gather(s, s->lnf, s->h) : s->lnf))
		return -1;
	for (int64_t r0 = 0; r0 < s->N; r0 += s->chunk_rows) {
		int64_t rows = s->N - r0 < s->chunk_rows ? s->N - r0 : s->chunk_rows;
		void *x = row(s, lnf, r0, s->h);
		float gs = count ? (float)(s->scale / (double)count) : 0.0f;
		KP(P_MM_OUT, mt_linear_fwd(s->lt, dt, s->logits, x, wout, NULL, NULL, rows, s->h, s->V));
		if (s->tpn > 1) {
			/* vocabulary-parallel cross-entropy: each rank's row maximum and sum of
			 * exponentials, the group's from them, then the loss (on the rank holding
			 * the target) and the gradient of this rank's logits */
			KP(P_CLASS, mt_classifier_stats(dt, s->logits, s->cmx, s->csum, rows, s->V));
			if (mt_cu_tp_sync(s, "the tensor-parallel collectives"))
				return -1;
			RT(cudaMemcpy(s->h_cmx, s->cmx, (size_t)rows * 4, cudaMemcpyDeviceToHost));
			RT(cudaMemcpy(s->h_csum, s->csum, (size_t)rows * 4, cudaMemcpyDeviceToHost));
			for (int64_t n = 0; n < rows; n++)
				s->h_d[n] = s->h_cmx[n];
			if (s->tp->allreduce_f64(s->tp->ctx, s->h_d, rows, 1))
				return mt_cu_tp_failed(s);
			/* this rank's sum rescaled to the group's maximum, then summed */
			for (int64_t n = 0; n < rows; n++) {
				double m = s->h_d[n];
				s->h_d[n] = (double)s->h_csum[n] * exp((double)s->h_cmx[n] - m);
				s->h_cmx[n] = (float)m;
			}
			if (s->tp->allreduce_f64(s->tp->ctx, s->h_d, rows, 0))
				return mt_cu_tp_failed(s);
			for (int64_t n = 0; n < rows; n++)
				s->h_csum[n] = (float)s->h_d[n];
			RT(cudaMemcpy(s->cmx, s->h_cmx, (size_t)rows * 4, cudaMemcpyHostToDevice));
			RT(cudaMemcpy(s->csum, s->h_csum, (size_t)rows * 4, cudaMemcpyHostToDevice));
			KP(P_CLASS, mt_classifier_vocab(dt, s->logits, s->rowloss + r0, s->tgt + r0, s->cmx, s->csum, s->v0, rows,
							s->V, backward, gs));
		} else {
			KP(P_CLASS, mt_classifier(dt, s->logits, s->rowloss + r0, s->tgt + r0, rows, s->V, backward, gs));
		}
		if (backward) {
			KP(P_MM_OUT, lin_bwd_w(s, -1, untied ? MT_P_OUTPUT : MT_P_WORD_EMB, s->logits, x, rows, s->h, s->V));
			KP(P_MM_OUT, mt_linear_bwd_in(s->lt, dt, row(s, s->tpn > 1 ? s->part : dln, r0, s->h), s->logits, wout,
						      rows, s->h, s->V, 0));
		}
	}
	if (backward && s->tpn > 1 && mt_cu_tp_reduce(s, dln, s->part, s->h))
		return -1;
	return 0;
}

/* the mean loss of the rows in s->rowloss over count targets (the rank holding a row's
 * target has its loss under tensor parallelism: summed over the group) */
int mt_cu_loss_out(struct cu *s, int64_t count, double *loss)
{
	double sum = 0;

	if (mt_cu_tp_sync(s, "the tensor-parallel collectives"))
		return -1;
	RT(cudaMemcpy(s->h_loss, s->rowloss, (size_t)s->N * sizeof(float), cudaMemcpyDeviceToHost));
	for (int64_t n = 0; n < s->N; n++)
		sum += s->h_loss[n];
	if (s->tpn > 1 && s->tp->allreduce_f64(s->tp->ctx, &sum, 1, 0))
		return mt_cu_tp_failed(s);
	*loss = count ? sum / (double)count : 0;
	return 0;
}

static int micro(struct cu *s, const int32_t *tokens, const int32_t *targets, int backward, double *loss)
{
	const struct mt_config *c = s->c;
	void *xL = row(s, s->res, s->L * s->Nr, s->h);
	int64_t count = 0, nu = 0;
	double t0 = s->timers ? mt_now() : 0;

	for (int64_t n = 0; n < s->N; n++)
		count += targets[n] >= 0;
	if (backward == MT_BACKWARD_LAST && s->dp > 1) {
		if (s->pending) {
			mt_err_set(&s->derr, MT_EXIT_IO, "the previous step's gradient reduction was not waited for");
			s->failed = 1;
			return -1;
		}
		s->next = 0; /* this pass reduces */
	}
	s->tp_last = backward == MT_BACKWARD_LAST;
	s->tp_done = s->t->total;
	if (mt_cu_tokens_in(s, tokens, targets) || mt_cu_embed_fwd(s))
		return -1;
	for (int l = 0; l < s->L; l++)
		if (mt_cu_layer_fwd(s, l, &s->slots[s->o.recompute_full ? 0 : l]))
			return -1;
	if (mt_cu_head(s, xL, backward, count, s->dln))
		return -1;
	if (backward && mt_cu_groups_in(s, tokens, &nu))
		return -1;
	if (s->timers) {
		/* timed (--log-timers-to-tensorboard): the forward passes once done, the output
		 * layer's backward with them (the loss kernel makes its gradient in place) */
		RT(cudaStreamSynchronize(0));
		mt_timer_add(s->timers, MT_T_FORWARD_COMPUTE, t0);
		t0 = mt_now();
	}
	if (backward) {
		float *gb = gp(s, (int)s->L - 1, MT_P_FC2_B); /* the last layer's fc2 bias: see layer_bwd */
		KP(P_NORM, mt_norm_bwd(s->dt, s->dres, 0, gp(s, -1, MT_P_FINAL_W), gp(s, -1, MT_P_FINAL_B), gb, s->dln,
				       xL, s->lnfs, wp(s, -1, MT_P_FINAL_W), s->Nr, s->h,
				       c->normalization == MT_NORM_RMSNORM, s->scratch));
		s->dres_summed = gb != NULL;
		/* the data-parallel reduction follows the pass: everything from the final norm
		 * on, then each layer, then the embeddings (tied to the output layer) */
		if (ready(s, mt_params_get(s->t, -1, MT_P_FINAL_W)->offset))
			return -1;
		for (int l = (int)s->L - 1; l >= 0; l--) {
			struct slot *sl = &s->slots[s->o.recompute_full ? 0 : l];
			if (s->o.recompute_full && mt_cu_layer_fwd(s, l, sl))
				return -1;
			if (mt_cu_layer_bwd(s, l, sl, NULL))
				return -1;
			if (ready(s, mt_params_get(s->t, l, MT_P_LN1_W)->offset))
				return -1;
		}
		if (mt_cu_embed_bwd(s, nu) || ready(s, 0))
			return -1;
	}
	/* the caller's work for the next pass, while the device runs this one */
	if (s->overlap)
		s->overlap(s->overlap_ctx);
	if (mt_cu_loss_out(s, count, loss)) /* after the passes on the compute stream */
		return -1;
	if (backward)
		mt_timer_add(s->timers, MT_T_BACKWARD_COMPUTE, t0);
	return 0;
}

/* evaluation: the forward pass, then per chunk of logits -log p and the argmax's hit
 * per position (classifier_score.cu); a partial micro-batch is padded with uncounted
 * rows. Per row, the positions summed in order in double on the host. */
static int score(struct cu *s, int64_t rows, const int32_t *tokens, const int32_t *targets, int real_vocab,
		 struct mt_score_row *out)
{
	const struct mt_config *c = s->c;
	enum mt_dtype dt = s->dt;
	int rms = c->normalization == MT_NORM_RMSNORM;
	void *wout = c->untie_embeddings_and_output_weights ? wp(s, -1, MT_P_OUTPUT) : wp(s, -1, MT_P_WORD_EMB);
	void *xL = row(s, s->res, s->L * s->N, s->h);
	int64_t n = rows * s->T, nv = real_vocab ? c->vocab_size : s->V;

	memcpy(s->h_tok, tokens, (size_t)n * sizeof(int32_t));
	memcpy(s->h_tgt, targets, (size_t)n * sizeof(int32_t));
	for (int64_t k = n; k < s->N; k++)
		s->h_tok[k] = 0, s->h_tgt[k] = -1;
	RT(cudaMemcpy(s->tok, s->h_tok, (size_t)s->N * sizeof(int32_t), cudaMemcpyHostToDevice));
	RT(cudaMemcpy(s->tgt, s->h_tgt, (size_t)s->N * sizeof(int32_t), cudaMemcpyHostToDevice));
	K(mt_embed_fwd(dt, s->res, s->tok, wp(s, -1, MT_P_WORD_EMB), wp(s, -1, MT_P_POS_EMB), s->N, s->T, s->h));
	for (int l = 0; l < s->L; l++)
		if (mt_cu_layer_fwd(s, l, &s->slots[s->nslots == 1 ? 0 : l]))
			return -1;
	K(mt_norm_fwd(dt, s->lnf, s->lnfs, xL, wp(s, -1, MT_P_FINAL_W), wp(s, -1, MT_P_FINAL_B), s->N, s->h, rms,
		      (float)c->norm_epsilon));
	for (int64_t r0 = 0; r0 < n; r0 += s->chunk_rows) {
		int64_t m = n - r0 < s->chunk_rows ? n - r0 : s->chunk_rows;
		K(mt_linear_fwd(s->lt, dt, s->logits, row(s, s->lnf, r0, s->h), wout, NULL, NULL, m, s->h, s->V));
		K(mt_classifier_score(dt, s->logits, s->rowloss + r0, s->hit + r0, s->tgt + r0, m, s->V, nv));
	}
	RT(cudaMemcpy(s->h_loss, s->rowloss, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost));
	RT(cudaMemcpy(s->h_hit, s->hit, (size_t)n * sizeof(int32_t), cudaMemcpyDeviceToHost));
	for (int64_t r = 0; r < rows; r++) {
		struct mt_score_row *o = &out[r];
		memset(o, 0, sizeof(*o));
		for (int64_t j = 0; j < s->T; j++) {
			int64_t k = r * s->T + j;
			if (targets[k] < 0)
				continue;
			o->loss += s->h_loss[k];
			o->count++;
			o->correct += s->h_hit[k] != 0;
		}
	}
	return 0;
}

int mt_cu_score_rows(struct mt_backend *b, int64_t rows, const int32_t *tokens, const int32_t *targets,
		     int real_vocab, struct mt_score_row *out, struct mt_err *err)
{
	struct cu *s = b->state;

	if (rows < 1 || rows > s->B)
		return mt_err_set(err, MT_EXIT_USAGE, "score_rows: %lld rows, the micro-batch is %lld", (long long)rows,
				  (long long)s->B);
	if (s->tpn > 1)
		return mt_err_set(err, MT_EXIT_USAGE, "score_rows: not with tensor parallelism (evaluate the checkpoint)");
	if (s->failed || score(s, rows, tokens, targets, real_vocab, out))
		return mt_err_set(err, MT_EXIT_IO, "CUDA backend: %s", mt_cuda_error());
	return 0;
}

double mt_cu_step_micro(struct mt_backend *b, const int32_t *tokens, const int32_t *targets, int backward)
{
	struct cu *s = b->state;
	double loss = NAN;

	s->timers = b->timers;
	s->overlap = b->overlap;
	s->overlap_ctx = b->overlap_ctx;
	if (s->failed || micro(s, tokens, targets, backward, &loss))
		return NAN;
	mt_cu_prof_collect(s);
	return loss;
}

/* the backend failed earlier (a pass, a launch): its message as the caller's error */
int mt_cu_failed_err(struct cu *s, struct mt_err *err)
{
	if (s->derr.msg[0]) {
		*err = s->derr;
		return -1;
	}
	return mt_err_set(err, MT_EXIT_IO, "CUDA backend: %s", mt_cuda_error());
}

size_t mt_cu_bytes(const struct mt_backend *b)
{
	const struct cu *s = b->state;

	return s->bytes[0] + s->bytes[1] + s->bytes[2] + s->bytes[3];
}

int mt_backend_cuda_usable(void)
{
	return mt_cuda_device_count() > 0;
}

#else /* no CUDA in this build */

#include <math.h>

static int mt_cu_init(struct mt_backend *b, const struct mt_config *c, const struct mt_params *t, int micro_batch,
		     struct mt_err *err)
{
	(void)b, (void)c, (void)t, (void)micro_batch;
	return mt_err_set(err, MT_EXIT_USAGE, "this build has no CUDA backend (nvcc was not found): use --device cpu");
}
static void mt_cu_free(struct mt_backend *b) { (void)b; }
static int mt_cu_load_state(struct mt_backend *b, const float *w, const float *m, const float *v, struct mt_err *err)
{
	(void)b, (void)w, (void)m, (void)v, (void)err;
	return -1;
}
static int mt_cu_save_state(struct mt_backend *b, float *w, float *m, float *v, struct mt_err *err)
{
	(void)b, (void)w, (void)m, (void)v, (void)err;
	return -1;
}
static void mt_cu_zero_grad(struct mt_backend *b) { (void)b; }
static double mt_cu_step_micro(struct mt_backend *b, const int32_t *tokens, const int32_t *targets, int backward)
{
	(void)b, (void)tokens, (void)targets, (void)backward;
	return 0;
}
static int mt_cu_grad_prepare(struct mt_backend *b, float scale, double max_norm, double *norm, int *nonfinite,
			     struct mt_err *err)
{
	(void)b, (void)scale, (void)max_norm;
	*norm = 0;
	*nonfinite = 1;
	return mt_err_set(err, MT_EXIT_USAGE, "this build has no CUDA backend");
}
static int mt_cu_adamw_step(struct mt_backend *b, struct mt_adamw *o, double lr, struct mt_err *err)
{
	(void)b, (void)o, (void)lr;
	return mt_err_set(err, MT_EXIT_USAGE, "this build has no CUDA backend");
}
static int mt_cu_get_grad(struct mt_backend *b, float *g, struct mt_err *err)
{
	(void)b, (void)g, (void)err;
	return -1;
}
static size_t mt_cu_bytes(const struct mt_backend *b)
{
	(void)b;
	return 0;
}
static double mt_cu_loss_scale(const struct mt_backend *b)
{
	(void)b;
	return 1.0;
}
static int mt_cu_score_rows(struct mt_backend *b, int64_t rows, const int32_t *tokens, const int32_t *targets,
			   int real_vocab, struct mt_score_row *out, struct mt_err *err)
{
	(void)b, (void)rows, (void)tokens, (void)targets, (void)real_vocab, (void)out;
	return mt_err_set(err, MT_EXIT_USAGE, "this build has no CUDA backend");
}
int mt_backend_cuda_usable(void)
{
	return 0;
}
static double mt_cu_stage_forward(struct mt_backend *b, int chunk, int slot, const int32_t *tokens,
				 const int32_t *targets, const void *in, void *out, int64_t *ntargets)
{
	(void)b, (void)chunk, (void)slot, (void)tokens, (void)targets, (void)in, (void)out;
	*ntargets = 0;
	return NAN;
}
static int mt_cu_stage_backward(struct mt_backend *b, int chunk, int slot, const void *dout, void *din, int split)
{
	(void)b, (void)chunk, (void)slot, (void)dout, (void)din, (void)split;
	return -1;
}
static int mt_cu_stage_weight(struct mt_backend *b, int chunk, int slot)
{
	(void)b, (void)chunk, (void)slot;
	return -1;
}
static int mt_cu_tie_grads(struct mt_backend *b, const struct mt_tp *emb, struct mt_err *err)
{
	(void)b, (void)emb;
	return mt_err_set(err, MT_EXIT_USAGE, "this build has no CUDA backend");
}
static int mt_cu_pp_transport(struct mt_backend *b, struct mt_dist *g, const struct mt_pp_transport **out,
			     size_t *elem_bytes, struct mt_err *err)
{
	(void)b, (void)g, (void)err;
	*out = NULL;
	*elem_bytes = 4;
	return 0;
}

#endif

const struct mt_backend_ops mt_backend_cuda = {
	.name = "cuda",
	.init = mt_cu_init,
	.free = mt_cu_free,
	.load_state = mt_cu_load_state,
	.save_state = mt_cu_save_state,
	.zero_grad = mt_cu_zero_grad,
	.step_micro = mt_cu_step_micro,
	.grad_prepare = mt_cu_grad_prepare,
	.adamw_step = mt_cu_adamw_step,
	.get_grad = mt_cu_get_grad,
	.bytes = mt_cu_bytes,
	.score_rows = mt_cu_score_rows,
	.stage_forward = mt_cu_stage_forward,
	.stage_backward = mt_cu_stage_backward,
	.stage_weight = mt_cu_stage_weight,
	.tie_grads = mt_cu_tie_grads,
	.pp_transport = mt_cu_pp_transport,
	.loss_scale = mt_cu_loss_scale,
};
