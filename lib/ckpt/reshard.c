/* reshard.c: rewriting a checkpoint for another layout, and merging it into one file (see
 * reshard.h). The slices come from the parameter table (params.h's pieces); the files,
 * the index and the atomic commit from the checkpoint transaction (txn.h) of one process,
 * which writes every part of the target in turn. Nothing here knows MPI. */
#include "ckpt/reshard.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt/txn.h"
#include "model/config.h"
#include "model/params.h"

struct src {
	char dir[4096];
	int64_t iteration;
	struct mt_ckpt_loaded st;
	struct mt_config c;
	struct mt_params ct;
};

static int src_open(struct src *s, const char *path, struct mt_err *err)
{
	double stored = 0;

	memset(s, 0, sizeof(*s));
	if (mt_ckpt_resolve(path, s->dir, sizeof(s->dir), &s->iteration, err) || mt_ckpt_read_state(s->dir, &s->st, err))
		return -1;
	if (mt_config_from_json(&s->c, s->st.config_json, err)) {
		mt_ckpt_loaded_free(&s->st);
		if (err)
			err->code = MT_EXIT_DATA; /* a stored config that does not validate is bad data */
		return mt_err_prefix(err, "checkpoint '%s': attribute 'config'", s->dir);
	}
	/* the config against the file, before it sizes anything */
	if (mt_ckpt_check_config(s->dir, &s->c, &stored, err)) {
		mt_ckpt_loaded_free(&s->st);
		return -1;
	}
	if (mt_params_build(&s->ct, &s->c, err)) {
		mt_ckpt_loaded_free(&s->st);
		return mt_err_prefix(err, "checkpoint '%s'", s->dir);
	}
	if ((double)s->ct.total > stored) {
		mt_params_free(&s->ct);
		mt_ckpt_loaded_free(&s->st);
		return mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': its config makes a model of %lld parameters, the file stores %.0f",
				  s->dir, (long long)s->ct.total, stored);
	}
	return 0;
}

static void src_close(struct src *s)
{
	mt_params_free(&s->ct);
	mt_ckpt_loaded_free(&s->st);
}

static struct mt_ckpt_state state_of(const struct src *s, const char *config_json)
{
	struct mt_ckpt_state x = { s->st.iteration, s->st.consumed_train_samples, s->st.consumed_valid_samples,
				   s->st.optimizer_step, config_json, s->st.train_args_json, s->st.scheduler_json,
				   s->st.rng, s->st.rng_size };
	return x;
}

int mt_ckpt_merge(const char *path, const char *dst, struct mt_err *err)
{
	struct src s;
	struct mt_ckpt_state x;
	float *w, *m = NULL, *v = NULL;
	int rc = -1, opt;

	if (src_open(&s, path, err))
		return -1;
	opt = s.st.has_optimizer;
	w = malloc((size_t)s.ct.total * sizeof(float));
	if (opt) {
		m = malloc((size_t)s.ct.total * sizeof(float));
		v = malloc((size_t)s.ct.total * sizeof(float));
	}
	if (!w || (opt && (!m || !v))) {
		mt_err_set(err, MT_EXIT_IO, "out of memory for the %lld parameters of '%s'", (long long)s.ct.total, s.dir);
		goto out;
	}
	x = state_of(&s, s.st.config_json);
	if (!mt_ckpt_load_part(s.dir, &s.ct, &s.ct, w, m, v, 0, s.ct.n, 0, err) &&
	    !mt_ckpt_save(dst, &s.ct, w, m, v, &x, 0, err))
		rc = 0;
out:
	free(w), free(m), free(v);
	src_close(&s);
	return rc;
}

int mt_ckpt_reshard(const char *path, const char *dst, int tp, int pp, struct mt_err *err)
{
	struct src s;
	struct mt_config tc;
	struct mt_params lt;
	struct mt_pp_split split = { pp, 1, 0, 0 };
	struct mt_ckpt_state x;
	struct mt_ckpt_txn txn;
	char *cfg = NULL;
	int rc = -1, n = tp * pp, have_lt = 0, have_tmp = 0;

	if (tp < 1 || pp < 1)
		return mt_err_set(err, MT_EXIT_USAGE, "the target layout needs sizes of at least 1");
	if (src_open(&s, path, err))
		return -1;
	tc = s.c;
	if (tc.padded_vocab_size % tp)
		tc.padded_vocab_size = mt_config_padded_vocab(tc.vocab_size, tc.make_vocab_size_divisible_by, tp);
	if (mt_params_build(&lt, &tc, err))
		goto out;
	have_lt = 1;
	if (mt_pp_split_check(&tc, &split, err))
		goto out;
	if (!(cfg = mt_config_to_json(&tc))) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out;
	}
	/* one process writes every part of the target, then the index, and commits */
	if (mt_ckpt_txn_begin(&txn, dst, s.iteration, 0, NULL, tp, pp, 1, 1, 0, err))
		goto out;
	have_tmp = 1;
	for (int p = 0; p < pp; p++)
		for (int t = 0; t < tp; t++) {
			struct mt_params st;
			struct mt_ckpt_part part;
			float *w = NULL, *m = NULL, *v = NULL;
			int r = t + tp * p, bad;

			if (mt_params_build_stage(&st, &tc, tp, t, 0, &split, p, err))
				goto out;
			w = malloc((size_t)st.total * sizeof(float));
			if (s.st.has_optimizer) {
				m = malloc((size_t)st.total * sizeof(float));
				v = malloc((size_t)st.total * sizeof(float));
			}
			bad = !w || (s.st.has_optimizer && (!m || !v));
			if (bad)
				mt_err_set(err, MT_EXIT_IO, "out of memory for a part of %lld parameters", (long long)st.total);
			memset(&part, 0, sizeof(part));
			part = (struct mt_ckpt_part){ &st, 0, st.n, 0, w, m, v, r, t, p, 0, n, tp, pp, 1 };
			if (!bad)
				bad = mt_ckpt_load_part(s.dir, &s.ct, &st, w, m, v, 0, st.n, 0, err) ||
				      mt_ckpt_txn_write(&txn, &part, err);
			free(w), free(m), free(v);
			mt_params_free(&st);
			if (bad)
				goto out;
		}
	x = state_of(&s, cfg);
	have_tmp = 0;
	rc = mt_ckpt_txn_finish(&txn, &lt, &x, 0, 0, err);
out:
	if (have_tmp)
		mt_ckpt_txn_abandon(&txn);
	free(cfg);
	if (have_lt)
		mt_params_free(&lt);
	src_close(&s);
	return rc;
}
