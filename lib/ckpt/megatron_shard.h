/* megatron_shard.h: the tensor-parallel shard of a logical parameter in Megatron's layout
 * (params.h's split of each parameter), shared by the import (megatron.c) and the export
 * (megatron_export.c) of Megatron checkpoints; not a public interface. */
#ifndef MT_MEGATRON_SHARD_H
#define MT_MEGATRON_SHARD_H

#include <stdint.h>

#include "model/params.h"

/* The shape of rank t's shard of p among T (p a whole-model row: shape is global);
 * -1 when the split does not divide. */
int mt_meg_shard_shape(const struct mt_param *p, int T, int64_t *r, int64_t *c);
/* Copy rank t's shard between the logical tensor (at lg: p's global shape) and sh. Rows of
 * a vocabulary split beyond the logical tensor's rows (Megatron's padding past mt's) are
 * skipped to_logical, and filled with the copy row `fill_row` (>= 0) from it. */
void mt_meg_shard_copy(const struct mt_param *p, int T, int t, float *lg, float *sh, int to_logical, int64_t grows,
		       int64_t fill_row);

#endif
