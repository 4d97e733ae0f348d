/* ddpplan.h: how a GPU backend lays out data parallelism over the flat parameter buffer:
 * the gradient buckets, each rank's pieces under the distributed optimizer (ZeRO-1), and
 * the optimizer's chunk table over them. Arithmetic only (no device, no communication),
 * so it is tested on the CPU.
 *
 * Buckets follow layer boundaries in the order the backward pass finishes them: the
 * final norm (and an untied output layer) with the last layers, then earlier layers, the
 * embeddings last; a bucket closes once it holds at least bucket_size elements (the one
 * reaching offset 0 may hold fewer). With ZeRO-1 rank r owns the r-th of dp equal pieces
 * of each bucket, floor(n / dp) elements; the n - dp * piece elements left at a bucket's
 * end are owned by every rank. A rank's shard (its fp32 master weights and moments) is,
 * bucket after bucket, its piece then the leftovers. Without ZeRO-1 the shard is the
 * whole buffer. */
#ifndef MT_DDPPLAN_H
#define MT_DDPPLAN_H

#include <stdint.h>

#include "../../kernels/adamw.h"
#include "base/err.h"
#include "model/params.h"

/* the bucket size when none is given, in elements (40 MB of fp32): small enough that a
 * 124M-parameter model has seven buckets to overlap with its backward pass, large enough
 * for NCCL's full bandwidth over NVLink */
#define MT_DDP_BUCKET_DEFAULT 10000000

struct mt_ddp_plan {
	int dp, rank, zero;
	int nb;                         /* buckets, in backward order (descending offsets) */
	int64_t *lo, *hi;               /* bucket j: flat elements [lo[j], hi[j]) */
	int64_t *piece;                 /* elements per rank (0 without ZeRO-1) */
	int64_t *sh;                    /* where bucket j's part starts in the shard */
	int64_t shard;                  /* elements of master weights (and of each moment) held */
};

/* bucket_size > 0 elements; zero: the optimizer is sharded over dp ranks */
int mt_ddp_plan_init(struct mt_ddp_plan *p, const struct mt_params *t, int64_t bucket_size, int dp, int rank,
		     int zero, struct mt_err *err);
void mt_ddp_plan_free(struct mt_ddp_plan *p);
/* The AdamW chunks (adamw.h) of what this rank updates: every parameter, or with ZeRO-1
 * its pieces of every bucket and then the leftovers, cut at parameter boundaries and at
 * MT_ADAMW_CHUNK elements; start indexes the whole buffer, mstart the shard. Written to
 * out unless NULL; returns how many, and in *npiece (may be NULL) how many come before the
 * leftovers (all of them without ZeRO-1). */
int64_t mt_ddp_plan_chunks(const struct mt_ddp_plan *p, const struct mt_params *t, struct mt_chunk *out,
			   int64_t *npiece);

#endif
