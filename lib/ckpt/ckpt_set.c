/* ckpt_set.c: sharded checkpoints (docs/formats.md "Sharded checkpoints"): one rank's
 * part (its shard of each tensor with the logical rectangles it holds), the index of
 * HDF5 virtual datasets stitched from the parts, the check that an index's parts are all
 * there, and reading the slices one rank needs. Which rank writes what, and the
 * agreement between ranks around the steps, are the transaction's (txn.h). */
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

/* ---- sharded checkpoints: every rank writes its part, one index presents the tensors --------- */

#define PART_FORMAT "mt-checkpoint-part"

/* Does part pt write row i of its table? Its range, a tied copy never (the first stage
 * writes the embedding), a replicated parameter only on tensor-parallel rank 0. */
static int part_writes(const struct mt_ckpt_part *pt, int i)
{
	const struct mt_param *p = &pt->t->p[i];

	return i >= pt->p0 && i < pt->p1 && !p->tied_copy && (p->split != MT_SPLIT_NONE || pt->t->tp_rank == 0);
}

static int write_piece(hid_t grp, const struct mt_param *p, int tp_rank, const float *buf, struct mt_ckpt_wbehind *wb)
{
	hsize_t dims[2] = { (hsize_t)p->shape[0], (hsize_t)p->shape[1] };
	int64_t pieces[2][4], off[2];
	int k = mt_params_pieces(p, tp_rank, pieces), rc = -1;
	hid_t sp = H5Screate_simple(p->ndim, dims, NULL), d = -1;

	off[0] = pieces[0][0];
	off[1] = pieces[0][1];
	if (sp >= 0 && (d = H5Dcreate2(grp, p->name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) >= 0 &&
	    !mt_ckpt_attr_i64v(d, "global_shape", p->ndim, p->gshape) && !mt_ckpt_attr_i64v(d, "offset", p->ndim, off) &&
	    !mt_ckpt_attr_i64v(d, "pieces", 4 * k, &pieces[0][0]) &&
	    !mt_ckpt_attr_u64(d, XXH_ATTR, XXH3_64bits(buf, (size_t)p->numel * sizeof(float))) &&
	    !mt_ckpt_region_io(d, p->ndim, 0, 0, dims[0], p->ndim == 2 ? dims[1] : 1, (float *)buf, 1, wb))
		rc = 0;
	mt_ckpt_h5_close(&d);
	mt_ckpt_h5_close(&sp);
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
	hid_t fcpl = H5Pcreate(H5P_FILE_CREATE), fapl = mt_ckpt_h5_fapl_new(), f = -1, g = -1;
	const float *bufs[3] = { pt->w, pt->m, pt->v };
	struct mt_ckpt_wbehind wb;
	int rc = -1;

	if (!pt->w || !pt->m != !pt->v) {
		mt_ckpt_h5_close(&fcpl);
		mt_ckpt_h5_close(&fapl);
		return mt_err_set(err, MT_EXIT_USAGE, "internal: a checkpoint part without weights, or with one moment");
	}
	if (mt_ckpt_part_name(name, sizeof(name), pt->tp_rank, pt->pp_rank, pt->dp_rank, err) ||
	    (size_t)snprintf(file, sizeof(file), "%s/%s", tmpdir, name) >= sizeof(file)) {
		mt_ckpt_h5_close(&fcpl);
		mt_ckpt_h5_close(&fapl);
		return mt_err_set(err, MT_EXIT_IO, "checkpoint path too long: '%s'", tmpdir);
	}
	mt_ckpt_h5_quiet();
	gethostname(host, sizeof(host) - 1);
	if (fcpl >= 0)
		H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
	mt_atomic_step("checkpoint");
	f = fcpl < 0 || fapl < 0 ? -1 : H5Fcreate(file, H5F_ACC_EXCL, fcpl, fapl);
	mt_ckpt_h5_close(&fcpl);
	mt_ckpt_h5_close(&fapl);
	if (f < 0)
		return mt_ckpt_h5_fail(err, MT_EXIT_IO, "cannot create checkpoint part '%s'", file);
	if (mt_ckpt_attr_str(f, "format", PART_FORMAT) || mt_ckpt_attr_i64(f, "format_version", MT_CKPT_FORMAT_VERSION) ||
	    mt_ckpt_attr_i64(f, "iteration", iteration) || mt_ckpt_attr_i64(f, "rank", pt->rank) || mt_ckpt_attr_i64(f, "tp_rank", pt->tp_rank) ||
	    mt_ckpt_attr_i64(f, "pp_rank", pt->pp_rank) || mt_ckpt_attr_i64(f, "dp_rank", pt->dp_rank) || mt_ckpt_attr_i64(f, "world", pt->world) ||
	    mt_ckpt_attr_i64(f, "tp", pt->tp) || mt_ckpt_attr_i64(f, "pp", pt->pp) || mt_ckpt_attr_i64(f, "dp", pt->dp) ||
	    mt_ckpt_attr_str(f, "host", host) || mt_ckpt_attr_i64(f, "pid", (int64_t)getpid())) {
		mt_ckpt_h5_fail(err, MT_EXIT_IO, "cannot write checkpoint part '%s': attributes", file);
		goto out;
	}
	mt_ckpt_wb_open(&wb, f);
	if ((g = mt_ckpt_group_create(f, "optimizer")) < 0) {
		mt_ckpt_h5_fail(err, MT_EXIT_IO, "cannot write checkpoint part '%s': group 'optimizer'", file);
		goto out;
	}
	mt_ckpt_h5_close(&g);
	for (int k = 0; k < H5_GROUPS; k++) {
		if (!bufs[k])
			continue;
		if ((g = mt_ckpt_group_create(f, mt_ckpt_group_path[k])) < 0) {
			mt_ckpt_h5_fail(err, MT_EXIT_IO, "cannot write checkpoint part '%s': group '%s'", file, mt_ckpt_group_path[k]);
			goto out;
		}
		for (int i = 0; i < pt->t->n; i++) {
			const struct mt_param *p = &pt->t->p[i];
			if (!part_writes(pt, i))
				continue;
			mt_atomic_step("checkpoint");
			if (write_piece(g, p, pt->t->tp_rank, bufs[k] + (p->offset - pt->base), &wb)) {
				mt_ckpt_h5_fail(err, MT_EXIT_IO, "cannot write checkpoint part '%s': tensor '%s/%s'", file, mt_ckpt_group_path[k],
					p->name);
				goto out;
			}
		}
		mt_ckpt_h5_close(&g);
	}
	rc = 0;
out:
	mt_ckpt_h5_close(&g);
	if (H5Fclose(f) < 0 && rc == 0)
		rc = mt_ckpt_h5_fail(err, MT_EXIT_IO, "cannot write checkpoint part '%s'", file);
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
	struct mt_ckpt_names l;
	hid_t g;
	int rc = 0;

	if (H5Lexists(pf, mt_ckpt_group_path[grp], H5P_DEFAULT) <= 0) {
		mt_ckpt_h5_clear();
		return 0;
	}
	if ((g = H5Gopen2(pf, mt_ckpt_group_path[grp], H5P_DEFAULT)) < 0)
		return mt_ckpt_h5_fail(err, MT_EXIT_DATA, "checkpoint part '%s': group '%s'", file, mt_ckpt_group_path[grp]);
	if (mt_ckpt_list_links(g, &l)) {
		mt_ckpt_h5_close(&g);
		return mt_ckpt_h5_fail(err, MT_EXIT_DATA, "checkpoint part '%s': cannot list group '%s'", file, mt_ckpt_group_path[grp]);
	}
	for (size_t i = 0; i < l.n && !rc; i++) {
		const struct mt_param *p = mt_ckpt_table_find(index, lt->n, l.v[i]);
		hid_t d = -1;
		int64_t pc[8] = { 0 }, src = 0;
		int k;

		if (!p) {
			rc = mt_err_set(err, MT_EXIT_DATA, "checkpoint part '%s' holds tensor '%s/%s', which the model does not have",
					file, mt_ckpt_group_path[grp], l.v[i]);
			break;
		}
		if ((d = H5Dopen2(g, l.v[i], H5P_DEFAULT)) < 0) {
			rc = mt_ckpt_h5_fail(err, MT_EXIT_DATA, "checkpoint part '%s': tensor '%s/%s'", file, mt_ckpt_group_path[grp], l.v[i]);
			break;
		}
		k = mt_ckpt_read_i64v(d, "pieces", 8, pc) > 0 ? 2 : mt_ckpt_read_i64v(d, "pieces", 4, pc) > 0 ? 1 : 0;
		mt_ckpt_h5_close(&d);
		if (!k) {
			rc = mt_err_set(err, MT_EXIT_DATA, "checkpoint part '%s': tensor '%s/%s' has no pieces attribute", file,
					mt_ckpt_group_path[grp], l.v[i]);
			break;
		}
		for (int j = 0; j < k && !rc; j++) {
			struct vmap m = { shard, src, { pc[4 * j], pc[4 * j + 1], pc[4 * j + 2], pc[4 * j + 3] } };
			if (m.r[0] < 0 || m.r[1] < 0 || m.r[2] <= 0 || m.r[3] <= 0 || m.r[0] + m.r[2] > p->shape[0] ||
			    m.r[1] + m.r[3] > p->shape[1])
				rc = mt_err_set(err, MT_EXIT_DATA,
						"checkpoint part '%s': tensor '%s/%s' has a piece outside the model's shape", file,
						mt_ckpt_group_path[grp], l.v[i]);
			else if (vlist_add(&lists[grp * lt->n + (p - lt->p)], &m))
				rc = mt_err_set(err, MT_EXIT_IO, "out of memory");
			src += m.r[2];
		}
	}
	mt_ckpt_names_free(&l);
	mt_ckpt_h5_close(&g);
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
	    !mt_ckpt_attr_i64v(d, "global_shape", p->ndim, p->shape) && !mt_ckpt_attr_i64v(d, "offset", p->ndim, zero))
		rc = 0;
out:
	mt_ckpt_h5_close(&d);
	mt_ckpt_h5_close(&vs);
	mt_ckpt_h5_close(&dcpl);
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
	if (!(index = mt_ckpt_table_index(lt, err)))
		return -1;
	lists = calloc((size_t)H5_GROUPS * (size_t)lt->n, sizeof(*lists));
	bytes = calloc((size_t)nshards, sizeof(*bytes));
	if (!lists || !bytes) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto done;
	}
	mt_ckpt_h5_quiet();
	/* what every part holds, from the parts themselves (durable by now) */
	for (int i = 0; i < nshards; i++) {
		struct stat st;
		hid_t pf, pa = -1;

		if ((size_t)snprintf(pfile, sizeof(pfile), "%s/%s", tmpdir, shards[i]) >= sizeof(pfile) || stat(pfile, &st) != 0) {
			mt_err_errno(err, MT_EXIT_IO, "cannot index checkpoint part '%s'", pfile);
			goto done;
		}
		bytes[i] = (int64_t)st.st_size;
		if ((fapl = mt_ckpt_h5_fapl()) < 0 || (pf = H5Fopen(pfile, H5F_ACC_RDONLY, fapl)) < 0) {
			mt_ckpt_h5_close(&fapl);
			mt_ckpt_h5_fail(err, MT_EXIT_DATA, "cannot read checkpoint part '%s'", pfile);
			goto done;
		}
		mt_ckpt_h5_close(&fapl);
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
					   tmpdir, mt_ckpt_group_path[k], lt->p[i].name);
				goto done;
			}
	if ((size_t)snprintf(file, sizeof(file), "%s/model.h5", tmpdir) >= sizeof(file)) {
		mt_err_set(err, MT_EXIT_IO, "checkpoint path too long: '%s'", tmpdir);
		goto done;
	}
	fcpl = H5Pcreate(H5P_FILE_CREATE);
	fapl = mt_ckpt_h5_fapl_new();
	if (fcpl >= 0)
		H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
	mt_atomic_step("checkpoint");
	f = fcpl < 0 || fapl < 0 ? -1 : H5Fcreate(file, H5F_ACC_EXCL, fcpl, fapl);
	if (f < 0) {
		mt_ckpt_h5_fail(err, MT_EXIT_IO, "cannot create checkpoint '%s'", file);
		goto done;
	}
	if (mt_ckpt_state_attrs(f, s, have_opt) || mt_ckpt_attr_i64v(f, "shard_bytes", nshards, bytes) ||
	    mt_ckpt_attr_u64(f, "shards_xxh3", mt_ckpt_shards_hash(nshards, shards, bytes))) {
		mt_ckpt_h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s': attributes", file);
		goto done;
	}
	{
		hsize_t n = (hsize_t)nshards;
		if ((ty = mt_ckpt_vlen_string_type(H5T_CSET_UTF8)) < 0 || (sp = H5Screate_simple(1, &n, NULL)) < 0 ||
		    (a = H5Acreate2(f, "shards", ty, sp, H5P_DEFAULT, H5P_DEFAULT)) < 0 || H5Awrite(a, ty, shards) < 0) {
			mt_ckpt_h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s': attribute 'shards'", file);
			goto done;
		}
	}
	for (int k = 0; k < (have_opt ? H5_GROUPS : 1); k++) {
		if (k == 1) { /* the groups in the order a self-contained file has them */
			if ((g = mt_ckpt_group_create(f, "optimizer")) < 0 || mt_ckpt_attr_i64(g, "step", s->optimizer_step)) {
				mt_ckpt_h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s': group 'optimizer'", file);
				goto done;
			}
			mt_ckpt_h5_close(&g);
		}
		if ((g = mt_ckpt_group_create(f, mt_ckpt_group_path[k])) < 0) {
			mt_ckpt_h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s': group '%s'", file, mt_ckpt_group_path[k]);
			goto done;
		}
		for (int i = 0; i < lt->n; i++) {
			mt_atomic_step("checkpoint");
			if (write_virtual(g, &lt->p[i], &lists[k * lt->n + i], shards, mt_ckpt_group_path[k], NULL)) {
				mt_ckpt_h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s': tensor '%s/%s'", file, mt_ckpt_group_path[k],
					lt->p[i].name);
				goto done;
			}
		}
		mt_ckpt_h5_close(&g);
	}
	if (mt_ckpt_write_rng(f, s)) {
		mt_ckpt_h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s': dataset 'rng'", file);
		goto done;
	}
	rc = 0;
done:
	mt_ckpt_h5_close(&a);
	mt_ckpt_h5_close(&sp);
	mt_ckpt_h5_close(&ty);
	mt_ckpt_h5_close(&g);
	mt_ckpt_h5_close(&fcpl);
	mt_ckpt_h5_close(&fapl);
	if (f >= 0 && H5Fclose(f) < 0 && rc == 0)
		rc = mt_ckpt_h5_fail(err, MT_EXIT_IO, "cannot write checkpoint '%s'", file);
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
int mt_ckpt_check_parts(hid_t f, const char *file, int legacy, double *part_bytes, struct mt_err *err)
{
	hid_t a = -1, sp = -1, ty = -1;
	hssize_t n;
	char **names = NULL, dir[PATH_CAP], p[PATH_CAP];
	int64_t *bytes = NULL;
	int rc = -1;
	const char *slash = strrchr(file, '/');

	if (H5Aexists(f, "shards") <= 0) {
		mt_ckpt_h5_clear();
		return 0; /* a self-contained file */
	}
	snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - file) : 1, slash ? file : ".");
	if ((a = H5Aopen(f, "shards", H5P_DEFAULT)) < 0 || (sp = H5Aget_space(a)) < 0 ||
	    (n = H5Sget_simple_extent_npoints(sp)) <= 0 || n > (1 << 20) || (ty = mt_ckpt_vlen_string_type(H5T_CSET_UTF8)) < 0) {
		mt_ckpt_h5_fail(err, MT_EXIT_DATA, "cannot read checkpoint '%s': attribute 'shards'", file);
		goto out;
	}
	names = calloc((size_t)n, sizeof(*names));
	bytes = calloc((size_t)n, sizeof(*bytes));
	if (!names || !bytes) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out;
	}
	if (H5Aread(a, ty, names) < 0 || mt_ckpt_read_i64v(f, "shard_bytes", (int)n, bytes) <= 0) {
		mt_ckpt_h5_fail(err, MT_EXIT_DATA, "cannot read checkpoint '%s': attributes 'shards' and 'shard_bytes'", file);
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
		else if (!mt_ckpt_is_part_name(names[i]))
			rc = mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': part '%s' is not named as mt names parts", file, names[i]);
		else
			*part_bytes += (double)st.st_size;
	}
	if (!rc && !legacy) {
		uint64_t want = 0;
		int has = H5Aexists(f, "shards_xxh3") > 0;
		hid_t x = has ? H5Aopen(f, "shards_xxh3", H5P_DEFAULT) : -1;

		if (x < 0 || H5Aread(x, H5T_NATIVE_UINT64, &want) < 0 || want != mt_ckpt_shards_hash((int)n, names, bytes))
			rc = mt_ckpt_h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': the list of parts does not match its checksum", file);
		mt_ckpt_h5_close(&x);
		mt_ckpt_h5_clear();
	}
	/* the parts' structure, before HDF5 follows the virtual datasets into them */
	for (hssize_t i = 0; i < n && !rc; i++) {
		hid_t fapl = mt_ckpt_h5_fapl(), pf;
		struct mt_ckpt_walk w;

		if ((size_t)snprintf(p, sizeof(p), "%s/%s", dir, names[i]) >= sizeof(p))
			mt_ckpt_h5_close(&fapl);
		pf = fapl < 0 ? -1 : H5Fopen(p, H5F_ACC_RDONLY, fapl);
		mt_ckpt_h5_close(&fapl);
		if (pf < 0) {
			rc = mt_ckpt_h5_fail(err, MT_EXIT_DATA, "cannot read checkpoint part '%s'", p);
			break;
		}
		rc = mt_ckpt_walk_file(pf, p, 1, &w, err);
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
	mt_ckpt_h5_close(&ty);
	mt_ckpt_h5_close(&sp);
	mt_ckpt_h5_close(&a);
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
		if (have > 0 && mt_ckpt_region_io(d, lp->ndim, (hsize_t)r0, (hsize_t)pieces[j][1], (hsize_t)have, (hsize_t)cols, out, 0, NULL))
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
		 H5Tget_order(ty) == H5T_ORDER_LE && H5Sget_simple_extent_npoints(sp) == n && mt_ckpt_read_xxh(sd, &want) == 1 &&
		 XXH3_64bits(dst, (size_t)n * sizeof(float)) == want;

	mt_ckpt_h5_close(&ty);
	mt_ckpt_h5_close(&sp);
	mt_ckpt_h5_clear();
	return ok;
}

/* verify_read for a virtual dataset d: when the pieces of lp lie in one part's dataset,
 * that dataset against what was read. */
static int verify_read_virtual(hid_t d, const char *file, const struct mt_param *lp, int tp_rank, const float *dst,
			       struct mt_ckpt_vcache *vc)
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

		if (mt_ckpt_vmap_at(dcpl, i, s0, e0, fname, sizeof(fname), dname, sizeof(dname)))
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
	if ((pf = mt_ckpt_part_open(dir, fname, pfile, sizeof(pfile))) >= 0 &&
	    (pd = H5Dopen2(pf, strchr(one, ':') + 1, H5P_DEFAULT)) >= 0 && verify_read(pd, dst, lp->numel)) {
		mt_ckpt_vcache_add(vc, one);
		ok = 1;
	}
out:
	mt_ckpt_h5_close(&pd);
	if (pf >= 0)
		H5Fclose(pf);
	mt_ckpt_h5_close(&dcpl);
	mt_ckpt_h5_clear();
	return ok;
}

/* After read_shard: the checksums behind what was read (the parts holding its pieces, or
 * the whole dataset of a self-contained file, once per load), and no NaN or infinity in
 * it. Where what was read is one whole stored dataset, its own checksum suffices;
 * otherwise the stored datasets it came from are read again and checked whole. */
static int verify_slices(hid_t d, const struct mt_param *lp, int tp_rank, const struct mt_param *gp, const float *dst,
			 const char *file, const char *gpath, int legacy, struct mt_ckpt_vcache *vc, struct mt_err *err)
{
	char path[512], key[600];
	int64_t at;

	snprintf(path, sizeof(path), "%s/%s", gpath, gp->name);
	if (mt_ckpt_is_virtual(d)) {
		int64_t pieces[2][4];
		int k = verify_read_virtual(d, file, lp, tp_rank, dst, vc) ? 0 : mt_params_pieces(lp, tp_rank, pieces);

		for (int j = 0; j < k; j++) {
			int64_t r0 = pieces[j][0], rows = pieces[j][2];
			if (r0 >= gp->shape[0])
				continue;
			if (rows > gp->shape[0] - r0)
				rows = gp->shape[0] - r0;
			if (mt_ckpt_verify_virtual(d, file, path, legacy, (hsize_t)r0, (hsize_t)pieces[j][1], (hsize_t)rows,
					   (hsize_t)(lp->ndim == 2 ? pieces[j][3] : 1), vc, NULL, err))
				return -1;
		}
	} else {
		snprintf(key, sizeof(key), ".:%s", path);
		if (!mt_ckpt_vcache_has(vc, key)) {
			if (!(lp->numel == gp->numel && verify_read(d, dst, lp->numel)) &&
			    mt_ckpt_verify_plain(d, file, path, legacy, NULL, err))
				return -1;
			mt_ckpt_vcache_add(vc, key);
		}
	}
	if ((at = mt_ckpt_first_nonfinite(dst, lp->numel)) >= 0)
		return mt_ckpt_nonfinite_err(err, file, path, dst, at);
	return 0;
}

int mt_ckpt_load_part(const char *iterdir, const struct mt_params *ct, const struct mt_params *local, float *w,
		      float *m, float *v, int m0, int m1, unsigned flags, struct mt_err *err)
{
	char file[PATH_CAP];
	const struct mt_param **index;
	float *bufs[3] = { w, m, v };
	struct mt_ckpt_info ci;
	struct mt_ckpt_vcache vc = { 0 };
	hid_t f, g = -1;
	int rc = 0;

	if (!w || !m != !v)
		return mt_err_set(err, MT_EXIT_USAGE, "internal: mt_ckpt_load_part without weights, or with one moment");
	if (!(index = mt_ckpt_table_index(ct, err)))
		return -1;
	if ((f = mt_ckpt_open_info(iterdir, file, sizeof(file), &ci, err)) < 0) {
		free(index);
		return -1;
	}
	for (int k = 0; k < H5_GROUPS && !rc; k++) {
		struct mt_ckpt_names l;

		if (!bufs[k])
			continue;
		if (H5Lexists(f, k ? "optimizer" : "model", H5P_DEFAULT) <= 0 || H5Lexists(f, mt_ckpt_group_path[k], H5P_DEFAULT) <= 0 ||
		    (g = H5Gopen2(f, mt_ckpt_group_path[k], H5P_DEFAULT)) < 0) {
			mt_ckpt_h5_clear();
			rc = k ? mt_err_set(err, MT_EXIT_DATA,
					    "checkpoint '%s' holds no optimizer state (group '%s'): load the weights only (--no-load-optim)",
					    file, mt_ckpt_group_path[k])
			       : mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': group '%s' is missing", file, mt_ckpt_group_path[k]);
			break;
		}
		/* the checkpoint's tensors are the model's, with their global shapes */
		for (int i = 0; i < ct->n && !rc; i++) {
			const struct mt_param *p = &ct->p[i];
			hid_t d = -1, sp = -1;
			hsize_t dims[H5S_MAX_RANK];
			int nd = -1;

			if (H5Lexists(g, p->name, H5P_DEFAULT) <= 0) {
				mt_ckpt_h5_clear();
				rc = mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s/%s' is missing", file, mt_ckpt_group_path[k],
						p->name);
				break;
			}
			if ((d = H5Dopen2(g, p->name, H5P_DEFAULT)) < 0 || (sp = H5Dget_space(d)) < 0 ||
			    (nd = H5Sget_simple_extent_ndims(sp)) < 0 || H5Sget_simple_extent_dims(sp, dims, NULL) < 0)
				rc = mt_ckpt_h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s/%s' is not a readable dataset", file,
					     mt_ckpt_group_path[k], p->name);
			else if (nd != p->ndim || (int64_t)dims[0] != p->shape[0] || (nd == 2 && (int64_t)dims[1] != p->shape[1])) {
				char a[128], b[128];
				int64_t have[2] = { (int64_t)dims[0], nd == 2 ? (int64_t)dims[1] : 0 };
				mt_ckpt_fmt_shape(a, sizeof(a), nd, have);
				mt_ckpt_fmt_shape(b, sizeof(b), p->ndim, p->shape);
				rc = mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': tensor '%s/%s' has shape %s, the model expects %s",
						file, mt_ckpt_group_path[k], p->name, a, b);
			}
			mt_ckpt_h5_close(&sp);
			mt_ckpt_h5_close(&d);
		}
		if (!rc && !(flags & MT_CKPT_ALLOW_EXTRA)) {
			if (mt_ckpt_list_links(g, &l)) {
				rc = mt_ckpt_h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': cannot list group '%s'", file, mt_ckpt_group_path[k]);
			} else {
				for (size_t i = 0; !rc && i < l.n; i++)
					if (!mt_ckpt_table_find(index, ct->n, l.v[i]))
						rc = mt_err_set(err, MT_EXIT_DATA,
								"checkpoint '%s' holds tensor '%s/%s', which the model does not have (another architecture? compare the checkpoint's config)",
								file, mt_ckpt_group_path[k], l.v[i]);
				mt_ckpt_names_free(&l);
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
				rc = mt_ckpt_h5_fail(err, MT_EXIT_DATA, "checkpoint '%s': cannot read tensor '%s/%s'", file, mt_ckpt_group_path[k],
					     gp->name);
			if (!rc)
				rc = verify_slices(d, lp, local->tp_rank, gp, bufs[k] + lp->offset, file, mt_ckpt_group_path[k], ci.legacy, &vc, err);
			mt_ckpt_h5_close(&d);
		}
		mt_ckpt_h5_close(&g);
	}
	mt_ckpt_h5_close(&g);
	mt_ckpt_vcache_free(&vc);
	H5Fclose(f);
	free(index);
	return rc;
}
