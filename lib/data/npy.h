/* npy.h: NumPy's .npy v1.0 files, as numpy.save writes them, byte for byte.
 *
 * Megatron keeps its dataset index caches as .npy files; writing them exactly as numpy
 * does (header dict, spare space for a growing axis, padding to 64 bytes) means a
 * Megatron run can reuse mt's caches and the other way round. Little-endian 1-D and
 * 2-D C-order arrays of int16/int32/int64/uint32 (what those caches hold) and of
 * float32/float64 (tensors the tests hand to reference implementations). */
#ifndef MT_NPY_H
#define MT_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* descr strings: "<i2", "<i4", "<i8", "<u4", "<f4", "<f8" */
int mt_npy_write(const char *path, const char *descr, const void *data, size_t rows, size_t cols,
		 struct mt_err *err);
/* cols = 0 means a 1-D array of `rows` elements. */

struct mt_npy {
	char descr[8];
	size_t rows, cols; /* cols = 0 for 1-D */
	size_t itemsize;
	void *data;        /* malloc'ed */
};
int mt_npy_read(struct mt_npy *a, const char *path, struct mt_err *err);
void mt_npy_free(struct mt_npy *a);

#endif
