/* mt-blend: mix several datasets by weight into one sample stream, with a plan to read first.
 *
 * Not implemented in this version: the tool answers --help with its planned
 * usage and otherwise exits 2 saying it is not available yet. */
#include "tool.h"

static const char *const synopsis[] = {
	"plan --data-path \"W1 P1 W2 P2...\" [--json]",
	"build --data-path \"W1 P1 W2 P2...\" --seq-length L --train-samples N",
	NULL,
};

static const struct mt_tool_info info = {
	.name = "mt-blend",
	.summary = "mix several datasets by weight into one sample stream, with a plan to read first",
	.synopsis = synopsis,
	.description = "planned; not available in this version",
	.doc = "docs/mt-blend.md",
};

int main(int argc, char **argv)
{
	mt_tool_unavailable(&info, argc, argv);
}
