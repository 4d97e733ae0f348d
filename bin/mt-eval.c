/* mt-eval: validation loss, WikiText-style perplexity, LAMBADA-style cloze accuracy and
 * lm-evaluation-harness's multiple-choice accuracy of checkpoints, one at a time (--load) or every new one under a directory (--watch),
 * with a ledger for cron. Options and orchestration only: the samples come from
 * dataplan.c, the text tasks from evaltext.c (zeroshot.c's windows and cloze rows,
 * detok.c's detokenizers), the multiple-choice tasks from evalchoice.c, scores from
 * lmeval.c, the ledger from ledger.c. */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "text/detok.h"
#include "eval/evalchoice.h"
#include "eval/evaltext.h"
#include "base/files.h"
#include "data/dataplan.h"
#include "eval/ledger.h"
#include "base/tfevents.h"
#include "eval/lmeval.h"
#include "base/log.h"
#include "ckpt/model.h"
#include "base/progress.h"
#include "text/tokenizer.h"
#include "dataopts.h"
#include "tool.h"

static const char *const synopsis[] = {
	"--load CKPT [--valid | --test | --data-path PATH...] [--wikitext FILE] [--lambada FILE] [--multiple-choice [NAME=]FILE]... [--json]",
	"--watch DIR --ledger FILE [--wait] [task options]",
	NULL,
};

static const struct mt_tool_info info = {
	.name = "mt-eval",
	.summary = "perplexity and cloze accuracy of checkpoints, with a watch mode for cron",
	.synopsis = synopsis,
	.description =
		"tasks: --valid/--test (loss on the training run's split; its data flags, recorded in the\n"
		"checkpoint, are the defaults), --wikitext FILE (strided windows, token and word perplexity),\n"
		"--lambada FILE (JSON lines {\"text\": ...}: non-strict and strict accuracy), --multiple-choice FILE\n"
		"(HellaSwag, PIQA or ARC JSON lines: acc and acc_norm as lm-evaluation-harness scores them)",
	.doc = "docs/mt-eval.md",
};

enum {
	O_LOAD = 256, O_WATCH, O_LEDGER, O_WAIT, O_VALID, O_TEST, O_WIKITEXT, O_LAMBADA, O_OVERLAP, O_MBS,
	O_EVAL_SAMPLES, O_FIRST_SAMPLE, O_JSON, O_DEVICE, O_DETOK, O_BF16, O_TB_DIR, O_MC, O_LOG_SAMPLES,
};

static const struct mt_option opts[] = {
	{ "load", 0, MT_ARG_REQUIRED, O_LOAD, "CKPT", "a checkpoint directory (its latest), an iteration directory or an .h5 file" },
	{ "watch", 0, MT_ARG_REQUIRED, O_WATCH, "DIR", "evaluate every complete checkpoint under DIR not yet in the ledger" },
	{ "ledger", 0, MT_ARG_REQUIRED, O_LEDGER, "FILE", "JSON lines of finished evaluations (with --watch)" },
	{ "tensorboard-dir", 0, MT_ARG_REQUIRED, O_TB_DIR, "DIR", "with --watch: each result also as TensorBoard scalars eval/TASK/METRIC" },
	{ "wait", 0, MT_ARG_NONE, O_WAIT, NULL, "wait for another run's lock instead of exiting 0" },
	{ "valid", 0, MT_ARG_NONE, O_VALID, NULL, "loss and perplexity on the valid split" },
	{ "test", 0, MT_ARG_NONE, O_TEST, NULL, "loss and perplexity on the test split" },
	{ "wikitext", 0, MT_ARG_REQUIRED, O_WIKITEXT, "FILE", "perplexity of a raw text file (strided windows)" },
	{ "detokenizer", 0, MT_ARG_REQUIRED, O_DETOK, "NAME", "for --wikitext: auto (by the path, as Megatron), none, wikitext, ptb, lambada" },
	{ "lambada", 0, MT_ARG_REQUIRED, O_LAMBADA, "FILE", "cloze accuracy on JSON lines {\"text\": ...}" },
	{ "multiple-choice", 0, MT_ARG_REQUIRED, O_MC, "[NAME=]FILE", "acc and acc_norm on HellaSwag/PIQA/ARC JSON lines; NAME (default: the file's name) names the task (repeatable)" },
	{ "log-samples", 0, MT_ARG_REQUIRED, O_LOG_SAMPLES, "FILE", "with --load: each multiple-choice question's log-likelihoods and choices, JSON lines" },
	{ "overlapping-eval", 0, MT_ARG_REQUIRED, O_OVERLAP, "N", "window stride of --wikitext (default 32, at most seq-length)" },
	{ "micro-batch-size", 0, MT_ARG_REQUIRED, O_MBS, "B", "rows per forward pass (default 4)" },
	{ "eval-samples", 0, MT_ARG_REQUIRED, O_EVAL_SAMPLES, "N", "samples of the split to evaluate (default eval-iters x global-batch-size)" },
	{ "first-sample", 0, MT_ARG_REQUIRED, O_FIRST_SAMPLE, "N", "start at this sample of the split (default 0)" },
	{ "json", 0, MT_ARG_NONE, O_JSON, NULL, "one JSON object per task per line" },
	{ "device", 0, MT_ARG_REQUIRED, O_DEVICE, "DEV", "cuda or cpu (default: cuda when a GPU is visible)" },
	{ "bf16", 0, MT_ARG_NONE, O_BF16, NULL, "cuda: bf16 weights and activations (default fp32)" },
	MT_DATA_OPTIONS,
	{ 0 },
};

/* the data options' rows, to pick them out of a checkpoint's recorded flags */
static const struct mt_option data_rows[] = { MT_DATA_OPTIONS, { 0 } };

enum { T_VALID, T_TEST, T_WIKITEXT, T_LAMBADA, T_N };
static const char *const task_names[T_N] = { "valid", "test", "wikitext", "lambada" };
#define MAX_MC 32 /* multiple-choice tasks, numbered from T_N */

struct cli {
	int argc;
	char **argv;
	const char *load, *watch, *ledger, *wikitext, *lambada;
	const char *tb_dir;                 /* --tensorboard-dir (with --watch) */
	int wait, json, quiet, task[T_N + MAX_MC];
	const char *mc_name[MAX_MC], *mc_file[MAX_MC], *log_samples;
	char mc_names[MAX_MC][128];
	int nmc;
	int device_cuda, bf16;              /* device_cuda -1: cuda when a GPU is visible */
	int detok;                          /* -1: auto */
	long long overlap, mbs, eval_samples, first_sample;
	int data_sources;                   /* a data source flag on the command line */
	char given[64][64];                 /* data flags on the command line, by name */
	int ngiven;
	struct mt_tokenizer_args tok;       /* --tokenizer-* on the command line */
};

static const char *task_name(const struct cli *c, int k)
{
	return k < T_N ? task_names[k] : c->mc_name[k - T_N];
}

struct result {
	const char *task;
	int nm;
	const char *mname[6];
	double mval[6];
	int64_t tokens;
	char hash[80];
	const char *hash_of;
	double seconds;
	json_t *extra;                      /* task-specific members */
};

/* ---- helpers ---- */

static void hex_digest(struct sha256_ctx *h, char *out)
{
	uint8_t d[SHA256_DIGEST_SIZE];

	sha256_digest(h, sizeof(d), d);
	strcpy(out, "sha256:");
	for (size_t i = 0; i < sizeof(d); i++)
		sprintf(out + 7 + 2 * i, "%02x", d[i]);
}

static char *read_file(const char *path, size_t *n)
{
	struct mt_err e = { 0 };
	char *text;

	if (mt_file_read(path, &text, n, &e))
		mt_die_err(&e);
	return text;
}

/* progress on stderr when it is a terminal: "mt-eval: wikitext 45% (12k/27k tokens, 5k tokens/s)" */
struct meter {
	int on;
	const char *what;
	double start, last;
};

static void meter_init(struct meter *m, const char *what, int quiet)
{
	m->on = !quiet && isatty(2);
	m->what = what;
	m->start = m->last = mt_now();
}

static void meter_update(struct meter *m, int64_t done, int64_t total)
{
	double t = mt_now();

	if (!m->on || t - m->last < 0.5)
		return;
	m->last = t;
	fprintf(stderr, "\r%s: %s %.0f%% (%lld/%lld tokens, %.0f tokens/s)\033[K", mt_log_prog(), m->what,
		total ? 100.0 * (double)done / (double)total : 100.0, (long long)done, (long long)total,
		(double)done / (t - m->start + 1e-9));
}

static void meter_done(struct meter *m)
{
	if (m->on && m->last > m->start)
		fprintf(stderr, "\r\033[K");
}

/* ---- the loss on a split ---- */

/* Is --name (with or without "=value") one of the data options? Its row, else NULL. */
static const struct mt_option *data_row(const char *arg)
{
	size_t n;

	if (strncmp(arg, "--", 2))
		return NULL;
	arg += 2;
	n = strcspn(arg, "=");
	for (const struct mt_option *r = data_rows; r->name; r++)
		if (strlen(r->name) == n && !strncmp(r->name, arg, n))
			return r;
	return NULL;
}

static int is_source(int id)
{
	return id == MT_DOPT_DATA_PATH || id == MT_DOPT_DATA_ARGS_PATH || id == MT_DOPT_TRAIN_PATH ||
	       id == MT_DOPT_VALID_PATH || id == MT_DOPT_TEST_PATH || id == MT_DOPT_PER_SPLIT_PATH;
}

/* The data flags: the training run's (recorded in the checkpoint) that the command line
 * does not give, then the command line's. Fills d (mt_dataopts_finish done). */
static void data_options(const struct cli *c, const struct mt_model *m, struct mt_dataopts *d, char ***keep,
			 int *nrec)
{
	json_t *ta = json_loads(m->state.train_args_json ? m->state.train_args_json : "{}", 0, NULL);
	json_t *rec = ta ? json_object_get(ta, "argv") : NULL;
	int n = 0, cap = c->argc + (int)json_array_size(rec) + 2;
	char **av = calloc((size_t)cap, sizeof(*av));
	struct mt_opt o;
	int id;

	av[n++] = c->argv[0];
	for (size_t i = 0; i < json_array_size(rec);) {
		const char *s = json_string_value(json_array_get(rec, i));
		const struct mt_option *r = s ? data_row(s) : NULL;
		int take = r != NULL, given = 0;
		size_t j = i + 1;
		if (r) {
			for (int g = 0; g < c->ngiven; g++)
				given |= !strncmp(c->given[g], s + 2, strcspn(s + 2, "=")) &&
					 strlen(c->given[g]) == strcspn(s + 2, "=");
			take = !given && !(is_source(r->id) && c->data_sources);
		}
		/* the option's values: up to the next "--" flag (one for a plain option) */
		if (!s || !strchr(s, '='))
			while (j < json_array_size(rec)) {
				const char *v = json_string_value(json_array_get(rec, j));
				if (!v || !strncmp(v, "--", 2) || (r && r->arg != MT_ARG_LIST && j > i + 1))
					break;
				j++;
			}
		for (size_t k = i; take && k < j; k++)
			av[n++] = strdup(json_string_value(json_array_get(rec, k)));
		i = j;
	}
	*nrec = n - 1;
	for (int i = 1; i < c->argc; i++)
		av[n++] = c->argv[i];
	av[n] = NULL;
	mt_dataopts_init(d);
	if (mt_opt_init(&o, &info, opts, n, av))
		mt_die_err(&o.err);
	while ((id = mt_opt_next(&o)) != MT_OPT_END)
		if (id >= 0 && id != MT_OPT_ARG)
			mt_dataopts_take(d, &o, id);
	/* what mt-train defaulted without a flag */
	if (d->gbs < 0 && json_is_integer(json_object_get(ta, "global_batch_size")))
		d->gbs = json_integer_value(json_object_get(ta, "global_batch_size"));
	if (d->train_iters < 0 && d->train_samples < 0 && json_is_integer(json_object_get(ta, "train_iters")))
		d->train_iters = json_integer_value(json_object_get(ta, "train_iters"));
	if (d->seq_length <= 0)
		d->seq_length = m->cfg.seq_length;
	if (d->seq_length != m->cfg.seq_length)
		mt_die_usage(&o, "--seq-length %lld differs from the model's %d", d->seq_length, m->cfg.seq_length);
	if (d->gbs < 0)
		d->gbs = 1;
	mt_dataopts_finish(d, &o);
	mt_opt_free(&o);
	*keep = av; /* d points into these strings */
	json_decref(ta);
}

static void task_loss(const struct cli *c, const struct mt_model *m, struct mt_lmeval *ev, int split, struct result *r)
{
	struct mt_dataopts d;
	struct mt_plan plan;
	struct mt_err e = { 0 };
	struct sha256_ctx h;
	struct meter mtr;
	char **keep;
	int nrec;
	int64_t L = m->cfg.seq_length, n, B = c->mbs, done = 0, count = 0;
	double sum = 0;
	int32_t *rows;
	struct mt_lmeval_row *out;
	ev->real_vocab = 0; /* training's loss over the padded vocabulary */

	data_options(c, m, &d, &keep, &nrec);
	for (int s = 0; s < MT_NSPLITS; s++)
		if (s != split)
			d.args.samples[s] = -1;
	if (d.args.samples[split] <= 0)
		mt_die(MT_EXIT_USAGE, "no %s samples: --eval-iters or --%s-samples is 0", mt_split_names[split],
		       mt_split_names[split]);
	if (mt_plan_make(&d.args, MT_PLAN_WRITE | MT_PLAN_KEEP, &plan, &e))
		mt_die_err(&e);
	if (!plan.split[split].present)
		mt_die(MT_EXIT_DATA, "the data give the %s split no samples (see --split)", mt_split_names[split]);
	n = c->eval_samples >= 0 ? c->eval_samples : d.eval_iters * d.gbs;
	if (c->first_sample + n > plan.split[split].size && !c->quiet)
		mt_warn("%s: samples %lld..%lld asked for, the split has %lld: they wrap around", mt_split_names[split],
			c->first_sample, c->first_sample + (long long)n - 1, (long long)plan.split[split].size);
	rows = malloc((size_t)(B * (L + 1)) * sizeof(*rows));
	out = malloc((size_t)B * sizeof(*out));
	sha256_init(&h);
	meter_init(&mtr, task_names[split == MT_SPLIT_VALID ? T_VALID : T_TEST], c->quiet);
	while (done < n) {
		int64_t k = n - done < B ? n - done : B;
		for (int64_t b = 0; b < k; b++)
			if (mt_plan_sample(&plan, split, c->first_sample + done + b, rows + b * (L + 1), &e))
				mt_die_err(&e);
		sha256_update(&h, (size_t)(k * (L + 1)) * sizeof(*rows), (const uint8_t *)rows);
		if (mt_lmeval_score(ev, k, rows, NULL, out, &e))
			mt_die_err(&e);
		for (int64_t b = 0; b < k; b++) {
			sum += out[b].loss;
			count += out[b].count;
		}
		done += k;
		meter_update(&mtr, done * L, n * L);
	}
	meter_done(&mtr);
	r->task = split == MT_SPLIT_VALID ? "valid" : "test";
	r->nm = 2;
	r->mname[0] = "loss";
	r->mval[0] = count ? sum / (double)count : NAN;
	r->mname[1] = "ppl";
	r->mval[1] = exp(r->mval[0]);
	r->tokens = count;
	hex_digest(&h, r->hash);
	r->hash_of = "int32 token ids of the evaluated samples";
	r->extra = json_pack("{s:s, s:I, s:I}", "split", mt_split_names[split], "first_sample", (json_int_t)c->first_sample,
			     "samples", (json_int_t)n);
	free(rows);
	free(out);
	mt_plan_free(&plan);
	mt_dataopts_free(&d);
	for (int i = 1; i <= nrec; i++)
		free(keep[i]);
	free(keep);
}

/* ---- the text tasks ---- */

struct text_tok {
	struct mt_tokenizer tk;
	struct mt_bpe bpe;
	int32_t eod;
};

static void tok_open(const struct cli *c, const struct mt_model *m, struct text_tok *t)
{
	struct mt_tokenizer_args a = c->tok;
	struct mt_err e = { 0 };

	if (mt_model_tokenizer_args(m, &a, &e))
		mt_die_err(&e);
	if (!strcmp(a.type, "NullTokenizer"))
		mt_die(MT_EXIT_USAGE, "the text tasks need a text tokenizer, and checkpoint '%s' was trained with "
				      "NullTokenizer: give --tokenizer-type and its files", m->iterdir);
	if (mt_tokenizer_load(&t->tk, &a, &e))
		mt_die_err(&e);
	if (mt_bpe_init(&t->bpe, &t->tk.vocab, t->tk.has_pretok ? &t->tk.pretok : NULL, &e))
		mt_die_err(&e);
	t->eod = t->tk.vocab.eod;
	if (t->eod < 0)
		mt_die(MT_EXIT_USAGE, "the tokenizer has no end-of-document id, which the text tasks pad with");
	if (t->tk.vocab.vocab_size > m->cfg.vocab_size)
		mt_die(MT_EXIT_USAGE, "the tokenizer has %lld ids, the model %lld: not the tokenizer it was trained with",
		       (long long)t->tk.vocab.vocab_size, (long long)m->cfg.vocab_size);
}

static void tok_close(struct text_tok *t)
{
	mt_bpe_free(&t->bpe);
	mt_tokenizer_free(&t->tk);
}

static void meter_cb(void *ctx, int64_t done, int64_t total)
{
	meter_update(ctx, done, total);
}

static void task_wikitext(const struct cli *c, const struct mt_model *m, struct mt_lmeval *ev, struct result *r)
{
	struct text_tok t;
	struct mt_err e = { 0 };
	struct sha256_ctx h;
	struct meter mtr;
	struct mt_wikitext_result w;
	size_t n;
	char *text = read_file(c->wikitext, &n);
	enum mt_detok kind = c->detok >= 0 ? (enum mt_detok)c->detok : mt_detok_for_path(c->wikitext);
	struct mt_evaltext x = { ev, &t.bpe, 0, meter_cb, &mtr };
	ev->real_vocab = 1; /* scored as an exported model scores (lmeval.h) */

	if (c->overlap > m->cfg.seq_length)
		mt_die(MT_EXIT_USAGE, "--overlapping-eval %lld is more than the seq-length %d: targets would be skipped",
		       c->overlap, m->cfg.seq_length);
	sha256_init(&h);
	sha256_update(&h, n, (const uint8_t *)text);
	hex_digest(&h, r->hash);
	tok_open(c, m, &t);
	x.eod = t.eod;
	meter_init(&mtr, "wikitext", c->quiet);
	if (mt_evaltext_wikitext(&x, text, n, c->wikitext, kind, c->overlap, &w, &e))
		mt_die_err(&e);
	meter_done(&mtr);
	r->task = "wikitext";
	r->nm = 4;
	r->mname[0] = "token_loss";
	r->mval[0] = w.token_loss;
	r->mname[1] = "token_ppl";
	r->mval[1] = w.token_ppl;
	r->mname[2] = "word_ppl";
	r->mval[2] = w.word_ppl;
	r->mname[3] = "token_word_ratio";
	r->mval[3] = w.ratio;
	r->tokens = w.targets;
	r->hash_of = "bytes of the file";
	r->extra = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I}", "file", c->wikitext, "detokenizer", mt_detok_names[kind],
			     "words", (json_int_t)w.words, "windows", (json_int_t)w.windows, "overlapping_eval",
			     (json_int_t)c->overlap, "seq_length", (json_int_t)m->cfg.seq_length);
	tok_close(&t);
	free(text);
}

static void task_lambada(const struct cli *c, const struct mt_model *m, struct mt_lmeval *ev, struct result *r)
{
	struct text_tok t;
	struct mt_err e = { 0 };
	struct sha256_ctx h;
	struct meter mtr;
	struct mt_lambada_result l;
	size_t n;
	char *text = read_file(c->lambada, &n);
	struct mt_evaltext x = { ev, &t.bpe, 0, meter_cb, &mtr };
	ev->real_vocab = 1; /* scored as an exported model scores (lmeval.h) */

	sha256_init(&h);
	sha256_update(&h, n, (const uint8_t *)text);
	hex_digest(&h, r->hash);
	tok_open(c, m, &t);
	x.eod = t.eod;
	meter_init(&mtr, "lambada", c->quiet);
	if (mt_evaltext_lambada(&x, text, n, c->lambada, &l, &e))
		mt_die_err(&e);
	meter_done(&mtr);
	if (l.truncated && !c->quiet)
		mt_warn("'%s': %lld rows were longer than seq-length + 1 = %d tokens and lost context from the left",
			c->lambada, (long long)l.truncated, m->cfg.seq_length + 1);
	r->task = "lambada";
	r->nm = 2;
	r->mname[0] = "accuracy";
	r->mval[0] = (double)l.correct / (double)l.examples;
	r->mname[1] = "accuracy_strict";
	r->mval[1] = (double)l.correct_strict / (double)l.examples;
	r->tokens = l.targets;
	r->hash_of = "bytes of the file";
	r->extra = json_pack("{s:s, s:I, s:I, s:I}", "file", c->lambada, "examples", (json_int_t)l.examples, "correct",
			     (json_int_t)l.correct, "correct_strict", (json_int_t)l.correct_strict);
	tok_close(&t);
	free(text);
}

static void task_choice(const struct cli *c, const struct mt_model *m, struct mt_lmeval *ev, int k, struct result *r)
{
	struct text_tok t;
	struct mt_err e = { 0 };
	struct sha256_ctx h;
	struct meter mtr;
	struct mt_choice_result q;
	size_t n;
	const char *file = c->mc_file[k], *name = c->mc_name[k];
	char *text = read_file(file, &n);
	struct mt_evaltext x = { ev, &t.bpe, 0, meter_cb, &mtr };
	FILE *samples = NULL;
	ev->real_vocab = 1; /* scored as an exported model scores (lmeval.h) */

	sha256_init(&h);
	sha256_update(&h, n, (const uint8_t *)text);
	hex_digest(&h, r->hash);
	tok_open(c, m, &t);
	x.eod = t.eod;
	if (c->log_samples) {
		/* appended to (one file for every task and checkpoint; each line names both),
		 * a whole task at a time: the lines wait in a temporary file */
		if (!(samples = tmpfile()))
			mt_die(MT_EXIT_IO, "cannot make a temporary file for --log-samples");
	}
	meter_init(&mtr, name, c->quiet);
	if (mt_evalchoice_run(&x, text, n, file, samples, &q, &e))
		mt_die_err(&e);
	meter_done(&mtr);
	if (samples) { /* each line gets the task's name, then goes to the file */
		FILE *f = fopen(c->log_samples, "a");
		char *line = NULL;
		size_t cap = 0;
		ssize_t len;
		if (!f)
			mt_die(MT_EXIT_IO, "cannot open --log-samples '%s': %s", c->log_samples, strerror(errno));
		rewind(samples);
		while ((len = getline(&line, &cap, samples)) > 0)
			if (fprintf(f, "{\"task\":\"%s\",\"iteration\":%lld,%s", name, (long long)m->iteration, line + 1) < 0)
				mt_die(MT_EXIT_IO, "cannot write --log-samples '%s'", c->log_samples);
		if (fclose(f))
			mt_die(MT_EXIT_IO, "cannot write --log-samples '%s': %s", c->log_samples, strerror(errno));
		free(line);
		fclose(samples);
	}
	if (q.truncated && !c->quiet)
		mt_warn("'%s': %lld choices were longer than seq-length + 1 = %d tokens and lost context from the left", file,
			(long long)q.truncated, m->cfg.seq_length + 1);
	r->task = name;
	r->nm = 2;
	r->mname[0] = "acc";
	r->mval[0] = (double)q.correct / (double)q.examples;
	r->mname[1] = "acc_norm";
	r->mval[1] = (double)q.correct_norm / (double)q.examples;
	r->tokens = q.targets;
	r->hash_of = "bytes of the file";
	r->extra = json_pack("{s:s, s:I, s:I, s:I, s:I}", "file", file, "examples", (json_int_t)q.examples, "correct",
			     (json_int_t)q.correct, "correct_norm", (json_int_t)q.correct_norm, "choices", (json_int_t)q.choices);
	tok_close(&t);
	free(text);
}

/* ---- output ---- */

static char *result_json(const struct mt_model *m, const struct result *r)
{
	json_t *o = json_object(), *mt = json_object();
	char *s;

	{
		/* absolute, so ledger lines stay meaningful wherever they are read */
		char *abs = realpath(m->iterdir, NULL);
		json_object_set_new(o, "checkpoint", json_string(abs ? abs : m->iterdir));
		free(abs);
	}
	json_object_set_new(o, "iteration", json_integer(m->iteration));
	json_object_set_new(o, "task", json_string(r->task));
	for (int i = 0; i < r->nm; i++)
		json_object_set_new(mt, r->mname[i], isfinite(r->mval[i]) ? json_real(r->mval[i]) : json_null());
	json_object_set_new(o, "metrics", mt);
	json_object_set_new(o, "tokens", json_integer(r->tokens));
	json_object_set_new(o, "dataset_hash", json_string(r->hash));
	json_object_set_new(o, "hash_of", json_string(r->hash_of));
	json_object_set_new(o, "seconds", json_real(round(r->seconds * 1000) / 1000));
	if (r->extra)
		json_object_update(o, r->extra);
	s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12));
	json_decref(o);
	return s;
}

static void print_result(const struct cli *c, const struct mt_model *m, const struct result *r, const char *line,
			 int *header)
{
	if (c->json) {
		printf("%s\n", line);
	} else {
		if (!*header)
			printf("%-10s %-9s %-17s %14s %11s %8s  %s\n", "iteration", "task", "metric", "value", "tokens",
			       "seconds", "data");
		*header = 1;
		for (int i = 0; i < r->nm; i++)
			printf("%-10lld %-9s %-17s %14.6f %11lld %8.2f  %.19s\n", (long long)m->iteration, r->task,
			       r->mname[i], r->mval[i], (long long)r->tokens, r->seconds, r->hash);
	}
	fflush(stdout);
}

/* --tensorboard-dir: one event file a run of the watch mode, made when there is a first
 * result; each metric of a task a scalar "eval/TASK/METRIC" at the checkpoint's iteration,
 * written at once (a queue of one), after its ledger line. */
static struct mt_tfevents tb;
static int tb_open;

static void tb_result(const struct cli *c, int64_t iteration, const struct result *r)
{
	struct mt_err e = { 0 };

	if (!tb_open) {
		if (mt_tfevents_open(&tb, c->tb_dir, 1, &e))
			mt_die_err(&e);
		tb_open = 1;
	}
	for (int i = 0; i < r->nm; i++) {
		char tag[160];
		if (!isfinite(r->mval[i]))
			continue;
		snprintf(tag, sizeof(tag), "eval/%s/%s", r->task, r->mname[i]);
		if (mt_tfevents_scalar(&tb, tag, r->mval[i], iteration, &e))
			mt_die_err(&e);
	}
}

/* Evaluate the tasks of `want` on one checkpoint; each result goes to stdout and, with a
 * ledger, into it as soon as it is done. */
static int eval_checkpoint(const struct cli *c, const char *path, const int *want, struct mt_ledger *ledger,
			   int *header, struct mt_err *open_err)
{
	struct mt_model m;
	struct mt_lmeval ev;
	struct mt_err e = { 0 };

	if (mt_model_open(&m, path, &e)) {
		if (ledger && access(path, F_OK)) {
			/* removed while we read it (mt-train --keep-last): not an error of ours */
			mt_warn("'%s' was removed while being read: skipped", path);
			return 0;
		}
		if (ledger && open_err) {
			*open_err = e; /* --watch records it and goes on */
			return -1;
		}
		mt_die_err(&e);
	}
	{
		struct mt_backend_opts bo = { 0 };
		bo.precision = c->bf16 ? MT_PREC_BF16 : MT_PREC_FP32;
		bo.deterministic = 1;
		bo.quiet = c->quiet;
		if (mt_lmeval_init(&ev, &m.cfg, &m.params, m.w, (int)c->mbs, c->device_cuda ? &mt_backend_cuda : &mt_backend_cpu,
				   &bo, &e))
			mt_die_err(&e);
	}
	if (!c->quiet)
		mt_info("evaluating '%s' (iteration %lld)", m.iterdir, (long long)m.iteration);
	for (int k = 0; k < T_N + c->nmc; k++) {
		struct result r;
		double t0 = mt_now();
		char *line;
		if (!want[k])
			continue;
		memset(&r, 0, sizeof(r));
		switch (k) {
		case T_VALID: task_loss(c, &m, &ev, MT_SPLIT_VALID, &r); break;
		case T_TEST: task_loss(c, &m, &ev, MT_SPLIT_TEST, &r); break;
		case T_WIKITEXT: task_wikitext(c, &m, &ev, &r); break;
		case T_LAMBADA: task_lambada(c, &m, &ev, &r); break;
		default: task_choice(c, &m, &ev, k - T_N, &r); break;
		}
		r.seconds = mt_now() - t0;
		line = result_json(&m, &r);
		if (ledger && mt_ledger_append(ledger, m.iteration, r.task, line, &e))
			mt_die_err(&e);
		if (ledger && c->tb_dir)
			tb_result(c, m.iteration, &r);
		print_result(c, &m, &r, line, header);
		if (!c->quiet && !c->json)
			mt_info("%s: %lld tokens in %.2f s (%.0f tokens/s)", r.task, (long long)r.tokens, r.seconds,
				(double)r.tokens / (r.seconds + 1e-9));
		free(line);
		json_decref(r.extra);
	}
	mt_lmeval_free(&ev);
	mt_model_close(&m);
	return 0;
}

/* What an iteration directory holds, as a short text: its files' count, bytes and newest
 * modification time. A failed iteration is tried again only when this changes. */
static void fingerprint(const char *dir, char *out, size_t n)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	long long files = 0, bytes = 0, mtime = 0;
	struct stat st;

	if (d) {
		while ((de = readdir(d))) {
			char p[4400];
			long long t;
			if (de->d_name[0] == '.')
				continue;
			snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
			if (lstat(p, &st))
				continue;
			files++;
			bytes += (long long)st.st_size;
			t = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
			if (t > mtime)
				mtime = t;
		}
		closedir(d);
	}
	if (!stat(dir, &st)) {
		long long t = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
		if (t > mtime)
			mtime = t;
	}
	snprintf(out, n, "files=%lld bytes=%lld mtime_ns=%lld", files, bytes, mtime);
}

static int watch(const struct cli *c)
{
	struct mt_ledger l;
	struct mt_err e = { 0 };
	int rc = mt_ledger_open(&l, c->ledger, c->wait, &e), header = 0, evaluated = 0, failed = 0, any;
	char fp[200], key[256];
	struct mt_err oe = { 0 };

	if (rc < 0)
		mt_die_err(&e);
	if (rc == 1) {
		if (!c->quiet)
			mt_info("another mt-eval holds '%s.lock' and evaluates what is new: nothing to do", c->ledger);
		return 0;
	}
	if (l.repaired)
		mt_warn("ledger '%s': cut off a torn last line of %lld bytes (a run that died while writing it)",
			c->ledger, (long long)l.repaired);
	if (l.ignored)
		mt_warn("ledger '%s': ignoring %lld lines that are not results", c->ledger, (long long)l.ignored);
	/* pass after pass, so checkpoints saved meanwhile are evaluated too */
	do {
		int64_t *iters;
		size_t n;
		any = 0;
		if (mt_ckpt_list(c->watch, &iters, &n, &e))
			mt_die_err(&e);
		for (size_t i = 0; i < n; i++) {
			int want[T_N + MAX_MC] = { 0 }, some = 0;
			char dir[4096];
			for (int k = 0; k < T_N + c->nmc; k++) {
				want[k] = c->task[k] && !mt_ledger_has(&l, iters[i], task_name(c, k));
				some |= want[k];
			}
			if (!some)
				continue;
			if (mt_ckpt_iter_dir(dir, sizeof(dir), c->watch, iters[i], &e))
				mt_die_err(&e);
			if (access(dir, F_OK)) {
				mt_warn("'%s' is gone (removed by --keep-last?): skipped", dir);
				continue;
			}
			fingerprint(dir, fp, sizeof(fp));
			snprintf(key, sizeof(key), "failed#%s", fp);
			if (mt_ledger_has(&l, iters[i], key))
				continue; /* failed before, unchanged since: not retried */
			if (eval_checkpoint(c, dir, want, &l, &header, &oe)) {
				/* a broken checkpoint stops nothing: recorded with its reason, tried
				 * again only once it changes */
				json_t *o = json_object();
				char *line;
				json_object_set_new(o, "iteration", json_integer(iters[i]));
				json_object_set_new(o, "task", json_string("failed"));
				json_object_set_new(o, "checkpoint", json_string(dir));
				json_object_set_new(o, "exit", json_integer(oe.code));
				json_object_set_new(o, "reason", json_string(oe.msg));
				json_object_set_new(o, "fingerprint", json_string(fp));
				line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
				json_decref(o);
				if (!line || mt_ledger_append(&l, iters[i], key, line, &e))
					mt_die_err(&e);
				free(line);
				mt_ckpt_warn("checkpoint '%s' failed and is recorded in '%s' (tried again when it changes): %s", dir,
					c->ledger, oe.msg);
				failed++;
				any = 1;
				continue;
			}
			evaluated++;
			any = 1;
		}
		free(iters);
	} while (any);
	if (!evaluated && !failed && !c->quiet)
		mt_info("nothing new under '%s'", c->watch);
	if (tb_open && mt_tfevents_close(&tb, &e))
		mt_die_err(&e);
	mt_ledger_close(&l);
	/* a newly broken checkpoint is worth one cron mail: exit 3 once, after the rest */
	return failed ? MT_EXIT_DATA : 0;
}

int main(int argc, char **argv)
{
	struct mt_opt o;
	struct mt_dataopts d;
	struct cli c;
	int id, ntasks = 0, header = 0;

	mt_tool_start(&info);
	memset(&c, 0, sizeof(c));
	c.argc = argc;
	c.argv = argv;
	c.overlap = 32;
	c.mbs = 4;
	c.eval_samples = -1;
	c.detok = -1;
	c.device_cuda = -1;
	mt_dataopts_init(&d);
	if (mt_opt_init(&o, &info, opts, argc, argv))
		mt_die_err(&o.err);
	while ((id = mt_opt_next(&o)) != MT_OPT_END) {
		mt_tool_common(&o, id);
		if (id >= MT_DOPT_DATA_PATH && id <= MT_DOPT_TOK_MODEL) {
			mt_dataopts_take(&d, &o, id);
			if (c.ngiven < 64)
				snprintf(c.given[c.ngiven++], sizeof(c.given[0]), "%s", o.cur->name);
			c.data_sources |= is_source(id);
			continue;
		}
		switch (id) {
		case MT_OPT_ARG: mt_die_usage(&o, "unexpected argument '%s'", o.arg);
		case O_LOAD: c.load = o.arg; break;
		case O_WATCH: c.watch = o.arg; break;
		case O_LEDGER: c.ledger = o.arg; break;
		case O_WAIT: c.wait = 1; break;
		case O_TB_DIR: c.tb_dir = o.arg; break;
		case O_VALID: c.task[T_VALID] = 1; break;
		case O_TEST: c.task[T_TEST] = 1; break;
		case O_WIKITEXT: c.wikitext = o.arg; c.task[T_WIKITEXT] = 1; break;
		case O_LAMBADA: c.lambada = o.arg; c.task[T_LAMBADA] = 1; break;
		case O_MC: {
			const char *eq = strchr(o.arg, '='), *file = eq ? eq + 1 : o.arg, *base;
			size_t nl;
			if (c.nmc == MAX_MC)
				mt_die_usage(&o, "at most %d --multiple-choice tasks", MAX_MC);
			if (eq) {
				nl = (size_t)(eq - o.arg);
				base = o.arg;
			} else { /* the file's name without its directory and extension */
				base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
				nl = strcspn(base, ".");
			}
			if (!nl || nl >= sizeof(c.mc_names[0]) || !*file)
				mt_die_usage(&o, "--multiple-choice wants [NAME=]FILE with a name of 1..127 bytes, not '%s'", o.arg);
			memcpy(c.mc_names[c.nmc], base, nl);
			c.mc_names[c.nmc][nl] = '\0';
			for (int k = 0; k < T_N; k++)
				if (!strcmp(c.mc_names[c.nmc], task_names[k]))
					mt_die_usage(&o, "--multiple-choice: '%s' is the name of another task: give NAME=FILE", task_names[k]);
			for (int k = 0; k < c.nmc; k++)
				if (!strcmp(c.mc_names[c.nmc], c.mc_names[k]))
					mt_die_usage(&o, "--multiple-choice: two tasks named '%s': give NAME=FILE", c.mc_names[k]);
			c.mc_name[c.nmc] = c.mc_names[c.nmc];
			c.mc_file[c.nmc] = file;
			c.task[T_N + c.nmc++] = 1;
			break;
		}
		case O_LOG_SAMPLES: c.log_samples = o.arg; break;
		case O_OVERLAP: c.overlap = mt_tool_num(&o, 1, INT64_MAX / 4); break;
		case O_MBS: c.mbs = mt_tool_num(&o, 1, INT64_MAX / 4); break;
		case O_EVAL_SAMPLES: c.eval_samples = mt_tool_num(&o, 1, INT64_MAX / 4); break;
		case O_FIRST_SAMPLE: c.first_sample = mt_tool_num(&o, 0, INT64_MAX / 4); break;
		case O_JSON: c.json = 1; break;
		case O_DETOK:
			if (!strcmp(o.arg, "auto"))
				c.detok = -1;
			else if ((c.detok = mt_detok_parse(o.arg)) < 0)
				mt_die_usage(&o, "--detokenizer must be auto, none, wikitext, ptb or lambada, not '%s'", o.arg);
			break;
		case O_DEVICE:
			if (!strcmp(o.arg, "cpu"))
				c.device_cuda = 0;
			else if (!strcmp(o.arg, "cuda"))
				c.device_cuda = 1;
			else
				mt_die_usage(&o, "--device must be cuda or cpu, not '%s'", o.arg);
			break;
		case O_BF16: c.bf16 = 1; break;
		}
	}
	c.quiet = o.quiet;
	c.tok.type = d.tok_type;
	c.tok.vocab_file = d.vocab;
	c.tok.merge_file = d.merges;
	c.tok.tokenizer_model = d.tok_model;
	if (c.data_sources && !c.task[T_TEST])
		c.task[T_VALID] = 1;
	for (int k = 0; k < T_N + c.nmc; k++)
		ntasks += c.task[k];
	if (!c.load == !c.watch)
		mt_die_usage(&o, "give --load CKPT or --watch DIR (one of them)");
	if (c.watch && !c.ledger)
		mt_die_usage(&o, "--watch needs --ledger FILE");
	if (c.ledger && !c.watch)
		mt_die_usage(&o, "--ledger goes with --watch");
	if (c.tb_dir && !c.watch)
		mt_die_usage(&o, "--tensorboard-dir goes with --watch");
	if (!ntasks)
		mt_die_usage(&o, "no task: give --valid, --test, --data-path, --wikitext FILE, --lambada FILE or --multiple-choice FILE");
	if (c.log_samples && !c.nmc)
		mt_die_usage(&o, "--log-samples goes with --multiple-choice");
	if (c.device_cuda < 0)
		c.device_cuda = mt_backend_cuda_usable();
	if (!c.device_cuda && c.bf16)
		mt_die_usage(&o, "--bf16 needs --device cuda (the CPU computes in fp32)");
	if (c.load) {
		eval_checkpoint(&c, c.load, c.task, NULL, &header, NULL);
		return 0;
	}
	return watch(&c);
}
