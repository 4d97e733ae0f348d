/* batchsteps.h: Megatron-LM's --step-batch-size-schedule, "T0:B0 T1:B1 ...": the global
 * batch is Bi once Ti tokens are consumed (thresholds with K, M, B or T for 1e3, 1e6, 1e9,
 * 1e12; Megatron reads them as tokens when the sequence length is known, as it always is
 * for a GPT, and turns each into the sample floor(Ti / seq_length); a batch changes at the
 * first step that starts at or past its threshold sample). Parsing, the batch at a point
 * of training, the checks and the iteration count of a sample budget; the rampup of
 * --rampup-batch-size is estimate.h's. */
#ifndef MT_BATCHSTEPS_H
#define MT_BATCHSTEPS_H

#include <stdint.h>

#include "base/err.h"

#define MT_BATCH_STEPS_MAX 64

struct mt_batch_steps {
	int n;                          /* 0: no schedule */
	int64_t at[MT_BATCH_STEPS_MAX]; /* thresholds in tokens, ascending, the first 0 */
	int64_t batch[MT_BATCH_STEPS_MAX];
	char word[MT_BATCH_STEPS_MAX][32]; /* each entry as given, for errors */
};

/* The schedule from its words (each may hold several "T:B" pairs separated by blanks or
 * commas, as a quoted shell argument does); errors name the entry. */
int mt_batch_steps_parse(struct mt_batch_steps *s, char *const *words, int nwords, struct mt_err *err);
/* Entry k's first sample: floor(threshold / seq_length), Megatron's conversion. */
int64_t mt_batch_steps_sample(const struct mt_batch_steps *s, int k, int64_t seq_length);
/* The entry in force once `consumed` samples are done, and its global batch. */
int mt_batch_steps_entry(const struct mt_batch_steps *s, int64_t seq_length, int64_t consumed);
int64_t mt_batch_steps_batch(const struct mt_batch_steps *s, int64_t seq_length, int64_t consumed);
/* The largest batch. */
int64_t mt_batch_steps_max(const struct mt_batch_steps *s);
/* The schedule can run from `consumed` samples on: thresholds on distinct samples, and
 * every batch still to come (the one in force included) a multiple of `multiple`
 * (micro-batch x data-parallel size; entries already passed are not checked, as
 * Megatron's runtime check does not, so a run resumes on more ranks). */
int mt_batch_steps_check(const struct mt_batch_steps *s, int64_t seq_length, int64_t multiple, int64_t consumed,
			 struct mt_err *err);
/* Iterations of whole batches within train_samples (a partial last batch dropped). */
int64_t mt_batch_steps_train_iters(const struct mt_batch_steps *s, int64_t seq_length, int64_t train_samples);

#endif
