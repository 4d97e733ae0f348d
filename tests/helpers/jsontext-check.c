/* jsontext-check [KEY]: for each line of stdin print "err" if lib/base/jsontext.c refuses
 * it, "missing" or "nottext" for the key, or the key's parts as hex joined by "|".
 * tests/reference/json-check.py prints the same from Python's json module. */
#include <stdio.h>

#include "../../bin/tool.h"
#include "base/input.h"
#include "base/jsontext.h"

static const struct mt_tool_info info = { "jsontext-check", "test helper", NULL, NULL, NULL };

int main(int argc, char **argv)
{
	const char *keys[1] = { argc > 1 ? argv[1] : "text" };
	struct mt_jsontext j = { 0 };
	struct mt_input *in;
	struct mt_err e = { 0 };
	char *line;
	size_t len;

	mt_tool_start(&info);
	if (mt_input_open(&in, "-", &e) || mt_input_next(in, &e) < 0)
		mt_die_err(&e);
	while (mt_input_getline(in, &line, &len, &e) == 1) {
		if (mt_jsontext_parse(&j, line, len, keys, 1, &e)) {
			puts("err");
			continue;
		}
		if (j.count[0] == MT_JSONTEXT_MISSING || j.count[0] == MT_JSONTEXT_NOT_TEXT) {
			puts(j.count[0] == MT_JSONTEXT_MISSING ? "missing" : "nottext");
			continue;
		}
		for (int i = 0; i < j.count[0]; i++) {
			int q = j.first[0] + i;
			if (i)
				putchar('|');
			for (size_t k = 0; k < j.len[q]; k++)
				printf("%02x", (unsigned char)j.buf[j.off[q] + k]);
		}
		putchar('\n');
	}
	mt_jsontext_free(&j);
	mt_input_close(in);
	return 0;
}
