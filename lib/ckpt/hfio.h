/* hfio.h: Hugging Face model directories written from and read into mt models
 * (mt-ckpt-reshard export and import).
 *
 * An export directory holds model.safetensors (fp32, no vocabulary padding),
 * config.json, and for a model trained with GPT2BPETokenizer its vocab.json and
 * merges.txt with tokenizer_config.json and generation_config.json, as transformers
 * reads them. It is written whole under "OUTDIR.tmp.<pid>" and renamed into place, so a
 * killed export never leaves a directory named OUTDIR. Before the rename the export
 * checks itself: the written files are read back through the import path and a fixed
 * prompt's log-probabilities from mt's forward pass on them are compared with those of
 * the original weights; a mismatch removes the output and fails (MT_EXIT_FALSE).
 *
 * An import reads config.json and model.safetensors (or the shards an index names),
 * converts bf16/fp16/fp32 to fp32, pads the vocabulary again and saves an mt checkpoint
 * (weights only) with ckpt.h. The tensor mapping is hf.c's. */
#ifndef MT_HFIO_H
#define MT_HFIO_H

#include <stdint.h>

#include "model/config.h"
#include "base/err.h"
#include "ckpt/hf.h"
#include "ckpt/model.h"
#include "model/params.h"

/* Log-probabilities over the real vocabulary (the first c->vocab_size ids: padding
 * excluded, as a Hugging Face model has none) of mt's CPU forward pass for one
 * sequence of T ids: out[T][vocab_size]. */
int mt_hf_logprobs(const struct mt_config *c, const struct mt_params *p, const float *w, const int32_t *ids, int T,
		   double *out, struct mt_err *err);

/* A model read from a Hugging Face directory; free with mt_hf_loaded_free. */
struct mt_hf_loaded {
	struct mt_config cfg;
	struct mt_params params;
	float *w;
};
int mt_hf_load_dir(const char *dir, enum mt_hf_format f, int divisible_by, int seq_length, struct mt_hf_loaded *out,
		   struct mt_err *err);
void mt_hf_loaded_free(struct mt_hf_loaded *l);

struct mt_hf_export_opts {
	enum mt_hf_format format;
	int verify;           /* 1: check the written files (the default) */
	double tolerance;     /* of the check, in log-probability (1e-4) */
};

/* What the check found. */
struct mt_hf_report {
	int verified;
	int tokens;           /* of the prompt */
	double max_diff;      /* largest log-probability difference */
	int tokenizer_files;  /* 1 when vocab.json and merges.txt were written, 2 tokenizer.model */
	int64_t tensors;
};

int mt_hf_export(const struct mt_model *m, const char *outdir, const struct mt_hf_export_opts *o,
		 struct mt_hf_report *r, struct mt_err *err);

struct mt_hf_import_opts {
	enum mt_hf_format format;
	int64_t iteration;    /* the checkpoint's iteration (0) */
	int divisible_by;     /* --make-vocab-size-divisible-by (128) */
	int seq_length;       /* 0: max_position_embeddings */
};

int mt_hf_import(const char *hfdir, const char *ckptdir, const struct mt_hf_import_opts *o, struct mt_hf_loaded *out,
		 struct mt_err *err);

#endif
