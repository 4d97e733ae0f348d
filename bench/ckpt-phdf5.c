/* bench/ckpt-phdf5.c: write the tensors of an mt sharded checkpoint again, each MPI rank
 * its own slices, in one of three layouts, and time it:
 *
 *   files        every rank its own HDF5 file (serial HDF5 calls, one writer a file): the
 *                layout mt uses, without mt's checks, checksums and index
 *   independent  one file through parallel HDF5 (MPI-IO), every rank writing its slices of
 *                each logical tensor with independent transfers
 *   collective   the same with collective transfers (MPI-IO two-phase I/O)
 *
 *   mpiexec -n N ckpt-phdf5 MODE ITERDIR OUT
 *
 * ITERDIR is an iteration directory that mt-train wrote with N ranks
 * (`iter_0000001`): the index model.h5 gives the logical tensors (group, name, global
 * shape), rank r's part (the one whose attribute `rank` is r) the rectangles that rank
 * owns (attribute `pieces`, docs/formats.md "Sharded checkpoints"); one process's
 * self-contained model.h5 is every tensor whole. OUT is the file to
 * write (files: OUT.rankN.h5). The data are a pattern from one buffer of the largest
 * slice (no compression anywhere, so the values do not change the speed). Every rank
 * fsyncs what it wrote (one file: rank 0 after the close); the time runs from a barrier
 * before the create to a barrier after the fsyncs. Rank 0 prints one line:
 *
 *   MODE RANKS MB SECONDS MB/s BARRIER_MS
 *
 * BARRIER_MS is one MPI_Barrier's latency, measured before: every collective step of
 * parallel HDF5 (creating a dataset, a collective write) costs at least that, and ranks
 * that outnumber the cores make it large (MPICH's ranks poll while they wait).
 *
 * Needs parallel HDF5 built for the MPI that runs it; on Debian for MPICH:
 *   apt-get install libhdf5-mpich-dev
 *   cc -O2 -o ckpt-phdf5 bench/ckpt-phdf5.c $(pkg-config --cflags --libs hdf5-mpich)
 * (bench/ckpt.sh builds and runs it where pkg-config knows hdf5-mpich.) */
#include <fcntl.h>
#include <glob.h>
#include <hdf5.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef H5_HAVE_PARALLEL
#error "ckpt-phdf5 needs parallel HDF5 (pkg-config hdf5-mpich)"
#endif

enum { FILES, INDEPENDENT, COLLECTIVE };

static const char *const groups[] = { "model", "optimizer/exp_avg", "optimizer/exp_avg_sq" };
#define NGROUPS 3

struct tensor {
	char group[32], name[256];
	int nd;
	hsize_t gdims[2];   /* the logical shape */
	int k;              /* this rank's rectangles of it: 0 (none), 1 or 2 */
	int64_t pieces[2][4];
	hsize_t sdims[2];   /* this rank's shard: rectangles stacked by rows */
};

static struct tensor *ts;
static int nts, cap;
static int rank, nranks;

static void die(const char *fmt, const char *a)
{
	fprintf(stderr, "ckpt-phdf5: rank %d: ", rank);
	fprintf(stderr, fmt, a);
	fputc('\n', stderr);
	MPI_Abort(MPI_COMM_WORLD, 1);
	exit(1);
}

static herr_t add_name(hid_t g, const char *name, const H5L_info_t *info, void *group)
{
	(void)g, (void)info;
	if (nts == cap && !(ts = realloc(ts, (size_t)(cap = cap ? 2 * cap : 256) * sizeof(*ts))))
		die("out of memory%s", "");
	memset(&ts[nts], 0, sizeof(ts[nts]));
	snprintf(ts[nts].group, sizeof(ts[nts].group), "%s", (const char *)group);
	snprintf(ts[nts].name, sizeof(ts[nts].name), "%s", name);
	nts++;
	return 0;
}

/* The logical tensors, in the same order on every rank (by name within each group). */
static void read_index(const char *iterdir)
{
	char path[4096];
	hid_t f;

	snprintf(path, sizeof(path), "%s/model.h5", iterdir);
	if ((f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0)
		die("cannot open the index '%s'", path);
	for (int g = 0; g < NGROUPS; g++) {
		int first = nts;
		hid_t gid;
		if (H5Lexists(f, groups[g], H5P_DEFAULT) <= 0)
			continue;
		if ((gid = H5Gopen2(f, groups[g], H5P_DEFAULT)) < 0 ||
		    H5Literate(gid, H5_INDEX_NAME, H5_ITER_INC, NULL, add_name, (void *)groups[g]) < 0)
			die("cannot list group '%s' of the index", groups[g]);
		for (int i = first; i < nts; i++) {
			hid_t d = H5Dopen2(gid, ts[i].name, H5P_DEFAULT), sp = d < 0 ? -1 : H5Dget_space(d);
			if (sp < 0 || (ts[i].nd = H5Sget_simple_extent_ndims(sp)) < 1 || ts[i].nd > 2)
				die("tensor '%s' of the index is not 1-D or 2-D", ts[i].name);
			H5Sget_simple_extent_dims(sp, ts[i].gdims, NULL);
			H5Sclose(sp);
			H5Dclose(d);
		}
		H5Gclose(gid);
	}
	H5Fclose(f);
}

/* This rank's rectangles of every logical tensor, from its part. */
static void read_part(const char *iterdir)
{
	char pat[4096];
	glob_t gl;
	hid_t f = -1;

	snprintf(pat, sizeof(pat), "%s/model-tp*-pp*-dp*.h5", iterdir);
	if (glob(pat, 0, NULL, &gl) != 0) {
		/* one process wrote a self-contained model.h5: it owns every tensor whole */
		if (nranks != 1)
			die("no checkpoint parts match '%s'", pat);
		for (int i = 0; i < nts; i++) {
			ts[i].k = 1;
			ts[i].pieces[0][0] = ts[i].pieces[0][1] = 0;
			ts[i].pieces[0][2] = (int64_t)ts[i].gdims[0];
			ts[i].pieces[0][3] = ts[i].nd == 2 ? (int64_t)ts[i].gdims[1] : 1;
			memcpy(ts[i].sdims, ts[i].gdims, sizeof(ts[i].sdims));
		}
		return;
	}
	for (size_t i = 0; i < gl.gl_pathc && f < 0; i++) {
		long long r = -1;
		hid_t pf = H5Fopen(gl.gl_pathv[i], H5F_ACC_RDONLY, H5P_DEFAULT), a;
		if (pf < 0)
			die("cannot open part '%s'", gl.gl_pathv[i]);
		if ((a = H5Aopen(pf, "rank", H5P_DEFAULT)) < 0 || H5Aread(a, H5T_NATIVE_LLONG, &r) < 0)
			die("part '%s' has no attribute 'rank'", gl.gl_pathv[i]);
		H5Aclose(a);
		if (r == rank)
			f = pf;
		else
			H5Fclose(pf);
	}
	if (f < 0)
		die("no part of '%s' was written by this rank (run with the checkpoint's number of ranks)", iterdir);
	globfree(&gl);
	for (int i = 0; i < nts; i++) {
		char path[512];
		hid_t d, a, sp;
		hssize_t n;
		snprintf(path, sizeof(path), "%s/%s", ts[i].group, ts[i].name);
		if (H5Lexists(f, ts[i].group, H5P_DEFAULT) <= 0 || H5Lexists(f, path, H5P_DEFAULT) <= 0)
			continue; /* another rank's */
		if ((d = H5Dopen2(f, path, H5P_DEFAULT)) < 0 || (a = H5Aopen(d, "pieces", H5P_DEFAULT)) < 0 ||
		    (sp = H5Aget_space(a)) < 0 || ((n = H5Sget_simple_extent_npoints(sp)) != 4 && n != 8) ||
		    H5Aread(a, H5T_NATIVE_INT64, ts[i].pieces) < 0)
			die("part tensor '%s' has no attribute 'pieces' of 4 or 8 integers", path);
		ts[i].k = (int)(n / 4);
		H5Sclose(sp);
		H5Aclose(a);
		sp = H5Dget_space(d);
		H5Sget_simple_extent_dims(sp, ts[i].sdims, NULL);
		H5Sclose(sp);
		H5Dclose(d);
	}
	H5Fclose(f);
}

static hsize_t numel(const hsize_t *dims, int nd)
{
	return nd == 2 ? dims[0] * dims[1] : dims[0];
}

static hid_t group_make(hid_t f, const char *path)
{
	hid_t g;

	if (H5Lexists(f, path, H5P_DEFAULT) > 0)
		return H5Gopen2(f, path, H5P_DEFAULT);
	if (strchr(path, '/')) { /* optimizer/... : the parent first */
		char parent[64];
		snprintf(parent, sizeof(parent), "%.*s", (int)(strchr(path, '/') - path), path);
		if (H5Lexists(f, parent, H5P_DEFAULT) <= 0 && (g = H5Gcreate2(f, parent, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) >= 0)
			H5Gclose(g);
	}
	return H5Gcreate2(f, path, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
}

static void sync_file(const char *path)
{
	int fd = open(path, O_WRONLY);

	if (fd < 0 || fsync(fd) != 0)
		die("cannot fsync '%s'", path);
	close(fd);
}

int main(int argc, char **argv)
{
	int mode;
	char out[4096];
	hid_t fapl, f, dxpl = H5P_DEFAULT, dcpl;
	float *buf;
	hsize_t most = 1;
	long long mine = 0, all = 0;
	double t0, t1, bar;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	if (argc != 4)
		die("usage: ckpt-phdf5 files|independent|collective ITERDIR OUT%s", "");
	if (!strcmp(argv[1], "files"))
		mode = FILES;
	else if (!strcmp(argv[1], "independent"))
		mode = INDEPENDENT;
	else if (!strcmp(argv[1], "collective"))
		mode = COLLECTIVE;
	else
		die("mode must be files, independent or collective, not '%s'", argv[1]);
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	read_index(argv[2]);
	read_part(argv[2]);
	for (int i = 0; i < nts; i++)
		if (ts[i].k && numel(ts[i].sdims, ts[i].nd) > most)
			most = numel(ts[i].sdims, ts[i].nd);
	if (!(buf = malloc(most * sizeof(float))))
		die("out of memory for a slice%s", "");
	for (hsize_t j = 0; j < most; j++)
		buf[j] = (float)(j % 1000) * 1e-3f;

	fapl = H5Pcreate(H5P_FILE_ACCESS);
	H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_LATEST); /* as mt writes */
	if (mode == FILES) {
		snprintf(out, sizeof(out), "%s.rank%d.h5", argv[3], rank);
	} else {
		snprintf(out, sizeof(out), "%s", argv[3]);
		H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL);
		dxpl = H5Pcreate(H5P_DATASET_XFER);
		H5Pset_dxpl_mpio(dxpl, mode == COLLECTIVE ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT);
	}
	/* contiguous, allocated at creation (parallel HDF5 requires it), never filled: every
	 * byte is written once, as in mt's parts */
	dcpl = H5Pcreate(H5P_DATASET_CREATE);
	H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
	H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);

	MPI_Barrier(MPI_COMM_WORLD);
	bar = MPI_Wtime();
	for (int i = 0; i < 20; i++)
		MPI_Barrier(MPI_COMM_WORLD);
	bar = (MPI_Wtime() - bar) / 20;
	MPI_Barrier(MPI_COMM_WORLD);
	t0 = MPI_Wtime();
	if ((f = H5Fcreate(out, H5F_ACC_TRUNC, H5P_DEFAULT, fapl)) < 0)
		die("cannot create '%s'", out);
	for (int i = 0; i < nts; i++) {
		struct tensor *t = &ts[i];
		hid_t g, d, fs, ms;
		hsize_t n;
		if (mode == FILES && !t->k)
			continue;
		if ((g = group_make(f, t->group)) < 0)
			die("cannot create group '%s'", t->group);
		fs = H5Screate_simple(t->nd, mode == FILES ? t->sdims : t->gdims, NULL);
		/* one file: every rank creates every dataset (metadata is collective) */
		if ((d = H5Dcreate2(g, t->name, H5T_IEEE_F32LE, fs, H5P_DEFAULT, dcpl, H5P_DEFAULT)) < 0)
			die("cannot create dataset '%s'", t->name);
		n = t->k ? numel(t->sdims, t->nd) : 1;
		ms = H5Screate_simple(1, &n, NULL);
		if (!t->k) {
			H5Sselect_none(fs);
			H5Sselect_none(ms);
		} else if (mode != FILES) {
			for (int p = 0; p < t->k; p++) {
				hsize_t start[2] = { (hsize_t)t->pieces[p][0], (hsize_t)t->pieces[p][1] };
				hsize_t count[2] = { (hsize_t)t->pieces[p][2], (hsize_t)t->pieces[p][3] };
				H5Sselect_hyperslab(fs, p ? H5S_SELECT_OR : H5S_SELECT_SET, start, NULL, count, NULL);
			}
		}
		if ((t->k || mode == COLLECTIVE) && H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, dxpl, buf) < 0)
			die("cannot write dataset '%s'", t->name);
		mine += t->k ? (long long)(n * sizeof(float)) : 0;
		H5Sclose(ms);
		H5Sclose(fs);
		H5Dclose(d);
		H5Gclose(g);
	}
	if (H5Fclose(f) < 0)
		die("cannot close '%s'", out);
	if (mode == FILES || rank == 0)
		sync_file(out);
	MPI_Barrier(MPI_COMM_WORLD);
	t1 = MPI_Wtime();
	MPI_Reduce(&mine, &all, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	if (rank == 0)
		printf("%s %d %.0f %.3f %.0f %.3f\n", argv[1], nranks, all / 1e6, t1 - t0, all / 1e6 / (t1 - t0), 1e3 * bar);
	free(buf);
	H5Pclose(dcpl);
	H5Pclose(fapl);
	if (dxpl != H5P_DEFAULT)
		H5Pclose(dxpl);
	MPI_Finalize();
	return 0;
}
