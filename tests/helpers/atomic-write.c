/* atomic-write PATH: copy stdin to PATH through the atomic writer, committing
 * only at end of input. Used by tests/foundation.bats to kill a writer
 * mid-write and check that no partial file is left behind. */
#include <stdio.h>
#include <unistd.h>

#include "../../bin/tool.h"
#include "base/atomic.h"

static const struct mt_tool_info info = { "atomic-write", "test helper", NULL, NULL, NULL };

int main(int argc, char **argv)
{
	struct mt_atomic w;
	struct mt_err e = { 0 };
	char buf[4096];
	ssize_t n;

	mt_tool_start(&info);
	if (argc != 2)
		mt_die(MT_EXIT_USAGE, "usage: atomic-write PATH < data");
	if (mt_atomic_open(&w, argv[1], &e))
		mt_die_err(&e);
	while ((n = read(0, buf, sizeof(buf))) > 0)
		if (mt_atomic_write(&w, buf, (size_t)n, &e))
			mt_die_err(&e);
	if (n < 0)
		mt_die(MT_EXIT_IO, "cannot read stdin");
	if (mt_atomic_commit(&w, &e))
		mt_die_err(&e);
	return 0;
}
