/* ckpt_h5.c: the HDF5 helpers the checkpoint files share (ckpt_h5.h): HDF5's errors as
 * messages, file access, checksums, the parameter table's index, attributes, tensor I/O
 * in slabs with write-behind, group listing and the checks of tensors read back. It
 * holds no protocol: what a checkpoint is, is in the files that use these. HDF5 never
 * prints here: its error stack is turned into the message of a struct mt_err. */
#include "ckpt/ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>
#include <xxhash.h>

#include "base/atomic.h"
#include "base/files.h"
#include "base/log.h"
#include "ckpt/ckpt_h5.h"
#include "model/config.h"

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
void mt_ckpt_h5_quiet(void)
{
	H5Eset_auto2(H5E_DEFAULT, h5_record, NULL);
	h5_last[0] = '\0';
}

/* After a failure that is expected and handled (a probe), forget its reason. */
void mt_ckpt_h5_clear(void)
{
	H5Eclear2(H5E_DEFAULT);
	h5_last[0] = '\0';
}

/* mt_err_set with ": <hdf5's reason>" appended, when HDF5 gave one. */
__attribute__((format(printf, 3, 4)))
int mt_ckpt_h5_fail(struct mt_err *err, int code, const char *fmt, ...)
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
	mt_ckpt_h5_clear();
	return -1;
}

void mt_ckpt_h5_close(hid_t *id)
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
hid_t mt_ckpt_h5_fapl(void)
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
hid_t mt_ckpt_h5_fapl_new(void)
{
	hid_t fapl = mt_ckpt_h5_fapl();

	if (fapl >= 0 && H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_LATEST) < 0)
		mt_ckpt_h5_close(&fapl);
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
uint64_t mt_ckpt_state_hash(int64_t iteration, int64_t ctrain, int64_t cvalid, int64_t opt_step, const char *config,
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

uint64_t mt_ckpt_shards_hash(int n, char *const *names, const int64_t *bytes)
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

void mt_ckpt_warn_legacy(const char *file)
{
	if (warned_legacy++)
		return;
	mt_warn("checkpoint '%s' has no checksums (written by an mt older than checksums): its tensors are read "
		"unverified; save it again (mt-ckpt-reshard merge) to add them", file);
}

/* ---- the parameter table --------------------------------------------------------------- */

static int cmp_param_name(const void *a, const void *b)
{
	return strcmp((*(const struct mt_param *const *)a)->name, (*(const struct mt_param *const *)b)->name);
}

/* Check the table's rows (names usable as HDF5 link names, shapes, offsets within the
 * buffer, no name twice) and return its rows sorted by name, for lookups. */
const struct mt_param **mt_ckpt_table_index(const struct mt_params *t, struct mt_err *err)
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

const struct mt_param *mt_ckpt_table_find(const struct mt_param **v, int n, const char *name)
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

void mt_ckpt_fmt_shape(char *buf, size_t n, int nd, const int64_t *d)
{
	size_t k = 0;

	k += (size_t)snprintf(buf + k, n - k, "[");
	for (int i = 0; i < nd && k < n; i++)
		k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)d[i]);
	if (k < n)
		snprintf(buf + k, n - k, "]");
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
	mt_ckpt_h5_close(&a);
	mt_ckpt_h5_close(&sp);
	return rc;
}

int mt_ckpt_attr_i64(hid_t obj, const char *name, int64_t v)
{
	return attr_write(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, 0, 1, &v);
}

int mt_ckpt_attr_i64v(hid_t obj, const char *name, int n, const int64_t *v)
{
	return attr_write(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, 1, (hsize_t)n, v);
}

/* Variable-length UTF-8 strings: what h5py writes for str, read back as str, and kept
 * in the global heap, so a long JSON text does not hit the 64 KiB object header. */
hid_t mt_ckpt_vlen_string_type(H5T_cset_t cset)
{
	hid_t ty = H5Tcopy(H5T_C_S1);

	if (ty >= 0 && (H5Tset_size(ty, H5T_VARIABLE) < 0 || H5Tset_cset(ty, cset) < 0))
		mt_ckpt_h5_close(&ty);
	return ty;
}

int mt_ckpt_attr_u64(hid_t obj, const char *name, uint64_t v)
{
	return attr_write(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, 0, 1, &v);
}

int mt_ckpt_attr_str(hid_t obj, const char *name, const char *s)
{
	hid_t ty = mt_ckpt_vlen_string_type(H5T_CSET_UTF8);
	int rc = ty < 0 ? -1 : attr_write(obj, name, ty, ty, 0, 1, &s);

	mt_ckpt_h5_close(&ty);
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

void mt_ckpt_wb_open(struct mt_ckpt_wbehind *wb, hid_t f)
{
	hid_t fapl = H5Fget_access_plist(f);
	void *h = NULL;

	wb->fd = -1;
	wb->started = wb->waited = 0;
	if (fapl >= 0 && H5Pget_driver(fapl) == H5FD_SEC2 && H5Fget_vfd_handle(f, H5P_DEFAULT, &h) >= 0 && h)
		wb->fd = *(int *)h;
	mt_ckpt_h5_close(&fapl);
	mt_ckpt_h5_clear();
}

/* The tensors' bytes are written up to file offset end. */
static void wb_note(struct mt_ckpt_wbehind *wb, int64_t end)
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
int mt_ckpt_region_io(hid_t d, int nd, hsize_t row0, hsize_t col0, hsize_t rows, hsize_t cols, float *buf, int write,
		     struct mt_ckpt_wbehind *wb)
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
		mt_ckpt_h5_close(&fs);
		mt_ckpt_h5_close(&ms);
	}
	return rc;
}

/* Move a whole float tensor between buf and dataset d. */
int mt_ckpt_tensor_io(hid_t d, int nd, const hsize_t *dims, float *buf, int write, struct mt_ckpt_wbehind *wb)
{
	return mt_ckpt_region_io(d, nd, 0, 0, dims[0], nd == 2 ? dims[1] : 1, buf, write, wb);
}

/* Groups remember the order their links were made in, so readers list tensors in the
 * table's order (embedding, layer 0, layer 1, ..., final norm) rather than by name. */
hid_t mt_ckpt_group_create(hid_t parent, const char *name)
{
	hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE), g = -1;

	if (gcpl >= 0 && H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) >= 0)
		g = H5Gcreate2(parent, name, H5P_DEFAULT, gcpl, H5P_DEFAULT);
	mt_ckpt_h5_close(&gcpl);
	return g;
}

/* What a checkpoint's file holds besides the tensors, as attributes of the root. */
int mt_ckpt_state_attrs(hid_t f, const struct mt_ckpt_state *s, int has_opt)
{
	const char *args = s->train_args_json ? s->train_args_json : "{}", *sched = s->scheduler_json ? s->scheduler_json : "{}";
	uint64_t h = mt_ckpt_state_hash(s->iteration, s->consumed_train_samples, s->consumed_valid_samples,
				has_opt ? s->optimizer_step : -1, s->config_json, args, sched);

	return mt_ckpt_attr_str(f, "format", MT_CKPT_FORMAT) || mt_ckpt_attr_i64(f, "format_version", MT_CKPT_FORMAT_VERSION) ||
	       mt_ckpt_attr_u64(f, "state_xxh3", h) ||
	       mt_ckpt_attr_i64(f, "iteration", s->iteration) ||
	       mt_ckpt_attr_i64(f, "consumed_train_samples", s->consumed_train_samples) ||
	       mt_ckpt_attr_i64(f, "consumed_valid_samples", s->consumed_valid_samples) ||
	       mt_ckpt_attr_str(f, "config", s->config_json) ||
	       mt_ckpt_attr_str(f, "train_args", s->train_args_json ? s->train_args_json : "{}") ||
	       mt_ckpt_attr_str(f, "scheduler", s->scheduler_json ? s->scheduler_json : "{}") ? -1 : 0;
}

/* The root's rng dataset (bytes; empty for none). */
int mt_ckpt_write_rng(hid_t f, const struct mt_ckpt_state *s)
{
	hsize_t rng_len = s->rng ? (hsize_t)s->rng_size : 0;
	hid_t sp = -1, d = -1;
	int rc = -1;

	if ((sp = H5Screate_simple(1, &rng_len, NULL)) >= 0 &&
	    (d = H5Dcreate2(f, "rng", H5T_STD_U8LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) >= 0 &&
	    !mt_ckpt_attr_u64(d, XXH_ATTR, XXH3_64bits(rng_len ? s->rng : "", (size_t)rng_len)) &&
	    (!rng_len || H5Dwrite(d, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, s->rng) >= 0))
		rc = 0;
	mt_ckpt_h5_close(&d);
	mt_ckpt_h5_close(&sp);
	return rc;
}

/* ---- verifying what was read ------------------------------------------------------------------ */

/* The stored checksum of dataset d: 1 with *v, 0 when it has none, -1 when it is garbled. */
int mt_ckpt_read_xxh(hid_t d, uint64_t *v)
{
	hid_t a = -1, sp = -1, ty = -1;
	int rc = -1;
	htri_t ex = H5Aexists(d, XXH_ATTR);

	if (ex <= 0) {
		mt_ckpt_h5_clear();
		return ex == 0 ? 0 : -1;
	}
	if ((a = H5Aopen(d, XXH_ATTR, H5P_DEFAULT)) >= 0 && (sp = H5Aget_space(a)) >= 0 && (ty = H5Aget_type(a)) >= 0 &&
	    H5Tget_class(ty) == H5T_INTEGER && H5Tget_size(ty) == 8 && H5Sget_simple_extent_npoints(sp) == 1 &&
	    H5Aread(a, H5T_NATIVE_UINT64, v) >= 0)
		rc = 1;
	mt_ckpt_h5_close(&ty);
	mt_ckpt_h5_close(&sp);
	mt_ckpt_h5_close(&a);
	mt_ckpt_h5_clear();
	return rc;
}

/* Is every float of x finite? -1 when so, else the index of the first that is not. */
int64_t mt_ckpt_first_nonfinite(const float *x, int64_t n)
{
	/* blocks scanned on the bits (exponent all ones: inf or nan), a loop the compiler
	 * vectorizes, and only a block that holds one scanned again for its index: isfinite() per
	 * element was a tenth of a Megatron export's time (perf, bench/ckpt-megatron.sh) */
	for (int64_t b = 0; b < n; b += 4096) {
		int64_t e = n - b < 4096 ? n : b + 4096;
		uint32_t top = 0;
		for (int64_t j = b; j < e; j++) {
			uint32_t u;
			memcpy(&u, x + j, 4);
			u &= 0x7FFFFFFFu;
			top = u > top ? u : top;
		}
		if (top < 0x7F800000u)
			continue;
		for (int64_t j = b; j < e; j++)
			if (!isfinite(x[j]))
				return j;
	}
	return -1;
}

int mt_ckpt_nonfinite_err(struct mt_err *err, const char *file, const char *path, const float *x, int64_t at)
{
	return mt_err_set(err, MT_EXIT_DATA,
			  "checkpoint '%s': tensor '%s' holds %s at element %lld (a diverged or damaged model: mt refuses it)",
			  file, path, isnan(x[at]) ? "nan" : "inf", (long long)at);
}

#define VERIFY_FLOATS ((hsize_t)4 << 20)

/* Read a whole float32 dataset of a file (a self-contained tensor, or a part's) in slabs,
 * compare its XXH3 with the stored one and look for NaN and infinities. legacy: a file
 * without checksums (none expected). *bytes adds what was read. */
int mt_ckpt_verify_plain(hid_t d, const char *file, const char *path, int legacy, int64_t *bytes, struct mt_err *err)
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
		mt_ckpt_h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s' is not a 1- or 2-dimensional dataset", file, path);
		goto out;
	}
	if (H5Tget_class(ty) != H5T_FLOAT) {
		mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s' is not floating point", file, path);
		goto out;
	}
	if ((has = mt_ckpt_read_xxh(d, &want)) < 0) {
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

		if (mt_ckpt_region_io(d, nd, r, 0, n, cols, buf, 0, NULL)) {
			mt_ckpt_h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': cannot read tensor '%s'", file, path);
			goto out;
		}
		XXH3_64bits_update(h, buf, (size_t)(n * cols) * sizeof(float));
		if (bad < 0 && (at = mt_ckpt_first_nonfinite(buf, (int64_t)(n * cols))) >= 0) {
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
	mt_ckpt_h5_close(&ty);
	mt_ckpt_h5_close(&sp);
	return rc;
}

/* Part datasets already verified during one load (file and dataset). */

int mt_ckpt_vcache_has(const struct mt_ckpt_vcache *c, const char *key)
{
	for (size_t i = 0; c && i < c->n; i++)
		if (!strcmp(c->v[i], key))
			return 1;
	return 0;
}

void mt_ckpt_vcache_add(struct mt_ckpt_vcache *c, const char *key)
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

void mt_ckpt_vcache_free(struct mt_ckpt_vcache *c)
{
	for (size_t i = 0; i < c->n; i++)
		free(c->v[i]);
	free(c->v);
	memset(c, 0, sizeof(*c));
}

/* Mapping i of a virtual dataset's creation list: the bounds of its region in the virtual
 * dataset (a 1-D one's column bounds 0) and its source's file and dataset names. */
int mt_ckpt_vmap_at(hid_t dcpl, size_t i, hsize_t *s0, hsize_t *e0, char *fname, size_t fn, char *dname, size_t dn)
{
	hid_t vs = H5Pget_virtual_vspace(dcpl, i);
	int nd = vs >= 0 ? H5Sget_simple_extent_ndims(vs) : -1;
	int bad = vs < 0 || nd < 1 || H5Sget_select_bounds(vs, s0, e0) < 0 || H5Pget_virtual_filename(dcpl, i, fname, fn) < 0 ||
		  H5Pget_virtual_dsetname(dcpl, i, dname, dn) < 0;

	mt_ckpt_h5_close(&vs);
	if (nd == 1)
		s0[1] = e0[1] = 0;
	return bad ? -1 : 0;
}

/* Open part fname of the checkpoint in dir, read-only. HDF5 may hold the part open
 * already, as a virtual dataset's source, with its own access properties (file locking
 * on): open it the same way then. */
hid_t mt_ckpt_part_open(const char *dir, const char *fname, char *pfile, size_t pn)
{
	hid_t fapl = mt_ckpt_h5_fapl(), pf = -1;

	snprintf(pfile, pn, "%s/%s", dir, fname);
	if (fapl >= 0 && (pf = H5Fopen(pfile, H5F_ACC_RDONLY, fapl)) < 0) {
		mt_ckpt_h5_clear();
		pf = H5Fopen(pfile, H5F_ACC_RDONLY, H5P_DEFAULT);
	}
	mt_ckpt_h5_close(&fapl);
	return pf;
}

/* Verify the parts' datasets behind virtual dataset d (of index file `file`) that hold
 * any of the region rows [r0, r0 + nr) x columns [c0, c0 + nc) (nr 0: all of it). */
int mt_ckpt_verify_virtual(hid_t d, const char *file, const char *path, int legacy, hsize_t r0, hsize_t c0, hsize_t nr,
			  hsize_t nc, struct mt_ckpt_vcache *cache, int64_t *bytes, struct mt_err *err)
{
	hid_t dcpl = H5Dget_create_plist(d);
	size_t cnt = 0;
	char dir[PATH_CAP];
	const char *slash = strrchr(file, '/');
	int rc = 0;

	snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - file) : 1, slash ? file : ".");
	if (dcpl < 0 || H5Pget_virtual_count(dcpl, &cnt) < 0) {
		mt_ckpt_h5_close(&dcpl);
		return mt_ckpt_h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s' cannot be described", file, path);
	}
	for (size_t i = 0; i < cnt && !rc; i++) {
		char fname[64], dname[1100], key[1200], pfile[PATH_CAP + 80];
		hsize_t s0[H5S_MAX_RANK] = { 0 }, e0[H5S_MAX_RANK] = { 0 };
		hid_t pf = -1, pd = -1;

		if (mt_ckpt_vmap_at(dcpl, i, s0, e0, fname, sizeof(fname), dname, sizeof(dname))) {
			rc = mt_ckpt_h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s' cannot be described", file, path);
			break;
		}
		if (nr && (e0[0] < r0 || s0[0] >= r0 + nr || e0[1] < c0 || s0[1] >= c0 + nc))
			continue;
		snprintf(key, sizeof(key), "%s:%s", fname, dname);
		if (mt_ckpt_vcache_has(cache, key))
			continue;
		if ((pf = mt_ckpt_part_open(dir, fname, pfile, sizeof(pfile))) < 0 || (pd = H5Dopen2(pf, dname, H5P_DEFAULT)) < 0) {
			rc = mt_ckpt_h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': cannot read part '%s' of tensor '%s'", file, pfile, path);
		} else {
			char p2[1200];
			snprintf(p2, sizeof(p2), "%s (part %s)", path, fname);
			rc = mt_ckpt_verify_plain(pd, file, p2, legacy, bytes, err);
			if (!rc)
				mt_ckpt_vcache_add(cache, key);
		}
		mt_ckpt_h5_close(&pd);
		if (pf >= 0)
			H5Fclose(pf);
	}
	mt_ckpt_h5_close(&dcpl);
	return rc;
}

int mt_ckpt_is_virtual(hid_t d)
{
	hid_t dcpl = H5Dget_create_plist(d);
	int v = dcpl >= 0 && H5Pget_layout(dcpl) == H5D_VIRTUAL;

	mt_ckpt_h5_close(&dcpl);
	return v;
}

void mt_ckpt_names_free(struct mt_ckpt_names *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

static herr_t names_add(hid_t g, const char *name, const H5L_info_t *info, void *data)
{
	struct mt_ckpt_names *l = data;

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
int mt_ckpt_list_links(hid_t g, struct mt_ckpt_names *l)
{
	hsize_t idx = 0;

	memset(l, 0, sizeof(*l));
	if (H5Literate(g, H5_INDEX_CRT_ORDER, H5_ITER_INC, &idx, names_add, l) >= 0)
		return 0;
	mt_ckpt_names_free(l);
	mt_ckpt_h5_clear();
	idx = 0;
	if (H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, &idx, names_add, l) >= 0)
		return 0;
	mt_ckpt_names_free(l);
	return -1;
}

/* Read the int64 array attribute name of d into v[nd]; 0 when absent, 1 when read. */
int mt_ckpt_read_i64v(hid_t d, const char *name, int nd, int64_t *v)
{
	hid_t a = -1, sp = -1;
	int rc = -1;

	if (H5Aexists(d, name) <= 0) {
		mt_ckpt_h5_clear();
		return 0;
	}
	if ((a = H5Aopen(d, name, H5P_DEFAULT)) >= 0 && (sp = H5Aget_space(a)) >= 0 &&
	    H5Sget_simple_extent_npoints(sp) == nd && H5Aread(a, H5T_NATIVE_INT64, v) >= 0)
		rc = 1;
	mt_ckpt_h5_close(&sp);
	mt_ckpt_h5_close(&a);
	mt_ckpt_h5_clear();
	return rc;
}

const char *const mt_ckpt_group_path[H5_GROUPS] = { "model", "optimizer/exp_avg", "optimizer/exp_avg_sq" };

/* ---- one walk of a file's groups ------------------------------------------------------------
 * Every link of the tree under a group, depth first: its path, then the checks every reader
 * relies on (a hard link, no more than MT_CKPT_WALK_MAX_OBJECTS in all, groups no deeper
 * than MT_CKPT_WALK_DEPTH), then the visitor on each dataset. The structure check walks in
 * HDF5's order of names; inspect and verify in the order the writer made the links (where
 * it tracked it, else by name) so that they list tensors in the table's order. */

static int walk_group(struct mt_ckpt_visit *v, hid_t g);

static herr_t walk_link(hid_t g, const char *name, const H5L_info_t *info, void *data)
{
	struct mt_ckpt_visit *v = data;
	size_t len = strlen(v->path);
	H5O_info_t oi;
	hid_t o;
	int rc = 0;

	v->links++;
	if ((size_t)snprintf(v->path + len, sizeof(v->path) - len, "%s%s", len ? "/" : "", name) >= sizeof(v->path) - len) {
		mt_err_set(v->err, MT_EXIT_DATA, "checkpoint '%s': a link name is too long", v->file);
		v->failed = 1;
		return -1;
	}
	if (info->type != H5L_TYPE_HARD) {
		mt_err_set(v->err, MT_EXIT_DATA, "checkpoint '%s': '/%s' is %s link, which mt refuses (a checkpoint reads nothing outside itself)",
			   v->file, v->path, info->type == H5L_TYPE_EXTERNAL ? "an external" : info->type == H5L_TYPE_SOFT ? "a soft" : "a user-defined");
		v->failed = 1;
		return -1;
	}
	if (++v->objects > MT_CKPT_WALK_MAX_OBJECTS) {
		mt_err_set(v->err, MT_EXIT_DATA, "checkpoint '%s': more than %d objects", v->file, MT_CKPT_WALK_MAX_OBJECTS);
		v->failed = 1;
		return -1;
	}
	if (H5Oget_info_by_name2(g, name, &oi, H5O_INFO_BASIC, H5P_DEFAULT) < 0 || (o = H5Oopen(g, name, H5P_DEFAULT)) < 0) {
		mt_ckpt_h5_fail(v->err, MT_EXIT_DATA, "checkpoint '%s': cannot open '/%s'", v->file, v->path);
		v->failed = 1;
		return -1;
	}
	if (oi.type == H5O_TYPE_GROUP)
		rc = walk_group(v, o) ? -1 : 0;
	else if (oi.type == H5O_TYPE_DATASET && v->dataset(v, o))
		rc = -1, v->failed = 1;
	mt_ckpt_h5_close(&o);
	v->path[len] = '\0';
	return rc;
}

static int walk_group(struct mt_ckpt_visit *v, hid_t g)
{
	hsize_t idx = 0;
	int64_t before = v->links;
	int rc;

	if (v->level >= MT_CKPT_WALK_DEPTH) {
		v->failed = 1;
		return mt_err_set(v->err, MT_EXIT_DATA, "checkpoint '%s': groups nested deeper than %d at '/%s'", v->file,
				  MT_CKPT_WALK_DEPTH, v->path);
	}
	v->level++;
	if (!v->by_creation) {
		rc = H5Literate(g, H5_INDEX_NAME, H5_ITER_NATIVE, &idx, walk_link, v) < 0 ? -1 : 0;
	} else {
		rc = H5Literate(g, H5_INDEX_CRT_ORDER, H5_ITER_INC, &idx, walk_link, v) < 0 ? -1 : 0;
		if (rc && !v->failed && v->links == before) {
			/* the writer did not track the order of its links: by name */
			mt_ckpt_h5_clear();
			idx = 0;
			rc = H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, &idx, walk_link, v) < 0 ? -1 : 0;
		}
	}
	v->level--;
	if (rc && !v->failed) {
		v->failed = 1;
		return mt_ckpt_h5_fail(v->err, MT_EXIT_DATA, "checkpoint '%s': cannot list group '/%s'", v->file, v->path);
	}
	return rc;
}

int mt_ckpt_h5_walk(struct mt_ckpt_visit *v, hid_t g)
{
	v->path[0] = '\0';
	v->objects = v->links = 0;
	v->level = v->failed = 0;
	return walk_group(v, g);
}
