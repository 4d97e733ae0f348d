/* ncclcomm.c: NCCL loaded at run time, a nonblocking communicator and polled waits (see
 * ncclcomm.h). The library's entry points are looked up once with dlsym against the types
 * of NCCL's own header; nothing here knows what the buffers hold. */
#include "parallel/ncclcomm.h"

#include <stdlib.h>
#include <string.h>

#include "base/knobs.h"

#if defined(MT_HAVE_CUDA) && defined(MT_HAVE_NCCL)

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
/* NCCL's header declares some functions without prototypes */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#include <stdio.h>
#include <time.h>

static struct {
	void *lib;
	ncclResult_t (*GetUniqueId)(ncclUniqueId *);
	ncclResult_t (*CommInitRankConfig)(ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *);
	ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t *);
	ncclResult_t (*CommAbort)(ncclComm_t);
	ncclResult_t (*CommFinalize)(ncclComm_t);
	ncclResult_t (*CommDestroy)(ncclComm_t);
	ncclResult_t (*AllReduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
	ncclResult_t (*ReduceScatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
				      cudaStream_t);
	ncclResult_t (*AllGather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
	ncclResult_t (*GroupStart)(void);
	ncclResult_t (*GroupEnd)(void);
	const char *(*GetErrorString)(ncclResult_t);
	const char *(*GetLastError)(ncclComm_t);
	ncclResult_t (*GetVersion)(int *);
	ncclResult_t (*Send)(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
	ncclResult_t (*Recv)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
} api;

struct mt_nccl {
	ncclComm_t comm;
	struct mt_dist *d;
	int me;                        /* a two-rank communicator's own rank in it */
	int failed;
	const char *pending;           /* a send or receive NCCL still takes: its name */
	char version[32];
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void nap(long spins)
{
	if (spins > 1000) {
		struct timespec ts = { 0, 50000 };
		nanosleep(&ts, NULL);
	}
}

static int load(struct mt_err *err)
{
	const char *path = mt_knob_str(MT_KNOB_NCCL_LIBRARY);
	struct {
		const char *name;
		void **fn;
	} syms[] = {
		{ "ncclGetUniqueId", (void **)&api.GetUniqueId },
		{ "ncclCommInitRankConfig", (void **)&api.CommInitRankConfig },
		{ "ncclCommGetAsyncError", (void **)&api.CommGetAsyncError },
		{ "ncclCommAbort", (void **)&api.CommAbort },
		{ "ncclCommFinalize", (void **)&api.CommFinalize },
		{ "ncclCommDestroy", (void **)&api.CommDestroy },
		{ "ncclAllReduce", (void **)&api.AllReduce },
		{ "ncclReduceScatter", (void **)&api.ReduceScatter },
		{ "ncclAllGather", (void **)&api.AllGather },
		{ "ncclGroupStart", (void **)&api.GroupStart },
		{ "ncclGroupEnd", (void **)&api.GroupEnd },
		{ "ncclGetErrorString", (void **)&api.GetErrorString },
		{ "ncclGetLastError", (void **)&api.GetLastError },
		{ "ncclGetVersion", (void **)&api.GetVersion },
		{ "ncclSend", (void **)&api.Send },
		{ "ncclRecv", (void **)&api.Recv },
	};

	if (api.lib)
		return 0;
	if (!path || !*path)
		path = "libnccl.so.2";
	api.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!api.lib)
		return mt_err_set(err, MT_EXIT_IO,
				  "data parallelism on GPUs needs NCCL: cannot load '%s' (%s): install NCCL 2.12 or later, "
				  "add its lib folder to LD_LIBRARY_PATH or name the file in MT_NCCL_LIBRARY", path, dlerror());
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		*syms[i].fn = dlsym(api.lib, syms[i].name);
		if (!*syms[i].fn) {
			dlclose(api.lib);
			api.lib = NULL;
			return mt_err_set(err, MT_EXIT_IO, "NCCL library '%s' has no %s: NCCL 2.12 or later is needed", path,
					  syms[i].name);
		}
	}
	return 0;
}

static int nccl_fail(struct mt_nccl *n, ncclResult_t rc, const char *what, struct mt_err *err)
{
	const char *last = api.GetLastError ? api.GetLastError(n ? n->comm : NULL) : NULL;

	if (n)
		n->failed = 1;
	return mt_err_set(err, MT_EXIT_IO, "%s: NCCL %s failed: %s%s%s", n && n->d ? n->d->where : "rank ?", what,
			  api.GetErrorString(rc), last && *last ? ": " : "", last && *last ? last : "");
}

/* a nonblocking call returned ncclInProgress: poll until NCCL has taken it */
static int settle(struct mt_nccl *n, ncclResult_t rc, const char *what, struct mt_err *err)
{
	double t0 = now(), timeout = n->d->timeout;

	for (long spins = 0; rc == ncclInProgress; spins++) {
		if (timeout > 0 && now() - t0 > timeout) {
			n->failed = 1;
			return mt_err_set(err, MT_EXIT_IO,
					  "%s: NCCL %s did not complete within %.0f s: another rank died or hangs",
					  n->d->where, what, timeout);
		}
		nap(spins);
		if (api.CommGetAsyncError(n->comm, &rc) != ncclSuccess)
			rc = ncclInternalError;
	}
	return rc == ncclSuccess ? 0 : nccl_fail(n, rc, what, err);
}

int mt_nccl_open(struct mt_nccl **out, struct mt_dist *d, struct mt_err *err)
{
	struct mt_nccl *n;
	ncclUniqueId id;
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	ncclResult_t rc;
	int v = 0;

	*out = NULL;
	if (d->tp != 1 || d->pp != 1)
		return mt_err_set(err, MT_EXIT_USAGE, "NCCL communicators for tensor or pipeline parallelism are not supported yet");
	if (load(err))
		return -1;
	n = calloc(1, sizeof(*n));
	if (!n)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	n->d = d;
	api.GetVersion(&v);
	snprintf(n->version, sizeof(n->version), "NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
	memset(&id, 0, sizeof(id));
	if (d->dp_rank == 0 && (rc = api.GetUniqueId(&id)) != ncclSuccess) {
		nccl_fail(n, rc, "unique id", err);
		free(n);
		return -1;
	}
	if (d->ops->bcast(d, &id, sizeof(id), 0, "the NCCL unique id", err)) {
		free(n);
		return -1;
	}
	cfg.blocking = 0;
	rc = api.CommInitRankConfig(&n->comm, d->dp, id, d->dp_rank, &cfg);
	if (rc != ncclSuccess && rc != ncclInProgress) {
		nccl_fail(n, rc, "initialization", err);
		free(n);
		return -1;
	}
	if (api.CommGetAsyncError(n->comm, &rc) != ncclSuccess)
		rc = ncclInternalError;
	if (settle(n, rc, "initialization", err)) {
		mt_nccl_close(n, 1);
		return -1;
	}
	*out = n;
	return 0;
}

/* one element each way over the four edges in one group: NCCL connects all four pairs
 * at once (each connection is a handshake of both of its ends), before any schedule posts
 * its transfers in an order of its own; MT_PP_NCCL_PRECONNECT=0 leaves the connections
 * to the first transfers (for comparisons) */
static int connect_ring(struct mt_nccl **edge, struct mt_err *err)
{
	double t0 = now(), timeout = edge[0]->d->timeout;
	cudaStream_t st = NULL;
	float *buf = NULL;
	cudaError_t e;
	ncclResult_t r;
	int rc = 0;

	if (!mt_knob_on(MT_KNOB_PP_NCCL_PRECONNECT))
		return 0;
	e = cudaMalloc((void **)&buf, 4 * sizeof(float));
	if (e == cudaSuccess)
		e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
	if (e == cudaSuccess)
		e = cudaMemsetAsync(buf, 0, 4 * sizeof(float), st);
	if (e != cudaSuccess) {
		rc = mt_err_set(err, MT_EXIT_IO, "%s: connecting the pipeline's communicators: %s", edge[0]->d->where,
				cudaGetErrorString(e));
		goto out;
	}
	if ((r = api.GroupStart()) != ncclSuccess) {
		rc = nccl_fail(edge[0], r, "group start", err);
		goto out;
	}
	for (int i = 0; i < 4; i++) {
		r = i % 2 == 0 ? api.Send(buf + i, 1, ncclFloat32, 1 - edge[i]->me, edge[i]->comm, st)
			       : api.Recv(buf + i, 1, ncclFloat32, 1 - edge[i]->me, edge[i]->comm, st);
		if (r != ncclSuccess && r != ncclInProgress) {
			api.GroupEnd();
			rc = nccl_fail(edge[i], r, "connecting the pipeline's communicators", err);
			goto out;
		}
	}
	r = api.GroupEnd();
	if (r != ncclSuccess && r != ncclInProgress) {
		rc = nccl_fail(edge[0], r, "connecting the pipeline's communicators", err);
		goto out;
	}
	for (int i = 0; i < 4 && !rc; i++) {
		if (api.CommGetAsyncError(edge[i]->comm, &r) != ncclSuccess)
			r = ncclInternalError;
		rc = settle(edge[i], r, "connecting the pipeline's communicators", err);
	}
	for (long spins = 0; !rc && (e = cudaStreamQuery(st)) == cudaErrorNotReady; spins++) {
		if (timeout > 0 && now() - t0 > timeout) {
			edge[0]->failed = 1;
			rc = mt_err_set(err, MT_EXIT_IO, "%s: connecting the pipeline's communicators did not complete "
					"within %.0f s: another rank died or hangs", edge[0]->d->where, timeout);
		}
		nap(spins);
	}
	if (!rc && e != cudaSuccess)
		rc = mt_err_set(err, MT_EXIT_IO, "%s: connecting the pipeline's communicators: %s", edge[0]->d->where,
				cudaGetErrorString(e));
out:
	if (rc) {
		for (int i = 0; i < 4; i++)
			edge[i]->failed = 1;
		return -1; /* the device may still wait in a transfer: nothing freed */
	}
	cudaStreamDestroy(st);
	cudaFree(buf);
	return 0;
}

int mt_nccl_open_ring(struct mt_nccl **edge, struct mt_dist *g, struct mt_err *err)
{
	int P = g->world, next = (g->rank + 1) % P, prev = (g->rank + P - 1) % P, v = 0, rc = 0;
	/* [0] to next, [2] to prev: made here; [1] from prev, [3] from next: received */
	const int sender[4] = { 1, 0, 1, 0 };
	ncclUniqueId id[4];
	ncclResult_t r;

	memset(id, 0, sizeof(id));
	for (int i = 0; i < 4; i++)
		edge[i] = NULL;
	if (P < 2)
		return mt_err_set(err, MT_EXIT_USAGE, "%s: a pipeline of one stage has no neighbours", g->where);
	if (load(err))
		return -1;
	api.GetVersion(&v);
	for (int i = 0; i < 4; i++) {
		if (!(edge[i] = calloc(1, sizeof(*edge[i])))) {
			rc = mt_err_set(err, MT_EXIT_IO, "out of memory");
			goto fail;
		}
		edge[i]->d = g;
		edge[i]->me = !sender[i];
		snprintf(edge[i]->version, sizeof(edge[i]->version), "NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
		if (sender[i] && (r = api.GetUniqueId(&id[i])) != ncclSuccess) {
			rc = nccl_fail(edge[i], r, "unique id", err);
			goto fail;
		}
	}
	/* each stage's two ids to the group in turn (bcast: the tools without MPI link
	 * this file too); a stage keeps the one its previous stage made for its next, and
	 * the one its next stage made for its previous */
	for (int q = 0; q < P; q++) {
		ncclUniqueId two[2];
		if (q == g->rank) {
			two[0] = id[0];
			two[1] = id[2];
		}
		if (g->ops->bcast(g, two, sizeof(two), q, "the pipeline's NCCL ids", err)) {
			rc = -1;
			goto fail;
		}
		if (q == prev)
			id[1] = two[0];
		if (q == next)
			id[3] = two[1];
	}
	/* the four initializations at once (a neighbour may start with another edge) */
	if ((r = api.GroupStart()) != ncclSuccess) {
		rc = nccl_fail(edge[0], r, "group start", err);
		goto fail;
	}
	for (int i = 0; i < 4; i++) {
		ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
		cfg.blocking = 0;
		r = api.CommInitRankConfig(&edge[i]->comm, 2, id[i], edge[i]->me, &cfg);
		if (r != ncclSuccess && r != ncclInProgress) {
			api.GroupEnd();
			rc = nccl_fail(edge[i], r, "initialization", err);
			goto fail;
		}
	}
	r = api.GroupEnd();
	if (r != ncclSuccess && r != ncclInProgress) {
		rc = nccl_fail(edge[0], r, "initialization", err);
		goto fail;
	}
	for (int i = 0; i < 4; i++) {
		if (api.CommGetAsyncError(edge[i]->comm, &r) != ncclSuccess)
			r = ncclInternalError;
		if (settle(edge[i], r, "initialization of the pipeline's communicators", err)) {
			rc = -1;
			goto fail;
		}
	}
	if ((rc = connect_ring(edge, err)))
		goto fail;
	return 0;
fail:
	for (int i = 0; i < 4; i++) {
		if (edge[i] && edge[i]->comm)
			mt_nccl_close(edge[i], 1);
		else
			free(edge[i]);
		edge[i] = NULL;
	}
	return rc ? rc : -1;
}

/* ncclCommAbort first tells the communicator's kernels and threads to stop, then
 * reclaims what the node's ranks share, which can wait for a rank that is gone: so it
 * runs in a thread of its own that nobody waits for (the process is about to stop) */
static void *abort_thread(void *arg)
{
	struct mt_nccl *n = arg;

	api.CommAbort(n->comm);
	free(n);
	return NULL;
}

static void abort_detached(struct mt_nccl *n)
{
	pthread_t th;
	pthread_attr_t at;

	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&th, &at, abort_thread, n) != 0)
		free(n); /* the communicator is left to the end of the process */
	pthread_attr_destroy(&at);
}

/* Every communicator's finalization is started before any is waited for: the pipeline's
 * edges are pairs of two ranks, and a rank that waited for one edge's peer while that
 * peer waited for another edge (closed in its own order) would wait for ever (measured:
 * the connected ring's edges, closed one by one, hung both ranks at exit). */
void mt_nccl_close_all(struct mt_nccl **ns, int count, int abort)
{
	double t0 = now(), timeout = 0;
	int left = 0;
	char busy[8] = { 0 };

	for (int i = 0; i < count && i < 8; i++) {
		struct mt_nccl *n = ns[i];
		ncclResult_t rc;
		if (!n)
			continue;
		timeout = n->d->timeout;
		n->failed |= abort;
		if (!n->failed && n->pending) {
			struct mt_err e2 = { 0 };
			mt_nccl_settle(n, &e2);
		}
		if (n->failed)
			continue;
		/* flush, with the deadline; a rank gone by now makes it an abort */
		rc = api.CommFinalize(n->comm);
		if (rc == ncclInProgress)
			busy[i] = 1, left++;
		else if (rc != ncclSuccess)
			n->failed = 1;
	}
	for (long spins = 0; left > 0; spins++) {
		for (int i = 0; i < count && i < 8; i++) {
			ncclResult_t rc;
			if (!busy[i])
				continue;
			if (api.CommGetAsyncError(ns[i]->comm, &rc) != ncclSuccess)
				rc = ncclInternalError;
			if (rc == ncclInProgress)
				continue;
			busy[i] = 0, left--;
			if (rc != ncclSuccess)
				ns[i]->failed = 1;
		}
		if (left > 0 && timeout > 0 && now() - t0 > timeout) {
			for (int i = 0; i < count && i < 8; i++)
				if (busy[i])
					ns[i]->failed = 1;
			break;
		}
		nap(spins);
	}
	for (int i = 0; i < count && i < 8; i++) {
		struct mt_nccl *n = ns[i];
		if (!n)
			continue;
		if (n->failed) {
			abort_detached(n);
			continue;
		}
		api.CommDestroy(n->comm);
		free(n);
	}
}

void mt_nccl_close(struct mt_nccl *n, int abort)
{
	mt_nccl_close_all(&n, 1, abort);
}

const char *mt_nccl_version(const struct mt_nccl *n)
{
	return n->version;
}

static ncclDataType_t type(enum mt_nccl_type t)
{
	return t == MT_NCCL_BF16 ? ncclBfloat16 : t == MT_NCCL_F16 ? ncclFloat16 : ncclFloat32;
}

static size_t tsize(enum mt_nccl_type t)
{
	return t == MT_NCCL_F32 ? 4 : 2;
}

int mt_nccl_group_start(struct mt_nccl *n, struct mt_err *err)
{
	ncclResult_t rc = api.GroupStart();

	return rc == ncclSuccess ? 0 : nccl_fail(n, rc, "group start", err);
}

int mt_nccl_group_end(struct mt_nccl *n, struct mt_err *err)
{
	return settle(n, api.GroupEnd(), "group launch", err);
}

int mt_nccl_allreduce(struct mt_nccl *n, void *buf, int64_t count, enum mt_nccl_type t, void *stream,
		      struct mt_err *err)
{
	return settle(n, api.AllReduce(buf, buf, (size_t)count, type(t), ncclSum, n->comm, (cudaStream_t)stream),
		      "all-reduce", err);
}

int mt_nccl_reduce_scatter(struct mt_nccl *n, void *buf, int64_t count, enum mt_nccl_type t, void *stream,
			   struct mt_err *err)
{
	char *mine = (char *)buf + (size_t)n->d->dp_rank * (size_t)count * tsize(t);

	return settle(n, api.ReduceScatter(buf, mine, (size_t)count, type(t), ncclSum, n->comm, (cudaStream_t)stream),
		      "reduce-scatter", err);
}

int mt_nccl_reduce_into(struct mt_nccl *n, const void *send, void *recv, int64_t count, enum mt_nccl_type t, int scatter,
			void *stream, struct mt_err *err)
{
	if (scatter)
		return settle(n, api.ReduceScatter(send, recv, (size_t)count, type(t), ncclSum, n->comm, (cudaStream_t)stream),
			      "reduce-scatter", err);
	return settle(n, api.AllReduce(send, recv, (size_t)count, type(t), ncclSum, n->comm, (cudaStream_t)stream),
		      "all-reduce", err);
}

int mt_nccl_allgather(struct mt_nccl *n, void *buf, int64_t count, enum mt_nccl_type t, void *stream,
		      struct mt_err *err)
{
	char *mine = (char *)buf + (size_t)n->d->dp_rank * (size_t)count * tsize(t);

	return settle(n, api.AllGather(mine, buf, (size_t)count, type(t), n->comm, (cudaStream_t)stream), "all-gather",
		      err);
}

/* a point-to-point call's result: taken, still being taken (remembered for
 * mt_nccl_settle), or failed */
static int posted(struct mt_nccl *n, ncclResult_t rc, const char *what, struct mt_err *err)
{
	if (rc == ncclInProgress) {
		n->pending = what;
		return 1;
	}
	return rc == ncclSuccess ? 0 : nccl_fail(n, rc, what, err);
}

int mt_nccl_send(struct mt_nccl *n, const void *buf, int64_t count, enum mt_nccl_type t, void *stream,
		 struct mt_err *err)
{
	if (mt_nccl_settle(n, err))
		return -1;
	return posted(n, api.Send(buf, (size_t)count, type(t), 1 - n->me, n->comm, (cudaStream_t)stream), "send", err);
}

int mt_nccl_recv(struct mt_nccl *n, void *buf, int64_t count, enum mt_nccl_type t, void *stream, struct mt_err *err)
{
	if (mt_nccl_settle(n, err))
		return -1;
	return posted(n, api.Recv(buf, (size_t)count, type(t), 1 - n->me, n->comm, (cudaStream_t)stream), "receive",
		      err);
}

int mt_nccl_settle(struct mt_nccl *n, struct mt_err *err)
{
	const char *what = n->pending;
	ncclResult_t rc;

	if (!what)
		return 0;
	n->pending = NULL;
	if (api.CommGetAsyncError(n->comm, &rc) != ncclSuccess)
		rc = ncclInternalError;
	return settle(n, rc, what, err);
}

int mt_nccl_wait(struct mt_nccl *n, void *event, const char *what, int64_t step, struct mt_err *err)
{
	double t0 = now(), timeout = n->d->timeout;

	for (long spins = 0;; spins++) {
		cudaError_t e = cudaEventQuery((cudaEvent_t)event);
		ncclResult_t st;
		if (e == cudaSuccess)
			return 0;
		if (e != cudaErrorNotReady) {
			n->failed = 1;
			return mt_err_set(err, MT_EXIT_IO, "%s: %s at step %lld: %s", n->d->where, what, (long long)step,
					  cudaGetErrorString(e));
		}
		if (api.CommGetAsyncError(n->comm, &st) != ncclSuccess)
			st = ncclInternalError;
		if (st != ncclSuccess && st != ncclInProgress) {
			char msg[64];
			snprintf(msg, sizeof(msg), "%s at step %lld", what, (long long)step);
			return nccl_fail(n, st, msg, err);
		}
		if (timeout > 0 && now() - t0 > timeout) {
			n->failed = 1;
			return mt_err_set(err, MT_EXIT_IO,
					  "%s: %s at step %lld did not complete within %.0f s: another rank died or hangs",
					  n->d->where, what, (long long)step, timeout);
		}
		nap(spins);
	}
}

#else /* no CUDA or no NCCL header in this build */

struct mt_nccl {
	int unused;
};

int mt_nccl_open(struct mt_nccl **out, struct mt_dist *d, struct mt_err *err)
{
	(void)d;
	*out = NULL;
	return mt_err_set(err, MT_EXIT_USAGE, "this build has no NCCL support (no CUDA, or no nccl.h where CUDA is): "
			  "data parallelism on GPUs is not available");
}
int mt_nccl_open_ring(struct mt_nccl **edge, struct mt_dist *g, struct mt_err *err)
{
	(void)g;
	for (int i = 0; i < 4; i++)
		edge[i] = NULL;
	return mt_err_set(err, MT_EXIT_USAGE, "this build has no NCCL support: pipeline transfers go through host memory");
}
int mt_nccl_send(struct mt_nccl *n, const void *buf, int64_t count, enum mt_nccl_type t, void *stream,
		 struct mt_err *err)
{
	(void)n, (void)buf, (void)count, (void)t, (void)stream;
	return mt_err_set(err, MT_EXIT_USAGE, "this build has no NCCL support");
}
int mt_nccl_recv(struct mt_nccl *n, void *buf, int64_t count, enum mt_nccl_type t, void *stream, struct mt_err *err)
{
	(void)n, (void)buf, (void)count, (void)t, (void)stream;
	return mt_err_set(err, MT_EXIT_USAGE, "this build has no NCCL support");
}
int mt_nccl_settle(struct mt_nccl *n, struct mt_err *err)
{
	(void)n;
	return mt_err_set(err, MT_EXIT_USAGE, "this build has no NCCL support");
}
void mt_nccl_close(struct mt_nccl *n, int abort) { (void)n, (void)abort; }
void mt_nccl_close_all(struct mt_nccl **ns, int count, int abort) { (void)ns, (void)count, (void)abort; }
const char *mt_nccl_version(const struct mt_nccl *n)
{
	(void)n;
	return "none";
}
int mt_nccl_group_start(struct mt_nccl *n, struct mt_err *err)
{
	(void)n;
	return mt_err_set(err, MT_EXIT_USAGE, "no NCCL");
}
int mt_nccl_group_end(struct mt_nccl *n, struct mt_err *err)
{
	(void)n;
	return mt_err_set(err, MT_EXIT_USAGE, "no NCCL");
}
int mt_nccl_allreduce(struct mt_nccl *n, void *buf, int64_t count, enum mt_nccl_type t, void *stream,
		      struct mt_err *err)
{
	(void)n, (void)buf, (void)count, (void)t, (void)stream;
	return mt_err_set(err, MT_EXIT_USAGE, "no NCCL");
}
int mt_nccl_reduce_scatter(struct mt_nccl *n, void *buf, int64_t count, enum mt_nccl_type t, void *stream,
			   struct mt_err *err)
{
	(void)n, (void)buf, (void)count, (void)t, (void)stream;
	return mt_err_set(err, MT_EXIT_USAGE, "no NCCL");
}
int mt_nccl_reduce_into(struct mt_nccl *n, const void *send, void *recv, int64_t count, enum mt_nccl_type t, int scatter,
			void *stream, struct mt_err *err)
{
	(void)n, (void)send, (void)recv, (void)count, (void)t, (void)scatter, (void)stream;
	return mt_err_set(err, MT_EXIT_USAGE, "no NCCL");
}
int mt_nccl_allgather(struct mt_nccl *n, void *buf, int64_t count, enum mt_nccl_type t, void *stream,
		      struct mt_err *err)
{
	(void)n, (void)buf, (void)count, (void)t, (void)stream;
	return mt_err_set(err, MT_EXIT_USAGE, "no NCCL");
}
int mt_nccl_wait(struct mt_nccl *n, void *event, const char *what, int64_t step, struct mt_err *err)
{
	(void)n, (void)event, (void)what, (void)step;
	return mt_err_set(err, MT_EXIT_USAGE, "no NCCL");
}

#endif
