/* safetensors.c: read, check and write safetensors files (see safetensors.h). */
#include "ckpt/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/atomic.h"
#include "base/files.h"

static const char *const dtype_names[MT_ST_NDTYPES] = {
	"BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "I64", "U64", "F16", "BF16", "F32", "F64",
};
static const size_t dtype_sizes[MT_ST_NDTYPES] = { 1, 1, 1, 2, 2, 4, 4, 8, 8, 2, 2, 4, 8 };

const char *mt_st_dtype_name(enum mt_st_dtype d)
{
	return (unsigned)d < MT_ST_NDTYPES ? dtype_names[d] : NULL;
}

size_t mt_st_dtype_size(enum mt_st_dtype d)
{
	return (unsigned)d < MT_ST_NDTYPES ? dtype_sizes[d] : 0;
}

static int dtype_parse(const char *s)
{
	for (int i = 0; i < MT_ST_NDTYPES; i++)
		if (!strcmp(s, dtype_names[i]))
			return i;
	return -1;
}

static void free_tensors(struct mt_st_file *f)
{
	for (int i = 0; i < f->n; i++)
		free(f->t[i].name);
	free(f->t);
	f->t = NULL;
	f->n = 0;
}

void mt_st_close(struct mt_st_file *f)
{
	free_tensors(f);
	if (f->map && f->size)
		munmap(f->map, f->size);
	free(f->path);
	free(f->metadata_json);
	memset(f, 0, sizeof(*f));
}

static int by_offset(const void *a, const void *b)
{
	const struct mt_st_tensor *x = *(const struct mt_st_tensor *const *)a, *y = *(const struct mt_st_tensor *const *)b;

	return x->data < y->data ? -1 : x->data > y->data;
}

/* Check one header entry and fill t; the message names the tensor. */
static int parse_entry(struct mt_st_tensor *t, const char *name, json_t *v, const unsigned char *data, uint64_t dlen,
		       const char *path, struct mt_err *err)
{
	json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"), *off = json_object_get(v, "data_offsets");
	uint64_t numel = 1, b, e;
	int d;

	if (!json_is_object(v) || !json_is_string(dt) || !json_is_array(sh) || !json_is_array(off))
		return mt_err_set(err, MT_EXIT_DATA, "safetensors file '%s': tensor '%s': want an object with dtype, shape and data_offsets",
				  path, name);
	d = dtype_parse(json_string_value(dt));
	if (d < 0)
		return mt_err_set(err, MT_EXIT_DATA, "safetensors file '%s': tensor '%s': unknown dtype '%s'", path, name,
				  json_string_value(dt));
	if (json_array_size(sh) > MT_ST_MAX_DIMS)
		return mt_err_set(err, MT_EXIT_DATA, "safetensors file '%s': tensor '%s': %zu dimensions (at most %d)", path,
				  name, json_array_size(sh), MT_ST_MAX_DIMS);
	t->dtype = (enum mt_st_dtype)d;
	t->ndim = (int)json_array_size(sh);
	for (int i = 0; i < t->ndim; i++) {
		json_t *x = json_array_get(sh, (size_t)i);
		if (!json_is_integer(x) || json_integer_value(x) < 0)
			return mt_err_set(err, MT_EXIT_DATA, "safetensors file '%s': tensor '%s': shape entry %d is not a size",
					  path, name, i);
		t->shape[i] = json_integer_value(x);
		if (t->shape[i] && numel > (UINT64_MAX / 16) / (uint64_t)t->shape[i])
			return mt_err_set(err, MT_EXIT_DATA, "safetensors file '%s': tensor '%s': shape too large", path, name);
		numel *= (uint64_t)t->shape[i];
	}
	if (json_array_size(off) != 2 || !json_is_integer(json_array_get(off, 0)) || !json_is_integer(json_array_get(off, 1)) ||
	    json_integer_value(json_array_get(off, 0)) < 0 || json_integer_value(json_array_get(off, 1)) < 0)
		return mt_err_set(err, MT_EXIT_DATA, "safetensors file '%s': tensor '%s': data_offsets must be two byte offsets",
				  path, name);
	b = (uint64_t)json_integer_value(json_array_get(off, 0));
	e = (uint64_t)json_integer_value(json_array_get(off, 1));
	if (b > e || e > dlen)
		return mt_err_set(err, MT_EXIT_DATA,
				  "safetensors file '%s': tensor '%s': data_offsets [%llu, %llu] outside the %llu bytes of data",
				  path, name, (unsigned long long)b, (unsigned long long)e, (unsigned long long)dlen);
	if (e - b != numel * dtype_sizes[d])
		return mt_err_set(err, MT_EXIT_DATA,
				  "safetensors file '%s': tensor '%s': %llu bytes for %llu %s values (want %llu)", path, name,
				  (unsigned long long)(e - b), (unsigned long long)numel, dtype_names[d],
				  (unsigned long long)(numel * dtype_sizes[d]));
	t->numel = (int64_t)numel;
	t->data = data + b;
	t->nbytes = (size_t)(e - b);
	t->name = strdup(name);
	return t->name ? 0 : mt_err_set(err, MT_EXIT_IO, "out of memory");
}

static int parse_header(struct mt_st_file *f, const char *hdr, uint64_t hlen, const unsigned char *data, uint64_t dlen,
			struct mt_err *err)
{
	json_error_t je;
	json_t *root = json_loadb(hdr, (size_t)hlen, JSON_REJECT_DUPLICATES, &je), *v;
	const char *key;
	struct mt_st_tensor **order = NULL;
	uint64_t at = 0;
	int rc = -1;

	if (!root)
		return mt_err_set(err, MT_EXIT_DATA, "safetensors file '%s': the header is not valid JSON: %s", f->path, je.text);
	if (!json_is_object(root)) {
		json_decref(root);
		return mt_err_set(err, MT_EXIT_DATA, "safetensors file '%s': the header is not a JSON object", f->path);
	}
	f->t = calloc(json_object_size(root) + 1, sizeof(*f->t));
	if (!f->t)
		goto oom;
	json_object_foreach(root, key, v) {
		if (!strcmp(key, "__metadata__")) {
			const char *mk;
			json_t *mv;
			if (!json_is_object(v))
				goto badmeta;
			json_object_foreach(v, mk, mv)
				if (!json_is_string(mv))
					goto badmeta;
			f->metadata_json = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
			continue;
		}
		if (parse_entry(&f->t[f->n], key, v, data, dlen, f->path, err))
			goto out;
		f->n++;
	}
	/* the tensors cover the data exactly: sorted by offset, each starts where the last ended */
	order = malloc((size_t)(f->n + 1) * sizeof(*order));
	if (!order)
		goto oom;
	for (int i = 0; i < f->n; i++)
		order[i] = &f->t[i];
	qsort(order, (size_t)f->n, sizeof(*order), by_offset);
	for (int i = 0; i < f->n; i++) {
		uint64_t b = (uint64_t)(order[i]->data - data);
		if (b != at) {
			mt_err_set(err, MT_EXIT_DATA, "safetensors file '%s': tensor '%s': data starts at byte %llu, want %llu "
				   "(tensors must be contiguous, without holes or overlaps)", f->path, order[i]->name,
				   (unsigned long long)b, (unsigned long long)at);
			goto out;
		}
		at = b + order[i]->nbytes;
	}
	if (at != dlen) {
		mt_err_set(err, MT_EXIT_DATA, "safetensors file '%s': the tensors cover %llu of the %llu bytes of data", f->path,
			   (unsigned long long)at, (unsigned long long)dlen);
		goto out;
	}
	rc = 0;
	goto out;
badmeta:
	mt_err_set(err, MT_EXIT_DATA, "safetensors file '%s': __metadata__ must be an object of strings", f->path);
	goto out;
oom:
	mt_err_set(err, MT_EXIT_IO, "out of memory reading '%s'", f->path);
out:
	free(order);
	json_decref(root);
	return rc;
}

int mt_st_open(struct mt_st_file *f, const char *path, struct mt_err *err)
{
	struct stat sb;
	uint64_t hlen = 0;
	const unsigned char *p;
	int fd;

	memset(f, 0, sizeof(*f));
	f->path = strdup(path);
	if (!f->path)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		mt_err_errno(err, MT_EXIT_IO, "cannot open safetensors file '%s'", path);
		goto fail;
	}
	if (fstat(fd, &sb) < 0) {
		mt_err_errno(err, MT_EXIT_IO, "cannot stat '%s'", path);
		close(fd);
		goto fail;
	}
	if (sb.st_size < 8) {
		close(fd);
		mt_err_set(err, MT_EXIT_DATA, "safetensors file '%s': %lld bytes, too short for the header length",
			   path, (long long)sb.st_size);
		goto fail;
	}
	f->size = (size_t)sb.st_size;
	f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (f->map == MAP_FAILED) {
		f->map = NULL;
		f->size = 0;
		mt_err_errno(err, MT_EXIT_IO, "cannot map '%s'", path);
		goto fail;
	}
	p = f->map;
	for (int i = 7; i >= 0; i--)
		hlen = hlen << 8 | p[i];
	if (hlen > MT_ST_MAX_HEADER) {
		mt_err_set(err, MT_EXIT_DATA, "safetensors file '%s': header of %llu bytes (at most %u): not a safetensors file?",
			   path, (unsigned long long)hlen, MT_ST_MAX_HEADER);
		goto fail;
	}
	if (hlen > f->size - 8) {
		mt_err_set(err, MT_EXIT_DATA, "safetensors file '%s': header of %llu bytes in a file of %zu: truncated?", path,
			   (unsigned long long)hlen, f->size);
		goto fail;
	}
	if (hlen < 2 || p[8] != '{') {
		mt_err_set(err, MT_EXIT_DATA, "safetensors file '%s': the header does not start with '{'", path);
		goto fail;
	}
	if (parse_header(f, (const char *)p + 8, hlen, p + 8 + hlen, f->size - 8 - hlen, err))
		goto fail;
	return 0;
fail:
	mt_st_close(f);
	return -1;
}

const struct mt_st_tensor *mt_st_find(const struct mt_st_file *f, const char *name)
{
	for (int i = 0; i < f->n; i++)
		if (!strcmp(f->t[i].name, name))
			return &f->t[i];
	return NULL;
}

static float half_to_f32(uint16_t h)
{
	int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
	float v;

	if (e == 0)
		v = ldexpf((float)m, -24);
	else if (e == 31)
		v = m ? NAN : INFINITY;
	else
		v = ldexpf((float)(m | 1024), e - 25);
	return s ? -v : v;
}

int mt_st_to_f32(const struct mt_st_tensor *t, float *out, int64_t n, const char *path, struct mt_err *err)
{
	const unsigned char *p = t->data;

	if (n != t->numel)
		return mt_err_set(err, MT_EXIT_DATA, "safetensors file '%s': tensor '%s' has %lld values, want %lld", path,
				  t->name, (long long)t->numel, (long long)n);
	for (int64_t i = 0; i < n; i++) {
		switch (t->dtype) {
		case MT_ST_F32: {
			uint32_t u = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
				     (uint32_t)p[4 * i + 3] << 24;
			memcpy(&out[i], &u, 4);
			break;
		}
		case MT_ST_BF16: {
			uint32_t u = ((uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8) << 16;
			memcpy(&out[i], &u, 4);
			break;
		}
		case MT_ST_F16:
			out[i] = half_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
			break;
		case MT_ST_F64: {
			uint64_t u = 0;
			double d;
			for (int k = 7; k >= 0; k--)
				u = u << 8 | p[8 * i + k];
			memcpy(&d, &u, 8);
			out[i] = (float)d;
			break;
		}
		default:
			return mt_err_set(err, MT_EXIT_DATA, "safetensors file '%s': tensor '%s' is %s, not a float type", path,
					  t->name, mt_st_dtype_name(t->dtype));
		}
	}
	return 0;
}

void mt_st_set_close(struct mt_st_set *s)
{
	for (int i = 0; i < s->nfiles; i++)
		mt_st_close(&s->f[i]);
	free(s->f);
	free(s->dir);
	memset(s, 0, sizeof(*s));
}

int mt_st_set_open(struct mt_st_set *s, const char *dir, struct mt_err *err)
{
	char *single = mt_path_join(dir, "model.safetensors"), *index = mt_path_join(dir, "model.safetensors.index.json");
	json_error_t je;
	json_t *root = NULL, *wm, *v;
	const char *key;
	int rc = -1;

	memset(s, 0, sizeof(*s));
	s->dir = strdup(dir);
	if (!single || !index || !s->dir) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out;
	}
	if (access(single, F_OK) == 0) {
		s->f = calloc(1, sizeof(*s->f));
		if (!s->f || mt_st_open(&s->f[0], single, err))
			goto out;
		s->nfiles = 1;
		rc = 0;
		goto out;
	}
	if (access(index, F_OK) != 0) {
		mt_err_set(err, MT_EXIT_IO, "'%s' holds neither model.safetensors nor model.safetensors.index.json", dir);
		goto out;
	}
	root = json_load_file(index, 0, &je);
	wm = root ? json_object_get(root, "weight_map") : NULL;
	if (!json_is_object(wm)) {
		mt_err_set(err, MT_EXIT_DATA, "index '%s': want an object with a \"weight_map\" object%s%s", index,
			   root ? "" : ": ", root ? "" : je.text);
		goto out;
	}
	s->f = calloc(json_object_size(wm) + 1, sizeof(*s->f));
	if (!s->f) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out;
	}
	json_object_foreach(wm, key, v) {
		const char *fn = json_string_value(v);
		char *p;
		int k;
		if (!fn || strchr(fn, '/') || !strcmp(fn, "..")) {
			mt_err_set(err, MT_EXIT_DATA, "index '%s': tensor '%s': the file must be a plain name", index, key);
			goto out;
		}
		p = mt_path_join(dir, fn);
		if (!p) {
			mt_err_set(err, MT_EXIT_IO, "out of memory");
			goto out;
		}
		for (k = 0; k < s->nfiles && strcmp(s->f[k].path, p); k++)
			;
		if (k == s->nfiles) {
			if (mt_st_open(&s->f[k], p, err)) {
				free(p);
				goto out;
			}
			s->nfiles++;
		}
		free(p);
		if (!mt_st_find(&s->f[k], key)) {
			mt_err_set(err, MT_EXIT_DATA, "index '%s' puts tensor '%s' in '%s', which lacks it", index, key, fn);
			goto out;
		}
	}
	rc = 0;
out:
	json_decref(root);
	free(single);
	free(index);
	if (rc)
		mt_st_set_close(s);
	else
		for (int i = 0; i < s->nfiles; i++)
			for (int j = 0; j < s->f[i].n; j++)
				s->f[i].t[j].file = i;
	return rc;
}

const struct mt_st_tensor *mt_st_set_find(const struct mt_st_set *s, const char *name, const char **path)
{
	for (int i = 0; i < s->nfiles; i++) {
		const struct mt_st_tensor *t = mt_st_find(&s->f[i], name);
		if (t) {
			if (path)
				*path = s->f[i].path;
			return t;
		}
	}
	return NULL;
}

int mt_st_write(const char *path, const struct mt_st_out *t, int n, const char *const *meta, int nmeta,
		struct mt_err *err)
{
	json_t *root = json_object(), *md = NULL;
	struct mt_atomic w;
	unsigned char len[8];
	uint64_t at = 0;
	size_t hlen;
	char *hdr = NULL;
	int rc = -1;

	if (!root)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	if (nmeta > 0) {
		md = json_object();
		for (int i = 0; i < nmeta; i++)
			json_object_set_new(md, meta[2 * i], json_string(meta[2 * i + 1]));
		json_object_set_new(root, "__metadata__", md);
	}
	for (int i = 0; i < n; i++) {
		json_t *e = json_object(), *sh = json_array();
		uint64_t numel = 1, nb;
		if (mt_st_dtype_size(t[i].dtype) == 0 || t[i].ndim < 0 || t[i].ndim > MT_ST_MAX_DIMS) {
			json_decref(e);
			json_decref(sh);
			json_decref(root);
			return mt_err_set(err, MT_EXIT_USAGE, "safetensors file '%s': tensor '%s': bad dtype or rank", path,
					  t[i].name);
		}
		for (int k = 0; k < t[i].ndim; k++) {
			json_array_append_new(sh, json_integer(t[i].shape[k]));
			numel *= (uint64_t)t[i].shape[k];
		}
		nb = numel * mt_st_dtype_size(t[i].dtype);
		json_object_set_new(e, "dtype", json_string(mt_st_dtype_name(t[i].dtype)));
		json_object_set_new(e, "shape", sh);
		json_object_set_new(e, "data_offsets", json_pack("[II]", (json_int_t)at, (json_int_t)(at + nb)));
		if (json_object_get(root, t[i].name)) {
			json_decref(e);
			json_decref(root);
			return mt_err_set(err, MT_EXIT_USAGE, "safetensors file '%s': tensor '%s' given twice", path, t[i].name);
		}
		json_object_set_new(root, t[i].name, e);
		at += nb;
	}
	hdr = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(root);
	if (!hdr)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	hlen = strlen(hdr);
	{
		size_t padded = (hlen + 7) / 8 * 8;
		char *h2 = realloc(hdr, padded + 1);
		if (!h2) {
			free(hdr);
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
		}
		hdr = h2;
		memset(hdr + hlen, ' ', padded - hlen);
		hdr[padded] = 0;
		hlen = padded;
	}
	for (int i = 0; i < 8; i++)
		len[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
	if (mt_atomic_open(&w, path, err))
		goto out;
	if (mt_atomic_write(&w, len, 8, err) || mt_atomic_write(&w, hdr, hlen, err))
		goto abort;
	for (int i = 0; i < n; i++) {
		uint64_t numel = 1;
		for (int k = 0; k < t[i].ndim; k++)
			numel *= (uint64_t)t[i].shape[k];
		/* little-endian hosts only (x86-64, aarch64): the buffers are written as they are */
		if (mt_atomic_write(&w, t[i].data, numel * mt_st_dtype_size(t[i].dtype), err))
			goto abort;
	}
	if (mt_atomic_commit(&w, err))
		goto abort;
	rc = 0;
	goto out;
abort:
	mt_atomic_abort(&w);
out:
	free(hdr);
	return rc;
}
