/* idx-dump PREFIX: print each document of an indexed dataset on one line, its
 * sequences separated by " | " and ids by spaces (the format of
 * tests/reference/ref-encode.js), so tests can diff against reference ids. */
#include <stdio.h>

#include "../../bin/tool.h"
#include "data/idx.h"

static const struct mt_tool_info info = { "idx-dump", "test helper", NULL, NULL, NULL };

int main(int argc, char **argv)
{
	struct mt_idx *ix;
	struct mt_err e = { 0 };

	mt_tool_start(&info);
	if (argc != 2)
		mt_die(MT_EXIT_USAGE, "usage: idx-dump PREFIX");
	if (mt_idx_open(&ix, argv[1], &e))
		mt_die_err(&e);
	for (int64_t d = 0; d + 1 < ix->ndoc_idx; d++) {
		for (int64_t s = mt_idx_doc(ix, d); s < mt_idx_doc(ix, d + 1); s++) {
			if (s > mt_idx_doc(ix, d))
				fputs(" | ", stdout);
			for (int32_t j = 0; j < mt_idx_seq_len(ix, s); j++)
				printf(j ? " %lld" : "%lld", (long long)mt_idx_token(ix, s, j));
		}
		putchar('\n');
	}
	mt_idx_close(ix);
	return fflush(stdout) ? MT_EXIT_IO : 0;
}
