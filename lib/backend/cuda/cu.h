/* cu.h: what the files of the CUDA backend share, for them alone: struct cu, the state of
 * one backend; struct pslot, a pipeline stage's micro-batch in flight; the check macros
 * (K, KP: a kernel launcher's error, KP timing it under MT_CUDA_PROFILE; RT: a CUDA
 * runtime call's, with the caller's file and line); the small accessors of the flat
 * buffers; and the functions one file defines for the others, by file. The files, one
 * concept each: plan.c, passes.c, data_parallel.c, tensor_parallel.c,
 * pipeline_parallel.c, optimizer.c, ops.c. */
#ifndef MT_BACKEND_CUDA_CU_H
#define MT_BACKEND_CUDA_CU_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "../../../kernels/cuda_err.h"
#include "backend/backend.h"
#include "parallel/ddpplan.h"
#include "parallel/ncclcomm.h"

/* one layer's activations kept for its backward pass */
struct slot {
	void *ln1, *qkv, *atty, *mid, *ln2, *fc1, *act;
	float *ln1s, *ln2s, *lse;
};

/* MT_CUDA_PROFILE=1 in the environment: time every kernel call with CUDA events and log
 * the totals per kind at the end, the first step (module loading, first heuristics) left
 * out (for kernels/bench/NOTES.md; it serializes nothing but costs a little) */
enum { P_MATMUL, P_MM_DIN, P_MM_DW, P_MM_OUT, P_ATTN, P_ATTN_B, P_NORM, P_BIAS, P_ACT, P_CLASS, P_EMBED, P_OPTIM, P_NCAT };

#define PROF_MAX 4096

struct cu {
	const struct mt_config *c;
	const struct mt_params *t;
	struct mt_backend_opts o;
	enum mt_dtype dt;
	size_t es;
	int64_t B, T, N, L, h, np, ng, hd, q, qkv, f, fc1, V, nslots, chunk_rows;
	size_t bytes[4];
	void *mem[4];
	float *w, *g, *m, *v;
	void *wc;
	void *res, *lnf, *dres, *dln, *dbig, *dsmall, *logits;
	struct slot *slots;
	float *lnfs, *rowloss, *scratch, *dsum, *rope_cs;
	int32_t *tok, *tgt, *hit, *u_tok, *u_start, *u_pos;
	struct mt_chunk *chunks;
	int64_t nchunks;
	/* the gradients zeroed at each step's start: those of every parameter but the linear
	 * layers' weights, which their first weight-gradient product of the step overwrites
	 * (gfresh[i]: parameter i not yet written this step; first_write 0, MT_CUDA_FIRST_WRITE=0:
	 * the whole buffer zeroed, every product adding) */
	struct mt_chunk *zchunks;
	int64_t nzchunks;
	unsigned char *gfresh;
	int first_write;
	double *partial, *sumsq;
	struct mt_lt *lt;
	struct mt_lttune *lttune; /* MT_CUDA_MATMUL_TUNING's file, or NULL */
	/* host */
	int32_t *h_count, *h_u, *h_start, *h_pos, *h_hit, *h_tok, *h_tgt;
	float *h_loss;
	void (*overlap)(void *);       /* mt_backend's, for the pass being queued */
	void *overlap_ctx;
	void *h_pin;                   /* h_u, h_start, h_pos, h_tok, h_tgt, h_loss: page-locked
					* (NULL: malloc'ed, when the driver gives none), so that
					* their copies run in stream order behind the kernels */
	float gclip;
	int failed;
	/* fp16 loss scaling */
	double scale;
	int growth, hyst;
	/* profiling */
	int prof, nev;
	cudaEvent_t *ev;
	int *evcat;
	double ptime[P_NCAT];
	double pwall, plast;           /* the steps' time on the host's clock, from the second */
	int psteps;
	/* data parallelism (dp > 1) */
	struct mt_dist *d;
	int dp, me, zero;
	struct mt_nccl *nccl;
	cudaStream_t comm;
	cudaEvent_t *bev, done;
	struct mt_ddp_plan plan;       /* buckets, pieces, the shard (ddpplan.h) */
	int next;                      /* the next bucket to launch; -1: not reducing this pass */
	int pending;                   /* the step's reduction was launched and not yet waited for */
	int64_t npiece_chunks;         /* ZeRO: the chunks of the rank's pieces (the leftovers follow) */
	int64_t *g_cnt, *g_dsp;        /* dp entries: a bucket's pieces for dist.h's gather */
	struct mt_err derr;            /* what failed in a pass (NCCL), for grad_prepare to report */
	double *timers;                /* the caller's phase timers for this micro-batch (backend.h) */
	/* tensor parallelism (o.tp with more than one rank): the dimensions above are this
	 * rank's (heads, groups, ffn columns, vocabulary rows); the residual stream has Nr
	 * rows from r0 (all N without sequence parallelism); the split points go through
	 * host memory to o.tp's operations (MPI), so ranks may share a GPU */
	const struct mt_tp *tp;
	int tpn, sp;
	int64_t Nr, r0, v0;
	void *full, *part;             /* device [N][h]: gathered rows, partial sums */
	float *cmx, *csum;             /* device [chunk_rows]: the cross-entropy's row statistics */
	float *h_a, *h_b;              /* host [N][h] staging */
	uint16_t *h_16;                /* host [N][h]: bf16 rows */
	float *h_cmx, *h_csum;
	double *h_d, *h_partial;
	unsigned char *chunk_norm;     /* per chunk: counted in the gradient norm (params.h norm_skip) */
	/* the split points over NCCL instead (each rank of the group on its own GPU): the
	 * activations' collectives on the compute stream, the sequence-parallel replicas'
	 * gradient sums on the communication stream under the backward pass, before the
	 * data-parallel buckets that hold them */
	struct mt_nccl *tpnccl;
	cudaEvent_t tpev;
	/* the column-parallel layers' input-gradient sums on a stream of their own, under
	 * the weight gradients (tp_reduce_start): its start and end on the compute stream */
	cudaStream_t tpst;
	cudaEvent_t tpev_in, tpev_out;
	int tp_last;                   /* this pass is the step's last micro-batch */
	int64_t tp_done;               /* its replicas at offsets >= this are being summed */
	int tp_pending;                /* sums launched on s->comm and not yet waited for */
	int tp_overlap;                /* tp_reduce_begin under the weight gradients */
	int sp_keep;                   /* SP over NCCL: the norms' outputs kept gathered (N rows) */
	/* pipeline parallelism (t is a stage's table): the passes run on the micro-batch
	 * bound to them (its pslot; lbase its chunk's first layer, res's row 0), each chunk's
	 * micro-batches in flight in pslots of their own, made on first use */
	int stage;
	int64_t lbase;
	struct pslot **ps;             /* [chunk][slot] */
	int *nps;
	float *h_emb;                  /* host: the tied embedding's gradient (tie_grads) */
	struct ppx *ppx;               /* the stages' NCCL transport (NULL: through host memory) */
	int pp_dev;                    /* the passes' inputs and outputs are its device buffers */
	/* the norm backward that wrote s->dres also added its column sum to the bias gradient
	 * of the fc2 layer whose output gradient it is (the next layer_bwd's): set by the
	 * writer of s->dres, read and cleared by layer_bwd */
	int dres_summed;
};

/* The checks of the code that has a struct cu *s in scope and returns int: K(call) a
 * kernel launcher's (nonzero: the backend fails with mt_cuda_error's message), KP(cat,
 * call) the same timed under MT_CUDA_PROFILE as a call of kind cat, and RT(call) a CUDA
 * runtime call's, reported with the caller's file and line (mt_cu_rt_check) */
#define K(call) KP(-1, call)
#define KP(cat, call)                                                                              \
	do {                                                                                       \
		int c_ = (cat);                                                                    \
		if (c_ >= 0)                                                                       \
			mt_cu_prof_mark(s, c_);                                                    \
		if ((call))                                                                        \
			return mt_cu_fail(s);                                                      \
		if (c_ >= 0)                                                                       \
			mt_cu_prof_mark(s, c_);                                                    \
	} while (0)
#define RT(call) do { if (mt_cu_rt_check(s, (call), #call, __FILE__, __LINE__)) return -1; } while (0)

/* a parameter's compute copy and its gradient (NULL: the model has no such parameter),
 * and row r of a [rows][width] buffer of the compute type */
static inline void *wp(struct cu *s, int layer, enum mt_param_kind k)
{
	const struct mt_param *p = mt_params_get(s->t, layer, k);
	return p ? (char *)s->wc + (size_t)p->offset * s->es : NULL;
}

static inline float *gp(struct cu *s, int layer, enum mt_param_kind k)
{
	const struct mt_param *p = mt_params_get(s->t, layer, k);
	return p ? s->g + p->offset : NULL;
}

static inline void *row(struct cu *s, void *base, int64_t r, int64_t width)
{
	return (char *)base + (size_t)(r * width) * s->es;
}

/* the plan: views carved out of one allocation per category (plan.c) */
struct carve {
	char *base;
	size_t off;
};

/* A micro-batch in flight on a pipeline stage, in one model chunk of nl layers: the
 * residual stream's nl + 1 rows of activations, each layer's (none with full
 * recompute, where s->slots[0] serves them all), the first chunk's tokens and their
 * grouping, the last chunk's targets, final norm and d loss / d lnf (the head's
 * gradient is made in the forward pass, so that an evaluation schedule never needs
 * one), and with split backward passes the four output gradients of each layer that
 * its weight pass reads. One device allocation, made on first use. */
struct pslot {
	void *mem;
	void *res;
	struct slot *ls;
	void *lnf, *dlnf;
	float *lnfs;
	int32_t *tok, *tgt, *u_tok, *u_start, *u_pos;
	void **dsave;                   /* [nl][4] */
	int64_t nu, count;
	double loss;
	int nl;
};

/* the compute type's NCCL element type */
static inline enum mt_nccl_type ntype(enum mt_dtype dt)
{
	return dt == MT_BF16 ? MT_NCCL_BF16 : dt == MT_F16 ? MT_NCCL_F16 : MT_NCCL_F32;
}

/* plan.c: the state, memory, errors, profiling */
void mt_cu_prof_mark(struct cu *s, int cat);
void mt_cu_prof_collect(struct cu *s);
int mt_cu_fail(struct cu *s);
int mt_cu_rt_check(struct cu *s, cudaError_t e, const char *what, const char *file, int line);
int mt_cu_overwritten(const struct cu *s, const struct mt_param *p);
size_t mt_cu_carve_pslot(struct cu *s, struct carve *k, struct pslot *x, int first, int last);
void mt_cu_free(struct mt_backend *b);
double mt_cu_gib(size_t n);
int mt_cu_group_gpus(struct mt_dist *g, const char *what, int *dev, int *distinct, struct mt_err *err);
int mt_cu_init(struct mt_backend *b, const struct mt_config *c, const struct mt_params *t, int micro_batch,
	       struct mt_err *err);
int mt_cu_failed_err(struct cu *s, struct mt_err *err);
size_t mt_cu_bytes(const struct mt_backend *b);

/* passes.c: the forward and backward passes */
int mt_cu_qkv_bias_fused(const struct cu *s);
int mt_cu_layer_fwd(struct cu *s, int l, struct slot *sl);
int mt_cu_layer_bwd(struct cu *s, int l, struct slot *sl, void *const *dsave);
int mt_cu_layer_w(struct cu *s, int l, struct slot *sl, void *const *dsave);
int mt_cu_tokens_in(struct cu *s, const int32_t *tokens, const int32_t *targets);
int mt_cu_groups_in(struct cu *s, const int32_t *tokens, int64_t *nu);
int mt_cu_embed_fwd(struct cu *s);
int mt_cu_embed_bwd(struct cu *s, int64_t nu);
int mt_cu_head(struct cu *s, void *xL, int backward, int64_t count, void *dln);
int mt_cu_loss_out(struct cu *s, int64_t count, double *loss);
int mt_cu_score_rows(struct mt_backend *b, int64_t rows, const int32_t *tokens, const int32_t *targets,
		     int real_vocab, struct mt_score_row *out, struct mt_err *err);
double mt_cu_step_micro(struct mt_backend *b, const int32_t *tokens, const int32_t *targets, int backward);

/* data_parallel.c: gradient buckets, ZeRO shards */
cudaError_t mt_cu_shard_copy(struct cu *s, float *whole, float *shard, int to_shard);
int mt_cu_shard_gather(struct cu *s, float *whole, struct mt_err *err);
int mt_cu_dp_init(struct cu *s, struct mt_err *err);
int mt_cu_grads_ready(struct cu *s, int64_t lo);
int mt_cu_load_sharded(struct cu *s, const float *w, const float *m, const float *v, struct mt_err *err);
int mt_cu_reduce_wait(struct cu *s, int64_t step, struct mt_err *err);
int mt_cu_gather_params(struct cu *s, int64_t step, struct mt_err *err);

/* tensor_parallel.c: the split points' collectives */
int mt_cu_tp_init(struct cu *s, struct mt_err *err);
int mt_cu_st_d2h(struct cu *s, float *h, const void *d, int64_t n);
int mt_cu_st_h2d(struct cu *s, void *d, const float *h, int64_t n);
int mt_cu_tp_failed(struct cu *s);
int mt_cu_tp_sync(struct cu *s, const char *what);
int mt_cu_tp_reduce(struct cu *s, void *out, void *part, int64_t w);
int mt_cu_tp_reduce_begin(struct cu *s, void *out, void *part, int64_t w);
int mt_cu_tp_reduce_end(struct cu *s);
void *mt_cu_tp_gather(struct cu *s, void *rows, int64_t w);
void *mt_cu_ln_rows(struct cu *s, void *buf);
void *mt_cu_ln_whole(struct cu *s, void *buf);
void *mt_cu_ln_kept(struct cu *s, void *buf);
int mt_cu_tp_grads_ready(struct cu *s, int64_t lo);
int mt_cu_tp_grads_wait(struct cu *s, int64_t step, struct mt_err *err);

/* pipeline_parallel.c: stages and their transport */
void mt_cu_ppx_close(struct cu *s);
int mt_cu_pp_transport(struct mt_backend *b, struct mt_dist *g, const struct mt_pp_transport **out,
		       size_t *elem_bytes, struct mt_err *err);
double mt_cu_stage_forward(struct mt_backend *b, int chunk, int slot, const int32_t *tokens,
			   const int32_t *targets, const void *in, void *out, int64_t *ntargets);
int mt_cu_stage_backward(struct mt_backend *b, int chunk, int slot, const void *dout, void *din, int split);
int mt_cu_stage_weight(struct mt_backend *b, int chunk, int slot);
int mt_cu_stage_reduce(struct cu *s);
int mt_cu_tie_grads(struct mt_backend *b, const struct mt_tp *emb, struct mt_err *err);

/* optimizer.c: state in and out, the step */
int mt_cu_load_state(struct mt_backend *b, const float *w, const float *m, const float *v, struct mt_err *err);
int mt_cu_save_state(struct mt_backend *b, float *w, float *m, float *v, struct mt_err *err);
void mt_cu_zero_grad(struct mt_backend *b);
int mt_cu_grad_prepare(struct mt_backend *b, float scale, double max_norm, double *norm, int *nonfinite,
		       struct mt_err *err);
int mt_cu_adamw_step(struct mt_backend *b, struct mt_adamw *o, double lr, struct mt_err *err);
int mt_cu_get_grad(struct mt_backend *b, float *g, struct mt_err *err);
double mt_cu_loss_scale(const struct mt_backend *b);

#endif
