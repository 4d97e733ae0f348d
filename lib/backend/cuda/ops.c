/* ops.c: the CUDA backend as backend.h sees it: the ops table over the mt_cu_* functions
 * of this folder, and in a build without CUDA the stubs behind it, whose init says so.
 * Not here: anything that runs on the device. */
#include "backend/backend.h"

#ifdef MT_HAVE_CUDA

#include "../../../kernels/device.h"
#include "backend/cuda/cu.h"

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
