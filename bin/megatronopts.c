/* megatronopts.c: Megatron flags mt-train accepts with a note or refuses (see
 * megatronopts.h). */
#include "megatronopts.h"

#include <string.h>

#include "base/log.h"
#include "tool.h"

static void note(const struct mt_opt *o, const char *what)
{
	if (!o->quiet)
		mt_info("--%s: %s", o->cur->name, what);
}

static void refuse(const struct mt_opt *o, const char *feature)
{
	mt_die_usage(o, "--%s: mt does not have %s", o->cur->name, feature);
}

int mt_megatron_take(struct mt_opt *o, int id)
{
	static const char *const backends[] = { "flash", "fused", "unfused", "local", "auto", NULL };

	switch (id) {
	case MT_MOPT_ATTN_BACKEND:
		for (int i = 0; backends[i]; i++)
			if (!strcmp(o->arg, backends[i])) {
				note(o, "ignored: mt has one attention (CUDA: its own fused causal kernels, flash-style, "
					"never the T x T matrix; CPU: the reference)");
				return 1;
			}
		mt_die_usage(o, "--attention-backend must be flash, fused, unfused, local or auto, not '%s'", o->arg);
	case MT_MOPT_FLASH:
		note(o, "ignored: mt's CUDA attention is flash-style always (no T x T matrix)");
		return 1;
	case MT_MOPT_TE_IMPL:
	case MT_MOPT_MCORE:
		note(o, "ignored: mt has one model implementation (its own layers; no Transformer Engine)");
		return 1;
	case MT_MOPT_FUSION:
		note(o, "ignored: mt's kernels fuse what they fuse (bias and GELU, residuals, the softmax in "
			"attention, the cross-entropy), always");
		return 1;
	case MT_MOPT_OVERLAP:
		note(o, "ignored: the CUDA backend always overlaps the gradient reduction with the backward pass");
		return 1;
	case MT_MOPT_FP32_GRADS:
		note(o, "ignored: gradients are accumulated and reduced in fp32 always");
		return 1;
	case MT_MOPT_CPU_INIT:
		note(o, "ignored: mt initializes the weights on the host always");
		return 1;
	case MT_MOPT_DIST_BACKEND:
		note(o, "ignored: NCCL between GPUs, MPI between CPU ranks");
		return 1;
	case MT_MOPT_WORKERS:
		note(o, "ignored: samples are read from the memory-mapped dataset, no loader workers");
		return 1;
	case MT_MOPT_CKPT_FORMAT:
		note(o, "ignored: checkpoints are HDF5 with logical tensors (mt-ckpt-reshard imports and exports)");
		return 1;
	case MT_MOPT_THROUGHPUT:
		note(o, "ignored: every log line has tokens/s (TensorBoard: with --log-timers-to-tensorboard)");
		return 1;
	case MT_MOPT_TIMING_LEVEL:
		note(o, "ignored: --log-timers-to-tensorboard writes every phase timer mt has (Megatron's names), whatever the level");
		return 1;
	case MT_MOPT_EXPERTS: refuse(o, "mixture of experts"); break;
	case MT_MOPT_CP:
		if (strcmp(o->arg, "1"))
			refuse(o, "context parallelism");
		return 1;
	case MT_MOPT_EP:
		if (strcmp(o->arg, "1"))
			refuse(o, "expert parallelism");
		return 1;
	case MT_MOPT_FP8: refuse(o, "FP8 training (use --bf16 or --fp16)"); break;
	case MT_MOPT_FSDP: refuse(o, "PyTorch FSDP2 (--use-distributed-optimizer shards the optimizer state)"); break;
	case MT_MOPT_MLA: refuse(o, "multi-latent attention"); break;
	case MT_MOPT_MTP: refuse(o, "multi-token prediction"); break;
	}
	return 0;
}
