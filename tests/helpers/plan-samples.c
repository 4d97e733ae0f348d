/* plan-samples K [mt-blend options]: print the first K samples of the train split as
 * mt-train reads them ("sample IDX t0 ... t_L", -1 for padding), in the format of
 * tests/reference/megatron_indices.py gpt --print-samples. */
#include <stdio.h>
#include <stdlib.h>

#include "../../bin/dataopts.h"
#include "../../bin/tool.h"

static const char *const synopsis[] = { "K [data options]", NULL };
static const struct mt_tool_info info = { "plan-samples", "test helper", synopsis, NULL, NULL };
static const struct mt_option opts[] = { MT_DATA_OPTIONS, { 0 } };

int main(int argc, char **argv)
{
	struct mt_opt o;
	struct mt_dataopts d;
	struct mt_plan p;
	struct mt_err e = { 0 };
	long long k = -1;
	int id;
	int32_t *buf;

	mt_tool_start(&info);
	mt_opt_init(&o, &info, opts, argc, argv);
	mt_dataopts_init(&d);
	while ((id = mt_opt_next(&o)) != MT_OPT_END) {
		mt_tool_common(&o, id);
		if (!mt_dataopts_take(&d, &o, id) && id == MT_OPT_ARG)
			k = atoll(o.arg);
	}
	mt_dataopts_finish(&d, &o);
	if (mt_plan_make(&d.args, MT_PLAN_KEEP, &p, &e))
		mt_die_err(&e);
	buf = malloc((size_t)(d.seq_length + 1) * sizeof(*buf));
	for (long long i = 0; i < k; i++) {
		if (mt_plan_sample(&p, MT_SPLIT_TRAIN, i, buf, &e))
			mt_die_err(&e);
		printf("sample %lld", i);
		for (long long j = 0; j <= d.seq_length; j++)
			printf(" %d", buf[j]);
		putchar('\n');
	}
	free(buf);
	mt_plan_free(&p);
	mt_dataopts_free(&d);
	return 0;
}
