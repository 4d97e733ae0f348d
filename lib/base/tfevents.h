/* tfevents.h: TensorBoard event files (scalars), the format TensorBoard reads.
 *
 * A file `events.out.tfevents.<seconds>.<host>.<pid>` in a run directory holds TFRecords:
 * a little-endian uint64 length, the masked CRC32C of those 8 bytes, the data, the
 * masked CRC32C of the data. Each record's data is a tensorflow.Event message (encoded
 * by protobuf-c from tfevent.proto): first one with file_version "brain.Event:2", then
 * one per scalar, a Summary of one Value {tag, simple_value} at a step.
 *
 * An event file is a log that TensorBoard reads while it grows, so it is not written
 * through atomic.h: records are queued in memory and written whole (one write(2) of
 * every queued record) when the queue holds queue_size events, when 120 seconds have
 * passed since the last write (PyTorch's SummaryWriter's defaults: max_queue 10,
 * flush_secs 120), on flush and on close (which also fsyncs). A killed writer loses
 * the queued events, never leaves half a record behind a whole one.
 *
 * What is logged, under which tags, is the caller's business (train/tblog.c,
 * mt-eval's watch mode); this file knows the format only. */
#ifndef MT_TFEVENTS_H
#define MT_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

struct mt_tfevents {
	int fd;
	char *path;                     /* the event file */
	unsigned char *q;               /* queued records */
	size_t qlen, qcap;
	int queued, queue_size;
	double last_write;              /* mt_now() of the last write */
};

/* Create DIR (and its parents) if needed, then a new event file in it with the
 * file_version event written. queue_size <= 0: 10. */
int mt_tfevents_open(struct mt_tfevents *w, const char *dir, int queue_size, struct mt_err *err);
/* One scalar (stored as a 32-bit float, as TensorBoard's simple_value is) at a step. */
int mt_tfevents_scalar(struct mt_tfevents *w, const char *tag, double value, int64_t step, struct mt_err *err);
/* Write the queued events now. */
int mt_tfevents_flush(struct mt_tfevents *w, struct mt_err *err);
/* Flush, fsync and close; safe on a writer that failed to open (does nothing). */
int mt_tfevents_close(struct mt_tfevents *w, struct mt_err *err);

/* The TFRecord checksums: CRC32C (Castagnoli) of n bytes, and TensorFlow's mask of a CRC
 * (rotate right by 15, add 0xa282ead8). */
uint32_t mt_crc32c(const void *p, size_t n);
uint32_t mt_tfrecord_mask(uint32_t crc);

#endif
