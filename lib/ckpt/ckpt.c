/* ckpt.c: HDF5 checkpoints, one directory per iteration (see ckpt.h; the layout is in
 * docs/formats.md "Checkpoints").
 *
 * This file holds the on-disk layout (directory and file names, the latest markers),
 * the atomic save protocol, and the translation between the parameter table's flat
 * buffers and one HDF5 dataset per logical tensor. It does not build the table
 * (params.c), interpret the config, training-argument or scheduler JSON it stores, or
 * reshard tensors between parallel layouts (mt-ckpt-reshard). HDF5 never prints here:
 * its error stack is turned into the message of a struct mt_err. */
#include "ckpt/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>
#include <jansson.h>
#include <xxhash.h>

#include "base/atomic.h"
#include "base/files.h"
#include "base/log.h"
#include "model/config.h"

#define PATH_CAP 4096
/* Tensors move in slabs of at most this many floats (256 MiB), far from any 2 GiB
 * limit of a single read or write call. */
#define SLAB_FLOATS ((hsize_t)64 << 20)
/* Writes go in slabs of at most this many floats (32 MiB): the unit of the write-behind
 * below. */
#define WB_FLOATS ((hsize_t)8 << 20)

/* ---- HDF5 errors ------------------------------------------------------------------ */

/* HDF5 clears its error stack on entry to every API call, so the reason for a failure
 * would be gone by the time cleanup calls have run. Instead of printing, the automatic
 * error handler records the reason of the last failed API call here, as "what failed:
 * root cause" (HDF5's words, lowercase as it writes them). Not thread-safe, like the
 * serial HDF5 library itself. */
static char h5_last[520];

struct h5why {
	char outer[256], inner[256];
};

/* HDF5's file drivers describe system errors at length ("file write failed: time = ...,
 * filename = ..., errno = 28, error message = 'No space left on device', buf = ...");
 * keep the first phrase and the system's message. Line breaks become spaces. */
static void h5why_tidy(char *s, size_t cap, const char *desc)
{
	const char *m = strstr(desc, "error message = '"), *colon = strchr(desc, ':'), *end;

	if (m && colon && colon < m && (end = strchr(m + 17, '\''))) {
		snprintf(s, cap, "%.*s: %.*s", (int)(colon - desc), desc, (int)(end - (m + 17)), m + 17);
	} else {
		snprintf(s, cap, "%s", desc);
	}
	for (char *p = s; *p; p++)
		if (*p == '\n' || *p == '\r' || *p == '\t')
			*p = ' ';
}

static herr_t h5why_walk(unsigned n, const H5E_error2_t *e, void *data)
{
	struct h5why *w = data;

	if (!e->desc || !e->desc[0])
		return 0;
	if (n == 0) /* the walk goes upward: the first entry is the root cause */
		h5why_tidy(w->inner, sizeof(w->inner), e->desc);
	h5why_tidy(w->outer, sizeof(w->outer), e->desc);
	return 0;
}

static herr_t h5_record(hid_t estack, void *data)
{
	struct h5why w = { "", "" };

	H5Ewalk2(estack, H5E_WALK_UPWARD, h5why_walk, &w);
	if (!w.outer[0])
		snprintf(h5_last, sizeof(h5_last), "hdf5 error");
	else if (!w.inner[0] || !strcmp(w.outer, w.inner))
		snprintf(h5_last, sizeof(h5_last), "%s", w.outer);
	else
		snprintf(h5_last, sizeof(h5_last), "%s: %s", w.outer, w.inner);
	return 0;
}

/* Every public entry point starts here: HDF5 prints nothing, and failures are recorded. */
static void h5_quiet(void)
{
	H5Eset_auto2(H5E_DEFAULT, h5_record, NULL);
	h5_last[0] = '\0';
}

/* After a failure that is expected and handled (a probe), forget its reason. */
static void h5_clear(void)
{
	H5Eclear2(H5E_DEFAULT);
	h5_last[0] = '\0';
}

/* mt_err_set with ": <hdf5's reason>" appended, when HDF5 gave one. */
__attribute__((format(printf, 3, 4)))
static int h5_fail(struct mt_err *err, int code, const char *fmt, ...)
{
	va_list ap;
	size_t n;

	va_start(ap, fmt);
	mt_err_vset(err, code, fmt, ap);
	va_end(ap);
	if (err && h5_last[0]) {
		n = strlen(err->msg);
		snprintf(err->msg + n, sizeof(err->msg) - n, ": %s", h5_last);
	}
	h5_clear();
	return -1;
}

static void h5_close(hid_t *id)
{
	if (*id < 0)
		return;
	switch (H5Iget_type(*id)) {
	case H5I_FILE: H5Fclose(*id); break;
	case H5I_GROUP: H5Gclose(*id); break;
	case H5I_DATASET: H5Dclose(*id); break;
	case H5I_ATTR: H5Aclose(*id); break;
	case H5I_DATASPACE: H5Sclose(*id); break;
	case H5I_DATATYPE: H5Tclose(*id); break;
	case H5I_GENPROP_LST: H5Pclose(*id); break;
	default: H5Oclose(*id); break;
	}
	*id = -1;
}

/* File access: objects still open are closed with the file (no leaks on error paths),
 * and no file locking: files are written once under a private temporary name, and
 * locking fails on parallel file systems without flock. */
static hid_t h5_fapl(void)
{
	hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);

	if (fapl < 0)
		return -1;
	H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
#if H5_VERSION_GE(1, 10, 7)
	H5Pset_file_locking(fapl, 0, 1);
#endif
	return fapl;
}

/* Files this module writes: superblock version 3 and version-2 object headers, in which
 * HDF5 keeps a checksum of every piece of metadata (object headers, B-trees, heaps of
 * links and attributes), so that a flipped bit there is "incorrect metadata checksum"
 * rather than a parse of garbage. Readers of HDF5 1.10 and later (h5py) read them. */
static hid_t h5_fapl_new(void)
{
	hid_t fapl = h5_fapl();

	if (fapl >= 0 && H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_LATEST) < 0)
		h5_close(&fapl);
	return fapl;
}

/* ---- checksums ----------------------------------------------------------------------------
 * Every dataset that holds bytes (a tensor of a self-contained file, a tensor of a part, the
 * rng bytes) carries "xxh3": XXH3-64 of its contents as stored (float32 little-endian, row
 * major). The root carries "state_xxh3" over what a resume takes from the attributes, and a
 * sharded index "shards_xxh3" over its list of parts. A file without state_xxh3 was written
 * before checksums existed: it is read unverified, with one warning per process. */
#define XXH_ATTR "xxh3"

static uint64_t h_i64(XXH3_state_t *h, int64_t v)
{
	unsigned char b[8];

	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)((uint64_t)v >> (8 * i));
	XXH3_64bits_update(h, b, 8);
	return 0;
}

static void h_str(XXH3_state_t *h, const char *s)
{
	size_t n = s ? strlen(s) : 0;

	h_i64(h, (int64_t)n);
	if (n)
		XXH3_64bits_update(h, s, n);
}

/* The state hash: the counters, the optimizer step (-1 without optimizer state) and the
 * three JSON texts, each with its length. */
static uint64_t state_hash(int64_t iteration, int64_t ctrain, int64_t cvalid, int64_t opt_step, const char *config,
			   const char *args, const char *sched)
{
	XXH3_state_t *h = XXH3_createState();
	uint64_t r;

	if (!h)
		return 0;
	XXH3_64bits_reset(h);
	XXH3_64bits_update(h, "mt-checkpoint-state", 19);
	h_i64(h, MT_CKPT_FORMAT_VERSION);
	h_i64(h, iteration);
	h_i64(h, ctrain);
	h_i64(h, cvalid);
	h_i64(h, opt_step);
	h_str(h, config);
	h_str(h, args);
	h_str(h, sched);
	r = XXH3_64bits_digest(h);
	XXH3_freeState(h);
	return r;
}

static uint64_t shards_hash(int n, char *const *names, const int64_t *bytes)
{
	XXH3_state_t *h = XXH3_createState();
	uint64_t r;

	if (!h)
		return 0;
	XXH3_64bits_reset(h);
	h_i64(h, n);
	for (int i = 0; i < n; i++) {
		h_str(h, names[i]);
		h_i64(h, bytes[i]);
	}
	r = XXH3_64bits_digest(h);
	XXH3_freeState(h);
	return r;
}

static int warned_legacy;

static void warn_legacy(const char *file)
{
	if (warned_legacy++)
		return;
	mt_warn("checkpoint '%s' has no checksums (written by an mt older than checksums): its tensors are read "
		"unverified; save it again (mt-ckpt-reshard merge) to add them", file);
}

/* ---- names and paths ---------------------------------------------------------------- */

int mt_ckpt_iter_dir(char *out, size_t n, const char *dir, int64_t iteration, struct mt_err *err)
{
	if (iteration < 0)
		return mt_err_set(err, MT_EXIT_USAGE, "checkpoint iteration %lld is negative", (long long)iteration);
	if ((size_t)snprintf(out, n, "%s/iter_%07lld", dir, (long long)iteration) >= n)
		return mt_err_set(err, MT_EXIT_IO, "checkpoint path too long: '%s'", dir);
	return 0;
}

int mt_ckpt_file_path(char *out, size_t n, const char *iterdir, int shard, int nshards,
		      struct mt_err *err)
{
	int len;

	if (nshards < 1 || shard < 0 || shard >= nshards)
		return mt_err_set(err, MT_EXIT_USAGE, "checkpoint shard %d of %d does not exist", shard, nshards);
	if (nshards == 1)
		len = snprintf(out, n, "%s/model.h5", iterdir);
	else
		len = snprintf(out, n, "%s/model-%05d-of-%05d.h5", iterdir, shard + 1, nshards);
	if (len < 0 || (size_t)len >= n)
		return mt_err_set(err, MT_EXIT_IO, "checkpoint path too long: '%s'", iterdir);
	return 0;
}

/* "iter_0000500" and what follows it: the iteration, and a pointer past the digits.
 * Only the names mt_ckpt_iter_dir makes count (7 digits at least, no extra zeros), so
 * a user's "iter_5" or "iter_final" is never taken for a checkpoint. */
static const char *parse_iter_name(const char *name, int64_t *iteration)
{
	const char *p = name + 5;
	char canon[32];
	int64_t v = 0;
	size_t nd = 0;

	if (strncmp(name, "iter_", 5) != 0)
		return NULL;
	while (p[nd] >= '0' && p[nd] <= '9') {
		if (nd >= 18)
			return NULL;
		v = v * 10 + (p[nd] - '0');
		nd++;
	}
	if (nd == 0)
		return NULL;
	snprintf(canon, sizeof(canon), "%07lld", (long long)v);
	if (strlen(canon) != nd || strncmp(canon, p, nd) != 0)
		return NULL;
	*iteration = v;
	return p + nd;
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s ? s + 1 : path;
}

/* The iteration a directory's name says (iter_N), else -1. Trailing slashes allowed. */
static int64_t iteration_of_dir(const char *dir)
{
	char copy[PATH_CAP];
	size_t n = strlen(dir);
	const char *rest;
	int64_t it;

	if (n == 0 || n >= sizeof(copy))
		return -1;
	memcpy(copy, dir, n + 1);
	while (n > 1 && copy[n - 1] == '/')
		copy[--n] = '\0';
	rest = parse_iter_name(base_name(copy), &it);
	return rest && !*rest ? it : -1;
}

static int is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The HDF5 file behind what the readers are given: ITERDIR/model.h5, the file itself, or
 * for a checkpoint directory the model.h5 of the iteration its latest marker names. */
static int model_file(const char *path, char *out, size_t n, struct mt_err *err)
{
	struct stat st;
	char iter[PATH_CAP];
	int64_t it;

	if (stat(path, &st) != 0)
		return mt_err_errno(err, MT_EXIT_IO, "cannot open checkpoint '%s'", path);
	if (!S_ISDIR(st.st_mode)) {
		if ((size_t)snprintf(out, n, "%s", path) >= n)
			return mt_err_set(err, MT_EXIT_IO, "checkpoint path too long: '%s'", path);
		return 0;
	}
	if (mt_ckpt_file_path(out, n, path, 0, 1, err))
		return -1;
	if (stat(out, &st) == 0)
		return 0;
	if (mt_ckpt_latest(path, &it, err))
		return -1;
	if (it < 0) /* no marker either: the caller reports the missing model.h5 */
		return 0;
	return mt_ckpt_iter_dir(iter, sizeof(iter), path, it, err) || mt_ckpt_file_path(out, n, iter, 0, 1, err) ? -1 : 0;
}

/* ---- file system ---------------------------------------------------------------------- */

static int mkdir_p(const char *dir, struct mt_err *err)
{
	char p[PATH_CAP];
	size_t n = strlen(dir);

	if (n == 0 || n >= sizeof(p))
		return mt_err_set(err, MT_EXIT_IO, "bad checkpoint directory '%s'", dir);
	memcpy(p, dir, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (p[i] != '/' && p[i] != '\0')
			continue;
		p[i] = '\0';
		if (mkdir(p, 0777) != 0 && errno != EEXIST)
			return mt_err_errno(err, MT_EXIT_IO, "cannot create directory '%s'", p);
		p[i] = i < n ? '/' : '\0';
	}
	if (!is_dir(dir))
		return mt_err_set(err, MT_EXIT_IO, "cannot create directory '%s': not a directory", dir);
	return 0;
}

/* Move the finished temporary directory to its final name. An existing final directory
 * (the same iteration saved again) is swapped out in one step where the file system
 * can (renameat2 RENAME_EXCHANGE), so the name never disappears; the old one ends up
 * under the temporary name and is removed. */
static int install_dir(const char *tmp, const char *final, struct mt_err *err)
{
	struct stat st;
	char old[PATH_CAP];

	if (lstat(final, &st) != 0) {
		if (errno != ENOENT)
			return mt_err_errno(err, MT_EXIT_IO, "cannot save checkpoint '%s'", final);
		if (rename(tmp, final) != 0)
			return mt_err_errno(err, MT_EXIT_IO, "cannot rename '%s' to '%s'", tmp, final);
		return 0;
	}
	if (!S_ISDIR(st.st_mode))
		return mt_err_set(err, MT_EXIT_IO, "cannot save checkpoint '%s': it exists and is not a directory", final);
#ifdef RENAME_EXCHANGE
	if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
		mt_rm_tree(tmp); /* best effort: a leftover is removed by the next save */
		return 0;
	}
	if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
		return mt_err_errno(err, MT_EXIT_IO, "cannot replace '%s' with '%s'", final, tmp);
#endif
	/* No atomic exchange here: move the old one aside first. A crash between the two
	 * renames leaves no DIR/iter_N until the next save (its data is in iter_N.old.<pid>). */
	if ((size_t)snprintf(old, sizeof(old), "%s.old.%ld", final, (long)getpid()) >= sizeof(old))
		return mt_err_set(err, MT_EXIT_IO, "checkpoint path too long: '%s'", final);
	mt_rm_tree(old);
	if (rename(final, old) != 0)
		return mt_err_errno(err, MT_EXIT_IO, "cannot rename '%s' to '%s'", final, old);
	if (rename(tmp, final) != 0) {
		mt_err_errno(err, MT_EXIT_IO, "cannot rename '%s' to '%s'", tmp, final);
		rename(old, final);
		return -1;
	}
	mt_rm_tree(old);
	return 0;
}

/* ---- the parameter table --------------------------------------------------------------- */

static int cmp_param_name(const void *a, const void *b)
{
	return strcmp((*(const struct mt_param *const *)a)->name, (*(const struct mt_param *const *)b)->name);
}

/* Check the table's rows (names usable as HDF5 link names, shapes, offsets within the
 * buffer, no name twice) and return its rows sorted by name, for lookups. */
static const struct mt_param **table_index(const struct mt_params *t, struct mt_err *err)
{
	const struct mt_param **v;

	if (!t || t->n < 0 || (t->n > 0 && !t->p)) {
		mt_err_set(err, MT_EXIT_USAGE, "internal: no parameter table");
		return NULL;
	}
	for (int i = 0; i < t->n; i++) {
		const struct mt_param *p = &t->p[i];
		int64_t numel = p->shape[0] * (p->ndim == 2 ? p->shape[1] : 1);

		if (!memchr(p->name, '\0', sizeof(p->name)) || !p->name[0] || strchr(p->name, '/') ||
		    !strcmp(p->name, ".") || !strcmp(p->name, "..")) {
			mt_err_set(err, MT_EXIT_DATA, "parameter table: row %d has a bad name '%.*s'", i,
				   (int)sizeof(p->name), p->name);
			return NULL;
		}
		if ((p->ndim != 1 && p->ndim != 2) || p->shape[0] <= 0 || (p->ndim == 2 && p->shape[1] <= 0) ||
		    p->numel != numel || p->offset < 0 || p->offset > t->total - numel) {
			mt_err_set(err, MT_EXIT_DATA,
				   "parameter table: '%s' has a bad shape or offset (ndim %d, numel %lld, offset %lld, total %lld)",
				   p->name, p->ndim, (long long)p->numel, (long long)p->offset, (long long)t->total);
			return NULL;
		}
	}
	v = malloc((size_t)(t->n > 0 ? t->n : 1) * sizeof(*v));
	if (!v) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		return NULL;
	}
	for (int i = 0; i < t->n; i++)
		v[i] = &t->p[i];
	qsort(v, (size_t)t->n, sizeof(*v), cmp_param_name);
	for (int i = 1; i < t->n; i++)
		if (!strcmp(v[i - 1]->name, v[i]->name)) {
			mt_err_set(err, MT_EXIT_DATA, "parameter table: '%s' appears twice", v[i]->name);
			free(v);
			return NULL;
		}
	return v;
}

static const struct mt_param *table_find(const struct mt_param **v, int n, const char *name)
{
	int lo = 0, hi = n - 1;

	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2, c = strcmp(name, v[mid]->name);
		if (c == 0)
			return v[mid];
		if (c < 0)
			hi = mid - 1;
		else
			lo = mid + 1;
	}
	return NULL;
}

static void fmt_shape(char *buf, size_t n, int nd, const int64_t *d)
{
	size_t k = 0;

	k += (size_t)snprintf(buf + k, n - k, "[");
	for (int i = 0; i < nd && k < n; i++)
		k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)d[i]);
	if (k < n)
		snprintf(buf + k, n - k, "]");
}

static int check_finite(const struct mt_params *t, const float *buf, const char *what,
			const char *final, struct mt_err *err)
{
	for (int i = 0; i < t->n; i++) {
		const struct mt_param *p = &t->p[i];
		const float *x = buf + p->offset;

		for (int64_t j = 0; j < p->numel; j++) {
			if (isfinite(x[j]))
				continue;
			char at[64];
			int64_t cols = p->ndim == 2 ? p->shape[1] : 1;
			if (p->ndim == 2)
				snprintf(at, sizeof(at), "[%lld, %lld]", (long long)(j / cols), (long long)(j % cols));
			else
				snprintf(at, sizeof(at), "[%lld]", (long long)j);
			return mt_err_set(err, MT_EXIT_DATA,
					  "refusing to save checkpoint '%s': %s '%s' holds %s at %s (the run has diverged; earlier checkpoints are kept)",
					  final, what, p->name, isnan(x[j]) ? "nan" : "inf", at);
		}
	}
	return 0;
}

/* ---- writing ------------------------------------------------------------------------- */

static int attr_write(hid_t obj, const char *name, hid_t ftype, hid_t mtype, int rank,
		      hsize_t len, const void *buf)
{
	hid_t sp = rank ? H5Screate_simple(1, &len, NULL) : H5Screate(H5S_SCALAR), a = -1;
	int rc = -1;

	if (sp >= 0 && (a = H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT)) >= 0 &&
	    H5Awrite(a, mtype, buf) >= 0)
		rc = 0;
	h5_close(&a);
	h5_close(&sp);
	return rc;
}

static int attr_i64(hid_t obj, const char *name, int64_t v)
{
	return attr_write(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, 0, 1, &v);
}

static int attr_i64v(hid_t obj, const char *name, int n, const int64_t *v)
{
	return attr_write(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, 1, (hsize_t)n, v);
}

/* Variable-length UTF-8 strings: what h5py writes for str, read back as str, and kept
 * in the global heap, so a long JSON text does not hit the 64 KiB object header. */
static hid_t vlen_string_type(H5T_cset_t cset)
{
	hid_t ty = H5Tcopy(H5T_C_S1);

	if (ty >= 0 && (H5Tset_size(ty, H5T_VARIABLE) < 0 || H5Tset_cset(ty, cset) < 0))
		h5_close(&ty);
	return ty;
}

static int attr_u64(hid_t obj, const char *name, uint64_t v)
{
	return attr_write(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, 0, 1, &v);
}

static int attr_str(hid_t obj, const char *name, const char *s)
{
	hid_t ty = vlen_string_type(H5T_CSET_UTF8);
	int rc = ty < 0 ? -1 : attr_write(obj, name, ty, ty, 0, 1, &s);

	h5_close(&ty);
	return rc;
}

/* ---- write-behind ---------------------------------------------------------------------
 * A checkpoint is written once and read again only at a resume, so its pages are of no
 * use in the page cache. Left there dirty, they reach the disk only at the fsync at the
 * end (or when the kernel's dirty limits force them), so that the disk idles while the
 * tensors are copied into memory, and the copying then allocates gigabytes of new page
 * cache. Instead, as the tensors' bytes are written (at increasing offsets: HDF5 puts
 * each contiguous dataset at the end of the file), every WB_FLOATS of them are handed to
 * write-back at once, and the range handed over before is waited for and dropped from
 * the page cache: the disk stays busy, at most two ranges per file are dirty, and the
 * pages are reused. On the development VM this took a 2.4 GB file from 0.5-1.0 to about
 * 2 GB/s (docs/perf.md, "Checkpoints"). Hints only: the fsync after the close still
 * makes the file durable, and where they fail (not Linux, not HDF5's sec2 driver) the
 * writes go on without them. */
struct wbehind {
	int fd;                  /* the file's descriptor; -1: off */
	int64_t started, waited; /* [waited, started) is under write-back, below waited done */
};

static void wb_open(struct wbehind *wb, hid_t f)
{
	hid_t fapl = H5Fget_access_plist(f);
	void *h = NULL;

	wb->fd = -1;
	wb->started = wb->waited = 0;
	if (fapl >= 0 && H5Pget_driver(fapl) == H5FD_SEC2 && H5Fget_vfd_handle(f, H5P_DEFAULT, &h) >= 0 && h)
		wb->fd = *(int *)h;
	h5_close(&fapl);
	h5_clear();
}

/* The tensors' bytes are written up to file offset end. */
static void wb_note(struct wbehind *wb, int64_t end)
{
	int64_t n = end - wb->started;

	if (wb->fd < 0 || n < (int64_t)(WB_FLOATS * sizeof(float)))
		return;
#ifdef SYNC_FILE_RANGE_WRITE
	sync_file_range(wb->fd, wb->started, n, SYNC_FILE_RANGE_WRITE);
	if (wb->started > wb->waited) {
		sync_file_range(wb->fd, wb->waited, wb->started - wb->waited,
				SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
		posix_fadvise(wb->fd, wb->waited, wb->started - wb->waited, POSIX_FADV_DONTNEED);
	}
#endif
	wb->waited = wb->started;
	wb->started = end;
}

/* The rows [r0, r0 + rows) of a dataset region starting at (row0, col0) of a 2-D (or 1-D)
 * dataset, cols wide, moved to or from buf in slabs; writes with wb feed its
 * write-behind. */
static int region_io(hid_t d, int nd, hsize_t row0, hsize_t col0, hsize_t rows, hsize_t cols, float *buf, int write,
		     struct wbehind *wb)
{
	hsize_t step = (write ? WB_FLOATS : SLAB_FLOATS) / (cols ? cols : 1);
	int rc = 0;

	if (step == 0)
		step = 1;
	for (hsize_t r = 0; r < rows && !rc; r += step) {
		hsize_t start[2] = { row0 + r, col0 }, count[2] = { rows - r < step ? rows - r : step, cols }, fdims[2] = { 0, 1 };
		hid_t fs = H5Dget_space(d), ms = H5Screate_simple(nd, count, NULL);

		if (fs < 0 || ms < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) < 0)
			rc = -1;
		else if (write)
			rc = H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf + r * cols) < 0 ? -1 : 0;
		else
			rc = H5Dread(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf + r * cols) < 0 ? -1 : 0;
		if (rc == 0 && write && wb && H5Sget_simple_extent_dims(fs, fdims, NULL) == nd) {
			haddr_t at = H5Dget_offset(d); /* contiguous: allocated by the first write */
			hsize_t fcols = nd == 2 ? fdims[1] : 1;
			if (at != HADDR_UNDEF)
				wb_note(wb, (int64_t)(at + ((start[0] + count[0] - 1) * fcols + col0 + cols) * sizeof(float)));
		}
		h5_close(&fs);
		h5_close(&ms);
	}
	return rc;
}

/* Move a whole float tensor between buf and dataset d. */
static int tensor_io(hid_t d, int nd, const hsize_t *dims, float *buf, int write, struct wbehind *wb)
{
	return region_io(d, nd, 0, 0, dims[0], nd == 2 ? dims[1] : 1, buf, write, wb);
}

static int write_tensor(hid_t grp, const struct mt_param *p, const float *buf, struct wbehind *wb)
{
	hsize_t dims[2] = { (hsize_t)p->shape[0], (hsize_t)p->shape[1] };
	int64_t zero[2] = { 0, 0 };
	hid_t sp = H5Screate_simple(p->ndim, dims, NULL), d = -1;
	int rc = -1;

	if (sp >= 0 && (d = H5Dcreate2(grp, p->name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) >= 0 &&
	    !attr_i64v(d, "global_shape", p->ndim, p->shape) && !attr_i64v(d, "offset", p->ndim, zero) &&
	    !attr_u64(d, XXH_ATTR, XXH3_64bits(buf, (size_t)p->numel * sizeof(float))) &&
	    !tensor_io(d, p->ndim, dims, (float *)buf, 1, wb))
		rc = 0;
	h5_close(&d);
	h5_close(&sp);
	return rc;
}

/* Groups remember the order their links were made in, so readers list tensors in the
 * table's order (embedding, layer 0, layer 1, ..., final norm) rather than by name. */
static hid_t group_create(hid_t parent, const char *name)
{
	hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE), g = -1;

	if (gcpl >= 0 && H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) >= 0)
		g = H5Gcreate2(parent, name, H5P_DEFAULT, gcpl, H5P_DEFAULT);
	h5_close(&gcpl);
	return g;
}

static int write_group(hid_t f, const char *path, const struct mt_params *t, const float *buf,
		       const char *file, struct wbehind *wb, struct mt_err *err)
{
	hid_t g = group_create(f, path);

	if (g < 0)
		return h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s': group '%s'", file, path);
	for (int i = 0; i < t->n; i++)
		if ((mt_atomic_step("checkpoint"), write_tensor(g, &t->p[i], buf + t->p[i].offset, wb))) {
			h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s': tensor '%s/%s'", file, path, t->p[i].name);
			h5_close(&g);
			return -1;
		}
	h5_close(&g);
	return 0;
}

/* What a checkpoint's file holds besides the tensors, as attributes of the root. */
static int state_attrs(hid_t f, const struct mt_ckpt_state *s, int has_opt)
{
	const char *args = s->train_args_json ? s->train_args_json : "{}", *sched = s->scheduler_json ? s->scheduler_json : "{}";
	uint64_t h = state_hash(s->iteration, s->consumed_train_samples, s->consumed_valid_samples,
				has_opt ? s->optimizer_step : -1, s->config_json, args, sched);

	return attr_str(f, "format", MT_CKPT_FORMAT) || attr_i64(f, "format_version", MT_CKPT_FORMAT_VERSION) ||
	       attr_u64(f, "state_xxh3", h) ||
	       attr_i64(f, "iteration", s->iteration) ||
	       attr_i64(f, "consumed_train_samples", s->consumed_train_samples) ||
	       attr_i64(f, "consumed_valid_samples", s->consumed_valid_samples) ||
	       attr_str(f, "config", s->config_json) ||
	       attr_str(f, "train_args", s->train_args_json ? s->train_args_json : "{}") ||
	       attr_str(f, "scheduler", s->scheduler_json ? s->scheduler_json : "{}") ? -1 : 0;
}

/* The root's rng dataset (bytes; empty for none). */
static int write_rng(hid_t f, const struct mt_ckpt_state *s)
{
	hsize_t rng_len = s->rng ? (hsize_t)s->rng_size : 0;
	hid_t sp = -1, d = -1;
	int rc = -1;

	if ((sp = H5Screate_simple(1, &rng_len, NULL)) >= 0 &&
	    (d = H5Dcreate2(f, "rng", H5T_STD_U8LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) >= 0 &&
	    !attr_u64(d, XXH_ATTR, XXH3_64bits(rng_len ? s->rng : "", (size_t)rng_len)) &&
	    (!rng_len || H5Dwrite(d, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, s->rng) >= 0))
		rc = 0;
	h5_close(&d);
	h5_close(&sp);
	return rc;
}

static int write_h5(const char *file, const struct mt_params *t, const float *w, const float *m,
		    const float *v, const struct mt_ckpt_state *s, struct mt_err *err)
{
	hid_t fcpl = H5Pcreate(H5P_FILE_CREATE), fapl = h5_fapl_new(), f = -1, g = -1;
	struct wbehind wb;
	int rc = -1;

	if (fcpl >= 0)
		H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
	f = fcpl < 0 || fapl < 0 ? -1 : H5Fcreate(file, H5F_ACC_EXCL, fcpl, fapl);
	h5_close(&fcpl);
	h5_close(&fapl);
	if (f < 0)
		return h5_fail(err, MT_EXIT_IO, "cannot create checkpoint '%s'", file);
	if (state_attrs(f, s, m != NULL)) {
		h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s': attributes", file);
		goto out;
	}
	wb_open(&wb, f);
	if (write_group(f, "model", t, w, file, &wb, err))
		goto out;
	if (m) {
		if ((g = group_create(f, "optimizer")) < 0 || attr_i64(g, "step", s->optimizer_step)) {
			h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s': group 'optimizer'", file);
			goto out;
		}
		h5_close(&g);
		if (write_group(f, "optimizer/exp_avg", t, m, file, &wb, err) ||
		    write_group(f, "optimizer/exp_avg_sq", t, v, file, &wb, err))
			goto out;
	}
	if (write_rng(f, s)) {
		h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s': dataset 'rng'", file);
		goto out;
	}
	rc = 0;
out:
	h5_close(&g);
	/* closing flushes: a full disk may only show here */
	if (H5Fclose(f) < 0 && rc == 0)
		rc = h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s'", file);
	return rc;
}

/* ---- the latest markers ------------------------------------------------------------------ */

/* Read a marker file: 1 with *iteration, 0 when it is not there, -1 on error. */
static int read_marker(const char *path, int64_t *iteration, struct mt_err *err)
{
	char buf[64], *s, *e;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	long long v;

	if (fd < 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			return 0;
		return mt_err_errno(err, MT_EXIT_IO, "cannot read '%s'", path);
	}
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return mt_err_errno(err, MT_EXIT_IO, "cannot read '%s'", path);
	buf[n] = '\0';
	for (s = buf; *s == ' ' || *s == '\t' || *s == '\n' || *s == '\r'; s++)
		;
	for (e = s + strlen(s); e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'); e--)
		;
	*e = '\0';
	if (!strcmp(s, "release"))
		return mt_err_set(err, MT_EXIT_DATA,
				  "checkpoint marker '%s' names a Megatron-LM release checkpoint, which mt cannot read", path);
	errno = 0;
	v = strtoll(s, &e, 10);
	if (!*s || *e || errno || v < 0 || n == (ssize_t)sizeof(buf) - 1)
		return mt_err_set(err, MT_EXIT_DATA, "checkpoint marker '%s' does not hold an iteration number", path);
	*iteration = v;
	return 1;
}

int mt_ckpt_latest(const char *dir, int64_t *iteration, struct mt_err *err)
{
	char p[PATH_CAP];
	int rc;

	*iteration = -1;
	if ((size_t)snprintf(p, sizeof(p), "%s/%s", dir, MT_CKPT_LATEST) >= sizeof(p))
		return mt_err_set(err, MT_EXIT_IO, "checkpoint path too long: '%s'", dir);
	if ((rc = read_marker(p, iteration, err)) != 0)
		return rc < 0 ? -1 : 0;
	snprintf(p, sizeof(p), "%s/%s", dir, MT_CKPT_MEGATRON_TRACKER);
	return read_marker(p, iteration, err) < 0 ? -1 : 0;
}

/* Megatron's tracker first, then DIR/latest, the commit point of a save: a crash between
 * the two leaves `latest` at the previous checkpoint, and both name complete ones. */
static int write_markers(const char *dir, int64_t iteration, struct mt_err *err)
{
	char p[PATH_CAP], text[32];
	int n;

	n = snprintf(text, sizeof(text), "%lld\n", (long long)iteration);
	/* Megatron writes str(iteration), no newline */
	if ((size_t)snprintf(p, sizeof(p), "%s/%s", dir, MT_CKPT_MEGATRON_TRACKER) >= sizeof(p))
		return mt_err_set(err, MT_EXIT_IO, "checkpoint path too long: '%s'", dir);
	if (mt_atomic_write_file(p, text, (size_t)n - 1, err))
		return -1;
	snprintf(p, sizeof(p), "%s/%s", dir, MT_CKPT_LATEST);
	return mt_atomic_write_file(p, text, (size_t)n, err);
}

/* ---- keep-last and leftovers -------------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

static int is_pid(const char *s)
{
	return *s && strspn(s, "0123456789") == strlen(s);
}

/* name is "<base>.tmp.<pid>": the pointer past base, else NULL. */
static const char *tmp_suffix(const char *name, const char *base)
{
	size_t n = strlen(base);

	return !strncmp(name, base, n) && !strncmp(name + n, ".tmp.", 5) && is_pid(name + n + 5) ? name + n : NULL;
}

/* After saving iteration `saved`: remove what killed saves left (iter_N.tmp.<pid> and
 * iter_N.old.<pid> of iterations up to `saved`, the markers' temporaries), and with
 * keep_last > 0, the complete iteration directories older than `saved` beyond the newest
 * keep_last - 1 of them. */
static int prune(const char *dir, int64_t saved, int keep_last, struct mt_err *err)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int64_t *old = NULL, it;
	size_t n = 0, cap = 0;
	char p[PATH_CAP];
	int rc = 0;

	if (!d)
		return mt_err_errno(err, MT_EXIT_IO, "checkpoint saved, but cannot list '%s'", dir);
	while ((e = readdir(d))) {
		const char *rest = parse_iter_name(e->d_name, &it);
		const char *tail;

		if (!rest) {
			/* a marker's temporary left by a killed save (atomic.c names them) */
			if (!(tail = tmp_suffix(e->d_name, MT_CKPT_LATEST)) &&
			    !(tail = tmp_suffix(e->d_name, MT_CKPT_MEGATRON_TRACKER)))
				continue;
			snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
			if (unlink(p) != 0 && errno != ENOENT && !rc)
				rc = mt_err_errno(err, MT_EXIT_IO, "checkpoint saved, but cannot remove the leftover '%s'", p);
			continue;
		}
		if (it > saved)
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		if (*rest == '\0') {
			if (it == saved || keep_last <= 0 || !is_dir(p))
				continue;
			if (n == cap) {
				int64_t *nv = realloc(old, (cap = cap ? 2 * cap : 16) * sizeof(*nv));
				if (!nv) {
					rc = mt_err_set(err, MT_EXIT_IO, "out of memory");
					break;
				}
				old = nv;
			}
			old[n++] = it;
			continue;
		}
		if (!tmp_suffix(rest, "") && !(strncmp(rest, ".old.", 5) == 0 && is_pid(rest + 5)))
			continue;
		if (mt_rm_tree(p) && !rc)
			rc = mt_err_errno(err, MT_EXIT_IO, "checkpoint saved, but cannot remove the leftover '%s'", p);
	}
	closedir(d);
	if (rc) {
		free(old);
		return -1;
	}
	if (n)
		qsort(old, n, sizeof(*old), cmp_i64);
	/* the new one counts as one of keep_last; delete the oldest first. Each goes out of
	 * sight in one rename (to iter_N.old.<pid>, which a later save removes should this
	 * one be killed while deleting), so no reader ever finds an empty or partial iter_N. */
	for (size_t i = 0; keep_last > 0 && i + (size_t)(keep_last - 1) < n; i++) {
		char aside[PATH_CAP + 32];
		mt_ckpt_iter_dir(p, sizeof(p), dir, old[i], NULL);
		snprintf(aside, sizeof(aside), "%s.old.%ld", p, (long)getpid());
		mt_rm_tree(aside);
		mt_atomic_step("checkpoint");
		if (rename(p, aside) != 0) {
			if (errno != ENOENT && !rc)
				rc = mt_err_errno(err, MT_EXIT_IO, "checkpoint saved, but cannot move the old '%s' aside (keep-last)", p);
			continue;
		}
		mt_atomic_step("checkpoint");
		if (mt_rm_tree(aside) && !rc)
			rc = mt_err_errno(err, MT_EXIT_IO, "checkpoint saved, but cannot remove the old '%s' (keep-last)", aside);
	}
	free(old);
	return rc;
}

/* ---- save ----------------------------------------------------------------------------------- */

int mt_ckpt_save(const char *dir, const struct mt_params *t, const float *weights,
		 const float *exp_avg, const float *exp_avg_sq, const struct mt_ckpt_state *s,
		 int keep_last, struct mt_err *err)
{
	char final[PATH_CAP], tmp[PATH_CAP], file[PATH_CAP];
	const struct mt_param **index;

	if (!dir || !*dir || !weights || !s)
		return mt_err_set(err, MT_EXIT_USAGE, "internal: mt_ckpt_save without a directory, weights or state");
	if (!exp_avg != !exp_avg_sq)
		return mt_err_set(err, MT_EXIT_USAGE, "internal: mt_ckpt_save needs both AdamW moments or neither");
	if (!s->config_json)
		return mt_err_set(err, MT_EXIT_USAGE, "internal: mt_ckpt_save without a model config");
	if (s->rng_size && !s->rng)
		return mt_err_set(err, MT_EXIT_USAGE, "internal: mt_ckpt_save with an rng size but no rng state");
	if (mt_ckpt_iter_dir(final, sizeof(final), dir, s->iteration, err))
		return -1;
	if (!(index = table_index(t, err)))
		return -1;
	free(index);
	if (check_finite(t, weights, "weight", final, err) ||
	    (exp_avg && (check_finite(t, exp_avg, "exp_avg", final, err) ||
			 check_finite(t, exp_avg_sq, "exp_avg_sq", final, err))))
		return -1;
	h5_quiet();
	if (mkdir_p(dir, err))
		return -1;
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", final, (long)getpid()) >= sizeof(tmp) ||
	    mt_ckpt_file_path(file, sizeof(file), tmp, 0, 1, err))
		return mt_err_set(err, MT_EXIT_IO, "checkpoint path too long: '%s'", dir);
	if (mt_rm_tree(tmp))
		return mt_err_errno(err, MT_EXIT_IO, "cannot remove the leftover '%s'", tmp);
	if (mkdir(tmp, 0777) != 0)
		return mt_err_errno(err, MT_EXIT_IO, "cannot create directory '%s'", tmp);
	if (write_h5(file, t, weights, exp_avg, exp_avg_sq, s, err))
		goto fail;
	mt_atomic_step("checkpoint");
	if (mt_fsync_path(file, 0)) {
		mt_err_errno(err, MT_EXIT_IO, "cannot sync checkpoint '%s'", file);
		goto fail;
	}
	return mt_ckpt_commit(dir, tmp, s->iteration, keep_last, err);
fail:
	mt_rm_tree(tmp);
	return -1;
}

int mt_ckpt_commit(const char *dir, const char *tmpdir, int64_t iteration, int keep_last, struct mt_err *err)
{
	char final[PATH_CAP];

	if (mt_ckpt_iter_dir(final, sizeof(final), dir, iteration, err))
		return -1;
	mt_atomic_step("checkpoint");
	if (mt_fsync_path(tmpdir, 1)) {
		mt_err_errno(err, MT_EXIT_IO, "cannot sync checkpoint '%s'", tmpdir);
		mt_rm_tree(tmpdir);
		return -1;
	}
	mt_atomic_step("checkpoint");
	if (install_dir(tmpdir, final, err)) {
		mt_rm_tree(tmpdir);
		return -1;
	}
	mt_atomic_step("checkpoint");
	if (mt_fsync_path(dir, 1))
		return mt_err_errno(err, MT_EXIT_IO, "cannot sync directory '%s'", dir);
	if (write_markers(dir, iteration, err))
		return mt_err_prefix(err, "checkpoint '%s' written but not marked latest", final);
	return prune(dir, iteration, keep_last, err);
}

/* ---- reading -------------------------------------------------------------------------------- */


/* ---- what a file may hold ---------------------------------------------------------------------
 * Before any attribute is asked for, the whole tree of a checkpoint file is walked: every
 * link must be a hard link (no external or soft links, so nothing outside the file is
 * reached), every dataset stored in the file itself (no external storage, no filters) with
 * at least as many bytes as its shape needs, and the only virtual datasets are those of a
 * sharded index, whose every source is a part of the same iteration directory named as
 * mt_ckpt_part_name names them and the dataset of the same name in it. Parts may hold no
 * virtual dataset. The walk sums the model group's tensors, which bounds what a model
 * config may ask to allocate (mt_ckpt_check_config). */
#define WALK_DEPTH 6
#define WALK_MAX_OBJECTS 1000000

struct walk {
	const char *file;
	int part;                  /* a part: no virtual datasets */
	int64_t objects;
	int64_t model_tensors;     /* datasets under /model */
	double model_floats;       /* their elements */
	int virtual;               /* some dataset is virtual */
	double filesize;
	char path[1024];
	struct mt_err *err;
};

/* "model-tp01-pp002-dp0003.h5": the names mt_ckpt_part_name makes, nothing else. */
static int is_part_name(const char *s)
{
	static const char *const lit[] = { "model-tp", "-pp", "-dp", ".h5" };
	static const size_t mindig[] = { 2, 3, 4 };

	for (int i = 0; i < 4; i++) {
		size_t n = strlen(lit[i]), d = 0;
		if (strncmp(s, lit[i], n))
			return 0;
		s += n;
		if (i == 3)
			return *s == '\0';
		while (s[d] >= '0' && s[d] <= '9')
			d++;
		if (d < mindig[i] || d > 9)
			return 0;
		s += d;
	}
	return 0;
}

static int walk_dataset(hid_t d, struct walk *w)
{
	hid_t dcpl = H5Dget_create_plist(d), sp = H5Dget_space(d), ty = H5Dget_type(d);
	hsize_t dims[H5S_MAX_RANK];
	int nd, rc = -1;
	double numel = 1;
	size_t esize;
	H5D_layout_t lay;

	if (dcpl < 0 || sp < 0 || ty < 0 || (nd = H5Sget_simple_extent_ndims(sp)) < 0 ||
	    H5Sget_simple_extent_dims(sp, dims, NULL) < 0 || !(esize = H5Tget_size(ty))) {
		h5_fail(w->err, MT_EXIT_DATA, "checkpoint '%s': dataset '/%s' cannot be described", w->file, w->path);
		goto out;
	}
	for (int i = 0; i < nd; i++)
		numel *= (double)dims[i];
	if (H5Pget_external_count(dcpl) != 0) {
		mt_err_set(w->err, MT_EXIT_DATA,
			   "checkpoint '%s': dataset '/%s' keeps its data in external files, which mt refuses (a checkpoint reads nothing outside its directory)",
			   w->file, w->path);
		goto out;
	}
	if (H5Pget_nfilters(dcpl) != 0) {
		mt_err_set(w->err, MT_EXIT_DATA, "checkpoint '%s': dataset '/%s' is filtered (compressed), which mt does not read",
			   w->file, w->path);
		goto out;
	}
	lay = H5Pget_layout(dcpl);
	if (lay == H5D_VIRTUAL) {
		size_t cnt = 0;
		char want[1100];

		if (w->part || H5Pget_virtual_count(dcpl, &cnt) < 0 || cnt == 0 || cnt > 65536) {
			h5_fail(w->err, MT_EXIT_DATA, "checkpoint '%s': dataset '/%s' is a virtual dataset mt did not write",
				w->file, w->path);
			goto out;
		}
		snprintf(want, sizeof(want), "/%s", w->path);
		for (size_t i = 0; i < cnt; i++) {
			char fname[64] = "", dname[1100] = "";
			ssize_t fl = H5Pget_virtual_filename(dcpl, i, NULL, 0), dl = H5Pget_virtual_dsetname(dcpl, i, NULL, 0);

			if (fl <= 0 || fl >= (ssize_t)sizeof(fname) || dl <= 0 || dl >= (ssize_t)sizeof(dname) ||
			    H5Pget_virtual_filename(dcpl, i, fname, sizeof(fname)) < 0 ||
			    H5Pget_virtual_dsetname(dcpl, i, dname, sizeof(dname)) < 0 || !is_part_name(fname) ||
			    strcmp(dname, want)) {
				h5_clear();
				mt_err_set(w->err, MT_EXIT_DATA,
					   "checkpoint '%s': virtual dataset '/%s' takes data from somewhere other than a part of its own directory (source %zu of %zu: '%s', dataset '%s'); mt refuses it",
					   w->file, w->path, i + 1, cnt, fname, dname);
				goto out;
			}
		}
		w->virtual = 1;
	} else if (lay == H5D_CONTIGUOUS || lay == H5D_CHUNKED || lay == H5D_COMPACT) {
		if ((double)H5Dget_storage_size(d) < numel * (double)esize || numel * (double)esize > w->filesize) {
			mt_err_set(w->err, MT_EXIT_DATA,
				   "checkpoint '%s': dataset '/%s' stores %llu bytes, its shape needs %.0f (truncated, or not written)",
				   w->file, w->path, (unsigned long long)H5Dget_storage_size(d), numel * (double)esize);
			goto out;
		}
	} else {
		h5_fail(w->err, MT_EXIT_DATA, "checkpoint '%s': dataset '/%s' has an unknown layout", w->file, w->path);
		goto out;
	}
	if (!strncmp(w->path, "model/", 6)) {
		w->model_tensors++;
		w->model_floats += numel;
	}
	rc = 0;
out:
	h5_close(&ty);
	h5_close(&sp);
	h5_close(&dcpl);
	return rc;
}

static int walk_group(hid_t g, struct walk *w, int depth);

static herr_t walk_link(hid_t g, const char *name, const H5L_info_t *info, void *data)
{
	struct walk *w = data;
	size_t len = strlen(w->path);
	H5O_info_t oi;
	hid_t o;
	int rc = 0;

	if ((size_t)snprintf(w->path + len, sizeof(w->path) - len, "%s%s", len ? "/" : "", name) >= sizeof(w->path) - len) {
		mt_err_set(w->err, MT_EXIT_DATA, "checkpoint '%s': a link name is too long", w->file);
		return -1;
	}
	if (info->type != H5L_TYPE_HARD) {
		mt_err_set(w->err, MT_EXIT_DATA, "checkpoint '%s': '/%s' is %s link, which mt refuses (a checkpoint reads nothing outside itself)",
			   w->file, w->path, info->type == H5L_TYPE_EXTERNAL ? "an external" : info->type == H5L_TYPE_SOFT ? "a soft" : "a user-defined");
		return -1;
	}
	if (++w->objects > WALK_MAX_OBJECTS) {
		mt_err_set(w->err, MT_EXIT_DATA, "checkpoint '%s': more than %d objects", w->file, WALK_MAX_OBJECTS);
		return -1;
	}
	if (H5Oget_info_by_name2(g, name, &oi, H5O_INFO_BASIC, H5P_DEFAULT) < 0 || (o = H5Oopen(g, name, H5P_DEFAULT)) < 0) {
		h5_fail(w->err, MT_EXIT_DATA, "checkpoint '%s': cannot open '/%s'", w->file, w->path);
		return -1;
	}
	if (oi.type == H5O_TYPE_GROUP)
		rc = walk_group(o, w, 0) ? -1 : 0;
	else if (oi.type == H5O_TYPE_DATASET)
		rc = walk_dataset(o, w) ? -1 : 0;
	h5_close(&o);
	w->path[len] = '\0';
	return rc;
}

static int walk_group(hid_t g, struct walk *w, int depth)
{
	hsize_t idx = 0;
	static int level;
	int rc;

	(void)depth;
	if (level >= WALK_DEPTH)
		return mt_err_set(w->err, MT_EXIT_DATA, "checkpoint '%s': groups nested deeper than %d at '/%s'", w->file,
				  WALK_DEPTH, w->path);
	level++;
	rc = H5Literate(g, H5_INDEX_NAME, H5_ITER_NATIVE, &idx, walk_link, w) < 0 ? -1 : 0;
	level--;
	if (rc && !(w->err && w->err->code))
		return h5_fail(w->err, MT_EXIT_DATA, "checkpoint '%s': cannot list group '/%s'", w->file, w->path);
	return rc;
}

/* Walk file f (opened from `file`). *legacy: the file predates checksummed metadata. */
static int walk_file(hid_t f, const char *file, int part, struct walk *w, struct mt_err *err)
{
	memset(w, 0, sizeof(*w));
	w->file = file;
	w->part = part;
	w->err = err;
	if (err)
		err->code = 0;
	{
		hsize_t sz = 0;
		if (H5Fget_filesize(f, &sz) < 0)
			return h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': cannot tell its size", file);
		w->filesize = (double)sz;
	}
	return walk_group(f, w, 0);
}

/* ---- verifying what was read ------------------------------------------------------------------ */

/* The stored checksum of dataset d: 1 with *v, 0 when it has none, -1 when it is garbled. */
static int read_xxh(hid_t d, uint64_t *v)
{
	hid_t a = -1, sp = -1, ty = -1;
	int rc = -1;
	htri_t ex = H5Aexists(d, XXH_ATTR);

	if (ex <= 0) {
		h5_clear();
		return ex == 0 ? 0 : -1;
	}
	if ((a = H5Aopen(d, XXH_ATTR, H5P_DEFAULT)) >= 0 && (sp = H5Aget_space(a)) >= 0 && (ty = H5Aget_type(a)) >= 0 &&
	    H5Tget_class(ty) == H5T_INTEGER && H5Tget_size(ty) == 8 && H5Sget_simple_extent_npoints(sp) == 1 &&
	    H5Aread(a, H5T_NATIVE_UINT64, v) >= 0)
		rc = 1;
	h5_close(&ty);
	h5_close(&sp);
	h5_close(&a);
	h5_clear();
	return rc;
}

/* Is every float of x finite? -1 when so, else the index of the first that is not. */
static int64_t first_nonfinite(const float *x, int64_t n)
{
	for (int64_t j = 0; j < n; j++)
		if (!isfinite(x[j]))
			return j;
	return -1;
}

static int nonfinite_err(struct mt_err *err, const char *file, const char *path, const float *x, int64_t at)
{
	return mt_err_set(err, MT_EXIT_DATA,
			  "checkpoint '%s': tensor '%s' holds %s at element %lld (a diverged or damaged model: mt refuses it)",
			  file, path, isnan(x[at]) ? "nan" : "inf", (long long)at);
}

#define VERIFY_FLOATS ((hsize_t)4 << 20)

/* Read a whole float32 dataset of a file (a self-contained tensor, or a part's) in slabs,
 * compare its XXH3 with the stored one and look for NaN and infinities. legacy: a file
 * without checksums (none expected). *bytes adds what was read. */
static int verify_plain(hid_t d, const char *file, const char *path, int legacy, int64_t *bytes, struct mt_err *err)
{
	hid_t sp = H5Dget_space(d), ty = H5Dget_type(d);
	hsize_t dims[H5S_MAX_RANK], cols = 1, step, rows;
	uint64_t want = 0;
	int nd, has, rc = -1;
	float *buf = NULL;
	XXH3_state_t *h = XXH3_createState();
	int64_t done = 0, bad = -1;
	int badnan = 0;

	if (!h || sp < 0 || ty < 0 || (nd = H5Sget_simple_extent_ndims(sp)) < 1 || nd > 2 ||
	    H5Sget_simple_extent_dims(sp, dims, NULL) < 0) {
		h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s' is not a 1- or 2-dimensional dataset", file, path);
		goto out;
	}
	if (H5Tget_class(ty) != H5T_FLOAT) {
		mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s' is not floating point", file, path);
		goto out;
	}
	if ((has = read_xxh(d, &want)) < 0) {
		mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s' has a garbled checksum attribute", file, path);
		goto out;
	}
	if (!has && !legacy) {
		mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s' has lost its checksum (the file's other checksums are there)",
			   file, path);
		goto out;
	}
	if (has && (H5Tget_size(ty) != 4 || H5Tget_order(ty) != H5T_ORDER_LE)) {
		mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s' is not float32 as its checksum says", file, path);
		goto out;
	}
	rows = dims[0];
	if (nd == 2)
		cols = dims[1];
	step = cols ? VERIFY_FLOATS / cols : 1;
	if (step == 0)
		step = 1;
	if (!(buf = malloc((size_t)((rows < step ? rows : step) * cols + 1) * sizeof(float)))) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out;
	}
	XXH3_64bits_reset(h);
	for (hsize_t r = 0; r < rows; r += step) {
		hsize_t n = rows - r < step ? rows - r : step;
		int64_t at;

		if (region_io(d, nd, r, 0, n, cols, buf, 0, NULL)) {
			h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': cannot read tensor '%s'", file, path);
			goto out;
		}
		XXH3_64bits_update(h, buf, (size_t)(n * cols) * sizeof(float));
		if (bad < 0 && (at = first_nonfinite(buf, (int64_t)(n * cols))) >= 0) {
			bad = (int64_t)(r * cols) + at;
			badnan = isnan(buf[at]);
		}
		done += (int64_t)(n * cols) * 4;
	}
	if (has && XXH3_64bits_digest(h) != want) {
		mt_err_set(err, MT_EXIT_DATA,
			   "checkpoint '%s': tensor '%s' does not match its checksum (stored xxh3 %016llx, read %016llx): the file is damaged",
			   file, path, (unsigned long long)want, (unsigned long long)XXH3_64bits_digest(h));
		goto out;
	}
	if (bad >= 0) {
		mt_err_set(err, MT_EXIT_DATA,
			   "checkpoint '%s': tensor '%s' holds %s at element %lld (a diverged or damaged model: mt refuses it)",
			   file, path, badnan ? "nan" : "inf", (long long)bad);
		goto out;
	}
	if (bytes)
		*bytes += done;
	rc = 0;
out:
	free(buf);
	if (h)
		XXH3_freeState(h);
	h5_close(&ty);
	h5_close(&sp);
	return rc;
}

/* Part datasets already verified during one load (file and dataset). */
struct vcache {
	char **v;
	size_t n, cap;
};

static int vcache_has(const struct vcache *c, const char *key)
{
	for (size_t i = 0; c && i < c->n; i++)
		if (!strcmp(c->v[i], key))
			return 1;
	return 0;
}

static void vcache_add(struct vcache *c, const char *key)
{
	if (!c)
		return;
	if (c->n == c->cap) {
		char **nv = realloc(c->v, (c->cap = c->cap ? 2 * c->cap : 64) * sizeof(*nv));
		if (!nv)
			return;
		c->v = nv;
	}
	if ((c->v[c->n] = strdup(key)))
		c->n++;
}

static void vcache_free(struct vcache *c)
{
	for (size_t i = 0; i < c->n; i++)
		free(c->v[i]);
	free(c->v);
	memset(c, 0, sizeof(*c));
}

/* Mapping i of a virtual dataset's creation list: the bounds of its region in the virtual
 * dataset (a 1-D one's column bounds 0) and its source's file and dataset names. */
static int vmap_at(hid_t dcpl, size_t i, hsize_t *s0, hsize_t *e0, char *fname, size_t fn, char *dname, size_t dn)
{
	hid_t vs = H5Pget_virtual_vspace(dcpl, i);
	int nd = vs >= 0 ? H5Sget_simple_extent_ndims(vs) : -1;
	int bad = vs < 0 || nd < 1 || H5Sget_select_bounds(vs, s0, e0) < 0 || H5Pget_virtual_filename(dcpl, i, fname, fn) < 0 ||
		  H5Pget_virtual_dsetname(dcpl, i, dname, dn) < 0;

	h5_close(&vs);
	if (nd == 1)
		s0[1] = e0[1] = 0;
	return bad ? -1 : 0;
}

/* Open part fname of the checkpoint in dir, read-only. HDF5 may hold the part open
 * already, as a virtual dataset's source, with its own access properties (file locking
 * on): open it the same way then. */
static hid_t part_open(const char *dir, const char *fname, char *pfile, size_t pn)
{
	hid_t fapl = h5_fapl(), pf = -1;

	snprintf(pfile, pn, "%s/%s", dir, fname);
	if (fapl >= 0 && (pf = H5Fopen(pfile, H5F_ACC_RDONLY, fapl)) < 0) {
		h5_clear();
		pf = H5Fopen(pfile, H5F_ACC_RDONLY, H5P_DEFAULT);
	}
	h5_close(&fapl);
	return pf;
}

/* Verify the parts' datasets behind virtual dataset d (of index file `file`) that hold
 * any of the region rows [r0, r0 + nr) x columns [c0, c0 + nc) (nr 0: all of it). */
static int verify_virtual(hid_t d, const char *file, const char *path, int legacy, hsize_t r0, hsize_t c0, hsize_t nr,
			  hsize_t nc, struct vcache *cache, int64_t *bytes, struct mt_err *err)
{
	hid_t dcpl = H5Dget_create_plist(d);
	size_t cnt = 0;
	char dir[PATH_CAP];
	const char *slash = strrchr(file, '/');
	int rc = 0;

	snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - file) : 1, slash ? file : ".");
	if (dcpl < 0 || H5Pget_virtual_count(dcpl, &cnt) < 0) {
		h5_close(&dcpl);
		return h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s' cannot be described", file, path);
	}
	for (size_t i = 0; i < cnt && !rc; i++) {
		char fname[64], dname[1100], key[1200], pfile[PATH_CAP + 80];
		hsize_t s0[H5S_MAX_RANK] = { 0 }, e0[H5S_MAX_RANK] = { 0 };
		hid_t pf = -1, pd = -1;

		if (vmap_at(dcpl, i, s0, e0, fname, sizeof(fname), dname, sizeof(dname))) {
			rc = h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s' cannot be described", file, path);
			break;
		}
		if (nr && (e0[0] < r0 || s0[0] >= r0 + nr || e0[1] < c0 || s0[1] >= c0 + nc))
			continue;
		snprintf(key, sizeof(key), "%s:%s", fname, dname);
		if (vcache_has(cache, key))
			continue;
		if ((pf = part_open(dir, fname, pfile, sizeof(pfile))) < 0 || (pd = H5Dopen2(pf, dname, H5P_DEFAULT)) < 0) {
			rc = h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': cannot read part '%s' of tensor '%s'", file, pfile, path);
		} else {
			char p2[1200];
			snprintf(p2, sizeof(p2), "%s (part %s)", path, fname);
			rc = verify_plain(pd, file, p2, legacy, bytes, err);
			if (!rc)
				vcache_add(cache, key);
		}
		h5_close(&pd);
		if (pf >= 0)
			H5Fclose(pf);
	}
	h5_close(&dcpl);
	return rc;
}

static int is_virtual(hid_t d)
{
	hid_t dcpl = H5Dget_create_plist(d);
	int v = dcpl >= 0 && H5Pget_layout(dcpl) == H5D_VIRTUAL;

	h5_close(&dcpl);
	return v;
}

/* What opening a checkpoint found out besides the file handle. */
struct ckinfo {
	int legacy;            /* no checksums (an older mt wrote it) */
	int64_t model_tensors; /* datasets under /model */
	double model_floats;   /* their elements (of the index's virtual datasets too) */
};

static int check_parts(hid_t f, const char *file, int legacy, double *part_bytes, struct mt_err *err);

/* Open the checkpoint file read-only and check that it is an mt checkpoint this version
 * reads: first its whole structure (walk_file), then the format attributes. file gets its
 * path (for messages); ci (may be NULL) what the walk found. */
static hid_t open_ckpt_info(const char *iterdir, char *file, size_t n, struct ckinfo *ci, struct mt_err *err)
{
	hid_t fapl, f, a = -1, ty = -1, mt = -1;
	int64_t version = 0;
	char *fmt = NULL;
	int fd, ok = 0;
	struct stat sb;
	struct walk w;
	struct ckinfo tmp;

	if (!ci)
		ci = &tmp;
	memset(ci, 0, sizeof(*ci));
	h5_quiet();
	if (model_file(iterdir, file, n, err))
		return -1;
	if ((fd = open(file, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) < 0) {
		if (errno == ENOENT && is_dir(iterdir))
			mt_err_set(err, MT_EXIT_DATA,
				   "cannot open checkpoint '%s': no model.h5 there (an incomplete checkpoint; a Megatron-LM torch checkpoint cannot be read)",
				   iterdir);
		else
			mt_err_errno(err, MT_EXIT_IO, "cannot open checkpoint '%s'", file);
		return -1;
	}
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		return mt_err_set(err, MT_EXIT_DATA, "cannot read checkpoint '%s': not a regular file", file);
	}
	close(fd);
	if ((fapl = h5_fapl()) < 0)
		return h5_fail(err, MT_EXIT_IO, "cannot open checkpoint '%s'", file);
	f = H5Fopen(file, H5F_ACC_RDONLY, fapl);
	h5_close(&fapl);
	if (f < 0)
		return h5_fail(err, MT_EXIT_DATA, "cannot read checkpoint '%s'", file);
	if (walk_file(f, file, 0, &w, err)) {
		H5Fclose(f);
		return -1;
	}
	ci->model_tensors = w.model_tensors;
	ci->model_floats = w.model_floats;
	if (H5Aexists(f, "format") > 0 && (a = H5Aopen(f, "format", H5P_DEFAULT)) >= 0 &&
	    (ty = H5Aget_type(a)) >= 0 && H5Tget_class(ty) == H5T_STRING && H5Tis_variable_str(ty) > 0 &&
	    (mt = vlen_string_type(H5Tget_cset(ty))) >= 0 && H5Aread(a, mt, &fmt) >= 0 && fmt &&
	    !strcmp(fmt, MT_CKPT_FORMAT))
		ok = 1;
	if (fmt)
		H5free_memory(fmt);
	h5_close(&mt);
	h5_close(&ty);
	h5_close(&a);
	h5_clear();
	if (!ok) {
		H5Fclose(f);
		return mt_err_set(err, MT_EXIT_DATA, "cannot read checkpoint '%s': not an mt checkpoint (no format attribute '%s')",
				  file, MT_CKPT_FORMAT);
	}
	if (H5Aexists(f, "format_version") <= 0 || (a = H5Aopen(f, "format_version", H5P_DEFAULT)) < 0 ||
	    H5Aread(a, H5T_NATIVE_INT64, &version) < 0) {
		h5_fail(err, MT_EXIT_DATA, "cannot read checkpoint '%s': no readable format_version attribute", file);
		h5_close(&a);
		H5Fclose(f);
		return -1;
	}
	h5_close(&a);
	if (version != MT_CKPT_FORMAT_VERSION) {
		H5Fclose(f);
		return mt_err_set(err, MT_EXIT_DATA, "cannot read checkpoint '%s': format version %lld%s (this mt reads %d)",
				  file, (long long)version, version > MT_CKPT_FORMAT_VERSION ? " is newer: upgrade mt" : " is unknown",
				  MT_CKPT_FORMAT_VERSION);
	}
	ci->legacy = H5Aexists(f, "state_xxh3") <= 0;
	h5_clear();
	if (ci->legacy)
		warn_legacy(file);
	{
		double pb = 0;
		if (check_parts(f, file, ci->legacy, &pb, err)) {
			H5Fclose(f);
			return -1;
		}
		/* virtual shapes are only promises: the parts must hold the floats they promise */
		if (w.virtual && w.model_floats * 4 > pb) {
			H5Fclose(f);
			return mt_err_set(err, MT_EXIT_DATA,
					  "cannot read checkpoint '%s': its tensors' shapes need %.0f bytes, its parts hold %.0f",
					  file, w.model_floats * 4, pb);
		}
	}
	if (w.virtual && H5Aexists(f, "shards") <= 0) {
		h5_clear();
		H5Fclose(f);
		return mt_err_set(err, MT_EXIT_DATA, "cannot read checkpoint '%s': virtual datasets but no list of parts ('shards')", file);
	}
	return f;
}

static hid_t open_ckpt(const char *iterdir, char *file, size_t n, struct mt_err *err)
{
	return open_ckpt_info(iterdir, file, n, NULL, err);
}

static int read_i64(hid_t obj, const char *name, int64_t *v, const char *file, struct mt_err *err)
{
	hid_t a = -1, sp = -1;
	int rc = -1;

	if (H5Aexists(obj, name) <= 0) {
		h5_clear();
		return mt_err_set(err, MT_EXIT_DATA, "cannot read checkpoint '%s': attribute '%s' is missing", file, name);
	}
	if ((a = H5Aopen(obj, name, H5P_DEFAULT)) >= 0 && (sp = H5Aget_space(a)) >= 0 &&
	    H5Sget_simple_extent_npoints(sp) == 1 && H5Aread(a, H5T_NATIVE_INT64, v) >= 0)
		rc = 0;
	h5_close(&sp);
	h5_close(&a);
	if (rc)
		return h5_fail(err, MT_EXIT_DATA, "cannot read checkpoint '%s': attribute '%s' is not one integer", file, name);
	return 0;
}

/* A string attribute (variable-length, as written, or fixed-length from other writers),
 * malloc'ed. */
static int read_str(hid_t obj, const char *name, char **out, const char *file, struct mt_err *err)
{
	hid_t a = -1, ty = -1, mt = -1, sp = -1;
	char *s = NULL;
	int rc = -1;

	*out = NULL;
	if (H5Aexists(obj, name) <= 0) {
		h5_clear();
		return mt_err_set(err, MT_EXIT_DATA, "cannot read checkpoint '%s': attribute '%s' is missing", file, name);
	}
	if ((a = H5Aopen(obj, name, H5P_DEFAULT)) < 0 || (ty = H5Aget_type(a)) < 0 || (sp = H5Aget_space(a)) < 0 ||
	    H5Tget_class(ty) != H5T_STRING || H5Sget_simple_extent_npoints(sp) != 1)
		goto out;
	if (H5Tis_variable_str(ty) > 0) {
		if ((mt = vlen_string_type(H5Tget_cset(ty))) >= 0 && H5Aread(a, mt, &s) >= 0) {
			*out = strdup(s ? s : "");
			rc = *out ? 0 : -2;
		}
		if (s)
			H5free_memory(s);
	} else {
		size_t n = H5Tget_size(ty);
		char *buf = n ? malloc(n + 1) : NULL;

		if (buf && (mt = H5Tcopy(ty)) >= 0 && H5Aread(a, mt, buf) >= 0) {
			buf[n] = '\0';
			*out = buf;
			rc = 0;
		} else {
			free(buf);
		}
	}
out:
	h5_close(&mt);
	h5_close(&sp);
	h5_close(&ty);
	h5_close(&a);
	if (rc == -2)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	if (rc)
		return h5_fail(err, MT_EXIT_DATA, "cannot read checkpoint '%s': attribute '%s' is not a string", file, name);
	return 0;
}

static int read_rng(hid_t f, struct mt_ckpt_loaded *st, const char *file, struct mt_err *err)
{
	hid_t d = -1, sp = -1, ty = -1;
	hssize_t n;
	int rc = -1;

	if (H5Lexists(f, "rng", H5P_DEFAULT) <= 0) {
		h5_clear();
		return 0; /* none stored */
	}
	if ((d = H5Dopen2(f, "rng", H5P_DEFAULT)) >= 0 && (sp = H5Dget_space(d)) >= 0 && (ty = H5Dget_type(d)) >= 0 &&
	    H5Tget_class(ty) == H5T_INTEGER && H5Tget_size(ty) == 1 && H5Sget_simple_extent_ndims(sp) == 1 &&
	    (n = H5Sget_simple_extent_npoints(sp)) >= 0) {
		if (n == 0) {
			rc = 0;
		} else if (!(st->rng = malloc((size_t)n))) {
			rc = -2;
		} else if (H5Dread(d, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, st->rng) >= 0) {
			st->rng_size = (size_t)n;
			rc = 0;
		}
	}
	if (rc == 0) {
		uint64_t want = 0;
		int has = read_xxh(d, &want), checked = H5Aexists(f, "state_xxh3") > 0;

		h5_clear();
		if (has < 0 || (checked && !has) || (has > 0 && want != XXH3_64bits(st->rng ? st->rng : "", st->rng_size))) {
			h5_close(&ty);
			h5_close(&sp);
			h5_close(&d);
			return mt_err_set(err, MT_EXIT_DATA, "cannot read checkpoint '%s': dataset 'rng' does not match its checksum", file);
		}
	}
	h5_close(&ty);
	h5_close(&sp);
	h5_close(&d);
	if (rc == -2)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	if (rc)
		return h5_fail(err, MT_EXIT_DATA, "cannot read checkpoint '%s': dataset 'rng' is not a byte array", file);
	return 0;
}

void mt_ckpt_loaded_free(struct mt_ckpt_loaded *st)
{
	if (!st)
		return;
	free(st->config_json);
	free(st->train_args_json);
	free(st->scheduler_json);
	free(st->rng);
	memset(st, 0, sizeof(*st));
}

static int read_state_h5(hid_t f, const char *file, struct mt_ckpt_loaded *st, struct mt_err *err)
{
	memset(st, 0, sizeof(*st));
	st->format_version = MT_CKPT_FORMAT_VERSION;
	if (read_i64(f, "iteration", &st->iteration, file, err) ||
	    read_i64(f, "consumed_train_samples", &st->consumed_train_samples, file, err) ||
	    read_i64(f, "consumed_valid_samples", &st->consumed_valid_samples, file, err) ||
	    read_str(f, "config", &st->config_json, file, err) ||
	    read_str(f, "train_args", &st->train_args_json, file, err) ||
	    read_str(f, "scheduler", &st->scheduler_json, file, err) || read_rng(f, st, file, err))
		goto fail;
	if (H5Lexists(f, "optimizer", H5P_DEFAULT) > 0) {
		hid_t g = H5Gopen2(f, "optimizer", H5P_DEFAULT);
		int rc = g < 0 ? h5_fail(err, MT_EXIT_DATA, "cannot read checkpoint '%s': group 'optimizer'", file)
			       : read_i64(g, "step", &st->optimizer_step, file, err);

		h5_close(&g);
		if (rc)
			goto fail;
		st->has_optimizer = 1;
	}
	h5_clear();
	/* counters a resume trusts: named when they cannot be right */
	{
		static const char *const names[] = { "iteration", "consumed_train_samples", "consumed_valid_samples", "optimizer/step" };
		const int64_t v[] = { st->iteration, st->consumed_train_samples, st->consumed_valid_samples, st->optimizer_step };
		for (int i = 0; i < 4; i++)
			if (v[i] < 0 || v[i] > MT_CKPT_COUNTER_MAX) {
				mt_err_set(err, MT_EXIT_DATA, "cannot read checkpoint '%s': attribute '%s' is %lld, %s", file, names[i],
					   (long long)v[i], v[i] < 0 ? "negative" : "beyond any run (2^53)");
				goto fail;
			}
	}
	if (H5Aexists(f, "state_xxh3") > 0) {
		uint64_t want = 0, got;
		hid_t a = H5Aopen(f, "state_xxh3", H5P_DEFAULT);
		int bad = a < 0 || H5Aread(a, H5T_NATIVE_UINT64, &want) < 0;

		h5_close(&a);
		got = state_hash(st->iteration, st->consumed_train_samples, st->consumed_valid_samples,
				 st->has_optimizer ? st->optimizer_step : -1, st->config_json, st->train_args_json,
				 st->scheduler_json);
		if (bad || want != got) {
			h5_fail(err, MT_EXIT_DATA,
				"cannot read checkpoint '%s': its attributes (iteration, samples, config, arguments, scheduler) do not match their checksum 'state_xxh3'",
				file);
			goto fail;
		}
	}
	h5_clear();
	{
		/* the directory's name and the iteration inside must agree */
		char dir[PATH_CAP];
		const char *slash = strrchr(file, '/');
		int64_t named;

		snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - file) : 1, slash ? file : ".");
		if ((named = iteration_of_dir(dir)) >= 0 && named != st->iteration) {
			mt_err_set(err, MT_EXIT_DATA, "cannot read checkpoint '%s': attribute 'iteration' is %lld, its directory says %lld",
				   file, (long long)st->iteration, (long long)named);
			goto fail;
		}
	}
	return 0;
fail:
	mt_ckpt_loaded_free(st);
	return -1;
}

int mt_ckpt_read_state(const char *iterdir, struct mt_ckpt_loaded *st, struct mt_err *err)
{
	char file[PATH_CAP];
	hid_t f;
	int rc;

	memset(st, 0, sizeof(*st));
	if ((f = open_ckpt(iterdir, file, sizeof(file), err)) < 0)
		return -1;
	rc = read_state_h5(f, file, st, err);
	H5Fclose(f);
	return rc;
}

int mt_ckpt_resolve(const char *path, char *out, size_t n, int64_t *iteration, struct mt_err *err)
{
	char p[PATH_CAP];
	struct stat st;
	int64_t it = -1;

	if (stat(path, &st) != 0)
		return mt_err_errno(err, MT_EXIT_IO, "cannot open checkpoint '%s'", path);
	if (S_ISDIR(st.st_mode)) {
		if (mt_ckpt_latest(path, &it, err))
			return -1;
		if (it >= 0) {
			if (mt_ckpt_iter_dir(p, sizeof(p), path, it, err))
				return -1;
			if (!is_dir(p))
				return mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s' names iteration %lld, but '%s' is missing",
						  path, (long long)it, p);
		} else {
			if (mt_ckpt_file_path(p, sizeof(p), path, 0, 1, err))
				return -1;
			if (stat(p, &st) != 0 && iteration_of_dir(path) >= 0)
				return mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s' is incomplete: no model.h5 in it", path);
			if (stat(p, &st) != 0)
				return mt_err_set(err, MT_EXIT_IO,
						  "no checkpoint in '%s': no '%s' marker, no %s and no model.h5", path,
						  MT_CKPT_LATEST, MT_CKPT_MEGATRON_TRACKER);
			snprintf(p, sizeof(p), "%s", path);
			it = iteration_of_dir(path);
		}
	} else if (!strcmp(base_name(path), "model.h5")) {
		size_t k = (size_t)(base_name(path) - path);

		if (k >= sizeof(p))
			return mt_err_set(err, MT_EXIT_IO, "checkpoint path too long: '%s'", path);
		if (k == 0)
			snprintf(p, sizeof(p), ".");
		else
			snprintf(p, sizeof(p), "%.*s", (int)(k > 1 ? k - 1 : k), path);
		it = iteration_of_dir(p);
	} else {
		snprintf(p, sizeof(p), "%s", path);
	}
	if (it < 0) { /* a name that does not say: ask the file */
		char file[PATH_CAP];
		hid_t f = open_ckpt(p, file, sizeof(file), err);

		if (f < 0)
			return -1;
		if (read_i64(f, "iteration", &it, file, err)) {
			H5Fclose(f);
			return -1;
		}
		H5Fclose(f);
	}
	if (strlen(p) >= n)
		return mt_err_set(err, MT_EXIT_IO, "checkpoint path too long: '%s'", p);
	memcpy(out, p, strlen(p) + 1);
	if (iteration)
		*iteration = it;
	return 0;
}

/* ---- load ------------------------------------------------------------------------------------ */

struct names {
	char **v;
	size_t n, cap;
};

static void names_free(struct names *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

static herr_t names_add(hid_t g, const char *name, const H5L_info_t *info, void *data)
{
	struct names *l = data;

	if (l->n == l->cap) {
		char **nv = realloc(l->v, (l->cap = l->cap ? 2 * l->cap : 64) * sizeof(*nv));
		if (!nv)
			return -1;
		l->v = nv;
	}
	if (!(l->v[l->n] = strdup(name)))
		return -1;
	l->n++;
	return 0;
}

/* The links of a group in creation order where the writer tracked it, else by name. */
static int list_links(hid_t g, struct names *l)
{
	hsize_t idx = 0;

	memset(l, 0, sizeof(*l));
	if (H5Literate(g, H5_INDEX_CRT_ORDER, H5_ITER_INC, &idx, names_add, l) >= 0)
		return 0;
	names_free(l);
	h5_clear();
	idx = 0;
	if (H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, &idx, names_add, l) >= 0)
		return 0;
	names_free(l);
	return -1;
}

/* Read the int64 array attribute name of d into v[nd]; 0 when absent, 1 when read. */
static int read_i64v(hid_t d, const char *name, int nd, int64_t *v)
{
	hid_t a = -1, sp = -1;
	int rc = -1;

	if (H5Aexists(d, name) <= 0) {
		h5_clear();
		return 0;
	}
	if ((a = H5Aopen(d, name, H5P_DEFAULT)) >= 0 && (sp = H5Aget_space(a)) >= 0 &&
	    H5Sget_simple_extent_npoints(sp) == nd && H5Aread(a, H5T_NATIVE_INT64, v) >= 0)
		rc = 1;
	h5_close(&sp);
	h5_close(&a);
	h5_clear();
	return rc;
}

static int load_tensor(hid_t g, const char *gpath, const struct mt_param *p, float *dst, const char *file, int legacy,
		       struct vcache *vc, struct mt_err *err)
{
	hid_t d = -1, sp = -1, ty = -1;
	hsize_t dims[H5S_MAX_RANK];
	int64_t have[H5S_MAX_RANK] = { 0 }, gshape[2] = { 0, 0 }, off[2] = { 0, 0 };
	char a[512], b[128], c[128];
	int nd, rc = -1, r;

	if (H5Lexists(g, p->name, H5P_DEFAULT) <= 0) {
		h5_clear();
		return mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s/%s' is missing", file, gpath, p->name);
	}
	if ((d = H5Dopen2(g, p->name, H5P_DEFAULT)) < 0 || (sp = H5Dget_space(d)) < 0 || (ty = H5Dget_type(d)) < 0 ||
	    (nd = H5Sget_simple_extent_ndims(sp)) < 0 || H5Sget_simple_extent_dims(sp, dims, NULL) < 0) {
		h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s/%s' is not a readable dataset", file, gpath, p->name);
		goto out;
	}
	if (H5Tget_class(ty) != H5T_FLOAT) {
		mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s/%s' is not floating point", file, gpath, p->name);
		goto out;
	}
	for (int i = 0; i < nd; i++)
		have[i] = (int64_t)dims[i];
	if (nd != p->ndim || have[0] != p->shape[0] || (nd == 2 && have[1] != p->shape[1])) {
		fmt_shape(a, sizeof(a), nd, have);
		fmt_shape(b, sizeof(b), p->ndim, p->shape);
		mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s/%s' has shape %s, the model expects %s", file,
			   gpath, p->name, a, b);
		goto out;
	}
	r = read_i64v(d, "global_shape", nd, gshape);
	if (r > 0 && read_i64v(d, "offset", nd, off) < 0)
		r = -1;
	if (r < 0) {
		mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s/%s' has a bad global_shape or offset attribute",
			   file, gpath, p->name);
		goto out;
	}
	if (r > 0 && (gshape[0] != have[0] || (nd == 2 && gshape[1] != have[1]) || off[0] || (nd == 2 && off[1]))) {
		fmt_shape(a, sizeof(a), nd, have);
		fmt_shape(b, sizeof(b), nd, gshape);
		fmt_shape(c, sizeof(c), nd, off);
		mt_err_set(err, MT_EXIT_DATA,
			   "checkpoint '%s': tensor '%s/%s' holds a %s slice at offset %s of a %s tensor (a sharded checkpoint: reshard it with mt-ckpt-reshard)",
			   file, gpath, p->name, a, c, b);
		goto out;
	}
	if (tensor_io(d, nd, dims, dst, 0, NULL)) {
		h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': cannot read tensor '%s/%s'", file, gpath, p->name);
		goto out;
	}
	snprintf(a, sizeof(a), "%s/%s", gpath, p->name);
	if (is_virtual(d)) {
		/* the parts hold the bytes and their checksums */
		if (verify_virtual(d, file, a, legacy, 0, 0, 0, 0, vc, NULL, err))
			goto out;
	} else {
		uint64_t want = 0;
		int has = read_xxh(d, &want);

		if (has < 0 || (!has && !legacy)) {
			mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s' has %s checksum attribute", file, a,
				   has < 0 ? "a garbled" : "lost its");
			goto out;
		}
		if (has && (H5Tget_size(ty) != 4 || XXH3_64bits(dst, (size_t)p->numel * sizeof(float)) != want)) {
			mt_err_set(err, MT_EXIT_DATA,
				   "checkpoint '%s': tensor '%s' does not match its checksum (stored xxh3 %016llx): the file is damaged",
				   file, a, (unsigned long long)want);
			goto out;
		}
	}
	{
		int64_t at = first_nonfinite(dst, p->numel);
		if (at >= 0) {
			nonfinite_err(err, file, a, dst, at);
			goto out;
		}
	}
	rc = 0;
out:
	h5_close(&ty);
	h5_close(&sp);
	h5_close(&d);
	return rc;
}

static int load_group(hid_t f, const char *gpath, const struct mt_params *t, const struct mt_param **index,
		      float *buf, unsigned flags, const char *file, int legacy, struct vcache *vc, struct mt_err *err)
{
	hid_t g;
	struct names l;
	int rc = 0;

	if (H5Lexists(f, gpath, H5P_DEFAULT) <= 0 || (g = H5Gopen2(f, gpath, H5P_DEFAULT)) < 0) {
		h5_clear();
		if (strncmp(gpath, "optimizer", 9) == 0)
			return mt_err_set(err, MT_EXIT_DATA,
					  "checkpoint '%s' holds no optimizer state (group '%s'): load the weights only (--no-load-optim)",
					  file, gpath);
		return mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': group '%s' is missing", file, gpath);
	}
	for (int i = 0; i < t->n && !rc; i++)
		rc = load_tensor(g, gpath, &t->p[i], buf + t->p[i].offset, file, legacy, vc, err);
	if (!rc && !(flags & MT_CKPT_ALLOW_EXTRA)) {
		if (list_links(g, &l))
			rc = h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': cannot list group '%s'", file, gpath);
		for (size_t i = 0; !rc && i < l.n; i++)
			if (!table_find(index, t->n, l.v[i]))
				rc = mt_err_set(err, MT_EXIT_DATA,
						"checkpoint '%s' holds tensor '%s/%s', which the model does not have (another architecture? compare the checkpoint's config)",
						file, gpath, l.v[i]);
		names_free(&l);
	}
	H5Gclose(g);
	return rc;
}

int mt_ckpt_load(const char *iterdir, const struct mt_params *t, float *weights, float *exp_avg,
		 float *exp_avg_sq, unsigned flags, struct mt_err *err)
{
	char file[PATH_CAP];
	const struct mt_param **index;
	struct ckinfo ci;
	struct vcache vc = { 0 };
	hid_t f;
	int rc;

	if (!weights)
		return mt_err_set(err, MT_EXIT_USAGE, "internal: mt_ckpt_load without a weight buffer");
	if (!(index = table_index(t, err)))
		return -1;
	if ((f = open_ckpt_info(iterdir, file, sizeof(file), &ci, err)) < 0) {
		free(index);
		return -1;
	}
	rc = load_group(f, "model", t, index, weights, flags, file, ci.legacy, &vc, err);
	if (!rc && exp_avg)
		rc = load_group(f, "optimizer/exp_avg", t, index, exp_avg, flags, file, ci.legacy, &vc, err);
	if (!rc && exp_avg_sq)
		rc = load_group(f, "optimizer/exp_avg_sq", t, index, exp_avg_sq, flags, file, ci.legacy, &vc, err);
	vcache_free(&vc);
	H5Fclose(f);
	free(index);
	return rc;
}

/* ---- inspect --------------------------------------------------------------------------------- */

static const char *dtype_name(hid_t ty)
{
	size_t sz = H5Tget_size(ty);

	switch (H5Tget_class(ty)) {
	case H5T_FLOAT:
		return sz == 2 ? "float16" : sz == 4 ? "float32" : sz == 8 ? "float64" : "float";
	case H5T_INTEGER: {
		int sign = H5Tget_sign(ty) == H5T_SGN_2;
		return sz == 1 ? (sign ? "int8" : "uint8") : sz == 2 ? (sign ? "int16" : "uint16")
		       : sz == 4 ? (sign ? "int32" : "uint32") : sz == 8 ? (sign ? "int64" : "uint64") : "int";
	}
	case H5T_STRING:
		return "string";
	default:
		return "other";
	}
}

/* One dataset's description: dtype, shape, and global_shape/offset where it has them. */
struct dsinfo {
	const char *dtype;
	int nd, has_slice;
	int64_t shape[H5S_MAX_RANK], gshape[H5S_MAX_RANK], off[H5S_MAX_RANK];
};

static int describe(hid_t d, struct dsinfo *x)
{
	hid_t sp = H5Dget_space(d), ty = H5Dget_type(d);
	hsize_t dims[H5S_MAX_RANK];
	int rc = -1;

	memset(x, 0, sizeof(*x));
	if (sp >= 0 && ty >= 0 && (x->nd = H5Sget_simple_extent_ndims(sp)) >= 0 &&
	    H5Sget_simple_extent_dims(sp, dims, NULL) >= 0) {
		x->dtype = dtype_name(ty);
		for (int i = 0; i < x->nd; i++)
			x->shape[i] = (int64_t)dims[i];
		x->has_slice = read_i64v(d, "global_shape", x->nd, x->gshape) > 0 &&
			       read_i64v(d, "offset", x->nd, x->off) > 0;
		rc = 0;
	}
	h5_close(&ty);
	h5_close(&sp);
	return rc;
}

static json_t *json_i64v(int n, const int64_t *v)
{
	json_t *a = json_array();

	for (int i = 0; i < n; i++)
		json_array_append_new(a, json_integer(v[i]));
	return a;
}

struct inspect {
	FILE *out;
	int json;
	json_t *tensors;
	const char *file;
	struct mt_err *err;
};

/* Every dataset under group g (path prefix), depth first, in creation order. */
static int inspect_group(hid_t g, const char *prefix, struct inspect *in)
{
	struct names l;
	int rc = 0;

	if (list_links(g, &l))
		return h5_fail(in->err, MT_EXIT_DATA, "checkpoint '%s': cannot list group '/%s'", in->file, prefix);
	for (size_t i = 0; i < l.n && !rc; i++) {
		char path[PATH_CAP];
		hid_t o = H5Oopen(g, l.v[i], H5P_DEFAULT);
		struct dsinfo x;

		snprintf(path, sizeof(path), "%s%s%s", prefix, *prefix ? "/" : "", l.v[i]);
		if (o < 0) {
			rc = h5_fail(in->err, MT_EXIT_DATA, "checkpoint '%s': cannot open '/%s'", in->file, path);
		} else if (H5Iget_type(o) == H5I_GROUP) {
			rc = inspect_group(o, path, in);
		} else if (H5Iget_type(o) == H5I_DATASET) {
			if (describe(o, &x)) {
				rc = h5_fail(in->err, MT_EXIT_DATA, "checkpoint '%s': cannot describe '/%s'", in->file, path);
			} else if (in->json) {
				json_t *t = json_object();
				json_object_set_new(t, "name", json_string(path));
				json_object_set_new(t, "dtype", json_string(x.dtype));
				json_object_set_new(t, "shape", json_i64v(x.nd, x.shape));
				if (x.has_slice) {
					json_object_set_new(t, "global_shape", json_i64v(x.nd, x.gshape));
					json_object_set_new(t, "offset", json_i64v(x.nd, x.off));
				}
				json_array_append_new(in->tensors, t);
			} else {
				char a[256], b[256], c[256];
				fmt_shape(a, sizeof(a), x.nd, x.shape);
				fmt_shape(b, sizeof(b), x.nd, x.gshape);
				fmt_shape(c, sizeof(c), x.nd, x.off);
				if (x.has_slice)
					fprintf(in->out, "tensor\t%s\t%s\t%s\tglobal %s\toffset %s\n", path, x.dtype, a, b, c);
				else
					fprintf(in->out, "tensor\t%s\t%s\t%s\n", path, x.dtype, a);
			}
		}
		h5_close(&o);
	}
	names_free(&l);
	return rc;
}

/* A stored text on one line, exactly as stored otherwise: each run of white space that
 * holds a line break or a tab becomes one space (JSON strings hold neither raw).
 * malloc'ed. */
static char *one_line(const char *s)
{
	char *r = malloc(strlen(s) + 1), *o = r;

	if (!r)
		return NULL;
	while (*s) {
		if (*s == '\n' || *s == '\r' || *s == '\t') {
			while (*s == '\n' || *s == '\r' || *s == '\t' || *s == ' ')
				s++;
			*o++ = ' ';
		} else {
			*o++ = *s++;
		}
	}
	*o = '\0';
	return r;
}

/* The JSON value of a stored JSON text, or the text as a string when it does not parse. */
static json_t *json_text(const char *s)
{
	json_t *v = json_loads(s, JSON_DECODE_ANY, NULL);

	return v ? v : json_string(s);
}

int mt_ckpt_inspect(const char *iterdir, int json, FILE *out, struct mt_err *err)
{
	char file[PATH_CAP];
	struct mt_ckpt_loaded st;
	struct inspect in = { out, json, NULL, file, err };
	json_t *o = NULL;
	hid_t f;
	int rc;

	if ((f = open_ckpt(iterdir, file, sizeof(file), err)) < 0)
		return -1;
	if (read_state_h5(f, file, &st, err)) {
		H5Fclose(f);
		return -1;
	}
	if (json) {
		o = json_object();
		in.tensors = json_array();
		json_object_set_new(o, "file", json_string(file));
		json_object_set_new(o, "format", json_string(MT_CKPT_FORMAT));
		json_object_set_new(o, "format_version", json_integer(st.format_version));
		json_object_set_new(o, "iteration", json_integer(st.iteration));
		json_object_set_new(o, "consumed_train_samples", json_integer(st.consumed_train_samples));
		json_object_set_new(o, "consumed_valid_samples", json_integer(st.consumed_valid_samples));
		json_object_set_new(o, "optimizer_step", st.has_optimizer ? json_integer(st.optimizer_step) : json_null());
		json_object_set_new(o, "rng_bytes", json_integer((json_int_t)st.rng_size));
		json_object_set_new(o, "config", json_text(st.config_json));
		json_object_set_new(o, "train_args", json_text(st.train_args_json));
		json_object_set_new(o, "scheduler", json_text(st.scheduler_json));
	} else {
		char *c = one_line(st.config_json), *a = one_line(st.train_args_json), *s = one_line(st.scheduler_json);

		fprintf(out, "file\t%s\nformat\t%s\nformat_version\t%lld\niteration\t%lld\n", file, MT_CKPT_FORMAT,
			(long long)st.format_version, (long long)st.iteration);
		fprintf(out, "consumed_train_samples\t%lld\nconsumed_valid_samples\t%lld\n",
			(long long)st.consumed_train_samples, (long long)st.consumed_valid_samples);
		if (st.has_optimizer)
			fprintf(out, "optimizer_step\t%lld\n", (long long)st.optimizer_step);
		else
			fprintf(out, "optimizer_step\tnone\n");
		fprintf(out, "rng_bytes\t%zu\nconfig\t%s\ntrain_args\t%s\nscheduler\t%s\n", st.rng_size, c ? c : "",
			a ? a : "", s ? s : "");
		free(c);
		free(a);
		free(s);
	}
	rc = inspect_group(f, "", &in);
	H5Fclose(f);
	mt_ckpt_loaded_free(&st);
	if (json) {
		if (!rc) {
			json_object_set_new(o, "tensors", in.tensors);
			in.tensors = NULL;
			if (json_dumpf(o, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17)) < 0 ||
			    fputc('\n', out) == EOF)
				rc = mt_err_errno(err, MT_EXIT_IO, "cannot write the description of '%s'", file);
		}
		json_decref(in.tensors);
		json_decref(o);
	}
	if (!rc && ferror(out))
		rc = mt_err_errno(err, MT_EXIT_IO, "cannot write the description of '%s'", file);
	return rc;
}

#define H5_GROUPS 3
static const char *const group_path[H5_GROUPS];

/* ---- falling back ------------------------------------------------------------------------------ */

void mt_ckpt_warn(const char *fmt, ...)
{
	enum mt_log_level old = mt_log_get_level();
	char msg[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (old < MT_LOG_WARN)
		mt_log_set_level(MT_LOG_WARN);
	mt_warn("%s", msg);
	mt_log_set_level(old);
}

static int cmp_i64_desc(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x < y) - (x > y);
}

int mt_ckpt_candidates(const char *path, int64_t **iters, size_t *n, char *note, size_t notecap, struct mt_err *err)
{
	char p[PATH_CAP];
	struct stat sb;
	int64_t latest = -1, *all = NULL;
	size_t na = 0, k = 0;
	struct mt_err e2 = { 0 };

	*iters = NULL;
	*n = 0;
	if (note && notecap)
		note[0] = '\0';
	if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode) || iteration_of_dir(path) >= 0)
		return 0;
	if ((size_t)snprintf(p, sizeof(p), "%s/model.h5", path) >= sizeof(p) || lstat(p, &sb) == 0)
		return 0; /* a directory holding the file itself */
	if (mt_ckpt_latest(path, &latest, &e2)) {
		if (note)
			snprintf(note, notecap, "%s", e2.msg);
		latest = -2; /* garbled: every iteration is a candidate */
	}
	if (mt_ckpt_list(path, &all, &na, err))
		return -1;
	if (latest == -1 && na == 0) {
		free(all);
		return 0; /* nothing at all: the caller's error says so */
	}
	if (latest == -1 && note)
		snprintf(note, notecap, "no '%s' marker in '%s'", MT_CKPT_LATEST, path);
	*iters = malloc((na + 1) * sizeof(**iters));
	if (!*iters) {
		free(all);
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	if (latest >= 0)
		(*iters)[k++] = latest;
	qsort(all, na, sizeof(*all), cmp_i64_desc);
	for (size_t i = 0; i < na; i++)
		if (latest < 0 || all[i] < latest)
			(*iters)[k++] = all[i];
	free(all);
	*n = k;
	return 0;
}

/* ---- verify ---------------------------------------------------------------------------------- */

struct verify {
	const char *file;
	int legacy;
	int64_t tensors, bytes;
	struct vcache vc;
	struct mt_err *err;
};

static int verify_group(hid_t g, const char *prefix, struct verify *v)
{
	struct names l;
	int rc = 0;

	if (list_links(g, &l))
		return h5_fail(v->err, MT_EXIT_DATA, "checkpoint '%s': cannot list group '/%s'", v->file, prefix);
	for (size_t i = 0; i < l.n && !rc; i++) {
		char path[PATH_CAP];
		hid_t o = H5Oopen(g, l.v[i], H5P_DEFAULT);

		snprintf(path, sizeof(path), "%s%s%s", prefix, *prefix ? "/" : "", l.v[i]);
		if (o < 0)
			rc = h5_fail(v->err, MT_EXIT_DATA, "checkpoint '%s': cannot open '/%s'", v->file, path);
		else if (H5Iget_type(o) == H5I_GROUP)
			rc = verify_group(o, path, v);
		else if (H5Iget_type(o) == H5I_DATASET && strcmp(path, "rng")) {
			v->tensors++;
			rc = is_virtual(o) ? verify_virtual(o, v->file, path, v->legacy, 0, 0, 0, 0, &v->vc, &v->bytes, v->err)
					   : verify_plain(o, v->file, path, v->legacy, &v->bytes, v->err);
		}
		h5_close(&o);
	}
	names_free(&l);
	return rc;
}

/* The config c against file f: bounds first (num-layers no more than the model tensors,
 * the parameter count within the floats stored), then the table it builds, row by row,
 * against the shapes of the first ngroups groups (model, then the moments). */
static int config_fits(hid_t f, const char *file, const struct mt_config *c, const struct ckinfo *ci, int ngroups,
		       struct mt_err *err)
{
	struct mt_params t;
	int rc = 0;
	double need;

	/* every layer stores at least one tensor of its own */
	if (c->num_layers > ci->model_tensors)
		return mt_err_set(err, MT_EXIT_DATA,
				  "checkpoint '%s': config says num-layers %d, but the file holds %lld model tensors in all (a damaged config?)",
				  file, c->num_layers, (long long)ci->model_tensors);
	/* an estimate that counts the output layer and the position table whether or not the
	 * model has them */
	need = mt_config_params_estimate(c);
	if (!(need <= 2 * ci->model_floats + (1 << 20)))
		return mt_err_set(err, MT_EXIT_DATA,
				  "checkpoint '%s': config (num-layers %d, hidden-size %d, ffn-hidden-size %d, padded vocabulary %lld) describes about %.3g parameters, the file stores %.0f (a damaged config?)",
				  file, c->num_layers, c->hidden_size, c->ffn_hidden_size, (long long)c->padded_vocab_size, need,
				  ci->model_floats);
	if (mt_params_build(&t, c, err)) {
		err->code = MT_EXIT_DATA;
		return mt_err_prefix(err, "checkpoint '%s': attribute 'config'", file);
	}
	if ((double)t.total > ci->model_floats)
		rc = mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': its config makes a model of %lld parameters, the file stores %.0f",
				file, (long long)t.total, ci->model_floats);
	for (int k = 0; k < ngroups && !rc; k++) {
		hid_t g = H5Lexists(f, group_path[k], H5P_DEFAULT) > 0 ? H5Gopen2(f, group_path[k], H5P_DEFAULT) : -1;

		if (g < 0) {
			rc = h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': group '%s' is missing", file, group_path[k]);
			break;
		}
		for (int i = 0; i < t.n && !rc; i++) {
			const struct mt_param *p = &t.p[i];
			hid_t d = -1, sp = -1;
			hsize_t dims[H5S_MAX_RANK];
			int nd = -1;

			if (H5Lexists(g, p->name, H5P_DEFAULT) <= 0 || (d = H5Dopen2(g, p->name, H5P_DEFAULT)) < 0 ||
			    (sp = H5Dget_space(d)) < 0 || (nd = H5Sget_simple_extent_ndims(sp)) < 0 ||
			    H5Sget_simple_extent_dims(sp, dims, NULL) < 0)
				rc = h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s/%s' of its config is missing", file,
					     group_path[k], p->name);
			else if (nd != p->ndim || (int64_t)dims[0] != p->shape[0] || (nd == 2 && (int64_t)dims[1] != p->shape[1])) {
				char a[128], b[128];
				int64_t have[2] = { (int64_t)dims[0], nd == 2 ? (int64_t)dims[1] : 0 };
				fmt_shape(a, sizeof(a), nd, have);
				fmt_shape(b, sizeof(b), p->ndim, p->shape);
				rc = mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s/%s' has shape %s, its config says %s",
						file, group_path[k], p->name, a, b);
			}
			h5_close(&sp);
			h5_close(&d);
		}
		h5_close(&g);
	}
	h5_clear();
	mt_params_free(&t);
	return rc;
}

static int verify_model(hid_t f, const char *file, const struct mt_ckpt_loaded *st, const struct ckinfo *ci,
			struct mt_err *err)
{
	struct mt_config c;

	if (mt_config_from_json(&c, st->config_json, err)) {
		err->code = MT_EXIT_DATA; /* a stored config that does not validate is bad data */
		return mt_err_prefix(err, "checkpoint '%s': attribute 'config'", file);
	}
	return config_fits(f, file, &c, ci, st->has_optimizer ? H5_GROUPS : 1, err);
}

int mt_ckpt_verify(const char *path, FILE *out, struct mt_err *err)
{
	char file[PATH_CAP];
	struct mt_ckpt_loaded st;
	struct ckinfo ci;
	struct verify v;
	hid_t f;
	int rc;

	if ((f = open_ckpt_info(path, file, sizeof(file), &ci, err)) < 0)
		return -1;
	if (read_state_h5(f, file, &st, err)) {
		H5Fclose(f);
		return -1;
	}
	memset(&v, 0, sizeof(v));
	v.file = file;
	v.legacy = ci.legacy;
	v.err = err;
	rc = verify_group(f, "", &v);
	if (!rc) /* the config against the file, and every tensor's shape against the config */
		rc = verify_model(f, file, &st, &ci, err);
	vcache_free(&v.vc);
	H5Fclose(f);
	if (!rc) {
		fprintf(out, "ok %s: iteration %lld, %lld tensors, %lld bytes %s\n", file, (long long)st.iteration,
			(long long)v.tensors, (long long)v.bytes,
			ci.legacy ? "read (no checksums stored: structure, shapes and finite values checked)"
				  : "verified against their checksums");
		if (ferror(out))
			rc = mt_err_errno(err, MT_EXIT_IO, "cannot write the result for '%s'", file);
	}
	mt_ckpt_loaded_free(&st);
	return rc;
}

int mt_ckpt_check_config(const char *iterdir, const struct mt_config *c, double *stored_floats, struct mt_err *err)
{
	char file[PATH_CAP];
	struct ckinfo ci;
	hid_t f = open_ckpt_info(iterdir, file, sizeof(file), &ci, err);
	int rc;

	if (f < 0)
		return -1;
	if (stored_floats)
		*stored_floats = ci.model_floats;
	rc = config_fits(f, file, c, &ci, 1, err);
	H5Fclose(f);
	return rc;
}

int mt_ckpt_list(const char *dir, int64_t **iters, size_t *n, struct mt_err *err)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int64_t *a = NULL;
	size_t cnt = 0, cap = 0;

	*iters = NULL;
	*n = 0;
	if (!d)
		return mt_err_errno(err, MT_EXIT_IO, "cannot open checkpoint directory '%s'", dir);
	while ((de = readdir(d))) {
		char path[PATH_CAP];
		const char *rest;
		int64_t it;
		if (!(rest = parse_iter_name(de->d_name, &it)) || *rest)
			continue;
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= sizeof(path) || !is_dir(path))
			continue;
		if (cnt == cap) {
			int64_t *b = realloc(a, (cap = cap ? cap * 2 : 16) * sizeof(*a));
			if (!b) {
				free(a);
				closedir(d);
				return mt_err_set(err, MT_EXIT_IO, "out of memory");
			}
			a = b;
		}
		a[cnt++] = it;
	}
	closedir(d);
	qsort(a, cnt, sizeof(*a), cmp_i64);
	*iters = a;
	*n = cnt;
	return 0;
}

/* ---- sharded checkpoints: every rank writes its part, one index presents the tensors --------- */

#define PART_FORMAT "mt-checkpoint-part"
static const char *const group_path[H5_GROUPS] = { "model", "optimizer/exp_avg", "optimizer/exp_avg_sq" };

int mt_ckpt_part_name(char *out, size_t n, int tp_rank, int pp_rank, int dp_rank, struct mt_err *err)
{
	int len = snprintf(out, n, "model-tp%02d-pp%03d-dp%04d.h5", tp_rank, pp_rank, dp_rank);

	if (len < 0 || (size_t)len >= n)
		return mt_err_set(err, MT_EXIT_IO, "checkpoint part name too long");
	return 0;
}

int mt_ckpt_tmpdir(char *out, size_t n, const char *dir, int64_t iteration, long tag, struct mt_err *err)
{
	char final[PATH_CAP];

	if (mt_ckpt_iter_dir(final, sizeof(final), dir, iteration, err) || mkdir_p(dir, err))
		return -1;
	if ((size_t)snprintf(out, n, "%s.tmp.%ld", final, tag) >= n)
		return mt_err_set(err, MT_EXIT_IO, "checkpoint path too long: '%s'", dir);
	if (mt_rm_tree(out))
		return mt_err_errno(err, MT_EXIT_IO, "cannot remove the leftover '%s'", out);
	if (mkdir(out, 0777) != 0)
		return mt_err_errno(err, MT_EXIT_IO, "cannot create directory '%s'", out);
	return 0;
}

void mt_ckpt_abandon(const char *tmpdir)
{
	mt_rm_tree(tmpdir);
}

/* Does part pt write row i of its table? Its range, a tied copy never (the first stage
 * writes the embedding), a replicated parameter only on tensor-parallel rank 0. */
static int part_writes(const struct mt_ckpt_part *pt, int i)
{
	const struct mt_param *p = &pt->t->p[i];

	return i >= pt->p0 && i < pt->p1 && !p->tied_copy && (p->split != MT_SPLIT_NONE || pt->t->tp_rank == 0);
}

static int write_piece(hid_t grp, const struct mt_param *p, int tp_rank, const float *buf, struct wbehind *wb)
{
	hsize_t dims[2] = { (hsize_t)p->shape[0], (hsize_t)p->shape[1] };
	int64_t pieces[2][4], off[2];
	int k = mt_params_pieces(p, tp_rank, pieces), rc = -1;
	hid_t sp = H5Screate_simple(p->ndim, dims, NULL), d = -1;

	off[0] = pieces[0][0];
	off[1] = pieces[0][1];
	if (sp >= 0 && (d = H5Dcreate2(grp, p->name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) >= 0 &&
	    !attr_i64v(d, "global_shape", p->ndim, p->gshape) && !attr_i64v(d, "offset", p->ndim, off) &&
	    !attr_i64v(d, "pieces", 4 * k, &pieces[0][0]) &&
	    !attr_u64(d, XXH_ATTR, XXH3_64bits(buf, (size_t)p->numel * sizeof(float))) &&
	    !region_io(d, p->ndim, 0, 0, dims[0], p->ndim == 2 ? dims[1] : 1, (float *)buf, 1, wb))
		rc = 0;
	h5_close(&d);
	h5_close(&sp);
	return rc;
}

int mt_ckpt_part_check(const struct mt_ckpt_part *pt, const char *what, struct mt_err *err)
{
	const float *bufs[3] = { pt->w, pt->m, pt->v };
	static const char *const names[3] = { "weight", "exp_avg", "exp_avg_sq" };

	for (int g = 0; g < 3; g++) {
		if (!bufs[g])
			continue;
		for (int i = pt->p0; i < pt->p1; i++) {
			const struct mt_param *p = &pt->t->p[i];
			const float *x = bufs[g] + (p->offset - pt->base);
			for (int64_t j = 0; j < p->numel; j++)
				if (!isfinite(x[j]))
					return mt_err_set(err, MT_EXIT_DATA,
							  "refusing to save checkpoint '%s': %s '%s' holds %s at element %lld of this rank's shard (the run has diverged; earlier checkpoints are kept)",
							  what, names[g], p->name, isnan(x[j]) ? "nan" : "inf", (long long)j);
		}
	}
	return 0;
}

int mt_ckpt_part_write(const char *tmpdir, const struct mt_ckpt_part *pt, int64_t iteration, struct mt_err *err)
{
	char name[128], file[PATH_CAP], host[256] = "";
	hid_t fcpl = H5Pcreate(H5P_FILE_CREATE), fapl = h5_fapl_new(), f = -1, g = -1;
	const float *bufs[3] = { pt->w, pt->m, pt->v };
	struct wbehind wb;
	int rc = -1;

	if (!pt->w || !pt->m != !pt->v) {
		h5_close(&fcpl);
		h5_close(&fapl);
		return mt_err_set(err, MT_EXIT_USAGE, "internal: a checkpoint part without weights, or with one moment");
	}
	if (mt_ckpt_part_name(name, sizeof(name), pt->tp_rank, pt->pp_rank, pt->dp_rank, err) ||
	    (size_t)snprintf(file, sizeof(file), "%s/%s", tmpdir, name) >= sizeof(file)) {
		h5_close(&fcpl);
		h5_close(&fapl);
		return mt_err_set(err, MT_EXIT_IO, "checkpoint path too long: '%s'", tmpdir);
	}
	h5_quiet();
	gethostname(host, sizeof(host) - 1);
	if (fcpl >= 0)
		H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
	mt_atomic_step("checkpoint");
	f = fcpl < 0 || fapl < 0 ? -1 : H5Fcreate(file, H5F_ACC_EXCL, fcpl, fapl);
	h5_close(&fcpl);
	h5_close(&fapl);
	if (f < 0)
		return h5_fail(err, MT_EXIT_IO, "cannot create checkpoint part '%s'", file);
	if (attr_str(f, "format", PART_FORMAT) || attr_i64(f, "format_version", MT_CKPT_FORMAT_VERSION) ||
	    attr_i64(f, "iteration", iteration) || attr_i64(f, "rank", pt->rank) || attr_i64(f, "tp_rank", pt->tp_rank) ||
	    attr_i64(f, "pp_rank", pt->pp_rank) || attr_i64(f, "dp_rank", pt->dp_rank) || attr_i64(f, "world", pt->world) ||
	    attr_i64(f, "tp", pt->tp) || attr_i64(f, "pp", pt->pp) || attr_i64(f, "dp", pt->dp) ||
	    attr_str(f, "host", host) || attr_i64(f, "pid", (int64_t)getpid())) {
		h5_fail(err, MT_EXIT_IO, "cannot write checkpoint part '%s': attributes", file);
		goto out;
	}
	wb_open(&wb, f);
	if ((g = group_create(f, "optimizer")) < 0) {
		h5_fail(err, MT_EXIT_IO, "cannot write checkpoint part '%s': group 'optimizer'", file);
		goto out;
	}
	h5_close(&g);
	for (int k = 0; k < H5_GROUPS; k++) {
		if (!bufs[k])
			continue;
		if ((g = group_create(f, group_path[k])) < 0) {
			h5_fail(err, MT_EXIT_IO, "cannot write checkpoint part '%s': group '%s'", file, group_path[k]);
			goto out;
		}
		for (int i = 0; i < pt->t->n; i++) {
			const struct mt_param *p = &pt->t->p[i];
			if (!part_writes(pt, i))
				continue;
			mt_atomic_step("checkpoint");
			if (write_piece(g, p, pt->t->tp_rank, bufs[k] + (p->offset - pt->base), &wb)) {
				h5_fail(err, MT_EXIT_IO, "cannot write checkpoint part '%s': tensor '%s/%s'", file, group_path[k],
					p->name);
				goto out;
			}
		}
		h5_close(&g);
	}
	rc = 0;
out:
	h5_close(&g);
	if (H5Fclose(f) < 0 && rc == 0)
		rc = h5_fail(err, MT_EXIT_IO, "cannot write checkpoint part '%s'", file);
	mt_atomic_step("checkpoint");
	if (rc == 0 && mt_fsync_path(file, 0))
		rc = mt_err_errno(err, MT_EXIT_IO, "cannot sync checkpoint part '%s'", file);
	return rc;
}

/* One rectangle of a logical tensor held by a part: the part, its source rows, where. */
struct vmap {
	int shard;
	int64_t src_row;
	int64_t r[4]; /* row0, col0, rows, cols */
};

struct vlist {
	struct vmap *v;
	int n, cap;
};

static int vlist_add(struct vlist *l, const struct vmap *m)
{
	if (l->n == l->cap) {
		struct vmap *nv = realloc(l->v, (size_t)(l->cap = l->cap ? 2 * l->cap : 4) * sizeof(*nv));
		if (!nv)
			return -1;
		l->v = nv;
	}
	l->v[l->n++] = *m;
	return 0;
}

/* Read one part's datasets of one group into the per-tensor lists. */
static int index_scan(hid_t pf, int shard, int grp, const struct mt_params *lt, const struct mt_param **index,
		      struct vlist *lists, const char *file, struct mt_err *err)
{
	struct names l;
	hid_t g;
	int rc = 0;

	if (H5Lexists(pf, group_path[grp], H5P_DEFAULT) <= 0) {
		h5_clear();
		return 0;
	}
	if ((g = H5Gopen2(pf, group_path[grp], H5P_DEFAULT)) < 0)
		return h5_fail(err, MT_EXIT_DATA, "checkpoint part '%s': group '%s'", file, group_path[grp]);
	if (list_links(g, &l)) {
		h5_close(&g);
		return h5_fail(err, MT_EXIT_DATA, "checkpoint part '%s': cannot list group '%s'", file, group_path[grp]);
	}
	for (size_t i = 0; i < l.n && !rc; i++) {
		const struct mt_param *p = table_find(index, lt->n, l.v[i]);
		hid_t d = -1;
		int64_t pc[8] = { 0 }, src = 0;
		int k;

		if (!p) {
			rc = mt_err_set(err, MT_EXIT_DATA, "checkpoint part '%s' holds tensor '%s/%s', which the model does not have",
					file, group_path[grp], l.v[i]);
			break;
		}
		if ((d = H5Dopen2(g, l.v[i], H5P_DEFAULT)) < 0) {
			rc = h5_fail(err, MT_EXIT_DATA, "checkpoint part '%s': tensor '%s/%s'", file, group_path[grp], l.v[i]);
			break;
		}
		k = read_i64v(d, "pieces", 8, pc) > 0 ? 2 : read_i64v(d, "pieces", 4, pc) > 0 ? 1 : 0;
		h5_close(&d);
		if (!k) {
			rc = mt_err_set(err, MT_EXIT_DATA, "checkpoint part '%s': tensor '%s/%s' has no pieces attribute", file,
					group_path[grp], l.v[i]);
			break;
		}
		for (int j = 0; j < k && !rc; j++) {
			struct vmap m = { shard, src, { pc[4 * j], pc[4 * j + 1], pc[4 * j + 2], pc[4 * j + 3] } };
			if (m.r[0] < 0 || m.r[1] < 0 || m.r[2] <= 0 || m.r[3] <= 0 || m.r[0] + m.r[2] > p->shape[0] ||
			    m.r[1] + m.r[3] > p->shape[1])
				rc = mt_err_set(err, MT_EXIT_DATA,
						"checkpoint part '%s': tensor '%s/%s' has a piece outside the model's shape", file,
						group_path[grp], l.v[i]);
			else if (vlist_add(&lists[grp * lt->n + (p - lt->p)], &m))
				rc = mt_err_set(err, MT_EXIT_IO, "out of memory");
			src += m.r[2];
		}
	}
	names_free(&l);
	h5_close(&g);
	return rc;
}

/* The pieces of one logical tensor tile it exactly: inside, no two overlap, and their
 * areas sum to its size. */
static int tiles(const struct vlist *l, const struct mt_param *p)
{
	int64_t area = 0;

	for (int i = 0; i < l->n; i++) {
		const int64_t *a = l->v[i].r;
		area += a[2] * a[3];
		for (int j = 0; j < i; j++) {
			const int64_t *b = l->v[j].r;
			if (a[0] < b[0] + b[2] && b[0] < a[0] + a[2] && a[1] < b[1] + b[3] && b[1] < a[1] + a[3])
				return 0;
		}
	}
	return area == p->numel;
}

static int write_virtual(hid_t grp, const struct mt_param *p, const struct vlist *l, char *const *shards,
			 const char *gpath, const char *const *src_of)
{
	hsize_t dims[2] = { (hsize_t)p->shape[0], (hsize_t)p->shape[1] };
	int64_t zero[2] = { 0, 0 };
	float nan = NAN;
	hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), vs = -1, d = -1;
	int rc = -1;
	char src[PATH_CAP];

	(void)src_of;
	if (dcpl < 0 || H5Pset_fill_value(dcpl, H5T_NATIVE_FLOAT, &nan) < 0 ||
	    (vs = H5Screate_simple(p->ndim, dims, NULL)) < 0)
		goto out;
	snprintf(src, sizeof(src), "/%s/%s", gpath, p->name);
	for (int i = 0; i < l->n; i++) {
		const struct vmap *m = &l->v[i];
		hsize_t vstart[2] = { (hsize_t)m->r[0], (hsize_t)m->r[1] }, cnt[2] = { (hsize_t)m->r[2], (hsize_t)m->r[3] };
		hsize_t sstart[2] = { (hsize_t)m->src_row, 0 }, sdims[2] = { 0, cnt[1] };
		hid_t ss;
		int bad;

		/* the part's dataset: its shard's rows, the pieces' rows stacked */
		sdims[0] = 0;
		for (int j = 0; j < l->n; j++)
			if (l->v[j].shard == m->shard)
				sdims[0] += (hsize_t)l->v[j].r[2];
		if ((ss = H5Screate_simple(p->ndim, sdims, NULL)) < 0)
			goto out;
		bad = H5Sselect_hyperslab(vs, H5S_SELECT_SET, vstart, NULL, cnt, NULL) < 0 ||
		      H5Sselect_hyperslab(ss, H5S_SELECT_SET, sstart, NULL, cnt, NULL) < 0 ||
		      H5Pset_virtual(dcpl, vs, shards[m->shard], src, ss) < 0;
		H5Sclose(ss);
		if (bad)
			goto out;
	}
	H5Sselect_all(vs);
	if ((d = H5Dcreate2(grp, p->name, H5T_IEEE_F32LE, vs, H5P_DEFAULT, dcpl, H5P_DEFAULT)) >= 0 &&
	    !attr_i64v(d, "global_shape", p->ndim, p->shape) && !attr_i64v(d, "offset", p->ndim, zero))
		rc = 0;
out:
	h5_close(&d);
	h5_close(&vs);
	h5_close(&dcpl);
	return rc;
}

int mt_ckpt_index_write(const char *tmpdir, const struct mt_params *lt, const struct mt_ckpt_state *s,
			char *const *shards, int nshards, struct mt_err *err)
{
	char file[PATH_CAP], pfile[PATH_CAP];
	const struct mt_param **index;
	struct vlist *lists;
	int64_t *bytes;
	int rc = -1, have_opt = 0;
	hid_t fcpl = -1, fapl = -1, f = -1, g = -1, sp = -1, a = -1, ty = -1;

	if (!s || !s->config_json || nshards < 1)
		return mt_err_set(err, MT_EXIT_USAGE, "internal: a checkpoint index without state or parts");
	if (!(index = table_index(lt, err)))
		return -1;
	lists = calloc((size_t)H5_GROUPS * (size_t)lt->n, sizeof(*lists));
	bytes = calloc((size_t)nshards, sizeof(*bytes));
	if (!lists || !bytes) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto done;
	}
	h5_quiet();
	/* what every part holds, from the parts themselves (durable by now) */
	for (int i = 0; i < nshards; i++) {
		struct stat st;
		hid_t pf, pa = -1;

		if ((size_t)snprintf(pfile, sizeof(pfile), "%s/%s", tmpdir, shards[i]) >= sizeof(pfile) || stat(pfile, &st) != 0) {
			mt_err_errno(err, MT_EXIT_IO, "cannot index checkpoint part '%s'", pfile);
			goto done;
		}
		bytes[i] = (int64_t)st.st_size;
		if ((fapl = h5_fapl()) < 0 || (pf = H5Fopen(pfile, H5F_ACC_RDONLY, fapl)) < 0) {
			h5_close(&fapl);
			h5_fail(err, MT_EXIT_DATA, "cannot read checkpoint part '%s'", pfile);
			goto done;
		}
		h5_close(&fapl);
		(void)pa;
		for (int k = 0; k < H5_GROUPS; k++)
			if (index_scan(pf, i, k, lt, index, lists, pfile, err)) {
				H5Fclose(pf);
				goto done;
			}
		H5Fclose(pf);
	}
	for (int k = 1; k < H5_GROUPS; k++)
		for (int i = 0; i < lt->n; i++)
			have_opt |= lists[k * lt->n + i].n > 0;
	for (int k = 0; k < (have_opt ? H5_GROUPS : 1); k++)
		for (int i = 0; i < lt->n; i++)
			if (!tiles(&lists[k * lt->n + i], &lt->p[i])) {
				mt_err_set(err, MT_EXIT_DATA,
					   "checkpoint '%s': the parts do not hold tensor '%s/%s' exactly once (a rank's part is missing or overlaps another)",
					   tmpdir, group_path[k], lt->p[i].name);
				goto done;
			}
	if ((size_t)snprintf(file, sizeof(file), "%s/model.h5", tmpdir) >= sizeof(file)) {
		mt_err_set(err, MT_EXIT_IO, "checkpoint path too long: '%s'", tmpdir);
		goto done;
	}
	fcpl = H5Pcreate(H5P_FILE_CREATE);
	fapl = h5_fapl_new();
	if (fcpl >= 0)
		H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
	mt_atomic_step("checkpoint");
	f = fcpl < 0 || fapl < 0 ? -1 : H5Fcreate(file, H5F_ACC_EXCL, fcpl, fapl);
	if (f < 0) {
		h5_fail(err, MT_EXIT_IO, "cannot create checkpoint '%s'", file);
		goto done;
	}
	if (state_attrs(f, s, have_opt) || attr_i64v(f, "shard_bytes", nshards, bytes) ||
	    attr_u64(f, "shards_xxh3", shards_hash(nshards, shards, bytes))) {
		h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s': attributes", file);
		goto done;
	}
	{
		hsize_t n = (hsize_t)nshards;
		if ((ty = vlen_string_type(H5T_CSET_UTF8)) < 0 || (sp = H5Screate_simple(1, &n, NULL)) < 0 ||
		    (a = H5Acreate2(f, "shards", ty, sp, H5P_DEFAULT, H5P_DEFAULT)) < 0 || H5Awrite(a, ty, shards) < 0) {
			h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s': attribute 'shards'", file);
			goto done;
		}
	}
	for (int k = 0; k < (have_opt ? H5_GROUPS : 1); k++) {
		if (k == 1) { /* the groups in the order a self-contained file has them */
			if ((g = group_create(f, "optimizer")) < 0 || attr_i64(g, "step", s->optimizer_step)) {
				h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s': group 'optimizer'", file);
				goto done;
			}
			h5_close(&g);
		}
		if ((g = group_create(f, group_path[k])) < 0) {
			h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s': group '%s'", file, group_path[k]);
			goto done;
		}
		for (int i = 0; i < lt->n; i++) {
			mt_atomic_step("checkpoint");
			if (write_virtual(g, &lt->p[i], &lists[k * lt->n + i], shards, group_path[k], NULL)) {
				h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s': tensor '%s/%s'", file, group_path[k],
					lt->p[i].name);
				goto done;
			}
		}
		h5_close(&g);
	}
	if (write_rng(f, s)) {
		h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s': dataset 'rng'", file);
		goto done;
	}
	rc = 0;
done:
	h5_close(&a);
	h5_close(&sp);
	h5_close(&ty);
	h5_close(&g);
	h5_close(&fcpl);
	h5_close(&fapl);
	if (f >= 0 && H5Fclose(f) < 0 && rc == 0)
		rc = h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s'", file);
	mt_atomic_step("checkpoint");
	if (rc == 0 && mt_fsync_path(file, 0))
		rc = mt_err_errno(err, MT_EXIT_IO, "cannot sync checkpoint '%s'", file);
	if (lists)
		for (int i = 0; i < H5_GROUPS * lt->n; i++)
			free(lists[i].v);
	free(lists);
	free(bytes);
	free(index);
	return rc;
}

/* An index lists its parts and their sizes: every one must be there, whole (HDF5 reads
 * a missing source of a virtual dataset as fill values, here NaN, without a word). */
static int check_parts(hid_t f, const char *file, int legacy, double *part_bytes, struct mt_err *err)
{
	hid_t a = -1, sp = -1, ty = -1;
	hssize_t n;
	char **names = NULL, dir[PATH_CAP], p[PATH_CAP];
	int64_t *bytes = NULL;
	int rc = -1;
	const char *slash = strrchr(file, '/');

	if (H5Aexists(f, "shards") <= 0) {
		h5_clear();
		return 0; /* a self-contained file */
	}
	snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - file) : 1, slash ? file : ".");
	if ((a = H5Aopen(f, "shards", H5P_DEFAULT)) < 0 || (sp = H5Aget_space(a)) < 0 ||
	    (n = H5Sget_simple_extent_npoints(sp)) <= 0 || n > (1 << 20) || (ty = vlen_string_type(H5T_CSET_UTF8)) < 0) {
		h5_fail(err, MT_EXIT_DATA, "cannot read checkpoint '%s': attribute 'shards'", file);
		goto out;
	}
	names = calloc((size_t)n, sizeof(*names));
	bytes = calloc((size_t)n, sizeof(*bytes));
	if (!names || !bytes) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out;
	}
	if (H5Aread(a, ty, names) < 0 || read_i64v(f, "shard_bytes", (int)n, bytes) <= 0) {
		h5_fail(err, MT_EXIT_DATA, "cannot read checkpoint '%s': attributes 'shards' and 'shard_bytes'", file);
		goto out;
	}
	rc = 0;
	for (hssize_t i = 0; i < n && !rc; i++) {
		struct stat st;
		if (!names[i] || strchr(names[i], '/')) {
			rc = mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': a bad part name", file);
			break;
		}
		if ((size_t)snprintf(p, sizeof(p), "%s/%s", dir, names[i]) >= sizeof(p))
			rc = mt_err_set(err, MT_EXIT_IO, "checkpoint path too long: '%s'", dir);
		else if (stat(p, &st) != 0)
			rc = mt_err_errno(err, MT_EXIT_DATA, "checkpoint '%s' is incomplete: part '%s'", file, p);
		else if (!S_ISREG(st.st_mode))
			rc = mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': part '%s' is not a regular file", file, p);
		else if ((int64_t)st.st_size != bytes[i])
			rc = mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s' is incomplete: part '%s' holds %lld bytes, the index says %lld",
					file, p, (long long)st.st_size, (long long)bytes[i]);
		else if (!is_part_name(names[i]))
			rc = mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': part '%s' is not named as mt names parts", file, names[i]);
		else
			*part_bytes += (double)st.st_size;
	}
	if (!rc && !legacy) {
		uint64_t want = 0;
		int has = H5Aexists(f, "shards_xxh3") > 0;
		hid_t x = has ? H5Aopen(f, "shards_xxh3", H5P_DEFAULT) : -1;

		if (x < 0 || H5Aread(x, H5T_NATIVE_UINT64, &want) < 0 || want != shards_hash((int)n, names, bytes))
			rc = h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': the list of parts does not match its checksum", file);
		h5_close(&x);
		h5_clear();
	}
	/* the parts' structure, before HDF5 follows the virtual datasets into them */
	for (hssize_t i = 0; i < n && !rc; i++) {
		hid_t fapl = h5_fapl(), pf;
		struct walk w;

		if ((size_t)snprintf(p, sizeof(p), "%s/%s", dir, names[i]) >= sizeof(p))
			h5_close(&fapl);
		pf = fapl < 0 ? -1 : H5Fopen(p, H5F_ACC_RDONLY, fapl);
		h5_close(&fapl);
		if (pf < 0) {
			rc = h5_fail(err, MT_EXIT_DATA, "cannot read checkpoint part '%s'", p);
			break;
		}
		rc = walk_file(pf, p, 1, &w, err);
		H5Fclose(pf);
	}
out:
	if (names) {
		for (hssize_t i = 0; i < n; i++)
			if (names[i])
				H5free_memory(names[i]);
	}
	free(names);
	free(bytes);
	h5_close(&ty);
	h5_close(&sp);
	h5_close(&a);
	return rc;
}

/* ---- reading the slices a rank needs ---------------------------------------------------------- */

/* Shard row range [0, shape[0]) of local parameter lp from dataset d (the logical tensor
 * gp of the checkpoint's table): its pieces by hyperslab, rows past the checkpoint's
 * padded vocabulary zero. */
static int read_shard(hid_t d, const struct mt_param *lp, int tp_rank, const struct mt_param *gp, float *dst)
{
	int64_t pieces[2][4], src = 0, cols = lp->shape[1];
	int k = mt_params_pieces(lp, tp_rank, pieces);

	for (int j = 0; j < k; j++) {
		int64_t r0 = pieces[j][0], rows = pieces[j][2], have = gp->shape[0] - r0;
		float *out = dst + src * cols;

		if (have < 0)
			have = 0;
		if (have > rows)
			have = rows;
		if (have > 0 && region_io(d, lp->ndim, (hsize_t)r0, (hsize_t)pieces[j][1], (hsize_t)have, (hsize_t)cols, out, 0, NULL))
			return -1;
		if (have < rows)
			memset(out + have * cols, 0, (size_t)((rows - have) * cols) * sizeof(float));
		src += rows;
	}
	return 0;
}

/* The common case, where what read_shard read is one whole stored dataset (a load in the
 * layout of the save, or one process reading a self-contained file): the checksum of the
 * n floats read against the dataset's, instead of reading them again. 1: verified; 0: not
 * so (the caller then reads the stored bytes again, and says what is wrong). */
static int verify_read(hid_t sd, const float *dst, int64_t n)
{
	hid_t sp = H5Dget_space(sd), ty = H5Dget_type(sd);
	uint64_t want = 0;
	int ok = sp >= 0 && ty >= 0 && H5Tget_class(ty) == H5T_FLOAT && H5Tget_size(ty) == 4 &&
		 H5Tget_order(ty) == H5T_ORDER_LE && H5Sget_simple_extent_npoints(sp) == n && read_xxh(sd, &want) == 1 &&
		 XXH3_64bits(dst, (size_t)n * sizeof(float)) == want;

	h5_close(&ty);
	h5_close(&sp);
	h5_clear();
	return ok;
}

/* verify_read for a virtual dataset d: when the pieces of lp lie in one part's dataset,
 * that dataset against what was read. */
static int verify_read_virtual(hid_t d, const char *file, const struct mt_param *lp, int tp_rank, const float *dst,
			       struct vcache *vc)
{
	hid_t dcpl = H5Dget_create_plist(d), pf = -1, pd = -1;
	int64_t pieces[2][4];
	int k = mt_params_pieces(lp, tp_rank, pieces), ok = 0;
	size_t cnt = 0;
	char one[1200] = "", fname[64], dname[1100], key[1200], dir[PATH_CAP], pfile[PATH_CAP + 80];
	const char *slash = strrchr(file, '/');

	if (dcpl < 0 || H5Pget_virtual_count(dcpl, &cnt) < 0)
		goto out;
	for (size_t i = 0; i < cnt; i++) {
		hsize_t s0[H5S_MAX_RANK] = { 0 }, e0[H5S_MAX_RANK] = { 0 };
		int hit = 0;

		if (vmap_at(dcpl, i, s0, e0, fname, sizeof(fname), dname, sizeof(dname)))
			goto out;
		for (int j = 0; j < k; j++) {
			hsize_t r0 = (hsize_t)pieces[j][0], c0 = (hsize_t)pieces[j][1], nr = (hsize_t)pieces[j][2],
				nc = (hsize_t)(lp->ndim == 2 ? pieces[j][3] : 1);
			hit |= !(e0[0] < r0 || s0[0] >= r0 + nr || e0[1] < c0 || s0[1] >= c0 + nc);
		}
		if (!hit)
			continue;
		snprintf(key, sizeof(key), "%s:%s", fname, dname);
		if (one[0] && strcmp(one, key))
			goto out; /* pieces from several parts: another layout */
		snprintf(one, sizeof(one), "%s", key);
	}
	if (!one[0])
		goto out;
	snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - file) : 1, slash ? file : ".");
	snprintf(fname, sizeof(fname), "%.*s", (int)(strchr(one, ':') - one), one);
	if ((pf = part_open(dir, fname, pfile, sizeof(pfile))) >= 0 &&
	    (pd = H5Dopen2(pf, strchr(one, ':') + 1, H5P_DEFAULT)) >= 0 && verify_read(pd, dst, lp->numel)) {
		vcache_add(vc, one);
		ok = 1;
	}
out:
	h5_close(&pd);
	if (pf >= 0)
		H5Fclose(pf);
	h5_close(&dcpl);
	h5_clear();
	return ok;
}

/* After read_shard: the checksums behind what was read (the parts holding its pieces, or
 * the whole dataset of a self-contained file, once per load), and no NaN or infinity in
 * it. Where what was read is one whole stored dataset, its own checksum suffices;
 * otherwise the stored datasets it came from are read again and checked whole. */
static int verify_slices(hid_t d, const struct mt_param *lp, int tp_rank, const struct mt_param *gp, const float *dst,
			 const char *file, const char *gpath, int legacy, struct vcache *vc, struct mt_err *err)
{
	char path[512], key[600];
	int64_t at;

	snprintf(path, sizeof(path), "%s/%s", gpath, gp->name);
	if (is_virtual(d)) {
		int64_t pieces[2][4];
		int k = verify_read_virtual(d, file, lp, tp_rank, dst, vc) ? 0 : mt_params_pieces(lp, tp_rank, pieces);

		for (int j = 0; j < k; j++) {
			int64_t r0 = pieces[j][0], rows = pieces[j][2];
			if (r0 >= gp->shape[0])
				continue;
			if (rows > gp->shape[0] - r0)
				rows = gp->shape[0] - r0;
			if (verify_virtual(d, file, path, legacy, (hsize_t)r0, (hsize_t)pieces[j][1], (hsize_t)rows,
					   (hsize_t)(lp->ndim == 2 ? pieces[j][3] : 1), vc, NULL, err))
				return -1;
		}
	} else {
		snprintf(key, sizeof(key), ".:%s", path);
		if (!vcache_has(vc, key)) {
			if (!(lp->numel == gp->numel && verify_read(d, dst, lp->numel)) &&
			    verify_plain(d, file, path, legacy, NULL, err))
				return -1;
			vcache_add(vc, key);
		}
	}
	if ((at = first_nonfinite(dst, lp->numel)) >= 0)
		return nonfinite_err(err, file, path, dst, at);
	return 0;
}

int mt_ckpt_load_part(const char *iterdir, const struct mt_params *ct, const struct mt_params *local, float *w,
		      float *m, float *v, int m0, int m1, unsigned flags, struct mt_err *err)
{
	char file[PATH_CAP];
	const struct mt_param **index;
	float *bufs[3] = { w, m, v };
	struct ckinfo ci;
	struct vcache vc = { 0 };
	hid_t f, g = -1;
	int rc = 0;

	if (!w || !m != !v)
		return mt_err_set(err, MT_EXIT_USAGE, "internal: mt_ckpt_load_part without weights, or with one moment");
	if (!(index = table_index(ct, err)))
		return -1;
	if ((f = open_ckpt_info(iterdir, file, sizeof(file), &ci, err)) < 0) {
		free(index);
		return -1;
	}
	for (int k = 0; k < H5_GROUPS && !rc; k++) {
		struct names l;

		if (!bufs[k])
			continue;
		if (H5Lexists(f, k ? "optimizer" : "model", H5P_DEFAULT) <= 0 || H5Lexists(f, group_path[k], H5P_DEFAULT) <= 0 ||
		    (g = H5Gopen2(f, group_path[k], H5P_DEFAULT)) < 0) {
			h5_clear();
			rc = k ? mt_err_set(err, MT_EXIT_DATA,
					    "checkpoint '%s' holds no optimizer state (group '%s'): load the weights only (--no-load-optim)",
					    file, group_path[k])
			       : mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': group '%s' is missing", file, group_path[k]);
			break;
		}
		/* the checkpoint's tensors are the model's, with their global shapes */
		for (int i = 0; i < ct->n && !rc; i++) {
			const struct mt_param *p = &ct->p[i];
			hid_t d = -1, sp = -1;
			hsize_t dims[H5S_MAX_RANK];
			int nd = -1;

			if (H5Lexists(g, p->name, H5P_DEFAULT) <= 0) {
				h5_clear();
				rc = mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s/%s' is missing", file, group_path[k],
						p->name);
				break;
			}
			if ((d = H5Dopen2(g, p->name, H5P_DEFAULT)) < 0 || (sp = H5Dget_space(d)) < 0 ||
			    (nd = H5Sget_simple_extent_ndims(sp)) < 0 || H5Sget_simple_extent_dims(sp, dims, NULL) < 0)
				rc = h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s/%s' is not a readable dataset", file,
					     group_path[k], p->name);
			else if (nd != p->ndim || (int64_t)dims[0] != p->shape[0] || (nd == 2 && (int64_t)dims[1] != p->shape[1])) {
				char a[128], b[128];
				int64_t have[2] = { (int64_t)dims[0], nd == 2 ? (int64_t)dims[1] : 0 };
				fmt_shape(a, sizeof(a), nd, have);
				fmt_shape(b, sizeof(b), p->ndim, p->shape);
				rc = mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s/%s' has shape %s, the model expects %s",
						file, group_path[k], p->name, a, b);
			}
			h5_close(&sp);
			h5_close(&d);
		}
		if (!rc && !(flags & MT_CKPT_ALLOW_EXTRA)) {
			if (list_links(g, &l)) {
				rc = h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': cannot list group '%s'", file, group_path[k]);
			} else {
				for (size_t i = 0; !rc && i < l.n; i++)
					if (!table_find(index, ct->n, l.v[i]))
						rc = mt_err_set(err, MT_EXIT_DATA,
								"checkpoint '%s' holds tensor '%s/%s', which the model does not have (another architecture? compare the checkpoint's config)",
								file, group_path[k], l.v[i]);
				names_free(&l);
			}
		}
		/* this rank's slices, and nothing else */
		for (int i = 0; i < local->n && !rc; i++) {
			const struct mt_param *lp = &local->p[i], *gp;
			hid_t d;

			if (k && (i < m0 || i >= m1))
				continue;
			if (lp->lidx < 0 || lp->lidx >= ct->n) {
				rc = mt_err_set(err, MT_EXIT_USAGE, "internal: '%s' is not a row of the checkpoint's table", lp->name);
				break;
			}
			gp = &ct->p[lp->lidx];
			if ((d = H5Dopen2(g, gp->name, H5P_DEFAULT)) < 0 || read_shard(d, lp, local->tp_rank, gp, bufs[k] + lp->offset))
				rc = h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': cannot read tensor '%s/%s'", file, group_path[k],
					     gp->name);
			if (!rc)
				rc = verify_slices(d, lp, local->tp_rank, gp, bufs[k] + lp->offset, file, group_path[k], ci.legacy, &vc, err);
			h5_close(&d);
		}
		h5_close(&g);
	}
	h5_close(&g);
	vcache_free(&vc);
	H5Fclose(f);
	free(index);
	return rc;
}
