/* mt-eval: perplexity and cloze accuracy of checkpoints, with a watch mode for cron.
 *
 * Not implemented in this version: the tool answers --help with its planned
 * usage and otherwise exits 2 saying it is not available yet. */
#include "tool.h"

static const char *const synopsis[] = {
	"--load CKPT [--data-path PATH...] [--wikitext FILE] [--lambada FILE] [--json]",
	"--watch DIR --ledger FILE [task options]",
	NULL,
};

static const struct mt_tool_info info = {
	.name = "mt-eval",
	.summary = "perplexity and cloze accuracy of checkpoints, with a watch mode for cron",
	.synopsis = synopsis,
	.description = "planned; not available in this version",
	.doc = "docs/mt-eval.md",
};

int main(int argc, char **argv)
{
	mt_tool_unavailable(&info, argc, argv);
}
