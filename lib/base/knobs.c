/* knobs.c: the table of MT_* environment variables and the ways of reading them (see
 * knobs.h). docs/environment.md is this table for people: change both together. */
#include "base/knobs.h"

#include <stdlib.h>
#include <string.h>

#ifdef MT_HAVE_CUDA
#include "../../kernels/attention.h"
#include "../../kernels/decode_linear.h"
#endif

static const struct mt_knob_info table[MT_KNOB_COUNT] = {
	[MT_KNOB_ATOMIC_KILL_AT] = { "MT_ATOMIC_KILL_AT", "0",
		"N > 0: the process kills itself (SIGKILL) at the Nth step of its atomic writes", 1 },
	[MT_KNOB_ATOMIC_KILL_LOG] = { "MT_ATOMIC_KILL_LOG", "unset",
		"set: each step of the atomic writes is listed on stderr (with MT_ATOMIC_KILL_AT)", 1 },
	[MT_KNOB_CUDA_WORKSPACE_MB] = { "MT_CUDA_WORKSPACE_MB", "32",
		"cuBLASLt's workspace in MiB (a value not above 0: the default)", 0 },
	[MT_KNOB_CUDA_MATMUL_TUNING] = { "MT_CUDA_MATMUL_TUNING", "unset",
		"FILE: time cuBLASLt's candidates of each product on its first run and keep the picks in FILE", 0 },
	[MT_KNOB_CUDA_MATMUL_TUNING_MS] = { "MT_CUDA_MATMUL_TUNING_MS", "150",
		"milliseconds each candidate of the matmul tuning runs (1 to 60000)", 0 },
	[MT_KNOB_CUDA_PROFILE] = { "MT_CUDA_PROFILE", "0",
		"above 0: time every kernel call with CUDA events and log the totals per kind at exit", 0 },
	[MT_KNOB_CUDA_FIRST_WRITE] = { "MT_CUDA_FIRST_WRITE", "1",
		"0: zero the whole gradient buffer each step, every weight-gradient product adding, "
		"instead of letting each linear weight's first product overwrite its gradient", 0 },
	[MT_KNOB_CUDA_EQUAL_CHUNKS] = { "MT_CUDA_EQUAL_CHUNKS", "1",
		"the output layer's row chunks: 1 evens them out when the last is under an eighth of the "
		"others, 0 never, 2 always", 0 },
	[MT_KNOB_TP_OVERLAP] = { "MT_TP_OVERLAP", "1",
		"0: the tensor-parallel collectives run in turn with the products instead of on a stream "
		"of their own beside them", 0 },
	[MT_KNOB_TP_PRIORITY] = { "MT_TP_PRIORITY", "1",
		"0: the tensor-parallel collectives' stream gets the default priority instead of the highest", 0 },
	[MT_KNOB_SP_KEEP] = { "MT_SP_KEEP", "1",
		"0: with sequence parallelism, the norms' outputs are gathered again in the backward pass "
		"(as Megatron does) instead of kept gathered from the forward pass", 0 },
	[MT_KNOB_NCCL_LIBRARY] = { "MT_NCCL_LIBRARY", "libnccl.so.2",
		"the NCCL library to load (a path, or a name the dynamic loader finds)", 0 },
	[MT_KNOB_PP_NCCL_PRECONNECT] = { "MT_PP_NCCL_PRECONNECT", "1",
		"0: the pipeline's NCCL connections are left to the first transfers instead of made "
		"all at once at the start", 0 },
	[MT_KNOB_ATTN_SM90] = { "MT_ATTN_SM90", "1",
		"0: the mma.sync attention kernels on Hopper instead of the sm_90a ones (wgmma, TMA)", 0 },
	[MT_KNOB_ATTN_PINGPONG] = { "MT_ATTN_PINGPONG", "1",
		"0: the sm_90a forward's consumer warpgroups issue as they come instead of in turns", 0 },
	[MT_KNOB_ATTN_PERSIST] = { "MT_ATTN_PERSIST", "1",
		"0: the sm_90a forward launches a block an item instead of a persistent grid", 0 },
	[MT_KNOB_ATTN_ORDER] = { "MT_ATTN_ORDER", "1",
		"0: the sm_90a kernels take the longest tiles of every head first instead of heads in groups", 0 },
	[MT_KNOB_ATTN_SM90_BWD] = { "MT_ATTN_SM90_BWD", "1",
		"0: the mma.sync attention backward on Hopper instead of the sm_90a one", 0 },
	[MT_KNOB_ATTN_BWD7] = { "MT_ATTN_BWD7", "0",
		"1: the sm_90a backward with seven products (dQ in a second kernel) instead of five", 0 },
	[MT_KNOB_ATTN_BWD_ALT] = { "MT_ATTN_BWD_ALT", "1",
		"0: at head size 128 each consumer warpgroup of the sm_90a backward makes half of every "
		"query tile's dQ instead of the two making whole tiles in turns", 0 },
	[MT_KNOB_ATTN_BWD_PP] = { "MT_ATTN_BWD_PP", "unset",
		"0 or 1: the sm_90a backward's warpgroups issue their products in turns off or on "
		"(unset or empty: on unless MT_ATTN_BWD_ALT's whole tiles are used)", 0 },
	[MT_KNOB_CUDA_GRAPHS] = { "MT_CUDA_GRAPHS", "1",
		"0: the CUDA inference engine launches every kernel from the host instead of replaying "
		"CUDA graphs", 0 },
	[MT_KNOB_DECODE_FUSED] = { "MT_DECODE_FUSED", "1",
		"0: decode steps run on the prefill's kernels instead of the fused decode kernels", 0 },
	[MT_KNOB_CUDA_PDL] = { "MT_CUDA_PDL", "1",
		"0: the fused decode kernels start without programmatic dependent launch "
		"(compute capability 9.0 and above)", 0 },
	[MT_KNOB_DECODE_CLUSTER] = { "MT_DECODE_CLUSTER", "0",
		"n > 0: blocks a cluster in the fused decode linears (1: none); 0: chosen from the "
		"layer's shape", 0 },
	[MT_KNOB_TEST_ASYNC_SAVE_LATE] = { "MT_TEST_ASYNC_SAVE_LATE", "0",
		"above 0: an asynchronous save's copy starts no sooner than the step loop waits for it, "
		"and where that was goes to stderr", 1 },
	[MT_KNOB_TEST_HANG_RANK] = { "MT_TEST_HANG_RANK", "-1",
		"r >= 0: rank r of mt-train stops answering at MT_TEST_HANG_STEP (the collectives' timeout)", 1 },
	[MT_KNOB_TEST_HANG_STEP] = { "MT_TEST_HANG_STEP", "-1",
		"the iteration at whose end MT_TEST_HANG_RANK stops answering", 1 },
	[MT_KNOB_TEST_HANG_BACKWARD] = { "MT_TEST_HANG_BACKWARD", "unset",
		"set: MT_TEST_HANG_RANK stops before its last micro-batch of MT_TEST_HANG_STEP instead", 1 },
	[MT_KNOB_TEST_HF_EXPORT_CORRUPT] = { "MT_TEST_HF_EXPORT_CORRUPT", "unset",
		"set: the Hugging Face export writes one wrong weight, to show that its check catches it", 1 },
};

const struct mt_knob_info *mt_knob_info(enum mt_knob k)
{
	return &table[k];
}

const char *mt_knob_str(enum mt_knob k)
{
	return getenv(table[k].name);
}

int mt_knob_set(enum mt_knob k)
{
	return mt_knob_str(k) != NULL;
}

int mt_knob_is(enum mt_knob k, const char *val)
{
	const char *e = mt_knob_str(k);

	return e && !strcmp(e, val);
}

int mt_knob_on(enum mt_knob k)
{
	return !mt_knob_is(k, "0");
}

long long mt_knob_int(enum mt_knob k)
{
	const char *e = mt_knob_str(k);

	return atoll(e ? e : table[k].def);
}

void mt_knobs_to_kernels(void)
{
#ifdef MT_HAVE_CUDA
	const char *pp = mt_knob_str(MT_KNOB_ATTN_BWD_PP);
	struct mt_attention_sm90_options o = {
		.sm90 = mt_knob_on(MT_KNOB_ATTN_SM90),
		.pingpong = mt_knob_on(MT_KNOB_ATTN_PINGPONG),
		.persist = mt_knob_on(MT_KNOB_ATTN_PERSIST),
		.order = mt_knob_on(MT_KNOB_ATTN_ORDER),
		.sm90_bwd = mt_knob_on(MT_KNOB_ATTN_SM90_BWD),
		.bwd7 = mt_knob_is(MT_KNOB_ATTN_BWD7, "1"),
		.bwd_alt = mt_knob_on(MT_KNOB_ATTN_BWD_ALT),
		.bwd_pp = pp && *pp ? strcmp(pp, "0") != 0 : -1,
	};

	mt_attention_sm90_set_options(&o);
	mt_decode_linear_set_cluster((int)mt_knob_int(MT_KNOB_DECODE_CLUSTER));
#endif
}

void mt_knobs_print(FILE *f)
{
	fprintf(f, "environment (docs/environment.md):\n");
	for (int k = 0; k < MT_KNOB_COUNT; k++) {
		const char *e = mt_knob_str((enum mt_knob)k);
		if (e)
			fprintf(f, "  %s=%s\n", table[k].name, e);
		else
			fprintf(f, "  %s (default: %s)\n", table[k].name, table[k].def);
		fprintf(f, "      %s%s\n", table[k].test ? "test hook: " : "", table[k].meaning);
	}
}
