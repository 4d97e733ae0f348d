/* knobs.h: the one table of the MT_* environment variables mt reads.
 *
 * Every variable has a row: its name, its default (what the reader does when it is not
 * set), what it does, and whether it is a test hook (tests only: never set in a real run).
 * Readers name the row (mt_knob_on(MT_KNOB_TP_OVERLAP)) instead of calling getenv, so the
 * table is the list of every knob, `--version -v` prints it and docs/environment.md
 * documents it. Each reader keeps its own reading of the value, one of the functions
 * below. This file does not hold the launchers' variables (SLURM_*, PMI_*, OMPI_*, read
 * by lib/parallel/dist.c), nor the variables of the scripts and templates. */
#ifndef MT_KNOBS_H
#define MT_KNOBS_H

#include <stdio.h>

enum mt_knob {
	/* lib/base/atomic.c */
	MT_KNOB_ATOMIC_KILL_AT,
	MT_KNOB_ATOMIC_KILL_LOG,
	/* the CUDA backend (lib/backend/) */
	MT_KNOB_CUDA_WORKSPACE_MB,
	MT_KNOB_CUDA_MATMUL_TUNING,
	MT_KNOB_CUDA_MATMUL_TUNING_MS,
	MT_KNOB_CUDA_PROFILE,
	MT_KNOB_CUDA_FIRST_WRITE,
	MT_KNOB_CUDA_EQUAL_CHUNKS,
	MT_KNOB_TP_OVERLAP,
	MT_KNOB_TP_PRIORITY,
	MT_KNOB_SP_KEEP,
	/* NCCL (lib/parallel/ncclcomm.c) */
	MT_KNOB_NCCL_LIBRARY,
	MT_KNOB_PP_NCCL_PRECONNECT,
	/* the sm_90a attention kernels (kernels/attention_sm90.cu) */
	MT_KNOB_ATTN_SM90,
	MT_KNOB_ATTN_PINGPONG,
	MT_KNOB_ATTN_PERSIST,
	MT_KNOB_ATTN_ORDER,
	MT_KNOB_ATTN_SM90_BWD,
	MT_KNOB_ATTN_BWD7,
	MT_KNOB_ATTN_BWD_ALT,
	MT_KNOB_ATTN_BWD_PP,
	/* the CUDA inference engine (lib/infer/infer_cuda.c, kernels/decode_linear.cu) */
	MT_KNOB_CUDA_GRAPHS,
	MT_KNOB_DECODE_FUSED,
	MT_KNOB_CUDA_PDL,
	MT_KNOB_DECODE_CLUSTER,
	/* test hooks of mt-train and mt-ckpt */
	MT_KNOB_TEST_ASYNC_SAVE_LATE,
	MT_KNOB_TEST_HANG_RANK,
	MT_KNOB_TEST_HANG_STEP,
	MT_KNOB_TEST_HANG_BACKWARD,
	MT_KNOB_TEST_HF_EXPORT_CORRUPT,
	MT_KNOB_COUNT
};

struct mt_knob_info {
	const char *name;    /* "MT_CUDA_WORKSPACE_MB" */
	const char *def;     /* the default, as text: what the reader does when it is unset */
	const char *meaning; /* one line, lowercase */
	int test;            /* 1: a test hook, never set in a real run */
};

/* The row of knob k. */
const struct mt_knob_info *mt_knob_info(enum mt_knob k);

/* The ways the readers read a value; each is what one reader did with getenv before. */
/* The value, NULL when unset (getenv's answer). */
const char *mt_knob_str(enum mt_knob k);
/* Whether it is set at all (an empty value counts). */
int mt_knob_set(enum mt_knob k);
/* Whether it is set to exactly val. */
int mt_knob_is(enum mt_knob k, const char *val);
/* A switch on by default: 0 only when set to exactly "0". */
int mt_knob_on(enum mt_knob k);
/* The value as atoll reads it when set (an empty value is 0), else the row's default as a
 * number. */
long long mt_knob_int(enum mt_knob k);

/* Hand the kernels their knobs (MT_ATTN_*, MT_DECODE_CLUSTER): kernels/ reads no
 * environment, so each CUDA entry point (the CUDA backend's and the inference engine's
 * set-up) calls this once before its first launch. Nothing without CUDA. */
void mt_knobs_to_kernels(void);

/* The table for `--version -v`: a line a knob, "NAME=value" where set, else
 * "NAME (default: def)", then its meaning; test hooks marked. */
void mt_knobs_print(FILE *f);

#endif
