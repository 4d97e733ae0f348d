/* files.c: small file-system helpers (see files.h). */
#include "base/files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* name (relative to dfd) and, for a directory, everything below it */
static int rm_tree_at(int dfd, const char *name)
{
	int fd, rc = 0;
	DIR *d;
	struct dirent *e;

	if (unlinkat(dfd, name, 0) == 0 || errno == ENOENT)
		return 0;
	if (errno != EISDIR && errno != EPERM)
		return -1;
	/* a few passes: a writer that is being stopped may still add a file */
	for (int pass = 0; pass < 3; pass++) {
		fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return -1;
		d = fdopendir(fd);
		if (!d) {
			close(fd);
			return -1;
		}
		while ((e = readdir(d)))
			if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && rm_tree_at(dirfd(d), e->d_name))
				rc = -1;
		closedir(d);
		if (rc)
			return -1;
		if (unlinkat(dfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
			return 0;
		if (errno != ENOTEMPTY && errno != EEXIST)
			return -1;
	}
	return -1;
}

int mt_rm_tree(const char *path)
{
	return rm_tree_at(AT_FDCWD, path);
}

int mt_fsync_path(const char *path, int dir)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | (dir ? O_DIRECTORY : 0)), rc = 0;

	if (fd < 0)
		return -1;
	if (fsync(fd) != 0 && !(dir && (errno == EINVAL || errno == EBADF)))
		rc = -1;
	close(fd);
	return rc;
}
