/* mt-ckpt-reshard: what a checkpoint holds (inspect), and Hugging Face export and import
 * (lib/ckpt/hfio.c); changing the parallel layout is planned and answers "not available yet". */
#include <stdio.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "ckpt/hfio.h"
#include "base/log.h"
#include "ckpt/model.h"
#include "tool.h"

static const char *const synopsis[] = {
	"inspect [--json] CKPT",
	"export --format hf-gpt2|hf-llama [--no-verify] CKPT OUTDIR",
	"import --format hf-gpt2|hf-llama [--iteration N] [--make-vocab-size-divisible-by N] [--seq-length N] HFDIR CKPT",
	"--load DIR --save DIR --target-tensor-parallel-size N --target-pipeline-parallel-size N",
	NULL,
};

static const struct mt_tool_info info = {
	.name = "mt-ckpt-reshard",
	.summary = "inspect checkpoints; export and import Hugging Face weights; change their parallel layout",
	.synopsis = synopsis,
	.description =
		"inspect lists a checkpoint's tensors (logical name, shape, dtype) and what else it holds\n"
		"(iteration, samples consumed, optimizer state, model config); CKPT is a checkpoint\n"
		"directory (its latest), an iter_N directory or a model.h5.\n"
		"export writes OUTDIR with model.safetensors and config.json (and the tokenizer files of a\n"
		"GPT2BPETokenizer model) for transformers' GPT2LMHeadModel (hf-gpt2) or LlamaForCausalLM\n"
		"(hf-llama), then checks it: the written weights, read back, must give the checkpoint's\n"
		"log-probabilities on a fixed prompt. import reads config.json and model.safetensors (or\n"
		"its shards) and saves an mt checkpoint of iteration 0, weights only. Resharding is not\n"
		"available in this version",
	.doc = "docs/mt-ckpt-reshard.md",
};

enum { O_JSON = 256, O_FORMAT, O_NO_VERIFY, O_ITERATION, O_DIVISIBLE, O_SEQ };

static const struct mt_option inspect_opts[] = {
	{ "json", 0, MT_ARG_NONE, O_JSON, NULL, "one JSON object instead of lines" },
	{ 0 },
};

static const struct mt_option hf_opts[] = {
	{ "format", 0, MT_ARG_REQUIRED, O_FORMAT, "FMT", "hf-gpt2 or hf-llama" },
	{ "no-verify", 0, MT_ARG_NONE, O_NO_VERIFY, NULL, "export: skip the check of the written files" },
	{ "iteration", 0, MT_ARG_REQUIRED, O_ITERATION, "N", "import: the checkpoint's iteration (0)" },
	{ "make-vocab-size-divisible-by", 0, MT_ARG_REQUIRED, O_DIVISIBLE, "N",
	  "import: pad the vocabulary to a multiple of N (128)" },
	{ "seq-length", 0, MT_ARG_REQUIRED, O_SEQ, "N", "import: the model's --seq-length (max positions)" },
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

static int hf(int argc, char **argv, int export)
{
	struct mt_opt o;
	struct mt_err e = { 0 };
	const char *pos[2] = { NULL, NULL }, *fmt = NULL;
	int id, npos = 0, verify = 1, quiet = 0;
	long long iteration = 0, divisible = 128, seq = 0;
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
			break;
		case O_DIVISIBLE:
			if (mt_opt_long(&o, 1, 1 << 20, &divisible))
				mt_die_usage(&o, "%s", o.err.msg);
			break;
		case O_SEQ:
			if (mt_opt_long(&o, 1, INT32_MAX, &seq))
				mt_die_usage(&o, "%s", o.err.msg);
			break;
		case MT_OPT_ARG:
			if (npos == 2)
				mt_die_usage(&o, "unexpected argument '%s'", o.arg);
			pos[npos++] = o.arg;
			break;
		}
	}
	quiet = o.quiet;
	if (!fmt)
		mt_die_usage(&o, "%s needs --format hf-gpt2 or --format hf-llama", export ? "export" : "import");
	if (mt_hf_format_parse(fmt, &f))
		mt_die_usage(&o, "--format: '%s' is not hf-gpt2 or hf-llama", fmt);
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

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "";

	mt_tool_start(&info);
	for (int i = 1; i < argc; i++)
		if (!strncmp(argv[i], "--load", 6) || !strncmp(argv[i], "--save", 6) || !strncmp(argv[i], "--target-", 9))
			mt_die(MT_EXIT_USAGE, "not available yet: resharding (%s) is planned; see %s", argv[i], info.doc);
	if (strcmp(cmd, "inspect") && strcmp(cmd, "export") && strcmp(cmd, "import"))
		mt_tool_unavailable(&info, argc, argv);
	argv[1] = argv[0];
	if (!strcmp(cmd, "inspect"))
		return inspect(argc - 1, argv + 1);
	return hf(argc - 1, argv + 1, !strcmp(cmd, "export"));
}
