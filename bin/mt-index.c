/* mt-index: inspect, verify, merge indexed datasets and build the sample indices of a training split.
 *
 * Not implemented in this version: the tool answers --help with its planned
 * usage and otherwise exits 2 saying it is not available yet. */
#include "tool.h"

static const char *const synopsis[] = {
	"stat [--json] PREFIX...",
	"verify [--vocab-size N] PREFIX...",
	"merge --output-prefix OUT PREFIX...",
	"cat [--docs A:B] PREFIX",
	"build --data-path PATH... --split S --seq-length L --seed S --train-samples N",
	NULL,
};

static const struct mt_tool_info info = {
	.name = "mt-index",
	.summary = "inspect, verify, merge indexed datasets and build the sample indices of a training split",
	.synopsis = synopsis,
	.description = "planned; not available in this version",
	.doc = "docs/mt-index.md",
};

int main(int argc, char **argv)
{
	mt_tool_unavailable(&info, argc, argv);
}
