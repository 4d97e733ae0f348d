/* ledger.h: an append-only file of JSON lines that records finished work, shared by
 * runs that may overlap (mt-eval --watch from cron).
 *
 * Exclusion: a run takes flock(2) on "LEDGER.lock" beside the ledger and holds it until
 * it closes the ledger; a second run either waits for it or is told the lock is taken.
 * Appending: each line is written with one write(2) of the whole line and its newline
 * on a descriptor opened O_APPEND, then fsync(2), so a crash leaves whole lines and at
 * most one torn last line (a power loss in the middle of the write). Repair: on open,
 * under the lock, a last line without its newline is cut off (ftruncate) and counted in
 * `repaired`; a line that is not a JSON object is skipped and counted in `ignored`.
 * Keys: each line's "iteration" and "task" members say which work it records; a line with
 * a "fingerprint" member (mt-eval --watch's record of a checkpoint that failed to read)
 * is keyed "TASK#FINGERPRINT", so the same iteration changed on disk is a new key. */
#ifndef MT_LEDGER_H
#define MT_LEDGER_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

struct mt_ledger {
	int fd, lockfd;
	char *path;
	char **keys;           /* "ITERATION\tTASK" */
	size_t nkeys, cap;
	int64_t repaired;      /* bytes of a torn last line cut off on open */
	int64_t ignored;       /* lines that were not JSON objects with iteration and task */
};

/* Lock and read. wait: block until the lock is free; else return 1 at once when another
 * process holds it (nothing to free then). 0: open and locked; -1: error. */
int mt_ledger_open(struct mt_ledger *l, const char *path, int wait, struct mt_err *err);
void mt_ledger_close(struct mt_ledger *l);

int mt_ledger_has(const struct mt_ledger *l, int64_t iteration, const char *task);
/* Append one line (a JSON object, no newline) recording (iteration, task). */
int mt_ledger_append(struct mt_ledger *l, int64_t iteration, const char *task, const char *line,
		     struct mt_err *err);

#endif
