/* ckpt.h: training checkpoints in HDF5, one directory per iteration.
 *
 * A checkpoint stores logical tensors (DESIGN "Checkpoints store logical tensors"):
 * one float32 dataset per parameter of the table (params.h), named by its logical name,
 * with its global shape and the slice the file holds, the AdamW moments beside them, and
 * what resuming needs besides tensors: iteration, consumed samples, the optimizer step,
 * the model config JSON, the training arguments, the LR scheduler and the RNG state (the
 * last three opaque to this module). Layout on disk (docs/formats.md "Checkpoints"):
 *
 *   DIR/iter_0000500/model.h5             the checkpoint of iteration 500
 *   DIR/latest                            "500\n": the newest complete checkpoint
 *   DIR/latest_checkpointed_iteration.txt "500": the same, for Megatron-LM users' scripts
 *
 * Saving is atomic: the iteration directory is written under a temporary name, fsynced
 * and renamed, and only then does `latest` move; a crash at any point leaves the previous
 * `latest` complete and loadable. Loading checks every tensor against the table.
 *
 * This module knows neither the model's arithmetic nor how the opaque JSON texts are
 * built (config.c, the trainer); it reads only p, n and total of a struct mt_params. It
 * writes one file holding whole tensors (tensor-parallel shards and their reassembly are
 * for mt-ckpt-reshard and later versions: the file name comes from mt_ckpt_file_path and
 * every dataset already carries global_shape and offset). HDF5's serial library is not
 * thread-safe: call these from one thread at a time. They replace HDF5's automatic error
 * printing, process-wide, with a handler that keeps the reason for the messages below
 * and prints nothing. Errors: MT_EXIT_DATA for a corrupt, foreign or incompatible
 * checkpoint (naming the file and the tensor), MT_EXIT_IO for the environment (missing
 * files, permissions, a full disk), MT_EXIT_USAGE for a caller's mistake. */
#ifndef MT_CKPT_H
#define MT_CKPT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "model/config.h"
#include "model/params.h"

#define MT_CKPT_FORMAT "mt-checkpoint"
#define MT_CKPT_FORMAT_VERSION 1
#define MT_CKPT_LATEST "latest"
#define MT_CKPT_MEGATRON_TRACKER "latest_checkpointed_iteration.txt"
/* Iterations, sample counts and optimizer steps above this (2^53) are refused as absurd. */
#define MT_CKPT_COUNTER_MAX ((int64_t)1 << 53)

/* What a checkpoint holds besides the tensors, as the trainer gives it to mt_ckpt_save.
 * config_json is required (mt_config_to_json); train_args_json and scheduler_json are
 * opaque JSON texts (NULL stores "{}"); rng is an opaque blob of rng_size bytes (NULL
 * with 0 for none). */
struct mt_ckpt_state {
	int64_t iteration;              /* >= 0; names the directory */
	int64_t consumed_train_samples;
	int64_t consumed_valid_samples;
	int64_t optimizer_step;         /* AdamW's step count; stored only with the moments */
	const char *config_json;
	const char *train_args_json;    /* lr schedule, batch sizes, data paths, seed, skipped steps... */
	const char *scheduler_json;
	const void *rng;
	size_t rng_size;
};

/* The same, read back by mt_ckpt_read_state; free with mt_ckpt_loaded_free. */
struct mt_ckpt_loaded {
	int64_t format_version;
	int64_t iteration;
	int64_t consumed_train_samples;
	int64_t consumed_valid_samples;
	int has_optimizer;              /* /optimizer is there: mt_ckpt_load can fill the moments */
	int64_t optimizer_step;         /* 0 without optimizer state */
	char *config_json;              /* never NULL after a successful read */
	char *train_args_json;
	char *scheduler_json;
	void *rng;                      /* NULL when rng_size is 0 */
	size_t rng_size;
};
void mt_ckpt_loaded_free(struct mt_ckpt_loaded *st);

/* "DIR/iter_0000500" (Megatron's 7-digit iteration; more digits past 9999999).
 * -1 when it does not fit in n bytes. */
int mt_ckpt_iter_dir(char *out, size_t n, const char *dir, int64_t iteration, struct mt_err *err);
/* The file of shard `shard` of `nshards` inside an iteration directory: "ITERDIR/model.h5"
 * when nshards is 1 (the only layout written and read today); room is kept for
 * "model-00001-of-00008.h5" (1-based, as Hugging Face names shards). */
int mt_ckpt_file_path(char *out, size_t n, const char *iterdir, int shard, int nshards,
		      struct mt_err *err);

/* Save a checkpoint of iteration s->iteration into DIR (created, with its parents, when
 * missing). weights, and the AdamW moments exp_avg and exp_avg_sq when both are given
 * (both NULL: weights only), are flat buffers of t->total floats laid out by the table.
 * Refuses (MT_EXIT_DATA, naming the buffer, tensor and index) when any value is NaN or
 * infinite: a diverged run never overwrites good checkpoints.
 * Protocol: write DIR/iter_N.tmp.<pid>/model.h5, fsync file and directory, rename the
 * directory to DIR/iter_N (an existing DIR/iter_N is swapped out atomically and then
 * removed), fsync DIR, then write DIR/latest and DIR/latest_checkpointed_iteration.txt
 * atomically (atomic.h). Then temporaries left by killed saves of iterations up to N are
 * removed, and when keep_last > 0, complete iteration directories older than N beyond the
 * newest keep_last (the new one included) are deleted, oldest first; directories of
 * iterations above N (a run that was rolled back) are never touched. Should removing an
 * old one fail, -1 says so, but the new checkpoint is complete and `latest` names it. */
int mt_ckpt_save(const char *dir, const struct mt_params *t, const float *weights,
		 const float *exp_avg, const float *exp_avg_sq, const struct mt_ckpt_state *s,
		 int keep_last, struct mt_err *err);

/* The iteration DIR/latest names, else DIR/latest_checkpointed_iteration.txt (Megatron's);
 * *iteration = -1 when DIR does not exist or holds neither (nothing to resume: start
 * fresh). -1 for an unreadable or garbled marker. */
int mt_ckpt_latest(const char *dir, int64_t *iteration, struct mt_err *err);

/* Resolve what to load from a user's path: a checkpoint directory DIR (following its
 * latest marker as above), an iteration directory DIR/iter_N, or an .h5 file. out gets
 * the iteration directory (the file itself for an .h5 file not named model.h5).
 * iteration (may be NULL) gets N: from the marker, from the directory's name, else from
 * the file's iteration attribute. The readers below take any of these forms too (a
 * checkpoint directory meaning the iteration its marker names at that moment): resolve
 * once when several calls must see the same iteration while a trainer may be saving. */
int mt_ckpt_resolve(const char *path, char *out, size_t n, int64_t *iteration, struct mt_err *err);

/* Where to fall back to: for a checkpoint directory DIR (not an iter_N directory, not one
 * holding model.h5 itself), the iterations a reader should try in turn: the one its
 * latest marker names, then every complete iteration below it, newest first; with a
 * garbled marker, or none, every complete iteration newest first, note (may be NULL)
 * saying what was wrong with the marker. *n is 0 (nothing to choose: read path as it
 * is) for anything else. *iters is malloc'ed. A reader that fails on one (any error)
 * warns, naming it and why, and tries the next (mt_model_open, mt-train --load). */
int mt_ckpt_candidates(const char *path, int64_t **iters, size_t *n, char *note, size_t notecap, struct mt_err *err);
/* A warning that -q does not silence: a checkpoint skipped by a fall-back (or recorded as
 * failed) changes what a run does, so it is always said. */
void mt_ckpt_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Read the state without the tensors (mt-eval and mt-generate build the model from
 * config_json). Checks the format name and version. */
int mt_ckpt_read_state(const char *iterdir, struct mt_ckpt_loaded *st, struct mt_err *err);

/* Load tensors into flat buffers of t->total floats laid out by the table. Every
 * parameter of the table must be in the file with its global shape, whole (the error
 * names the tensor and both shapes); a tensor in the file that the table lacks is an
 * error too unless flags has MT_CKPT_ALLOW_EXTRA. exp_avg and exp_avg_sq may be NULL
 * (not read: Megatron's --no-load-optim); asking for them from a checkpoint without
 * optimizer state is an error (mt_ckpt_read_state's has_optimizer tells beforehand).
 * Stored floats of another width are converted. */
#define MT_CKPT_ALLOW_EXTRA 1u
int mt_ckpt_load(const char *iterdir, const struct mt_params *t, float *weights, float *exp_avg,
		 float *exp_avg_sq, unsigned flags, struct mt_err *err);

/* Describe a checkpoint (mt-ckpt-reshard inspect). Text: one "key<TAB>value" line per
 * attribute (file, format, format_version, iteration, consumed_train_samples,
 * consumed_valid_samples, optimizer_step or "none", rng_bytes, then config, train_args
 * and scheduler with their line breaks folded into spaces), then one line per dataset in
 * creation order: "tensor<TAB>model/NAME<TAB>float32<TAB>[r, c]<TAB>global [r, c]<TAB>
 * offset [0, 0]" (the last two only where the dataset has them). JSON: one object with
 * the same keys, the JSON texts as JSON values, and "tensors": [{name, dtype, shape,
 * global_shape, offset}]. */
int mt_ckpt_inspect(const char *iterdir, int json, FILE *out, struct mt_err *err);

/* Check a whole checkpoint (mt-ckpt-reshard verify): its structure (no links, external
 * storage or virtual sources outside its directory), its attributes against their
 * checksum, and every tensor (of a sharded checkpoint: every part) read back in full
 * against its XXH3-64 and for NaN and infinities. One "ok FILE: ..." line on out, else
 * -1 (MT_EXIT_DATA naming the tensor). A checkpoint written before checksums passes
 * with its structure, shapes and values checked, and says so. */
int mt_ckpt_verify(const char *path, FILE *out, struct mt_err *err);

/* Before anything is sized from a checkpoint's config: the config c read from it must
 * fit what the file stores (num-layers no more than its model tensors, the parameter
 * count within the floats stored, those bounded by the bytes on disk). *stored_floats
 * (may be NULL) gets the model group's elements, for the caller's table total. */
int mt_ckpt_check_config(const char *iterdir, const struct mt_config *c, double *stored_floats, struct mt_err *err);

/* The complete checkpoints of DIR: the iterations of its directories named as
 * mt_ckpt_iter_dir names them (a save's temporary "iter_N.tmp.<pid>" is not one, nor is
 * a user's "iter_5"), ascending, in a malloc'ed array (*iters, NULL when *n is 0).
 * mt-eval --watch evaluates these. */
int mt_ckpt_list(const char *dir, int64_t **iters, size_t *n, struct mt_err *err);

/* ---- sharded checkpoints (docs/formats.md "Sharded checkpoints") ----------------------------
 * With many ranks, every rank writes the part it owns into the iteration's temporary
 * directory at once (mt_ckpt_part_write: model-tpTT-ppPPP-dpDDDD.h5, its shard of each
 * tensor with the logical rectangles it holds), then one rank writes the index
 * (mt_ckpt_index_write: model.h5, the state attributes and one HDF5 virtual dataset per
 * logical tensor, stitched from the parts by relative file names) and commits the
 * directory (mt_ckpt_commit). Readers open model.h5 as before and see logical tensors;
 * mt_ckpt_load_part reads one rank's slices of them by hyperslab. txn.h strings these
 * steps into one transaction, with the agreement between the processes around them. */

/* What one rank writes: rows [p0, p1) of its table t (shard shapes, gshape, split, lidx,
 * tp_rank), skipping tied copies and, on tensor-parallel ranks other than 0, replicated
 * parameters. w, m, v hold the floats [base, base + ...) of the flat buffer laid out by
 * t (m and v both NULL: no optimizer state), at least up to the end of row p1 - 1. */
struct mt_ckpt_part {
	const struct mt_params *t;
	int p0, p1;
	int64_t base;
	const float *w, *m, *v;
	int rank, tp_rank, pp_rank, dp_rank;  /* who writes: the file's name and attributes */
	int world, tp, pp, dp;
};

/* "model-tp01-pp002-dp0003.h5": the part of those coordinates. */
int mt_ckpt_part_name(char *out, size_t n, int tp_rank, int pp_rank, int dp_rank, struct mt_err *err);
/* Create DIR (with its parents) and the empty temporary iteration directory
 * DIR/iter_N.tmp.<tag> into out (a leftover of that name removed first). Every rank of a
 * save must use the same tag (the writing rank's pid, broadcast). */
int mt_ckpt_tmpdir(char *out, size_t n, const char *dir, int64_t iteration, long tag, struct mt_err *err);
/* The name mt_ckpt_tmpdir gives that directory, without making it (the ranks that are
 * told the tag). */
int mt_ckpt_tmpdir_name(char *out, size_t n, const char *dir, int64_t iteration, long tag, struct mt_err *err);
/* Remove a temporary iteration directory of a save that failed on some rank. */
void mt_ckpt_abandon(const char *tmpdir);
/* Refuse (MT_EXIT_DATA) a part holding a NaN or an infinity: a diverged run never
 * overwrites good checkpoints. what names the checkpoint in the message. */
int mt_ckpt_part_check(const struct mt_ckpt_part *pt, const char *what, struct mt_err *err);
/* Write pt's part into tmpdir, then fsync it. */
int mt_ckpt_part_write(const char *tmpdir, const struct mt_ckpt_part *pt, int64_t iteration, struct mt_err *err);
/* After every part is durable: read what each of the nshards parts (names in tmpdir)
 * holds, check that they tile every logical tensor of lt exactly once (MT_EXIT_DATA
 * naming the tensor otherwise), and write and fsync tmpdir/model.h5. */
int mt_ckpt_index_write(const char *tmpdir, const struct mt_params *lt, const struct mt_ckpt_state *s,
			char *const *shards, int nshards, struct mt_err *err);
/* The end of every save (mt_ckpt_save's protocol from the directory's fsync on): rename
 * tmpdir to DIR/iter_N, fsync DIR, move the markers, prune and keep the last keep_last.
 * The temporary directory is removed when it cannot be installed. */
int mt_ckpt_commit(const char *dir, const char *tmpdir, int64_t iteration, int keep_last, struct mt_err *err);
/* Read the slices of local's rows (a rank's table, any layout; tp_rank from local) out of
 * the logical tensors of a checkpoint whose logical table is ct, into w, m and v laid
 * out by local: weights for every row, the moments (both or neither) for rows [m0, m1)
 * only (ZeRO-1's share). Every tensor of ct must be there with its shape, and no other
 * unless MT_CKPT_ALLOW_EXTRA; rows of local's padded vocabulary past ct's read as 0. */
int mt_ckpt_load_part(const char *iterdir, const struct mt_params *ct, const struct mt_params *local, float *w,
		      float *m, float *v, int m0, int m1, unsigned flags, struct mt_err *err);

#endif
