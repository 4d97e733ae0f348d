/* mt-ckpt-reshard: change a checkpoint's parallel layout; export and import Hugging Face weights.
 *
 * Not implemented in this version: the tool answers --help with its planned
 * usage and otherwise exits 2 saying it is not available yet. */
#include "tool.h"

static const char *const synopsis[] = {
	"--load DIR --save DIR --target-tensor-parallel-size N --target-pipeline-parallel-size N",
	"export --format hf-gpt2|hf-llama CKPT OUTDIR",
	"import --format hf-gpt2|hf-llama HFDIR CKPT",
	NULL,
};

static const struct mt_tool_info info = {
	.name = "mt-ckpt-reshard",
	.summary = "change a checkpoint's parallel layout; export and import Hugging Face weights",
	.synopsis = synopsis,
	.description = "planned; not available in this version",
	.doc = "docs/mt-ckpt-reshard.md",
};

int main(int argc, char **argv)
{
	mt_tool_unavailable(&info, argc, argv);
}
