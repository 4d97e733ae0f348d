/* ckpt_dir.h: the helpers of the directory layout (ckpt.c) that the other files of lib/ckpt/
 * call: names, iteration directories, the model file of a checkpoint path. Not a public
 * interface (ckpt.h is); kept apart from ckpt_h5.h so that ckpt.c, which makes no HDF5
 * calls, does not include the HDF5 helpers that include it back. */
#ifndef MT_CKPT_DIR_H
#define MT_CKPT_DIR_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* the paths lib/ckpt/ builds fit in this many bytes */
#define PATH_CAP 4096

const char *mt_ckpt_base_name(const char *path);
int64_t mt_ckpt_iteration_of_dir(const char *dir);
int mt_ckpt_is_dir(const char *path);
int mt_ckpt_model_file(const char *path, char *out, size_t n, struct mt_err *err);
int mt_ckpt_mkdir_p(const char *dir, struct mt_err *err);
int mt_ckpt_is_part_name(const char *s);

#endif
