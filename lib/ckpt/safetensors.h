/* safetensors.h: Hugging Face's safetensors files, read and written.
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON (the header),
 * then the tensor data. The header maps each tensor name to {"dtype", "shape",
 * "data_offsets": [begin, end]} (byte offsets into the data that follows the header)
 * and may hold "__metadata__", an object of string values ({"format": "pt"} is what
 * transformers expects). Tensors are C-order, little-endian and contiguous: together
 * they cover the data exactly, without holes or overlaps. The writer pads the header
 * with spaces to a multiple of 8 bytes, as the reference implementation does.
 *
 * Reading maps the file and checks the header completely before anything is used:
 * the length against the file size and a 100 MB cap, the JSON, each dtype, shape and
 * offset range against the shape's size, the coverage of the data; errors name the
 * file and the tensor. A set of files (a checkpoint sharded as
 * model-00001-of-00002.safetensors with model.safetensors.index.json) opens as one
 * table. Conversion to fp32 takes F32, F16, BF16 and F64. This module knows nothing of
 * models: the Hugging Face name mapping lives in hf.c. */
#ifndef MT_SAFETENSORS_H
#define MT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define MT_ST_MAX_DIMS 8
#define MT_ST_MAX_HEADER (100u << 20)

enum mt_st_dtype {
	MT_ST_BOOL, MT_ST_U8, MT_ST_I8, MT_ST_I16, MT_ST_U16, MT_ST_I32, MT_ST_U32, MT_ST_I64, MT_ST_U64,
	MT_ST_F16, MT_ST_BF16, MT_ST_F32, MT_ST_F64, MT_ST_NDTYPES
};
/* "F32" and so on; NULL for an invalid value */
const char *mt_st_dtype_name(enum mt_st_dtype d);
size_t mt_st_dtype_size(enum mt_st_dtype d);

struct mt_st_tensor {
	char *name;
	enum mt_st_dtype dtype;
	int ndim;
	int64_t shape[MT_ST_MAX_DIMS];
	int64_t numel;
	const unsigned char *data;   /* into the mapped file */
	size_t nbytes;
	int file;                    /* index of its file in a set */
};

struct mt_st_file {
	char *path;
	void *map;
	size_t size;
	struct mt_st_tensor *t;
	int n;
	char *metadata_json;         /* "__metadata__" as JSON text, NULL when absent */
};

int mt_st_open(struct mt_st_file *f, const char *path, struct mt_err *err);
void mt_st_close(struct mt_st_file *f);
const struct mt_st_tensor *mt_st_find(const struct mt_st_file *f, const char *name);

/* Convert a tensor to n fp32 values (n must equal its element count). */
int mt_st_to_f32(const struct mt_st_tensor *t, float *out, int64_t n, const char *path, struct mt_err *err);

/* The tensors of a directory: DIR/model.safetensors, or the files that
 * DIR/model.safetensors.index.json's "weight_map" names (each tensor must be in the file
 * the index says). Tensors are found by name across the files. */
struct mt_st_set {
	struct mt_st_file *f;
	int nfiles;
	char *dir;
};
int mt_st_set_open(struct mt_st_set *s, const char *dir, struct mt_err *err);
void mt_st_set_close(struct mt_st_set *s);
/* The tensor and the path of its file, or NULL. */
const struct mt_st_tensor *mt_st_set_find(const struct mt_st_set *s, const char *name, const char **path);

/* One tensor to write: data holds numel * dtype size bytes, little-endian, C order. */
struct mt_st_out {
	const char *name;
	enum mt_st_dtype dtype;
	int ndim;
	int64_t shape[MT_ST_MAX_DIMS];
	const void *data;
};

/* Write n tensors, in the given order, with the given metadata (pairs of key, value
 * strings: meta[2i], meta[2i+1]; nmeta pairs), atomically (atomic.h). */
int mt_st_write(const char *path, const struct mt_st_out *t, int n, const char *const *meta, int nmeta,
		struct mt_err *err);

#endif
