/* Unit tests for lib/ckpt/txn.c, the checkpoint transaction, with its commit and abandon
 * rules played by ranks in one process: each rank a thread with a struct mt_dist of its
 * own whose agree and bcast (d->ops) are a barrier over the threads of the test, in a
 * TP=2 x PP=2 x DP=2 layout of a small GPT (data-parallel rank 1 writing empty parts, as
 * the trainer's ranks do without ZeRO). HDF5 is not thread-safe: the test lets one rank
 * at a time write its part. Cases: every rank writes: committed, `latest` moved, the set
 * verifies; a rank that cannot write before writing (a synchronous and an asynchronous
 * save): nothing committed, the temporary directory gone, the previous checkpoint and
 * `latest` untouched, every rank told why; a rank whose part fails to write: abandoned;
 * rank 0's index fails: abandoned, the others told; a rank still writing at the first
 * agreement: the outcome waits for it; keep-last still prunes; and one process writing
 * every part itself (mt-ckpt-reshard's way), committing and abandoning. */
#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt/txn.h"
#include "model/config.h"
#include "model/params.h"
#include "parallel/dist.h"
#include "tap.h"

#define TP 2
#define PP 2
#define DP 2
#define WORLD (TP * PP * DP)

static char dir[256];

/* ---- a group of threads standing in for the ranks ---------------------------------------- */

static pthread_barrier_t barrier;
static int flags[WORLD];
static unsigned char bbuf[64];
static pthread_mutex_t h5_mu = PTHREAD_MUTEX_INITIALIZER; /* one HDF5 caller at a time */

static int fake_agree(struct mt_dist *d, int64_t step, int flag, int *max_flag, struct mt_err *err)
{
	int m = 0;

	(void)step, (void)err;
	flags[d->rank] = flag;
	pthread_barrier_wait(&barrier);
	for (int r = 0; r < d->world; r++)
		m = flags[r] > m ? flags[r] : m;
	pthread_barrier_wait(&barrier);
	*max_flag = m;
	return 0;
}

static int fake_bcast(struct mt_dist *d, void *buf, int64_t n, int root, const char *what, struct mt_err *err)
{
	(void)what, (void)err;
	if (d->rank == root)
		memcpy(bbuf, buf, (size_t)n);
	pthread_barrier_wait(&barrier);
	if (d->rank != root)
		memcpy(buf, bbuf, (size_t)n);
	pthread_barrier_wait(&barrier);
	return 0;
}

static const struct mt_dist_ops fake_ops = { .agree = fake_agree, .bcast = fake_bcast };

/* ---- the model and each rank's part -------------------------------------------------------- */

static struct mt_config cfg;
static struct mt_params lt, lt_other; /* the logical table; another model's (an index that cannot be) */
static char *cfg_json;

struct rank {
	struct mt_dist d;
	struct mt_params st;
	float *w;
	pthread_t th;
	/* what the case makes this rank do, and what it got */
	const struct scen *s;
	int rc_begin, rc_finish, polled;
	struct mt_err err;
};

static struct rank ranks[WORLD];

struct scen {
	int64_t iteration;
	int keep_last;
	int agree;      /* a synchronous save: every rank learns before writing whether each can */
	int fail_begin; /* this rank cannot write (-1: none) */
	int fail_write; /* this rank's part fails to write */
	int bad_index;  /* rank 0 indexes the parts against another model's table */
	int poll;       /* this rank is still writing at a first agreement */
};

static void setup(void)
{
	struct mt_pp_split split = { PP, 1, 0, 0 };
	struct mt_config other;
	struct mt_err e = { 0 };

	memset(&cfg, 0, sizeof(cfg));
	cfg.num_layers = 2;
	cfg.hidden_size = 16;
	cfg.num_attention_heads = 2;
	cfg.seq_length = 8;
	cfg.vocab_size = 61;
	cfg.make_vocab_size_divisible_by = 16;
	cfg.add_bias_linear = 1;
	other = cfg;
	other.num_layers = 4;
	mt_config_defaults(&cfg);
	mt_config_defaults(&other);
	if (mt_params_build(&lt, &cfg, &e) || mt_params_build(&lt_other, &other, &e) || !(cfg_json = mt_config_to_json(&cfg))) {
		printf("Bail out! %s\n", e.msg);
		exit(1);
	}
	for (int r = 0; r < WORLD; r++) {
		struct rank *k = &ranks[r];
		struct mt_dist *d = &k->d;

		memset(k, 0, sizeof(*k));
		d->ops = &fake_ops;
		d->rank = r, d->world = WORLD;
		d->tp = TP, d->pp = PP, d->dp = DP;
		d->tp_rank = r % TP, d->dp_rank = r / TP % DP, d->pp_rank = r / (TP * DP); /* Megatron's order */
		snprintf(d->where, sizeof(d->where), "rank %d (tp %d, dp %d, pp %d)", r, d->tp_rank, d->dp_rank, d->pp_rank);
		if (mt_params_build_stage(&k->st, &cfg, TP, d->tp_rank, 0, &split, d->pp_rank, &e)) {
			printf("Bail out! %s\n", e.msg);
			exit(1);
		}
		k->w = malloc((size_t)k->st.total * sizeof(float));
		for (int64_t i = 0; i < k->st.total; i++)
			k->w[i] = (float)((i * 7 + r) % 101) / 128.0f - 0.25f;
	}
}

static struct mt_ckpt_state state_of(int64_t iteration)
{
	struct mt_ckpt_state s = { iteration, 16 * iteration, 0, iteration, cfg_json, NULL, NULL, NULL, 0 };
	return s;
}

static void *rank_main(void *arg)
{
	struct rank *k = arg;
	const struct scen *s = k->s;
	struct mt_ckpt_state st = state_of(s->iteration);
	struct mt_ckpt_txn x;
	struct mt_err e = { 0 };
	int r = k->d.rank, failed = s->fail_begin == r, all = 0;

	if (failed)
		mt_err_set(&e, MT_EXIT_DATA, "rank %d holds a nan", r);
	k->rc_begin = mt_ckpt_txn_begin(&x, dir, s->iteration, s->keep_last, &k->d, 0, 0, 0, s->agree, failed, &e);
	if (k->rc_begin) {
		k->err = e;
		return NULL;
	}
	if (!failed) {
		/* data-parallel rank 1 owns nothing without ZeRO: an empty part */
		struct mt_ckpt_part pt = { &k->st, 0, k->d.dp_rank == 0 ? k->st.n : 0, 0, k->w, NULL, NULL,
					   r, k->d.tp_rank, k->d.pp_rank, k->d.dp_rank, WORLD, TP, PP, DP };
		if (s->fail_write == r)
			pt.w = NULL; /* refused: a part without weights */
		pthread_mutex_lock(&h5_mu);
		failed = mt_ckpt_txn_write(&x, &pt, &e) != 0;
		pthread_mutex_unlock(&h5_mu);
	}
	if (s->poll >= 0) {
		mt_ckpt_txn_agree(&x, s->poll == r ? 2 : failed, &all, &e);
		k->polled = all;
	}
	mt_ckpt_txn_agree(&x, failed, &all, &e);
	k->rc_finish = mt_ckpt_txn_finish(&x, s->bad_index && r == 0 ? &lt_other : &lt, &st, failed, all, &e);
	k->err = e;
	return NULL;
}

static void play(const struct scen *s)
{
	pthread_barrier_init(&barrier, NULL, WORLD);
	for (int r = 0; r < WORLD; r++) {
		ranks[r].s = s;
		ranks[r].rc_begin = ranks[r].rc_finish = ranks[r].polled = -7;
		memset(&ranks[r].err, 0, sizeof(ranks[r].err));
		pthread_create(&ranks[r].th, NULL, rank_main, &ranks[r]);
	}
	for (int r = 0; r < WORLD; r++)
		pthread_join(ranks[r].th, NULL);
	pthread_barrier_destroy(&barrier);
}

static const struct scen all_ok = { 1, 0, 1, -1, -1, 0, -1 };

/* ---- what is on disk -------------------------------------------------------------------------- */

static int64_t latest(void)
{
	int64_t it = -2;
	struct mt_err e = { 0 };

	mt_ckpt_latest(dir, &it, &e);
	return it;
}

static int iter_exists(int64_t it)
{
	char p[512];
	struct stat sb;

	mt_ckpt_iter_dir(p, sizeof(p), dir, it, NULL);
	return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* Entries of dir whose name holds ".tmp." (a temporary iteration directory left). */
static int leftovers(void)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	while (d && (de = readdir(d)))
		n += strstr(de->d_name, ".tmp.") != NULL;
	if (d)
		closedir(d);
	return n;
}

static int verifies(int64_t it)
{
	char p[512];
	struct mt_err e = { 0 };
	FILE *out = fopen("/dev/null", "w");
	int rc;

	mt_ckpt_iter_dir(p, sizeof(p), dir, it, NULL);
	rc = mt_ckpt_verify(p, out, &e);
	fclose(out);
	if (rc)
		printf("#   %s\n", e.msg);
	return rc == 0;
}

static int count(int (*pred)(const struct rank *))
{
	int n = 0;

	for (int r = 0; r < WORLD; r++)
		n += pred(&ranks[r]);
	return n;
}

static int begun(const struct rank *k) { return k->rc_begin == 0; }
static int committed(const struct rank *k) { return k->rc_begin == 0 && k->rc_finish == 0; }
static int not_begun(const struct rank *k) { return k->rc_begin == -1 && k->err.code != 0; }
static int not_finished(const struct rank *k) { return k->rc_begin == 0 && k->rc_finish == -1 && k->err.code != 0; }

/* ---- the cases ------------------------------------------------------------------------------- */

static void test_ckpt_txn_commit(void)
{
	char part[512];
	struct stat sb;

	play(&all_ok);
	is_int(count(committed), WORLD, "all ranks ok: every rank's transaction commits");
	is_int(latest(), 1, "latest names iteration 1");
	ok(iter_exists(1) && !leftovers(), "iter_0000001 is there, no temporary directory is left");
	snprintf(part, sizeof(part), "%s/iter_0000001/model-tp01-pp001-dp0001.h5", dir);
	ok(stat(part, &sb) == 0, "the parts are named by the ranks' coordinates (model-tp01-pp001-dp0001.h5 is there)");
	ok(verifies(1), "the set verifies: every part there, every tensor against its checksum");
}

static void test_ckpt_txn_fail_before(void)
{
	struct scen s = all_ok;

	s.iteration = 2;
	s.fail_begin = 5;
	play(&s);
	is_int(count(not_begun), WORLD, "a rank that cannot write: no rank begins (a synchronous save)");
	like(ranks[0].err.msg, "rank 0 (tp 0, dp 0, pp 0): another rank cannot save the checkpoint of iteration 2",
	     "the others are told another rank cannot save");
	is_str(ranks[5].err.msg, "rank 5 holds a nan", "the failing rank keeps its own reason");
	ok(!iter_exists(2) && !leftovers(), "nothing committed, the temporary directory removed");
	ok(latest() == 1 && iter_exists(1) && verifies(1), "the previous checkpoint and latest are untouched");

	s.agree = 0; /* --async-save: learned at the agreement on the outcome */
	play(&s);
	is_int(count(begun), WORLD, "asynchronous: every rank begins, the failing one too");
	is_int(count(not_finished), WORLD, "asynchronous: no rank commits");
	like(ranks[3].err.msg, "another rank could not write its part of the checkpoint of iteration 2",
	     "the others are told another rank could not write its part");
	ok(!iter_exists(2) && !leftovers(), "nothing committed, the temporary directory removed");
	ok(latest() == 1 && verifies(1), "the previous checkpoint and latest are untouched");
}

static void test_ckpt_txn_fail_write(void)
{
	struct scen s = all_ok;

	s.iteration = 3;
	s.fail_write = 6;
	play(&s);
	is_int(count(not_finished), WORLD, "one rank fails writing its part: abandoned on every rank");
	like(ranks[6].err.msg, "internal: a checkpoint part without weights", "the failing rank says why");
	like(ranks[0].err.msg, "another rank could not write its part of the checkpoint of iteration 3", "rank 0 is told");
	ok(!iter_exists(3) && !leftovers() && latest() == 1, "nothing committed, no temporary directory, latest untouched");
}

static void test_ckpt_txn_bad_index(void)
{
	struct scen s = all_ok;

	s.iteration = 4;
	s.bad_index = 1;
	play(&s);
	is_int(count(not_finished), WORLD, "rank 0 fails to write the index: abandoned on every rank");
	like(ranks[0].err.msg, "the parts do not hold tensor", "rank 0 says why");
	like(ranks[7].err.msg, "rank 0 could not complete the checkpoint of iteration 4", "the others are told");
	ok(!iter_exists(4) && !leftovers() && latest() == 1, "nothing committed, no temporary directory, latest untouched");
}

static void test_ckpt_txn_poll(void)
{
	struct scen s = all_ok;

	s.iteration = 5;
	s.poll = 2;
	play(&s);
	is_int(ranks[0].polled, 2, "a rank still writing: the first agreement says so on every rank");
	is_int(count(committed), WORLD, "the next agreement commits");
	ok(latest() == 5 && verifies(5), "latest names iteration 5");
}

static void test_ckpt_txn_keep_last(void)
{
	struct scen s = all_ok;

	s.keep_last = 2;
	for (s.iteration = 6; s.iteration <= 7; s.iteration++)
		play(&s);
	is_int(count(committed), WORLD, "keep-last 2: iteration 7 commits");
	ok(latest() == 7 && iter_exists(7) && iter_exists(6), "the newest two are kept");
	ok(!iter_exists(1) && !iter_exists(5), "older ones are pruned");
}

/* mt-ckpt-reshard's way: no group, one process writes every part itself */
static void test_ckpt_txn_one_process(void)
{
	struct mt_ckpt_txn x;
	struct mt_ckpt_state st = state_of(8);
	struct mt_err e = { 0 };
	int bad = 0;

	ok(!mt_ckpt_txn_begin(&x, dir, 8, 0, NULL, TP, PP, DP, 1, 0, &e), "one process begins");
	for (int r = 0; r < WORLD; r++) {
		const struct rank *k = &ranks[r];
		struct mt_ckpt_part pt = { &k->st, 0, k->d.dp_rank == 0 ? k->st.n : 0, 0, k->w, NULL, NULL,
					   r, k->d.tp_rank, k->d.pp_rank, k->d.dp_rank, WORLD, TP, PP, DP };
		bad |= mt_ckpt_txn_write(&x, &pt, &e) != 0;
	}
	ok(!bad && !mt_ckpt_txn_finish(&x, &lt, &st, 0, 0, &e), "it writes every part and commits");
	ok(latest() == 8 && verifies(8) && !leftovers(), "latest names iteration 8, which verifies");

	st = state_of(9);
	ok(!mt_ckpt_txn_begin(&x, dir, 9, 0, NULL, TP, PP, DP, 1, 0, &e), "begin iteration 9");
	ok(mt_ckpt_txn_finish(&x, &lt, &st, 0, 0, &e) == -1, "an index without parts fails");
	ok(!iter_exists(9) && !leftovers() && latest() == 8, "abandoned: nothing left, latest untouched");

	ok(!mt_ckpt_txn_begin(&x, dir, 9, 0, NULL, TP, PP, DP, 1, 0, &e) && leftovers() == 1,
	   "begin again: the temporary directory is there");
	mt_ckpt_txn_abandon(&x);
	ok(!iter_exists(9) && !leftovers(), "mt_ckpt_txn_abandon removes the temporary directory");
}

int main(void)
{
	char cmd[300];

	alarm(300); /* a rank left waiting at an agreement is a failure, not a hang */
	snprintf(dir, sizeof(dir), "%s/mt-test-ckpt-txn-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir))
		return 1;
	setup();
	test_ckpt_txn_commit();
	test_ckpt_txn_fail_before();
	test_ckpt_txn_fail_write();
	test_ckpt_txn_bad_index();
	test_ckpt_txn_poll();
	test_ckpt_txn_keep_last();
	test_ckpt_txn_one_process();
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		return 1;
	return tap_done();
}
