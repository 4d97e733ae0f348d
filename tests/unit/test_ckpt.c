/* Unit tests for lib/ckpt/ckpt*.c: a save/load round trip that must be bit-exact (weights,
 * AdamW moments, every state field and string, an RNG blob with zero bytes, a JSON text
 * past HDF5's 64 KiB object-header limit), weights-only checkpoints, the latest markers
 * and every form of path mt_ckpt_resolve takes (Megatron's tracker file included),
 * keep-last (never the newest, never a newer run's, never a user's iter_final), saving
 * the same iteration twice, interrupted saves (a stale temporary directory, a final name
 * that cannot be taken, a read-only directory, and children killed with SIGKILL while
 * writing: the latest marker must always name a complete checkpoint that loads), shape
 * mismatches, missing and extra tensors, NaN and Inf refused, truncated, garbage,
 * foreign and newer files (a clean MT_EXIT_DATA naming the file, never a crash),
 * inspect listing every tensor as text and as JSON, and a tensor larger than a write
 * slab (written in several, with the write-behind dropping the written pages from the
 * page cache).  The parameter table is built by hand
 * (this test does not depend on params.c). */
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>
#include <jansson.h>

#include "ckpt/ckpt.h"
#include "tap.h"

/* ok(), printing the error message when the check fails */
#define ok_err(cond, e, ...)                                 \
	do {                                                 \
		if (!ok(cond, __VA_ARGS__))                  \
			printf("#   error: %s\n", (e).msg); \
	} while (0)

static char dir[256];

static char *path(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *path(const char *fmt, ...)
{
	static char p[8][700];
	static int k;
	char name[400];
	va_list ap;

	k = (k + 1) % 8;
	va_start(ap, fmt);
	vsnprintf(name, sizeof(name), fmt, ap);
	va_end(ap);
	snprintf(p[k], sizeof(p[k]), "%s/%s", dir, name);
	return p[k];
}

static char *read_text(const char *p)
{
	static char buf[256];
	FILE *f = fopen(p, "rb");
	size_t n;

	if (!f)
		return NULL;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	return buf;
}

static void write_file(const char *p, const void *buf, size_t n)
{
	FILE *f = fopen(p, "wb");

	if (!f)
		return;
	if (n)
		fwrite(buf, 1, n, f);
	fclose(f);
}

static int exists(const char *p)
{
	struct stat st;

	return stat(p, &st) == 0;
}

static void run(const char *fmt, const char *a, const char *b)
{
	char cmd[2000];

	snprintf(cmd, sizeof(cmd), fmt, a, b, a);
	if (system(cmd) != 0)
		printf("# command failed: %s\n", cmd);
}

/* Entries of a directory, sorted, space-separated. */
static const char *listing(const char *d)
{
	static char out[2048];
	struct dirent **v;
	int n = scandir(d, &v, NULL, alphasort);

	out[0] = '\0';
	for (int i = 0; i < n; i++) {
		if (strcmp(v[i]->d_name, ".") && strcmp(v[i]->d_name, "..") && strlen(out) + strlen(v[i]->d_name) + 2 < sizeof(out)) {
			if (out[0])
				strcat(out, " ");
			strcat(out, v[i]->d_name);
		}
		free(v[i]);
	}
	if (n >= 0)
		free(v);
	return out;
}

/* ---- a hand-built parameter table ---- */

struct row {
	const char *name;
	int ndim;
	int64_t rows, cols;
};

static const struct row small_rows[] = {
	{ "embedding.word_embeddings.weight", 2, 10, 4 },
	{ "decoder.layers.0.self_attention.linear_qkv.weight", 2, 12, 4 },
	{ "decoder.layers.0.self_attention.linear_qkv.bias", 1, 12, 1 },
	{ "decoder.layers.0.mlp.linear_fc1.weight", 2, 16, 4 },
	{ "decoder.final_layernorm.weight", 1, 4, 1 },
};
#define NSMALL ((int)(sizeof(small_rows) / sizeof(small_rows[0])))

static void table_make(struct mt_params *t, const struct row *r, int n)
{
	memset(t, 0, sizeof(*t));
	t->p = calloc((size_t)n, sizeof(*t->p));
	t->n = n;
	for (int i = 0; i < n; i++) {
		struct mt_param *p = &t->p[i];
		snprintf(p->name, sizeof(p->name), "%s", r[i].name);
		p->layer = -1;
		p->ndim = r[i].ndim;
		p->shape[0] = r[i].rows;
		p->shape[1] = r[i].ndim == 2 ? r[i].cols : 1;
		p->numel = p->shape[0] * p->shape[1];
		p->offset = t->total;
		p->tp_dim = -1;
		t->total += p->numel;
	}
}

static void table_free(struct mt_params *t)
{
	free(t->p);
	memset(t, 0, sizeof(*t));
}

/* Values that depend on the iteration and the buffer, with the awkward ones a
 * conversion could lose: -0, a subnormal, the largest float, tiny and huge ones. */
static void fill(float *x, int64_t n, int64_t iteration, int which)
{
	for (int64_t i = 0; i < n; i++) {
		uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(which * 40503 + iteration * 977);
		x[i] = (float)(int32_t)(h >> 4) * 1e-8f + (float)iteration;
	}
	if (n > 4) {
		x[0] = -0.0f;
		x[1] = 1e-45f;
		x[2] = 3.4028235e38f;
		x[3] = -1.17549435e-38f;
		x[4] = (float)iteration;
	}
}

struct bufs {
	float *w, *m, *v;
};

static void bufs_make(struct bufs *b, const struct mt_params *t, int64_t iteration)
{
	b->w = malloc((size_t)t->total * sizeof(float));
	b->m = malloc((size_t)t->total * sizeof(float));
	b->v = malloc((size_t)t->total * sizeof(float));
	fill(b->w, t->total, iteration, 0);
	fill(b->m, t->total, iteration, 1);
	fill(b->v, t->total, iteration, 2);
	for (int64_t i = 0; i < t->total; i++)
		b->v[i] = fabsf(b->v[i]);
}

static void bufs_zero(struct bufs *b, const struct mt_params *t)
{
	b->w = calloc((size_t)t->total, sizeof(float));
	b->m = calloc((size_t)t->total, sizeof(float));
	b->v = calloc((size_t)t->total, sizeof(float));
}

static void bufs_free(struct bufs *b)
{
	free(b->w);
	free(b->m);
	free(b->v);
}

static int same(const float *a, const float *b, int64_t n)
{
	return memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

static const char config[] = "{\n  \"num-layers\": 1,\n  \"hidden-size\": 4,\n  \"norm-epsilon\": 1.0000000000000001e-05\n}";
static const char sched[] = "{\"lr\": 0.00059999999999999995, \"decay-style\": \"cosine\"}";

static struct mt_ckpt_state state_of(int64_t iteration)
{
	static const unsigned char rng[] = { 0, 1, 2, 0, 255, 0, 7 };
	struct mt_ckpt_state s = {
		.iteration = iteration,
		.consumed_train_samples = iteration * 64,
		.consumed_valid_samples = iteration * 3,
		.optimizer_step = iteration + 1,
		.config_json = config,
		.train_args_json = "{\"seed\": 1234}",
		.scheduler_json = sched,
		.rng = rng,
		.rng_size = sizeof(rng),
	};
	return s;
}

/* Save iteration it of the small table (moments too); the weights follow fill(). */
static int save_small(const char *d, int64_t it, int keep_last, struct mt_err *e)
{
	struct mt_params t;
	struct bufs b;
	struct mt_ckpt_state s = state_of(it);
	int rc;

	table_make(&t, small_rows, NSMALL);
	bufs_make(&b, &t, it);
	rc = mt_ckpt_save(d, &t, b.w, b.m, b.v, &s, keep_last, e);
	bufs_free(&b);
	table_free(&t);
	return rc;
}

/* Does the checkpoint at path load, and hold iteration it's values? */
static int holds(const char *p, int64_t it)
{
	struct mt_params t;
	struct bufs want, got;
	struct mt_err e = { 0 };
	int good;

	table_make(&t, small_rows, NSMALL);
	bufs_make(&want, &t, it);
	bufs_zero(&got, &t);
	good = !mt_ckpt_load(p, &t, got.w, got.m, got.v, 0, &e) && same(got.w, want.w, t.total) &&
	       same(got.m, want.m, t.total) && same(got.v, want.v, t.total);
	if (!good)
		printf("#   loading '%s' as iteration %lld: %s\n", p, (long long)it, e.msg[0] ? e.msg : "values differ");
	bufs_free(&want);
	bufs_free(&got);
	table_free(&t);
	return good;
}

/* ---- tests ---- */

static void test_ckpt_roundtrip(void)
{
	struct mt_params t;
	struct bufs b, g;
	struct mt_err e = { 0 };
	struct mt_ckpt_state s = state_of(500);
	struct mt_ckpt_loaded st;
	size_t big_n = 100000;
	char *big = malloc(big_n + 64), *d = path("rt");

	/* a train_args text far past the 64 KiB object-header limit, with UTF-8 and newlines */
	strcpy(big, "{\"data-path\": \"caf\xc3\xa9\",\n \"pad\": \"");
	for (size_t i = strlen(big); i < big_n; i++)
		big[i] = (char)('a' + i % 26);
	strcpy(big + big_n, "\"}\n");
	s.train_args_json = big;
	table_make(&t, small_rows, NSMALL);
	bufs_make(&b, &t, 500);
	bufs_zero(&g, &t);
	ok_err(!mt_ckpt_save(d, &t, b.w, b.m, b.v, &s, 0, &e), e, "save iteration 500 into a new directory");
	is_str(listing(d), "iter_0000500 latest latest_checkpointed_iteration.txt", "the directory holds the iteration and the markers, no temporaries");
	is_str(listing(path("rt/iter_0000500")), "model.h5", "the iteration directory holds model.h5");
	is_str(read_text(path("rt/latest")), "500\n", "latest holds 500 and a newline");
	is_str(read_text(path("rt/latest_checkpointed_iteration.txt")), "500", "megatron's tracker holds 500, no newline");

	ok_err(!mt_ckpt_read_state(path("rt/iter_0000500"), &st, &e), e, "read the state");
	is_int(st.format_version, 1, "format version");
	is_int(st.iteration, 500, "iteration");
	is_int(st.consumed_train_samples, 500 * 64, "consumed train samples");
	is_int(st.consumed_valid_samples, 500 * 3, "consumed valid samples");
	is_int(st.has_optimizer, 1, "has optimizer state");
	is_int(st.optimizer_step, 501, "optimizer step");
	is_str(st.config_json, config, "config json, byte for byte");
	is_str(st.train_args_json, big, "a 100 kB train_args text with UTF-8, byte for byte");
	is_str(st.scheduler_json, sched, "scheduler json");
	ok(st.rng_size == s.rng_size && st.rng && !memcmp(st.rng, s.rng, s.rng_size), "rng blob with zero bytes");
	mt_ckpt_loaded_free(&st);

	ok_err(!mt_ckpt_load(path("rt/iter_0000500"), &t, g.w, g.m, g.v, 0, &e), e, "load");
	ok(same(g.w, b.w, t.total), "weights bit-exact (-0, subnormal, FLT_MAX included)");
	ok(same(g.m, b.m, t.total), "exp_avg bit-exact");
	ok(same(g.v, b.v, t.total), "exp_avg_sq bit-exact");
	memset(g.w, 0, (size_t)t.total * sizeof(float));
	ok_err(!mt_ckpt_load(path("rt/iter_0000500/model.h5"), &t, g.w, NULL, NULL, 0, &e) && same(g.w, b.w, t.total), e,
	   "load weights only, from the file path");

	bufs_free(&b);
	bufs_free(&g);
	table_free(&t);
	free(big);
}

static void test_ckpt_weights_only(void)
{
	struct mt_params t;
	struct bufs b, g;
	struct mt_err e = { 0 };
	struct mt_ckpt_state s = state_of(3);
	struct mt_ckpt_loaded st;

	s.train_args_json = NULL;
	s.scheduler_json = NULL;
	s.rng = NULL;
	s.rng_size = 0;
	table_make(&t, small_rows, NSMALL);
	bufs_make(&b, &t, 3);
	bufs_zero(&g, &t);
	ok_err(!mt_ckpt_save(path("wo"), &t, b.w, NULL, NULL, &s, 0, &e), e, "save weights only, no rng, no json texts");
	ok_err(!mt_ckpt_read_state(path("wo"), &st, &e), e, "read the state through the latest marker");
	is_int(st.has_optimizer, 0, "no optimizer state");
	is_int(st.optimizer_step, 0, "optimizer step 0");
	ok(st.rng == NULL && st.rng_size == 0, "no rng blob");
	is_str(st.train_args_json, "{}", "missing train args stored as {}");
	is_str(st.scheduler_json, "{}", "missing scheduler stored as {}");
	mt_ckpt_loaded_free(&st);
	ok_err(!mt_ckpt_load(path("wo/iter_0000003"), &t, g.w, NULL, NULL, 0, &e) && same(g.w, b.w, t.total), e,
	   "weights load");
	ok(mt_ckpt_load(path("wo/iter_0000003"), &t, g.w, g.m, g.v, 0, &e) == -1 && e.code == MT_EXIT_DATA,
	   "asking for the moments fails");
	like(e.msg, "no optimizer state", "and says there is no optimizer state");
	like(e.msg, "--no-load-optim", "and what to do");
	mt_err_clear(&e);
	ok(mt_ckpt_save(path("wo"), &t, b.w, b.m, NULL, &s, 0, &e) == -1 && e.code == MT_EXIT_USAGE,
	   "one moment without the other is refused");
	s.config_json = NULL;
	ok(mt_ckpt_save(path("wo"), &t, b.w, NULL, NULL, &s, 0, &e) == -1, "a state without a config is refused");
	bufs_free(&b);
	bufs_free(&g);
	table_free(&t);
}

static void test_ckpt_resolve(void)
{
	struct mt_err e = { 0 };
	char out[512];
	int64_t it = -2;

	ok_err(!save_small(path("rs"), 40, 0, &e) && !save_small(path("rs"), 1234567, 0, &e) &&
	   !save_small(path("rs"), 12345678, 0, &e) && !save_small(path("rs"), 70, 0, &e), e, "four saves");
	ok(exists(path("rs/iter_12345678")), "an 8-digit iteration gets 8 digits");

	ok_err(!mt_ckpt_resolve(path("rs"), out, sizeof(out), &it, &e), e, "resolve DIR");
	is_str(out, path("rs/iter_0000070"), "DIR follows latest (the last save, not the highest number)");
	is_int(it, 70, "iteration from the marker");
	ok_err(!mt_ckpt_resolve(path("rs/iter_1234567"), out, sizeof(out), &it, &e), e, "resolve DIR/iter_N");
	is_str(out, path("rs/iter_1234567"), "an iteration directory is itself");
	is_int(it, 1234567, "iteration from the directory name");
	ok_err(!mt_ckpt_resolve(path("rs/iter_0000040/"), out, sizeof(out), &it, &e) && it == 40, e, "a trailing slash");
	ok_err(!mt_ckpt_resolve(path("rs/iter_0000040/model.h5"), out, sizeof(out), &it, &e), e, "resolve a model.h5 path");
	is_str(out, path("rs/iter_0000040"), "a model.h5 path resolves to its directory");
	is_int(it, 40, "iteration from the directory name");

	run("mkdir -p %s/renamed && cp %s/iter_0000040/model.h5 %s/renamed/", path("rs"), path("rs"));
	ok_err(!mt_ckpt_resolve(path("rs/renamed"), out, sizeof(out), &it, &e) && it == 40, e,
	   "a directory with another name: iteration from the file");
	run("cp %s %s", path("rs/iter_0000040/model.h5"), path("rs/other.h5"));
	ok_err(!mt_ckpt_resolve(path("rs/other.h5"), out, sizeof(out), &it, &e), e, "resolve an .h5 of another name");
	is_str(out, path("rs/other.h5"), "it resolves to itself");
	is_int(it, 40, "iteration from the file's attribute");
	ok(holds(out, 40), "and it loads");

	/* Megatron's tracker alone */
	unlink(path("rs/latest"));
	write_file(path("rs/latest_checkpointed_iteration.txt"), "1234567", 7);
	ok_err(!mt_ckpt_resolve(path("rs"), out, sizeof(out), &it, &e), e, "resolve through Megatron's tracker");
	is_str(out, path("rs/iter_1234567"), "the tracker's iteration directory");
	is_int(it, 1234567, "its iteration");
	ok(holds(out, 1234567), "and it loads");
	write_file(path("rs/latest"), " 40 \n", 5);
	ok(!mt_ckpt_resolve(path("rs"), out, sizeof(out), &it, &e) && it == 40, "latest wins over the tracker, spaces allowed");

	write_file(path("rs/latest"), "release", 7);
	ok(mt_ckpt_resolve(path("rs"), out, sizeof(out), &it, &e) == -1 && e.code == MT_EXIT_DATA, "a release marker: data error");
	like(e.msg, "release", "naming the release checkpoint");
	write_file(path("rs/latest"), "12x\n", 4);
	ok(mt_ckpt_resolve(path("rs"), out, sizeof(out), &it, &e) == -1 && e.code == MT_EXIT_DATA, "a garbled marker: data error");
	like(e.msg, "latest", "naming the marker");
	write_file(path("rs/latest"), "", 0);
	ok(mt_ckpt_resolve(path("rs"), out, sizeof(out), &it, &e) == -1 && e.code == MT_EXIT_DATA, "an empty marker: data error");
	write_file(path("rs/latest"), "99", 2);
	ok(mt_ckpt_resolve(path("rs"), out, sizeof(out), &it, &e) == -1 && e.code == MT_EXIT_DATA, "a marker naming a missing iteration");
	like(e.msg, "iter_0000099", "names the missing directory");

	mkdir(path("empty"), 0777);
	ok(!mt_ckpt_latest(path("empty"), &it, &e) && it == -1, "mt_ckpt_latest: nothing to resume in an empty directory");
	ok(!mt_ckpt_latest(path("no-such-dir"), &it, &e) && it == -1, "mt_ckpt_latest: nor in a missing one");
	ok(!mt_ckpt_latest(path("rs/iter_0000040"), &it, &e) && it == -1, "nor in an iteration directory");
	ok(mt_ckpt_resolve(path("empty"), out, sizeof(out), &it, &e) == -1 && e.code == MT_EXIT_IO, "resolve an empty directory: I/O error");
	like(e.msg, "no checkpoint in", "saying there is no checkpoint");
	ok(mt_ckpt_resolve(path("no-such-dir"), out, sizeof(out), &it, &e) == -1 && e.code == MT_EXIT_IO, "resolve a missing path: I/O error");
	like(e.msg, "no-such-dir", "naming it");

	/* a Megatron torch checkpoint: iter dir without model.h5 */
	run("mkdir -p %s/mg/iter_0000010/mp_rank_00 && printf 10 > %s/mg/latest_checkpointed_iteration.txt", dir, dir);
	ok(!mt_ckpt_resolve(path("mg"), out, sizeof(out), &it, &e) && it == 10, "a Megatron torch checkpoint resolves");
	{
		struct mt_ckpt_loaded st;
		ok(mt_ckpt_read_state(out, &st, &e) == -1 && e.code == MT_EXIT_DATA, "but reading it fails (data mt cannot read)");
		like(e.msg, "no model.h5", "saying why");
	}
}

static void test_ckpt_keep_last(void)
{
	struct mt_err e = { 0 };
	int fails = 0;

	for (int it = 1; it <= 5; it++)
		fails += save_small(path("kl"), it * 100, 2, &e) != 0;
	ok_err(!fails, e, "five saves with keep-last 2");
	is_str(listing(path("kl")), "iter_0000400 iter_0000500 latest latest_checkpointed_iteration.txt",
	       "the newest two remain");
	mkdir(path("kl/iter_final"), 0777);
	mkdir(path("kl/iter_5"), 0777);
	mkdir(path("kl/notes"), 0777);
	ok_err(!save_small(path("kl"), 600, 1, &e), e, "save with keep-last 1");
	is_str(listing(path("kl")), "iter_0000600 iter_5 iter_final latest latest_checkpointed_iteration.txt notes",
	       "only the newest remains; other names untouched");
	ok(holds(path("kl"), 600), "and it loads");
	ok_err(!save_small(path("kl"), 600, 1, &e), e, "the same iteration again with keep-last 1");
	is_str(listing(path("kl")), "iter_0000600 iter_5 iter_final latest latest_checkpointed_iteration.txt notes",
	       "the newest is never deleted");
	ok_err(!save_small(path("kl"), 550, 1, &e), e, "a rolled-back run saves iteration 550");
	is_str(listing(path("kl")), "iter_0000550 iter_0000600 iter_5 iter_final latest latest_checkpointed_iteration.txt notes",
	       "a newer iteration of the abandoned run is kept");
	is_str(read_text(path("kl/latest")), "550\n", "latest names the one just saved");
	ok_err(!save_small(path("kl"), 700, 0, &e) && !save_small(path("kl"), 800, 0, &e), e, "keep-last 0 keeps all");
	is_str(listing(path("kl")),
	       "iter_0000550 iter_0000600 iter_0000700 iter_0000800 iter_5 iter_final latest latest_checkpointed_iteration.txt notes",
	       "all kept");
	ok_err(!save_small(path("kl"), 900, 3, &e), e, "keep-last 3");
	is_str(listing(path("kl")),
	       "iter_0000700 iter_0000800 iter_0000900 iter_5 iter_final latest latest_checkpointed_iteration.txt notes",
	       "the newest three remain");
}

static void test_ckpt_resave(void)
{
	struct mt_err e = { 0 };

	ok_err(!save_small(path("rv"), 7, 0, &e), e, "save iteration 7");
	ok(holds(path("rv"), 7), "holds 7's values");
	{
		/* iteration 7 again, with other values */
		struct mt_params t;
		struct bufs b;
		struct mt_ckpt_state s = state_of(7);
		table_make(&t, small_rows, NSMALL);
		bufs_make(&b, &t, 8);
		ok_err(!mt_ckpt_save(path("rv"), &t, b.w, b.m, b.v, &s, 0, &e), e, "save iteration 7 again");
		bufs_free(&b);
		table_free(&t);
	}
	ok(holds(path("rv/iter_0000007"), 8), "the new values replaced the old");
	is_str(listing(path("rv")), "iter_0000007 latest latest_checkpointed_iteration.txt", "no leftovers");
}

static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* A table of 4 MB (12 MB with the moments), so a save takes long enough to be killed
 * midway. */
static const struct row big_rows[] = {
	{ "embedding.word_embeddings.weight", 2, 1024, 512 },
	{ "decoder.layers.0.mlp.linear_fc1.weight", 2, 512, 1024 },
	{ "decoder.final_layernorm.weight", 1, 512, 1 },
};

static int save_big(const char *d, int64_t it, struct mt_err *e)
{
	struct mt_params t;
	struct bufs b;
	struct mt_ckpt_state s = state_of(it);
	int rc;

	table_make(&t, big_rows, 3);
	bufs_make(&b, &t, it);
	rc = mt_ckpt_save(d, &t, b.w, b.m, b.v, &s, 1, e);
	bufs_free(&b);
	table_free(&t);
	return rc;
}

static int holds_big(const char *p, int64_t it)
{
	struct mt_params t;
	struct bufs want, got;
	struct mt_err e = { 0 };
	int good;

	table_make(&t, big_rows, 3);
	bufs_make(&want, &t, it);
	bufs_zero(&got, &t);
	good = !mt_ckpt_load(p, &t, got.w, got.m, got.v, 0, &e) && same(got.w, want.w, t.total) &&
	       same(got.m, want.m, t.total) && same(got.v, want.v, t.total);
	if (!good)
		printf("#   loading '%s' as iteration %lld: %s\n", p, (long long)it, e.msg[0] ? e.msg : "values differ");
	bufs_free(&want);
	bufs_free(&got);
	table_free(&t);
	return good;
}

/* Fork a child saving iteration it of the big table; kill it with SIGKILL once `when`
 * says so; return 1 if it was killed before finishing. */
static int killed_save(const char *d, int64_t it, int64_t delay_us, const char *wait_for)
{
	pid_t pid;
	int status;
	int64_t t0;
	char tmpfile[600];

	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		struct mt_err e = { 0 };
		_exit(save_big(d, it, &e) ? 1 : 0);
	}
	snprintf(tmpfile, sizeof(tmpfile), "%s/iter_%07lld.tmp.%ld/%s", d, (long long)it, (long)pid, wait_for ? wait_for : "");
	t0 = now_us();
	for (;;) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return 0; /* finished first */
		if (wait_for ? exists(tmpfile) : now_us() - t0 >= delay_us)
			break;
		if (now_us() - t0 > 60000000)
			break;
		usleep(wait_for ? 50 : 200);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return WIFSIGNALED(status);
}

static void test_ckpt_interrupted(void)
{
	struct mt_err e = { 0 };
	char out[512];
	int64_t it = -1;
	int consistent = 1, killed = 0, finished = 0, left = 0;
	int64_t t_save;

	/* a stale temporary directory of a killed save */
	ok_err(!save_small(path("in"), 10, 0, &e), e, "save iteration 10");
	run("mkdir -p %s/iter_0000020.tmp.99999 && head -c 3000 %s/iter_0000010/model.h5 > %s/iter_0000020.tmp.99999/model.h5",
	    path("in"), path("in"));
	run("mkdir -p %s/iter_0000900.tmp.4242 %s/iter_0000015.old.77", path("in"), path("in"));
	write_file(path("in/latest.tmp.31"), "2", 1);
	write_file(path("in/latest_checkpointed_iteration.txt.tmp.31"), "2", 1);
	write_file(path("in/latest.tmp.x"), "", 0);
	ok(!mt_ckpt_resolve(path("in"), out, sizeof(out), &it, &e) && it == 10 && holds(out, 10),
	   "with a stale iter_0000020.tmp.*, latest still names 10 and it loads");
	ok_err(!save_small(path("in"), 20, 0, &e), e, "save iteration 20 over the leftover");
	is_str(listing(path("in")),
	       "iter_0000010 iter_0000020 iter_0000900.tmp.4242 latest latest.tmp.x latest_checkpointed_iteration.txt",
	       "leftovers of saves and markers are gone; one of a later iteration and other names are not touched");
	unlink(path("in/latest.tmp.x"));
	ok(holds(path("in"), 20), "20 loads");

	/* the final name cannot be taken: a file sits there */
	write_file(path("in/iter_0000030"), "x", 1);
	ok(save_small(path("in"), 30, 0, &e) == -1 && e.code == MT_EXIT_IO, "a file in the way of iter_0000030: I/O error");
	like(e.msg, "iter_0000030", "naming it");
	ok(!mt_ckpt_resolve(path("in"), out, sizeof(out), &it, &e) && it == 20 && holds(out, 20),
	   "latest still names 20 and it loads");
	is_str(listing(path("in")), "iter_0000010 iter_0000020 iter_0000030 iter_0000900.tmp.4242 latest latest_checkpointed_iteration.txt",
	       "no temporary left behind");
	unlink(path("in/iter_0000030"));

	/* a full disk: a child limited to 20 kB files (RLIMIT_FSIZE) */
	{
		pid_t pid;
		int status = -1;

		fflush(stdout);
		pid = fork();
		if (pid == 0) {
			struct rlimit rl = { 20000, 20000 };
			int good;

			signal(SIGXFSZ, SIG_IGN);
			setrlimit(RLIMIT_FSIZE, &rl);
			good = save_big(path("in"), 50, &e) == -1 && e.code == MT_EXIT_IO && strstr(e.msg, "iter_0000050.tmp.") &&
			       !strstr(listing(path("in")), "iter_0000050");
			printf("#   %s\n", e.msg);
			fflush(stdout);
			_exit(good ? 0 : 1);
		}
		waitpid(pid, &status, 0);
		ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		   "a full disk: an I/O error naming the temporary file, which is removed");
		ok(!mt_ckpt_resolve(path("in"), out, sizeof(out), &it, &e) && it == 20 && holds(out, 20),
		   "latest still names 20 and it loads");
	}

	/* a read-only checkpoint directory (root ignores permissions) */
	if (geteuid() == 0) {
		tap_skip("running as root", "a read-only directory refuses the save");
	} else {
		chmod(path("in"), 0555);
		ok(save_small(path("in"), 40, 0, &e) == -1 && e.code == MT_EXIT_IO, "a read-only directory refuses the save");
		chmod(path("in"), 0755);
		ok(!mt_ckpt_resolve(path("in"), out, sizeof(out), &it, &e) && it == 20 && holds(out, 20),
		   "latest still names 20 and it loads");
	}

	/* SIGKILL the moment the temporary model.h5 appears */
	t_save = now_us();
	ok_err(!save_big(path("kill"), 1, &e), e, "save a 12 MB iteration 1");
	t_save = now_us() - t_save;
	killed = killed_save(path("kill"), 2, 0, "model.h5");
	ok_err(!mt_ckpt_resolve(path("kill"), out, sizeof(out), &it, &e), e, "resolve after the kill");
	ok((it == 1 || it == 2) && holds_big(out, it), "latest names iteration %lld, which loads whole", (long long)it);
	if (killed && strstr(listing(path("kill")), "iter_0000002.tmp.")) {
		is_int(it, 1, "killed while writing (its temporary directory is left): latest still names 1");
	} else {
		/* the child got past the rename before the kill (a loaded machine) */
		tap_skip("the save got past its rename first", "killed while writing: latest still names 1");
	}

	/* kills at increasing delays: whatever the moment, latest names a whole checkpoint */
	for (int k = 0; k < 16; k++) {
		int64_t want_new = 3 + k;
		int was_killed = killed_save(path("kill"), want_new, t_save * k / 8, NULL);

		killed += was_killed;
		if (mt_ckpt_resolve(path("kill"), out, sizeof(out), &it, &e)) {
			printf("#   after kill %d: %s\n", k, e.msg);
			consistent = 0;
			break;
		}
		if (!holds_big(out, it) || (it != want_new && it != want_new - 1 && !was_killed)) {
			consistent = 0;
			break;
		}
		if (!was_killed && it == want_new)
			finished++;
		if (strstr(listing(path("kill")), ".tmp."))
			left++;
		if (it != want_new) {
			/* the next round's "previous" must be what latest names: save it whole */
			if (save_big(path("kill"), want_new, &e)) {
				consistent = 0;
				break;
			}
		}
	}
	ok(consistent, "16 saves killed from 0 to 1.9 times a save's duration: latest always names a checkpoint that loads whole");
	printf("# a save takes %lld us; %d kills landed, %d saves finished first, %d times a temporary was left\n",
	       (long long)t_save, killed, finished, left);
	ok_err(!save_big(path("kill"), 100, &e), e, "a later save succeeds");
	is_str(listing(path("kill")), "iter_0000100 latest latest_checkpointed_iteration.txt",
	       "and removes every leftover (keep-last 1)");
}

static void test_ckpt_mismatch(void)
{
	struct row r[NSMALL + 1];
	struct mt_params t;
	struct bufs g;
	struct mt_err e = { 0 };

	ok_err(!save_small(path("mm"), 5, 0, &e), e, "save");

	memcpy(r, small_rows, sizeof(small_rows));
	r[1].cols = 5;
	table_make(&t, r, NSMALL);
	bufs_zero(&g, &t);
	ok(mt_ckpt_load(path("mm"), &t, g.w, NULL, NULL, 0, &e) == -1 && e.code == MT_EXIT_DATA, "a shape mismatch fails");
	like(e.msg, "'model/decoder.layers.0.self_attention.linear_qkv.weight' has shape [12, 4], the model expects [12, 5]",
	     "naming the tensor and both shapes");
	like(e.msg, "iter_0000005/model.h5", "and the file");
	bufs_free(&g);
	table_free(&t);

	memcpy(r, small_rows, sizeof(small_rows));
	r[2].ndim = 2;
	r[2].cols = 1;
	table_make(&t, r, NSMALL);
	bufs_zero(&g, &t);
	ok(mt_ckpt_load(path("mm"), &t, g.w, NULL, NULL, 0, &e) == -1, "a vector where a [12, 1] matrix is expected fails");
	like(e.msg, "has shape [12], the model expects [12, 1]", "with both shapes");
	bufs_free(&g);
	table_free(&t);

	memcpy(r, small_rows, sizeof(small_rows));
	r[NSMALL] = (struct row){ "decoder.layers.1.mlp.linear_fc1.weight", 2, 16, 4 };
	table_make(&t, r, NSMALL + 1);
	bufs_zero(&g, &t);
	ok(mt_ckpt_load(path("mm"), &t, g.w, NULL, NULL, 0, &e) == -1 && e.code == MT_EXIT_DATA, "a missing tensor fails");
	like(e.msg, "'model/decoder.layers.1.mlp.linear_fc1.weight' is missing", "naming it");
	bufs_free(&g);
	table_free(&t);

	table_make(&t, small_rows, NSMALL - 1);
	bufs_zero(&g, &t);
	ok(mt_ckpt_load(path("mm"), &t, g.w, g.m, g.v, 0, &e) == -1 && e.code == MT_EXIT_DATA,
	   "a tensor the model lacks fails");
	like(e.msg, "'model/decoder.final_layernorm.weight', which the model does not have", "naming it");
	ok_err(!mt_ckpt_load(path("mm"), &t, g.w, g.m, g.v, MT_CKPT_ALLOW_EXTRA, &e), e, "unless extras are allowed");
	{
		struct mt_params full;
		struct bufs b;
		table_make(&full, small_rows, NSMALL);
		bufs_make(&b, &full, 5);
		ok(same(g.w, b.w, t.total) && same(g.m, b.m, t.total) && same(g.v, b.v, t.total), "and the others load");
		bufs_free(&b);
		table_free(&full);
	}
	bufs_free(&g);
	table_free(&t);

	memcpy(r, small_rows, sizeof(small_rows));
	r[3].name = "decoder.layers.0/mlp.weight";
	table_make(&t, r, NSMALL);
	bufs_make(&g, &t, 1);
	{
		struct mt_ckpt_state s = state_of(1);
		ok(mt_ckpt_save(path("mm2"), &t, g.w, NULL, NULL, &s, 0, &e) == -1, "a name with '/' is refused");
		like(e.msg, "decoder.layers.0/mlp.weight", "naming it");
		table_free(&t);
		memcpy(r, small_rows, sizeof(small_rows));
		r[3].name = r[1].name;
		table_make(&t, r, NSMALL);
		ok(mt_ckpt_save(path("mm2"), &t, g.w, NULL, NULL, &s, 0, &e) == -1, "a name twice is refused");
		like(e.msg, "appears twice", "saying so");
		ok(!exists(path("mm2")), "nothing written");
	}
	bufs_free(&g);
	table_free(&t);
}

static void test_ckpt_nonfinite(void)
{
	struct mt_params t;
	struct bufs b;
	struct mt_err e = { 0 };
	struct mt_ckpt_state s = state_of(2);
	int64_t it;

	ok_err(!save_small(path("nan"), 1, 0, &e), e, "save iteration 1");
	table_make(&t, small_rows, NSMALL);
	bufs_make(&b, &t, 2);
	b.w[t.p[1].offset + 2 * 4 + 3] = NAN;
	ok(mt_ckpt_save(path("nan"), &t, b.w, b.m, b.v, &s, 1, &e) == -1 && e.code == MT_EXIT_DATA, "a NaN weight is refused");
	like(e.msg, "weight 'decoder.layers.0.self_attention.linear_qkv.weight' holds nan at [2, 3]",
	     "naming the tensor and the index");
	bufs_free(&b);
	bufs_make(&b, &t, 2);
	b.v[t.p[2].offset + 7] = INFINITY;
	ok(mt_ckpt_save(path("nan"), &t, b.w, b.m, b.v, &s, 1, &e) == -1 && e.code == MT_EXIT_DATA, "an Inf moment is refused");
	like(e.msg, "exp_avg_sq 'decoder.layers.0.self_attention.linear_qkv.bias' holds inf at [7]", "naming it");
	b.v[t.p[2].offset + 7] = 1.0f;
	b.w[t.total - 1] = -INFINITY;
	ok(mt_ckpt_save(path("nan"), &t, b.w, NULL, NULL, &s, 1, &e) == -1, "a -Inf in the last weight is refused");
	is_str(listing(path("nan")), "iter_0000001 latest latest_checkpointed_iteration.txt", "nothing was written");
	ok(!mt_ckpt_latest(path("nan"), &it, &e) && it == 1 && holds(path("nan"), 1), "iteration 1 is still latest and loads");
	bufs_free(&b);
	table_free(&t);
}

/* Change one attribute of a copy of a checkpoint, with HDF5 directly. */
static void poke_i64(const char *file, const char *obj, const char *attr, const int64_t *v)
{
	hid_t f = H5Fopen(file, H5F_ACC_RDWR, H5P_DEFAULT);
	hid_t o = H5Oopen(f, obj, H5P_DEFAULT);
	hid_t a = H5Aopen(o, attr, H5P_DEFAULT);

	if (f < 0 || o < 0 || a < 0 || H5Awrite(a, H5T_NATIVE_INT64, v) < 0)
		printf("# cannot change %s %s of %s\n", obj, attr, file);
	H5Aclose(a);
	H5Oclose(o);
	H5Fclose(f);
}

static void test_ckpt_corrupt(void)
{
	struct mt_params t;
	struct bufs g;
	struct mt_err e = { 0 };
	struct mt_ckpt_loaded st;
	char garbage[4096];
	char f[700];
	struct stat sb;

	snprintf(f, sizeof(f), "%s", path("bad/iter_0000001/model.h5"));
	ok_err(!save_small(path("bad"), 1, 0, &e), e, "save");
	table_make(&t, small_rows, NSMALL);
	bufs_zero(&g, &t);
	stat(f, &sb);
	run("cp %s %s.orig", f, f);

	truncate(f, sb.st_size / 2);
	ok(mt_ckpt_load(path("bad"), &t, g.w, g.m, g.v, 0, &e) == -1 && e.code == MT_EXIT_DATA, "a truncated file: data error");
	like(e.msg, f, "naming the file");
	printf("#   %s\n", e.msg);
	ok(mt_ckpt_read_state(path("bad"), &st, &e) == -1 && e.code == MT_EXIT_DATA, "its state cannot be read either");

	for (size_t i = 0; i < sizeof(garbage); i++)
		garbage[i] = (char)(i * 7 + 3);
	write_file(f, garbage, sizeof(garbage));
	ok(mt_ckpt_load(path("bad/iter_0000001"), &t, g.w, NULL, NULL, 0, &e) == -1 && e.code == MT_EXIT_DATA, "garbage: data error");
	like(e.msg, "file signature not found", "with HDF5's reason");
	write_file(f, "", 0);
	ok(mt_ckpt_inspect(path("bad"), 0, stdout, &e) == -1 && e.code == MT_EXIT_DATA, "an empty file: data error");

	/* truncated at many lengths: never a crash, always an error or the right values */
	{
		int clean = 1;
		for (off_t cut = 0; cut < sb.st_size; cut += sb.st_size / 37 + 1) {
			{
				char cmd[1600];
				snprintf(cmd, sizeof(cmd), "head -c %lld %s.orig > %s", (long long)cut, f, f);
				if (system(cmd) != 0)
					clean = 0;
			}
			mt_err_clear(&e);
			if (mt_ckpt_load(path("bad"), &t, g.w, g.m, g.v, 0, &e) != -1 || e.code != MT_EXIT_DATA || !strstr(e.msg, f)) {
				printf("#   cut at %lld: code %d '%s'\n", (long long)cut, e.code, e.msg);
				clean = 0;
			}
		}
		ok(clean, "truncated at 38 lengths: each a data error naming the file");
	}

	/* a foreign HDF5 file */
	{
		hid_t h = H5Fcreate(f, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
		H5Fclose(h);
	}
	ok(mt_ckpt_load(path("bad"), &t, g.w, NULL, NULL, 0, &e) == -1 && e.code == MT_EXIT_DATA, "an HDF5 file of another tool fails");
	like(e.msg, "not an mt checkpoint", "saying so");

	/* a newer format */
	run("cp %s.orig %s", f, f);
	poke_i64(f, "/", "format_version", (const int64_t[]){ 2 });
	ok(mt_ckpt_read_state(path("bad"), &st, &e) == -1 && e.code == MT_EXIT_DATA, "format version 2 fails");
	like(e.msg, "format version 2 is newer", "saying so");

	/* a slice of a sharded tensor */
	run("cp %s.orig %s", f, f);
	poke_i64(f, "/model/embedding.word_embeddings.weight", "offset", (const int64_t[]){ 10, 0 });
	ok(mt_ckpt_load(path("bad"), &t, g.w, NULL, NULL, 0, &e) == -1 && e.code == MT_EXIT_DATA, "a slice fails");
	like(e.msg, "'model/embedding.word_embeddings.weight' holds a [10, 4] slice at offset [10, 0] of a [10, 4] tensor", "naming it");

	/* an intact copy loads again */
	run("cp %s.orig %s", f, f);
	ok(holds(path("bad"), 1), "the original loads");
	bufs_free(&g);
	table_free(&t);
}

static void test_ckpt_inspect(void)
{
	struct mt_err e = { 0 };
	char *text = NULL;
	size_t n = 0;
	FILE *out;
	int all = 1;
	json_t *j;
	json_error_t je;

	ok_err(!save_small(path("ins"), 42, 0, &e), e, "save");
	out = open_memstream(&text, &n);
	ok_err(!mt_ckpt_inspect(path("ins"), 0, out, &e), e, "inspect as text");
	fclose(out);
	like(text, "iteration\t42\n", "the iteration");
	like(text, "optimizer_step\t43\n", "the optimizer step");
	like(text, "consumed_train_samples\t2688\n", "consumed samples");
	like(text, "config\t{ \"num-layers\": 1, \"hidden-size\": 4, \"norm-epsilon\": 1.0000000000000001e-05 }\n",
	     "the config on one line, as stored otherwise");
	like(text, "rng_bytes\t7\n", "the rng size");
	for (int i = 0; i < NSMALL; i++) {
		const char *grp[] = { "model", "optimizer/exp_avg", "optimizer/exp_avg_sq" };
		for (int k = 0; k < 3; k++) {
			char want[300], shape[64];
			if (small_rows[i].ndim == 2)
				snprintf(shape, sizeof(shape), "[%lld, %lld]\tglobal [%lld, %lld]\toffset [0, 0]",
					 (long long)small_rows[i].rows, (long long)small_rows[i].cols,
					 (long long)small_rows[i].rows, (long long)small_rows[i].cols);
			else
				snprintf(shape, sizeof(shape), "[%lld]\tglobal [%lld]\toffset [0]", (long long)small_rows[i].rows,
					 (long long)small_rows[i].rows);
			snprintf(want, sizeof(want), "tensor\t%s/%s\tfloat32\t%s\n", grp[k], small_rows[i].name, shape);
			if (!strstr(text, want)) {
				printf("#   missing: %s", want);
				all = 0;
			}
		}
	}
	ok(all, "every tensor of model and optimizer, with dtype, shape, global shape, offset");
	like(text, "tensor\trng\tuint8\t[7]\n", "and the rng dataset");
	ok(strstr(text, "model/embedding.word_embeddings.weight") < strstr(text, "model/decoder.final_layernorm.weight"),
	   "in the table's order");
	free(text);

	text = NULL;
	out = open_memstream(&text, &n);
	ok_err(!mt_ckpt_inspect(path("ins/iter_0000042/model.h5"), 1, out, &e), e, "inspect as JSON");
	fclose(out);
	j = json_loads(text, 0, &je);
	ok(j != NULL, "the JSON parses");
	is_int(json_integer_value(json_object_get(j, "iteration")), 42, "iteration");
	is_int(json_integer_value(json_object_get(json_object_get(j, "config"), "num-layers")), 1, "the config is an object");
	is_int(json_array_size(json_object_get(j, "tensors")), 3 * NSMALL + 1, "every dataset is listed");
	is_str(json_string_value(json_object_get(json_array_get(json_object_get(j, "tensors"), 0), "name")),
	       "model/embedding.word_embeddings.weight", "first the embedding");
	json_decref(j);
	free(text);
}

static void test_ckpt_paths(void)
{
	char out[64];
	struct mt_err e = { 0 };

	ok(!mt_ckpt_iter_dir(out, sizeof(out), "d", 500, &e), "iter dir");
	is_str(out, "d/iter_0000500", "7 digits as Megatron");
	ok(!mt_ckpt_file_path(out, sizeof(out), "d/iter_0000500", 0, 1, &e), "file path");
	is_str(out, "d/iter_0000500/model.h5", "one file: model.h5");
	ok(!mt_ckpt_file_path(out, sizeof(out), "x", 2, 8, &e), "shard path");
	is_str(out, "x/model-00003-of-00008.h5", "shards numbered from 1");
	ok(mt_ckpt_file_path(out, sizeof(out), "x", 8, 8, &e) == -1, "no shard 8 of 8");
	ok(mt_ckpt_iter_dir(out, 8, "d", 500, &e) == -1, "too long for the buffer");
	ok(mt_ckpt_iter_dir(out, sizeof(out), "d", -1, &e) == -1, "negative iteration");
}

/* The share of a file's pages in the page cache (mincore), or -1. */
static double resident(const char *p)
{
	struct stat st;
	long pg = sysconf(_SC_PAGESIZE);
	int fd = open(p, O_RDONLY);
	double r = -1;

	if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0) {
		size_t n = ((size_t)st.st_size + (size_t)pg - 1) / (size_t)pg, in = 0;
		unsigned char *v = malloc(n);
		void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
		if (v && m != MAP_FAILED && mincore(m, (size_t)st.st_size, v) == 0) {
			for (size_t i = 0; i < n; i++)
				in += v[i] & 1;
			r = (double)in / (double)n;
		}
		if (m != MAP_FAILED)
			munmap(m, (size_t)st.st_size);
		free(v);
	}
	if (fd >= 0)
		close(fd);
	return r;
}

/* A tensor of 35 MB (105 MB with the moments) is written in slabs of 32 MiB and read back
 * bit for bit; the write-behind leaves no more than the last two slabs' pages of the
 * file in the page cache (where the file system keeps a page cache: not tmpfs). */
static void test_ckpt_slabs(void)
{
	static const struct row rows[] = {
		{ "embedding.word_embeddings.weight", 2, 2900, 3000 },
		{ "decoder.final_layernorm.weight", 1, 3000, 1 },
	};
	struct mt_params t;
	struct bufs b, g;
	struct mt_err e = { 0 };
	struct mt_ckpt_state s = state_of(9);
	struct statfs fs;
	double r;

	table_make(&t, rows, 2);
	bufs_make(&b, &t, 9);
	bufs_zero(&g, &t);
	ok_err(!mt_ckpt_save(path("slabs"), &t, b.w, b.m, b.v, &s, 0, &e), e, "save a 35 MB tensor and its moments");
	r = resident(path("slabs/iter_0000009/model.h5"));
	if (statfs(dir, &fs) == 0 && fs.f_type == 0x01021994) /* TMPFS_MAGIC */
		tap_skip("tmpfs keeps every page", "the write-behind dropped the written pages");
	else
		ok(r >= 0 && r < 0.8, "the write-behind dropped the written pages: %.0f%% of the file resident", 100 * r);
	ok_err(!mt_ckpt_load(path("slabs/iter_0000009"), &t, g.w, g.m, g.v, 0, &e), e, "load it (checksums verified)");
	ok(same(g.w, b.w, t.total) && same(g.m, b.m, t.total) && same(g.v, b.v, t.total), "bit-exact across the slab boundary");
	bufs_free(&b);
	bufs_free(&g);
	table_free(&t);
}

int main(void)
{
	char cmd[300];

	snprintf(dir, sizeof(dir), "%s/mt-test-ckpt-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir))
		return 1;
	test_ckpt_paths();
	test_ckpt_roundtrip();
	test_ckpt_weights_only();
	test_ckpt_resolve();
	test_ckpt_keep_last();
	test_ckpt_resave();
	test_ckpt_interrupted();
	test_ckpt_mismatch();
	test_ckpt_nonfinite();
	test_ckpt_corrupt();
	test_ckpt_inspect();
	test_ckpt_slabs();
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		return 1;
	return tap_done();
}
