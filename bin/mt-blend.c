/* mt-blend: mix several datasets by weight into one sample stream, with a plan to read
 * before spending GPU hours, and Megatron's BlendedDataset index files. */
#include <stdio.h>
#include <string.h>

#include "data/dataplan.h"
#include "dataopts.h"
#include "tool.h"

static const char *const synopsis[] = {
	"plan --data-path \"W1 P1 W2 P2...\" --seq-length L (--train-samples N | --train-iters N --global-batch-size B) [--json]",
	"build --data-path \"W1 P1 W2 P2...\" --seq-length L (--train-samples N | ...) [--data-cache-path DIR]",
	NULL,
};

static const struct mt_tool_info info = {
	.name = "mt-blend",
	.summary = "mix several datasets by weight into one sample stream, with a plan to read first",
	.synopsis = synopsis,
	.description =
		"plan prints, for each split, every source's weight, documents, tokens, the samples the blend\n"
		"asks of it, how many epochs of it that means, and warnings for oversampled or unused sources;\n"
		"build also writes the index caches Megatron-LM writes (GPTDataset per source, BlendedDataset\n"
		"per split), identical to Megatron-core's",
	.doc = "docs/mt-blend.md",
};

enum { O_JSON = 256 };

static const struct mt_option opts[] = {
	MT_DATA_OPTIONS,
	{ "json", 0, MT_ARG_NONE, O_JSON, NULL, "print the plan as JSON" },
	{ 0 },
};

int main(int argc, char **argv)
{
	struct mt_opt o;
	struct mt_dataopts d;
	struct mt_plan p;
	struct mt_err e = { 0 };
	int id, json = 0, write;

	mt_tool_start(&info);
	mt_tool_command_first(argc, argv, (const char *const[]){ "plan", "build", NULL });
	if (argc > 1 && (!strcmp(argv[1], "plan") || !strcmp(argv[1], "build"))) {
		write = !strcmp(argv[1], "build");
		argv[1] = argv[0];
		argv++;
		argc--;
	} else {
		mt_opt_init(&o, &info, opts, argc, argv);
		while ((id = mt_opt_next(&o)) != MT_OPT_END)
			mt_tool_common(&o, id);
		mt_die_usage(&o, argc > 1 ? "unknown command '%s' (plan or build)" : "a command is required: plan or build",
			     argc > 1 ? argv[1] : "");
	}
	if (mt_opt_init(&o, &info, opts, argc, argv))
		mt_die_err(&o.err);
	mt_dataopts_init(&d);
	while ((id = mt_opt_next(&o)) != MT_OPT_END) {
		mt_tool_common(&o, id);
		if (mt_dataopts_take(&d, &o, id))
			continue;
		if (id == O_JSON)
			json = 1;
		else if (id == MT_OPT_ARG)
			mt_die_usage(&o, "unexpected argument '%s'", o.arg);
	}
	mt_dataopts_finish(&d, &o);
	if (mt_plan_make(&d.args, write ? MT_PLAN_WRITE : 0, &p, &e))
		mt_die_err(&e);
	mt_dataopts_print_plan(&d, &p, json, stdout);
	if (write && !o.quiet)
		fprintf(stderr, "mt-blend: index caches written to %s\n",
			d.cache ? d.cache : "each dataset's cache/GPTDataset_indices (blends are cached only with --data-cache-path)");
	mt_plan_free(&p);
	mt_dataopts_free(&d);
	return fflush(stdout) ? MT_EXIT_IO : 0;
}
