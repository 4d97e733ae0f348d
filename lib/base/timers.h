/* timers.h: the phase timers of a training step, named as Megatron-LM names its timers
 * (its TensorBoard tag is the name with "-time" added: mt_timer_names).
 *
 * Whoever runs a phase adds its seconds to timers[phase] when it was given an array, and
 * measures nothing when it was given NULL: mt-train passes one only with
 * --log-timers-to-tensorboard, and only for the training step (not evaluation). The
 * phases nest as Megatron's do: forward-backward holds the compute passes, the data read,
 * the pipeline's transfers and the gradient sync; optimizer holds clipping, the update
 * and ZeRO's parameter gather. */
#ifndef MT_TIMERS_H
#define MT_TIMERS_H

#include "base/progress.h"

enum mt_timer {
	MT_T_FORWARD_BACKWARD,   /* the step's micro-batches, forward and backward, and the gradient sync */
	MT_T_FORWARD_COMPUTE,    /* forward passes */
	MT_T_BACKWARD_COMPUTE,   /* backward passes */
	MT_T_BATCH_GENERATOR,    /* reading the micro-batches' samples */
	MT_T_FORWARD_RECV,       /* pipeline: waiting for the activations from the previous stage */
	MT_T_FORWARD_SEND,       /* ... for the activations sent to the next to be delivered */
	MT_T_BACKWARD_RECV,      /* ... for the gradient from the next stage */
	MT_T_BACKWARD_SEND,      /* ... for the gradient sent to the previous to be delivered */
	MT_T_EMBEDDING_GRADS,    /* pipeline: the tied embedding's two copies summed */
	MT_T_ALL_GRADS_SYNC,     /* the data-parallel gradient sum (its part not hidden under backward) */
	MT_T_PARAMS_ALL_GATHER,  /* ZeRO-1: the updated weights gathered */
	MT_T_OPTIMIZER_CLIP,     /* the gradient norm, the non-finite check, clipping */
	MT_T_OPTIMIZER_INNER,    /* the AdamW update */
	MT_T_OPTIMIZER,          /* all of the optimizer step */
	MT_T_N
};

/* Megatron's timer names, in enum mt_timer's order. */
extern const char *const mt_timer_names[MT_T_N];

/* Add the seconds since t0 to timers[which] (nothing without timers). */
static inline void mt_timer_add(double *timers, int which, double t0)
{
	if (timers)
		timers[which] += mt_now() - t0;
}

#endif
