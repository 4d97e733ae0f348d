/* megatron.h: Megatron-LM's legacy checkpoints (`--ckpt-format torch`) read into and
 * written from mt checkpoints (mt-ckpt-reshard import/export --format megatron).
 *
 * A Megatron checkpoint directory holds latest_checkpointed_iteration.txt (an iteration
 * or "release") and iter_0000500/ (or release/) with one folder per model-parallel rank:
 * mp_rank_TT at pipeline size 1, mp_rank_TT_PPP otherwise, each with model_optim_rng.pt
 * (torch.save: torchzip.c's container, pickle.c's pickle) and, with the distributed
 * optimizer, distrib_optim.pt. The saved dict holds args (an argparse.Namespace),
 * checkpoint_version, iteration, model (model0, model1... per virtual chunk), optimizer,
 * opt_param_scheduler, rng_state.
 *
 * Import reads every rank's file at any TP x PP (x virtual stages, uneven first/last
 * stages), with megatron-core's key names (local or Transformer Engine layers) or the
 * older legacy model's nested ones, bf16/fp16/fp32, and reassembles each logical tensor
 * by the split rules of Megatron's parallel layers (params.h's split of each parameter:
 * column blocks, SwiGLU's halves, row blocks, vocabulary blocks, replicated). The
 * configuration comes from args (Megatron's flag names are mt's). With optimizer state
 * (Megatron's non-distributed mixed-precision or fp32 optimizer in model_optim_rng.pt), the
 * fp32 master weights become mt's weights and Adam's exp_avg and exp_avg_sq its moments;
 * the step is Adam's. distrib_optim.pt (the distributed optimizer's flat buffers) is not
 * read (no release's layout of it is specified): refused naming it, unless the optimizer
 * state is not asked for. The vocabulary keeps Megatron's padding
 * (args.padded_vocab_size, TP-dependent: mt's loader reads any). Every file and tensor is
 * checked: shapes against args, every shard present once, nothing left unread that
 * holds weights; errors name the file and the key (MT_EXIT_DATA), or the option
 * (MT_EXIT_USAGE) for a model mt does not implement (MoE, qk-layernorm, ...).
 *
 * Export writes megatron-core's local-layer key names (or, on request, the legacy model's
 * nested ones, which Megatron's --use-legacy-models loader needs) at a target TP x PP that
 * Megatron can load (every size it splits divides, else MT_EXIT_USAGE), the tensors in
 * the chosen dtype, args as a Namespace of plain values, iteration, checkpoint_version
 * 3.0, with only the pickle opcodes and globals that torch.load(weights_only=True)
 * accepts once Megatron has registered argparse.Namespace (its default loading). No
 * optimizer or RNG state is written: Megatron loads it with --no-load-optim
 * --no-load-rng (or --finetune), as it loads what its own converter writes. */
#ifndef MT_MEGATRON_H
#define MT_MEGATRON_H

#include <stdint.h>

#include "base/err.h"
#include "ckpt/model.h"
#include "ckpt/megatron_args.h"
#include "ckpt/pickle.h"

/* Read the Megatron checkpoint at `src` (its save directory, an iter_N or release
 * directory) and save an mt checkpoint into ckptdir (which must hold none yet). */
int mt_meg_import(const char *src, const char *ckptdir, const struct mt_meg_import_opts *o, struct mt_meg_report *r,
		  struct mt_err *err);

struct mt_meg_export_opts {
	int tp, pp;
	enum mt_pk_dtype dtype; /* F32, BF16 or F16 */
	int legacy_names;       /* 1: the legacy model's nested names (megatron.legacy.model.GPTModel, which
				 * Megatron-LM loads with --use-legacy-models); 0: megatron-core's */
	int torch_dist;         /* 1: --ckpt-format torch_dist (torchdist_write.c), else the legacy files */
};

/* Write the model as a Megatron checkpoint into outdir (which must not exist or be
 * empty), whole under outdir.tmp.<pid> and renamed into place. */
int mt_meg_export(const struct mt_model *m, const char *outdir, const struct mt_meg_export_opts *o,
		  struct mt_meg_report *r, struct mt_err *err);

#endif
