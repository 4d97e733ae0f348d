/* mt-tokenize: turn raw text into token ids in Megatron-compatible indexed datasets.
 *
 * Not implemented in this version: the tool answers --help with its planned
 * usage and otherwise exits 2 saying it is not available yet. */
#include "tool.h"

static const char *const synopsis[] = {
	"--input FILE... --output-prefix PREFIX --tokenizer-type TYPE [--json-keys KEY...] [--append-eod] [--workers N]",
	NULL,
};

static const struct mt_tool_info info = {
	.name = "mt-tokenize",
	.summary = "turn raw text into token ids in Megatron-compatible indexed datasets",
	.synopsis = synopsis,
	.description = "planned; not available in this version",
	.doc = "docs/mt-tokenize.md",
};

int main(int argc, char **argv)
{
	mt_tool_unavailable(&info, argc, argv);
}
