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
 * parallelism (data_parallel.c), pipeline parallelism (pipeline_parallel.c), the state's
 * copies and the optimizer step (optimizer.c), the passes (passes.c) and the ops table
 * and the build without CUDA (ops.c). */
#ifdef MT_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../../kernels/adamw.h"
#include "../../../kernels/attention.h"
#include "../../../kernels/cuda_err.h"
#include "../../../kernels/matmul.h"
#include "../../../kernels/norm.h"
#include "backend/cuda/cu.h"
#include "backend/lttune.h"
#include "base/knobs.h"
#include "base/log.h"
#include "parallel/ncclcomm.h"
#include "parallel/ddpplan.h"

/* cuBLASLt's workspace: 32 MiB, or MT_CUDA_WORKSPACE_MB from the environment */
static size_t workspace_bytes(void)
{
	long long mb = mt_knob_int(MT_KNOB_CUDA_WORKSPACE_MB);
	return (size_t)(mb > 0 ? mb : 32) << 20;
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
								   (int)s->hd, mt_cu_qkv_bias_fused(s)) *
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
	mt_knobs_to_kernels();
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
		int mode = (int)mt_knob_int(MT_KNOB_CUDA_EQUAL_CHUNKS);
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
	if (mt_knob_int(MT_KNOB_CUDA_PROFILE) > 0) {
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
	s->first_write = !s->o.inference && mt_knob_int(MT_KNOB_CUDA_FIRST_WRITE) != 0;
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

#endif
