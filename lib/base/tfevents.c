/* tfevents.c: TensorBoard event files (see tfevents.h). The messages are encoded by
 * protobuf-c from tfevent.proto; the CRC32C comes from Intel's ISA-L (crc32_iscsi: the
 * iSCSI CRC is CRC32C), the framing is TensorFlow's TFRecord. */
#include "base/tfevents.h"

#include <errno.h>
#include <fcntl.h>
#include <isa-l/crc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/array.h"
#include "base/progress.h"
#include "base/tfevent.pb-c.h"

#define FLUSH_SECONDS 120.0

uint32_t mt_crc32c(const void *p, size_t n)
{
	/* ISA-L's crc32_iscsi takes the register's start value and returns the register:
	 * the standard CRC32C starts from and finally inverts all ones. Its length is an
	 * int, so large buffers go in pieces. */
	const unsigned char *b = p;
	unsigned int crc = 0xffffffffu;

	while (n > 0) {
		int k = n > (1u << 30) ? 1 << 30 : (int)n;
		crc = crc32_iscsi((unsigned char *)b, k, crc);
		b += k;
		n -= (size_t)k;
	}
	return crc ^ 0xffffffffu;
}

uint32_t mt_tfrecord_mask(uint32_t crc)
{
	return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static void put_le32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static int mkdir_p(const char *dir, struct mt_err *err)
{
	char *p = strdup(dir);

	if (!p)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	for (char *s = p + 1;; s++) {
		int end = *s == '\0';
		if (*s == '/' || end) {
			*s = '\0';
			if (mkdir(p, 0777) != 0 && errno != EEXIST) {
				mt_err_errno(err, MT_EXIT_IO, "cannot create the tensorboard directory '%s'", p);
				free(p);
				return -1;
			}
			if (end)
				break;
			*s = '/';
		}
	}
	free(p);
	return 0;
}

static int write_all(struct mt_tfevents *w, struct mt_err *err)
{
	size_t off = 0;

	while (off < w->qlen) {
		ssize_t k = write(w->fd, w->q + off, w->qlen - off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return mt_err_errno(err, MT_EXIT_IO, "cannot write the event file '%s'", w->path);
		off += (size_t)k;
	}
	w->qlen = 0;
	w->queued = 0;
	w->last_write = mt_now();
	return 0;
}

/* One TFRecord holding the event, queued; written out when the queue is full or old. */
static int put_event(struct mt_tfevents *w, const Tensorflow__Event *ev, struct mt_err *err)
{
	size_t n = tensorflow__event__get_packed_size(ev), need = w->qlen + n + 16;
	unsigned char *r, len8[8];

	if (mt_array_grow(&w->q, &w->qcap, need, 1, 4096))
		return mt_err_set(err, MT_EXIT_IO, "out of memory queueing events for '%s'", w->path);
	r = w->q + w->qlen;
	for (int i = 0; i < 8; i++)
		len8[i] = (unsigned char)((uint64_t)n >> (8 * i));
	memcpy(r, len8, 8);
	put_le32(r + 8, mt_tfrecord_mask(mt_crc32c(len8, 8)));
	tensorflow__event__pack(ev, r + 12);
	put_le32(r + 12 + n, mt_tfrecord_mask(mt_crc32c(r + 12, n)));
	w->qlen += n + 16;
	w->queued++;
	if (w->queued >= w->queue_size || mt_now() - w->last_write >= FLUSH_SECONDS)
		return write_all(w, err);
	return 0;
}

static double wall_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int mt_tfevents_open(struct mt_tfevents *w, const char *dir, int queue_size, struct mt_err *err)
{
	char host[256];
	size_t plen;
	Tensorflow__Event ev = TENSORFLOW__EVENT__INIT;
	char version[] = "brain.Event:2";

	memset(w, 0, sizeof(*w));
	w->fd = -1;
	w->queue_size = queue_size > 0 ? queue_size : 10;
	if (mkdir_p(dir, err))
		return -1;
	if (gethostname(host, sizeof(host)) != 0)
		strcpy(host, "localhost");
	host[sizeof(host) - 1] = '\0';
	for (char *c = host; *c; c++)
		if (*c == '/')
			*c = '_';
	plen = strlen(dir) + strlen(host) + 96;
	if (!(w->path = malloc(plen)))
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	/* a name no other writer has: the time, the host, the process, then a counter */
	for (int k = 0; w->fd < 0; k++) {
		int n = snprintf(w->path, plen, "%s/events.out.tfevents.%lld.%s.%ld", dir, (long long)time(NULL), host,
				 (long)getpid());
		if (k)
			snprintf(w->path + n, plen - (size_t)n, ".%d", k);
		w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0666);
		if (w->fd < 0 && (errno != EEXIST || k > 1000)) {
			mt_err_errno(err, MT_EXIT_IO, "cannot create the event file '%s'", w->path);
			free(w->path);
			w->path = NULL;
			return -1;
		}
	}
	w->last_write = mt_now();
	ev.wall_time = wall_now();
	ev.what_case = TENSORFLOW__EVENT__WHAT_FILE_VERSION;
	ev.file_version = version;
	if (put_event(w, &ev, err) || write_all(w, err)) {
		mt_tfevents_close(w, NULL);
		return -1;
	}
	return 0;
}

int mt_tfevents_scalar(struct mt_tfevents *w, const char *tag, double value, int64_t step, struct mt_err *err)
{
	Tensorflow__Event ev = TENSORFLOW__EVENT__INIT;
	Tensorflow__Summary sum = TENSORFLOW__SUMMARY__INIT;
	Tensorflow__Summary__Value v = TENSORFLOW__SUMMARY__VALUE__INIT, *vp = &v;

	v.tag = (char *)tag;
	v.value_case = TENSORFLOW__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
	v.simple_value = (float)value;
	sum.n_value = 1;
	sum.value = &vp;
	ev.wall_time = wall_now();
	ev.step = step;
	ev.what_case = TENSORFLOW__EVENT__WHAT_SUMMARY;
	ev.summary = &sum;
	return put_event(w, &ev, err);
}

int mt_tfevents_flush(struct mt_tfevents *w, struct mt_err *err)
{
	return w->fd >= 0 && w->qlen ? write_all(w, err) : 0;
}

int mt_tfevents_close(struct mt_tfevents *w, struct mt_err *err)
{
	struct mt_err dummy;
	int rc = 0;

	if (!err)
		err = &dummy;
	if (w->fd >= 0) {
		rc = mt_tfevents_flush(w, err);
		if (!rc && fsync(w->fd) != 0 && errno != EINVAL)
			rc = mt_err_errno(err, MT_EXIT_IO, "cannot sync the event file '%s'", w->path);
		if (close(w->fd) != 0 && !rc)
			rc = mt_err_errno(err, MT_EXIT_IO, "cannot close the event file '%s'", w->path);
	}
	free(w->path);
	free(w->q);
	memset(w, 0, sizeof(*w));
	w->fd = -1;
	return rc;
}
