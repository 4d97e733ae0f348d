/* sampling.h: the next token of each row of logits on the GPU, with lib/infer/sample.h's
 * rules (greedy argmax with the lowest id on ties; else temperature, then top-k or the
 * top-p nucleus, then an inverse-CDF draw in id order with the row's uniform number), so
 * that a decode step need only copy the chosen ids back. Declarations only;
 * kernels/sampling.cu has the code. */
#ifndef MT_KERNELS_SAMPLING_H
#define MT_KERNELS_SAMPLING_H

#include <stdint.h>

#include "cuda_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* sample.h's struct mt_sample_params as the kernel reads it from device memory */
struct mt_sample_dev {
	double temperature; /* 0: greedy */
	double top_p;       /* 0: off */
	int32_t top_k;      /* 0: off; 1: greedy */
	int32_t pad;
};

/* ids[n] for each of N rows of logits [N][ld] (fp32), looking at ids below vocab only,
 * with the parameters *p and the uniform number u[n] in [0, 1) (p, u, ids: device
 * memory). The choice is mt_sample's (sample.h) on the same logits, but for the
 * arithmetic of the draw: the weights exp(z / T - max) are summed as integers in units
 * of 2^-40 (so the sums and the top-p cut do not depend on the order of the threads),
 * where mt_sample sums doubles in order; the two differ only where u falls within about
 * vocab x 2^-40 of a boundary between two ids. Deterministic. */
int mt_sample_rows(int32_t *ids, const float *logits, int64_t ld, int64_t vocab, int N, const struct mt_sample_dev *p,
		   const double *u);

#ifdef __cplusplus
}
#endif

#endif
