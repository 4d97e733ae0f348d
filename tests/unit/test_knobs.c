/* Unit tests for lib/base/knobs.c: the table's rows, and each way of reading a value. */
#include <stdlib.h>
#include <string.h>

#include "base/knobs.h"
#include "tap.h"

static void test_knobs_table(void)
{
	int good = 1, unique = 1, hooks = 1;

	for (int k = 0; k < MT_KNOB_COUNT; k++) {
		const struct mt_knob_info *i = mt_knob_info((enum mt_knob)k);
		int hook;
		if (!i->name || strncmp(i->name, "MT_", 3) || !i->def || !*i->def || !i->meaning || !*i->meaning) {
			printf("#   row %d incomplete\n", k);
			good = 0;
			continue;
		}
		for (int j = 0; j < k; j++)
			if (mt_knob_info((enum mt_knob)j)->name && !strcmp(mt_knob_info((enum mt_knob)j)->name, i->name))
				unique = 0;
		hook = !strncmp(i->name, "MT_TEST_", 8) || !strncmp(i->name, "MT_ATOMIC_KILL_", 15);
		if (hook != i->test) {
			printf("#   %s: test hook %d, expected %d\n", i->name, i->test, hook);
			hooks = 0;
		}
	}
	ok(good, "every row has a name, a default and a meaning");
	ok(unique, "names are unique");
	ok(hooks, "the MT_TEST_* and MT_ATOMIC_KILL_* rows, and only they, are test hooks");
	is_str(mt_knob_info(MT_KNOB_CUDA_WORKSPACE_MB)->name, "MT_CUDA_WORKSPACE_MB", "rows sit at their enum");
	is_str(mt_knob_info(MT_KNOB_TEST_HF_EXPORT_CORRUPT)->name, "MT_TEST_HF_EXPORT_CORRUPT", "the last row too");
}

static void test_knobs_read(void)
{
	unsetenv("MT_TP_OVERLAP");
	ok(mt_knob_on(MT_KNOB_TP_OVERLAP) && !mt_knob_set(MT_KNOB_TP_OVERLAP) && !mt_knob_str(MT_KNOB_TP_OVERLAP),
	   "unset: on, not set, no value");
	setenv("MT_TP_OVERLAP", "0", 1);
	ok(!mt_knob_on(MT_KNOB_TP_OVERLAP), "\"0\": off");
	setenv("MT_TP_OVERLAP", "00", 1);
	ok(mt_knob_on(MT_KNOB_TP_OVERLAP), "only exactly \"0\" is off");
	setenv("MT_TP_OVERLAP", "", 1);
	ok(mt_knob_on(MT_KNOB_TP_OVERLAP) && mt_knob_set(MT_KNOB_TP_OVERLAP), "empty: on, but set");
	unsetenv("MT_TP_OVERLAP");

	unsetenv("MT_CUDA_EQUAL_CHUNKS");
	is_int(mt_knob_int(MT_KNOB_CUDA_EQUAL_CHUNKS), 1, "unset: the row's default");
	setenv("MT_CUDA_EQUAL_CHUNKS", "2", 1);
	is_int(mt_knob_int(MT_KNOB_CUDA_EQUAL_CHUNKS), 2, "set: its value");
	setenv("MT_CUDA_EQUAL_CHUNKS", "", 1);
	is_int(mt_knob_int(MT_KNOB_CUDA_EQUAL_CHUNKS), 0, "set empty: 0, as atoi reads it");
	unsetenv("MT_CUDA_EQUAL_CHUNKS");
	unsetenv("MT_TEST_HANG_STEP");
	is_int(mt_knob_int(MT_KNOB_TEST_HANG_STEP), -1, "a negative default");
	setenv("MT_TEST_HANG_STEP", "5000000000", 1);
	is_int(mt_knob_int(MT_KNOB_TEST_HANG_STEP), 5000000000LL, "64-bit values");
	unsetenv("MT_TEST_HANG_STEP");

	setenv("MT_ATTN_BWD7", "1", 1);
	ok(mt_knob_is(MT_KNOB_ATTN_BWD7, "1") && !mt_knob_is(MT_KNOB_ATTN_BWD7, "0"), "is: exact match");
	unsetenv("MT_ATTN_BWD7");
	ok(!mt_knob_is(MT_KNOB_ATTN_BWD7, "1"), "is: unset matches nothing");
}

int main(void)
{
	test_knobs_table();
	test_knobs_read();
	return tap_done();
}
