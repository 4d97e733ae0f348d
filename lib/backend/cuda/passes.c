/* passes.c: the CUDA backend's forward and backward passes (plan.c holds the state
 * they run in): a transformer layer's forward (layer_fwd) and backward (layer_bwd, which
 * split backward passes follow with layer_w's weight gradients), the embeddings, the head
 * and its loss, a micro-batch's passes (step_micro) and evaluation's scoring (score_rows).
 * The passes call the tensor-parallel split points (tensor_parallel.c), and as the
 * backward pass finishes a part of the gradient they launch its reductions (ready:
 * tensor_parallel.c, data_parallel.c); a pipeline stage runs the same layers on the
 * micro-batch it binds (pipeline_parallel.c). Not here: the memory, the collectives
 * themselves, the optimizer step.
 *
 * Activations and their gradients are in the compute type; norms, softmax, attention
 * and the loss sum in fp32; weight gradients accumulate in fp32. The logits are made a
 * chunk of rows at a time, their loss and gradient computed in place and consumed by
 * the two output matmuls before the next chunk. --recompute-granularity full keeps
 * only each layer's input and recomputes its forward in the backward pass. Every
 * kernel sums in a fixed order, so runs repeat bit for bit, but for the sm_90a attention
 * backward's query gradients, which --deterministic (mt_attention_deterministic) puts
 * in a fixed order too. */
#ifdef MT_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <math.h>
#include <string.h>

#include "../../../kernels/attention.h"
#include "../../../kernels/classifier.h"
#include "../../../kernels/classifier_score.h"
#include "../../../kernels/cuda_err.h"
#include "../../../kernels/embed.h"
#include "../../../kernels/matmul.h"
#include "../../../kernels/norm.h"
#include "../../../kernels/rope.h"
#include "../../../kernels/swiglu.h"
#include "../../../kernels/tpsplit.h"
#include "backend/cuda/cu.h"
#include "base/timers.h"

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
int mt_cu_qkv_bias_fused(const struct cu *s)
{
	return s->c->add_bias_linear && s->c->position_embedding_type != MT_POS_ROPE;
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
	gb = mt_cu_qkv_bias_fused(s) ? gp(s, l, MT_P_QKV_B) : NULL;
	KP(P_ATTN_B, mt_attention_bwd(dt, s->dbig, s->dsmall, sl->atty, sl->lse, sl->qkv, (int)s->B, (int)s->T, (int)s->np,
			   (int)s->ng, (int)s->hd, gb, s->dsum,
			   c->position_embedding_type == MT_POS_ROPE ? s->rope_cs : NULL));
	if (col_bwd(s, l, sl->ln1, MT_P_QKV_W, mt_cu_qkv_bias_fused(s) ? NULL : gp(s, l, MT_P_QKV_B), s->qkv,
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

#endif
