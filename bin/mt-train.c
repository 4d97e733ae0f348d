/* mt-train: train a GPT on GPUs (CUDA backend) or CPU ranks with HDF5 checkpoints: data,
 * tensor and pipeline parallelism behind Megatron's flags (lib/train does the work). */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/dist.h"
#include "train/batchsteps.h"
#include "train/estimate.h"
#include "base/knobs.h"
#include "base/log.h"
#include "train/train.h"
#include "train/trainargs.h"
#include "dataopts.h"
#include "megatronopts.h"
#include "tool.h"

static const char *const synopsis[] = {
	"[--config FILE] --num-layers N --hidden-size H --num-attention-heads A --seq-length L (--data-path PATH... | --mock-data) --micro-batch-size B --global-batch-size G (--train-iters N | --train-samples N) [--lr LR] [--save DIR] [--load DIR]",
	NULL,
};

static const struct mt_tool_info info = {
	.name = "mt-train",
	.summary = "train a GPT on a GPU or the CPU with HDF5 checkpoints",
	.synopsis = synopsis,
	.description =
		"flags are Megatron-LM's; --config FILE reads flags from a file first (share/configs/),\n"
		"and flags on the command line override them",
	.doc = "docs/mt-train.md",
};

enum {
	O_CONFIG = 256, O_LAYERS, O_HIDDEN, O_HEADS, O_FFN, O_MAXPOS, O_DIVISIBLE, O_POSEMB, O_ROTARY, O_NORM,
	O_NORM_EPS, O_SWIGLU, O_NOBIAS, O_UNTIE, O_GQA, O_GROUPS, O_KV, O_INIT_STD, O_ATT_DROP, O_HID_DROP,
	O_MBS, O_LR, O_MIN_LR, O_BETA1, O_BETA2, O_EPS, O_WD, O_CLIP, O_DECAY_STYLE, O_WARMUP_ITERS,
	O_WARMUP_FRAC, O_DECAY_ITERS, O_WSD_ITERS, O_WSD_STYLE, O_LOG_INTERVAL, O_LOG_JSON, O_SAVE,
	O_SAVE_INTERVAL, O_LOAD, O_KEEP, O_ASYNC_SAVE, O_FINETUNE, O_NO_LOAD_OPTIM, O_NO_LOAD_RNG, O_NO_SAVE_OPTIM,
	O_USE_CKPT_ARGS, O_EXIT_INTERVAL, O_EXIT_MINS, O_MOCK, O_VOCAB_SIZE, O_MAX_SKIP,
	O_NAN_CHECK, O_NO_NAN_CHECK,
	O_DEVICE, O_TP, O_PP, O_BF16, O_FP16, O_LOSS_SCALE, O_INIT_LOSS_SCALE, O_MIN_LOSS_SCALE, O_LOSS_WINDOW,
	O_HYSTERESIS, O_DETERMINISTIC, O_RECOMPUTE,
	O_SEQ_PARALLEL, O_LABEL_SMOOTHING, O_RECOMPUTE_ACT, O_TP_COMM, O_PP_COMM,
	O_DIST_OPT, O_DIST_TIMEOUT, O_DIST_TIMEOUT_S, O_DRY_RUN, O_WORLD, O_GPUS_PER_NODE, O_RAMPUP,
	O_WARMUP_SAMPLES, O_DECAY_SAMPLES, O_BUCKET,
	O_PP_SCHEDULE, O_VP_LAYERS, O_VP_STAGES, O_VP_GROUP, O_PP_FIRST, O_PP_LAST,
	O_TB_DIR, O_TB_INTERVAL, O_TB_QUEUE, O_TB_TIMERS, O_TB_VALID_PPL, O_TB_MEMORY, O_STEP_BATCH,
};

static const struct mt_option opts[] = {
	{ "config", 0, MT_ARG_REQUIRED, O_CONFIG, "FILE", "read flags from FILE first (share/configs/*.conf)" },
	{ "num-layers", 0, MT_ARG_REQUIRED, O_LAYERS, "N", "transformer layers" },
	{ "hidden-size", 0, MT_ARG_REQUIRED, O_HIDDEN, "H", "hidden size" },
	{ "num-attention-heads", 0, MT_ARG_REQUIRED, O_HEADS, "A", "attention heads" },
	{ "ffn-hidden-size", 0, MT_ARG_REQUIRED, O_FFN, "F", "MLP size (default 4H; 2/3 of that with SwiGLU)" },
	{ "max-position-embeddings", 0, MT_ARG_REQUIRED, O_MAXPOS, "N", "learned positions (default: seq-length)" },
	{ "make-vocab-size-divisible-by", 0, MT_ARG_REQUIRED, O_DIVISIBLE, "N", "pad the vocabulary (default 128)" },
	{ "position-embedding-type", 0, MT_ARG_REQUIRED, O_POSEMB, "TYPE", "learned_absolute (default) or rope" },
	{ "rotary-base", 0, MT_ARG_REQUIRED, O_ROTARY, "B", "rotary base (default 10000)" },
	{ "normalization", 0, MT_ARG_REQUIRED, O_NORM, "NORM", "LayerNorm (default) or RMSNorm" },
	{ "norm-epsilon", 0, MT_ARG_REQUIRED, O_NORM_EPS, "EPS", "default 1e-5" },
	{ "swiglu", 0, MT_ARG_NONE, O_SWIGLU, NULL, "SwiGLU MLP instead of GELU" },
	{ "disable-bias-linear", 0, MT_ARG_NONE, O_NOBIAS, NULL, "no biases in linear layers" },
	{ "untie-embeddings-and-output-weights", 0, MT_ARG_NONE, O_UNTIE, NULL, "a separate output layer" },
	{ "group-query-attention", 0, MT_ARG_NONE, O_GQA, NULL, "grouped-query attention (with --num-query-groups)" },
	{ "num-query-groups", 0, MT_ARG_REQUIRED, O_GROUPS, "N", "key/value heads" },
	{ "kv-channels", 0, MT_ARG_REQUIRED, O_KV, "N", "head size (default hidden / heads)" },
	{ "init-method-std", 0, MT_ARG_REQUIRED, O_INIT_STD, "S", "initialization std (default 0.02)" },
	{ "attention-dropout", 0, MT_ARG_REQUIRED, O_ATT_DROP, "P", "accepted; only 0 is implemented" },
	{ "hidden-dropout", 0, MT_ARG_REQUIRED, O_HID_DROP, "P", "accepted; only 0 is implemented" },
	{ "vocab-size", 0, MT_ARG_REQUIRED, O_VOCAB_SIZE, "N", "vocabulary size without a tokenizer (NullTokenizer, mock data)" },
	{ "micro-batch-size", 0, MT_ARG_REQUIRED, O_MBS, "B", "samples per forward/backward pass" },
	{ "lr", 0, MT_ARG_REQUIRED, O_LR, "LR", "peak learning rate" },
	{ "min-lr", 0, MT_ARG_REQUIRED, O_MIN_LR, "LR", "final learning rate (default 0)" },
	{ "adam-beta1", 0, MT_ARG_REQUIRED, O_BETA1, "B", "default 0.9" },
	{ "adam-beta2", 0, MT_ARG_REQUIRED, O_BETA2, "B", "default 0.999" },
	{ "adam-eps", 0, MT_ARG_REQUIRED, O_EPS, "E", "default 1e-8" },
	{ "weight-decay", 0, MT_ARG_REQUIRED, O_WD, "W", "AdamW weight decay (default 0.01; none on biases and norms)" },
	{ "clip-grad", 0, MT_ARG_REQUIRED, O_CLIP, "C", "clip the global gradient norm (default 1.0; 0 for none)" },
	{ "lr-decay-style", 0, MT_ARG_REQUIRED, O_DECAY_STYLE, "S", "constant, linear (default), cosine, inverse-square-root, WSD" },
	{ "lr-warmup-iters", 0, MT_ARG_REQUIRED, O_WARMUP_ITERS, "N", "linear warmup iterations" },
	{ "lr-warmup-fraction", 0, MT_ARG_REQUIRED, O_WARMUP_FRAC, "F", "warmup as a fraction of the decay" },
	{ "lr-decay-iters", 0, MT_ARG_REQUIRED, O_DECAY_ITERS, "N", "decay iterations (default: train iterations)" },
	{ "lr-wsd-decay-iters", 0, MT_ARG_REQUIRED, O_WSD_ITERS, "N", "WSD's annealing iterations" },
	{ "lr-wsd-decay-style", 0, MT_ARG_REQUIRED, O_WSD_STYLE, "S", "linear, cosine, exponential (default), minus_sqrt" },
	{ "log-interval", 0, MT_ARG_REQUIRED, O_LOG_INTERVAL, "N", "a log line every N iterations (default 100)" },
	{ "log-json", 0, MT_ARG_REQUIRED, O_LOG_JSON, "FILE", "append the log lines to FILE as JSON lines" },
	{ "tensorboard-dir", 0, MT_ARG_REQUIRED, O_TB_DIR, "DIR", "write TensorBoard event files into DIR (Megatron's tags)" },
	{ "tensorboard-log-interval", 0, MT_ARG_REQUIRED, O_TB_INTERVAL, "N", "TensorBoard scalars every N iterations (default 1)" },
	{ "tensorboard-queue-size", 0, MT_ARG_REQUIRED, O_TB_QUEUE, "N", "events held in memory before a write (default 1000)" },
	{ "log-timers-to-tensorboard", 0, MT_ARG_NONE, O_TB_TIMERS, NULL, "also iteration-time, throughput and Megatron's phase timers (forward-backward-time, ...)" },
	{ "log-validation-ppl-to-tensorboard", 0, MT_ARG_NONE, O_TB_VALID_PPL, NULL, "also the validation perplexity" },
	{ "log-memory-to-tensorboard", 0, MT_ARG_NONE, O_TB_MEMORY, NULL, "also the memory held" },
	{ "save", 0, MT_ARG_REQUIRED, O_SAVE, "DIR", "checkpoint directory" },
	{ "save-interval", 0, MT_ARG_REQUIRED, O_SAVE_INTERVAL, "N", "save every N iterations (and at the end)" },
	{ "load", 0, MT_ARG_REQUIRED, O_LOAD, "DIR", "resume from DIR's latest checkpoint (or DIR/iter_N)" },
	{ "keep-last", 0, MT_ARG_REQUIRED, O_KEEP, "N", "keep only the newest N checkpoints" },
	{ "async-save", 0, MT_ARG_NONE, O_ASYNC_SAVE, NULL, "write checkpoints in the background while training goes on" },
	{ "finetune", 0, MT_ARG_NONE, O_FINETUNE, NULL, "with --load: the weights alone, training from iteration 0 with fresh optimizer state and schedule (Megatron's)" },
	{ "no-load-optim", 0, MT_ARG_NONE, O_NO_LOAD_OPTIM, NULL, "with --load: not the optimizer state (AdamW moments) nor the learning-rate schedule" },
	{ "no-load-rng", 0, MT_ARG_NONE, O_NO_LOAD_RNG, NULL, "accepted: mt's checkpoints hold no random-generator state (samples and initialization are seeded)" },
	{ "no-save-optim", 0, MT_ARG_NONE, O_NO_SAVE_OPTIM, NULL, "checkpoints hold the weights only, not the optimizer state" },
	{ "use-checkpoint-args", 0, MT_ARG_NONE, O_USE_CKPT_ARGS, NULL, "with --load: the model's flags from the checkpoint (those not given here; its normalization, activation, position embedding, biases and tying always)" },
	{ "exit-interval", 0, MT_ARG_REQUIRED, O_EXIT_INTERVAL, "N", "save and stop at a multiple of N iterations" },
	{ "exit-duration-in-mins", 0, MT_ARG_REQUIRED, O_EXIT_MINS, "M", "save and stop after M minutes" },
	{ "mock-data", 0, MT_ARG_NONE, O_MOCK, NULL, "synthetic tokens (give --vocab-size)" },
	{ "max-skipped-steps", 0, MT_ARG_REQUIRED, O_MAX_SKIP, "N", "stop after N non-finite steps in a row (default 10)" },
	{ "check-for-nan-in-loss-and-grad", 0, MT_ARG_NONE, O_NAN_CHECK, NULL, "a non-finite loss stops the run (the default)" },
	{ "no-check-for-nan-in-loss-and-grad", 0, MT_ARG_NONE, O_NO_NAN_CHECK, NULL,
	  "skip steps with a non-finite loss instead (up to --max-skipped-steps)" },
	{ "device", 0, MT_ARG_REQUIRED, O_DEVICE, "DEV", "cuda or cpu (default: cuda when a GPU is visible)" },
	{ "bf16", 0, MT_ARG_NONE, O_BF16, NULL, "cuda: bf16 weights and activations, fp32 master weights and AdamW state" },
	{ "fp16", 0, MT_ARG_NONE, O_FP16, NULL, "cuda: fp16 weights and activations with loss scaling" },
	{ "loss-scale", 0, MT_ARG_REQUIRED, O_LOSS_SCALE, "S", "fp16: a constant loss scale (default: dynamic)" },
	{ "initial-loss-scale", 0, MT_ARG_REQUIRED, O_INIT_LOSS_SCALE, "S", "fp16 dynamic scaling: first scale (default 2^32)" },
	{ "min-loss-scale", 0, MT_ARG_REQUIRED, O_MIN_LOSS_SCALE, "S", "fp16 dynamic scaling: lowest scale (default 1)" },
	{ "loss-scale-window", 0, MT_ARG_REQUIRED, O_LOSS_WINDOW, "N", "fp16 dynamic scaling: good steps before doubling (default 1000)" },
	{ "hysteresis", 0, MT_ARG_REQUIRED, O_HYSTERESIS, "N", "fp16 dynamic scaling: overflows before halving (default 2)" },
	{ "deterministic", 0, MT_ARG_NONE, O_DETERMINISTIC, NULL, "bit-identical runs (on Hopper, the attention backward's query gradients summed in a fixed order)" },
	{ "recompute-granularity", 0, MT_ARG_REQUIRED, O_RECOMPUTE, "G", "selective (attention's core) or full (each layer) in the backward pass" },
	{ "recompute-activations", 0, MT_ARG_NONE, O_RECOMPUTE_ACT, NULL, "selective recomputation (Megatron's shorthand for --recompute-granularity selective)" },
	{ "tensor-model-parallel-size", 0, MT_ARG_REQUIRED, O_TP, "N", "split every layer over N ranks as Megatron does (cpu; default 1)" },
	{ "sequence-parallel", 0, MT_ARG_NONE, O_SEQ_PARALLEL, NULL, "norms and residuals on 1/N of the sequence under tensor parallelism" },
	{ "tensor-parallel-comm", 0, MT_ARG_REQUIRED, O_TP_COMM, "T", "cuda: auto (default: nccl when each rank has its own GPU), nccl, or host (MPI through host memory; ranks may share a GPU)" },
	{ "pipeline-parallel-comm", 0, MT_ARG_REQUIRED, O_PP_COMM, "T", "cuda: the transfers between stages: auto (default: nccl send/recv when each stage has its own GPU), nccl, or host (MPI through host memory; stages may share a GPU)" },
	{ "label-smoothing", 0, MT_ARG_REQUIRED, O_LABEL_SMOOTHING, "A", "cross-entropy label smoothing in [0, 1) (cpu; default 0)" },
	{ "pipeline-model-parallel-size", 0, MT_ARG_REQUIRED, O_PP, "N", "split the layers over N pipeline stages (cpu; default 1)" },
	{ "pipeline-schedule", 0, MT_ARG_REQUIRED, O_PP_SCHEDULE, "S", "1f1b, interleaved or zb-h1 (default: interleaved with virtual stages, else 1f1b)" },
	{ "num-layers-per-virtual-pipeline-stage", 0, MT_ARG_REQUIRED, O_VP_LAYERS, "N", "interleaving: model chunks of N layers, several a stage" },
	{ "num-virtual-stages-per-pipeline-rank", 0, MT_ARG_REQUIRED, O_VP_STAGES, "V", "interleaving: V model chunks a stage" },
	{ "microbatch-group-size-per-virtual-pipeline-stage", 0, MT_ARG_REQUIRED, O_VP_GROUP, "G", "interleaving: micro-batches a group (default: the stages)" },
	{ "decoder-first-pipeline-num-layers", 0, MT_ARG_REQUIRED, O_PP_FIRST, "N", "layers of the first stage (the others share the rest)" },
	{ "decoder-last-pipeline-num-layers", 0, MT_ARG_REQUIRED, O_PP_LAST, "N", "layers of the last stage (the others share the rest)" },
	{ "use-distributed-optimizer", 0, MT_ARG_NONE, O_DIST_OPT, NULL, "shard the optimizer state over data-parallel ranks (ZeRO-1)" },
	{ "ddp-bucket-size", 0, MT_ARG_REQUIRED, O_BUCKET, "N", "cuda: gradient elements reduced together, overlapped with the backward pass (default 10000000)" },
	{ "distributed-timeout-minutes", 0, MT_ARG_REQUIRED, O_DIST_TIMEOUT, "M", "stop when a rank does not answer within M minutes (default 10)" },
	{ "distributed-timeout-seconds", 0, MT_ARG_REQUIRED, O_DIST_TIMEOUT_S, "S", "the same in seconds (0: wait forever)" },
	{ "dry-run", 0, MT_ARG_NONE, O_DRY_RUN, NULL, "print rank layout, parameters, memory per GPU and FLOPs per step; train nothing" },
	{ "world-size", 0, MT_ARG_REQUIRED, O_WORLD, "N", "ranks for --dry-run (default: the launcher's)" },
	{ "gpus-per-node", 0, MT_ARG_REQUIRED, O_GPUS_PER_NODE, "N", "for --dry-run's node count (default 8)" },
	{ "step-batch-size-schedule", 0, MT_ARG_LIST, O_STEP_BATCH, "\"T:B ...\"", "global batch B once T tokens are consumed (T with K, M, B or T suffixes)" },
	{ "rampup-batch-size", 0, MT_ARG_LIST, O_RAMPUP, "START INCR SAMPLES", "grow the global batch from START by INCR over SAMPLES samples" },
	{ "lr-warmup-samples", 0, MT_ARG_REQUIRED, O_WARMUP_SAMPLES, "N", "warmup in samples (sample-based schedule)" },
	{ "lr-decay-samples", 0, MT_ARG_REQUIRED, O_DECAY_SAMPLES, "N", "decay in samples (default: --train-samples)" },
	MT_DATA_OPTIONS,
	MT_MEGATRON_OPTIONS,
	{ 0 },
};

static void on_stop(int sig)
{
	(void)sig;
	mt_train_stop_requested = 1;
}

/* --config FILE: its flags go first, the command line's after them (and win). */
static char **with_config(int *argc, char **argv)
{
	const char *file = NULL;
	char **out, *text, *p;
	int n = 0, cap;
	FILE *f;
	long sz;

	for (int i = 1; i < *argc; i++) {
		const char *next = NULL;
		if (!strcmp(argv[i], "--"))
			break;
		if (!strcmp(argv[i], "--config") && i + 1 < *argc)
			next = argv[++i];
		else if (!strncmp(argv[i], "--config=", 9))
			next = argv[i] + 9;
		if (next && file)
			mt_die(MT_EXIT_USAGE, "--config given twice ('%s', then '%s'): give one file (put the other's flags "
			       "on the command line)", file, next);
		if (next)
			file = next;
	}
	if (!file)
		return argv;
	f = fopen(file, "r");
	if (!f)
		mt_die(MT_EXIT_IO, "cannot open config '%s'", file);
	fseek(f, 0, SEEK_END);
	sz = ftell(f);
	rewind(f);
	text = malloc((size_t)sz + 1);
	if (!text || fread(text, 1, (size_t)sz, f) != (size_t)sz)
		mt_die(MT_EXIT_IO, "cannot read config '%s'", file);
	text[sz] = '\0';
	fclose(f);
	cap = *argc + (int)sz / 2 + 2;
	out = malloc((size_t)cap * sizeof(*out));
	out[n++] = argv[0];
	for (p = strtok(text, "\n"); p; p = strtok(NULL, "\n")) {
		char *hash = strchr(p, '#'), *tok;
		if (hash)
			*hash = '\0';
		for (tok = p; *tok;) {
			char *end;
			while (*tok == ' ' || *tok == '\t' || *tok == '\r')
				tok++;
			if (!*tok)
				break;
			end = tok;
			while (*end && *end != ' ' && *end != '\t' && *end != '\r')
				end++;
			if (*end)
				*end++ = '\0';
			out[n++] = tok;
			tok = end;
		}
	}
	for (int i = 1; i < *argc; i++)
		out[n++] = argv[i];
	out[n] = NULL;
	*argc = n;
	return out;
}

/* The error, and with several ranks every other one is stopped too (MPI_Abort). */
__attribute__((noreturn)) static void fail(struct mt_dist *dist, const struct mt_err *e)
{
	if (dist->world <= 1)
		mt_die_err(e);
	mt_error("%s", e->msg);
	mt_dist_abort(dist, e->code);
	exit(e->code);
}

/* The flags of the model, the optimizer and its schedule: 1 when id is one of them. */
static int take_model(struct mt_opt *o, int id, struct mt_train_args *a, struct mt_train_opts *t)
{
	switch (id) {
	case O_LAYERS: a->cfg.num_layers = (int)mt_tool_num(o, 1, INT_MAX); break;
	case O_HIDDEN: a->cfg.hidden_size = (int)mt_tool_num(o, 1, INT_MAX); break;
	case O_HEADS: a->cfg.num_attention_heads = (int)mt_tool_num(o, 1, INT_MAX); break;
	case O_FFN: a->cfg.ffn_hidden_size = (int)mt_tool_num(o, 1, INT_MAX); break;
	case O_MAXPOS: a->cfg.max_position_embeddings = (int)mt_tool_num(o, 1, INT_MAX); break;
	case O_DIVISIBLE: a->cfg.make_vocab_size_divisible_by = (int)mt_tool_num(o, 1, INT_MAX); break;
	case O_POSEMB:
		if (!strcmp(o->arg, "rope"))
			a->cfg.position_embedding_type = MT_POS_ROPE;
		else if (!strcmp(o->arg, "learned_absolute"))
			a->cfg.position_embedding_type = MT_POS_LEARNED;
		else
			mt_die_usage(o, "--position-embedding-type must be learned_absolute or rope, not '%s'", o->arg);
		break;
	case O_ROTARY:
		a->cfg.rotary_base = mt_tool_real(o);
		if (!(a->cfg.rotary_base > 0))
			mt_die_usage(o, "--rotary-base must be positive, not '%s'", o->arg);
		break;
	case O_NORM:
		if (!strcmp(o->arg, "RMSNorm"))
			a->cfg.normalization = MT_NORM_RMSNORM;
		else if (!strcmp(o->arg, "LayerNorm"))
			a->cfg.normalization = MT_NORM_LAYERNORM;
		else
			mt_die_usage(o, "--normalization must be LayerNorm or RMSNorm, not '%s'", o->arg);
		break;
	case O_NORM_EPS:
		a->cfg.norm_epsilon = mt_tool_real(o);
		if (!(a->cfg.norm_epsilon > 0))
			mt_die_usage(o, "--norm-epsilon must be positive, not '%s'", o->arg);
		break;
	case O_SWIGLU: a->cfg.swiglu = 1; break;
	case O_NOBIAS: a->cfg.add_bias_linear = 0; break;
	case O_UNTIE: a->cfg.untie_embeddings_and_output_weights = 1; break;
	case O_GQA: t->gqa = 1; break;
	case O_GROUPS: a->cfg.num_query_groups = (int)mt_tool_num(o, 1, INT_MAX); break;
	case O_KV: a->cfg.kv_channels = (int)mt_tool_num(o, 1, INT_MAX); break;
	case O_INIT_STD:
		a->cfg.init_method_std = mt_tool_real(o);
		if (!(a->cfg.init_method_std > 0))
			mt_die_usage(o, "--init-method-std must be positive, not '%s'", o->arg);
		break;
	case O_ATT_DROP: a->cfg.attention_dropout = mt_tool_real(o); break;
	case O_HID_DROP: a->cfg.hidden_dropout = mt_tool_real(o); break;
	case O_VOCAB_SIZE: t->vocab = mt_tool_num(o, 1, INT64_MAX / 4); break;
	case O_MBS: a->micro_batch_size = mt_tool_num(o, 1, INT64_MAX / 4); break;
	case O_LR:
		a->sched.lr = mt_tool_real(o);
		if (!(a->sched.lr >= 0))
			mt_die_usage(o, "--lr must be a finite number >= 0, not '%s'", o->arg);
		break;
	case O_MIN_LR:
		a->sched.min_lr = mt_tool_real(o);
		if (!(a->sched.min_lr >= 0))
			mt_die_usage(o, "--min-lr must be a finite number >= 0, not '%s'", o->arg);
		break;
	case O_BETA1:
		a->adam.beta1 = mt_tool_real(o);
		if (!(a->adam.beta1 >= 0 && a->adam.beta1 < 1))
			mt_die_usage(o, "--adam-beta1 must be in [0, 1), not '%s'", o->arg);
		break;
	case O_BETA2:
		a->adam.beta2 = mt_tool_real(o);
		if (!(a->adam.beta2 >= 0 && a->adam.beta2 < 1))
			mt_die_usage(o, "--adam-beta2 must be in [0, 1), not '%s'", o->arg);
		break;
	case O_EPS:
		a->adam.eps = mt_tool_real(o);
		if (!(a->adam.eps > 0))
			mt_die_usage(o, "--adam-eps must be positive, not '%s'", o->arg);
		break;
	case O_WD:
		a->adam.weight_decay = mt_tool_real(o);
		if (!(a->adam.weight_decay >= 0))
			mt_die_usage(o, "--weight-decay must be a finite number >= 0, not '%s'", o->arg);
		a->sched.start_weight_decay = a->sched.end_weight_decay = a->adam.weight_decay;
		break;
	case O_CLIP:
		a->clip_grad = mt_tool_real(o);
		if (!(a->clip_grad >= 0))
			mt_die_usage(o, "--clip-grad must be a finite number >= 0, not '%s'", o->arg);
		break;
	case O_DECAY_STYLE: {
		int s = mt_lr_style_parse(o->arg);
		if (s < 0)
			mt_die_usage(o, "--lr-decay-style '%s': constant, linear, cosine, inverse-square-root or WSD", o->arg);
		a->sched.lr_decay_style = (enum mt_lr_style)s;
		break;
	}
	case O_WARMUP_ITERS: a->sched.lr_warmup_iters = mt_tool_num(o, 0, INT64_MAX / 4); break;
	case O_WARMUP_FRAC: a->sched.lr_warmup_fraction = mt_tool_real(o); break;
	case O_DECAY_ITERS: a->sched.lr_decay_iters = mt_tool_num(o, 1, INT64_MAX / 4); break;
	case O_WSD_ITERS: a->sched.lr_wsd_decay_iters = mt_tool_num(o, 0, INT64_MAX / 4); break;
	case O_WSD_STYLE: {
		int s = mt_wsd_style_parse(o->arg);
		if (s < 0)
			mt_die_usage(o, "--lr-wsd-decay-style '%s': linear, cosine, exponential or minus_sqrt", o->arg);
		a->sched.lr_wsd_decay_style = (enum mt_wsd_style)s;
		break;
	}
	case O_WARMUP_SAMPLES: a->lr_warmup_samples = mt_tool_num(o, 0, INT64_MAX / 4); break;
	case O_DECAY_SAMPLES: a->lr_decay_samples = mt_tool_num(o, 1, INT64_MAX / 4); break;
	default: return 0;
	}
	return 1;
}

/* --tensor-parallel-comm and --pipeline-parallel-comm: auto, nccl or host. */
static int comm_kind(struct mt_opt *o, const char *flag)
{
	if (!strcmp(o->arg, "auto"))
		return MT_TP_COMM_AUTO;
	if (!strcmp(o->arg, "nccl"))
		return MT_TP_COMM_NCCL;
	if (!strcmp(o->arg, "host"))
		return MT_TP_COMM_HOST;
	mt_die_usage(o, "--%s must be auto, nccl or host, not '%s'", flag, o->arg);
}

/* The flags of logging, checkpoints, the device and parallelism: 1 when id is one of them. */
static int take_run(struct mt_opt *o, int id, struct mt_train_args *a, struct mt_train_opts *t)
{
	struct mt_err e = { 0 };

	switch (id) {
	case O_LOG_INTERVAL: a->log_interval = mt_tool_num(o, 1, INT64_MAX / 4); break;
	case O_LOG_JSON: a->log_json = o->arg; break;
	case O_TB_DIR: a->tensorboard.dir = o->arg; break;
	case O_TB_INTERVAL: a->tensorboard.interval = mt_tool_num(o, 1, INT64_MAX / 4); break;
	case O_TB_QUEUE: a->tensorboard.queue_size = (int)mt_tool_num(o, 1, 1 << 20); break;
	case O_TB_TIMERS: a->tensorboard.timers = 1; break;
	case O_TB_VALID_PPL: a->tensorboard.validation_ppl = 1; break;
	case O_TB_MEMORY: a->tensorboard.memory = 1; break;
	case O_STEP_BATCH:
		if (mt_batch_steps_parse(&t->steps, o->list, o->nlist, &e))
			mt_die_usage(o, "%s", e.msg);
		break;
	case O_SAVE: a->save = o->arg; break;
	case O_SAVE_INTERVAL: a->save_interval = mt_tool_num(o, 1, INT64_MAX / 4); break;
	case O_LOAD: a->load = o->arg; break;
	case O_KEEP: a->keep_last = (int)mt_tool_num(o, 1, INT64_MAX / 4); break;
	case O_ASYNC_SAVE: a->async_save = 1; break;
	case O_FINETUNE: a->finetune = 1; break;
	case O_NO_LOAD_OPTIM: a->no_load_optim = 1; break;
	case O_NO_LOAD_RNG: a->no_load_rng = 1; break;
	case O_NO_SAVE_OPTIM: a->no_save_optim = 1; break;
	case O_USE_CKPT_ARGS: t->use_ckpt_args = 1; break;
	case O_EXIT_INTERVAL: a->exit_interval = mt_tool_num(o, 1, INT64_MAX / 4); break;
	case O_EXIT_MINS:
		a->exit_duration_mins = mt_tool_real(o);
		if (!(a->exit_duration_mins >= 0))
			mt_die_usage(o, "--exit-duration-in-mins must be 0 or more minutes");
		break;
	case O_MOCK: a->mock_data = 1; break;
	case O_MAX_SKIP: a->max_skipped_steps = mt_tool_num(o, 0, INT64_MAX / 4); break;
	case O_NAN_CHECK: a->skip_nonfinite_loss = 0; break;
	case O_NO_NAN_CHECK: a->skip_nonfinite_loss = 1; break;
	case O_DEVICE:
		if (!strcmp(o->arg, "cpu"))
			t->device = 0;
		else if (!strcmp(o->arg, "cuda"))
			t->device = 1;
		else
			mt_die_usage(o, "--device must be cuda or cpu, not '%s'", o->arg);
		break;
	case O_BF16: a->backend.precision = MT_PREC_BF16; break;
	case O_FP16: a->backend.precision = MT_PREC_FP16; break;
	case O_LOSS_SCALE: a->backend.loss_scale = mt_tool_real(o); break;
	case O_INIT_LOSS_SCALE: a->backend.initial_loss_scale = mt_tool_real(o); break;
	case O_MIN_LOSS_SCALE: a->backend.min_loss_scale = mt_tool_real(o); break;
	case O_LOSS_WINDOW: a->backend.loss_scale_window = (int)mt_tool_num(o, 1, INT_MAX); break;
	case O_HYSTERESIS: a->backend.hysteresis = (int)mt_tool_num(o, 1, INT_MAX); break;
	case O_DETERMINISTIC: a->backend.deterministic = 1; break;
	case O_RECOMPUTE:
		if (!strcmp(o->arg, "full"))
			a->backend.recompute_full = 1, t->recompute = MT_RECOMPUTE_FULL;
		else if (!strcmp(o->arg, "selective"))
			a->backend.recompute_full = 0, t->recompute = MT_RECOMPUTE_SELECTIVE;
		else
			mt_die_usage(o, "--recompute-granularity must be selective or full, not '%s'", o->arg);
		break;
	case O_RECOMPUTE_ACT: t->recompute_act = 1; break;
	case O_TP: t->tp = mt_tool_num(o, 1, INT64_MAX / 4); break;
	case O_PP: t->pp = mt_tool_num(o, 1, INT64_MAX / 4); break;
	case O_PP_SCHEDULE:
		if ((t->schedule = mt_pp_kind_parse(o->arg)) < 0)
			mt_die_usage(o, "--pipeline-schedule must be 1f1b, interleaved or zb-h1, not '%s'", o->arg);
		break;
	case O_VP_LAYERS: t->vp_layers = mt_tool_num(o, 1, INT64_MAX / 4); break;
	case O_VP_STAGES: t->vp_stages = mt_tool_num(o, 1, INT64_MAX / 4); break;
	case O_VP_GROUP: a->pp_group = (int)mt_tool_num(o, 1, INT_MAX); break;
	case O_PP_FIRST: a->pipeline.first = (int)mt_tool_num(o, 1, INT_MAX); break;
	case O_PP_LAST: a->pipeline.last = (int)mt_tool_num(o, 1, INT_MAX); break;
	case O_DIST_OPT: a->distributed_optimizer = 1; break;
	case O_SEQ_PARALLEL: a->sequence_parallel = 1; break;
	case O_TP_COMM: a->tp_comm = comm_kind(o, "tensor-parallel-comm"); break;
	case O_PP_COMM: a->pp_comm = comm_kind(o, "pipeline-parallel-comm"); break;
	case O_LABEL_SMOOTHING:
		a->label_smoothing = mt_tool_real(o);
		if (!(a->label_smoothing >= 0 && a->label_smoothing < 1))
			mt_die_usage(o, "--label-smoothing must be in [0, 1), not '%s'", o->arg);
		break;
	case O_BUCKET: a->ddp_bucket_size = mt_tool_num(o, 1, INT64_MAX / 4); break;
	case O_DIST_TIMEOUT: t->timeout = mt_tool_real(o) * 60; break;
	case O_DIST_TIMEOUT_S: t->timeout = mt_tool_real(o); break;
	case O_DRY_RUN: t->dry_run = 1; break;
	case O_WORLD: t->world = mt_tool_num(o, 1, INT64_MAX / 4); break;
	case O_GPUS_PER_NODE: t->gpus_per_node = mt_tool_num(o, 1, INT64_MAX / 4); break;
	case O_RAMPUP:
		if (o->nlist != 3)
			mt_die_usage(o, "--rampup-batch-size takes three numbers: start, increment, samples");
		for (int i = 0; i < 3; i++) {
			char *end;
			t->rampup[i] = strtoll(o->list[i], &end, 10);
			if (*end || t->rampup[i] <= 0)
				mt_die_usage(o, "--rampup-batch-size: '%s' is not a positive integer", o->list[i]);
		}
		break;
	default: return 0;
	}
	return 1;
}

/* The flags into a and t (the data flags into d, and what the rest reads of them into t). */
static void parse(int argc, char **argv, struct mt_opt *o, struct mt_dataopts *d, struct mt_train_args *a,
		  struct mt_train_opts *t)
{
	int id;

	if (mt_opt_init(o, &info, opts, argc, argv))
		mt_die_err(&o->err);
	while ((id = mt_opt_next(o)) != MT_OPT_END) {
		mt_tool_common(o, id);
		if (mt_dataopts_take(d, o, id)) {
			if (id == MT_DOPT_SEQ_LENGTH)
				a->cfg.seq_length = (int)d->seq_length;
			if (id == MT_DOPT_EVAL_INTERVAL)
				a->eval_interval = d->eval_interval;
			if (id == MT_DOPT_EVAL_ITERS)
				a->eval_iters = d->eval_iters;
			continue;
		}
		if (mt_megatron_take(o, id))
			continue;
		if (id == MT_OPT_ARG)
			mt_die_usage(o, "unexpected argument '%s'", o->arg);
		if (id == O_CONFIG)
			continue; /* read already */
		if (!take_model(o, id, a, t))
			take_run(o, id, a, t);
	}
	t->quiet = o->quiet;
	t->tok_type = d->tok_type;
	t->vocab_file = d->vocab;
	t->merge_file = d->merges;
	t->tok_model = d->tok_model;
	t->global_batch_size = d->gbs;
	t->train_iters = d->train_iters;
	t->train_samples = d->train_samples;
	t->eval_interval = d->eval_interval;
	t->eval_iters = d->eval_iters;
	t->seed = d->seed;
	t->data_flags = d->ndata || d->data_args_path || d->per_split_path || d->nsplit_paths[0] || d->nsplit_paths[1] ||
			d->nsplit_paths[2];
}

/* A failure of the argument resolution, shown as it asks (trainargs.h). */
__attribute__((noreturn)) static void die_args(const struct mt_opt *o, int rc, const struct mt_err *e)
{
	if (rc == MT_TRAIN_ARGS_USAGE)
		mt_die_usage(o, "%s", e->msg);
	if (rc == MT_TRAIN_ARGS_PLAIN)
		mt_die(e->code, "%s", e->msg);
	mt_die_err(e);
}

/* --dry-run: the estimate of the run on stdout, and the step schedule's batches. */
static int dry_run(const struct mt_opt *o, struct mt_train_args *a, const struct mt_train_opts *t)
{
	const struct mt_batch_steps *steps = &t->steps;
	struct mt_estimate_args ea;
	struct mt_estimate est;
	struct mt_err e = { 0 };
	int rc;

	if ((rc = mt_train_args_estimate(a, t, &ea, &e)))
		die_args(o, rc, &e);
	if (mt_estimate(&ea, &est, &e))
		mt_die_err(&e);
	mt_estimate_print(stdout, &ea, &est);
	/* thresholds are tokens (Megatron, with the sequence length known) */
	if (steps->n && mt_batch_steps_check(steps, a->cfg.seq_length, a->micro_batch_size * ea.dp, 0, &e))
		mt_die_err(&e);
	for (int k = 0; k < steps->n; k++)
		printf("%s%lld from %.6g tokens (sample %lld)%s", k ? ", " : "batch-size schedule: ",
		       (long long)steps->batch[k], (double)steps->at[k],
		       (long long)mt_batch_steps_sample(steps, k, a->cfg.seq_length), k == steps->n - 1 ? "\n" : "");
	mt_estimate_free(&est);
	return 0;
}

int main(int argc, char **argv)
{
	struct mt_opt o;
	struct mt_dataopts d;
	struct mt_train_args a;
	struct mt_train_opts t;
	struct mt_train_result r;
	struct mt_err e = { 0 };
	struct sigaction sa;
	struct mt_dist dist;
	int rc;

	mt_tool_start(&info);
	argv = with_config(&argc, argv);
	mt_train_opts_init(&t, &a);
	mt_dataopts_init(&d);
	parse(argc, argv, &o, &d, &a, &t);
	if ((rc = mt_train_args_resolve(&a, &t, &e)))
		die_args(&o, rc, &e);
	/* what it chose of the data flags: the tokenizer and the global batch */
	d.tok_type = t.tok_type;
	d.gbs = t.global_batch_size;
	if (t.dry_run)
		return dry_run(&o, &a, &t);
	if ((rc = mt_train_args_resolve_run(&a, &t, &e)))
		die_args(&o, rc, &e);
	if (!a.mock_data) {
		/* the data flags' plan; --train-samples into iterations of the global batch */
		mt_dataopts_finish(&d, &o);
		a.data = &d.args;
		t.train_iters = d.train_iters;
		t.train_samples = d.train_samples;
	}
	mt_train_args_resolve_samples(&a, &t);
	a.train_args_json = mt_train_args_json(&a, &t, argc, argv);
	if (mt_dist_init(&dist, &e) || mt_dist_layout(&dist, (int)t.tp, (int)t.pp, &e))
		fail(&dist, &e);
	dist.timeout = t.timeout;
	a.dist = &dist;
	if (dist.rank != 0)
		a.quiet = 1; /* rank 0 speaks for all */
	a.hang_rank = (int)mt_knob_int(MT_KNOB_TEST_HANG_RANK);
	a.hang_step = mt_knob_int(MT_KNOB_TEST_HANG_STEP);
	a.hang_backward = mt_knob_set(MT_KNOB_TEST_HANG_BACKWARD);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	if (mt_train_run(&a, &r, &e))
		fail(&dist, &e);
	if (!a.quiet)
		mt_info("done: %lld iterations, last loss %.6f%s", (long long)r.iteration, r.last_loss,
			r.stopped_by_signal ? " (stopped by a signal after saving)" : "");
	if (!a.mock_data)
		mt_dataopts_free(&d);
	mt_dist_finalize(&dist);
	return 0;
}
