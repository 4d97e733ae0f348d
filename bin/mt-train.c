/* mt-train: train a GPT on CPU or GPUs with HDF5 checkpoints.
 *
 * Not implemented in this version: the tool answers --help with its planned
 * usage and otherwise exits 2 saying it is not available yet. */
#include "tool.h"

static const char *const synopsis[] = {
	"[--config FILE] --num-layers N --hidden-size H --num-attention-heads A --seq-length L (--data-path PATH... | --mock-data) [--save DIR] [--load DIR]",
	NULL,
};

static const struct mt_tool_info info = {
	.name = "mt-train",
	.summary = "train a GPT on CPU or GPUs with HDF5 checkpoints",
	.synopsis = synopsis,
	.description = "planned; not available in this version",
	.doc = "docs/mt-train.md",
};

int main(int argc, char **argv)
{
	mt_tool_unavailable(&info, argc, argv);
}
