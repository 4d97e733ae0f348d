/* classifier.h: softmax cross-entropy over rows of logits and its gradient, in place,
 * for one chunk of rows (the backend computes the logits a chunk at a time, so the
 * logits of the whole batch are never held). Declarations only; kernels/classifier.cu
 * has the code. */
#ifndef MT_KERNELS_CLASSIFIER_H
#define MT_KERNELS_CLASSIFIER_H

#include <stdint.h>

#include "cuda_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* For each row n < rows of logits [rows][V]: loss[n] = logsumexp - logits[target[n]]
 * (0 where target is -1); with grad, the row is replaced by (softmax - onehot) * gscale
 * (zeros where target is -1). */
int mt_classifier(enum mt_dtype dt, void *logits, float *loss, const int32_t *target, int64_t rows, int64_t V,
		  int grad, float gscale);

#ifdef __cplusplus
}
#endif

#endif
