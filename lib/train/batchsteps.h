/* batchsteps.h: Megatron-LM's --step-batch-size-schedule, "T0:B0 T1:B1 ...": the global
 * batch is Bi from Ti on (thresholds with K, M, B or T for 1e3, 1e6, 1e9, 1e12; Megatron
 * reads them as tokens when the sequence length is known, as it always is for a GPT).
 * Parsing and the batch at a point of training; the rampup of --rampup-batch-size is
 * estimate.h's. */
#ifndef MT_BATCHSTEPS_H
#define MT_BATCHSTEPS_H

#include <stdint.h>

#include "base/err.h"

#define MT_BATCH_STEPS_MAX 64

struct mt_batch_steps {
	int n;                          /* 0: no schedule */
	double at[MT_BATCH_STEPS_MAX];  /* thresholds, ascending, the first 0 */
	int64_t batch[MT_BATCH_STEPS_MAX];
};

/* The schedule from its words (each may hold several "T:B" pairs separated by blanks,
 * as a quoted shell argument does); errors name the word. */
int mt_batch_steps_parse(struct mt_batch_steps *s, char *const *words, int nwords, struct mt_err *err);
/* The global batch once `tokens` tokens are consumed. */
int64_t mt_batch_steps_at(const struct mt_batch_steps *s, double tokens);

#endif
