/* model.h: a trained model opened from a checkpoint, for the tools that use one
 * without training it (mt-eval, mt-generate, mt-ckpt-reshard export).
 *
 * Opening resolves the user's path (a checkpoint directory, an iteration directory or
 * an .h5 file, as mt_ckpt_resolve takes them), reads the model config stored in the
 * checkpoint, builds the parameter table and loads the weights (fp32, the flat layout of
 * params.h) without the optimizer state. It also reads which tokenizer the run was
 * trained with, as mt-train records it in the checkpoint's training arguments
 * ("tokenizer": {type, vocab_file, merge_file, tokenizer_model}), so that a tool can
 * default to it; the tool's own --tokenizer-* flags override it. This module holds no
 * arithmetic: the forward passes live in gpt.c and the backends. */
#ifndef MT_MODEL_H
#define MT_MODEL_H

#include <stdint.h>

#include "ckpt/ckpt.h"
#include "model/config.h"
#include "base/err.h"
#include "model/params.h"
#include "text/tokenizer.h"

struct mt_model {
	char iterdir[4096];          /* what was loaded: the resolved iteration directory or file */
	int64_t iteration;
	struct mt_config cfg;
	struct mt_params params;
	float *w;                    /* params.total floats */
	struct mt_ckpt_loaded state; /* iteration, consumed samples, JSON texts */
	/* the tokenizer recorded at training time; NULL members where none was */
	char *tok_type, *tok_vocab_file, *tok_merge_file, *tok_model;
};

/* Open and load; on failure nothing is left to free. */
int mt_model_open(struct mt_model *m, const char *path, struct mt_err *err);
void mt_model_close(struct mt_model *m);

/* Fill a tokenizer's arguments: each member the caller left NULL (type, vocab_file,
 * merge_file, tokenizer_model) from the checkpoint's record. Returns -1 with a message
 * naming the checkpoint when no tokenizer type is known either way. NullTokenizer gets
 * vocab_size from the model (its end-of-document id is the last id). */
int mt_model_tokenizer_args(const struct mt_model *m, struct mt_tokenizer_args *a, struct mt_err *err);

#endif
