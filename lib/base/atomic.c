/* atomic.c: tmp + fsync + rename output (see atomic.h). Also keeps a small
 * registry of live temporary names so a signal handler can remove them, the
 * numbered kill points tests use to stop a writer between any two of its steps, and
 * the sweep of temporaries that killed writers left. */
#include "base/atomic.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/files.h"
#include "base/knobs.h"

#define MT_ATOMIC_SLOTS 256
#define MT_ATOMIC_BUF (1 << 20)
#define MT_ATOMIC_WRITEBACK (8 << 20) /* start write-back every this many bytes */

static char *volatile live[MT_ATOMIC_SLOTS];
static long kill_at = -1; /* MT_ATOMIC_KILL_AT, read once; 0: off */
static long steps;
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;

static int live_add(char *tmp)
{
	int slot = -1;

	pthread_mutex_lock(&live_lock);
	for (int i = 0; i < MT_ATOMIC_SLOTS; i++)
		if (!live[i]) {
			live[i] = tmp;
			slot = i;
			break;
		}
	pthread_mutex_unlock(&live_lock);
	return slot;
}

static void live_del(int slot)
{
	if (slot < 0)
		return;
	pthread_mutex_lock(&live_lock);
	live[slot] = NULL;
	pthread_mutex_unlock(&live_lock);
}

void mt_atomic_unlink_all(void)
{
	for (int i = 0; i < MT_ATOMIC_SLOTS; i++) {
		char *t = live[i];
		if (t)
			unlink(t);
	}
}

void mt_atomic_step(const char *what)
{
	long n, at = __atomic_load_n(&kill_at, __ATOMIC_RELAXED);

	if (at < 0) {
		at = (long)mt_knob_int(MT_KNOB_ATOMIC_KILL_AT);
		__atomic_store_n(&kill_at, at > 0 ? at : 0, __ATOMIC_RELAXED);
	}
	if (at <= 0)
		return;
	n = __atomic_add_fetch(&steps, 1, __ATOMIC_SEQ_CST);
	if (mt_knob_set(MT_KNOB_ATOMIC_KILL_LOG)) {
		char line[512];
		int len = snprintf(line, sizeof(line), "atomic step %ld: %s\n", n, what);
		if (len > 0 && write(2, line, (size_t)len < sizeof(line) ? (size_t)len : sizeof(line) - 1) < 0)
			(void)0;
	}
	if (n == at)
		raise(SIGKILL);
}

static void clear(struct mt_atomic *w)
{
	live_del(w->slot);
	free(w->path);
	free(w->tmp);
	free(w->vbuf);
	memset(w, 0, sizeof(*w));
	w->slot = -1;
}

int mt_atomic_sweep(const char *path)
{
	char *copy = strdup(path), *copy2 = strdup(path);
	const char *dir, *base;
	size_t nb;
	DIR *d;
	struct dirent *e;
	int removed = 0;

	if (!copy || !copy2)
		goto out;
	dir = dirname(copy);
	base = basename(copy2);
	nb = strlen(base);
	if (!(d = opendir(dir)))
		goto out;
	while ((e = readdir(d))) {
		const char *s = e->d_name + nb, *digits;
		char *end, *p;
		long pid;
		struct stat st;
		if (strncmp(e->d_name, base, nb) || strncmp(s, ".tmp.", 5))
			continue;
		digits = s + 5;
		if (*digits < '1' || *digits > '9' || strspn(digits, "0123456789") != strlen(digits))
			continue;
		errno = 0;
		pid = strtol(digits, &end, 10);
		if (errno || *end || pid <= 0 || pid > INT32_MAX || pid == (long)getpid())
			continue;
		/* gone from this machine: ESRCH (EPERM is someone else's live process) */
		if (!(kill((pid_t)pid, 0) != 0 && errno == ESRCH))
			continue;
		if (!(p = malloc(strlen(dir) + strlen(e->d_name) + 2)))
			break;
		sprintf(p, "%s/%s", dir, e->d_name);
		/* regular files only: the checkpoint code sweeps its own directories */
		if (lstat(p, &st) == 0 && S_ISREG(st.st_mode) && unlink(p) == 0)
			removed++;
		free(p);
	}
	closedir(d);
out:
	free(copy);
	free(copy2);
	return removed;
}

int mt_atomic_open(struct mt_atomic *w, const char *path, struct mt_err *err)
{
	size_t n = strlen(path) + 32;
	int fd;

	mt_atomic_sweep(path);

	memset(w, 0, sizeof(*w));
	w->slot = -1;
	w->path = strdup(path);
	w->tmp = malloc(n);
	w->vbuf = malloc(MT_ATOMIC_BUF);
	if (!w->path || !w->tmp || !w->vbuf) {
		clear(w);
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	snprintf(w->tmp, n, "%s.tmp.%ld", path, (long)getpid());
	fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0) {
		mt_err_errno(err, MT_EXIT_IO, "cannot create '%s'", w->tmp);
		clear(w);
		return -1;
	}
	w->slot = live_add(w->tmp);
	mt_atomic_step(w->tmp); /* created */
	w->fp = fdopen(fd, "wb");
	if (!w->fp) {
		mt_err_errno(err, MT_EXIT_IO, "cannot create '%s'", w->tmp);
		close(fd);
		unlink(w->tmp);
		clear(w);
		return -1;
	}
	setvbuf(w->fp, w->vbuf, _IOFBF, MT_ATOMIC_BUF);
	return 0;
}

FILE *mt_atomic_file(struct mt_atomic *w) { return w->fp; }

/* Start writing back what is in the kernel's cache so far, and wait for nothing. A
 * hint: where the call does not exist or fails, the fsync at commit does it all. */
static int start_writeback(struct mt_atomic *w, struct mt_err *err)
{
	w->pending = 0;
#ifdef SYNC_FILE_RANGE_WRITE
	{
		off_t end;

		if (fflush(w->fp) != 0)
			return mt_err_errno(err, MT_EXIT_IO, "cannot write '%s'", w->tmp);
		end = ftello(w->fp);
		if (end < 0)
			return 0;
		if (end < (off_t)w->synced) /* the writer seeked back: start over */
			w->synced = 0;
		if (end > (off_t)w->synced &&
		    sync_file_range(fileno(w->fp), (off_t)w->synced, end - (off_t)w->synced, SYNC_FILE_RANGE_WRITE) == 0)
			w->synced = (long long)end;
	}
#else
	(void)err;
#endif
	return 0;
}

int mt_atomic_write(struct mt_atomic *w, const void *buf, size_t n, struct mt_err *err)
{
	if (n && fwrite(buf, 1, n, w->fp) != n)
		return mt_err_errno(err, MT_EXIT_IO, "cannot write '%s'", w->tmp);
	w->pending += n;
	if (w->pending >= MT_ATOMIC_WRITEBACK)
		return start_writeback(w, err);
	return 0;
}

void mt_atomic_sync_dir(const char *path)
{
	char *copy = strdup(path);

	if (!copy)
		return;
	mt_fsync_path(dirname(copy), 1); /* best effort: the data is already in place */
	free(copy);
}

int mt_atomic_commit(struct mt_atomic *w, struct mt_err *err)
{
	int fail = 0;

	if (!w->fp)
		return mt_err_set(err, MT_EXIT_IO, "internal: commit of a closed writer");
	if (fflush(w->fp) != 0 || ferror(w->fp))
		fail = mt_err_errno(err, MT_EXIT_IO, "cannot write '%s'", w->tmp);
	else if (fsync(fileno(w->fp)) != 0 && errno != EINVAL)
		fail = mt_err_errno(err, MT_EXIT_IO, "cannot sync '%s'", w->tmp);
	if (fclose(w->fp) != 0 && !fail)
		fail = mt_err_errno(err, MT_EXIT_IO, "cannot close '%s'", w->tmp);
	w->fp = NULL;
	if (!fail)
		mt_atomic_step(w->tmp); /* synced, not yet renamed */
	if (!fail && rename(w->tmp, w->path) != 0)
		fail = mt_err_errno(err, MT_EXIT_IO, "cannot rename '%s' to '%s'", w->tmp, w->path);
	if (fail) {
		unlink(w->tmp);
		clear(w);
		return -1;
	}
	mt_atomic_step(w->path); /* renamed, directory not yet synced */
	mt_atomic_sync_dir(w->path);
	clear(w);
	return 0;
}

void mt_atomic_abort(struct mt_atomic *w)
{
	if (w->fp) {
		fclose(w->fp);
		w->fp = NULL;
		unlink(w->tmp);
	}
	clear(w);
}

int mt_atomic_write_file(const char *path, const void *data, size_t n, struct mt_err *err)
{
	struct mt_atomic w;

	if (mt_atomic_open(&w, path, err))
		return -1;
	if (mt_atomic_write(&w, data, n, err) || mt_atomic_commit(&w, err)) {
		mt_atomic_abort(&w);
		return -1;
	}
	return 0;
}

int mt_atomic_same(const char *path, const void *const *parts, const size_t *lens, int nparts)
{
	mt_atomic_sweep(path); /* the caller is about to write path, or would have */
	struct stat st;
	size_t total = 0, at = 0;
	const unsigned char *m;
	int same = 1, fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	if (fd < 0)
		return 0;
	for (int i = 0; i < nparts; i++)
		total += lens[i];
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != (uint64_t)total || total == 0) {
		close(fd);
		return 0;
	}
	m = mmap(NULL, total, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return 0;
	for (int i = 0; i < nparts && same; i++) {
		same = memcmp(m + at, parts[i], lens[i]) == 0;
		at += lens[i];
	}
	munmap((void *)m, total);
	return same;
}
