/* atomic.h: output files that appear whole or not at all.
 *
 * Data goes to "<path>.tmp.<pid>" in the same directory; commit flushes,
 * fsyncs, renames over <path> and fsyncs the directory, so a reader sees the
 * previous file or the complete new one, never half of one. A process killed
 * mid-write leaves <path> untouched; on SIGINT/SIGTERM/SIGHUP the tools also
 * remove the temporary file (mt_atomic_unlink_all from a signal handler).
 *
 * Large files are handed to the disk as they are written: every few MiB the
 * writer asks the kernel to start writing back what it has so far (Linux's
 * sync_file_range, a hint that waits for nothing), so the fsync at commit
 * finds little left to do instead of the whole file: that fsync is a serial
 * step after all the parallel work of a tool like mt-tokenize (docs/perf-log.md). */
#ifndef MT_ATOMIC_H
#define MT_ATOMIC_H

#include <stddef.h>
#include <stdio.h>

#include "base/err.h"

struct mt_atomic {
	char *path;
	char *tmp;
	FILE *fp;
	char *vbuf;
	int slot; /* index in the registry of live temporaries, -1 if none */
	size_t pending;     /* bytes written since write-back was last started */
	long long synced;   /* file offset up to which write-back was started */
};

/* Opening sweeps path's leftovers first (mt_atomic_sweep). */
int mt_atomic_open(struct mt_atomic *w, const char *path, struct mt_err *err);

/* Remove the temporaries that killed writers of path left: regular files named
 * "<path>.tmp.<pid>" whose process no longer runs on this machine (kill(pid, 0) fails
 * with ESRCH). A live writer's file, this process's own, and a process of another user
 * (EPERM) are kept; names carry no host, so on a filesystem shared between machines a
 * writer elsewhere whose pid is free here would lose its temporary: do not point two
 * machines' runs at the same output names at once. Best effort; returns how many were
 * removed. Spill files (x.idx.lens, x.idx.docs) are paths of their own, swept when
 * opened. */
int mt_atomic_sweep(const char *path);
int mt_atomic_write(struct mt_atomic *w, const void *buf, size_t n, struct mt_err *err);
/* The stream, for fprintf; errors surface at commit. */
FILE *mt_atomic_file(struct mt_atomic *w);
int mt_atomic_commit(struct mt_atomic *w, struct mt_err *err);
/* Drop the temporary file; safe to call after commit (does nothing then). */
void mt_atomic_abort(struct mt_atomic *w);

/* A whole file in one call. */
int mt_atomic_write_file(const char *path, const void *data, size_t n, struct mt_err *err);

/* 1 when path is a regular file holding exactly parts[0..nparts) end to end, else 0:
 * writers of caches skip a file that would not change (no rewrite, no new inode).
 * Sweeps path's leftovers first (mt_atomic_sweep), as a write would. */
int mt_atomic_same(const char *path, const void *const *parts, const size_t *lens, int nparts);

/* Unlink every temporary file still open. Async-signal-safe. */
void mt_atomic_unlink_all(void);

/* fsync the directory that holds path (best effort: some filesystems refuse). */
void mt_atomic_sync_dir(const char *path);

/* A numbered step of a write, for tests of what a kill leaves behind: with
 * MT_ATOMIC_KILL_AT=N in the environment the process kills itself (SIGKILL) at its
 * Nth step, counted from 1; MT_ATOMIC_KILL_LOG=1 prints each step on stderr. The
 * layer counts creating a temporary, having synced it and having renamed it; writers
 * of several files (lib/data/idx.c) add their own steps in between. Without the
 * variable it costs one load. */
void mt_atomic_step(const char *what);

#endif
