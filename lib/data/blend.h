/* blend.h: Megatron-core's dataset blending: weighted paths, sample counts per source,
 * and BlendedDataset's dataset_index / dataset_sample_index.
 *
 * Parses Megatron's --data-path syntax ("0.3 A 0.7 B", or paths alone), works out how
 * many samples each source must supply for a split (the ceil and 0.005-surplus rules),
 * and interleaves them with Megatron's greedy argmax so that every prefix of the blend
 * follows the weights. Megatron stores dataset_index as int16 (fewer than 32767
 * sources); beyond that mt widens it to int32. GPT sample indices are gptsamples.c's. */
#ifndef MT_BLEND_H
#define MT_BLEND_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

struct mt_blend_source {
	char *path;
	double weight;     /* as given; 1 when the blend has no weights */
};

struct mt_blend_spec {
	struct mt_blend_source *src;
	int n;
	int weighted;      /* weights were given */
};

/* Whitespace-separated tokens from several strings (each --data-path value, or the
 * contents of a --data-args-path file), with Megatron's rules: an odd count means
 * paths only; an even count is (weight, path) pairs unless a weight is not a number. */
int mt_blend_parse(struct mt_blend_spec *b, const char *const *args, int nargs, struct mt_err *err);
void mt_blend_spec_free(struct mt_blend_spec *b);
/* Weights over their sum, summed as numpy.sum does (pairwise). */
void mt_blend_normalized(const struct mt_blend_spec *b, double *w);
void mt_blend_normalize(double *w, int n);
double mt_numpy_sum(const double *a, size_t n);

/* Samples each source supplies for a blend of `size` samples: target[d] = ceil(size*w[d])
 * and the mid-level dataset size n[d] = ceil(target[d]*(1+surplus)). */
void mt_blend_targets(const double *w, int n, int64_t size, double surplus, int64_t *target,
		      int64_t *mid);

/* The blend: dataset_index (int16 when n < 32767, else int32: *wide says which) and
 * dataset_sample_index (int64), `size` entries each. */
int mt_blend_indices(const double *w, int n, int64_t size, void **dataset_index, int *wide,
		     int64_t **sample_index, struct mt_err *err);
/* The exhaustive variant (no size given): weights are the counts, every sample is used. */
int mt_blend_indices_exhaustive(const int64_t *counts, int n, void **dataset_index, int *wide,
				int64_t **sample_index, int64_t *size, struct mt_err *err);

#endif
