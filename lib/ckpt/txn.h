/* txn.h: the checkpoint transaction: a sharded checkpoint written by every rank of a
 * group (or by one process, part after part), committed as a whole or not at all.
 *
 * One save is: mt_ckpt_txn_begin (rank 0 makes the temporary iteration directory
 * DIR/iter_N.tmp.<tag> and names it to every rank; without an agreement first, every
 * rank learns there whether each can write), mt_ckpt_txn_write of this rank's part
 * (from any one thread: it touches nothing but the part's file), mt_ckpt_txn_agree on
 * every rank's outcome (polled while some rank still writes), and mt_ckpt_txn_finish:
 * when every part is durable rank 0 names the parts from the ranks' coordinates, writes
 * the index and commits (mt_ckpt_commit: rename, `latest`, keep-last), else it removes
 * the temporary directory; then every rank learns whether rank 0 succeeded. A failure
 * anywhere leaves the previous checkpoint and `latest` as they were. The names on disk
 * are ckpt.c's (ckpt.h). The ranks' collectives go through d->ops (parallel/dist.h), so
 * tools without MPI link this file, and tests drive a group of their own.
 *
 * This module knows neither threads nor the training loop: what a rank's part holds is a
 * struct mt_ckpt_part, and where the part is written (the step loop, a writer thread)
 * is the caller's. */
#ifndef MT_CKPT_TXN_H
#define MT_CKPT_TXN_H

#include <stdint.h>

#include "base/err.h"
#include "ckpt/ckpt.h"
#include "model/params.h"
#include "parallel/dist.h"

struct mt_ckpt_txn {
	const char *dir;     /* DIR (the caller's string, kept until the end) */
	int64_t iteration;
	int keep_last;
	struct mt_dist *d;   /* the ranks, each writing its own part; NULL: one process writes every part */
	int tp, pp, dp;      /* the layout that names the parts (d's, else the caller's) */
	int open;            /* the temporary directory is there and not yet committed or removed (rank 0) */
	char tmpdir[4096];   /* DIR/iter_N.tmp.<tag>, once begun */
};

/* Start the save of iteration `iteration` into dir (created with its parents when
 * missing). With a group d every rank calls this with the same arguments; failed says
 * that this rank cannot write (its reason already in err), which the others learn.
 * agree: every rank learns whether each can write before any starts (a synchronous
 * save); 0: only whether the directory is there (an asynchronous one, whose failures
 * are learned at the agreement on the outcome). Without d (one process writing all
 * tp x pp x dp parts), the temporary directory is made at once. 0: write this rank's
 * part into x->tmpdir (with failed and !agree too: the others write, and the outcome
 * says it); -1: nothing to write on any rank, err says why (another rank's failure as
 * "WHERE: another rank cannot save the checkpoint of iteration N"), the temporary
 * directory removed. */
int mt_ckpt_txn_begin(struct mt_ckpt_txn *x, const char *dir, int64_t iteration, int keep_last, struct mt_dist *d,
		      int tp, int pp, int dp, int agree, int failed, struct mt_err *err);
/* Write this rank's part (pt names its coordinates) into the temporary directory. */
int mt_ckpt_txn_write(const struct mt_ckpt_txn *x, const struct mt_ckpt_part *pt, struct mt_err *err);
/* Every rank's outcome: flag is this rank's (0 its part is written, 1 it failed, 2 it is
 * still being written); *all gets the maximum over the ranks (without d, flag). */
int mt_ckpt_txn_agree(struct mt_ckpt_txn *x, int flag, int *all, struct mt_err *err);
/* Commit or abandon, on every rank, after mt_ckpt_txn_agree gave all < 2: failed says
 * this rank's part failed (its reason in err). When no rank failed, rank 0 (the one
 * process) writes the index over the parts (lt: the logical table; s: the state) and
 * commits; otherwise, or when that fails, it removes the temporary directory. Then the
 * ranks agree on rank 0's result. 0: committed, `latest` names iteration N; -1: not
 * ("WHERE: another rank could not write its part of the checkpoint of iteration N",
 * "rank 0 could not complete the checkpoint of iteration N", or this rank's reason). */
int mt_ckpt_txn_finish(struct mt_ckpt_txn *x, const struct mt_params *lt, const struct mt_ckpt_state *s, int failed,
		       int all, struct mt_err *err);
/* Remove the temporary directory of a transaction that will not finish (rank 0, or the
 * one process; a no-op elsewhere and once finished). */
void mt_ckpt_txn_abandon(struct mt_ckpt_txn *x);

#endif
