/* reshard.h: a checkpoint rewritten for another parallel layout, or merged into one file.
 *
 * Both read the source's logical tensors by slices (ckpt.h's mt_ckpt_load_part) and keep
 * everything a resumed run needs: weights, AdamW moments and step, iteration, samples,
 * config, training arguments, scheduler and RNG state. A layout rewrite writes one part
 * a rank of the target layout (tensor x pipeline, one data-parallel replica: the part
 * of rank (t, p) holds exactly the slices that rank reads, contiguous) and the index over
 * them; memory is one target rank's shard. A merge writes one self-contained model.h5
 * (the whole model in memory). The output is a checkpoint directory (iter_N, latest),
 * saved atomically as mt-train saves. Errors as ckpt.h's. */
#ifndef MT_RESHARD_H
#define MT_RESHARD_H

#include "base/err.h"

/* src: any form mt_ckpt_resolve takes. The target's padded vocabulary is the source's
 * where tp divides it, else Megatron's padding of the vocabulary for tp. */
int mt_ckpt_reshard(const char *src, const char *dst, int tp, int pp, struct mt_err *err);
int mt_ckpt_merge(const char *src, const char *dst, struct mt_err *err);

#endif
