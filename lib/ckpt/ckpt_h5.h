/* ckpt_h5.h: what the files of lib/ckpt/ that read and write HDF5 checkpoints share (not
 * a public interface: nothing outside lib/ckpt/ includes it).
 *
 * HDF5's errors turned into messages, file access properties, the checksums, the
 * parameter table's checks and lookups, attributes, tensor I/O in slabs with the
 * write-behind, group listing, the checks of what was read, one recursive walk of a
 * file's groups with a visitor, and the few helpers of opening a checkpoint (ckpt_read.c)
 * that the other files call (the directory layout's are in ckpt_dir.h, included here).
 * The public interface is ckpt.h. */
#ifndef MT_CKPT_H5_H
#define MT_CKPT_H5_H

#include <stddef.h>
#include <stdint.h>

#include <hdf5.h>

#include "base/err.h"
#include "ckpt/ckpt.h"
#include "ckpt/ckpt_dir.h"
#include "model/config.h"
#include "model/params.h"

/* Tensors move in slabs of at most this many floats (256 MiB), far from any 2 GiB
 * limit of a single read or write call. */
#define SLAB_FLOATS ((hsize_t)64 << 20)
/* Writes go in slabs of at most this many floats (32 MiB): the unit of the write-behind
 * (ckpt_h5.c). */
#define WB_FLOATS ((hsize_t)8 << 20)
/* The checksum attribute of every dataset that holds bytes (ckpt_h5.c, "checksums"). */
#define XXH_ATTR "xxh3"
/* The tensor groups of a checkpoint, in the order files hold them. */
#define H5_GROUPS 3
extern const char *const mt_ckpt_group_path[H5_GROUPS];

/* ---- HDF5 errors and file access (ckpt_h5.c) ---- */
/* Every public entry point starts here: HDF5 prints nothing, and failures are recorded. */
void mt_ckpt_h5_quiet(void);
/* After a failure that is expected and handled (a probe), forget its reason. */
void mt_ckpt_h5_clear(void);
/* mt_err_set with ": <hdf5's reason>" appended, when HDF5 gave one. */
__attribute__((format(printf, 3, 4)))
int mt_ckpt_h5_fail(struct mt_err *err, int code, const char *fmt, ...);
void mt_ckpt_h5_close(hid_t *id);
hid_t mt_ckpt_h5_fapl(void);
hid_t mt_ckpt_h5_fapl_new(void);

/* ---- checksums ---- */
uint64_t mt_ckpt_state_hash(int64_t iteration, int64_t ctrain, int64_t cvalid, int64_t opt_step, const char *config,
			    const char *args, const char *sched);
uint64_t mt_ckpt_shards_hash(int n, char *const *names, const int64_t *bytes);
void mt_ckpt_warn_legacy(const char *file);

/* ---- the parameter table ---- */
const struct mt_param **mt_ckpt_table_index(const struct mt_params *t, struct mt_err *err);
const struct mt_param *mt_ckpt_table_find(const struct mt_param **v, int n, const char *name);
void mt_ckpt_fmt_shape(char *buf, size_t n, int nd, const int64_t *d);

/* ---- writing ---- */
int mt_ckpt_attr_i64(hid_t obj, const char *name, int64_t v);
int mt_ckpt_attr_i64v(hid_t obj, const char *name, int n, const int64_t *v);
hid_t mt_ckpt_vlen_string_type(H5T_cset_t cset);
int mt_ckpt_attr_u64(hid_t obj, const char *name, uint64_t v);
int mt_ckpt_attr_str(hid_t obj, const char *name, const char *s);
/* The write-behind of one file being written (ckpt_h5.c says why). */
struct mt_ckpt_wbehind {
	int fd;                  /* the file's descriptor; -1: off */
	int64_t started, waited; /* [waited, started) is under write-back, below waited done */
};
void mt_ckpt_wb_open(struct mt_ckpt_wbehind *wb, hid_t f);
int mt_ckpt_region_io(hid_t d, int nd, hsize_t row0, hsize_t col0, hsize_t rows, hsize_t cols, float *buf, int write,
		      struct mt_ckpt_wbehind *wb);
int mt_ckpt_tensor_io(hid_t d, int nd, const hsize_t *dims, float *buf, int write, struct mt_ckpt_wbehind *wb);
hid_t mt_ckpt_group_create(hid_t parent, const char *name);
int mt_ckpt_state_attrs(hid_t f, const struct mt_ckpt_state *s, int has_opt);
int mt_ckpt_write_rng(hid_t f, const struct mt_ckpt_state *s);

/* ---- reading and verifying what was read ---- */
int mt_ckpt_read_xxh(hid_t d, uint64_t *v);
int64_t mt_ckpt_first_nonfinite(const float *x, int64_t n);
int mt_ckpt_nonfinite_err(struct mt_err *err, const char *file, const char *path, const float *x, int64_t at);
int mt_ckpt_verify_plain(hid_t d, const char *file, const char *path, int legacy, int64_t *bytes, struct mt_err *err);
/* Part datasets already verified during one load (file and dataset). */
struct mt_ckpt_vcache {
	char **v;
	size_t n, cap;
};
int mt_ckpt_vcache_has(const struct mt_ckpt_vcache *c, const char *key);
void mt_ckpt_vcache_add(struct mt_ckpt_vcache *c, const char *key);
void mt_ckpt_vcache_free(struct mt_ckpt_vcache *c);
int mt_ckpt_vmap_at(hid_t dcpl, size_t i, hsize_t *s0, hsize_t *e0, char *fname, size_t fn, char *dname, size_t dn);
hid_t mt_ckpt_part_open(const char *dir, const char *fname, char *pfile, size_t pn);
int mt_ckpt_verify_virtual(hid_t d, const char *file, const char *path, int legacy, hsize_t r0, hsize_t c0, hsize_t nr,
			   hsize_t nc, struct mt_ckpt_vcache *cache, int64_t *bytes, struct mt_err *err);
int mt_ckpt_is_virtual(hid_t d);
/* The names of a group's links. */
struct mt_ckpt_names {
	char **v;
	size_t n, cap;
};
void mt_ckpt_names_free(struct mt_ckpt_names *l);
int mt_ckpt_list_links(hid_t g, struct mt_ckpt_names *l);
int mt_ckpt_read_i64v(hid_t d, const char *name, int nd, int64_t *v);

/* ---- one walk of a file's groups ---- */
#define MT_CKPT_WALK_DEPTH 6
#define MT_CKPT_WALK_MAX_OBJECTS 1000000
/* A walk over every dataset under a group (ckpt_h5.c says what it checks on the way). The
 * caller sets file, err, by_creation, dataset and arg; dataset is called with the open
 * dataset while path holds its name below the root (no leading '/'), and returns 0 to go
 * on or -1, its message in err, to stop the walk. */
struct mt_ckpt_visit {
	const char *file;       /* named in messages */
	struct mt_err *err;
	int by_creation;        /* links in creation order where tracked (else by name), not HDF5's order of names */
	int (*dataset)(struct mt_ckpt_visit *v, hid_t d);
	void *arg;              /* the visitor's */
	/* the walk's own */
	char path[1024];
	int64_t objects, links;
	int level, failed;
};
/* 0 after every dataset was visited, else -1 with the message in v->err. */
int mt_ckpt_h5_walk(struct mt_ckpt_visit *v, hid_t g);

/* ---- opening a checkpoint (ckpt_read.c) ---- */
/* What the structure check of a file (ckpt_read.c, "what a file may hold") keeps. */
struct mt_ckpt_walk {
	int part;                  /* a part: no virtual datasets */
	int64_t model_tensors;     /* datasets under /model */
	double model_floats;       /* their elements */
	int virtual;               /* some dataset is virtual */
	double filesize;
};
int mt_ckpt_walk_file(hid_t f, const char *file, int part, struct mt_ckpt_walk *w, struct mt_err *err);
/* What opening a checkpoint found out besides the file handle. */
struct mt_ckpt_info {
	int legacy;            /* no checksums (an older mt wrote it) */
	int64_t model_tensors; /* datasets under /model */
	double model_floats;   /* their elements (of the index's virtual datasets too) */
};
hid_t mt_ckpt_open_info(const char *iterdir, char *file, size_t n, struct mt_ckpt_info *ci, struct mt_err *err);
hid_t mt_ckpt_open(const char *iterdir, char *file, size_t n, struct mt_err *err);
int mt_ckpt_read_i64(hid_t obj, const char *name, int64_t *v, const char *file, struct mt_err *err);
int mt_ckpt_read_state_h5(hid_t f, const char *file, struct mt_ckpt_loaded *st, struct mt_err *err);
int mt_ckpt_config_fits(hid_t f, const char *file, const struct mt_config *c, const struct mt_ckpt_info *ci, int ngroups,
			struct mt_err *err);

/* ---- sharded sets (ckpt_set.c) ---- */
int mt_ckpt_check_parts(hid_t f, const char *file, int legacy, double *part_bytes, struct mt_err *err);

#endif
