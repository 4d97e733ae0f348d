/* dist.c: process bootstrap, rank layout with its group communicators (the tensor-,
 * data-, pipeline-, model-parallel and embedding groups, one MPI_Comm_split each) and
 * bounded collectives over MPI (see dist.h).
 *
 * Only the MPI standard (3.0: nonblocking collectives) is used, so MPICH and Open MPI
 * both work. Built without MPI (MT_NO_MPI), a launched run is refused and a world of one
 * works as before. It holds no training logic: what is exchanged and in which order is
 * the trainer's business (dp.c). */
#include "parallel/dist.h"

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

int mt_dist_group_ranks(int world, int tp, int pp, enum mt_group g, int r, int *ranks)
{
	int t, d, p, dp, n = 0;

	if (tp < 1 || pp < 1 || world < 1 || world % (tp * pp) || r < 0 || r >= world)
		return 0;
	dp = world / (tp * pp);
	mt_dist_coords(world, tp, pp, r, &t, &d, &p);
	switch (g) {
	case MT_GROUP_TP:
		for (int q = 0; q < tp; q++)
			ranks[n++] = q + tp * (d + dp * p);
		break;
	case MT_GROUP_DP:
		for (int q = 0; q < dp; q++)
			ranks[n++] = t + tp * (q + dp * p);
		break;
	case MT_GROUP_PP:
		for (int q = 0; q < pp; q++)
			ranks[n++] = t + tp * (d + dp * q);
		break;
	case MT_GROUP_MP:
		for (int q = 0; q < pp; q++)
			for (int u = 0; u < tp; u++)
				ranks[n++] = u + tp * (d + dp * q);
		break;
	case MT_GROUP_EMB:
		/* the two ends of r's pipeline: one rank when there is one stage */
		if (p != 0 && p != pp - 1)
			return 0;
		ranks[n++] = t + tp * d;
		if (pp > 1)
			ranks[n++] = t + tp * (d + dp * (pp - 1));
		break;
	default:
		return 0;
	}
	return n;
}

/* "rank 5 (tp 1, dp 0, pp 2)", or "rank 5" before the layout is known */
static void name_rank(char *buf, size_t size, int world, int tp, int pp, int r, int laid)
{
	int t, d, p;

	if (!laid) {
		snprintf(buf, size, "rank %d", r);
		return;
	}
	mt_dist_coords(world, tp, pp, r, &t, &d, &p);
	snprintf(buf, size, "rank %d (tp %d, dp %d, pp %d)", r, t, d, p);
}

struct mt_dist *mt_dist_group(struct mt_dist *d, enum mt_group g)
{
	struct mt_dist *v;

	if ((unsigned)g >= MT_GROUP_NKINDS || !(v = d->group[g]))
		return NULL;
	/* the tool sets the timeout after the layout: the views follow it */
	v->timeout = d->timeout;
	return v;
}

/* A group's view of one rank: every collective returns at once on a world of one. */
static struct mt_dist *view_of_one(struct mt_dist *d)
{
	struct mt_dist *v = calloc(1, sizeof(*v));

	if (!v)
		return NULL;
	v->ops = d->ops;
	v->world = v->dp = v->tp = v->pp = 1;
	v->local_rank = d->local_rank;
	v->local_world = d->local_world;
	v->active = d->active;
	v->timeout = d->timeout;
	memcpy(v->where, d->where, sizeof(v->where));
	v->parent = d;
	return v;
}

static int make_views(struct mt_dist *d, struct mt_err *err);
static void free_views(struct mt_dist *d);

int mt_dist_layout(struct mt_dist *d, int tp, int pp, struct mt_err *err)
{
	if (tp < 1 || pp < 1 || d->world % (tp * pp))
		return mt_err_set(err, MT_EXIT_USAGE,
				  "%s: world size %d is not a multiple of tensor x pipeline parallel size %d x %d", d->where,
				  d->world, tp, pp);
	d->tp = tp;
	d->pp = pp;
	d->dp = d->world / (tp * pp);
	mt_dist_coords(d->world, tp, pp, d->rank, &d->tp_rank, &d->dp_rank, &d->pp_rank);
	name_rank(d->where, sizeof(d->where), d->world, tp, pp, d->rank, 1);
	free_views(d);
	return make_views(d, err);
}

static const struct mt_dist_ops ops;

#ifdef MT_NO_MPI

int mt_dist_init(struct mt_dist *d, struct mt_err *err)
{
	memset(d, 0, sizeof(*d));
	d->ops = &ops;
	d->world = d->local_world = d->tp = d->pp = d->dp = 1;
	snprintf(d->where, sizeof(d->where), "rank 0");
	if (mt_dist_launched() && getenv("SLURM_NTASKS") && atoi(getenv("SLURM_NTASKS")) > 1)
		return mt_err_set(err, MT_EXIT_USAGE, "started as one of several tasks, but mt was built without MPI");
	if (mt_dist_launched() && getenv("PMI_SIZE") && atoi(getenv("PMI_SIZE")) > 1)
		return mt_err_set(err, MT_EXIT_USAGE, "started by mpiexec, but mt was built without MPI");
	return 0;
}

/* a world of one: every group is this rank alone (none in a kind it is not part of) */
static int make_views(struct mt_dist *d, struct mt_err *err)
{
	int *ranks = calloc((size_t)d->world, sizeof(int));

	if (!ranks)
		return mt_err_set(err, MT_EXIT_IO, "%s: out of memory", d->where);
	for (int g = 0; g < MT_GROUP_NKINDS; g++) {
		if (!mt_dist_group_ranks(d->world, d->tp, d->pp, (enum mt_group)g, d->rank, ranks))
			continue;
		if (!(d->group[g] = view_of_one(d))) {
			free(ranks);
			free_views(d);
			return mt_err_set(err, MT_EXIT_IO, "%s: out of memory", d->where);
		}
	}
	free(ranks);
	return 0;
}

static void free_views(struct mt_dist *d)
{
	for (int g = 0; g < MT_GROUP_NKINDS; g++) {
		free(d->group[g]);
		d->group[g] = NULL;
	}
}

void mt_dist_finalize(struct mt_dist *d)
{
	if (!d->parent)
		free_views(d);
}
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
/* a world of one has no peer to talk to */
int mt_dist_isend_f32(struct mt_dist *d, const float *buf, int64_t n, int peer, int tag, struct mt_dist_req *r,
		      struct mt_err *err)
{
	memset(r, 0, sizeof(*r));
	return mt_err_set(err, MT_EXIT_USAGE, "%s: no rank %d to send to: mt was built without MPI", d->where, peer);
}
int mt_dist_irecv_f32(struct mt_dist *d, float *buf, int64_t n, int peer, int tag, struct mt_dist_req *r,
		      struct mt_err *err)
{
	memset(r, 0, sizeof(*r));
	return mt_err_set(err, MT_EXIT_USAGE, "%s: no rank %d to receive from: mt was built without MPI", d->where, peer);
}
int mt_dist_wait(struct mt_dist *d, struct mt_dist_req *r, const char *what, int64_t step, struct mt_err *err)
{
	return 0;
}
int mt_dist_test(struct mt_dist *d, struct mt_dist_req *r, struct mt_err *err) { return 1; }

#else

struct impl {
	MPI_Comm comm;          /* a duplicate of the world (or a group of it): our messages never
				 * meet a library's */
	int *cnt, *dsp, *rcnt, *rdsp; /* int counts for MPI, world entries each */
	int *members;           /* a group's world ranks by group rank; NULL: the world itself */
	int lworld, ltp, lpp, laid; /* the world's layout (laid once known), to name other ranks */
};

#define COMM(d) (((struct impl *)(d)->impl)->comm)

static const char *const group_names[MT_GROUP_NKINDS] = { "tensor-parallel", "data-parallel", "pipeline-parallel",
							  "model-parallel", "embedding" };

/* Rank q of d's communicator, named by its world rank and coordinates, for messages. */
static const char *peer(struct mt_dist *d, int q, char *buf, size_t size)
{
	struct impl *im = d->impl;

	name_rank(buf, size, im->lworld, im->ltp, im->lpp, im->members ? im->members[q] : q, im->laid);
	return buf;
}

int mt_dist_init(struct mt_dist *d, struct mt_err *err)
{
	struct impl *im;
	MPI_Comm local;
	const char *nt = getenv("SLURM_NTASKS"), *step = getenv("SLURM_STEP_ID");
	int provided;

	memset(d, 0, sizeof(*d));
	d->ops = &ops;
	d->world = d->local_world = d->tp = d->pp = d->dp = 1;
	snprintf(d->where, sizeof(d->where), "rank 0");
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
	snprintf(d->where, sizeof(d->where), "rank %d", d->rank);
	im->lworld = d->world;
	im->ltp = im->lpp = 1;
	MPI_Comm_split_type(im->comm, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &local);
	MPI_Comm_rank(local, &d->local_rank);
	MPI_Comm_size(local, &d->local_world);
	MPI_Comm_free(&local);
	d->dp = d->world;
	im->cnt = calloc((size_t)d->world * 4, sizeof(int));
	if (!im->cnt)
		return mt_err_set(err, MT_EXIT_IO, "%s: out of memory", d->where);
	im->dsp = im->cnt + d->world;
	im->rcnt = im->dsp + d->world;
	im->rdsp = im->rcnt + d->world;
	if (d->world == 1 && step && nt && atoi(nt) > 1)
		return mt_err_set(err, MT_EXIT_USAGE,
				  "srun started %s tasks but MPI sees each as a world of one: launch with srun --mpi=pmi2 "
				  "(or the PMI your MPI was built with)", nt);
	return 0;
}

/* One communicator per group kind, split from the world with the group's lowest world
 * rank as color and the world rank as key (so group ranks follow world ranks); every
 * rank takes part in every split, those in no group of a kind (the embedding group's
 * middle stages) with MPI_UNDEFINED. MPI_Comm_split blocks without a deadline: it runs
 * once, at start-up, before any rank can be stuck in training. */
static int make_views(struct mt_dist *d, struct mt_err *err)
{
	struct impl *im = d->impl;
	int *ranks = calloc((size_t)d->world, sizeof(int));

	if (!ranks)
		return mt_err_set(err, MT_EXIT_IO, "%s: out of memory", d->where);
	if (im) {
		im->lworld = d->world;
		im->ltp = d->tp;
		im->lpp = d->pp;
		im->laid = 1;
	}
	for (int g = 0; g < MT_GROUP_NKINDS; g++) {
		int n = mt_dist_group_ranks(d->world, d->tp, d->pp, (enum mt_group)g, d->rank, ranks);
		struct mt_dist *v;
		struct impl *vi;
		MPI_Comm c = MPI_COMM_NULL;

		if (!d->active || d->world == 1 || !im) {
			if (n && !(d->group[g] = view_of_one(d)))
				goto oom;
			continue;
		}
		if (MPI_Comm_split(im->comm, n ? ranks[0] : MPI_UNDEFINED, d->rank, &c) != MPI_SUCCESS) {
			free(ranks);
			free_views(d);
			return mt_err_set(err, MT_EXIT_IO, "%s: making the %s groups failed in MPI", d->where, group_names[g]);
		}
		if (!n)
			continue;
		v = view_of_one(d);
		vi = calloc(1, sizeof(*vi));
		if (!v || !vi) {
			free(v), free(vi);
			MPI_Comm_free(&c);
			goto oom;
		}
		v->impl = vi;
		d->group[g] = v;
		vi->comm = c;
		MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
		MPI_Comm_rank(c, &v->rank);
		MPI_Comm_size(c, &v->world);
		v->dp = v->world;
		v->dp_rank = v->rank;
		vi->lworld = d->world;
		vi->ltp = d->tp;
		vi->lpp = d->pp;
		vi->laid = 1;
		vi->cnt = calloc((size_t)v->world * 4, sizeof(int));
		vi->members = malloc((size_t)n * sizeof(int));
		if (!vi->cnt || !vi->members)
			goto oom;
		vi->dsp = vi->cnt + v->world;
		vi->rcnt = vi->dsp + v->world;
		vi->rdsp = vi->rcnt + v->world;
		memcpy(vi->members, ranks, (size_t)n * sizeof(int));
		if (v->world != n || ranks[v->rank] != d->rank) {
			free(ranks);
			free_views(d);
			return mt_err_set(err, MT_EXIT_IO, "%s: MPI made a %s group of %d ranks, the layout says %d", d->where,
					  group_names[g], v->world, n);
		}
	}
	free(ranks);
	return 0;
oom:
	free(ranks);
	free_views(d);
	return mt_err_set(err, MT_EXIT_IO, "%s: out of memory", d->where);
}

static void free_views(struct mt_dist *d)
{
	for (int g = 0; g < MT_GROUP_NKINDS; g++) {
		struct mt_dist *v = d->group[g];
		struct impl *vi;

		if (!v)
			continue;
		if ((vi = v->impl)) {
			MPI_Comm_free(&vi->comm);
			free(vi->cnt);
			free(vi->members);
			free(vi);
		}
		free(v);
		d->group[g] = NULL;
	}
}

void mt_dist_finalize(struct mt_dist *d)
{
	struct impl *im = d->impl;

	if (d->parent)
		return; /* a group's view: its parent frees it */
	free_views(d);
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
				return mt_err_set(err, MT_EXIT_IO, "%s: %s at step %lld failed in MPI", d->where, what,
						  (long long)step);
			done &= fl;
		}
		if (done)
			return 0;
		if (timeout > 0 && now() - t0 > timeout)
			return mt_err_set(err, MT_EXIT_IO,
					  "%s: %s at step %lld did not complete within %.0f s: another rank died or hangs",
					  d->where, what, (long long)step, timeout);
		if (spins > 2000) {
			struct timespec ts = { 0, 100000 };
			nanosleep(&ts, NULL);
		}
	}
}

int mt_dist_agree(struct mt_dist *d, int64_t step, int flag, int *max_flag, struct mt_err *err)
{
	int64_t mine[2] = { step, flag };
	char name[64];

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
			return mt_err_set(err, MT_EXIT_IO, "%s: out of memory", d->where);
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
				return mt_err_set(err, MT_EXIT_IO, "%s: %s did not reach step %lld within %.0f s", d->where,
						  peer(d, missing, name, sizeof(name)), (long long)step, d->timeout);
			}
			if (spins > 2000) {
				struct timespec ts = { 0, 100000 };
				nanosleep(&ts, NULL);
			}
		}
		for (int q = 1; q < d->world; q++) {
			if (got[2 * q] != step && !rc)
				rc = mt_err_set(err, MT_EXIT_IO, "%s: %s is at step %lld, this rank at step %lld", d->where,
						peer(d, q, name, sizeof(name)), (long long)got[2 * q], (long long)step);
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
				return mt_err_set(err, MT_EXIT_IO, "%s: %s did not reach step %lld within %.0f s", d->where,
						  peer(d, 0, name, sizeof(name)), (long long)step, 2 * d->timeout);
			if (spins > 2000) {
				struct timespec ts = { 0, 100000 };
				nanosleep(&ts, NULL);
			}
		}
		if (out < 0)
			return mt_err_set(err, MT_EXIT_IO, "%s: the ranks disagree on the step (%lld here)", d->where,
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
			return mt_err_set(err, MT_EXIT_USAGE, "%s: a shard of %lld elements is too large for MPI's int counts",
					  d->where, (long long)c[q]);
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
		return mt_err_set(err, MT_EXIT_USAGE, "%s: a shard of %lld elements is too large for MPI's int counts",
				  d->where, (long long)my_count);
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
		return mt_err_set(err, MT_EXIT_USAGE, "%s: %lld elements are too many for one MPI call", d->where,
				  (long long)n);
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
		return mt_err_set(err, MT_EXIT_USAGE, "%s: %lld elements are too many for one MPI call", d->where,
				  (long long)n);
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
			return mt_err_set(err, MT_EXIT_USAGE, "%s: a shard of %lld elements is too large for MPI's int counts",
					  d->where, (long long)counts[q]);
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
		return mt_err_set(err, MT_EXIT_USAGE, "%s: %lld bytes are too many for one MPI call", d->where, (long long)n);
	MPI_Ibcast(buf, (int)n, MPI_BYTE, root, COMM(d), &r);
	return wait_all(d, 1, &r, d->timeout, what, -1, err);
}

_Static_assert(sizeof(MPI_Request) <= sizeof(((struct mt_dist_req *)0)->mpi), "MPI_Request fits mt_dist_req");

#define TAG_P2P_BASE 8192 /* above the agreement's tag: pipeline messages never match it */

static int p2p_start(struct mt_dist *d, float *buf, int64_t n, int peer, int tag, struct mt_dist_req *r, int send,
		     struct mt_err *err)
{
	MPI_Request q;
	int rc;

	memset(r, 0, sizeof(*r));
	if (peer < 0 || peer >= d->world || peer == d->rank || n < 0 || n > INT_MAX || tag < 0 || tag > 32767 - TAG_P2P_BASE)
		return mt_err_set(err, MT_EXIT_USAGE, "%s: a transfer of %lld floats %s rank %d (tag %d) is out of range",
				  d->where, (long long)n, send ? "to" : "from", peer, tag);
	rc = send ? MPI_Isend(buf, (int)n, MPI_FLOAT, peer, TAG_P2P_BASE + tag, COMM(d), &q)
		  : MPI_Irecv(buf, (int)n, MPI_FLOAT, peer, TAG_P2P_BASE + tag, COMM(d), &q);
	if (rc != MPI_SUCCESS)
		return mt_err_set(err, MT_EXIT_IO, "%s: starting a transfer %s rank %d failed in MPI", d->where,
				  send ? "to" : "from", peer);
	memcpy(r->mpi, &q, sizeof(q));
	r->active = 1;
	r->send = send;
	r->peer = peer;
	r->n = n;
	return 0;
}

int mt_dist_isend_f32(struct mt_dist *d, const float *buf, int64_t n, int peer, int tag, struct mt_dist_req *r,
		      struct mt_err *err)
{
	return p2p_start(d, (float *)buf, n, peer, tag, r, 1, err);
}

int mt_dist_irecv_f32(struct mt_dist *d, float *buf, int64_t n, int peer, int tag, struct mt_dist_req *r,
		      struct mt_err *err)
{
	return p2p_start(d, buf, n, peer, tag, r, 0, err);
}

int mt_dist_test(struct mt_dist *d, struct mt_dist_req *r, struct mt_err *err)
{
	MPI_Request q;
	MPI_Status st;
	int fl = 0, got = 0;

	if (!r->active)
		return 1;
	memcpy(&q, r->mpi, sizeof(q));
	if (MPI_Test(&q, &fl, &st) != MPI_SUCCESS)
		return mt_err_set(err, MT_EXIT_IO, "%s: a transfer %s rank %d failed in MPI", d->where,
				  r->send ? "to" : "from", r->peer);
	memcpy(r->mpi, &q, sizeof(q));
	if (!fl)
		return 0;
	r->active = 0;
	if (!r->send && (MPI_Get_count(&st, MPI_FLOAT, &got) != MPI_SUCCESS || got != r->n))
		return mt_err_set(err, MT_EXIT_IO, "%s: rank %d sent %d floats where %lld were expected", d->where, r->peer,
				  got, (long long)r->n);
	return 1;
}

int mt_dist_wait(struct mt_dist *d, struct mt_dist_req *r, const char *what, int64_t step, struct mt_err *err)
{
	double t0 = now();
	char name[64];

	for (long spins = 0;; spins++) {
		int done = mt_dist_test(d, r, err);
		if (done < 0)
			return -1;
		if (done)
			return 0;
		if (d->timeout > 0 && now() - t0 > d->timeout)
			return mt_err_set(err, MT_EXIT_IO,
					  "%s: %s %s %s %s at step %lld did not complete within %.0f s: that rank died or hangs",
					  d->where, r->send ? "sending" : "receiving", what, r->send ? "to" : "from",
					  peer(d, r->peer, name, sizeof(name)), (long long)step, d->timeout);
		if (spins > 2000) {
			struct timespec ts = { 0, 100000 };
			nanosleep(&ts, NULL);
		}
	}
}

#endif

static const struct mt_dist_ops ops = {
	.agree = mt_dist_agree,
	.bcast = mt_dist_bcast,
	.gatherv_f32 = mt_dist_gatherv_f32,
	.allreduce_f64 = mt_dist_allreduce_f64,
};
