/* torchdist_write.h: the export to Megatron-LM's distributed checkpoints (`--ckpt-format
 * torch_dist`, torchdist_write.c) called by megatron_export.c's mt_meg_export, and the two
 * pieces of the legacy export it reuses (megatron_export.c); internal to lib/ckpt/, not a
 * public interface. */
#ifndef MT_TORCHDIST_WRITE_H
#define MT_TORCHDIST_WRITE_H

#include <stdint.h>

#include "base/err.h"
#include "ckpt/megatron.h"
#include "ckpt/pickle.h"

/* Write iterdir's torch_dist files (one __<rank>_0.distcp a rank of the target TP x PP,
 * .metadata, metadata.json) for the model; padded: the target's padded vocabulary. *files
 * gets the number of .distcp files. */
int mt_meg_torchdist_write(const struct mt_model *m, const struct mt_meg_export_opts *o, const char *iterdir,
			   int64_t padded, int64_t *files, struct mt_err *err);

/* megatron_export.c: args as the argparse.Namespace the legacy files hold, and n floats
 * converted to the export dtype (F32, BF16 or F16, little-endian, torch's rounding). */
void mt_meg_args_write(struct mt_pkw *w, const struct mt_model *m, const struct mt_meg_export_opts *o, int64_t padded,
		       int rank);
void mt_meg_to_dtype(enum mt_pk_dtype d, const float *in, void *out, int64_t n);

#endif
