/* classifier_score.h: the evaluation form of the classifier: per row of logits, -log p of
 * the target and whether the argmax is the target, over the first nv columns (the
 * tokenizer's ids, renormalized, or the padded vocabulary); no gradient, the logits are
 * left as they are. Declarations only; kernels/classifier_score.cu has the code. */
#ifndef MT_KERNELS_CLASSIFIER_SCORE_H
#define MT_KERNELS_CLASSIFIER_SCORE_H

#include <stdint.h>

#include "cuda_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* For each row n < rows of logits [rows][V], with t = target[n]: nll[n] = logsumexp of
 * the row's first nv logits - logits[t], hit[n] = 1 when the first largest of those nv
 * logits is at t (else 0); both 0 where t is -1. Requires 0 < nv <= V and t < nv. */
int mt_classifier_score(enum mt_dtype dt, const void *logits, float *nll, int32_t *hit, const int32_t *target,
			int64_t rows, int64_t V, int64_t nv);

#ifdef __cplusplus
}
#endif

#endif
