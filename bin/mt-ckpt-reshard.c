/* mt-ckpt-reshard: what a checkpoint holds (inspect); changing its parallel layout and
 * Hugging Face export/import are planned and answer "not available yet". */
#include <stdio.h>
#include <string.h>

#include "../lib/ckpt.h"
#include "tool.h"

static const char *const synopsis[] = {
	"inspect [--json] CKPT",
	"--load DIR --save DIR --target-tensor-parallel-size N --target-pipeline-parallel-size N",
	"export --format hf-gpt2|hf-llama CKPT OUTDIR",
	"import --format hf-gpt2|hf-llama HFDIR CKPT",
	NULL,
};

static const struct mt_tool_info info = {
	.name = "mt-ckpt-reshard",
	.summary = "inspect checkpoints; change their parallel layout; export and import Hugging Face weights",
	.synopsis = synopsis,
	.description =
		"inspect lists a checkpoint's tensors (logical name, shape, dtype) and what else it holds\n"
		"(iteration, samples consumed, optimizer state, model config); CKPT is a checkpoint\n"
		"directory (its latest), an iter_N directory or a model.h5. Resharding, export and import\n"
		"are not available in this version",
	.doc = "docs/mt-ckpt-reshard.md",
};

enum { O_JSON = 256 };

static const struct mt_option opts[] = {
	{ "json", 0, MT_ARG_NONE, O_JSON, NULL, "one JSON object instead of lines" },
	{ 0 },
};

int main(int argc, char **argv)
{
	struct mt_opt o;
	struct mt_err e = { 0 };
	const char *ckpt = NULL;
	int id, json = 0;

	mt_tool_start(&info);
	if (argc > 1 && (!strcmp(argv[1], "export") || !strcmp(argv[1], "import")))
		mt_die(MT_EXIT_USAGE, "not available yet: %s is planned; see %s", argv[1], info.doc);
	if (argc < 2 || strcmp(argv[1], "inspect") != 0)
		mt_tool_unavailable(&info, argc, argv);
	argv[1] = argv[0];
	argv++;
	argc--;
	if (mt_opt_init(&o, &info, opts, argc, argv))
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
