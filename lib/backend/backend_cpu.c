/* backend_cpu.c: the reference backend: fp32 buffers in host memory, gpt.c's passes
 * (the whole model, or a pipeline stage's chunks with a slot of activations for each
 * micro-batch in flight), optim.c's AdamW (see backend.h). With the distributed optimizer the AdamW moments
 * live in dp.c, a shard per rank, so this backend holds none. */
#include "backend/backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/timers.h"
#include "model/gpt.h"

/* one micro-batch in flight on a pipeline stage: its activations and its tokens */
struct stage_slot {
	struct mt_gpt_acts acts;
	int32_t *tok, *tgt;
	int used;
};

struct cpu {
	const struct mt_config *c;
	const struct mt_params *t;
	float *w, *g, *m, *v;
	int borrowed; /* inference: w is the caller's */
	struct mt_gpt_acts acts;
	/* pipeline parallelism: slots[chunk][slot], grown as the schedule asks */
	struct stage_slot **slots;
	int *nslots;
	int micro_batch;
};

static void cpu_free(struct mt_backend *b)
{
	struct cpu *s = b->state;

	if (!s)
		return;
	mt_gpt_acts_free(&s->acts);
	for (int c = 0; s->slots && c < s->t->nchunks; c++) {
		for (int i = 0; i < s->nslots[c]; i++) {
			mt_gpt_acts_free(&s->slots[c][i].acts);
			free(s->slots[c][i].tok);
		}
		free(s->slots[c]);
	}
	free(s->slots);
	free(s->nslots);
	if (!s->borrowed)
		free(s->w);
	free(s->g), free(s->m), free(s->v);
	free(s);
	b->state = NULL;
}

static int cpu_init(struct mt_backend *b, const struct mt_config *c, const struct mt_params *t, int micro_batch,
		    struct mt_err *err)
{
	struct cpu *s = calloc(1, sizeof(*s));

	b->state = s;
	if (!s)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	s->c = c;
	s->t = t;
	s->micro_batch = micro_batch;
	s->acts.label_smoothing = b->opt.label_smoothing;
	if (b->opt.inference) {
		s->borrowed = 1;
		if (mt_gpt_acts_alloc_tp(&s->acts, c, b->opt.tp, micro_batch, c->seq_length, 0, err)) {
			cpu_free(b);
			return -1;
		}
		return 0;
	}
	s->w = malloc((size_t)t->total * sizeof(float));
	s->g = calloc((size_t)t->total, sizeof(float));
	if (!b->opt.distributed_optimizer) {
		s->m = calloc((size_t)t->total, sizeof(float));
		s->v = calloc((size_t)t->total, sizeof(float));
	}
	if (!s->w || !s->g || (!b->opt.distributed_optimizer && (!s->m || !s->v))) {
		cpu_free(b);
		return mt_err_set(err, MT_EXIT_IO, "out of memory for %lld parameters", (long long)t->total);
	}
	if (t->pp_size > 1) {
		/* a pipeline stage keeps the activations of each micro-batch in flight in
		 * slots of its chunks, made as the schedule needs them */
		s->slots = calloc((size_t)t->nchunks, sizeof(*s->slots));
		s->nslots = calloc((size_t)t->nchunks, sizeof(int));
		if (!s->slots || !s->nslots) {
			cpu_free(b);
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
		}
		return 0;
	}
	if (mt_gpt_acts_alloc_tp(&s->acts, c, b->opt.tp, micro_batch, c->seq_length, 0, err)) {
		cpu_free(b);
		return -1;
	}
	return 0;
}

static int cpu_load_state(struct mt_backend *b, const float *w, const float *m, const float *v, struct mt_err *err)
{
	struct cpu *s = b->state;
	size_t n = (size_t)s->t->total * sizeof(float);

	if (s->borrowed) {
		s->w = (float *)w;
		return 0;
	}
	memcpy(s->w, w, n);
	if (s->m && m)
		memcpy(s->m, m, n);
	else if (s->m)
		memset(s->m, 0, n);
	if (s->v && v)
		memcpy(s->v, v, n);
	else if (s->v)
		memset(s->v, 0, n);
	(void)err;
	return 0;
}

static int cpu_save_state(struct mt_backend *b, float *w, float *m, float *v, struct mt_err *err)
{
	struct cpu *s = b->state;
	size_t n = (size_t)s->t->total * sizeof(float);

	if (w)
		memcpy(w, s->w, n);
	if (m && s->m)
		memcpy(m, s->m, n);
	if (v && s->v)
		memcpy(v, s->v, n);
	(void)err;
	return 0;
}

static void cpu_zero_grad(struct mt_backend *b)
{
	struct cpu *s = b->state;

	memset(s->g, 0, (size_t)s->t->total * sizeof(float));
}

static double cpu_step_micro(struct mt_backend *b, const int32_t *tokens, const int32_t *targets, int backward)
{
	struct cpu *s = b->state;
	double loss, t0 = b->timers ? mt_now() : 0;

	if (!s->acts.mem)
		return NAN; /* a pipeline stage runs stage_forward */
	loss = mt_gpt_forward_f32(s->c, s->t, s->w, tokens, targets, &s->acts, NULL);
	mt_timer_add(b->timers, MT_T_FORWARD_COMPUTE, t0);
	if (backward && !s->acts.failed) {
		t0 = b->timers ? mt_now() : 0;
		mt_gpt_backward_f32(s->c, s->t, s->w, tokens, targets, &s->acts, s->g);
		mt_timer_add(b->timers, MT_T_BACKWARD_COMPUTE, t0);
	}
	return s->acts.failed ? NAN : loss;
}

static int cpu_grad_prepare(struct mt_backend *b, float scale, double max_norm, double *norm, int *nonfinite,
			    struct mt_err *err)
{
	struct cpu *s = b->state;
	/* the agreement and the norm over every rank that holds a part of the model */
	const struct mt_tp *tp = b->opt.mp ? b->opt.mp : b->opt.tp;

	if (scale != 1.0f)
		mt_grad_scale(s->t, s->g, scale);
	*nonfinite = mt_grad_nonfinite(s->t, s->g);
	if (mt_tp_on(tp)) {
		/* every rank of the group decides alike: non-finite anywhere skips the step,
		 * and the norm squared is summed over the group, each replica counted once */
		double x[1] = { *nonfinite };
		if (tp->allreduce_f64(tp->ctx, x, 1, 1))
			return mt_err_set(err, MT_EXIT_IO, "model-parallel agreement on the gradient failed");
		*nonfinite = x[0] != 0;
		if (*nonfinite) {
			*norm = 0;
			return 0;
		}
		x[0] = mt_grad_sumsq(s->t, s->g);
		if (tp->allreduce_f64(tp->ctx, x, 1, 0))
			return mt_err_set(err, MT_EXIT_IO, "model-parallel gradient norm failed");
		*norm = sqrt(x[0]);
		if (max_norm > 0 && mt_grad_clip_coeff(*norm, max_norm) < 1.0)
			mt_grad_scale(s->t, s->g, (float)mt_grad_clip_coeff(*norm, max_norm));
		return 0;
	}
	if (*nonfinite) {
		*norm = 0;
		return 0;
	}
	*norm = max_norm > 0 ? mt_grad_clip(s->t, s->g, max_norm) : mt_grad_norm(s->t, s->g);
	return 0;
}

static int cpu_adamw_step(struct mt_backend *b, struct mt_adamw *o, double lr, struct mt_err *err)
{
	struct cpu *s = b->state;

	if (!s->m)
		return mt_err_set(err, MT_EXIT_USAGE, "backend cpu: no AdamW state here (the distributed optimizer holds it)");
	mt_adamw_step(o, s->t, s->w, s->g, s->m, s->v, lr);
	return 0;
}

static int cpu_get_grad(struct mt_backend *b, float *g, struct mt_err *err)
{
	struct cpu *s = b->state;

	memcpy(g, s->g, (size_t)s->t->total * sizeof(float));
	(void)err;
	return 0;
}

static size_t cpu_bytes(const struct mt_backend *b)
{
	const struct cpu *s = b->state;

	return (s->borrowed ? 0 : (size_t)s->t->total * (s->m ? 16 : 8)) + s->acts.bytes;
}

static float *cpu_host_weights(struct mt_backend *b)
{
	return ((struct cpu *)b->state)->w;
}

static float *cpu_host_grads(struct mt_backend *b)
{
	return ((struct cpu *)b->state)->g;
}

/* the softmax gpt.c leaves after the forward pass, read as lmeval did before the
 * backends scored: -log p in double, the argmax the first largest probability */
static int cpu_score_rows(struct mt_backend *b, int64_t rows, const int32_t *tokens, const int32_t *targets,
			  int real_vocab, struct mt_score_row *out, struct mt_err *err)
{
	struct cpu *s = b->state;
	int64_t T = s->c->seq_length, V = s->c->padded_vocab_size, vocab = s->c->vocab_size;
	int B = s->acts.B;
	const float *p;

	if (rows < 1 || rows > B)
		return mt_err_set(err, MT_EXIT_USAGE, "score_rows: %lld rows, the micro-batch is %d", (long long)rows, B);
	if (mt_tp_on(b->opt.tp))
		return mt_err_set(err, MT_EXIT_USAGE, "score_rows: not with tensor parallelism (evaluate the checkpoint)");
	/* a partial micro-batch runs as a smaller one: the forward pass lays its
	 * activations out by acts.B, in the prefix of each buffer */
	s->acts.B = (int)rows;
	mt_gpt_forward_f32(s->c, s->t, s->w, tokens, targets, &s->acts, NULL);
	s->acts.B = B;
	p = mt_gpt_probs_f32(&s->acts);
	for (int64_t r = 0; r < rows; r++) {
		struct mt_score_row *o = &out[r];
		memset(o, 0, sizeof(*o));
		for (int64_t j = 0; j < T; j++) {
			int32_t y = targets[r * T + j];
			const float *z = p + (r * T + j) * V;
			int64_t best = 0, nv = real_vocab ? vocab : V;
			double pt, sum = 1;
			if (y < 0)
				continue;
			if (real_vocab) {
				sum = 0;
				for (int64_t v = 0; v < nv; v++)
					sum += z[v];
			}
			pt = z[y] / sum;
			o->loss += -log(pt > 1e-300 ? pt : 1e-300);
			o->count++;
			for (int64_t v = 1; v < nv; v++)
				if (z[v] > z[best])
					best = v;
			o->correct += best == y;
		}
	}
	return 0;
}

/* the slot of a chunk, made on first use (a stage's chunk c: the model's first chunk
 * on the first stage's chunk 0, its last on the last stage's last chunk) */
static struct stage_slot *stage_slot(struct cpu *s, const struct mt_backend *b, int chunk, int slot)
{
	const struct mt_params *t = s->t;
	struct stage_slot *x;

	if (chunk < 0 || chunk >= t->nchunks || slot < 0)
		return NULL;
	if (slot >= s->nslots[chunk]) {
		struct stage_slot *n = realloc(s->slots[chunk], (size_t)(slot + 1) * sizeof(*n));
		if (!n)
			return NULL;
		memset(n + s->nslots[chunk], 0, (size_t)(slot + 1 - s->nslots[chunk]) * sizeof(*n));
		s->slots[chunk] = n;
		s->nslots[chunk] = slot + 1;
	}
	x = &s->slots[chunk][slot];
	if (!x->used) {
		struct mt_gpt_stage st = { t->chunk_layers[2 * chunk], t->chunk_layers[2 * chunk + 1],
					   t->first_stage && chunk == 0, t->last_stage && chunk == t->nchunks - 1 };
		int64_t n = (int64_t)s->micro_batch * s->c->seq_length;
		struct mt_err e = { 0 };
		x->acts.label_smoothing = b->opt.label_smoothing;
		x->tok = malloc((size_t)n * 2 * sizeof(int32_t));
		if (!x->tok || mt_gpt_acts_alloc_stage(&x->acts, s->c, b->opt.tp, &st, b->opt.split_backward,
							s->micro_batch, s->c->seq_length, 0, &e)) {
			free(x->tok);
			x->tok = NULL;
			return NULL;
		}
		x->tgt = x->tok + n;
		x->used = 1;
	}
	return x;
}

static double cpu_stage_forward(struct mt_backend *b, int chunk, int slot, const int32_t *tokens,
				const int32_t *targets, const void *in, void *out, int64_t *ntargets)
{
	struct cpu *s = b->state;
	struct stage_slot *x = stage_slot(s, b, chunk, slot);
	size_t n = (size_t)s->micro_batch * (size_t)s->c->seq_length * sizeof(int32_t);
	double loss;

	if (ntargets)
		*ntargets = 0;
	if (!x)
		return NAN;
	/* the backward pass reads them again: the embeddings' rows, the loss's targets */
	if (x->acts.st.first)
		memcpy(x->tok, tokens, n);
	if (x->acts.st.last)
		memcpy(x->tgt, targets, n);
	loss = mt_gpt_stage_forward_f32(s->c, s->t, s->w, x->tok, x->tgt, in, out, &x->acts, ntargets);
	return x->acts.failed ? NAN : loss;
}

static int cpu_stage_backward(struct mt_backend *b, int chunk, int slot, const void *dout, void *din, int split)
{
	struct cpu *s = b->state;
	struct stage_slot *x = stage_slot(s, b, chunk, slot);

	if (!x)
		return -1;
	mt_gpt_stage_backward_f32(s->c, s->t, s->w, x->tok, x->tgt, &x->acts, dout, din, s->g, split);
	return x->acts.failed ? -1 : 0;
}

static int cpu_stage_weight(struct mt_backend *b, int chunk, int slot)
{
	struct cpu *s = b->state;
	struct stage_slot *x = stage_slot(s, b, chunk, slot);

	if (!x)
		return -1;
	mt_gpt_stage_weight_f32(s->c, s->t, s->w, &x->acts, s->g);
	return x->acts.failed ? -1 : 0;
}

const struct mt_backend_ops mt_backend_cpu = {
	.name = "cpu",
	.init = cpu_init,
	.free = cpu_free,
	.load_state = cpu_load_state,
	.save_state = cpu_save_state,
	.zero_grad = cpu_zero_grad,
	.step_micro = cpu_step_micro,
	.grad_prepare = cpu_grad_prepare,
	.adamw_step = cpu_adamw_step,
	.get_grad = cpu_get_grad,
	.bytes = cpu_bytes,
	.host_weights = cpu_host_weights,
	.host_grads = cpu_host_grads,
	.score_rows = cpu_score_rows,
	.stage_forward = cpu_stage_forward,
	.stage_backward = cpu_stage_backward,
	.stage_weight = cpu_stage_weight,
	.concurrent_save = 1, /* save_state: memcpy from w, m and v, which only AdamW writes */
};
