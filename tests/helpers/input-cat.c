/* input-cat [-q] FILE...: print every member of every input through the input
 * layer, with the progress meter on stderr. Lets the Bats tests drive the
 * input layer and the meter the way a tool does. */
#include <stdio.h>
#include <stdlib.h>

#include "../../bin/tool.h"
#include "base/input.h"
#include "base/progress.h"

static const char *const synopsis[] = { "[-q] FILE...", NULL };
static const struct mt_tool_info info = { "input-cat", "test helper", synopsis, NULL, NULL };

int main(int argc, char **argv)
{
	struct mt_opt o;
	struct mt_err e = { 0 };
	struct mt_progress p;
	const char *files[64];
	int nfiles = 0, id;
	int64_t done = 0;
	static char buf[1 << 16];

	mt_tool_start(&info);
	mt_opt_init(&o, &info, NULL, argc, argv);
	while ((id = mt_opt_next(&o)) != MT_OPT_END) {
		mt_tool_common(&o, id);
		if (id == MT_OPT_ARG && nfiles < 64)
			files[nfiles++] = o.arg;
	}
	for (int i = 0; i < nfiles; i++) {
		struct mt_input *in;
		int r;

		if (mt_input_open(&in, files[i], &e))
			mt_die_err(&e);
		mt_progress_init(&p, "input-cat", "members", mt_input_size(in), o.quiet);
		while ((r = mt_input_next(in, &e)) == 1) {
			ssize_t n;
			while ((n = mt_input_read(in, buf, sizeof(buf), &e)) > 0) {
				fwrite(buf, 1, (size_t)n, stdout);
				done += n;
				mt_progress_update(&p, mt_input_consumed(in), done);
			}
			if (n < 0)
				mt_die_err(&e);
		}
		if (r < 0)
			mt_die_err(&e);
		mt_progress_done(&p);
		mt_input_close(in);
	}
	return fflush(stdout) ? MT_EXIT_IO : 0;
}
