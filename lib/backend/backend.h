/* backend.h: what mt-train asks of a compute backend, so the training loop does not
 * care where the arithmetic runs.
 *
 * A backend owns the model's weights, gradients and AdamW moments (flat, laid out by
 * params.h) and the activations of one micro-batch. The loop hands it token batches,
 * asks for the loss with or without the backward pass, lets it prepare the gradients
 * (average over micro-batches, global norm, non-finite check, clipping) and take the
 * AdamW step, and copies the state in and out for checkpoints. backend_cpu.c is the
 * reference (fp32, OpenBLAS, OpenMP); the CUDA backend (cuda/, a file a
 * concept: ops.c holds its table) implements the same table. */
#ifndef MT_BACKEND_H
#define MT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "model/config.h"
#include "parallel/dist.h"
#include "parallel/pipeline.h"
#include "base/err.h"
#include "model/optim.h"
#include "model/params.h"
#include "model/tp.h"

struct mt_backend;

/* one row of a scored micro-batch (score_rows) */
struct mt_score_row {
	double loss;       /* sum of -log p(target) over the counted targets */
	int64_t count;     /* counted targets */
	int64_t correct;   /* counted targets where the argmax is the target */
};

struct mt_backend_ops {
	const char *name;
	int (*init)(struct mt_backend *b, const struct mt_config *c, const struct mt_params *t, int micro_batch,
		    struct mt_err *err);
	void (*free)(struct mt_backend *b);
	/* host fp32 buffers of t->total floats; moments may be NULL (zeroed then). With
	 * opts.dist (data parallelism on the device) both are collective: every rank calls
	 * them with whole buffers; load_state keeps what this rank holds, save_state fills
	 * rank 0's buffers (the others' are scratch) */
	int (*load_state)(struct mt_backend *b, const float *w, const float *m, const float *v, struct mt_err *err);
	int (*save_state)(struct mt_backend *b, float *w, float *m, float *v, struct mt_err *err);
	void (*zero_grad)(struct mt_backend *b);
	/* one micro-batch of [micro_batch][seq_length] tokens and targets (-1: not counted);
	 * returns the mean loss (NaN when the backend failed); backward 1 adds its
	 * gradient, MT_BACKWARD_LAST also marks the step's last micro-batch, the one whose
	 * backward pass starts the data-parallel gradient reduction (opts.dist) */
	double (*step_micro)(struct mt_backend *b, const int32_t *tokens, const int32_t *targets, int backward);
	/* scale the accumulated gradient, then its global norm (before clipping), whether
	 * any element is not finite, and clipping to max_norm (0: none); -1 only when the
	 * backend failed (a device error, a rank that did not answer) */
	int (*grad_prepare)(struct mt_backend *b, float scale, double max_norm, double *norm, int *nonfinite,
			    struct mt_err *err);
	int (*adamw_step)(struct mt_backend *b, struct mt_adamw *o, double lr, struct mt_err *err);
	/* the accumulated gradient into a host buffer of t->total floats (for checks) */
	int (*get_grad)(struct mt_backend *b, float *g, struct mt_err *err);
	size_t (*bytes)(const struct mt_backend *b); /* memory held, for the start-up report */
	/* the flat weights and gradient in host memory, for data parallelism over MPI
	 * (dp.h); NULL from a backend that keeps them on a device and moves them itself */
	float *(*host_weights)(struct mt_backend *b);
	float *(*host_grads)(struct mt_backend *b);
	/* evaluation: the forward pass of rows <= micro_batch rows of [seq_length] tokens
	 * and targets (-1: not counted; every id below vocab_size), nothing kept for a
	 * backward pass; per row the summed -log p of the counted targets, their count and
	 * how many the argmax gets right. real_vocab 0: the softmax and argmax over the
	 * padded vocabulary (training's loss); 1: over the tokenizer's vocab_size ids,
	 * renormalized (lmeval.h says why). Per-row sums in position order, in double. */
	int (*score_rows)(struct mt_backend *b, int64_t rows, const int32_t *tokens, const int32_t *targets,
			  int real_vocab, struct mt_score_row *out, struct mt_err *err);
	/* Pipeline parallelism (NULL in a backend without it: mt-train refuses pipeline
	 * parallelism there). The table given to init is a stage's (params.h: its model
	 * chunks, first_stage, last_stage); these run model chunk `chunk` of it for one
	 * micro-batch whose activations stay in slot `slot` until its backward pass (its
	 * weight pass when split). stage_forward reads the tokens on the model's first
	 * chunk, in ([rows][hidden], the sequence shard's rows with sequence parallelism)
	 * elsewhere, and writes out except on the model's last chunk, where it returns the
	 * mean loss over the *ntargets counted targets (0 elsewhere; NaN on failure).
	 * stage_backward adds the chunk's gradient from dout (NULL on the last chunk: from
	 * the loss) and writes din except on the first chunk; split 1 runs the input-gradient
	 * pass only (opts.split_backward), stage_weight the weight-gradient pass after it. */
	double (*stage_forward)(struct mt_backend *b, int chunk, int slot, const int32_t *tokens,
				const int32_t *targets, const void *in, void *out, int64_t *ntargets);
	int (*stage_backward)(struct mt_backend *b, int chunk, int slot, const void *dout, void *din, int split);
	int (*stage_weight)(struct mt_backend *b, int chunk, int slot);
	/* With tied embeddings on more than one stage and no host_grads: the word
	 * embedding's gradient summed over the embedding group emb (the first and last
	 * stage's copies), the same sum on both. */
	int (*tie_grads)(struct mt_backend *b, const struct mt_tp *emb, struct mt_err *err);
	/* Pipeline parallelism: a transport of the backend's own between the stages of
	 * pipeline group g (dist/pipeline.h; its messages' elements of *elem_bytes), after
	 * which the stage passes' in, out, dout and din are its buffers; or *tr NULL (the
	 * executor's MPI over host memory, float elements). Collective over g. NULL: MPI. */
	int (*pp_transport)(struct mt_backend *b, struct mt_dist *g, const struct mt_pp_transport **tr,
			    size_t *elem_bytes, struct mt_err *err);
	/* fp16's current loss scale, for the logs (NULL: 1, no scaling) */
	double (*loss_scale)(const struct mt_backend *b);
	/* 1: save_state only reads memory that step_micro, the stage passes, zero_grad and
	 * grad_prepare do not write, and makes no collective call, so that a thread may run
	 * it while the next step's forward and backward passes run (--async-save copies the
	 * state beside them and waits for the copy before adamw_step or any other change
	 * of the weights or moments). 0: save_state runs in the step loop (a device backend
	 * that gathers its state with collectives, or copies it on its own streams). */
	int concurrent_save;
};

/* How a backend computes; the CPU backend reads none of it (fp32 always). The caller
 * fills it before init. */
enum mt_precision { MT_PREC_FP32 = 0, MT_PREC_BF16 = 1, MT_PREC_FP16 = 2 };
struct mt_backend_opts {
	enum mt_precision precision;
	int deterministic;              /* same inputs, same bits (the CUDA backend is, but for the
	                                 * sm_90a attention backward's dQ sums) */
	int recompute_full;             /* keep only each layer's input; redo its forward in backward */
	double loss_scale;              /* fp16: > 0 a constant scale, 0 dynamic (Megatron's) */
	double initial_loss_scale;      /* dynamic: 2^32 */
	double min_loss_scale;          /* dynamic: 1 */
	int loss_scale_window;          /* dynamic: 1000 good steps before doubling */
	int hysteresis;                 /* dynamic: 2 overflows before halving */
	int quiet;
	/* evaluation only (score_rows): no gradients, no AdamW state, load_state takes the
	 * weights alone; the CPU backend then borrows the weights given to load_state
	 * (they must outlive it) instead of copying them */
	int inference;
	/* data parallelism on the device, for a backend without host_grads (NULL: one
	 * process): the ranks (dist.h; the backend picks its GPU from the node-local rank),
	 * whether the optimizer state is sharded over them (ZeRO-1), and the gradient
	 * bucket size in elements (0: the default) */
	struct mt_dist *dist;
	int distributed_optimizer;
	int64_t bucket_size;
	/* tensor parallelism (model/tp.h; NULL: none): the table given to init is this
	 * rank's shard (params.h); the passes call tp's split points, and grad_prepare takes
	 * the norm over the group and agrees on non-finite gradients */
	const struct mt_tp *tp;
	double label_smoothing;         /* Megatron's --label-smoothing */
	/* a device backend's tensor-parallel transport: the group (dist.h) for its own
	 * communicator, and MT_TP_COMM_AUTO (NCCL when every rank of the group has a GPU of
	 * its own, else through host memory with tp's operations), _NCCL or _HOST */
	struct mt_dist *tp_dist;
	int tp_comm;
	/* pipeline parallelism: grad_prepare's agreement and norm over every model-parallel
	 * rank (tensor x pipeline; NULL: over tp), and room for split backward passes */
	const struct mt_tp *mp;
	int split_backward;
	int pp_comm;                    /* pp_transport's choice: MT_TP_COMM_AUTO, _NCCL or _HOST */
};

enum { MT_TP_COMM_AUTO, MT_TP_COMM_NCCL, MT_TP_COMM_HOST };

/* step_micro's backward: the step's last micro-batch */
#define MT_BACKWARD_LAST 2

struct mt_backend {
	const struct mt_backend_ops *ops;
	void *state;
	struct mt_backend_opts opt;
	int64_t step;                   /* the iteration being computed, for messages */
	int failed;                     /* set before free after an error: communicators are
					 * aborted, not flushed (a peer may be gone) */
	int stage_eval;                 /* set around an evaluation schedule: stage_forward
					 * prepares no backward pass */
	/* the caller's phase timers (base/timers.h; NULL: not timed, no cost): step_micro
	 * adds its forward and backward compute, grad_prepare the wait for the data-parallel
	 * gradient sum, adamw_step the ZeRO parameter gather; a device backend then waits for
	 * its work before it returns, so that the caller's clock measures it */
	double *timers;
	/* the caller's host work for its next pass (reading the next micro-batch), which a
	 * device backend's step_micro calls once, after queuing the pass and before waiting
	 * for its loss, so that it runs while the device computes (NULL: none; the CPU
	 * backend computes as it goes and does not call it) */
	void (*overlap)(void *ctx);
	void *overlap_ctx;
};

/* grad_prepare's *nonfinite when fp16's dynamic loss scale overflowed: the step is
 * skipped and the scale lowered, which is routine and no sign of divergence */
#define MT_GRAD_OVERFLOW 2

/* the CUDA backend makes the logits in chunks of at most this many bytes (the dry run,
 * lib/train/estimate.c, counts one such buffer) */
#define MT_CUDA_LOGITS_BYTES (512ull << 20)

extern const struct mt_backend_ops mt_backend_cpu;
/* Built everywhere; without CUDA its init says so. */
extern const struct mt_backend_ops mt_backend_cuda;
/* whether this build has the CUDA backend and a device is visible */
int mt_backend_cuda_usable(void);

#endif
