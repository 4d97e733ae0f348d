/* tpcomm.h: the tensor-parallel split points (model/tp.h) over MPI on host buffers.
 *
 * The operations run over a tensor-parallel group's struct mt_dist (dist.h), each wait
 * bounded by its timeout. Sums are taken in rank order by every rank (an all-reduce is
 * an ordered reduce-scatter, then an all-gather), so every rank of the group gets the
 * same bits whatever MPI's own algorithms do, and two runs of one layout repeat their
 * bits. The bytes each rank sends are counted per operation kind, for the benchmark's
 * comparison with the analytical volume. A failed operation records its message (the
 * rank's coordinates, the step) and makes every later one fail at once. */
#ifndef MT_TPCOMM_H
#define MT_TPCOMM_H

#include <stdint.h>

#include "base/err.h"
#include "parallel/dist.h"
#include "model/tp.h"

enum { MT_TPC_ALLREDUCE, MT_TPC_ALLGATHER, MT_TPC_REDUCE_SCATTER, MT_TPC_F64, MT_TPC_NKINDS };

struct mt_tpcomm {
	struct mt_dist *g;              /* the tensor-parallel group */
	int64_t step;                   /* the iteration, for messages (the caller sets it) */
	int failed;
	struct mt_err err;              /* the first failure */
	int64_t calls[MT_TPC_NKINDS];
	int64_t bytes[MT_TPC_NKINDS];   /* sent by this rank */
	int64_t elems[MT_TPC_NKINDS];   /* the operations' sizes (n of each call), for the
					 * analytical volume */
	float *scratch;                 /* grown as needed */
	int64_t scratch_n;
	double *scratch64;              /* the double all-reduce's gathered vectors */
	int64_t scratch64_n;
	int64_t *cnt, *dsp;             /* size entries each */
};

/* Fill tp (size and rank from g, the given sequence_parallel, the operations) over group
 * g (mt_dist_group(d, MT_GROUP_TP)); g of one rank gives size 1, whose operations are
 * copies. tp->ctx is c: c must outlive tp. Bytes count what this rank sends, its own
 * part excluded: an all-reduce of n floats sends about 2 n (size - 1) / size of them. */
int mt_tpcomm_init(struct mt_tpcomm *c, struct mt_dist *g, int sequence_parallel, struct mt_tp *tp,
		   struct mt_err *err);
void mt_tpcomm_free(struct mt_tpcomm *c);
/* zero the counters */
void mt_tpcomm_reset_counts(struct mt_tpcomm *c);

#endif
