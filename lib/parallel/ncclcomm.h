/* ncclcomm.h: an NCCL communicator over the data-parallel ranks of dist.h, for a backend
 * that keeps its buffers on GPUs, and the few collectives it launches, each waited for
 * against a deadline.
 *
 * NCCL is loaded when the first communicator is made (dlopen of libnccl.so.2, or the
 * file MT_NCCL_LIBRARY names), so every tool runs where NCCL is not installed and one
 * GPU never needs it. Rank 0 makes the unique id and mt_dist_bcast sends it; the
 * communicator is nonblocking (NCCL's config.blocking = 0), so its initialization and
 * every later wait are polled: ncclCommGetAsyncError and the completion of a CUDA event,
 * until the deadline (dist.h's timeout), after which the error names this rank, what
 * was waited for and the step, and closing the communicator aborts it (ncclCommAbort).
 * Collectives are only enqueued here, on the caller's stream; what to reduce, when, and
 * in which buffers is the backend's business. Not thread-safe. */
#ifndef MT_NCCLCOMM_H
#define MT_NCCLCOMM_H

#include <stdint.h>

#include "parallel/dist.h"
#include "base/err.h"

struct mt_nccl;

/* element types of the collectives (kernels/cuda_err.h's enum mt_dtype values) */
enum mt_nccl_type { MT_NCCL_F32 = 0, MT_NCCL_BF16 = 1, MT_NCCL_F16 = 2 };

/* The communicator of d's data-parallel ranks (tp = pp = 1: the world) on the current
 * CUDA device; every rank calls it. */
int mt_nccl_open(struct mt_nccl **out, struct mt_dist *d, struct mt_err *err);
/* The pipeline's point-to-point channels: four two-rank communicators between this rank
 * of pipeline group g and its ring neighbours, each used in one direction only (so a
 * send waiting for its receiver never holds up a transfer the other way):
 * edge[0] sends to the next stage, edge[1] receives from the previous one, edge[2] sends
 * to the previous stage, edge[3] receives from the next one. Every rank of g calls it;
 * the ids go over MPI to the neighbours, the four initializations at once, then one
 * element each way over all four in one group, which connects the pairs together (NCCL
 * connects a pair at its first transfer, a handshake of both ends: transfers posted
 * one at a time in different orders on the two ends would wait for each other). */
int mt_nccl_open_ring(struct mt_nccl **edge, struct mt_dist *g, struct mt_err *err);
/* Destroys the communicator (every rank calls it), or after a failure here or when
 * `abort`, aborts it: ncclCommAbort in a detached thread, not waited for, since with a
 * rank gone NCCL's abort can wait for it (the caller is about to stop the process). */
void mt_nccl_close(struct mt_nccl *n, int abort);
/* The same for `count` (at most 8) communicators at once: every finalization starts
 * before any is waited for, so ranks that close shared pairs in different orders do not
 * wait for each other. */
void mt_nccl_close_all(struct mt_nccl **ns, int count, int abort);
/* "NCCL 2.28.3" */
const char *mt_nccl_version(const struct mt_nccl *n);

/* Calls between group_start and group_end are launched together. */
int mt_nccl_group_start(struct mt_nccl *n, struct mt_err *err);
int mt_nccl_group_end(struct mt_nccl *n, struct mt_err *err);
/* In place, summed: buf[count] on every rank. */
int mt_nccl_allreduce(struct mt_nccl *n, void *buf, int64_t count, enum mt_nccl_type t, void *stream,
		      struct mt_err *err);
/* In place, summed: rank r gets the sum of buf[r * count, (r + 1) * count). */
int mt_nccl_reduce_scatter(struct mt_nccl *n, void *buf, int64_t count, enum mt_nccl_type t, void *stream,
			   struct mt_err *err);
/* Out of place, summed: send[count] (scatter = 0: recv[count] the whole sum), or
 * send[ranks * count] (scatter = 1: recv[count] this rank's part of the sum). */
int mt_nccl_reduce_into(struct mt_nccl *n, const void *send, void *recv, int64_t count, enum mt_nccl_type t, int scatter,
			void *stream, struct mt_err *err);
/* In place: rank r's buf[r * count, (r + 1) * count) reaches every rank. */
int mt_nccl_allgather(struct mt_nccl *n, void *buf, int64_t count, enum mt_nccl_type t, void *stream,
		      struct mt_err *err);
/* A two-rank communicator's transfer to / from the other rank, on stream; matched by
 * order with the other rank's calls. Posted, not waited for: NCCL may still be taking it
 * (connecting the pair, enqueueing) in the background, since a caller that waited here
 * could wait for a peer that waits in another communicator for it. Returns 1 while NCCL
 * still takes it (the stream holds nothing of it yet), 0 once taken, -1 on an error.
 * mt_nccl_settle waits for the taking: a caller that records an event behind the
 * transfer calls it first (the communicator's next send or receive, and closing it,
 * settle it too). */
int mt_nccl_send(struct mt_nccl *n, const void *buf, int64_t count, enum mt_nccl_type t, void *stream,
		 struct mt_err *err);
int mt_nccl_recv(struct mt_nccl *n, void *buf, int64_t count, enum mt_nccl_type t, void *stream, struct mt_err *err);
int mt_nccl_settle(struct mt_nccl *n, struct mt_err *err);
/* Wait for a CUDA event recorded after the collectives (cudaEvent_t), polling NCCL's
 * asynchronous error, up to the timeout; on an error or the deadline the communicator
 * is aborted and -1 returned: "rank R (tp T, dp D, pp P): WHAT at step S did not complete
 * within T s: another rank died or hangs". */
int mt_nccl_wait(struct mt_nccl *n, void *event, const char *what, int64_t step, struct mt_err *err);

#endif
