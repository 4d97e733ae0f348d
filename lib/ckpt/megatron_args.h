/* megatron_args.h: Megatron-LM's `args` (an argparse.Namespace in every checkpoint, legacy or
 * torch_dist) read into mt's model configuration, and the record of where an import came
 * from; with the options and the report of an import. Shared by the legacy reader
 * (megatron.c) and the torch_dist reader (torchdist.c), so neither includes the other's
 * internals. The import itself is megatron.h's. */
#ifndef MT_MEGATRON_ARGS_H
#define MT_MEGATRON_ARGS_H

#include <stdint.h>

#include "base/err.h"
#include "ckpt/pickle.h"
#include "model/config.h"
#include "model/params.h"

struct mt_meg_import_opts {
	int optimizer;        /* 1: read the optimizer state when the checkpoint has it */
	int64_t vocab_size;   /* > 0: the tokenizer's vocabulary (else args.vocab_size, else the padded size) */
	int check_crc;        /* 1: verify every ZIP member's CRC-32 */
	int64_t iteration;    /* >= 0: the mt checkpoint's iteration; -1: the Megatron checkpoint's */
};

struct mt_meg_report {
	int tp, pp, vp;
	int64_t iteration;
	int legacy_names;     /* 1: the legacy model's nested names */
	int optimizer;        /* 1: optimizer state imported */
	int64_t files, tensors;
	struct mt_config cfg;
};

/* The integer argument `name` of args `ns` into *out (def when absent; def INT64_MIN: it
 * must be there); -1 when missing so or not an integer, the message (naming path) in err. */
int mt_meg_arg_int(const struct mt_pk *ns, const char *name, int64_t def, int64_t *out, const char *path,
		   struct mt_err *err);
/* mt's configuration and pipeline split from Megatron's args `ns` (path: the file, named in
 * messages; tp: args' tensor-parallel size). */
int mt_meg_args_config(const struct mt_pk *ns, const char *path, const struct mt_meg_import_opts *o,
		       struct mt_config *c, struct mt_pp_split *sp, int *tp, struct mt_err *err);
/* The train_args JSON text that records where an import came from (src, the layout, the
 * tokenizer args name, checkpoint_version x 10); malloc'd, NULL when out of memory. */
char *mt_meg_args_provenance(const struct mt_pk *ns, const char *src, const struct mt_meg_report *r,
			     int64_t checkpoint_version10);

/* A layer's tensor by its name below the layer ("self_attention.linear_qkv.weight", the legacy
 * "mlp.dense_h_to_4h.bias", Transformer Engine's "mlp.linear_fc1.layer_norm_weight"): 0 with
 * its mt_param_kind in *kind, -1 for a name mt does not know. */
int mt_meg_layer_kind(const char *rest, int *kind);

#endif
