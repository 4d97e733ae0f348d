/* torchdist.h: Megatron-LM's default checkpoint format (`--ckpt-format torch_dist`), an
 * iter_N folder written by PyTorch's distributed checkpoint (DCP), read into mt
 * checkpoints (mt-ckpt-reshard import --format megatron finds it by its metadata.json).
 *
 * The folder holds metadata.json ({"sharded_backend": "torch_dist",
 * "sharded_backend_version": 1, ...}), `.metadata` (DCP's Metadata, a protocol-4 pickle read
 * through pickle.c's allow-list: each key's global shape, dtype and chunks, each chunk's
 * file, offset and length), `__R_K.distcp` files in which every tensor chunk is a whole
 * torch.save archive at [offset, offset + length) (torchzip.h's mt_tz_open_at), and the
 * common state (args, iteration, the optimizer's non-tensor parts): `common.pt`
 * (Megatron-core up to 0.12 and a while after) or the DCP byte entry `common_state/shard_0_1`
 * (Megatron-LM from 2026-07). Every tensor is stored whole-model: the decoder's layers
 * stacked on a leading axis (`decoder.layers.<name>`, one chunk a layer and tensor-parallel
 * rank, SwiGLU's fc1 as [gates; ups] in two chunks a rank), so the reader assembles each
 * global tensor from its chunks, checking that they tile it exactly, and the import cuts it
 * into mt's parameters. Transformer Engine's norm names (`linear_qkv.layer_norm_weight`)
 * are what Megatron writes even with local layers. With the plain (non-distributed)
 * optimizer, `optimizer.state.{exp_avg,exp_avg_sq,fp32_param}.<key>` share the model's
 * layout and become mt's moments and weights. The distributed optimizer's layouts
 * (`optimizer.param_state_sharding_type`, `content_metadata.distrib_optim_sharding_type`,
 * `optimizer.distributed.*` keys, nd-reformulated shapes) are refused unless the optimizer
 * state is not asked for, as is anything DCP can write that Megatron does not (stream
 * transforms, chunks that are not torch.save archives).
 *
 * Not here: writing torch_dist (export writes the legacy format, megatron_export.c); the
 * reading of Megatron's args into mt's configuration (megatron.c, shared through the two
 * functions declared at the end). Errors name the file (MT_EXIT_DATA), and nothing is
 * written before every tensor has been read. */
#ifndef MT_TORCHDIST_H
#define MT_TORCHDIST_H

#include <stdint.h>

#include "base/err.h"
#include "ckpt/megatron_args.h"
#include "ckpt/pickle.h"
#include "ckpt/torchzip.h"

/* One chunk of a tensor: its place in the global tensor and its bytes. */
struct mt_td_chunk {
	int64_t off[MT_PK_MAX_DIMS], size[MT_PK_MAX_DIMS];
	const char *file;            /* relative to the folder (a plain file name) */
	uint64_t at, length;
};

/* One key of the checkpoint: a tensor (global shape, dtype, chunks) or a byte entry (one
 * chunk, ndim 0). */
struct mt_td_item {
	const char *key;
	int bytes;
	int nd_reformulated;         /* Megatron's flattened layout of the distributed optimizer */
	enum mt_pk_dtype dtype;
	int ndim;
	int64_t shape[MT_PK_MAX_DIMS];
	struct mt_td_chunk *c;
	int nc;
};

struct mt_td {
	char *dir;
	struct mt_pk_arena *arena;   /* .metadata's values (the keys and file names point into it) */
	struct mt_td_item *it;
	int n;
	int nfiles;                  /* distinct .distcp files */
	int common_pt;               /* 1: the common state came from common.pt */
	char *common_path;           /* for messages: "DIR/common.pt" or "DIR/__0_0.distcp (bytes a..b)" */
	struct mt_tz cz[2];          /* the common state's archive and its pickle; [1]: the archive */
	struct mt_pk_arena *carena[2]; /* inside a pickled io.BytesIO, as DCP's own planner saves bytes */
	struct mt_pk *common;        /* a dict */
};

/* 1 when dir holds a metadata.json (a distributed checkpoint). */
int mt_td_detect(const char *dir);
/* Check metadata.json, read .metadata and the common state (crc: verify the common state's
 * CRC-32s). */
int mt_td_open(struct mt_td *td, const char *dir, int crc, struct mt_err *err);
void mt_td_close(struct mt_td *td);
const struct mt_td_item *mt_td_find(const struct mt_td *td, const char *key);
/* A tensor item's whole global tensor as fp32 (out holds the product of its shape): every
 * chunk's archive opened, checked (PK\x03\x04, a tensor of the chunk's shape, a floating
 * type), copied into place; the chunks must tile the tensor exactly. crc: verify every
 * member's CRC-32. */
int mt_td_read(const struct mt_td *td, const struct mt_td_item *it, int crc, float *out, struct mt_err *err);

/* Import the torch_dist folder dir (src as the user named it; it: the tracker's iteration,
 * or -1) into ckptdir, as mt_meg_import does for the legacy format. */
int mt_td_import(const char *src, const char *dir, int64_t it, const char *ckptdir, const struct mt_meg_import_opts *o,
		 struct mt_meg_report *r, struct mt_err *err);

#endif
