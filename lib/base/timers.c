/* timers.c: Megatron's names of the phase timers (see timers.h). */
#include "base/timers.h"

const char *const mt_timer_names[MT_T_N] = {
	[MT_T_FORWARD_BACKWARD] = "forward-backward",
	[MT_T_FORWARD_COMPUTE] = "forward-compute",
	[MT_T_BACKWARD_COMPUTE] = "backward-compute",
	[MT_T_BATCH_GENERATOR] = "batch-generator",
	[MT_T_FORWARD_RECV] = "forward-recv",
	[MT_T_FORWARD_SEND] = "forward-send",
	[MT_T_BACKWARD_RECV] = "backward-recv",
	[MT_T_BACKWARD_SEND] = "backward-send",
	[MT_T_EMBEDDING_GRADS] = "embedding-grads-all-reduce",
	[MT_T_ALL_GRADS_SYNC] = "all-grads-sync",
	[MT_T_PARAMS_ALL_GATHER] = "params-all-gather",
	[MT_T_OPTIMIZER_CLIP] = "optimizer-clip-main-grad",
	[MT_T_OPTIMIZER_INNER] = "optimizer-inner-step",
	[MT_T_OPTIMIZER] = "optimizer",
};
