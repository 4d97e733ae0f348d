/* ckpt_inspect.c: describing a checkpoint (mt_ckpt_inspect: its attributes and datasets,
 * as text or JSON) and verifying one whole (mt_ckpt_verify: every tensor read back
 * against its checksum, the config against the shapes). Opening and the structure
 * check are ckpt_read.c. */
#include "ckpt/ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>
#include <jansson.h>

#include "base/atomic.h"
#include "base/files.h"
#include "base/log.h"
#include "ckpt/ckpt_h5.h"
#include "model/config.h"

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
		x->has_slice = mt_ckpt_read_i64v(d, "global_shape", x->nd, x->gshape) > 0 &&
			       mt_ckpt_read_i64v(d, "offset", x->nd, x->off) > 0;
		rc = 0;
	}
	mt_ckpt_h5_close(&ty);
	mt_ckpt_h5_close(&sp);
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

/* Each dataset the walk meets (depth first, in creation order): one line or object. */
static int inspect_dataset(struct mt_ckpt_visit *v, hid_t o)
{
	struct inspect *in = v->arg;
	const char *path = v->path;
	struct dsinfo x;

	if (describe(o, &x))
		return mt_ckpt_h5_fail(in->err, MT_EXIT_DATA, "checkpoint '%s': cannot describe '/%s'", in->file, path);
	if (in->json) {
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
		mt_ckpt_fmt_shape(a, sizeof(a), x.nd, x.shape);
		mt_ckpt_fmt_shape(b, sizeof(b), x.nd, x.gshape);
		mt_ckpt_fmt_shape(c, sizeof(c), x.nd, x.off);
		if (x.has_slice)
			fprintf(in->out, "tensor\t%s\t%s\t%s\tglobal %s\toffset %s\n", path, x.dtype, a, b, c);
		else
			fprintf(in->out, "tensor\t%s\t%s\t%s\n", path, x.dtype, a);
	}
	return 0;
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

	if ((f = mt_ckpt_open(iterdir, file, sizeof(file), err)) < 0)
		return -1;
	if (mt_ckpt_read_state_h5(f, file, &st, err)) {
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
	{
		struct mt_ckpt_visit v = { .file = file, .err = err, .by_creation = 1, .dataset = inspect_dataset, .arg = &in };
		rc = mt_ckpt_h5_walk(&v, f);
	}
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

/* ---- verify ---------------------------------------------------------------------------------- */

struct verify {
	const char *file;
	int legacy;
	int64_t tensors, bytes;
	struct mt_ckpt_vcache vc;
	struct mt_err *err;
};

/* Each dataset but the rng bytes: read back whole against its checksum (a virtual one's
 * parts). */
static int verify_dataset(struct mt_ckpt_visit *w, hid_t o)
{
	struct verify *v = w->arg;
	const char *path = w->path;

	if (!strcmp(path, "rng"))
		return 0;
	v->tensors++;
	return mt_ckpt_is_virtual(o) ? mt_ckpt_verify_virtual(o, v->file, path, v->legacy, 0, 0, 0, 0, &v->vc, &v->bytes, v->err)
				      : mt_ckpt_verify_plain(o, v->file, path, v->legacy, &v->bytes, v->err);
}

static int verify_model(hid_t f, const char *file, const struct mt_ckpt_loaded *st, const struct mt_ckpt_info *ci,
			struct mt_err *err)
{
	struct mt_config c;

	if (mt_config_from_json(&c, st->config_json, err)) {
		err->code = MT_EXIT_DATA; /* a stored config that does not validate is bad data */
		return mt_err_prefix(err, "checkpoint '%s': attribute 'config'", file);
	}
	return mt_ckpt_config_fits(f, file, &c, ci, st->has_optimizer ? H5_GROUPS : 1, err);
}

int mt_ckpt_verify(const char *path, FILE *out, struct mt_err *err)
{
	char file[PATH_CAP];
	struct mt_ckpt_loaded st;
	struct mt_ckpt_info ci;
	struct verify v;
	hid_t f;
	int rc;

	if ((f = mt_ckpt_open_info(path, file, sizeof(file), &ci, err)) < 0)
		return -1;
	if (mt_ckpt_read_state_h5(f, file, &st, err)) {
		H5Fclose(f);
		return -1;
	}
	memset(&v, 0, sizeof(v));
	v.file = file;
	v.legacy = ci.legacy;
	v.err = err;
	{
		struct mt_ckpt_visit w = { .file = file, .err = err, .by_creation = 1, .dataset = verify_dataset, .arg = &v };
		rc = mt_ckpt_h5_walk(&w, f);
	}
	if (!rc) /* the config against the file, and every tensor's shape against the config */
		rc = verify_model(f, file, &st, &ci, err);
	mt_ckpt_vcache_free(&v.vc);
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
