/* files.c: small file-system helpers (see files.h). */
#include "base/files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mt_file_read(const char *path, char **text, size_t *len, struct mt_err *err)
{
	FILE *fp = fopen(path, "rb");
	char *buf = NULL;
	size_t n = 0, cap = 0, k;

	if (!fp)
		return mt_err_errno(err, MT_EXIT_IO, "cannot open '%s'", path);
	for (;;) {
		if (n + 65536 + 1 > cap) {
			char *nb = realloc(buf, cap = (n + 65536) * 2);
			if (!nb) {
				free(buf);
				fclose(fp);
				return mt_err_set(err, MT_EXIT_IO, "out of memory reading '%s'", path);
			}
			buf = nb;
		}
		k = fread(buf + n, 1, cap - n - 1, fp);
		n += k;
		if (k == 0)
			break;
	}
	if (ferror(fp)) {
		free(buf);
		fclose(fp);
		return mt_err_errno(err, MT_EXIT_IO, "cannot read '%s'", path);
	}
	fclose(fp);
	buf[n] = 0;
	*text = buf;
	if (len)
		*len = n;
	return 0;
}

char *mt_path_join(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *s = malloc(n);

	if (s)
		snprintf(s, n, "%s/%s", dir, name);
	return s;
}
