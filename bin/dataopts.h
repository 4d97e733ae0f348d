/* dataopts.h: the data options that mt-index build, mt-blend and mt-train share, with
 * Megatron's names (--data-path, --split, --seq-length, --train-samples, ...), and the
 * plan report they print. Linked into every tool with tool.c. */
#ifndef MT_DATAOPTS_H
#define MT_DATAOPTS_H

#include <stdio.h>

#include "data/dataplan.h"
#include "base/opt.h"

enum {
	MT_DOPT_DATA_PATH = 600, MT_DOPT_DATA_ARGS_PATH, MT_DOPT_TRAIN_PATH, MT_DOPT_VALID_PATH,
	MT_DOPT_TEST_PATH, MT_DOPT_PER_SPLIT_PATH, MT_DOPT_SPLIT, MT_DOPT_SEQ_LENGTH, MT_DOPT_SEED,
	MT_DOPT_TRAIN_SAMPLES, MT_DOPT_TRAIN_ITERS, MT_DOPT_GBS, MT_DOPT_EVAL_INTERVAL,
	MT_DOPT_EVAL_ITERS, MT_DOPT_VALID_SAMPLES, MT_DOPT_TEST_SAMPLES, MT_DOPT_CACHE_PATH,
	MT_DOPT_SURPLUS, MT_DOPT_TOK_IDS, MT_DOPT_LEGACY_TOK, MT_DOPT_TOK_TYPE, MT_DOPT_VOCAB, MT_DOPT_MERGES,
	MT_DOPT_TOK_MODEL,
};

/* The rows, for a tool's option table (terminated by a row with name NULL). */
#define MT_DATA_OPTIONS                                                                                          \
	{ "data-path", 0, MT_ARG_LIST, MT_DOPT_DATA_PATH, "[W] PREFIX", "datasets, optionally weighted: \"0.3 A 0.7 B\"" }, \
	{ "data-args-path", 0, MT_ARG_REQUIRED, MT_DOPT_DATA_ARGS_PATH, "FILE", "a file holding the --data-path tokens" }, \
	{ "train-data-path", 0, MT_ARG_LIST, MT_DOPT_TRAIN_PATH, "[W] PREFIX", "the training split's own blend" },        \
	{ "valid-data-path", 0, MT_ARG_LIST, MT_DOPT_VALID_PATH, "[W] PREFIX", "the validation split's own blend" },      \
	{ "test-data-path", 0, MT_ARG_LIST, MT_DOPT_TEST_PATH, "[W] PREFIX", "the test split's own blend" },              \
	{ "per-split-data-args-path", 0, MT_ARG_REQUIRED, MT_DOPT_PER_SPLIT_PATH, "FILE",                              \
	  "JSON {\"train\": ..., \"valid\": ..., \"test\": ...} of per-split blends" },                                 \
	{ "split", 0, MT_ARG_REQUIRED, MT_DOPT_SPLIT, "A,B,C", "train, valid, test proportions (default 969,30,1)" },     \
	{ "seq-length", 0, MT_ARG_REQUIRED, MT_DOPT_SEQ_LENGTH, "L", "tokens per sample" },                                 \
	{ "seed", 0, MT_ARG_REQUIRED, MT_DOPT_SEED, "S", "random seed of the sample order (default 1234)" },                 \
	{ "train-samples", 0, MT_ARG_REQUIRED, MT_DOPT_TRAIN_SAMPLES, "N", "training samples" },                          \
	{ "train-iters", 0, MT_ARG_REQUIRED, MT_DOPT_TRAIN_ITERS, "N", "training iterations (samples = N x batch)" },       \
	{ "global-batch-size", 0, MT_ARG_REQUIRED, MT_DOPT_GBS, "N", "samples per iteration" },                           \
	{ "eval-interval", 0, MT_ARG_REQUIRED, MT_DOPT_EVAL_INTERVAL, "N", "iterations between evaluations (default 1000)" }, \
	{ "eval-iters", 0, MT_ARG_REQUIRED, MT_DOPT_EVAL_ITERS, "N", "iterations per evaluation (default 100)" },          \
	{ "valid-samples", 0, MT_ARG_REQUIRED, MT_DOPT_VALID_SAMPLES, "N", "validation samples, instead of the formula" }, \
	{ "test-samples", 0, MT_ARG_REQUIRED, MT_DOPT_TEST_SAMPLES, "N", "test samples, instead of the formula" },         \
	{ "data-cache-path", 0, MT_ARG_REQUIRED, MT_DOPT_CACHE_PATH, "DIR", "where index caches go (default: beside each dataset)" }, \
	{ "mid-level-dataset-surplus", 0, MT_ARG_REQUIRED, MT_DOPT_SURPLUS, "F", "extra samples each blended source builds (default 0.005)" }, \
	{ "tokenizer-identifiers", 0, MT_ARG_REQUIRED, MT_DOPT_TOK_IDS, "JSON", "the tokenizer part of cache descriptions, exactly" }, \
	{ "legacy-tokenizer", 0, MT_ARG_NONE, MT_DOPT_LEGACY_TOK, NULL, "cache descriptions name the tokenizer as Megatron's legacy tokenizers do" }, \
	{ "tokenizer-type", 0, MT_ARG_REQUIRED, MT_DOPT_TOK_TYPE, "TYPE", "tokenizer, for the cache descriptions" },      \
	{ "vocab-file", 0, MT_ARG_REQUIRED, MT_DOPT_VOCAB, "FILE", "tokenizer file, for the cache descriptions" },        \
	{ "merge-file", 0, MT_ARG_REQUIRED, MT_DOPT_MERGES, "FILE", "tokenizer file, for the cache descriptions" },       \
	{ "tokenizer-model", 0, MT_ARG_REQUIRED, MT_DOPT_TOK_MODEL, "FILE", "tokenizer file, for the cache descriptions" }

struct mt_dataopts {
	const char *data[256];
	int ndata;
	const char *split_paths[MT_NSPLITS][256];
	int nsplit_paths[MT_NSPLITS];
	const char *data_args_path, *per_split_path, *split, *cache, *tok_ids, *tok_type, *vocab, *merges, *tok_model;
	long long seq_length, seed, train_samples, train_iters, gbs, eval_interval, eval_iters, valid_samples,
		test_samples;
	double surplus;
	int legacy_tok;         /* --legacy-tokenizer */
	/* filled by mt_dataopts_finish */
	struct mt_blend_spec blend, per_split[MT_NSPLITS];
	int have_blend, have_per_split[MT_NSPLITS];
	char *file_text;       /* --data-args-path contents */
	char *tok_json;
	struct mt_plan_args args;
};

void mt_dataopts_init(struct mt_dataopts *d);
/* 1 if the option id was one of the data options (and was taken), else 0; bad values die. */
int mt_dataopts_take(struct mt_dataopts *d, struct mt_opt *o, int id);
/* Check the combination and fill d->args; usage errors die. */
void mt_dataopts_finish(struct mt_dataopts *d, struct mt_opt *o);
void mt_dataopts_free(struct mt_dataopts *d);

/* The plan as a table (human) or one JSON object; warnings also go to stderr. */
void mt_dataopts_print_plan(const struct mt_dataopts *d, const struct mt_plan *p, int json, FILE *out);

#endif
