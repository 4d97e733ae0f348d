/* dist.c: process bootstrap, rank layout and bounded collectives over MPI (see dist.h).
 *
 * Only the MPI standard (3.0: nonblocking collectives) is used, so MPICH and Open MPI
 * both work. Built without MPI (MT_NO_MPI), a launched run is refused and a world of one
 * works as before. It holds no training logic: what is exchanged and in which order is
 * the trainer's business (dp.c). */
#include "dist/dist.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef MT_NO_MPI
#include <mpi.h>
#endif

#define TAG_AGREE 4242

#ifndef MT_NO_MPI
/* the deadlines of the MPI waits below */
static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
#endif

int mt_dist_launched(void)
{
	static const char *const vars[] = { "PMI_SIZE", "PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE",
					    "MPI_LOCALNRANKS", "SLURM_STEP_ID", NULL };

	for (int i = 0; vars[i]; i++)
		if (getenv(vars[i]))
			return 1;
	return 0;
}

void mt_dist_coords(int world, int tp, int pp, int r, int *tp_rank, int *dp_rank, int *pp_rank)
{
	int dp = world / (tp * pp);

	*tp_rank = r % tp;
	*dp_rank = (r / tp) % dp;
	*pp_rank = r / (tp * dp);
}

int mt_dist_layout(struct mt_dist *d, int tp, int pp, struct mt_err *err)
{
	if (tp < 1 || pp < 1 || d->world % (tp * pp))
		return mt_err_set(err, MT_EXIT_USAGE,
				  "world size %d is not a multiple of tensor x pipeline parallel size %d x %d", d->world, tp, pp);
	d->tp = tp;
	d->pp = pp;
	d->dp = d->world / (tp * pp);
	mt_dist_coords(d->world, tp, pp, d->rank, &d->tp_rank, &d->dp_rank, &d->pp_rank);
	return 0;
}

static const struct mt_dist_ops ops;

#ifdef MT_NO_MPI

int mt_dist_init(struct mt_dist *d, struct mt_err *err)
{
	memset(d, 0, sizeof(*d));
	d->ops = &ops;
	d->world = d->local_world = d->tp = d->pp = d->dp = 1;
	if (mt_dist_launched() && getenv("SLURM_NTASKS") && atoi(getenv("SLURM_NTASKS")) > 1)
		return mt_err_set(err, MT_EXIT_USAGE, "started as one of several tasks, but mt was built without MPI");
	if (mt_dist_launched() && getenv("PMI_SIZE") && atoi(getenv("PMI_SIZE")) > 1)
		return mt_err_set(err, MT_EXIT_USAGE, "started by mpiexec, but mt was built without MPI");
	return 0;
}
void mt_dist_finalize(struct mt_dist *d) { (void)d; }
void mt_dist_abort(struct mt_dist *d, int code) { (void)d; (void)code; }
int mt_dist_agree(struct mt_dist *d, int64_t step, int flag, int *max_flag, struct mt_err *err)
{
	*max_flag = flag;
	return 0;
}
int mt_dist_barrier(struct mt_dist *d, const char *what, int64_t step, struct mt_err *err) { return 0; }
int mt_dist_alltoallv_f32(struct mt_dist *d, const float *send, const int64_t *counts, const int64_t *displs,
			  float *recv, int64_t my_count, const char *what, int64_t step, struct mt_err *err)
{
	memcpy(recv, send + displs[0], (size_t)counts[0] * sizeof(float));
	return 0;
}
int mt_dist_allgatherv_f32(struct mt_dist *d, float *buf, const int64_t *counts, const int64_t *displs,
			   const char *what, int64_t step, struct mt_err *err) { return 0; }
int mt_dist_allgatherv_f64(struct mt_dist *d, double *buf, const int64_t *counts, const int64_t *displs,
			   const char *what, int64_t step, struct mt_err *err) { return 0; }
int mt_dist_gatherv_f32(struct mt_dist *d, float *buf, const int64_t *counts, const int64_t *displs,
			const char *what, int64_t step, struct mt_err *err) { return 0; }
int mt_dist_allreduce_f64(struct mt_dist *d, double *buf, int64_t n, int max, const char *what, int64_t step,
			  struct mt_err *err) { return 0; }
int mt_dist_bcast(struct mt_dist *d, void *buf, int64_t n, int root, const char *what, struct mt_err *err) { return 0; }
int mt_dist_allreduce_f32(struct mt_dist *d, float *buf, int64_t n, const char *what, int64_t step,
			  struct mt_err *err) { return 0; }
int mt_dist_reduce_scatter_f32(struct mt_dist *d, const float *send, const int64_t *counts, float *recv,
			       const char *what, int64_t step, struct mt_err *err)
{
	memcpy(recv, send, (size_t)counts[0] * sizeof(float));
	return 0;
}

#else

struct impl {
	MPI_Comm comm;          /* a duplicate of the world: our messages never meet a library's */
	int *cnt, *dsp, *rcnt, *rdsp; /* int counts for MPI, world entries each */
};

#define COMM(d) (((struct impl *)(d)->impl)->comm)

int mt_dist_init(struct mt_dist *d, struct mt_err *err)
{
	struct impl *im;
	MPI_Comm local;
	const char *nt = getenv("SLURM_NTASKS"), *step = getenv("SLURM_STEP_ID");
	int provided;

	memset(d, 0, sizeof(*d));
	d->ops = &ops;
	d->world = d->local_world = d->tp = d->pp = d->dp = 1;
	if (!mt_dist_launched())
		return 0;
	if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
		return mt_err_set(err, MT_EXIT_IO, "MPI_Init failed");
	d->active = 1;
	im = calloc(1, sizeof(*im));
	if (!im)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	d->impl = im;
	MPI_Comm_dup(MPI_COMM_WORLD, &im->comm);
	MPI_Comm_set_errhandler(im->comm, MPI_ERRORS_RETURN);
	MPI_Comm_rank(im->comm, &d->rank);
	MPI_Comm_size(im->comm, &d->world);
	MPI_Comm_split_type(im->comm, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &local);
	MPI_Comm_rank(local, &d->local_rank);
	MPI_Comm_size(local, &d->local_world);
	MPI_Comm_free(&local);
	d->dp = d->world;
	im->cnt = calloc((size_t)d->world * 4, sizeof(int));
	if (!im->cnt)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	im->dsp = im->cnt + d->world;
	im->rcnt = im->dsp + d->world;
	im->rdsp = im->rcnt + d->world;
	if (d->world == 1 && step && nt && atoi(nt) > 1)
		return mt_err_set(err, MT_EXIT_USAGE,
				  "srun started %s tasks but MPI sees each as a world of one: launch with srun --mpi=pmi2 "
				  "(or the PMI your MPI was built with)", nt);
	return 0;
}

void mt_dist_finalize(struct mt_dist *d)
{
	struct impl *im = d->impl;

	if (!d->active)
		return;
	if (im) {
		MPI_Comm_free(&im->comm);
		free(im->cnt);
		free(im);
		d->impl = NULL;
	}
	MPI_Finalize();
	d->active = 0;
}

void mt_dist_abort(struct mt_dist *d, int code)
{
	if (d->active && d->world > 1) {
		struct timespec ts = { 1, 0 };
		fflush(stdout);
		fflush(stderr);
		/* let the launcher forward the message before it tears the job down */
		nanosleep(&ts, NULL);
		MPI_Abort(MPI_COMM_WORLD, code);
	}
}

/* Poll until the requests complete or the deadline passes; spin briefly, then sleep in
 * short naps so that a waiting rank leaves the cores to those still computing. */
static int wait_all(struct mt_dist *d, int n, MPI_Request *r, double timeout, const char *what, int64_t step,
		    struct mt_err *err)
{
	double t0 = now();
	int done = 0;

	for (long spins = 0;; spins++) {
		done = 1;
		for (int i = 0; i < n; i++) {
			int fl = 1;
			if (r[i] != MPI_REQUEST_NULL && MPI_Test(&r[i], &fl, MPI_STATUS_IGNORE) != MPI_SUCCESS)
				return mt_err_set(err, MT_EXIT_IO, "rank %d: %s at step %lld failed in MPI", d->rank, what,
						  (long long)step);
			done &= fl;
		}
		if (done)
			return 0;
		if (timeout > 0 && now() - t0 > timeout)
			return mt_err_set(err, MT_EXIT_IO,
					  "rank %d: %s at step %lld did not complete within %.0f s: another rank died or hangs",
					  d->rank, what, (long long)step, timeout);
		if (spins > 2000) {
			struct timespec ts = { 0, 100000 };
			nanosleep(&ts, NULL);
		}
	}
}

int mt_dist_agree(struct mt_dist *d, int64_t step, int flag, int *max_flag, struct mt_err *err)
{
	int64_t mine[2] = { step, flag };

	*max_flag = flag;
	if (d->world == 1)
		return 0;
	if (d->rank == 0) {
		int64_t *got = calloc((size_t)d->world * 2, sizeof(int64_t));
		MPI_Request *r = calloc((size_t)d->world, sizeof(MPI_Request));
		double t0 = now();
		int64_t out;
		int rc = 0;

		if (!got || !r) {
			free(got), free(r);
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
		}
		for (int q = 1; q < d->world; q++)
			MPI_Irecv(got + 2 * q, 2, MPI_INT64_T, q, TAG_AGREE, COMM(d), &r[q]);
		for (long spins = 0;; spins++) {
			int all = 1, missing = -1;
			for (int q = 1; q < d->world; q++) {
				int fl = r[q] == MPI_REQUEST_NULL;
				if (!fl)
					MPI_Test(&r[q], &fl, MPI_STATUS_IGNORE);
				if (!fl) {
					all = 0;
					if (missing < 0)
						missing = q;
				}
			}
			if (all)
				break;
			if (d->timeout > 0 && now() - t0 > d->timeout) {
				free(got), free(r);
				return mt_err_set(err, MT_EXIT_IO, "rank %d did not reach step %lld within %.0f s", missing,
						  (long long)step, d->timeout);
			}
			if (spins > 2000) {
				struct timespec ts = { 0, 100000 };
				nanosleep(&ts, NULL);
			}
		}
		for (int q = 1; q < d->world; q++) {
			if (got[2 * q] != step && !rc)
				rc = mt_err_set(err, MT_EXIT_IO, "rank %d is at step %lld, rank 0 at step %lld", q,
						(long long)got[2 * q], (long long)step);
			if (got[2 * q + 1] > *max_flag)
				*max_flag = (int)got[2 * q + 1];
		}
		out = rc ? -1 : *max_flag;
		for (int q = 1; q < d->world; q++)
			MPI_Isend(&out, 1, MPI_INT64_T, q, TAG_AGREE, COMM(d), &r[q]);
		if (!rc)
			rc = wait_all(d, d->world - 1, r + 1, d->timeout, "the step agreement", step, err);
		else
			wait_all(d, d->world - 1, r + 1, d->timeout, "the step agreement", step, &(struct mt_err){ 0 });
		free(got), free(r);
		return rc;
	} else {
		MPI_Request r[2];
		int64_t out = 0;
		double t0 = now();

		MPI_Isend(mine, 2, MPI_INT64_T, 0, TAG_AGREE, COMM(d), &r[0]);
		MPI_Irecv(&out, 1, MPI_INT64_T, 0, TAG_AGREE, COMM(d), &r[1]);
		for (long spins = 0;; spins++) {
			int f0 = 1, f1 = 1;
			if (r[0] != MPI_REQUEST_NULL)
				MPI_Test(&r[0], &f0, MPI_STATUS_IGNORE);
			if (r[1] != MPI_REQUEST_NULL)
				MPI_Test(&r[1], &f1, MPI_STATUS_IGNORE);
			if (f0 && f1)
				break;
			/* twice the timeout: rank 0 names a missing rank first, when it can */
			if (d->timeout > 0 && now() - t0 > 2 * d->timeout)
				return mt_err_set(err, MT_EXIT_IO, "rank 0 did not reach step %lld within %.0f s", (long long)step,
						  2 * d->timeout);
			if (spins > 2000) {
				struct timespec ts = { 0, 100000 };
				nanosleep(&ts, NULL);
			}
		}
		if (out < 0)
			return mt_err_set(err, MT_EXIT_IO, "rank %d: the ranks disagree on the step (%lld here)", d->rank,
					  (long long)step);
		*max_flag = (int)out;
		return 0;
	}
}

int mt_dist_barrier(struct mt_dist *d, const char *what, int64_t step, struct mt_err *err)
{
	MPI_Request r;

	if (d->world == 1)
		return 0;
	MPI_Ibarrier(COMM(d), &r);
	return wait_all(d, 1, &r, d->timeout, what, step, err);
}

/* int counts and displacements for MPI from 64-bit ones */
static int to_int(struct mt_dist *d, const int64_t *c, const int64_t *s, int *ci, int *si, struct mt_err *err)
{
	for (int q = 0; q < d->world; q++) {
		if (c[q] > INT_MAX || s[q] > INT_MAX)
			return mt_err_set(err, MT_EXIT_USAGE, "a shard of %lld elements is too large for MPI's int counts",
					  (long long)c[q]);
		ci[q] = (int)c[q];
		si[q] = (int)s[q];
	}
	return 0;
}

int mt_dist_alltoallv_f32(struct mt_dist *d, const float *send, const int64_t *counts, const int64_t *displs,
			  float *recv, int64_t my_count, const char *what, int64_t step, struct mt_err *err)
{
	struct impl *im = d->impl;
	MPI_Request r;

	if (d->world == 1) {
		memcpy(recv, send + displs[0], (size_t)counts[0] * sizeof(float));
		return 0;
	}
	if (to_int(d, counts, displs, im->cnt, im->dsp, err))
		return -1;
	if (my_count * d->world > INT_MAX)
		return mt_err_set(err, MT_EXIT_USAGE, "a shard of %lld elements is too large for MPI's int counts",
				  (long long)my_count);
	for (int q = 0; q < d->world; q++) {
		im->rcnt[q] = (int)my_count;
		im->rdsp[q] = (int)(q * my_count);
	}
	MPI_Ialltoallv(send, im->cnt, im->dsp, MPI_FLOAT, recv, im->rcnt, im->rdsp, MPI_FLOAT, COMM(d), &r);
	return wait_all(d, 1, &r, d->timeout, what, step, err);
}

static int allgatherv(struct mt_dist *d, void *buf, MPI_Datatype t, const int64_t *counts, const int64_t *displs,
		      const char *what, int64_t step, struct mt_err *err)
{
	struct impl *im = d->impl;
	MPI_Request r;

	if (d->world == 1)
		return 0;
	if (to_int(d, counts, displs, im->cnt, im->dsp, err))
		return -1;
	MPI_Iallgatherv(MPI_IN_PLACE, 0, t, buf, im->cnt, im->dsp, t, COMM(d), &r);
	return wait_all(d, 1, &r, d->timeout, what, step, err);
}

int mt_dist_allgatherv_f32(struct mt_dist *d, float *buf, const int64_t *counts, const int64_t *displs,
			   const char *what, int64_t step, struct mt_err *err)
{
	return allgatherv(d, buf, MPI_FLOAT, counts, displs, what, step, err);
}

int mt_dist_allgatherv_f64(struct mt_dist *d, double *buf, const int64_t *counts, const int64_t *displs,
			   const char *what, int64_t step, struct mt_err *err)
{
	return allgatherv(d, buf, MPI_DOUBLE, counts, displs, what, step, err);
}

int mt_dist_gatherv_f32(struct mt_dist *d, float *buf, const int64_t *counts, const int64_t *displs,
			const char *what, int64_t step, struct mt_err *err)
{
	struct impl *im = d->impl;
	MPI_Request r;

	if (d->world == 1)
		return 0;
	if (to_int(d, counts, displs, im->cnt, im->dsp, err))
		return -1;
	if (d->rank == 0)
		MPI_Igatherv(MPI_IN_PLACE, 0, MPI_FLOAT, buf, im->cnt, im->dsp, MPI_FLOAT, 0, COMM(d), &r);
	else
		MPI_Igatherv(buf + displs[d->rank], im->cnt[d->rank], MPI_FLOAT, NULL, NULL, NULL, MPI_FLOAT, 0, COMM(d),
			     &r);
	return wait_all(d, 1, &r, d->timeout, what, step, err);
}

int mt_dist_allreduce_f64(struct mt_dist *d, double *buf, int64_t n, int max, const char *what, int64_t step,
			  struct mt_err *err)
{
	MPI_Request r;

	if (d->world == 1)
		return 0;
	if (n > INT_MAX)
		return mt_err_set(err, MT_EXIT_USAGE, "%lld elements are too many for one MPI call", (long long)n);
	MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, max ? MPI_MAX : MPI_SUM, COMM(d), &r);
	return wait_all(d, 1, &r, d->timeout, what, step, err);
}

int mt_dist_allreduce_f32(struct mt_dist *d, float *buf, int64_t n, const char *what, int64_t step,
			  struct mt_err *err)
{
	MPI_Request r;

	if (d->world == 1)
		return 0;
	if (n > INT_MAX)
		return mt_err_set(err, MT_EXIT_USAGE, "%lld elements are too many for one MPI call", (long long)n);
	MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, COMM(d), &r);
	return wait_all(d, 1, &r, d->timeout, what, step, err);
}

int mt_dist_reduce_scatter_f32(struct mt_dist *d, const float *send, const int64_t *counts, float *recv,
			       const char *what, int64_t step, struct mt_err *err)
{
	struct impl *im = d->impl;
	MPI_Request r;

	if (d->world == 1) {
		memcpy(recv, send, (size_t)counts[0] * sizeof(float));
		return 0;
	}
	for (int q = 0; q < d->world; q++) {
		if (counts[q] > INT_MAX)
			return mt_err_set(err, MT_EXIT_USAGE, "a shard of %lld elements is too large for MPI's int counts",
					  (long long)counts[q]);
		im->cnt[q] = (int)counts[q];
	}
	MPI_Ireduce_scatter(send, recv, im->cnt, MPI_FLOAT, MPI_SUM, COMM(d), &r);
	return wait_all(d, 1, &r, d->timeout, what, step, err);
}

int mt_dist_bcast(struct mt_dist *d, void *buf, int64_t n, int root, const char *what, struct mt_err *err)
{
	MPI_Request r;

	if (d->world == 1)
		return 0;
	if (n > INT_MAX)
		return mt_err_set(err, MT_EXIT_USAGE, "%lld bytes are too many for one MPI call", (long long)n);
	MPI_Ibcast(buf, (int)n, MPI_BYTE, root, COMM(d), &r);
	return wait_all(d, 1, &r, d->timeout, what, -1, err);
}

#endif

static const struct mt_dist_ops ops = {
	.agree = mt_dist_agree,
	.bcast = mt_dist_bcast,
	.gatherv_f32 = mt_dist_gatherv_f32,
	.allreduce_f64 = mt_dist_allreduce_f64,
};
