/* dataplan.h: what a training run will read, split by split, as Megatron's builder
 * decides it: which sources, how many samples each, how many epochs of each that is,
 * and (when asked) the index cache files of every GPTDataset and BlendedDataset.
 *
 * Shared by mt-index build (one dataset), mt-blend plan/build and mt-train's data
 * feed, so all three agree with each other and with Megatron. The index arrays come
 * from gptsamples.c and blend.c; this file only orchestrates. */
#ifndef MT_DATAPLAN_H
#define MT_DATAPLAN_H

#include <stdint.h>

#include "data/blend.h"
#include "base/err.h"
#include "data/gptsamples.h"
#include "data/idx.h"

enum { MT_SPLIT_TRAIN, MT_SPLIT_VALID, MT_SPLIT_TEST, MT_NSPLITS };
extern const char *const mt_split_names[MT_NSPLITS]; /* "train", "valid", "test" */

struct mt_plan_args {
	/* either one blend with --split ... */
	const struct mt_blend_spec *blend;
	const char *split;              /* NULL: Megatron's default "969, 30, 1" */
	/* ... or a blend per split (--train-data-path ...): these take precedence */
	const struct mt_blend_spec *per_split[MT_NSPLITS];
	int64_t samples[MT_NSPLITS];    /* -1: none requested (the split is skipped) */
	int64_t seq_length;
	uint32_t seed;
	int add_extra_token;            /* 1 */
	double surplus;                 /* --mid-level-dataset-surplus, 0.005 */
	int drop_last;                  /* 1 */
	const char *cache_dir;          /* --data-cache-path, or NULL for each dataset's default */
	const char *tokenizer_json;     /* identifiers for the cache descriptions */
};

struct mt_plan_use {                /* one source in one split */
	int present;
	struct mt_gpt_range range;      /* sequences of the source used */
	int64_t documents, tokens;      /* in that range */
	int64_t target;                 /* samples the blend asks of it */
	int64_t samples;                /* samples its GPTDataset is built with (-1: one epoch) */
	int64_t built;                  /* samples the built dataset has */
	int64_t epochs;
	int separate_final_epoch;
	int64_t realized;               /* samples of it the blend actually takes */
	char md5[33];
	struct mt_gpt_indices x;        /* with MT_PLAN_KEEP: the indices, to read samples */
};

struct mt_plan_source {
	char *path;
	double weight;                  /* normalized */
	struct mt_idx *ix;
	int32_t *lens;
	struct mt_plan_use use[MT_NSPLITS];
};

struct mt_plan_split {
	int present;
	int blended;                    /* a BlendedDataset (several sources) */
	int64_t size;                   /* samples the split serves */
	int nsrc;
	struct mt_plan_source *src;     /* this split's sources */
	void *dataset_index;            /* int16, or int32 when wide */
	int wide;
	int64_t *dataset_sample_index;
	char md5[33];                   /* the blend's cache name, when cached */
};

struct mt_plan {
	struct mt_plan_split split[MT_NSPLITS];
	int64_t seq_length;
	int add_extra_token;
	double split_w[3];
	int have_split;
};

enum { MT_PLAN_WRITE = 1, MT_PLAN_KEEP = 2 };
/* Work out the plan; MT_PLAN_WRITE also writes every cache file, MT_PLAN_KEEP keeps the
 * indices in memory for mt_plan_sample. */
int mt_plan_make(const struct mt_plan_args *a, int flags, struct mt_plan *p, struct mt_err *err);
void mt_plan_free(struct mt_plan *p);

/* Sample `idx` of a split (kept plan), as Megatron's GPTDataset serves it: seq_length+1
 * token ids, padded with -1 past the end of the data. idx wraps around the split. */
int mt_plan_sample(const struct mt_plan *p, int split, int64_t idx, int32_t *out, struct mt_err *err);

#endif
