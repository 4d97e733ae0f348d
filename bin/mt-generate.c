/* mt-generate: generate text from a checkpoint.
 *
 * Not implemented in this version: the tool answers --help with its planned
 * usage and otherwise exits 2 saying it is not available yet. */
#include "tool.h"

static const char *const synopsis[] = {
	"--load CKPT [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [PROMPT...]",
	"--load CKPT --server PORT",
	NULL,
};

static const struct mt_tool_info info = {
	.name = "mt-generate",
	.summary = "generate text from a checkpoint",
	.synopsis = synopsis,
	.description = "planned; not available in this version",
	.doc = "docs/mt-generate.md",
};

int main(int argc, char **argv)
{
	mt_tool_unavailable(&info, argc, argv);
}
