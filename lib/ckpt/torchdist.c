/* torchdist.c: Megatron-LM's torch_dist checkpoints (PyTorch's distributed checkpoint
 * folders) read and imported into mt checkpoints (torchdist.h). */
#include "ckpt/torchdist.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/files.h"
#include "base/log.h"
#include "ckpt/ckpt.h"

#define DCP "torch.distributed.checkpoint."

/* ---- element conversion ---- */

static float bf16_f32(const unsigned char *p)
{
	uint32_t u = (uint32_t)(p[0] | p[1] << 8) << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static float f16_f32(const unsigned char *p)
{
	uint16_t h = (uint16_t)(p[0] | p[1] << 8);
	uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
	float f;

	if (e == 0 && m == 0) {
		u = s;
	} else if (e == 0) { /* subnormal */
		e = 127 - 15 + 1;
		while (!(m & 0x400)) {
			m <<= 1;
			e--;
		}
		u = s | e << 23 | (m & 0x3ff) << 13;
	} else if (e == 31) {
		u = s | 0x7f800000u | m << 13;
	} else {
		u = s | (e + 127 - 15) << 23 | m << 13;
	}
	memcpy(&f, &u, 4);
	return f;
}

static float elem_f32(const unsigned char *p, enum mt_pk_dtype d)
{
	switch (d) {
	case MT_PKD_F32: { float f; memcpy(&f, p, 4); return f; }
	case MT_PKD_F64: { double x; memcpy(&x, p, 8); return (float)x; }
	case MT_PKD_F16: return f16_f32(p);
	case MT_PKD_BF16: return bf16_f32(p);
	default: return 0;
	}
}

static int is_float(enum mt_pk_dtype d)
{
	return d == MT_PKD_F32 || d == MT_PKD_F64 || d == MT_PKD_F16 || d == MT_PKD_BF16;
}

/* ---- .metadata ---- */

static int is_obj(const struct mt_pk *v, const char *cls)
{
	return v && v->kind == MT_PK_OBJECT && v->s && !strcmp(v->s, cls);
}

/* A torch.Size (read as a tuple of ints) into dims; -1 when it is not one. */
static int dims_of(const struct mt_pk *t, int64_t *d, int *n)
{
	if (!t || t->kind != MT_PK_TUPLE || t->n > MT_PK_MAX_DIMS)
		return -1;
	for (int i = 0; i < t->n; i++) {
		if (t->items[i]->kind != MT_PK_INT || t->items[i]->i < 0 || t->items[i]->i > ((int64_t)1 << 40))
			return -1;
		d[i] = t->items[i]->i;
	}
	*n = t->n;
	return 0;
}

static int dtype_of(const struct mt_pk *g, enum mt_pk_dtype *d)
{
	static const struct {
		const char *name;
		enum mt_pk_dtype d;
	} map[] = {
		{ "torch.float32", MT_PKD_F32 }, { "torch.float", MT_PKD_F32 },   { "torch.bfloat16", MT_PKD_BF16 },
		{ "torch.float16", MT_PKD_F16 }, { "torch.half", MT_PKD_F16 },    { "torch.float64", MT_PKD_F64 },
		{ "torch.double", MT_PKD_F64 },  { "torch.int64", MT_PKD_I64 },   { "torch.int32", MT_PKD_I32 },
		{ "torch.uint8", MT_PKD_U8 },    { "torch.int8", MT_PKD_I8 },     { "torch.bool", MT_PKD_BOOL },
	};

	if (!g || g->kind != MT_PK_GLOBAL)
		return -1;
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (!strcmp(g->s, map[i].name)) {
			*d = map[i].d;
			return 0;
		}
	return -1;
}

/* storage_data's records, sorted by (fqn, offsets) */
struct srec {
	const char *fqn;
	int nd;                      /* -1: offset None (a byte entry) */
	int64_t off[MT_PK_MAX_DIMS];
	const char *file;
	uint64_t at, length;
};

static int srec_cmp(const void *a, const void *b)
{
	const struct srec *x = a, *y = b;
	int c = strcmp(x->fqn, y->fqn);

	if (c)
		return c;
	if (x->nd != y->nd)
		return x->nd < y->nd ? -1 : 1;
	for (int i = 0; i < x->nd; i++)
		if (x->off[i] != y->off[i])
			return x->off[i] < y->off[i] ? -1 : 1;
	return 0;
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int json_check(const char *dir, struct mt_err *err)
{
	char path[PATH_MAX];
	json_error_t je;
	json_t *j, *b, *v;
	int rc = -1;

	snprintf(path, sizeof(path), "%s/metadata.json", dir);
	j = json_load_file(path, 0, &je);
	if (!j)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': not readable JSON (%s, line %d)", path, je.text, je.line);
	b = json_object_get(j, "sharded_backend");
	v = json_object_get(j, "sharded_backend_version");
	if (!json_is_object(j) || !json_is_string(b))
		mt_err_set(err, MT_EXIT_DATA, "'%s': no sharded_backend: not a Megatron distributed checkpoint", path);
	else if (strcmp(json_string_value(b), "torch_dist"))
		mt_err_set(err, MT_EXIT_DATA, "'%s': sharded_backend \"%s\": only Megatron's torch_dist format is read (convert "
			   "it with Megatron's --ckpt-convert-format torch_dist)", path, json_string_value(b));
	else if (!json_is_integer(v) || json_integer_value(v) != 1)
		mt_err_set(err, MT_EXIT_DATA, "'%s': sharded_backend_version is not 1: a torch_dist version mt does not know",
			   path);
	else
		rc = 0;
	json_decref(j);
	return rc;
}

int mt_td_detect(const char *dir)
{
	char path[PATH_MAX];
	struct stat st;

	snprintf(path, sizeof(path), "%s/metadata.json", dir);
	return stat(path, &st) == 0;
}

void mt_td_close(struct mt_td *td)
{
	for (int i = 0; i < td->n; i++)
		free(td->it[i].c);
	free(td->it);
	mt_pk_arena_free(td->arena);
	for (int i = 1; i >= 0; i--) {
		mt_pk_arena_free(td->carena[i]);
		mt_tz_close(&td->cz[i]);
	}
	free(td->dir);
	free(td->common_path);
	memset(td, 0, sizeof(*td));
}

const struct mt_td_item *mt_td_find(const struct mt_td *td, const char *key)
{
	for (int i = 0; i < td->n; i++)
		if (!strcmp(td->it[i].key, key))
			return &td->it[i];
	return NULL;
}

/* The storage records of storage_data. */
static int read_storage(const char *path, const struct mt_pk *sd, struct srec **out, int *nout, struct mt_err *err)
{
	struct srec *r;

	if (!sd || sd->kind != MT_PK_DICT)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': Metadata.storage_data is not a dict", path);
	r = calloc((size_t)(sd->n ? sd->n : 1), sizeof(*r));
	if (!r)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	for (int i = 0; i < sd->n; i++) {
		const struct mt_pk *k = sd->items[2 * i], *v = sd->items[2 * i + 1], *fqn, *off, *rp, *o, *l, *td;
		int64_t x;
		if (!is_obj(k, DCP "metadata.MetadataIndex") || !is_obj(v, DCP "filesystem._StorageInfo")) {
			free(r);
			return mt_err_set(err, MT_EXIT_DATA, "'%s': storage_data entry %d is not (MetadataIndex, _StorageInfo)",
					  path, i);
		}
		fqn = mt_pk_attr(k, "fqn");
		off = mt_pk_attr(k, "offset");
		rp = mt_pk_attr(v, "relative_path");
		o = mt_pk_attr(v, "offset");
		l = mt_pk_attr(v, "length");
		td = mt_pk_attr(v, "transform_descriptors");
		if (!fqn || fqn->kind != MT_PK_STR || !rp || rp->kind != MT_PK_STR) {
			free(r);
			return mt_err_set(err, MT_EXIT_DATA, "'%s': storage_data entry %d lacks its key or file", path, i);
		}
		if (td && td->kind != MT_PK_NONE && !(td->kind == MT_PK_LIST && td->n == 0) &&
		    !(td->kind == MT_PK_TUPLE && td->n == 0)) {
			mt_err_set(err, MT_EXIT_DATA, "'%s': '%s' is stored through a stream transform (compression): not "
				   "read (Megatron writes none)", path, fqn->s);
			free(r);
			return -1;
		}
		if (!*rp->s || strchr(rp->s, '/') || !strcmp(rp->s, ".") || !strcmp(rp->s, "..") || rp->len != strlen(rp->s)) {
			mt_err_set(err, MT_EXIT_DATA, "'%s': '%s' names the file \"%s\", not a file of the folder", path, fqn->s,
				   rp->s);
			free(r);
			return -1;
		}
		r[i].fqn = fqn->s;
		r[i].file = rp->s;
		if (mt_pk_as_int(o, &x) || x < 0) {
			free(r);
			return mt_err_set(err, MT_EXIT_DATA, "'%s': '%s': no offset in its file", path, fqn->s);
		}
		r[i].at = (uint64_t)x;
		if (mt_pk_as_int(l, &x) || x < 0) {
			free(r);
			return mt_err_set(err, MT_EXIT_DATA, "'%s': '%s': no length in its file", path, fqn->s);
		}
		r[i].length = (uint64_t)x;
		if (!off || off->kind == MT_PK_NONE)
			r[i].nd = -1;
		else if (dims_of(off, r[i].off, &r[i].nd)) {
			free(r);
			return mt_err_set(err, MT_EXIT_DATA, "'%s': '%s': the offset of a chunk is not a torch.Size", path,
					  fqn->s);
		}
	}
	qsort(r, (size_t)sd->n, sizeof(*r), srec_cmp);
	*out = r;
	*nout = sd->n;
	return 0;
}

static const struct srec *srec_find(const struct srec *r, int n, const char *fqn, int nd, const int64_t *off)
{
	struct srec k = { .fqn = fqn, .nd = nd };

	if (nd > 0)
		memcpy(k.off, off, (size_t)nd * sizeof(*off));
	return bsearch(&k, r, (size_t)n, sizeof(*r), srec_cmp);
}

static int read_items(struct mt_td *td, const char *path, const struct mt_pk *sdm, const struct mt_pk *mcore,
		      const struct srec *rec, int nrec, struct mt_err *err)
{
	if (!sdm || sdm->kind != MT_PK_DICT)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': Metadata.state_dict_metadata is not a dict", path);
	td->it = calloc((size_t)(sdm->n ? sdm->n : 1), sizeof(*td->it));
	if (!td->it)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	for (int i = 0; i < sdm->n; i++) {
		const struct mt_pk *k = sdm->items[2 * i], *v = sdm->items[2 * i + 1];
		struct mt_td_item *it = &td->it[td->n];
		const struct srec *s;
		if (k->kind != MT_PK_STR)
			return mt_err_set(err, MT_EXIT_DATA, "'%s': a state_dict_metadata key is not a string", path);
		it->key = k->s;
		td->n++;
		if (is_obj(v, DCP "metadata.BytesStorageMetadata")) {
			it->bytes = 1;
			if (!(s = srec_find(rec, nrec, k->s, -1, NULL)))
				return mt_err_set(err, MT_EXIT_DATA, "'%s': byte entry '%s' has no storage record", path, k->s);
			if (!(it->c = calloc(1, sizeof(*it->c))))
				return mt_err_set(err, MT_EXIT_IO, "out of memory");
			it->nc = 1;
			it->c[0].file = s->file;
			it->c[0].at = s->at;
			it->c[0].length = s->length;
			continue;
		}
		if (!is_obj(v, DCP "metadata.TensorStorageMetadata"))
			return mt_err_set(err, MT_EXIT_DATA, "'%s': '%s' is described by neither TensorStorageMetadata nor "
					  "BytesStorageMetadata", path, k->s);
		{
			const struct mt_pk *pr = mt_pk_attr(v, "properties"), *sz = mt_pk_attr(v, "size"),
					   *ch = mt_pk_attr(v, "chunks"), *pst;
			pst = is_obj(pr, DCP "metadata.TensorProperties") ? pr->state : NULL;
			/* TensorProperties' state: (dtype, layout, requires_grad, memory_format, pin_memory),
			 * or a dict of the fields from older writers */
			if (pst && pst->kind == MT_PK_TUPLE && pst->n >= 1)
				pst = pst->items[0];
			else if (pst && pst->kind == MT_PK_DICT)
				pst = mt_pk_get(pst, "dtype");
			else
				pst = NULL;
			if (dtype_of(pst, &it->dtype))
				return mt_err_set(err, MT_EXIT_DATA, "'%s': '%s': no dtype mt reads in its TensorProperties", path,
						  k->s);
			if (dims_of(sz, it->shape, &it->ndim))
				return mt_err_set(err, MT_EXIT_DATA, "'%s': '%s': its size is not a torch.Size", path, k->s);
			{
				int64_t numel = 1;
				for (int d = 0; d < it->ndim; d++)
					if (it->shape[d] > 0 && (numel *= it->shape[d]) > ((int64_t)1 << 40))
						return mt_err_set(err, MT_EXIT_DATA, "'%s': '%s': more than 2^40 elements", path,
								  k->s);
			}
			if (!ch || ch->kind != MT_PK_LIST)
				return mt_err_set(err, MT_EXIT_DATA, "'%s': '%s': no list of chunks", path, k->s);
			if (!(it->c = calloc((size_t)(ch->n ? ch->n : 1), sizeof(*it->c))))
				return mt_err_set(err, MT_EXIT_IO, "out of memory");
			for (int j = 0; j < ch->n; j++) {
				struct mt_td_chunk *c = &it->c[j];
				int n1, n2;
				if (!is_obj(ch->items[j], DCP "metadata.ChunkStorageMetadata") ||
				    dims_of(mt_pk_attr(ch->items[j], "offsets"), c->off, &n1) ||
				    dims_of(mt_pk_attr(ch->items[j], "sizes"), c->size, &n2) || n1 != it->ndim || n2 != it->ndim)
					return mt_err_set(err, MT_EXIT_DATA, "'%s': '%s': chunk %d is not a ChunkStorageMetadata of "
							  "%d dimensions", path, k->s, j, it->ndim);
				if (!(s = srec_find(rec, nrec, k->s, it->ndim, c->off)))
					return mt_err_set(err, MT_EXIT_DATA, "'%s': '%s': chunk %d has no storage record", path,
							  k->s, j);
				c->file = s->file;
				c->at = s->at;
				c->length = s->length;
				it->nc++;
			}
		}
		if (mcore && mcore->kind == MT_PK_DICT) {
			const struct mt_pk *m = mt_pk_get(mcore, k->s);
			if (m && mt_pk_get(m, "nd_reformulated_orig_global_shape"))
				it->nd_reformulated = 1;
		}
	}
	return 0;
}

/* The common state: common_state/shard_0_1 (a torch.save archive at an offset in a
 * .distcp file), else common.pt. Its pickle holds the dict, a list of one dict (a
 * ShardedObject's payload), or an io.BytesIO whose bytes are such an archive (DCP's own
 * planner saves byte entries so): one level of that, no more. */
static int read_common(struct mt_td *td, int crc, struct mt_err *err)
{
	const struct mt_td_item *it = mt_td_find(td, "common_state/shard_0_1");
	char path[PATH_MAX];
	int rc;

	if (it && !it->bytes)
		return mt_err_set(err, MT_EXIT_DATA, "'%s/.metadata': common_state/shard_0_1 is a tensor, not a byte entry",
				  td->dir);
	if (it) {
		snprintf(path, sizeof(path), "%s/%s", td->dir, it->c[0].file);
		rc = mt_tz_open_at(&td->cz[0], path, it->c[0].at, it->c[0].length, err);
	} else {
		struct stat st;
		snprintf(path, sizeof(path), "%s/common.pt", td->dir);
		if (stat(path, &st) != 0)
			return mt_err_set(err, MT_EXIT_DATA, "'%s': neither a common_state entry in .metadata nor common.pt: "
					  "no args, so not a Megatron checkpoint mt can read", td->dir);
		td->common_pt = 1;
		rc = mt_tz_open(&td->cz[0], path, err);
	}
	if (rc)
		return -1;
	if (!(td->common_path = strdup(td->cz[0].path)))
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	for (int level = 0; level < 2; level++) {
		const struct mt_tz_entry *e = mt_tz_find(&td->cz[level], "data.pkl");
		struct mt_pk *root, *st;
		char where[PATH_MAX + 64];
		for (int i = 0; crc && i < td->cz[level].n; i++)
			if (mt_tz_check_crc(&td->cz[level], &td->cz[level].e[i], err))
				return -1;
		if (!e)
			return mt_err_set(err, MT_EXIT_DATA, "'%s': no data.pkl in the archive: not a torch.save file",
					  td->common_path);
		snprintf(where, sizeof(where), "'%s' data.pkl%s", td->common_path, level ? " (inside its io.BytesIO)" : "");
		if (mt_pk_parse(e->data, e->size, where, &td->carena[level], &root, err))
			return -1;
		if (root->kind == MT_PK_LIST && root->n == 1)
			root = root->items[0];
		if (root->kind == MT_PK_DICT) {
			td->common = root;
			return 0;
		}
		st = root->kind == MT_PK_OBJECT && !strcmp(root->s, "_io.BytesIO") ? root->state : NULL;
		if (level == 1 || !st || st->kind != MT_PK_TUPLE || st->n < 1 || st->items[0]->kind != MT_PK_BYTES)
			break;
		if (mt_tz_open_mem(&td->cz[1], td->common_path, st->items[0]->s, st->items[0]->len, err))
			return -1;
	}
	return mt_err_set(err, MT_EXIT_DATA, "'%s': the common state is not a dict", td->common_path);
}

int mt_td_open(struct mt_td *td, const char *dir, int crc, struct mt_err *err)
{
	char path[PATH_MAX];
	char *data = NULL;
	size_t len = 0;
	struct mt_pk *root;
	struct srec *rec = NULL;
	int nrec = 0, rc = -1;
	static const char *const known[] = { "state_dict_metadata", "planner_data", "storage_data", "storage_meta",
					     "version", "mcore_data" };

	memset(td, 0, sizeof(*td));
	if (!(td->dir = strdup(dir)))
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	if (json_check(dir, err))
		goto out;
	snprintf(path, sizeof(path), "%s/.metadata", dir);
	if (mt_file_read(path, &data, &len, err))
		goto out;
	{
		char where[PATH_MAX + 8];
		snprintf(where, sizeof(where), "'%s'", path);
		if (mt_pk_parse((const unsigned char *)data, len, where, &td->arena, &root, err))
			goto out;
	}
	if (!is_obj(root, DCP "metadata.Metadata") || !root->state || root->state->kind != MT_PK_DICT) {
		mt_err_set(err, MT_EXIT_DATA, "'%s': not a distributed checkpoint's Metadata", path);
		goto out;
	}
	for (int i = 0; i < root->state->n; i++) {
		const struct mt_pk *k = root->state->items[2 * i];
		size_t j = 0;
		while (j < sizeof(known) / sizeof(known[0]) && (k->kind != MT_PK_STR || strcmp(k->s, known[j])))
			j++;
		if (j == sizeof(known) / sizeof(known[0]) && k->kind == MT_PK_STR)
			mt_warn("'%s': Metadata has an attribute mt does not know, '%s' (ignored)", path, k->s);
	}
	if (read_storage(path, mt_pk_attr(root, "storage_data"), &rec, &nrec, err) ||
	    read_items(td, path, mt_pk_attr(root, "state_dict_metadata"), mt_pk_attr(root, "mcore_data"), rec, nrec, err))
		goto out;
	{
		/* the distinct files, for the report */
		const char **f = malloc((size_t)(nrec ? nrec : 1) * sizeof(*f));
		if (!f) {
			mt_err_set(err, MT_EXIT_IO, "out of memory");
			goto out;
		}
		for (int i = 0; i < nrec; i++)
			f[i] = rec[i].file;
		qsort(f, (size_t)nrec, sizeof(*f), str_cmp);
		for (int i = 0; i < nrec; i++)
			td->nfiles += i == 0 || strcmp(f[i], f[i - 1]);
		free(f);
	}
	if (read_common(td, crc, err))
		goto out;
	rc = 0;
out:
	free(rec);
	free(data);
	if (rc)
		mt_td_close(td);
	return rc;
}

/* Copy the tensor x (of archive z) into out (the global tensor of `it`) at chunk c,
 * marking the elements it covers in `seen` (one bit each): -1 when one is covered twice. */
static int place(const struct mt_td_item *it, const struct mt_td_chunk *c, const struct mt_tz *z, const struct mt_pk *x,
		 float *out, unsigned char *seen, struct mt_err *err)
{
	const struct mt_pk *st = x->storage;
	char key[300];
	const struct mt_tz_entry *e;
	size_t es = mt_pk_dtype_size(x->dtype);
	int64_t n = 1, gstride[MT_PK_MAX_DIMS], idx[MT_PK_MAX_DIMS] = { 0 };

	snprintf(key, sizeof(key), "data/%s", st->s);
	e = mt_tz_find(z, key);
	if (!e)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': '%s': its storage '%s%s' is missing from the archive", z->path,
				  it->key, z->prefix, key);
	if (e->size != (uint64_t)st->i * es)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': '%s': storage '%s%s' holds %llu bytes, the pickle says %lld "
				  "elements", z->path, it->key, z->prefix, key, (unsigned long long)e->size, (long long)st->i);
	for (int d = it->ndim - 1; d >= 0; d--) {
		gstride[d] = n;
		n *= it->shape[d];
	}
	/* row by row along the last dimension: the index arithmetic once a row */
	{
		int last = it->ndim - 1;
		int64_t inner = it->ndim ? c->size[last] : 1, sstep = it->ndim ? x->stride[last] : 1, rows = 1;
		for (int d = 0; d < last; d++)
			rows *= c->size[d];
		if (inner == 0)
			rows = 0;
		for (int64_t i = 0; i < rows; i++) {
			int64_t so = x->offset, go = 0;
			for (int d = 0; d < last; d++) {
				so += idx[d] * x->stride[d];
				go += (c->off[d] + idx[d]) * gstride[d];
			}
			if (it->ndim)
				go += c->off[last];
			for (int64_t k = 0, g = go; k < inner; k++, g++) {
				if (seen[g >> 3] & (1u << (g & 7)))
					return mt_err_set(err, MT_EXIT_DATA, "'%s': '%s': its chunks overlap (element %lld twice): "
							  "they do not tile the tensor", z->path, it->key, (long long)g);
				seen[g >> 3] |= (unsigned char)(1u << (g & 7));
			}
			/* a contiguous row of bf16 converted in a loop of its own: elem_f32's switch per
			 * element was a sixth of an import's time (perf, bench/ckpt-megatron.sh) */
			if (sstep == 1 && x->dtype == MT_PKD_BF16) {
				const unsigned char *src = e->data + (size_t)so * es;
				for (int64_t k = 0; k < inner; k++)
					out[go + k] = bf16_f32(src + 2 * k);
			} else {
				for (int64_t k = 0; k < inner; k++, so += sstep)
					out[go + k] = elem_f32(e->data + (size_t)so * es, x->dtype);
			}
			for (int d = last - 1; d >= 0; d--) {
				if (++idx[d] < c->size[d])
					break;
				idx[d] = 0;
			}
		}
	}
	return 0;
}

/* A chunk must be a torch.save archive: its first bytes PK\x03\x04 (checked before the
 * archive is read, so that the message says what is wrong). */
static int chunk_magic(const char *path, const char *key, const struct mt_td_chunk *c, struct mt_err *err)
{
	unsigned char b[4];
	FILE *fp = fopen(path, "rb");
	int got;

	if (!fp)
		return mt_err_errno(err, MT_EXIT_IO, "cannot open '%s' (the chunk of '%s')", path, key);
	got = c->length >= 4 && fseeko(fp, (off_t)c->at, SEEK_SET) == 0 && fread(b, 1, 4, fp) == 4;
	fclose(fp);
	if (!got)
		return 0; /* too short: mt_tz_open_at says so */
	if (memcmp(b, "PK\x03\x04", 4))
		return mt_err_set(err, MT_EXIT_DATA, "'%s': the chunk of '%s' at bytes %llu..%llu does not start PK\\x03\\x04: "
				  "not a torch.save archive (Megatron stores every chunk as one)", path, key,
				  (unsigned long long)c->at, (unsigned long long)(c->at + c->length));
	return 0;
}

int mt_td_read(const struct mt_td *td, const struct mt_td_item *it, int crc, float *out, struct mt_err *err)
{
	int64_t total = 1, covered = 0;
	unsigned char *seen;
	int rc = -1;

	if (it->bytes)
		return mt_err_set(err, MT_EXIT_DATA, "'%s/.metadata': '%s' is a byte entry, not a tensor", td->dir, it->key);
	if (it->nd_reformulated)
		return mt_err_set(err, MT_EXIT_DATA, "'%s/.metadata': '%s' is stored in the distributed optimizer's "
				  "flattened layout (nd_reformulated_orig_global_shape), which mt does not read", td->dir, it->key);
	for (int d = 0; d < it->ndim; d++)
		total *= it->shape[d];
	seen = calloc((size_t)(total / 8 + 1), 1);
	if (!seen)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	for (int j = 0; j < it->nc; j++) {
		const struct mt_td_chunk *c = &it->c[j];
		char path[PATH_MAX], where[PATH_MAX + 64];
		struct mt_tz z;
		struct mt_pk_arena *a = NULL;
		struct mt_pk *x = NULL;
		const struct mt_tz_entry *e;
		int64_t n = 1;
		int bad = 0;
		for (int d = 0; d < it->ndim; d++) {
			if (c->off[d] + c->size[d] > it->shape[d])
				bad = 1;
			n *= c->size[d];
		}
		snprintf(path, sizeof(path), "%s/%s", td->dir, c->file);
		if (bad) {
			mt_err_set(err, MT_EXIT_DATA, "'%s/.metadata': '%s': chunk %d lies outside the tensor's shape", td->dir,
				   it->key, j);
			goto out;
		}
		if (chunk_magic(path, it->key, c, err) || mt_tz_open_at(&z, path, c->at, c->length, err))
			goto out;
		for (int i = 0; crc && i < z.n && !bad; i++)
			bad = mt_tz_check_crc(&z, &z.e[i], err) != 0;
		e = mt_tz_find(&z, "data.pkl");
		snprintf(where, sizeof(where), "'%s' data.pkl", z.path);
		if (!bad && !e)
			bad = mt_err_set(err, MT_EXIT_DATA, "'%s': no data.pkl in the chunk's archive", z.path);
		else if (!bad && mt_pk_parse(e->data, e->size, where, &a, &x, err))
			bad = 1;
		else if (!bad) {
			int ok = x->kind == MT_PK_TENSOR && x->ndim == it->ndim;
			for (int d = 0; ok && d < it->ndim; d++)
				ok = x->size[d] == c->size[d];
			if (!ok)
				bad = mt_err_set(err, MT_EXIT_DATA, "'%s': the chunk of '%s' is not a tensor of the chunk's shape",
						 z.path, it->key);
			else if (!is_float(x->dtype))
				bad = mt_err_set(err, MT_EXIT_DATA, "'%s': the chunk of '%s' is %s, not a floating-point type",
						 z.path, it->key, mt_pk_dtype_name(x->dtype));
			else if (place(it, c, &z, x, out, seen, err))
				bad = 1;
		}
		mt_pk_arena_free(a);
		mt_tz_close(&z);
		if (bad)
			goto out;
		covered += n;
	}
	if (covered != total) {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/.metadata", td->dir);
		mt_err_set(err, MT_EXIT_DATA, "'%s': the chunks of '%s' cover %lld of its %lld elements: they do not tile the "
			   "tensor", path, it->key, (long long)covered, (long long)total);
		goto out;
	}
	rc = 0;
out:
	free(seen);
	return rc;
}

/* ---- the import ---- */


enum { K_PARAM, K_TIED, K_SKIP };

static int wb(const char *rest, enum mt_param_kind w, enum mt_param_kind b, int *kind)
{
	if (!strcmp(rest, "weight"))
		*kind = (int)w;
	else if (!strcmp(rest, "bias"))
		*kind = (int)b;
	else
		return -1;
	return 0;
}

static int ends_with(const char *s, const char *x)
{
	size_t n = strlen(s), m = strlen(x);

	return n >= m && !strcmp(s + n - m, x);
}

/* A model key: K_PARAM with its kind and layer (-1: outside the layers; -2: stacked on the
 * leading axis), K_TIED, K_SKIP; -1 for a key mt does not know. */
static int map_key(const char *s, int untied, int *kind, int *layer)
{
	*layer = -1;
	if (ends_with(s, "._extra_state") || ends_with(s, ".inv_freq"))
		return K_SKIP;
	if (!strcmp(s, "embedding.word_embeddings.weight")) {
		*kind = MT_P_WORD_EMB;
		return K_PARAM;
	}
	if (!strcmp(s, "embedding.position_embeddings.weight")) {
		*kind = MT_P_POS_EMB;
		return K_PARAM;
	}
	if (!strcmp(s, "output_layer.weight")) {
		*kind = MT_P_OUTPUT;
		return untied ? K_PARAM : K_TIED;
	}
	if (!strncmp(s, "decoder.final_layernorm.", 24) && !wb(s + 24, MT_P_FINAL_W, MT_P_FINAL_B, kind))
		return K_PARAM;
	if (strncmp(s, "decoder.layers.", 15))
		return -1;
	s += 15;
	*layer = -2;
	if (*s >= '0' && *s <= '9') { /* per-layer keys (non-homogeneous layers) */
		char *end;
		long i = strtol(s, &end, 10);
		if (*end != '.' || i < 0 || i > 1000000)
			return -1;
		*layer = (int)i;
		s = end + 1;
	}
	return mt_meg_layer_kind(s, kind) ? -1 : K_PARAM;
}

struct tdim {
	const struct mt_meg_import_opts *o;
	struct mt_td td;
	struct mt_config cfg;
	struct mt_params tab;
	float *w, *m, *v, *master, *buf;
	unsigned char *have[4];      /* weights, exp_avg, exp_avg_sq, fp32_param: [param] */
	int64_t tensors;
};

static const char *const opt_states[] = { "exp_avg", "exp_avg_sq", "fp32_param" };

/* One tensor key into its parameters: a whole tensor, or on a leading layer axis. */
static int take_item(struct tdim *im, const struct mt_td_item *it, const char *mkey, int which, struct mt_err *err)
{
	char mdpath[PATH_MAX];
	int kind = 0, layer, what = map_key(mkey, im->cfg.untie_embeddings_and_output_weights, &kind, &layer);
	int L = im->cfg.num_layers, lo, hi, stacked;
	int64_t total = 1, per;
	float *dst = which == 0 ? im->w : which == 1 ? im->m : which == 2 ? im->v : im->master;

	snprintf(mdpath, sizeof(mdpath), "%s/.metadata", im->td.dir);
	if (what < 0) {
		if (strstr(mkey, "q_layernorm") || strstr(mkey, "k_layernorm"))
			return mt_err_set(err, MT_EXIT_USAGE, "'%s': '%s': --qk-layernorm is not supported", mdpath, it->key);
		if (strstr(mkey, "experts") || strstr(mkey, "router"))
			return mt_err_set(err, MT_EXIT_USAGE, "'%s': '%s': mixture-of-experts layers are not supported", mdpath,
					  it->key);
		return mt_err_set(err, MT_EXIT_DATA, "'%s': '%s' is not a tensor of a GPT model mt knows", mdpath, it->key);
	}
	if (what == K_SKIP)
		return 0;
	stacked = layer == -2;
	lo = stacked ? 0 : layer;
	hi = stacked ? L : layer + 1;
	{
		const struct mt_param *p0 = mt_params_get(&im->tab, layer == -1 ? -1 : lo, what == K_TIED ? MT_P_WORD_EMB : kind);
		int64_t want[MT_PK_MAX_DIMS + 1];
		int nd = 0, ok;
		if (!p0 || (layer >= 0 && layer >= L))
			return mt_err_set(err, MT_EXIT_DATA, "'%s': '%s' has no place in the model args describe (no such "
					  "parameter with this configuration)", mdpath, it->key);
		if (stacked)
			want[nd++] = L;
		want[nd++] = p0->shape[0];
		if (p0->ndim == 2)
			want[nd++] = p0->shape[1];
		ok = it->ndim == nd;
		for (int d = 0; ok && d < nd; d++)
			ok = it->shape[d] == want[d];
		if (!ok) {
			char got[160], exp[160];
			size_t a = 0, b = 0;
			for (int d = 0; d < it->ndim && a < sizeof(got); d++)
				a += (size_t)snprintf(got + a, sizeof(got) - a, "%s%lld", d ? ", " : "", (long long)it->shape[d]);
			for (int d = 0; d < nd && b < sizeof(exp); d++)
				b += (size_t)snprintf(exp + b, sizeof(exp) - b, "%s%lld", d ? ", " : "", (long long)want[d]);
			return mt_err_set(err, MT_EXIT_DATA, "'%s': '%s' has shape [%s]; args say [%s] (mt's %s)", mdpath,
					  it->key, got, exp, p0->name);
		}
	}
	for (int d = 0; d < it->ndim; d++)
		total *= it->shape[d];
	free(im->buf);
	if (!(im->buf = malloc((size_t)total * sizeof(float))))
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	if (mt_td_read(&im->td, it, im->o->check_crc, im->buf, err))
		return -1;
	if (what == K_TIED)
		return 0; /* the embedding's copy: the embedding itself counts */
	per = total / (hi - lo);
	for (int l = lo; l < hi; l++) {
		const struct mt_param *p = mt_params_get(&im->tab, layer == -1 ? -1 : l, kind);
		unsigned char *h = &im->have[which][p - im->tab.p];
		if (*h)
			return mt_err_set(err, MT_EXIT_DATA, "'%s': '%s' gives mt's %s a second time", mdpath, it->key, p->name);
		*h = 1;
		memcpy(dst + p->offset, im->buf + (l - lo) * per, (size_t)per * sizeof(float));
	}
	if (which == 0)
		im->tensors++;
	return 0;
}

/* The optimizer's non-tensor state in the common dict: whether it is the distributed
 * optimizer's (*dist names its layout), and Adam's step. */
static const struct mt_pk *common_opt(const struct mt_pk *c, const char **dist)
{
	const struct mt_pk *opt = mt_pk_get(c, "optimizer"), *cm = mt_pk_get(c, "content_metadata"), *x;

	*dist = NULL;
	if ((x = mt_pk_get(cm, "distrib_optim_sharding_type")) && x->kind == MT_PK_STR)
		*dist = x->s;
	if (!*dist && (x = mt_pk_get(opt, "param_state_sharding_type")))
		*dist = x->kind == MT_PK_STR ? x->s : "(unnamed)";
	/* chained optimizers: a list of optimizer dicts (one level, no deeper) */
	for (int i = 0; !*dist && opt && opt->kind == MT_PK_LIST && i < opt->n; i++)
		if ((x = mt_pk_get(opt->items[i], "param_state_sharding_type")))
			*dist = x->kind == MT_PK_STR ? x->s : "(unnamed)";
	return opt;
}

static int common_step(const struct mt_td *td, const struct mt_pk *opt, int64_t *step)
{
	const struct mt_pk *cand[3], *inner = mt_pk_get(opt, "optimizer"), *g;
	int64_t x;

	/* Megatron's Float16OptimizerWithFloat16Params/FP32Optimizer: state_dict['optimizer']
	 * ['state']['common_step'], an int or a 0-d tensor */
	cand[0] = mt_pk_get(mt_pk_get(inner, "state"), "common_step");
	cand[1] = mt_pk_get(mt_pk_get(opt, "state"), "common_step");
	cand[2] = mt_pk_get(opt, "common_step");
	for (int i = 0; i < 3; i++) {
		const struct mt_pk *v = cand[i];
		if (!v)
			continue;
		if (!mt_pk_as_int(v, &x) && x >= 0) {
			*step = x;
			return 0;
		}
		if (v->kind == MT_PK_TENSOR && mt_pk_numel(v) == 1) {
			char key[300];
			const struct mt_tz_entry *e;
			snprintf(key, sizeof(key), "data/%s", v->storage->s);
			e = mt_tz_find(&td->cz[td->cz[1].n ? 1 : 0], key);
			if (e && e->size >= (uint64_t)(v->offset + 1) * mt_pk_dtype_size(v->dtype)) {
				const unsigned char *p = e->data + (size_t)v->offset * mt_pk_dtype_size(v->dtype);
				if (v->dtype == MT_PKD_I64) {
					memcpy(&x, p, 8);
				} else if (v->dtype == MT_PKD_I32) {
					int32_t y;
					memcpy(&y, p, 4);
					x = y;
				} else if (is_float(v->dtype)) {
					x = (int64_t)elem_f32(p, v->dtype);
				} else {
					continue;
				}
				if (x >= 0) {
					*step = x;
					return 0;
				}
			}
		}
	}
	/* else the parameter groups' step (optimizers that keep it there) */
	g = mt_pk_get(inner ? inner : opt, "param_groups");
	if (g && g->kind == MT_PK_LIST && g->n > 0 && !mt_pk_as_int(mt_pk_get(g->items[0], "step"), &x) && x >= 0) {
		*step = x;
		return 0;
	}
	return -1;
}

int mt_td_import(const char *src, const char *dir, int64_t it, const char *ckptdir, const struct mt_meg_import_opts *o,
		 struct mt_meg_report *r, struct mt_err *err)
{
	struct tdim im;
	struct mt_pp_split sp;
	const struct mt_pk *ns, *opt;
	const char *dist = NULL;
	int rc = -1, tp = 0, nopt = 0, nmaster = 0;
	int64_t ckv = 0, consumed_t = 0, consumed_v = 0, step = 0;
	char *cfg = NULL, *args = NULL, mdpath[PATH_MAX];

	memset(&im, 0, sizeof(im));
	memset(r, 0, sizeof(*r));
	im.o = o;
	snprintf(mdpath, sizeof(mdpath), "%s/.metadata", dir);
	if (mt_td_open(&im.td, dir, o->check_crc, err))
		return -1;
	ns = mt_pk_get(im.td.common, "args");
	if (mt_meg_args_config(ns, im.td.common_path, o, &im.cfg, &sp, &tp, err))
		goto out;
	{
		const struct mt_pk *v = mt_pk_get(im.td.common, "checkpoint_version");
		double x = 0;
		if (v && !mt_pk_as_double(v, &x) && (x < 2.0 || x > 3.0)) {
			mt_err_set(err, MT_EXIT_DATA, "'%s': checkpoint_version %g: mt reads 2.0 to 3.0", im.td.common_path, x);
			goto out;
		}
		ckv = (int64_t)(x * 10 + 0.5);
		v = mt_pk_get(im.td.common, "iteration");
		{
			int64_t saved;
			if (v && !mt_pk_as_int(v, &saved) && saved >= 0)
				it = saved;
		}
		if (it < 0)
			it = 0;
		if (o->iteration >= 0)
			it = o->iteration;
	}
	if (mt_pk_as_int(mt_pk_attr(ns, "consumed_train_samples"), &consumed_t) || consumed_t < 0)
		consumed_t = 0;
	if (mt_pk_as_int(mt_pk_attr(ns, "consumed_valid_samples"), &consumed_v) || consumed_v < 0)
		consumed_v = 0;
	if (mt_params_build(&im.tab, &im.cfg, err)) {
		mt_err_prefix(err, "'%s': args", im.td.common_path);
		goto out;
	}
	/* the optimizer state: the plain optimizer's, model-shaped; the distributed one's refused */
	opt = common_opt(im.td.common, &dist);
	for (int i = 0; i < im.td.n; i++) {
		const char *k = im.td.it[i].key;
		if (!strncmp(k, "optimizer.distributed.", 22) && !dist)
			dist = "dp_reshardable or dp_zero_gather_scatter";
		if (!strncmp(k, "optimizer.state.", 16) && !im.td.it[i].bytes)
			nopt++;
		if (!strncmp(k, "optimizer.state.fp32_param.", 27))
			nmaster++;
	}
	if (o->optimizer && dist) {
		mt_err_set(err, MT_EXIT_DATA, "'%s': the optimizer state is the distributed optimizer's (%s), which mt does not "
			   "read: import with --no-load-optim for the weights only", im.td.common_pt ? im.td.common_path : mdpath,
			   dist);
		goto out;
	}
	if (o->optimizer && nopt > 0 && common_step(&im.td, opt, &step)) {
		mt_err_set(err, MT_EXIT_DATA, "'%s': optimizer state without Adam's step count (common_step or the parameter "
			   "groups' step)", im.td.common_path);
		goto out;
	}
	im.w = calloc((size_t)im.tab.total, sizeof(float));
	for (int k = 0; k < 4; k++)
		im.have[k] = calloc((size_t)im.tab.n, 1);
	if (!im.w || !im.have[0] || !im.have[1] || !im.have[2] || !im.have[3]) {
		mt_err_set(err, MT_EXIT_IO, "out of memory for the %lld weights", (long long)im.tab.total);
		goto out;
	}
	if (o->optimizer && nopt > 0 && (!(im.m = calloc((size_t)im.tab.total, sizeof(float))) ||
					 !(im.v = calloc((size_t)im.tab.total, sizeof(float))) ||
					 (nmaster && !(im.master = calloc((size_t)im.tab.total, sizeof(float)))))) {
		mt_err_set(err, MT_EXIT_IO, "out of memory for the optimizer state");
		goto out;
	}
	for (int i = 0; i < im.td.n; i++) {
		const struct mt_td_item *x = &im.td.it[i];
		const char *k = x->key;
		if (x->bytes)
			continue; /* common state, RNG, rerun state, _extra_state: no weights */
		if (!strncmp(k, "optimizer.", 10)) {
			int which = -1;
			if (!o->optimizer)
				continue;
			for (int s = 0; s < 3 && which < 0; s++) {
				size_t n = strlen(opt_states[s]);
				if (!strncmp(k + 16, opt_states[s], n) && k[16 + n] == '.' && !strncmp(k, "optimizer.state.", 16))
					which = s + 1;
			}
			if (which < 0) {
				mt_err_set(err, MT_EXIT_DATA, "'%s': '%s' is not the plain optimizer's exp_avg, exp_avg_sq or "
					   "fp32_param of a model tensor (chained optimizers are not read): import with "
					   "--no-load-optim for the weights only", mdpath, k);
				goto out;
			}
			if (take_item(&im, x, k + 16 + strlen(opt_states[which - 1]) + 1, which, err))
				goto out;
			continue;
		}
		if (!strncmp(k, "rng_state", 9) || !strncmp(k, "rerun_state_machine", 19))
			continue;
		if (take_item(&im, x, k, 0, err))
			goto out;
	}
	for (int i = 0; i < im.tab.n; i++) {
		const struct mt_param *p = &im.tab.p[i];
		if (!im.have[0][i]) {
			mt_err_set(err, MT_EXIT_DATA, "'%s': no tensor for mt's %s: the checkpoint lacks a weight that args say "
				   "the model has", mdpath, p->name);
			goto out;
		}
		if (im.m && (!im.have[1][i] || !im.have[2][i] || (im.master && !im.have[3][i]))) {
			mt_err_set(err, MT_EXIT_DATA, "'%s': no %s for mt's %s: the optimizer state is incomplete (import with "
				   "--no-load-optim for the weights only)", mdpath,
				   !im.have[1][i] ? "exp_avg" : !im.have[2][i] ? "exp_avg_sq" : "fp32_param", p->name);
			goto out;
		}
	}
	if (im.master)
		memcpy(im.w, im.master, (size_t)im.tab.total * sizeof(float)); /* the fp32 masters are mt's weights */
	r->tp = tp;
	r->pp = sp.size;
	r->vp = sp.vp;
	r->iteration = it;
	r->cfg = im.cfg;
	r->files = im.td.nfiles + im.td.common_pt;
	r->tensors = im.tensors;
	r->optimizer = im.m != NULL;
	cfg = mt_config_to_json(&im.cfg);
	args = mt_meg_args_provenance(ns, src, r, ckv);
	if (args) { /* the record says which of Megatron's formats it came from */
		json_t *j = json_loads(args, 0, NULL), *from = json_object_get(j, "imported_from");
		free(args);
		args = NULL;
		if (json_is_object(from))
			json_object_set_new(from, "ckpt_format", json_string("torch_dist"));
		if (j)
			args = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		json_decref(j);
	}
	if (!cfg || !args) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out;
	}
	{
		struct mt_ckpt_state st = { .iteration = it,
					    .consumed_train_samples = consumed_t,
					    .consumed_valid_samples = consumed_v,
					    .optimizer_step = r->optimizer ? step : 0,
					    .config_json = cfg,
					    .train_args_json = args };
		if (mt_ckpt_save(ckptdir, &im.tab, im.w, im.m, im.v, &st, 0, err))
			goto out;
	}
	rc = 0;
out:
	mt_td_close(&im.td);
	mt_params_free(&im.tab);
	free(im.w);
	free(im.m);
	free(im.v);
	free(im.master);
	free(im.buf);
	for (int k = 0; k < 4; k++)
		free(im.have[k]);
	free(cfg);
	free(args);
	return rc;
}
