/* npy.c: .npy v1.0 reading and writing (see npy.h). The header follows numpy.save:
 * "{'descr': '<i4', 'fortran_order': False, 'shape': (N,), }", then spaces for the first
 * axis to grow to 21 digits, then padding so that the data starts at a multiple of 64,
 * ending in '\n'. Files are written atomically. */
#include "data/npy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/atomic.h"

static size_t item_size(const char *descr)
{
	if (!strcmp(descr, "<i2"))
		return 2;
	if (!strcmp(descr, "<i4") || !strcmp(descr, "<u4") || !strcmp(descr, "<f4"))
		return 4;
	if (!strcmp(descr, "<i8") || !strcmp(descr, "<f8"))
		return 8;
	return 0;
}

int mt_npy_write(const char *path, const char *descr, const void *data, size_t rows, size_t cols,
		 struct mt_err *err)
{
	char header[256], shape[64], first[32];
	size_t n, hlen, pad, isz = item_size(descr);
	unsigned char pre[10] = { 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0 };
	struct mt_atomic w;

	if (!isz)
		return mt_err_set(err, MT_EXIT_USAGE, "internal: npy dtype '%s' is not supported", descr);
	if (cols)
		snprintf(shape, sizeof(shape), "(%zu, %zu)", rows, cols);
	else
		snprintf(shape, sizeof(shape), "(%zu,)", rows);
	n = (size_t)snprintf(header, sizeof(header), "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
			     descr, shape);
	/* room for the first axis to grow to 21 digits, as numpy leaves */
	snprintf(first, sizeof(first), "%zu", rows);
	for (size_t k = strlen(first); k < 21; k++)
		header[n++] = ' ';
	hlen = n + 1; /* the final '\n' */
	pad = 64 - (10 + hlen) % 64; /* 64, not 0, when already aligned: numpy's rule */
	memset(header + n, ' ', pad);
	n += pad;
	header[n++] = '\n';
	pre[8] = (unsigned char)(n & 0xff);
	pre[9] = (unsigned char)(n >> 8);
	{ /* an identical file on disk stays as it is */
		const void *parts[3] = { pre, header, data };
		size_t lens[3] = { sizeof(pre), n, rows * (cols ? cols : 1) * isz };
		if (mt_atomic_same(path, parts, lens, 3))
			return 0;
	}
	if (mt_atomic_open(&w, path, err))
		return -1;
	if (mt_atomic_write(&w, pre, sizeof(pre), err) || mt_atomic_write(&w, header, n, err) ||
	    mt_atomic_write(&w, data, rows * (cols ? cols : 1) * isz, err) || mt_atomic_commit(&w, err)) {
		mt_atomic_abort(&w);
		return -1;
	}
	return 0;
}

int mt_npy_read(struct mt_npy *a, const char *path, struct mt_err *err)
{
	FILE *f = fopen(path, "rb");
	unsigned char pre[10];
	char header[65536], *p, *q;
	size_t hlen, count;

	memset(a, 0, sizeof(*a));
	if (!f)
		return mt_err_errno(err, MT_EXIT_IO, "cannot open '%s'", path);
	if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY\x01\x00", 8) != 0) {
		fclose(f);
		return mt_err_set(err, MT_EXIT_DATA, "'%s': not a .npy v1.0 file", path);
	}
	hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
	if (fread(header, 1, hlen, f) != hlen) {
		fclose(f);
		return mt_err_set(err, MT_EXIT_DATA, "'%s': truncated header", path);
	}
	header[hlen] = '\0';
	p = strstr(header, "'descr': '");
	q = strstr(header, "'shape': (");
	if (!p || !q || strstr(header, "'fortran_order': True")) {
		fclose(f);
		return mt_err_set(err, MT_EXIT_DATA, "'%s': unsupported header", path);
	}
	snprintf(a->descr, sizeof(a->descr), "%.3s", p + 10);
	a->itemsize = item_size(a->descr);
	a->rows = strtoull(q + 10, &p, 10);
	if (*p == ',' && p[1] == ' ' && p[2] != ')')
		a->cols = strtoull(p + 2, &p, 10);
	if (!a->itemsize) {
		fclose(f);
		return mt_err_set(err, MT_EXIT_DATA, "'%s': unsupported dtype '%s'", path, a->descr);
	}
	count = a->rows * (a->cols ? a->cols : 1);
	a->data = malloc(count * a->itemsize + 1);
	if (!a->data || fread(a->data, a->itemsize, count, f) != count) {
		fclose(f);
		mt_npy_free(a);
		return mt_err_set(err, MT_EXIT_DATA, "'%s': truncated data", path);
	}
	fclose(f);
	return 0;
}

void mt_npy_free(struct mt_npy *a)
{
	free(a->data);
	a->data = NULL;
}
