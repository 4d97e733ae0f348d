/* ckpt_write.c: one self-contained checkpoint file, written and committed (mt_ckpt_save):
 * the translation of the parameter table's flat buffers into one HDF5 dataset per
 * logical tensor, with the state attributes and the rng bytes, committed through the
 * transaction of one process (txn.h). Sharded sets are ckpt_set.c; the directory and
 * the commit ckpt.c. */
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
#include "ckpt/txn.h"
#include "model/config.h"

static int check_finite(const struct mt_params *t, const float *buf, const char *what,
			const char *final, struct mt_err *err)
{
	for (int i = 0; i < t->n; i++) {
		const struct mt_param *p = &t->p[i];
		const float *x = buf + p->offset;
		int64_t j = mt_ckpt_first_nonfinite(x, p->numel); /* isfinite() per element here was a tenth of an import's time */

		if (j >= 0) {
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

static int write_tensor(hid_t grp, const struct mt_param *p, const float *buf, struct mt_ckpt_wbehind *wb)
{
	hsize_t dims[2] = { (hsize_t)p->shape[0], (hsize_t)p->shape[1] };
	int64_t zero[2] = { 0, 0 };
	hid_t sp = H5Screate_simple(p->ndim, dims, NULL), d = -1;
	int rc = -1;

	if (sp >= 0 && (d = H5Dcreate2(grp, p->name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) >= 0 &&
	    !mt_ckpt_attr_i64v(d, "global_shape", p->ndim, p->shape) && !mt_ckpt_attr_i64v(d, "offset", p->ndim, zero) &&
	    !mt_ckpt_attr_u64(d, XXH_ATTR, XXH3_64bits(buf, (size_t)p->numel * sizeof(float))) &&
	    !mt_ckpt_tensor_io(d, p->ndim, dims, (float *)buf, 1, wb))
		rc = 0;
	mt_ckpt_h5_close(&d);
	mt_ckpt_h5_close(&sp);
	return rc;
}

static int write_group(hid_t f, const char *path, const struct mt_params *t, const float *buf,
		       const char *file, struct mt_ckpt_wbehind *wb, struct mt_err *err)
{
	hid_t g = mt_ckpt_group_create(f, path);

	if (g < 0)
		return mt_ckpt_h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s': group '%s'", file, path);
	for (int i = 0; i < t->n; i++)
		if ((mt_atomic_step("checkpoint"), write_tensor(g, &t->p[i], buf + t->p[i].offset, wb))) {
			mt_ckpt_h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s': tensor '%s/%s'", file, path, t->p[i].name);
			mt_ckpt_h5_close(&g);
			return -1;
		}
	mt_ckpt_h5_close(&g);
	return 0;
}

static int write_h5(const char *file, const struct mt_params *t, const float *w, const float *m,
		    const float *v, const struct mt_ckpt_state *s, struct mt_err *err)
{
	hid_t fcpl = H5Pcreate(H5P_FILE_CREATE), fapl = mt_ckpt_h5_fapl_new(), f = -1, g = -1;
	struct mt_ckpt_wbehind wb;
	int rc = -1;

	if (fcpl >= 0)
		H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
	f = fcpl < 0 || fapl < 0 ? -1 : H5Fcreate(file, H5F_ACC_EXCL, fcpl, fapl);
	mt_ckpt_h5_close(&fcpl);
	mt_ckpt_h5_close(&fapl);
	if (f < 0)
		return mt_ckpt_h5_fail(err, MT_EXIT_IO, "cannot create checkpoint '%s'", file);
	if (mt_ckpt_state_attrs(f, s, m != NULL)) {
		mt_ckpt_h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s': attributes", file);
		goto out;
	}
	mt_ckpt_wb_open(&wb, f);
	if (write_group(f, "model", t, w, file, &wb, err))
		goto out;
	if (m) {
		if ((g = mt_ckpt_group_create(f, "optimizer")) < 0 || mt_ckpt_attr_i64(g, "step", s->optimizer_step)) {
			mt_ckpt_h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s': group 'optimizer'", file);
			goto out;
		}
		mt_ckpt_h5_close(&g);
		if (write_group(f, "optimizer/exp_avg", t, m, file, &wb, err) ||
		    write_group(f, "optimizer/exp_avg_sq", t, v, file, &wb, err))
			goto out;
	}
	if (mt_ckpt_write_rng(f, s)) {
		mt_ckpt_h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s': dataset 'rng'", file);
		goto out;
	}
	rc = 0;
out:
	mt_ckpt_h5_close(&g);
	/* closing flushes: a full disk may only show here */
	if (H5Fclose(f) < 0 && rc == 0)
		rc = mt_ckpt_h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s'", file);
	return rc;
}

/* ---- save ----------------------------------------------------------------------------------- */

int mt_ckpt_save(const char *dir, const struct mt_params *t, const float *weights,
		 const float *exp_avg, const float *exp_avg_sq, const struct mt_ckpt_state *s,
		 int keep_last, struct mt_err *err)
{
	char final[PATH_CAP], tmp[PATH_CAP], file[PATH_CAP];
	const struct mt_param **index;
	struct mt_ckpt_txn x;

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
	if (!(index = mt_ckpt_table_index(t, err)))
		return -1;
	free(index);
	if (check_finite(t, weights, "weight", final, err) ||
	    (exp_avg && (check_finite(t, exp_avg, "exp_avg", final, err) ||
			 check_finite(t, exp_avg_sq, "exp_avg_sq", final, err))))
		return -1;
	mt_ckpt_h5_quiet();
	if (mt_ckpt_mkdir_p(dir, err))
		return -1;
	if (mt_ckpt_tmpdir_name(tmp, sizeof(tmp), dir, s->iteration, (long)getpid(), NULL) ||
	    mt_ckpt_file_path(file, sizeof(file), tmp, 0, 1, err))
		return mt_err_set(err, MT_EXIT_IO, "checkpoint path too long: '%s'", dir);
	/* the transaction of one process that writes the one file itself: no parts, no index */
	if (mt_ckpt_txn_begin(&x, dir, s->iteration, keep_last, NULL, 1, 1, 1, 1, 0, err))
		return -1;
	if (write_h5(file, t, weights, exp_avg, exp_avg_sq, s, err))
		goto fail;
	mt_atomic_step("checkpoint");
	if (mt_fsync_path(file, 0)) {
		mt_err_errno(err, MT_EXIT_IO, "cannot sync checkpoint '%s'", file);
		goto fail;
	}
	return mt_ckpt_txn_finish(&x, NULL, s, 0, 0, err);
fail:
	mt_ckpt_txn_abandon(&x);
	return -1;
}
