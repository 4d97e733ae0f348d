/* ckpt.c: the directory of HDF5 checkpoints (see ckpt.h; the layout is in docs/formats.md
 * "Checkpoints"): the names of iteration directories, files and parts, the latest
 * markers, the temporary directory of a save, its commit (install, markers, keep-last
 * and the removal of what killed saves left) or abandon, the list of complete
 * checkpoints and where a reader falls back to. No HDF5 calls here: writing and reading
 * the files is ckpt_write.c, ckpt_read.c, ckpt_inspect.c and ckpt_set.c. */
#include "ckpt/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/atomic.h"
#include "base/files.h"
#include "base/log.h"
#include "ckpt/ckpt_dir.h"
#include "model/config.h"

/* ---- names and paths ---------------------------------------------------------------- */

int mt_ckpt_iter_dir(char *out, size_t n, const char *dir, int64_t iteration, struct mt_err *err)
{
	if (iteration < 0)
		return mt_err_set(err, MT_EXIT_USAGE, "checkpoint iteration %lld is negative", (long long)iteration);
	if ((size_t)snprintf(out, n, "%s/iter_%07lld", dir, (long long)iteration) >= n)
		return mt_err_set(err, MT_EXIT_IO, "checkpoint path too long: '%s'", dir);
	return 0;
}

int mt_ckpt_file_path(char *out, size_t n, const char *iterdir, int shard, int nshards,
		      struct mt_err *err)
{
	int len;

	if (nshards < 1 || shard < 0 || shard >= nshards)
		return mt_err_set(err, MT_EXIT_USAGE, "checkpoint shard %d of %d does not exist", shard, nshards);
	if (nshards == 1)
		len = snprintf(out, n, "%s/model.h5", iterdir);
	else
		len = snprintf(out, n, "%s/model-%05d-of-%05d.h5", iterdir, shard + 1, nshards);
	if (len < 0 || (size_t)len >= n)
		return mt_err_set(err, MT_EXIT_IO, "checkpoint path too long: '%s'", iterdir);
	return 0;
}

/* "iter_0000500" and what follows it: the iteration, and a pointer past the digits.
 * Only the names mt_ckpt_iter_dir makes count (7 digits at least, no extra zeros), so
 * a user's "iter_5" or "iter_final" is never taken for a checkpoint. */
static const char *parse_iter_name(const char *name, int64_t *iteration)
{
	const char *p = name + 5;
	char canon[32];
	int64_t v = 0;
	size_t nd = 0;

	if (strncmp(name, "iter_", 5) != 0)
		return NULL;
	while (p[nd] >= '0' && p[nd] <= '9') {
		if (nd >= 18)
			return NULL;
		v = v * 10 + (p[nd] - '0');
		nd++;
	}
	if (nd == 0)
		return NULL;
	snprintf(canon, sizeof(canon), "%07lld", (long long)v);
	if (strlen(canon) != nd || strncmp(canon, p, nd) != 0)
		return NULL;
	*iteration = v;
	return p + nd;
}

const char *mt_ckpt_base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s ? s + 1 : path;
}

/* The iteration a directory's name says (iter_N), else -1. Trailing slashes allowed. */
int64_t mt_ckpt_iteration_of_dir(const char *dir)
{
	char copy[PATH_CAP];
	size_t n = strlen(dir);
	const char *rest;
	int64_t it;

	if (n == 0 || n >= sizeof(copy))
		return -1;
	memcpy(copy, dir, n + 1);
	while (n > 1 && copy[n - 1] == '/')
		copy[--n] = '\0';
	rest = parse_iter_name(mt_ckpt_base_name(copy), &it);
	return rest && !*rest ? it : -1;
}

int mt_ckpt_is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The HDF5 file behind what the readers are given: ITERDIR/model.h5, the file itself, or
 * for a checkpoint directory the model.h5 of the iteration its latest marker names. */
int mt_ckpt_model_file(const char *path, char *out, size_t n, struct mt_err *err)
{
	struct stat st;
	char iter[PATH_CAP];
	int64_t it;

	if (stat(path, &st) != 0)
		return mt_err_errno(err, MT_EXIT_IO, "cannot open checkpoint '%s'", path);
	if (!S_ISDIR(st.st_mode)) {
		if ((size_t)snprintf(out, n, "%s", path) >= n)
			return mt_err_set(err, MT_EXIT_IO, "checkpoint path too long: '%s'", path);
		return 0;
	}
	if (mt_ckpt_file_path(out, n, path, 0, 1, err))
		return -1;
	if (stat(out, &st) == 0)
		return 0;
	if (mt_ckpt_latest(path, &it, err))
		return -1;
	if (it < 0) /* no marker either: the caller reports the missing model.h5 */
		return 0;
	return mt_ckpt_iter_dir(iter, sizeof(iter), path, it, err) || mt_ckpt_file_path(out, n, iter, 0, 1, err) ? -1 : 0;
}

/* ---- file system ---------------------------------------------------------------------- */

int mt_ckpt_mkdir_p(const char *dir, struct mt_err *err)
{
	char p[PATH_CAP];
	size_t n = strlen(dir);

	if (n == 0 || n >= sizeof(p))
		return mt_err_set(err, MT_EXIT_IO, "bad checkpoint directory '%s'", dir);
	memcpy(p, dir, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (p[i] != '/' && p[i] != '\0')
			continue;
		p[i] = '\0';
		if (mkdir(p, 0777) != 0 && errno != EEXIST)
			return mt_err_errno(err, MT_EXIT_IO, "cannot create directory '%s'", p);
		p[i] = i < n ? '/' : '\0';
	}
	if (!mt_ckpt_is_dir(dir))
		return mt_err_set(err, MT_EXIT_IO, "cannot create directory '%s': not a directory", dir);
	return 0;
}

/* Move the finished temporary directory to its final name. An existing final directory
 * (the same iteration saved again) is swapped out in one step where the file system
 * can (renameat2 RENAME_EXCHANGE), so the name never disappears; the old one ends up
 * under the temporary name and is removed. */
static int install_dir(const char *tmp, const char *final, struct mt_err *err)
{
	struct stat st;
	char old[PATH_CAP];

	if (lstat(final, &st) != 0) {
		if (errno != ENOENT)
			return mt_err_errno(err, MT_EXIT_IO, "cannot save checkpoint '%s'", final);
		if (rename(tmp, final) != 0)
			return mt_err_errno(err, MT_EXIT_IO, "cannot rename '%s' to '%s'", tmp, final);
		return 0;
	}
	if (!S_ISDIR(st.st_mode))
		return mt_err_set(err, MT_EXIT_IO, "cannot save checkpoint '%s': it exists and is not a directory", final);
#ifdef RENAME_EXCHANGE
	if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
		mt_rm_tree(tmp); /* best effort: a leftover is removed by the next save */
		return 0;
	}
	if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
		return mt_err_errno(err, MT_EXIT_IO, "cannot replace '%s' with '%s'", final, tmp);
#endif
	/* No atomic exchange here: move the old one aside first. A crash between the two
	 * renames leaves no DIR/iter_N until the next save (its data is in iter_N.old.<pid>). */
	if ((size_t)snprintf(old, sizeof(old), "%s.old.%ld", final, (long)getpid()) >= sizeof(old))
		return mt_err_set(err, MT_EXIT_IO, "checkpoint path too long: '%s'", final);
	mt_rm_tree(old);
	if (rename(final, old) != 0)
		return mt_err_errno(err, MT_EXIT_IO, "cannot rename '%s' to '%s'", final, old);
	if (rename(tmp, final) != 0) {
		mt_err_errno(err, MT_EXIT_IO, "cannot rename '%s' to '%s'", tmp, final);
		rename(old, final);
		return -1;
	}
	mt_rm_tree(old);
	return 0;
}

/* ---- the latest markers ------------------------------------------------------------------ */

/* Read a marker file: 1 with *iteration, 0 when it is not there, -1 on error. */
static int read_marker(const char *path, int64_t *iteration, struct mt_err *err)
{
	char buf[64], *s, *e;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	long long v;

	if (fd < 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			return 0;
		return mt_err_errno(err, MT_EXIT_IO, "cannot read '%s'", path);
	}
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return mt_err_errno(err, MT_EXIT_IO, "cannot read '%s'", path);
	buf[n] = '\0';
	for (s = buf; *s == ' ' || *s == '\t' || *s == '\n' || *s == '\r'; s++)
		;
	for (e = s + strlen(s); e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'); e--)
		;
	*e = '\0';
	if (!strcmp(s, "release"))
		return mt_err_set(err, MT_EXIT_DATA,
				  "checkpoint marker '%s' names a Megatron-LM release checkpoint, which mt cannot read", path);
	errno = 0;
	v = strtoll(s, &e, 10);
	if (!*s || *e || errno || v < 0 || n == (ssize_t)sizeof(buf) - 1)
		return mt_err_set(err, MT_EXIT_DATA, "checkpoint marker '%s' does not hold an iteration number", path);
	*iteration = v;
	return 1;
}

int mt_ckpt_latest(const char *dir, int64_t *iteration, struct mt_err *err)
{
	char p[PATH_CAP];
	int rc;

	*iteration = -1;
	if ((size_t)snprintf(p, sizeof(p), "%s/%s", dir, MT_CKPT_LATEST) >= sizeof(p))
		return mt_err_set(err, MT_EXIT_IO, "checkpoint path too long: '%s'", dir);
	if ((rc = read_marker(p, iteration, err)) != 0)
		return rc < 0 ? -1 : 0;
	snprintf(p, sizeof(p), "%s/%s", dir, MT_CKPT_MEGATRON_TRACKER);
	return read_marker(p, iteration, err) < 0 ? -1 : 0;
}

/* Megatron's tracker first, then DIR/latest, the commit point of a save: a crash between
 * the two leaves `latest` at the previous checkpoint, and both name complete ones. */
static int write_markers(const char *dir, int64_t iteration, struct mt_err *err)
{
	char p[PATH_CAP], text[32];
	int n;

	n = snprintf(text, sizeof(text), "%lld\n", (long long)iteration);
	/* Megatron writes str(iteration), no newline */
	if ((size_t)snprintf(p, sizeof(p), "%s/%s", dir, MT_CKPT_MEGATRON_TRACKER) >= sizeof(p))
		return mt_err_set(err, MT_EXIT_IO, "checkpoint path too long: '%s'", dir);
	if (mt_atomic_write_file(p, text, (size_t)n - 1, err))
		return -1;
	snprintf(p, sizeof(p), "%s/%s", dir, MT_CKPT_LATEST);
	return mt_atomic_write_file(p, text, (size_t)n, err);
}

/* ---- keep-last and leftovers -------------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

static int is_pid(const char *s)
{
	return *s && strspn(s, "0123456789") == strlen(s);
}

/* name is "<base>.tmp.<pid>": the pointer past base, else NULL. */
static const char *tmp_suffix(const char *name, const char *base)
{
	size_t n = strlen(base);

	return !strncmp(name, base, n) && !strncmp(name + n, ".tmp.", 5) && is_pid(name + n + 5) ? name + n : NULL;
}

/* After saving iteration `saved`: remove what killed saves left (iter_N.tmp.<pid> and
 * iter_N.old.<pid> of iterations up to `saved`, the markers' temporaries), and with
 * keep_last > 0, the complete iteration directories older than `saved` beyond the newest
 * keep_last - 1 of them. */
static int prune(const char *dir, int64_t saved, int keep_last, struct mt_err *err)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int64_t *old = NULL, it;
	size_t n = 0, cap = 0;
	char p[PATH_CAP];
	int rc = 0;

	if (!d)
		return mt_err_errno(err, MT_EXIT_IO, "checkpoint saved, but cannot list '%s'", dir);
	while ((e = readdir(d))) {
		const char *rest = parse_iter_name(e->d_name, &it);
		const char *tail;

		if (!rest) {
			/* a marker's temporary left by a killed save (atomic.c names them) */
			if (!(tail = tmp_suffix(e->d_name, MT_CKPT_LATEST)) &&
			    !(tail = tmp_suffix(e->d_name, MT_CKPT_MEGATRON_TRACKER)))
				continue;
			snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
			if (unlink(p) != 0 && errno != ENOENT && !rc)
				rc = mt_err_errno(err, MT_EXIT_IO, "checkpoint saved, but cannot remove the leftover '%s'", p);
			continue;
		}
		if (it > saved)
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		if (*rest == '\0') {
			if (it == saved || keep_last <= 0 || !mt_ckpt_is_dir(p))
				continue;
			if (n == cap) {
				int64_t *nv = realloc(old, (cap = cap ? 2 * cap : 16) * sizeof(*nv));
				if (!nv) {
					rc = mt_err_set(err, MT_EXIT_IO, "out of memory");
					break;
				}
				old = nv;
			}
			old[n++] = it;
			continue;
		}
		if (!tmp_suffix(rest, "") && !(strncmp(rest, ".old.", 5) == 0 && is_pid(rest + 5)))
			continue;
		if (mt_rm_tree(p) && !rc)
			rc = mt_err_errno(err, MT_EXIT_IO, "checkpoint saved, but cannot remove the leftover '%s'", p);
	}
	closedir(d);
	if (rc) {
		free(old);
		return -1;
	}
	if (n)
		qsort(old, n, sizeof(*old), cmp_i64);
	/* the new one counts as one of keep_last; delete the oldest first. Each goes out of
	 * sight in one rename (to iter_N.old.<pid>, which a later save removes should this
	 * one be killed while deleting), so no reader ever finds an empty or partial iter_N. */
	for (size_t i = 0; keep_last > 0 && i + (size_t)(keep_last - 1) < n; i++) {
		char aside[PATH_CAP + 32];
		mt_ckpt_iter_dir(p, sizeof(p), dir, old[i], NULL);
		snprintf(aside, sizeof(aside), "%s.old.%ld", p, (long)getpid());
		mt_rm_tree(aside);
		mt_atomic_step("checkpoint");
		if (rename(p, aside) != 0) {
			if (errno != ENOENT && !rc)
				rc = mt_err_errno(err, MT_EXIT_IO, "checkpoint saved, but cannot move the old '%s' aside (keep-last)", p);
			continue;
		}
		mt_atomic_step("checkpoint");
		if (mt_rm_tree(aside) && !rc)
			rc = mt_err_errno(err, MT_EXIT_IO, "checkpoint saved, but cannot remove the old '%s' (keep-last)", aside);
	}
	free(old);
	return rc;
}

int mt_ckpt_commit(const char *dir, const char *tmpdir, int64_t iteration, int keep_last, struct mt_err *err)
{
	char final[PATH_CAP];

	if (mt_ckpt_iter_dir(final, sizeof(final), dir, iteration, err))
		return -1;
	mt_atomic_step("checkpoint");
	if (mt_fsync_path(tmpdir, 1)) {
		mt_err_errno(err, MT_EXIT_IO, "cannot sync checkpoint '%s'", tmpdir);
		mt_rm_tree(tmpdir);
		return -1;
	}
	mt_atomic_step("checkpoint");
	if (install_dir(tmpdir, final, err)) {
		mt_rm_tree(tmpdir);
		return -1;
	}
	mt_atomic_step("checkpoint");
	if (mt_fsync_path(dir, 1))
		return mt_err_errno(err, MT_EXIT_IO, "cannot sync directory '%s'", dir);
	if (write_markers(dir, iteration, err))
		return mt_err_prefix(err, "checkpoint '%s' written but not marked latest", final);
	return prune(dir, iteration, keep_last, err);
}

/* "model-tp01-pp002-dp0003.h5": the names mt_ckpt_part_name makes, nothing else. */
int mt_ckpt_is_part_name(const char *s)
{
	static const char *const lit[] = { "model-tp", "-pp", "-dp", ".h5" };
	static const size_t mindig[] = { 2, 3, 4 };

	for (int i = 0; i < 4; i++) {
		size_t n = strlen(lit[i]), d = 0;
		if (strncmp(s, lit[i], n))
			return 0;
		s += n;
		if (i == 3)
			return *s == '\0';
		while (s[d] >= '0' && s[d] <= '9')
			d++;
		if (d < mindig[i] || d > 9)
			return 0;
		s += d;
	}
	return 0;
}

/* ---- falling back ------------------------------------------------------------------------------ */

void mt_ckpt_warn(const char *fmt, ...)
{
	enum mt_log_level old = mt_log_get_level();
	char msg[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (old < MT_LOG_WARN)
		mt_log_set_level(MT_LOG_WARN);
	mt_warn("%s", msg);
	mt_log_set_level(old);
}

static int cmp_i64_desc(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x < y) - (x > y);
}

int mt_ckpt_candidates(const char *path, int64_t **iters, size_t *n, char *note, size_t notecap, struct mt_err *err)
{
	char p[PATH_CAP];
	struct stat sb;
	int64_t latest = -1, *all = NULL;
	size_t na = 0, k = 0;
	struct mt_err e2 = { 0 };

	*iters = NULL;
	*n = 0;
	if (note && notecap)
		note[0] = '\0';
	if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode) || mt_ckpt_iteration_of_dir(path) >= 0)
		return 0;
	if ((size_t)snprintf(p, sizeof(p), "%s/model.h5", path) >= sizeof(p) || lstat(p, &sb) == 0)
		return 0; /* a directory holding the file itself */
	if (mt_ckpt_latest(path, &latest, &e2)) {
		if (note)
			snprintf(note, notecap, "%s", e2.msg);
		latest = -2; /* garbled: every iteration is a candidate */
	}
	if (mt_ckpt_list(path, &all, &na, err))
		return -1;
	if (latest == -1 && na == 0) {
		free(all);
		return 0; /* nothing at all: the caller's error says so */
	}
	if (latest == -1 && note)
		snprintf(note, notecap, "no '%s' marker in '%s'", MT_CKPT_LATEST, path);
	*iters = malloc((na + 1) * sizeof(**iters));
	if (!*iters) {
		free(all);
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	if (latest >= 0)
		(*iters)[k++] = latest;
	qsort(all, na, sizeof(*all), cmp_i64_desc);
	for (size_t i = 0; i < na; i++)
		if (latest < 0 || all[i] < latest)
			(*iters)[k++] = all[i];
	free(all);
	*n = k;
	return 0;
}

int mt_ckpt_list(const char *dir, int64_t **iters, size_t *n, struct mt_err *err)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int64_t *a = NULL;
	size_t cnt = 0, cap = 0;

	*iters = NULL;
	*n = 0;
	if (!d)
		return mt_err_errno(err, MT_EXIT_IO, "cannot open checkpoint directory '%s'", dir);
	while ((de = readdir(d))) {
		char path[PATH_CAP];
		const char *rest;
		int64_t it;
		if (!(rest = parse_iter_name(de->d_name, &it)) || *rest)
			continue;
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= sizeof(path) || !mt_ckpt_is_dir(path))
			continue;
		if (cnt == cap) {
			int64_t *b = realloc(a, (cap = cap ? cap * 2 : 16) * sizeof(*a));
			if (!b) {
				free(a);
				closedir(d);
				return mt_err_set(err, MT_EXIT_IO, "out of memory");
			}
			a = b;
		}
		a[cnt++] = it;
	}
	closedir(d);
	qsort(a, cnt, sizeof(*a), cmp_i64);
	*iters = a;
	*n = cnt;
	return 0;
}

/* ---- a save's temporary directory and the parts' names ---------------------------------------- */

int mt_ckpt_part_name(char *out, size_t n, int tp_rank, int pp_rank, int dp_rank, struct mt_err *err)
{
	int len = snprintf(out, n, "model-tp%02d-pp%03d-dp%04d.h5", tp_rank, pp_rank, dp_rank);

	if (len < 0 || (size_t)len >= n)
		return mt_err_set(err, MT_EXIT_IO, "checkpoint part name too long");
	return 0;
}

int mt_ckpt_tmpdir_name(char *out, size_t n, const char *dir, int64_t iteration, long tag, struct mt_err *err)
{
	char final[PATH_CAP];

	if (mt_ckpt_iter_dir(final, sizeof(final), dir, iteration, err))
		return -1;
	if ((size_t)snprintf(out, n, "%s.tmp.%ld", final, tag) >= n)
		return mt_err_set(err, MT_EXIT_IO, "checkpoint path too long: '%s'", dir);
	return 0;
}

int mt_ckpt_tmpdir(char *out, size_t n, const char *dir, int64_t iteration, long tag, struct mt_err *err)
{
	char final[PATH_CAP];

	if (mt_ckpt_iter_dir(final, sizeof(final), dir, iteration, err) || mt_ckpt_mkdir_p(dir, err) ||
	    mt_ckpt_tmpdir_name(out, n, dir, iteration, tag, err))
		return -1;
	if (mt_rm_tree(out))
		return mt_err_errno(err, MT_EXIT_IO, "cannot remove the leftover '%s'", out);
	if (mkdir(out, 0777) != 0)
		return mt_err_errno(err, MT_EXIT_IO, "cannot create directory '%s'", out);
	return 0;
}

void mt_ckpt_abandon(const char *tmpdir)
{
	mt_rm_tree(tmpdir);
}
