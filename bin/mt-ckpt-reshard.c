/* mt-ckpt-reshard: what a checkpoint holds (inspect), Hugging Face export and import
 * (lib/ckpt/hfio.c), Megatron-LM export and import (lib/ckpt/megatron.c), a checkpoint
 * rewritten for another parallel layout or merged into one file (lib/ckpt/reshard.c). */
#include <stdio.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "ckpt/hfio.h"
#include "ckpt/megatron.h"
#include "base/log.h"
#include "ckpt/model.h"
#include "ckpt/reshard.h"
#include "tool.h"

static const char *const synopsis[] = {
	"inspect [--json] CKPT",
	"verify CKPT...",
	"export --format hf-gpt2|hf-llama [--no-verify] CKPT OUTDIR",
	"import --format hf-gpt2|hf-llama [--iteration N] [--make-vocab-size-divisible-by N] [--seq-length N] HFDIR CKPT",
	"--load CKPT --save DIR --target-tensor-parallel-size N --target-pipeline-parallel-size N",
	"merge CKPT DIR",
	"export --format megatron [--target-tensor-parallel-size N] [--target-pipeline-parallel-size N] "
	"[--dtype fp32|bf16|fp16] [--megatron-names core|legacy] [--ckpt-format torch|torch_dist] CKPT OUTDIR",
	"import --format megatron [--no-load-optim] [--vocab-size N] [--iteration N] [--check-crc] MEGATRON_DIR CKPT",
	NULL,
};

static const struct mt_tool_info info = {
	.name = "mt-ckpt-reshard",
	.summary = "inspect checkpoints; export and import Hugging Face weights and Megatron-LM checkpoints; change their "
		   "parallel layout",
	.synopsis = synopsis,
	.description =
		"inspect lists a checkpoint's tensors (logical name, shape, dtype) and what else it holds\n"
		"(iteration, samples consumed, optimizer state, model config); CKPT is a checkpoint\n"
		"directory (its latest), an iter_N directory or a model.h5.\n"
		"verify checks whole checkpoints: their structure (nothing outside the directory), their\n"
		"attributes and every tensor (every part of a sharded one) against the XXH3 checksums\n"
		"stored with them, and for NaN and infinities; one ok line each, else exit 3 naming the\n"
		"tensor.\n"
		"export writes OUTDIR with model.safetensors and config.json (and the tokenizer files of a\n"
		"GPT2BPETokenizer model) for transformers' GPT2LMHeadModel (hf-gpt2) or LlamaForCausalLM\n"
		"(hf-llama), then checks it: the written weights, read back, must give the checkpoint's\n"
		"log-probabilities on a fixed prompt. import reads config.json and model.safetensors (or\n"
		"its shards) and saves an mt checkpoint of iteration 0, weights only.\n"
		"--format megatron reads and writes Megatron-LM's legacy checkpoints (--ckpt-format torch:\n"
		"iter_N/mp_rank_TT[_PPP]/model_optim_rng.pt) at any tensor x pipeline parallel size, the\n"
		"optimizer state included on import; export writes the target sizes' shards for Megatron's\n"
		"default (weights_only) loading, with megatron-core's names or (--megatron-names legacy)\n"
		"the legacy model's.\n"
		"--load/--save rewrites a checkpoint's files for another layout (one part per target rank,\n"
		"holding the slices that rank reads); merge writes one self-contained model.h5. Both keep\n"
		"the optimizer state and save DIR atomically (DIR/iter_N, DIR/latest)",
	.doc = "docs/mt-ckpt-reshard.md",
};

enum { O_JSON = 256, O_FORMAT, O_NO_VERIFY, O_ITERATION, O_DIVISIBLE, O_SEQ, O_LOAD, O_SAVE, O_TTP, O_TPP, O_DTYPE,
       O_NO_OPTIM, O_VOCAB, O_CRC, O_NAMES, O_CKPT_FORMAT };

static int ckpt_torch_dist; /* export megatron --ckpt-format torch_dist */

static const struct mt_option layout_opts[] = {
	{ "load", 0, MT_ARG_REQUIRED, O_LOAD, "CKPT", "the checkpoint to rewrite (directory, iter_N or model.h5)" },
	{ "save", 0, MT_ARG_REQUIRED, O_SAVE, "DIR", "the checkpoint directory to write" },
	{ "target-tensor-parallel-size", 0, MT_ARG_REQUIRED, O_TTP, "N", "tensor-parallel size of the new layout (1)" },
	{ "target-pipeline-parallel-size", 0, MT_ARG_REQUIRED, O_TPP, "N", "pipeline stages of the new layout (1)" },
	{ 0 },
};

static const struct mt_option merge_opts[] = {
	{ 0 },
};

static int layout(int argc, char **argv)
{
	struct mt_opt o;
	struct mt_err e = { 0 };
	const char *load = NULL, *save = NULL;
	long long tp = 1, pp = 1;
	int id;

	if (mt_opt_init(&o, &info, layout_opts, argc, argv))
		mt_die_err(&o.err);
	while ((id = mt_opt_next(&o)) != MT_OPT_END) {
		mt_tool_common(&o, id);
		switch (id) {
		case O_LOAD: load = o.arg; break;
		case O_SAVE: save = o.arg; break;
		case O_TTP:
		case O_TPP:
			if (mt_opt_long(&o, 1, 1 << 16, id == O_TTP ? &tp : &pp))
				mt_die_usage(&o, "%s", o.err.msg);
			break;
		case MT_OPT_ARG: mt_die_usage(&o, "unexpected argument '%s'", o.arg);
		}
	}
	if (!load || !save)
		mt_die_usage(&o, "a layout rewrite needs --load and --save");
	if (mt_ckpt_reshard(load, save, (int)tp, (int)pp, &e))
		mt_die_err(&e);
	if (!o.quiet)
		mt_info("rewrote %s for tensor-parallel size %lld x %lld pipeline stages into %s", load, tp, pp, save);
	mt_opt_free(&o);
	return 0;
}

static int merge(int argc, char **argv)
{
	struct mt_opt o;
	struct mt_err e = { 0 };
	const char *pos[2] = { NULL, NULL };
	int id, npos = 0;

	if (mt_opt_init(&o, &info, merge_opts, argc, argv))
		mt_die_err(&o.err);
	while ((id = mt_opt_next(&o)) != MT_OPT_END) {
		mt_tool_common(&o, id);
		if (id == MT_OPT_ARG) {
			if (npos == 2)
				mt_die_usage(&o, "unexpected argument '%s'", o.arg);
			pos[npos++] = o.arg;
		}
	}
	if (npos != 2)
		mt_die_usage(&o, "merge needs CKPT and DIR");
	if (mt_ckpt_merge(pos[0], pos[1], &e))
		mt_die_err(&e);
	if (!o.quiet)
		mt_info("merged %s into one file in %s", pos[0], pos[1]);
	mt_opt_free(&o);
	return 0;
}

static const struct mt_option inspect_opts[] = {
	{ "json", 0, MT_ARG_NONE, O_JSON, NULL, "one JSON object instead of lines" },
	{ 0 },
};

static const struct mt_option hf_opts[] = {
	{ "format", 0, MT_ARG_REQUIRED, O_FORMAT, "FMT", "hf-gpt2, hf-llama or megatron" },
	{ "no-verify", 0, MT_ARG_NONE, O_NO_VERIFY, NULL, "export: skip the check of the written files" },
	{ "iteration", 0, MT_ARG_REQUIRED, O_ITERATION, "N", "import: the checkpoint's iteration (0)" },
	{ "make-vocab-size-divisible-by", 0, MT_ARG_REQUIRED, O_DIVISIBLE, "N",
	  "import: pad the vocabulary to a multiple of N (128)" },
	{ "seq-length", 0, MT_ARG_REQUIRED, O_SEQ, "N", "import: the model's --seq-length (max positions)" },
	{ "target-tensor-parallel-size", 0, MT_ARG_REQUIRED, O_TTP, "N", "export megatron: tensor-parallel shards (1)" },
	{ "target-pipeline-parallel-size", 0, MT_ARG_REQUIRED, O_TPP, "N", "export megatron: pipeline stages (1)" },
	{ "dtype", 0, MT_ARG_REQUIRED, O_DTYPE, "T", "export megatron: fp32 (default), bf16 or fp16 tensors" },
	{ "megatron-names", 0, MT_ARG_REQUIRED, O_NAMES, "N",
	  "export megatron: core (megatron-core's names, the default) or legacy (the legacy model's, for "
	  "--use-legacy-models)" },
	{ "ckpt-format", 0, MT_ARG_REQUIRED, O_CKPT_FORMAT, "F",
	  "export megatron: torch (default: legacy files) or torch_dist (distributed checkpoint)" },
	{ "no-load-optim", 0, MT_ARG_NONE, O_NO_OPTIM, NULL, "import megatron: the weights only" },
	{ "vocab-size", 0, MT_ARG_REQUIRED, O_VOCAB, "N",
	  "import megatron: the tokenizer's vocabulary (default: args, else the padded size)" },
	{ "check-crc", 0, MT_ARG_NONE, O_CRC, NULL, "import megatron: verify every ZIP member's CRC-32" },
	{ 0 },
};

static int inspect(int argc, char **argv)
{
	struct mt_opt o;
	struct mt_err e = { 0 };
	const char *ckpt = NULL;
	int id, json = 0;

	if (mt_opt_init(&o, &info, inspect_opts, argc, argv))
		mt_die_err(&o.err);
	while ((id = mt_opt_next(&o)) != MT_OPT_END) {
		mt_tool_common(&o, id);
		if (id == O_JSON)
			json = 1;
		else if (id == MT_OPT_ARG && !ckpt)
			ckpt = o.arg;
		else if (id == MT_OPT_ARG)
			mt_die_usage(&o, "unexpected argument '%s'", o.arg);
	}
	if (!ckpt)
		mt_die_usage(&o, "inspect needs a checkpoint");
	if (mt_ckpt_inspect(ckpt, json, stdout, &e))
		mt_die_err(&e);
	return fflush(stdout) ? MT_EXIT_IO : 0;
}

static int verify(int argc, char **argv)
{
	struct mt_opt o;
	struct mt_err e = { 0 };
	int id, n = 0, rc = 0;

	if (mt_opt_init(&o, &info, merge_opts, argc, argv))
		mt_die_err(&o.err);
	while ((id = mt_opt_next(&o)) != MT_OPT_END) {
		mt_tool_common(&o, id);
		if (id == MT_OPT_ARG) {
			n++;
			mt_err_clear(&e);
			if (mt_ckpt_verify(o.arg, stdout, &e)) {
				/* every checkpoint is checked; the worst failure decides the exit */
				mt_error("%s", e.msg);
				if (e.code > rc)
					rc = e.code;
			}
		}
	}
	if (!n)
		mt_die_usage(&o, "verify needs a checkpoint");
	mt_opt_free(&o);
	return fflush(stdout) ? MT_EXIT_IO : rc;
}

static int megatron(const char *const pos[2], int export, int quiet, long long ttp, long long tpp, const char *dtype,
		    int optim, long long vocab, long long iteration, int crc, int legacy);

static int hf(int argc, char **argv, int export)
{
	struct mt_opt o;
	struct mt_err e = { 0 };
	const char *pos[2] = { NULL, NULL }, *fmt = NULL, *dtype = NULL, *meg_only = NULL;
	int id, npos = 0, verify = 1, quiet = 0, optim = 1, crc = 0, legacy = 0, names_given = 0;
	long long iteration = 0, divisible = 128, seq = 0, ttp = 1, tpp = 1, vocab = 0, it_given = -1;
	enum mt_hf_format f;

	if (mt_opt_init(&o, &info, hf_opts, argc, argv))
		mt_die_err(&o.err);
	while ((id = mt_opt_next(&o)) != MT_OPT_END) {
		mt_tool_common(&o, id);
		switch (id) {
		case O_FORMAT: fmt = o.arg; break;
		case O_NO_VERIFY: verify = 0; break;
		case O_ITERATION:
			if (mt_opt_long(&o, 0, INT64_MAX, &iteration))
				mt_die_usage(&o, "%s", o.err.msg);
			it_given = iteration;
			break;
		case O_DIVISIBLE:
			if (mt_opt_long(&o, 1, 1 << 20, &divisible))
				mt_die_usage(&o, "%s", o.err.msg);
			break;
		case O_SEQ:
			if (mt_opt_long(&o, 1, INT32_MAX, &seq))
				mt_die_usage(&o, "%s", o.err.msg);
			break;
		case O_TTP:
		case O_TPP:
			if (mt_opt_long(&o, 1, 4096, id == O_TTP ? &ttp : &tpp))
				mt_die_usage(&o, "%s", o.err.msg);
			meg_only = id == O_TTP ? "--target-tensor-parallel-size" : "--target-pipeline-parallel-size";
			break;
		case O_DTYPE: dtype = o.arg; meg_only = "--dtype"; break;
		case O_NAMES:
			if (strcmp(o.arg, "core") && strcmp(o.arg, "legacy"))
				mt_die_usage(&o, "--megatron-names: '%s' is not core or legacy", o.arg);
			legacy = !strcmp(o.arg, "legacy");
			names_given = 1;
			meg_only = "--megatron-names";
			break;
		case O_CKPT_FORMAT:
			if (strcmp(o.arg, "torch") && strcmp(o.arg, "torch_dist"))
				mt_die_usage(&o, "--ckpt-format: '%s' is not torch or torch_dist", o.arg);
			ckpt_torch_dist = !strcmp(o.arg, "torch_dist");
			meg_only = "--ckpt-format";
			break;
		case O_NO_OPTIM: optim = 0; meg_only = "--no-load-optim"; break;
		case O_CRC: crc = 1; meg_only = "--check-crc"; break;
		case O_VOCAB:
			if (mt_opt_long(&o, 1, INT64_MAX, &vocab))
				mt_die_usage(&o, "%s", o.err.msg);
			meg_only = "--vocab-size";
			break;
		case MT_OPT_ARG:
			if (npos == 2)
				mt_die_usage(&o, "unexpected argument '%s'", o.arg);
			pos[npos++] = o.arg;
			break;
		}
	}
	if (fmt && !strcmp(fmt, "megatron")) {
		int rc;
		if (npos != 2)
			mt_die_usage(&o, export ? "export needs CKPT and OUTDIR" : "import needs MEGATRON_DIR and CKPT");
		if (!verify || divisible != 128 || seq)
			mt_die_usage(&o, "--no-verify, --make-vocab-size-divisible-by and --seq-length are not options of "
				     "--format megatron (the checkpoint's args say them)");
		if (export && (!optim || vocab || crc || it_given >= 0))
			mt_die_usage(&o, "export --format megatron takes --target-tensor-parallel-size, "
				     "--target-pipeline-parallel-size, --dtype, --megatron-names and --ckpt-format");
		if (!export && (dtype || ttp != 1 || tpp != 1 || names_given || ckpt_torch_dist))
			mt_die_usage(&o, "import --format megatron reads the checkpoint's own layout, dtype, names and format: "
				     "--target-*, --dtype, --ckpt-format and --megatron-names are export options");
		if (legacy && ckpt_torch_dist)
			mt_die_usage(&o, "--megatron-names legacy is for --ckpt-format torch: the distributed format holds "
				     "megatron-core's names only");
		quiet = o.quiet;
		mt_opt_free(&o);
		rc = megatron(pos, export, quiet, ttp, tpp, dtype, optim, vocab, it_given, crc, legacy);
		return rc;
	}
	if (meg_only)
		mt_die_usage(&o, "%s is an option of --format megatron", meg_only);
	quiet = o.quiet;
	if (!fmt)
		mt_die_usage(&o, "%s needs --format hf-gpt2, hf-llama or megatron", export ? "export" : "import");
	if (mt_hf_format_parse(fmt, &f))
		mt_die_usage(&o, "--format: '%s' is not hf-gpt2, hf-llama or megatron", fmt);
	if (npos != 2)
		mt_die_usage(&o, export ? "export needs CKPT and OUTDIR" : "import needs HFDIR and CKPT");
	if (export) {
		struct mt_model m;
		struct mt_hf_export_opts eo = { f, verify, 1e-4 };
		struct mt_hf_report r;
		if (mt_model_open(&m, pos[0], &e))
			mt_die_err(&e);
		if (mt_hf_export(&m, pos[1], &eo, &r, &e))
			mt_die_err(&e);
		if (!quiet) {
			mt_info("exported %lld tensors of '%s' (iteration %lld) to %s as %s%s", (long long)r.tensors, m.iterdir,
				(long long)m.iteration, pos[1], fmt, r.tokenizer_files == 2 ? ", with the SentencePiece tokenizer.model"
				: r.tokenizer_files ? ", with the GPT-2 tokenizer files" : "");
			if (r.verified)
				mt_info("checked: the exported weights give the checkpoint's log-probabilities on a %d-token "
					"prompt (largest difference %.3g)", r.tokens, r.max_diff);
			else
				mt_info("not checked (--no-verify)");
		}
		mt_model_close(&m);
	} else {
		struct mt_hf_import_opts io = { f, iteration, (int)divisible, (int)seq };
		struct mt_hf_loaded l;
		if (mt_hf_import(pos[0], pos[1], &io, &l, &e))
			mt_die_err(&e);
		if (!quiet)
			mt_info("imported %s (%d layers, hidden %d, vocabulary %lld padded to %lld) into %s at iteration %lld",
				pos[0], l.cfg.num_layers, l.cfg.hidden_size, (long long)l.cfg.vocab_size,
				(long long)l.cfg.padded_vocab_size, pos[1], iteration);
		mt_hf_loaded_free(&l);
	}
	mt_opt_free(&o);
	return 0;
}

static int megatron(const char *const pos[2], int export, int quiet, long long ttp, long long tpp, const char *dtype,
		    int optim, long long vocab, long long iteration, int crc, int legacy)
{
	struct mt_err e = { 0 };
	struct mt_meg_report r;

	if (export) {
		struct mt_model m;
		struct mt_meg_export_opts eo = { (int)ttp, (int)tpp, MT_PKD_F32, legacy, ckpt_torch_dist };
		if (dtype && !strcmp(dtype, "bf16"))
			eo.dtype = MT_PKD_BF16;
		else if (dtype && !strcmp(dtype, "fp16"))
			eo.dtype = MT_PKD_F16;
		else if (dtype && strcmp(dtype, "fp32"))
			mt_die(MT_EXIT_USAGE, "--dtype: '%s' is not fp32, bf16 or fp16", dtype);
		if (mt_model_open(&m, pos[0], &e))
			mt_die_err(&e);
		if (mt_meg_export(&m, pos[1], &eo, &r, &e))
			mt_die_err(&e);
		if (!quiet)
			mt_info("exported '%s' (iteration %lld) to %s as a Megatron-LM checkpoint: TP %d x PP %d, %d files, "
				"%s, padded vocabulary %lld, %s names; load it in Megatron with --ckpt-format %s%s "
				"--no-load-optim --no-load-rng", m.iterdir, (long long)m.iteration, pos[1], r.tp, r.pp,
				(int)r.files, mt_pk_dtype_name(eo.dtype), (long long)r.cfg.padded_vocab_size,
				legacy ? "legacy-model" : "megatron-core", ckpt_torch_dist ? "torch_dist" : "torch",
				legacy ? " --use-legacy-models" : "");
		mt_model_close(&m);
		return 0;
	}
	{
		struct mt_meg_import_opts io = { optim, vocab, crc, iteration };
		if (mt_meg_import(pos[0], pos[1], &io, &r, &e))
			mt_die_err(&e);
		if (!quiet)
			mt_info("imported %s (TP %d x PP %d%s, %lld files, %s names; %d layers, hidden %d, padded vocabulary "
				"%lld) into %s at iteration %lld, %s", pos[0], r.tp, r.pp, r.vp > 1 ? " with virtual stages" : "",
				(long long)r.files, r.legacy_names ? "legacy-model" : "megatron-core", r.cfg.num_layers,
				r.cfg.hidden_size, (long long)r.cfg.padded_vocab_size, pos[1], (long long)r.iteration,
				r.optimizer ? "with the optimizer state (fp32 master weights, Adam moments)" : "weights only");
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const char *const commands[] = { "inspect", "export", "import", "merge", "verify", NULL };
	const char *cmd;
	int known = 0;

	mt_tool_start(&info);
	mt_tool_command_first(argc, argv, commands);
	cmd = argc > 1 ? argv[1] : "";
	for (const char *const *c = commands; *c; c++)
		known |= !strcmp(cmd, *c);
	if (!known) {
		for (int i = 1; i < argc; i++)
			if (!strncmp(argv[i], "--load", 6) || !strncmp(argv[i], "--save", 6) || !strncmp(argv[i], "--target-", 9))
				return layout(argc, argv);
		mt_tool_unavailable(&info, argc, argv);
	}
	argv[1] = argv[0];
	if (!strcmp(cmd, "inspect"))
		return inspect(argc - 1, argv + 1);
	if (!strcmp(cmd, "merge"))
		return merge(argc - 1, argv + 1);
	if (!strcmp(cmd, "verify"))
		return verify(argc - 1, argv + 1);
	return hf(argc - 1, argv + 1, !strcmp(cmd, "export"));
}
