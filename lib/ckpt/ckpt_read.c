/* ckpt_read.c: opening a checkpoint for reading: the structure check of the whole file
 * (links, storage, virtual sources) before any attribute is read, the format, the state
 * attributes and their checksum, resolving a user's path, loading whole tensors into
 * the table's flat buffers, and checking a stored config against the file. The slices
 * of one rank are ckpt_set.c; inspect and verify ckpt_inspect.c. */
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

/* ---- what a file may hold ---------------------------------------------------------------------
 * Before any attribute is asked for, the whole tree of a checkpoint file is walked: every
 * link must be a hard link (no external or soft links, so nothing outside the file is
 * reached), every dataset stored in the file itself (no external storage, no filters) with
 * at least as many bytes as its shape needs, and the only virtual datasets are those of a
 * sharded index, whose every source is a part of the same iteration directory named as
 * mt_ckpt_part_name names them and the dataset of the same name in it. Parts may hold no
 * virtual dataset. The walk sums the model group's tensors, which bounds what a model
 * config may ask to allocate (mt_ckpt_check_config). */
static int walk_dataset(struct mt_ckpt_visit *v, hid_t d)
{
	struct mt_ckpt_walk *w = v->arg;
	hid_t dcpl = H5Dget_create_plist(d), sp = H5Dget_space(d), ty = H5Dget_type(d);
	hsize_t dims[H5S_MAX_RANK];
	int nd, rc = -1;
	double numel = 1;
	size_t esize;
	H5D_layout_t lay;

	if (dcpl < 0 || sp < 0 || ty < 0 || (nd = H5Sget_simple_extent_ndims(sp)) < 0 ||
	    H5Sget_simple_extent_dims(sp, dims, NULL) < 0 || !(esize = H5Tget_size(ty))) {
		mt_ckpt_h5_fail(v->err, MT_EXIT_DATA, "checkpoint '%s': dataset '/%s' cannot be described", v->file, v->path);
		goto out;
	}
	for (int i = 0; i < nd; i++)
		numel *= (double)dims[i];
	if (H5Pget_external_count(dcpl) != 0) {
		mt_err_set(v->err, MT_EXIT_DATA,
			   "checkpoint '%s': dataset '/%s' keeps its data in external files, which mt refuses (a checkpoint reads nothing outside its directory)",
			   v->file, v->path);
		goto out;
	}
	if (H5Pget_nfilters(dcpl) != 0) {
		mt_err_set(v->err, MT_EXIT_DATA, "checkpoint '%s': dataset '/%s' is filtered (compressed), which mt does not read",
			   v->file, v->path);
		goto out;
	}
	lay = H5Pget_layout(dcpl);
	if (lay == H5D_VIRTUAL) {
		size_t cnt = 0;
		char want[1100];

		if (w->part || H5Pget_virtual_count(dcpl, &cnt) < 0 || cnt == 0 || cnt > 65536) {
			mt_ckpt_h5_fail(v->err, MT_EXIT_DATA, "checkpoint '%s': dataset '/%s' is a virtual dataset mt did not write",
				v->file, v->path);
			goto out;
		}
		snprintf(want, sizeof(want), "/%s", v->path);
		for (size_t i = 0; i < cnt; i++) {
			char fname[64] = "", dname[1100] = "";
			ssize_t fl = H5Pget_virtual_filename(dcpl, i, NULL, 0), dl = H5Pget_virtual_dsetname(dcpl, i, NULL, 0);

			if (fl <= 0 || fl >= (ssize_t)sizeof(fname) || dl <= 0 || dl >= (ssize_t)sizeof(dname) ||
			    H5Pget_virtual_filename(dcpl, i, fname, sizeof(fname)) < 0 ||
			    H5Pget_virtual_dsetname(dcpl, i, dname, sizeof(dname)) < 0 || !mt_ckpt_is_part_name(fname) ||
			    strcmp(dname, want)) {
				mt_ckpt_h5_clear();
				mt_err_set(v->err, MT_EXIT_DATA,
					   "checkpoint '%s': virtual dataset '/%s' takes data from somewhere other than a part of its own directory (source %zu of %zu: '%s', dataset '%s'); mt refuses it",
					   v->file, v->path, i + 1, cnt, fname, dname);
				goto out;
			}
		}
		w->virtual = 1;
	} else if (lay == H5D_CONTIGUOUS || lay == H5D_CHUNKED || lay == H5D_COMPACT) {
		if ((double)H5Dget_storage_size(d) < numel * (double)esize || numel * (double)esize > w->filesize) {
			mt_err_set(v->err, MT_EXIT_DATA,
				   "checkpoint '%s': dataset '/%s' stores %llu bytes, its shape needs %.0f (truncated, or not written)",
				   v->file, v->path, (unsigned long long)H5Dget_storage_size(d), numel * (double)esize);
			goto out;
		}
	} else {
		mt_ckpt_h5_fail(v->err, MT_EXIT_DATA, "checkpoint '%s': dataset '/%s' has an unknown layout", v->file, v->path);
		goto out;
	}
	if (!strncmp(v->path, "model/", 6)) {
		w->model_tensors++;
		w->model_floats += numel;
	}
	rc = 0;
out:
	mt_ckpt_h5_close(&ty);
	mt_ckpt_h5_close(&sp);
	mt_ckpt_h5_close(&dcpl);
	return rc;
}

/* Walk file f (opened from `file`). *legacy: the file predates checksummed metadata. */
int mt_ckpt_walk_file(hid_t f, const char *file, int part, struct mt_ckpt_walk *w, struct mt_err *err)
{
	struct mt_ckpt_visit v = { .file = file, .err = err, .by_creation = 0, .dataset = walk_dataset, .arg = w };
	hsize_t sz = 0;

	memset(w, 0, sizeof(*w));
	w->part = part;
	if (err)
		err->code = 0;
	if (H5Fget_filesize(f, &sz) < 0)
		return mt_ckpt_h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': cannot tell its size", file);
	w->filesize = (double)sz;
	return mt_ckpt_h5_walk(&v, f);
}

/* Open the checkpoint file read-only and check that it is an mt checkpoint this version
 * reads: first its whole structure (mt_ckpt_walk_file), then the format attributes. file gets its
 * path (for messages); ci (may be NULL) what the walk found. */
hid_t mt_ckpt_open_info(const char *iterdir, char *file, size_t n, struct mt_ckpt_info *ci, struct mt_err *err)
{
	hid_t fapl, f, a = -1, ty = -1, mt = -1;
	int64_t version = 0;
	char *fmt = NULL;
	int fd, ok = 0;
	struct stat sb;
	struct mt_ckpt_walk w;
	struct mt_ckpt_info tmp;

	if (!ci)
		ci = &tmp;
	memset(ci, 0, sizeof(*ci));
	mt_ckpt_h5_quiet();
	if (mt_ckpt_model_file(iterdir, file, n, err))
		return -1;
	if ((fd = open(file, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) < 0) {
		if (errno == ENOENT && mt_ckpt_is_dir(iterdir))
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
	if ((fapl = mt_ckpt_h5_fapl()) < 0)
		return mt_ckpt_h5_fail(err, MT_EXIT_IO, "cannot open checkpoint '%s'", file);
	f = H5Fopen(file, H5F_ACC_RDONLY, fapl);
	mt_ckpt_h5_close(&fapl);
	if (f < 0)
		return mt_ckpt_h5_fail(err, MT_EXIT_DATA, "cannot read checkpoint '%s'", file);
	if (mt_ckpt_walk_file(f, file, 0, &w, err)) {
		H5Fclose(f);
		return -1;
	}
	ci->model_tensors = w.model_tensors;
	ci->model_floats = w.model_floats;
	if (H5Aexists(f, "format") > 0 && (a = H5Aopen(f, "format", H5P_DEFAULT)) >= 0 &&
	    (ty = H5Aget_type(a)) >= 0 && H5Tget_class(ty) == H5T_STRING && H5Tis_variable_str(ty) > 0 &&
	    (mt = mt_ckpt_vlen_string_type(H5Tget_cset(ty))) >= 0 && H5Aread(a, mt, &fmt) >= 0 && fmt &&
	    !strcmp(fmt, MT_CKPT_FORMAT))
		ok = 1;
	if (fmt)
		H5free_memory(fmt);
	mt_ckpt_h5_close(&mt);
	mt_ckpt_h5_close(&ty);
	mt_ckpt_h5_close(&a);
	mt_ckpt_h5_clear();
	if (!ok) {
		H5Fclose(f);
		return mt_err_set(err, MT_EXIT_DATA, "cannot read checkpoint '%s': not an mt checkpoint (no format attribute '%s')",
				  file, MT_CKPT_FORMAT);
	}
	if (H5Aexists(f, "format_version") <= 0 || (a = H5Aopen(f, "format_version", H5P_DEFAULT)) < 0 ||
	    H5Aread(a, H5T_NATIVE_INT64, &version) < 0) {
		mt_ckpt_h5_fail(err, MT_EXIT_DATA, "cannot read checkpoint '%s': no readable format_version attribute", file);
		mt_ckpt_h5_close(&a);
		H5Fclose(f);
		return -1;
	}
	mt_ckpt_h5_close(&a);
	if (version != MT_CKPT_FORMAT_VERSION) {
		H5Fclose(f);
		return mt_err_set(err, MT_EXIT_DATA, "cannot read checkpoint '%s': format version %lld%s (this mt reads %d)",
				  file, (long long)version, version > MT_CKPT_FORMAT_VERSION ? " is newer: upgrade mt" : " is unknown",
				  MT_CKPT_FORMAT_VERSION);
	}
	ci->legacy = H5Aexists(f, "state_xxh3") <= 0;
	mt_ckpt_h5_clear();
	if (ci->legacy)
		mt_ckpt_warn_legacy(file);
	{
		double pb = 0;
		if (mt_ckpt_check_parts(f, file, ci->legacy, &pb, err)) {
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
		mt_ckpt_h5_clear();
		H5Fclose(f);
		return mt_err_set(err, MT_EXIT_DATA, "cannot read checkpoint '%s': virtual datasets but no list of parts ('shards')", file);
	}
	return f;
}

hid_t mt_ckpt_open(const char *iterdir, char *file, size_t n, struct mt_err *err)
{
	return mt_ckpt_open_info(iterdir, file, n, NULL, err);
}

int mt_ckpt_read_i64(hid_t obj, const char *name, int64_t *v, const char *file, struct mt_err *err)
{
	hid_t a = -1, sp = -1;
	int rc = -1;

	if (H5Aexists(obj, name) <= 0) {
		mt_ckpt_h5_clear();
		return mt_err_set(err, MT_EXIT_DATA, "cannot read checkpoint '%s': attribute '%s' is missing", file, name);
	}
	if ((a = H5Aopen(obj, name, H5P_DEFAULT)) >= 0 && (sp = H5Aget_space(a)) >= 0 &&
	    H5Sget_simple_extent_npoints(sp) == 1 && H5Aread(a, H5T_NATIVE_INT64, v) >= 0)
		rc = 0;
	mt_ckpt_h5_close(&sp);
	mt_ckpt_h5_close(&a);
	if (rc)
		return mt_ckpt_h5_fail(err, MT_EXIT_DATA, "cannot read checkpoint '%s': attribute '%s' is not one integer", file, name);
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
		mt_ckpt_h5_clear();
		return mt_err_set(err, MT_EXIT_DATA, "cannot read checkpoint '%s': attribute '%s' is missing", file, name);
	}
	if ((a = H5Aopen(obj, name, H5P_DEFAULT)) < 0 || (ty = H5Aget_type(a)) < 0 || (sp = H5Aget_space(a)) < 0 ||
	    H5Tget_class(ty) != H5T_STRING || H5Sget_simple_extent_npoints(sp) != 1)
		goto out;
	if (H5Tis_variable_str(ty) > 0) {
		if ((mt = mt_ckpt_vlen_string_type(H5Tget_cset(ty))) >= 0 && H5Aread(a, mt, &s) >= 0) {
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
	mt_ckpt_h5_close(&mt);
	mt_ckpt_h5_close(&sp);
	mt_ckpt_h5_close(&ty);
	mt_ckpt_h5_close(&a);
	if (rc == -2)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	if (rc)
		return mt_ckpt_h5_fail(err, MT_EXIT_DATA, "cannot read checkpoint '%s': attribute '%s' is not a string", file, name);
	return 0;
}

static int read_rng(hid_t f, struct mt_ckpt_loaded *st, const char *file, struct mt_err *err)
{
	hid_t d = -1, sp = -1, ty = -1;
	hssize_t n;
	int rc = -1;

	if (H5Lexists(f, "rng", H5P_DEFAULT) <= 0) {
		mt_ckpt_h5_clear();
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
		int has = mt_ckpt_read_xxh(d, &want), checked = H5Aexists(f, "state_xxh3") > 0;

		mt_ckpt_h5_clear();
		if (has < 0 || (checked && !has) || (has > 0 && want != XXH3_64bits(st->rng ? st->rng : "", st->rng_size))) {
			mt_ckpt_h5_close(&ty);
			mt_ckpt_h5_close(&sp);
			mt_ckpt_h5_close(&d);
			return mt_err_set(err, MT_EXIT_DATA, "cannot read checkpoint '%s': dataset 'rng' does not match its checksum", file);
		}
	}
	mt_ckpt_h5_close(&ty);
	mt_ckpt_h5_close(&sp);
	mt_ckpt_h5_close(&d);
	if (rc == -2)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	if (rc)
		return mt_ckpt_h5_fail(err, MT_EXIT_DATA, "cannot read checkpoint '%s': dataset 'rng' is not a byte array", file);
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

int mt_ckpt_read_state_h5(hid_t f, const char *file, struct mt_ckpt_loaded *st, struct mt_err *err)
{
	memset(st, 0, sizeof(*st));
	st->format_version = MT_CKPT_FORMAT_VERSION;
	if (mt_ckpt_read_i64(f, "iteration", &st->iteration, file, err) ||
	    mt_ckpt_read_i64(f, "consumed_train_samples", &st->consumed_train_samples, file, err) ||
	    mt_ckpt_read_i64(f, "consumed_valid_samples", &st->consumed_valid_samples, file, err) ||
	    read_str(f, "config", &st->config_json, file, err) ||
	    read_str(f, "train_args", &st->train_args_json, file, err) ||
	    read_str(f, "scheduler", &st->scheduler_json, file, err) || read_rng(f, st, file, err))
		goto fail;
	if (H5Lexists(f, "optimizer", H5P_DEFAULT) > 0) {
		hid_t g = H5Gopen2(f, "optimizer", H5P_DEFAULT);
		int rc = g < 0 ? mt_ckpt_h5_fail(err, MT_EXIT_DATA, "cannot read checkpoint '%s': group 'optimizer'", file)
			       : mt_ckpt_read_i64(g, "step", &st->optimizer_step, file, err);

		mt_ckpt_h5_close(&g);
		if (rc)
			goto fail;
		st->has_optimizer = 1;
	}
	mt_ckpt_h5_clear();
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

		mt_ckpt_h5_close(&a);
		got = mt_ckpt_state_hash(st->iteration, st->consumed_train_samples, st->consumed_valid_samples,
				 st->has_optimizer ? st->optimizer_step : -1, st->config_json, st->train_args_json,
				 st->scheduler_json);
		if (bad || want != got) {
			mt_ckpt_h5_fail(err, MT_EXIT_DATA,
				"cannot read checkpoint '%s': its attributes (iteration, samples, config, arguments, scheduler) do not match their checksum 'state_xxh3'",
				file);
			goto fail;
		}
	}
	mt_ckpt_h5_clear();
	{
		/* the directory's name and the iteration inside must agree */
		char dir[PATH_CAP];
		const char *slash = strrchr(file, '/');
		int64_t named;

		snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - file) : 1, slash ? file : ".");
		if ((named = mt_ckpt_iteration_of_dir(dir)) >= 0 && named != st->iteration) {
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
	if ((f = mt_ckpt_open(iterdir, file, sizeof(file), err)) < 0)
		return -1;
	rc = mt_ckpt_read_state_h5(f, file, st, err);
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
			if (!mt_ckpt_is_dir(p))
				return mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s' names iteration %lld, but '%s' is missing",
						  path, (long long)it, p);
		} else {
			if (mt_ckpt_file_path(p, sizeof(p), path, 0, 1, err))
				return -1;
			if (stat(p, &st) != 0 && mt_ckpt_iteration_of_dir(path) >= 0)
				return mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s' is incomplete: no model.h5 in it", path);
			if (stat(p, &st) != 0)
				return mt_err_set(err, MT_EXIT_IO,
						  "no checkpoint in '%s': no '%s' marker, no %s and no model.h5", path,
						  MT_CKPT_LATEST, MT_CKPT_MEGATRON_TRACKER);
			snprintf(p, sizeof(p), "%s", path);
			it = mt_ckpt_iteration_of_dir(path);
		}
	} else if (!strcmp(mt_ckpt_base_name(path), "model.h5")) {
		size_t k = (size_t)(mt_ckpt_base_name(path) - path);

		if (k >= sizeof(p))
			return mt_err_set(err, MT_EXIT_IO, "checkpoint path too long: '%s'", path);
		if (k == 0)
			snprintf(p, sizeof(p), ".");
		else
			snprintf(p, sizeof(p), "%.*s", (int)(k > 1 ? k - 1 : k), path);
		it = mt_ckpt_iteration_of_dir(p);
	} else {
		snprintf(p, sizeof(p), "%s", path);
	}
	if (it < 0) { /* a name that does not say: ask the file */
		char file[PATH_CAP];
		hid_t f = mt_ckpt_open(p, file, sizeof(file), err);

		if (f < 0)
			return -1;
		if (mt_ckpt_read_i64(f, "iteration", &it, file, err)) {
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
static int load_tensor(hid_t g, const char *gpath, const struct mt_param *p, float *dst, const char *file, int legacy,
		       struct mt_ckpt_vcache *vc, struct mt_err *err)
{
	hid_t d = -1, sp = -1, ty = -1;
	hsize_t dims[H5S_MAX_RANK];
	int64_t have[H5S_MAX_RANK] = { 0 }, gshape[2] = { 0, 0 }, off[2] = { 0, 0 };
	char a[512], b[128], c[128];
	int nd, rc = -1, r;

	if (H5Lexists(g, p->name, H5P_DEFAULT) <= 0) {
		mt_ckpt_h5_clear();
		return mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s/%s' is missing", file, gpath, p->name);
	}
	if ((d = H5Dopen2(g, p->name, H5P_DEFAULT)) < 0 || (sp = H5Dget_space(d)) < 0 || (ty = H5Dget_type(d)) < 0 ||
	    (nd = H5Sget_simple_extent_ndims(sp)) < 0 || H5Sget_simple_extent_dims(sp, dims, NULL) < 0) {
		mt_ckpt_h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s/%s' is not a readable dataset", file, gpath, p->name);
		goto out;
	}
	if (H5Tget_class(ty) != H5T_FLOAT) {
		mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s/%s' is not floating point", file, gpath, p->name);
		goto out;
	}
	for (int i = 0; i < nd; i++)
		have[i] = (int64_t)dims[i];
	if (nd != p->ndim || have[0] != p->shape[0] || (nd == 2 && have[1] != p->shape[1])) {
		mt_ckpt_fmt_shape(a, sizeof(a), nd, have);
		mt_ckpt_fmt_shape(b, sizeof(b), p->ndim, p->shape);
		mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s/%s' has shape %s, the model expects %s", file,
			   gpath, p->name, a, b);
		goto out;
	}
	r = mt_ckpt_read_i64v(d, "global_shape", nd, gshape);
	if (r > 0 && mt_ckpt_read_i64v(d, "offset", nd, off) < 0)
		r = -1;
	if (r < 0) {
		mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s/%s' has a bad global_shape or offset attribute",
			   file, gpath, p->name);
		goto out;
	}
	if (r > 0 && (gshape[0] != have[0] || (nd == 2 && gshape[1] != have[1]) || off[0] || (nd == 2 && off[1]))) {
		mt_ckpt_fmt_shape(a, sizeof(a), nd, have);
		mt_ckpt_fmt_shape(b, sizeof(b), nd, gshape);
		mt_ckpt_fmt_shape(c, sizeof(c), nd, off);
		mt_err_set(err, MT_EXIT_DATA,
			   "checkpoint '%s': tensor '%s/%s' holds a %s slice at offset %s of a %s tensor (a sharded checkpoint: reshard it with mt-ckpt-reshard)",
			   file, gpath, p->name, a, c, b);
		goto out;
	}
	if (mt_ckpt_tensor_io(d, nd, dims, dst, 0, NULL)) {
		mt_ckpt_h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': cannot read tensor '%s/%s'", file, gpath, p->name);
		goto out;
	}
	snprintf(a, sizeof(a), "%s/%s", gpath, p->name);
	if (mt_ckpt_is_virtual(d)) {
		/* the parts hold the bytes and their checksums */
		if (mt_ckpt_verify_virtual(d, file, a, legacy, 0, 0, 0, 0, vc, NULL, err))
			goto out;
	} else {
		uint64_t want = 0;
		int has = mt_ckpt_read_xxh(d, &want);

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
		int64_t at = mt_ckpt_first_nonfinite(dst, p->numel);
		if (at >= 0) {
			mt_ckpt_nonfinite_err(err, file, a, dst, at);
			goto out;
		}
	}
	rc = 0;
out:
	mt_ckpt_h5_close(&ty);
	mt_ckpt_h5_close(&sp);
	mt_ckpt_h5_close(&d);
	return rc;
}

static int load_group(hid_t f, const char *gpath, const struct mt_params *t, const struct mt_param **index,
		      float *buf, unsigned flags, const char *file, int legacy, struct mt_ckpt_vcache *vc, struct mt_err *err)
{
	hid_t g;
	struct mt_ckpt_names l;
	int rc = 0;

	if (H5Lexists(f, gpath, H5P_DEFAULT) <= 0 || (g = H5Gopen2(f, gpath, H5P_DEFAULT)) < 0) {
		mt_ckpt_h5_clear();
		if (strncmp(gpath, "optimizer", 9) == 0)
			return mt_err_set(err, MT_EXIT_DATA,
					  "checkpoint '%s' holds no optimizer state (group '%s'): load the weights only (--no-load-optim)",
					  file, gpath);
		return mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': group '%s' is missing", file, gpath);
	}
	for (int i = 0; i < t->n && !rc; i++)
		rc = load_tensor(g, gpath, &t->p[i], buf + t->p[i].offset, file, legacy, vc, err);
	if (!rc && !(flags & MT_CKPT_ALLOW_EXTRA)) {
		if (mt_ckpt_list_links(g, &l))
			rc = mt_ckpt_h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': cannot list group '%s'", file, gpath);
		for (size_t i = 0; !rc && i < l.n; i++)
			if (!mt_ckpt_table_find(index, t->n, l.v[i]))
				rc = mt_err_set(err, MT_EXIT_DATA,
						"checkpoint '%s' holds tensor '%s/%s', which the model does not have (another architecture? compare the checkpoint's config)",
						file, gpath, l.v[i]);
		mt_ckpt_names_free(&l);
	}
	H5Gclose(g);
	return rc;
}

int mt_ckpt_load(const char *iterdir, const struct mt_params *t, float *weights, float *exp_avg,
		 float *exp_avg_sq, unsigned flags, struct mt_err *err)
{
	char file[PATH_CAP];
	const struct mt_param **index;
	struct mt_ckpt_info ci;
	struct mt_ckpt_vcache vc = { 0 };
	hid_t f;
	int rc;

	if (!weights)
		return mt_err_set(err, MT_EXIT_USAGE, "internal: mt_ckpt_load without a weight buffer");
	if (!(index = mt_ckpt_table_index(t, err)))
		return -1;
	if ((f = mt_ckpt_open_info(iterdir, file, sizeof(file), &ci, err)) < 0) {
		free(index);
		return -1;
	}
	rc = load_group(f, "model", t, index, weights, flags, file, ci.legacy, &vc, err);
	if (!rc && exp_avg)
		rc = load_group(f, "optimizer/exp_avg", t, index, exp_avg, flags, file, ci.legacy, &vc, err);
	if (!rc && exp_avg_sq)
		rc = load_group(f, "optimizer/exp_avg_sq", t, index, exp_avg_sq, flags, file, ci.legacy, &vc, err);
	mt_ckpt_vcache_free(&vc);
	H5Fclose(f);
	free(index);
	return rc;
}

/* The config c against file f: bounds first (num-layers no more than the model tensors,
 * the parameter count within the floats stored), then the table it builds, row by row,
 * against the shapes of the first ngroups groups (model, then the moments). */
int mt_ckpt_config_fits(hid_t f, const char *file, const struct mt_config *c, const struct mt_ckpt_info *ci, int ngroups,
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
		hid_t g = H5Lexists(f, mt_ckpt_group_path[k], H5P_DEFAULT) > 0 ? H5Gopen2(f, mt_ckpt_group_path[k], H5P_DEFAULT) : -1;

		if (g < 0) {
			rc = mt_ckpt_h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': group '%s' is missing", file, mt_ckpt_group_path[k]);
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
				rc = mt_ckpt_h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s/%s' of its config is missing", file,
					     mt_ckpt_group_path[k], p->name);
			else if (nd != p->ndim || (int64_t)dims[0] != p->shape[0] || (nd == 2 && (int64_t)dims[1] != p->shape[1])) {
				char a[128], b[128];
				int64_t have[2] = { (int64_t)dims[0], nd == 2 ? (int64_t)dims[1] : 0 };
				mt_ckpt_fmt_shape(a, sizeof(a), nd, have);
				mt_ckpt_fmt_shape(b, sizeof(b), p->ndim, p->shape);
				rc = mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s/%s' has shape %s, its config says %s",
						file, mt_ckpt_group_path[k], p->name, a, b);
			}
			mt_ckpt_h5_close(&sp);
			mt_ckpt_h5_close(&d);
		}
		mt_ckpt_h5_close(&g);
	}
	mt_ckpt_h5_clear();
	mt_params_free(&t);
	return rc;
}

int mt_ckpt_check_config(const char *iterdir, const struct mt_config *c, double *stored_floats, struct mt_err *err)
{
	char file[PATH_CAP];
	struct mt_ckpt_info ci;
	hid_t f = mt_ckpt_open_info(iterdir, file, sizeof(file), &ci, err);
	int rc;

	if (f < 0)
		return -1;
	if (stored_floats)
		*stored_floats = ci.model_floats;
	rc = mt_ckpt_config_fits(f, file, c, &ci, 1, err);
	H5Fclose(f);
	return rc;
}
