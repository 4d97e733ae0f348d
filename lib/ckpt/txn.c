/* txn.c: the checkpoint transaction (see txn.h): the steps of a sharded save and the
 * agreement between ranks around them, over ckpt.c's directory and commit and
 * ckpt_set.c's parts and index. No HDF5 of its own and no MPI: the group's collectives
 * are d->ops's. */
#include "ckpt/txn.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int mt_ckpt_txn_begin(struct mt_ckpt_txn *x, const char *dir, int64_t iteration, int keep_last, struct mt_dist *d,
		      int tp, int pp, int dp, int agree, int failed, struct mt_err *err)
{
	struct mt_err scratch = { 0 };
	long tag = (long)getpid();
	int rc = failed ? -1 : 0, all = 0, bad;

	memset(x, 0, sizeof(*x));
	x->dir = dir;
	x->iteration = iteration;
	x->keep_last = keep_last;
	x->d = d;
	x->tp = d ? d->tp : tp;
	x->pp = d ? d->pp : pp;
	x->dp = d ? d->dp : dp;
	if (!d) {
		if (rc || mt_ckpt_tmpdir(x->tmpdir, sizeof(x->tmpdir), dir, iteration, tag, err))
			return -1;
		x->open = 1;
		return 0;
	}
	/* rank 0 makes the temporary directory and names it to all (-1: it could not); once
	 * this rank has a reason, later ones do not replace it */
	if (d->rank == 0) {
		if (mt_ckpt_tmpdir(x->tmpdir, sizeof(x->tmpdir), dir, iteration, tag, rc ? &scratch : err))
			tag = -1, rc = -1;
		else
			x->open = 1;
	}
	bad = d->ops->bcast(d, &tag, sizeof(tag), 0, "the checkpoint's directory", rc ? &scratch : err) != 0;
	if (bad)
		rc = -1;
	if (!agree) {
		/* asynchronous: nothing more to agree on before writing. A rank whose part fails
		 * says so at the agreement on the outcome, which abandons the set on every rank */
		bad = bad || tag < 0;
	} else {
		/* every rank learns whether each can write before any starts */
		if (d->ops->agree(d, iteration, rc ? 1 : 0, &all, rc ? &scratch : err))
			return -1;
		bad = rc || all || tag < 0;
	}
	if (bad) {
		if (!rc)
			mt_err_set(err, MT_EXIT_IO, "%s: another rank cannot save the checkpoint of iteration %lld", d->where,
				   (long long)iteration);
		if (d->rank == 0 && tag >= 0)
			mt_ckpt_txn_abandon(x);
		return -1;
	}
	if (d->rank != 0 && mt_ckpt_tmpdir_name(x->tmpdir, sizeof(x->tmpdir), dir, iteration, tag, err))
		return -1;
	return 0;
}

int mt_ckpt_txn_write(const struct mt_ckpt_txn *x, const struct mt_ckpt_part *pt, struct mt_err *err)
{
	return mt_ckpt_part_write(x->tmpdir, pt, x->iteration, err);
}

int mt_ckpt_txn_agree(struct mt_ckpt_txn *x, int flag, int *all, struct mt_err *err)
{
	if (!x->d) {
		*all = flag;
		return 0;
	}
	return x->d->ops->agree(x->d, x->iteration, flag, all, err);
}

/* Rank 0, every part durable: the parts named by the ranks' coordinates (mt_dist_coords's
 * order, tensor fastest, then data, then pipeline), the index over them, the commit. */
static int index_and_commit(struct mt_ckpt_txn *x, const struct mt_params *lt, const struct mt_ckpt_state *s,
			    struct mt_err *err)
{
	int n = x->tp * x->pp * x->dp, bad, rc;
	char **names;

	if (!lt) /* the one process wrote model.h5 itself (mt_ckpt_save) */
		return mt_ckpt_commit(x->dir, x->tmpdir, x->iteration, x->keep_last, err);
	names = calloc((size_t)n, sizeof(*names));
	bad = !names;
	for (int r = 0; r < n && !bad; r++) {
		int tpr = r % x->tp, dpr = (r / x->tp) % x->dp, ppr = r / (x->tp * x->dp);
		bad = !(names[r] = malloc(128)) || mt_ckpt_part_name(names[r], 128, tpr, ppr, dpr, err);
	}
	if (bad && !names)
		rc = mt_err_set(err, MT_EXIT_IO, "out of memory");
	else if (bad)
		rc = -1;
	else if (mt_ckpt_index_write(x->tmpdir, lt, s, names, n, err))
		rc = -1, mt_ckpt_txn_abandon(x);
	else
		rc = mt_ckpt_commit(x->dir, x->tmpdir, x->iteration, x->keep_last, err);
	for (int r = 0; names && r < n; r++)
		free(names[r]);
	free(names);
	return rc;
}

int mt_ckpt_txn_finish(struct mt_ckpt_txn *x, const struct mt_params *lt, const struct mt_ckpt_state *s, int failed,
		       int all, struct mt_err *err)
{
	struct mt_dist *d = x->d;
	struct mt_err e2 = { 0 };
	int rc = 0;

	if (failed)
		rc = -1;
	else if (all)
		rc = mt_err_set(err, MT_EXIT_IO, "%s: another rank could not write its part of the checkpoint of iteration %lld",
				d ? d->where : "checkpoint", (long long)x->iteration);
	/* every part is durable: rank 0 indexes them and moves latest */
	if (!d || d->rank == 0) {
		if (rc)
			mt_ckpt_txn_abandon(x);
		else
			rc = index_and_commit(x, lt, s, err);
	}
	x->open = 0;
	if (d) {
		if (d->ops->agree(d, x->iteration, rc ? 1 : 0, &all, rc ? &e2 : err))
			rc = -1;
		else if (!rc && all)
			rc = mt_err_set(err, MT_EXIT_IO, "rank 0 could not complete the checkpoint of iteration %lld",
					(long long)x->iteration);
	}
	return rc;
}

void mt_ckpt_txn_abandon(struct mt_ckpt_txn *x)
{
	if (x->open)
		mt_ckpt_abandon(x->tmpdir);
	x->open = 0;
}
