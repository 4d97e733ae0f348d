/* megatronopts.h: Megatron-LM flags that mt-train takes although it has nothing to set
 * with them, so that Megatron's launch scripts run unchanged. Two kinds: flags that pick
 * a Megatron internal mt does its own way (attention backends, kernel fusions, overlap
 * switches, checkpoint formats): accepted, with a note saying what mt does instead; and
 * flags of features mt does not have (mixture of experts, context parallelism, FP8):
 * refused with exit 2, naming the feature (a size of 1 is no request and is accepted).
 * docs/mt-train.md lists both. Linked into mt-train with tool.c. */
#ifndef MT_MEGATRONOPTS_H
#define MT_MEGATRONOPTS_H

#include "base/opt.h"

enum {
	MT_MOPT_ATTN_BACKEND = 700, MT_MOPT_FLASH, MT_MOPT_TE_IMPL, MT_MOPT_MCORE, MT_MOPT_FUSION,
	MT_MOPT_OVERLAP, MT_MOPT_FP32_GRADS, MT_MOPT_CPU_INIT, MT_MOPT_DIST_BACKEND, MT_MOPT_WORKERS,
	MT_MOPT_CKPT_FORMAT, MT_MOPT_THROUGHPUT, MT_MOPT_TIMING_LEVEL,
	MT_MOPT_EXPERTS, MT_MOPT_CP, MT_MOPT_EP, MT_MOPT_FP8, MT_MOPT_FSDP, MT_MOPT_MLA, MT_MOPT_MTP,
};

#define MT_MEGATRON_OPTIONS                                                                                      \
	{ "attention-backend", 0, MT_ARG_REQUIRED, MT_MOPT_ATTN_BACKEND, "B", "Megatron's attention choice: accepted, mt has its own kernels" }, \
	{ "use-flash-attn", 0, MT_ARG_NONE, MT_MOPT_FLASH, NULL, "accepted: mt's CUDA attention never forms the T x T matrix" }, \
	{ "transformer-impl", 0, MT_ARG_REQUIRED, MT_MOPT_TE_IMPL, "I", "accepted: mt has one implementation" },              \
	{ "use-mcore-models", 0, MT_ARG_NONE, MT_MOPT_MCORE, NULL, "accepted: mt has one implementation" },                    \
	{ "use-legacy-models", 0, MT_ARG_NONE, MT_MOPT_MCORE, NULL, "accepted: mt has one implementation" },                   \
	{ "no-masked-softmax-fusion", 0, MT_ARG_NONE, MT_MOPT_FUSION, NULL, "accepted: mt's kernels fuse as they do" },        \
	{ "no-bias-gelu-fusion", 0, MT_ARG_NONE, MT_MOPT_FUSION, NULL, "accepted: mt's kernels fuse as they do" },             \
	{ "no-bias-swiglu-fusion", 0, MT_ARG_NONE, MT_MOPT_FUSION, NULL, "accepted: mt's kernels fuse as they do" },           \
	{ "no-bias-dropout-fusion", 0, MT_ARG_NONE, MT_MOPT_FUSION, NULL, "accepted: mt's kernels fuse as they do" },          \
	{ "no-rope-fusion", 0, MT_ARG_NONE, MT_MOPT_FUSION, NULL, "accepted: mt's kernels fuse as they do" },                  \
	{ "no-gradient-accumulation-fusion", 0, MT_ARG_NONE, MT_MOPT_FUSION, NULL, "accepted: mt's kernels fuse as they do" }, \
	{ "no-persist-layer-norm", 0, MT_ARG_NONE, MT_MOPT_FUSION, NULL, "accepted: mt's kernels fuse as they do" },           \
	{ "cross-entropy-loss-fusion", 0, MT_ARG_NONE, MT_MOPT_FUSION, NULL, "accepted: mt's kernels fuse as they do" },       \
	{ "overlap-grad-reduce", 0, MT_ARG_NONE, MT_MOPT_OVERLAP, NULL, "accepted: the CUDA backend always overlaps" },         \
	{ "overlap-param-gather", 0, MT_ARG_NONE, MT_MOPT_OVERLAP, NULL, "accepted: the CUDA backend always overlaps" },       \
	{ "accumulate-allreduce-grads-in-fp32", 0, MT_ARG_NONE, MT_MOPT_FP32_GRADS, NULL, "accepted: gradients are always fp32" }, \
	{ "use-cpu-initialization", 0, MT_ARG_NONE, MT_MOPT_CPU_INIT, NULL, "accepted: mt always initializes on the host" },   \
	{ "distributed-backend", 0, MT_ARG_REQUIRED, MT_MOPT_DIST_BACKEND, "B", "accepted: NCCL on GPUs, MPI on CPU ranks" },  \
	{ "num-workers", 0, MT_ARG_REQUIRED, MT_MOPT_WORKERS, "N", "accepted: samples are read from the mapped dataset" },     \
	{ "ckpt-format", 0, MT_ARG_REQUIRED, MT_MOPT_CKPT_FORMAT, "F", "accepted: mt writes HDF5 (mt-ckpt-reshard converts)" }, \
	{ "log-throughput", 0, MT_ARG_NONE, MT_MOPT_THROUGHPUT, NULL, "accepted: every log line has tokens/s" },               \
	{ "timing-log-level", 0, MT_ARG_REQUIRED, MT_MOPT_TIMING_LEVEL, "N", "accepted: see --log-timers-to-tensorboard" },     \
	{ "num-experts", 0, MT_ARG_REQUIRED, MT_MOPT_EXPERTS, "N", "refused: mixture of experts" },                            \
	{ "context-parallel-size", 0, MT_ARG_REQUIRED, MT_MOPT_CP, "N", "refused above 1: context parallelism" },               \
	{ "expert-model-parallel-size", 0, MT_ARG_REQUIRED, MT_MOPT_EP, "N", "refused above 1: expert parallelism" },          \
	{ "fp8-format", 0, MT_ARG_REQUIRED, MT_MOPT_FP8, "F", "refused: FP8 training" },                                        \
	{ "use-torch-fsdp2", 0, MT_ARG_NONE, MT_MOPT_FSDP, NULL, "refused: PyTorch FSDP2" },                                   \
	{ "multi-latent-attention", 0, MT_ARG_NONE, MT_MOPT_MLA, NULL, "refused: multi-latent attention" },                    \
	{ "mtp-num-layers", 0, MT_ARG_REQUIRED, MT_MOPT_MTP, "N", "refused: multi-token prediction" }

/* 1 if id was one of these flags (a note printed unless -q; a refused feature exits 2). */
int mt_megatron_take(struct mt_opt *o, int id);

#endif
