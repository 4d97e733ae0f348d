/* ledger.c: the lock, the repair on open and the one-write appends of a JSON-lines
 * ledger (see ledger.h). */
#include "eval/ledger.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/array.h"

static int add_key(struct mt_ledger *l, int64_t iteration, const char *task)
{
	char buf[256];

	if (mt_array_grow(&l->keys, &l->cap, l->nkeys + 1, sizeof(*l->keys), 64))
		return -1;
	snprintf(buf, sizeof(buf), "%lld\t%s", (long long)iteration, task);
	if (!(l->keys[l->nkeys] = strdup(buf)))
		return -1;
	l->nkeys++;
	return 0;
}

int mt_ledger_has(const struct mt_ledger *l, int64_t iteration, const char *task)
{
	char buf[256];

	snprintf(buf, sizeof(buf), "%lld\t%s", (long long)iteration, task);
	for (size_t i = 0; i < l->nkeys; i++)
		if (!strcmp(l->keys[i], buf))
			return 1;
	return 0;
}

/* the whole file, for the keys and the repair */
static int slurp_fd(int fd, char **out, size_t *n, const char *path, struct mt_err *err)
{
	struct stat st;
	char *buf;
	size_t got = 0;

	if (fstat(fd, &st))
		return mt_err_errno(err, MT_EXIT_IO, "cannot stat ledger '%s'", path);
	buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		return mt_err_set(err, MT_EXIT_IO, "out of memory reading ledger '%s'", path);
	while (got < (size_t)st.st_size) {
		ssize_t r = pread(fd, buf + got, (size_t)st.st_size - got, (off_t)got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			free(buf);
			return mt_err_errno(err, MT_EXIT_IO, "cannot read ledger '%s'", path);
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	buf[got] = '\0';
	*out = buf;
	*n = got;
	return 0;
}

int mt_ledger_open(struct mt_ledger *l, const char *path, int wait, struct mt_err *err)
{
	char *lock, *text = NULL;
	size_t n = 0, lines_end, start;

	memset(l, 0, sizeof(*l));
	l->fd = l->lockfd = -1;
	if (!(l->path = strdup(path)) || !(lock = malloc(strlen(path) + 6))) {
		free(l->path);
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	sprintf(lock, "%s.lock", path);
	l->lockfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (l->lockfd < 0) {
		mt_err_errno(err, MT_EXIT_IO, "cannot open lock file '%s'", lock);
		free(lock);
		goto fail;
	}
	while (flock(l->lockfd, LOCK_EX | (wait ? 0 : LOCK_NB))) {
		if (errno == EINTR)
			continue;
		if (errno == EWOULDBLOCK) {
			free(lock);
			mt_ledger_close(l);
			return 1;
		}
		mt_err_errno(err, MT_EXIT_IO, "cannot lock '%s'", lock);
		free(lock);
		goto fail;
	}
	free(lock);
	l->fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (l->fd < 0) {
		mt_err_errno(err, MT_EXIT_IO, "cannot open ledger '%s'", path);
		goto fail;
	}
	if (slurp_fd(l->fd, &text, &n, path, err))
		goto fail;
	/* a torn last line: cut it off (we hold the lock, no one else appends) */
	lines_end = n;
	while (lines_end > 0 && text[lines_end - 1] != '\n')
		lines_end--;
	if (lines_end < n) {
		if (ftruncate(l->fd, (off_t)lines_end) || fsync(l->fd)) {
			mt_err_errno(err, MT_EXIT_IO, "cannot repair the torn last line of ledger '%s'", path);
			goto fail;
		}
		l->repaired = (int64_t)(n - lines_end);
	}
	for (start = 0; start < lines_end;) {
		char *nl = memchr(text + start, '\n', lines_end - start);
		size_t len = (size_t)(nl - (text + start));
		json_t *j, *it, *task;
		if (len > 0) {
			j = json_loadb(text + start, len, 0, NULL);
			it = j ? json_object_get(j, "iteration") : NULL;
			task = j ? json_object_get(j, "task") : NULL;
			if (json_is_integer(it) && json_is_string(task)) {
				/* a failure is keyed by what failed: "failed#FINGERPRINT" */
				json_t *fp = json_object_get(j, "fingerprint");
				char key[512];
				snprintf(key, sizeof(key), "%s%s%s", json_string_value(task), json_is_string(fp) ? "#" : "",
					 json_is_string(fp) ? json_string_value(fp) : "");
				if (add_key(l, json_integer_value(it), key)) {
					json_decref(j);
					mt_err_set(err, MT_EXIT_IO, "out of memory");
					goto fail;
				}
			} else {
				l->ignored++;
			}
			json_decref(j);
		}
		start += len + 1;
	}
	free(text);
	return 0;
fail:
	free(text);
	mt_ledger_close(l);
	return -1;
}

void mt_ledger_close(struct mt_ledger *l)
{
	if (l->fd >= 0)
		close(l->fd);
	if (l->lockfd >= 0)
		close(l->lockfd); /* releases the lock */
	for (size_t i = 0; i < l->nkeys; i++)
		free(l->keys[i]);
	free(l->keys);
	free(l->path);
	memset(l, 0, sizeof(*l));
	l->fd = l->lockfd = -1;
}

int mt_ledger_append(struct mt_ledger *l, int64_t iteration, const char *task, const char *line,
		     struct mt_err *err)
{
	size_t n = strlen(line);
	char *buf = malloc(n + 1);
	ssize_t w;

	if (!buf)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	memcpy(buf, line, n);
	buf[n] = '\n';
	do
		w = write(l->fd, buf, n + 1);
	while (w < 0 && errno == EINTR);
	free(buf);
	if (w < 0)
		return mt_err_errno(err, MT_EXIT_IO, "cannot append to ledger '%s'", l->path);
	if ((size_t)w != n + 1) {
		/* a short write (a full disk): take the partial line back so the file stays whole */
		struct stat st;
		if (fstat(l->fd, &st) == 0)
			(void)!ftruncate(l->fd, st.st_size - w);
		return mt_err_set(err, MT_EXIT_IO, "cannot append to ledger '%s': short write", l->path);
	}
	if (fsync(l->fd))
		return mt_err_errno(err, MT_EXIT_IO, "cannot fsync ledger '%s'", l->path);
	if (add_key(l, iteration, task))
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	return 0;
}
