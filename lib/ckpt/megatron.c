/* megatron.c: Megatron-LM legacy checkpoints read into mt checkpoints (megatron.h's
 * import), and the tensor-parallel shards of a logical parameter in Megatron's layout
 * (megatron_shard.h), which the export (megatron_export.c) shares. */
#include "ckpt/megatron.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/atomic.h"
#include "base/files.h"
#include "ckpt/ckpt.h"
#include "ckpt/megatron_shard.h"
#include "ckpt/torchdist.h"
#include "ckpt/torchzip.h"

/* ---- element conversion ---- */

static float bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static float f16_to_f32(uint16_t h)
{
	uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
	float f;

	if (e == 0) {
		if (m == 0) {
			u = s;
		} else { /* subnormal: normalize */
			e = 127 - 15 + 1;
			while (!(m & 0x400)) {
				m <<= 1;
				e--;
			}
			m &= 0x3ff;
			u = s | e << 23 | m << 13;
		}
	} else if (e == 31) {
		u = s | 0x7f800000u | m << 13;
	} else {
		u = s | (e + 127 - 15) << 23 | m << 13;
	}
	memcpy(&f, &u, 4);
	return f;
}

static double elem(const unsigned char *p, enum mt_pk_dtype d)
{
	switch (d) {
	case MT_PKD_F32: { float f; memcpy(&f, p, 4); return f; }
	case MT_PKD_F64: { double x; memcpy(&x, p, 8); return x; }
	case MT_PKD_F16: return f16_to_f32((uint16_t)(p[0] | p[1] << 8));
	case MT_PKD_BF16: return bf16_to_f32((uint16_t)(p[0] | p[1] << 8));
	case MT_PKD_I64: { int64_t x; memcpy(&x, p, 8); return (double)x; }
	case MT_PKD_I32: { int32_t x; memcpy(&x, p, 4); return x; }
	default: return 0;
	}
}

/* ---- a rank's file ---- */

struct rankfile {
	char path[PATH_MAX];
	struct mt_tz z;
	struct mt_pk_arena *arena;
	struct mt_pk *root;
};

static void rank_close(struct rankfile *f)
{
	mt_tz_close(&f->z);
	mt_pk_arena_free(f->arena);
	f->arena = NULL;
	f->root = NULL;
}

static int rank_open(struct rankfile *f, const char *path, int crc, struct mt_err *err)
{
	const struct mt_tz_entry *e;
	char where[PATH_MAX + 32];

	memset(f, 0, sizeof(*f));
	snprintf(f->path, sizeof(f->path), "%s", path);
	if (mt_tz_open(&f->z, path, err))
		return -1;
	if (crc)
		for (int i = 0; i < f->z.n; i++)
			if (mt_tz_check_crc(&f->z, &f->z.e[i], err)) {
				rank_close(f);
				return -1;
			}
	e = mt_tz_find(&f->z, "data.pkl");
	if (!e) {
		mt_err_set(err, MT_EXIT_DATA, "'%s': no %sdata.pkl in the archive: not a torch.save file", path, f->z.prefix);
		rank_close(f);
		return -1;
	}
	snprintf(where, sizeof(where), "'%s' data.pkl", path);
	if (mt_pk_parse(e->data, e->size, where, &f->arena, &f->root, err)) {
		rank_close(f);
		return -1;
	}
	if (f->root->kind != MT_PK_DICT) {
		mt_err_set(err, MT_EXIT_DATA, "'%s': the saved object is not a dict: not a Megatron checkpoint", path);
		rank_close(f);
		return -1;
	}
	return 0;
}

/* A tensor's elements, C order, as fp32 (n must be its element count). */
static int tensor_f32(const struct rankfile *f, const struct mt_pk *t, const char *name, float *out, struct mt_err *err)
{
	const struct mt_pk *st = t->storage;
	size_t es = mt_pk_dtype_size(t->dtype);
	char key[300];
	const struct mt_tz_entry *e;
	int64_t n = mt_pk_numel(t), idx[MT_PK_MAX_DIMS] = { 0 };
	int contiguous = 1;

	if (t->dtype != MT_PKD_F32 && t->dtype != MT_PKD_F16 && t->dtype != MT_PKD_BF16 && t->dtype != MT_PKD_F64)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': tensor '%s' is %s, not a floating-point type", f->path, name,
				  mt_pk_dtype_name(t->dtype));
	snprintf(key, sizeof(key), "data/%s", st->s);
	e = mt_tz_find(&f->z, key);
	if (!e)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': tensor '%s': its storage '%s%s' is missing from the archive",
				  f->path, name, f->z.prefix, key);
	if (e->size != (uint64_t)st->i * es)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': tensor '%s': storage '%s%s' holds %llu bytes, the pickle says "
				  "%lld %s elements", f->path, name, f->z.prefix, key, (unsigned long long)e->size,
				  (long long)st->i, mt_pk_dtype_name(st->dtype));
	{
		int64_t s = 1;
		for (int i = t->ndim - 1; i >= 0; i--) {
			if (t->size[i] != 1 && t->stride[i] != s)
				contiguous = 0;
			s *= t->size[i];
		}
	}
	if (contiguous) {
		const unsigned char *p = e->data + (size_t)t->offset * es;
		if (t->dtype == MT_PKD_F32)
			memcpy(out, p, (size_t)n * 4);
		else
			for (int64_t i = 0; i < n; i++)
				out[i] = (float)elem(p + (size_t)i * es, t->dtype);
		return 0;
	}
	for (int64_t i = 0; i < n; i++) {
		int64_t off = t->offset;
		for (int d = 0; d < t->ndim; d++)
			off += idx[d] * t->stride[d];
		out[i] = (float)elem(e->data + (size_t)off * es, t->dtype);
		for (int d = t->ndim - 1; d >= 0; d--) {
			if (++idx[d] < t->size[d])
				break;
			idx[d] = 0;
		}
	}
	return 0;
}

/* A number that may be a 0-d or 1-element tensor (Adam's step) */
static int scalar_of(const struct rankfile *f, const struct mt_pk *v, double *x, struct mt_err *err)
{
	if (!v)
		return -1;
	if (v->kind == MT_PK_TENSOR && mt_pk_numel(v) == 1) {
		if (v->dtype == MT_PKD_I64 || v->dtype == MT_PKD_I32) {
			char key[300];
			const struct mt_tz_entry *e;
			snprintf(key, sizeof(key), "data/%s", v->storage->s);
			e = mt_tz_find(&f->z, key);
			if (!e || e->size < (uint64_t)(v->offset + 1) * mt_pk_dtype_size(v->dtype))
				return mt_err_set(err, MT_EXIT_DATA, "'%s': a step counter's storage is missing", f->path);
			*x = elem(e->data + (size_t)v->offset * mt_pk_dtype_size(v->dtype), v->dtype);
			return 0;
		}
		float y;
		if (tensor_f32(f, v, "step", &y, err))
			return -1;
		*x = y;
		return 0;
	}
	return mt_pk_as_double(v, x);
}

/* ---- names ---- */

enum { N_PARAM, N_TIED, N_SKIP };


static int ends_with(const char *s, const char *x)
{
	size_t n = strlen(s), m = strlen(x);

	return n >= m && !strcmp(s + n - m, x);
}

static int wb_kind(const char *rest, enum mt_param_kind w, enum mt_param_kind b, int *kind)
{
	if (!strcmp(rest, "weight"))
		*kind = (int)w;
	else if (!strcmp(rest, "bias"))
		*kind = (int)b;
	else
		return -1;
	return 0;
}

/* What a (flattened) state-dict name is: N_PARAM with its kind and chunk-local layer (-1
 * outside layers), N_TIED (the last stage's copy of a tied embedding), N_SKIP (extra
 * state, buffers); -1 for a name that holds something mt does not know. *legacy is set for
 * the legacy model's names. */
static int map_name(const char *name, int untied, int *kind, int *layer, int *legacy)
{
	const char *s = name;

	*layer = -1;
	if (ends_with(name, "._extra_state") || !strcmp(name, "_extra_state") || strstr(name, "rotary_pos_emb.inv_freq") ||
	    ends_with(name, ".inv_freq"))
		return N_SKIP;
	if (!strcmp(name, "word_embeddings_for_head.weight")) {
		*legacy = 1;
		return N_TIED;
	}
	if (!strncmp(s, "language_model.", 15)) {
		*legacy = 1;
		s += 15;
		if (!strncmp(s, "encoder.", 8) || !strncmp(s, "transformer.", 12)) {
			s = strchr(s, '.') + 1;
			if (!strncmp(s, "final_norm.", 11) && !wb_kind(s + 11, MT_P_FINAL_W, MT_P_FINAL_B, kind))
				return N_PARAM;
			if (!strncmp(s, "final_layernorm.", 16) && !wb_kind(s + 16, MT_P_FINAL_W, MT_P_FINAL_B, kind))
				return N_PARAM;
			goto layers;
		}
		if (!strcmp(s, "embedding.word_embeddings.weight")) {
			*kind = MT_P_WORD_EMB;
			return N_PARAM;
		}
		if (!strcmp(s, "embedding.position_embeddings.weight")) {
			*kind = MT_P_POS_EMB;
			return N_PARAM;
		}
		if (!strcmp(s, "output_layer.weight")) {
			*kind = MT_P_OUTPUT;
			return N_PARAM;
		}
		return -1;
	}
	if (!strcmp(s, "embedding.word_embeddings.weight")) {
		*kind = MT_P_WORD_EMB;
		return N_PARAM;
	}
	if (!strcmp(s, "embedding.position_embeddings.weight")) {
		*kind = MT_P_POS_EMB;
		return N_PARAM;
	}
	if (!strcmp(s, "output_layer.weight")) {
		*kind = MT_P_OUTPUT;
		return untied ? N_PARAM : N_TIED;
	}
	if (!strncmp(s, "decoder.final_layernorm.", 24) && !wb_kind(s + 24, MT_P_FINAL_W, MT_P_FINAL_B, kind))
		return N_PARAM;
	if (!strncmp(s, "decoder.", 8)) {
		s += 8;
		goto layers;
	}
	return -1;
layers:
	if (strncmp(s, "layers.", 7))
		return -1;
	{
		char *end;
		long i = strtol(s + 7, &end, 10);
		if (end == s + 7 || *end != '.' || i < 0 || i > 1000000)
			return -1;
		*layer = (int)i;
		s = end + 1;
	}
	return mt_meg_layer_kind(s, kind) ? -1 : N_PARAM;
}

/* Flatten a (nested) state dict: (dotted name, value) in order. */
struct flat {
	char **names;
	const struct mt_pk **vals;
	int n, cap;
};

static void flat_free(struct flat *fl)
{
	for (int i = 0; i < fl->n; i++)
		free(fl->names[i]);
	free(fl->names);
	free(fl->vals);
	memset(fl, 0, sizeof(*fl));
}

/* The deepest state dict flattened: a model's is 3 deep (legacy: model, language_model,
 * embedding, word_embeddings); a pickle's memo can make a dict that holds itself. */
#define FLAT_MAX_DEPTH 32

static int flatten(const struct mt_pk *d, const char *prefix, int depth, struct flat *fl, const char *path,
		   struct mt_err *err)
{
	if (depth > FLAT_MAX_DEPTH)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': the model's state dict is nested more than %d deep (at '%.200s%s'): "
				  "not a Megatron checkpoint, refused", path, FLAT_MAX_DEPTH, prefix,
				  strlen(prefix) > 200 ? "..." : "");
	for (int i = 0; i < d->n; i++) {
		const struct mt_pk *k = d->items[2 * i], *v = d->items[2 * i + 1];
		char *name;
		if (k->kind != MT_PK_STR)
			return mt_err_set(err, MT_EXIT_DATA, "'%s': the model's state dict has a key that is not a string "
					  "(under '%s')", path, prefix);
		if (asprintf(&name, "%s%s%s", prefix, *prefix ? "." : "", k->s) < 0)
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
		if (v->kind == MT_PK_DICT) {
			int rc = flatten(v, name, depth + 1, fl, path, err);
			free(name);
			if (rc)
				return -1;
			continue;
		}
		if (fl->n == fl->cap) {
			int cap = fl->cap ? 2 * fl->cap : 64;
			char **a = realloc(fl->names, (size_t)cap * sizeof(*a));
			const struct mt_pk **b;
			if (a)
				fl->names = a;
			b = realloc(fl->vals, (size_t)cap * sizeof(*b));
			if (!a || !b) {
				free(name);
				return mt_err_set(err, MT_EXIT_IO, "out of memory");
			}
			fl->vals = b;
			fl->cap = cap;
		}
		fl->names[fl->n] = name;
		fl->vals[fl->n++] = v;
	}
	return 0;
}

/* ---- tensor-parallel shards of a logical parameter ---- */

/* The shape of rank t's shard of p among T (p a whole-model row: shape is global);
 * -1 when the split does not divide. */
int mt_meg_shard_shape(const struct mt_param *p, int T, int64_t *r, int64_t *c)
{
	*r = p->shape[0];
	*c = p->shape[1];
	switch (p->split) {
	case MT_SPLIT_NONE:
		return 0;
	case MT_SPLIT_COLUMN:
	case MT_SPLIT_VOCAB:
		if (*r % T)
			return -1;
		*r /= T;
		return 0;
	case MT_SPLIT_COLUMN_HALVES:
		if (*r % (2 * T))
			return -1;
		*r /= T;
		return 0;
	case MT_SPLIT_ROW:
		if (*c % T)
			return -1;
		*c /= T;
		return 0;
	}
	return 0;
}

/* Copy rank t's shard between the logical tensor (at lg: p's global shape) and sh. Rows of
 * a vocabulary split beyond the logical tensor's rows (Megatron's padding past mt's) are
 * skipped to_logical, and filled with the copy row `fill_row` (>= 0) from it. */
void mt_meg_shard_copy(const struct mt_param *p, int T, int t, float *lg, float *sh, int to_logical, int64_t grows,
		       int64_t fill_row)
{
	int64_t R = p->shape[0], C = p->shape[1], r, c;

	mt_meg_shard_shape(p, T, &r, &c);
	switch (p->split) {
	case MT_SPLIT_NONE:
		if (to_logical)
			memcpy(lg, sh, (size_t)(R * C) * sizeof(float));
		else
			memcpy(sh, lg, (size_t)(R * C) * sizeof(float));
		return;
	case MT_SPLIT_COLUMN:
	case MT_SPLIT_VOCAB:
		/* grows: the rows of the Megatron-side tensor (its padded vocabulary) */
		for (int64_t i = 0; i < r; i++) {
			int64_t g = (int64_t)t * r + i;
			if (g >= R) {
				if (!to_logical)
					memcpy(sh + i * C, lg + (fill_row >= 0 ? fill_row : R - 1) * C, (size_t)C * sizeof(float));
				continue;
			}
			if (to_logical)
				memcpy(lg + g * C, sh + i * C, (size_t)C * sizeof(float));
			else
				memcpy(sh + i * C, lg + g * C, (size_t)C * sizeof(float));
		}
		(void)grows;
		return;
	case MT_SPLIT_COLUMN_HALVES: {
		int64_t half = R / 2, n = r / 2;
		for (int k = 0; k < 2; k++) {
			float *l = lg + (k * half + (int64_t)t * n) * C, *s = sh + k * n * C;
			if (to_logical)
				memcpy(l, s, (size_t)(n * C) * sizeof(float));
			else
				memcpy(s, l, (size_t)(n * C) * sizeof(float));
		}
		return;
	}
	case MT_SPLIT_ROW:
		for (int64_t i = 0; i < R; i++) {
			float *l = lg + i * C + (int64_t)t * c, *s = sh + i * c;
			if (to_logical)
				memcpy(l, s, (size_t)c * sizeof(float));
			else
				memcpy(s, l, (size_t)c * sizeof(float));
		}
		return;
	}
}

/* ---- import ---- */

struct oparam {
	const struct mt_param *p;   /* NULL for a tied copy */
	const char *name;
	int ndim, nodecay;
	int64_t r, c;
};

struct import {
	const struct mt_meg_import_opts *o;
	struct mt_config cfg;
	struct mt_params tab;
	int T, P;
	struct mt_pp_split sp;
	float *w, *m, *v;
	unsigned char *have, *have_opt;   /* [param][tp rank] */
	int optimizer;                    /* -1 unknown yet, 0 none, 1 present */
	int64_t step;
	int legacy;
	int64_t tensors;
	float *buf;                       /* one shard */
	int64_t bufn;
};

static int grow_buf(struct import *im, int64_t n, struct mt_err *err)
{
	if (n <= im->bufn)
		return 0;
	free(im->buf);
	im->buf = malloc((size_t)n * sizeof(float));
	im->bufn = im->buf ? n : 0;
	return im->buf ? 0 : mt_err_set(err, MT_EXIT_IO, "out of memory");
}

static void shape_str(char *s, size_t n, const struct mt_pk *t)
{
	size_t k = (size_t)snprintf(s, n, "[");
	for (int i = 0; i < t->ndim && k < n; i++)
		k += (size_t)snprintf(s + k, n - k, "%s%lld", i ? ", " : "", (long long)t->size[i]);
	if (k < n)
		snprintf(s + k, n - k, "]");
}

/* x, a tensor of file f, is rank t's shard of p: check its shape; copy it into dst
 * (a logical buffer) unless it is a replica of a rank other than 0. */
static int take(struct import *im, const struct rankfile *f, const char *name, const struct mt_pk *x,
		const struct mt_param *p, int t, float *dst, struct mt_err *err)
{
	int64_t r, c;

	if (!x || x->kind != MT_PK_TENSOR)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': '%s' is not a tensor", f->path, name);
	if (mt_meg_shard_shape(p, im->T, &r, &c))
		return mt_err_set(err, MT_EXIT_DATA, "'%s': tensor '%s' of %lld x %lld does not split into %d tensor-parallel "
				  "shards as args say", f->path, name, (long long)p->shape[0], (long long)p->shape[1], im->T);
	if (!((p->ndim == 1 && x->ndim == 1 && x->size[0] == r) ||
	      (p->ndim == 2 && x->ndim == 2 && x->size[0] == r && x->size[1] == c))) {
		char got[128];
		shape_str(got, sizeof(got), x);
		if (p->ndim == 2)
			return mt_err_set(err, MT_EXIT_DATA, "'%s': tensor '%s' has shape %s; args (TP %d) say [%lld, %lld] "
					  "(mt's %s)", f->path, name, got, im->T, (long long)r, (long long)c, p->name);
		return mt_err_set(err, MT_EXIT_DATA, "'%s': tensor '%s' has shape %s; args (TP %d) say [%lld] (mt's %s)",
				  f->path, name, got, im->T, (long long)r, p->name);
	}
	if (p->split == MT_SPLIT_NONE && t != 0)
		return 0;
	if (grow_buf(im, r * c, err) || tensor_f32(f, x, name, im->buf, err))
		return -1;
	mt_meg_shard_copy(p, im->T, t, dst + p->offset, im->buf, 1, 0, -1);
	return 0;
}

static int group_class(const struct mt_pk *g)
{
	double x;

	if (!mt_pk_as_double(mt_pk_get(g, "wd_mult"), &x))
		return x == 0;
	if (!mt_pk_as_double(mt_pk_get(g, "weight_decay"), &x) && x == 0)
		return -1; /* zero decay: the no-decay group, or a run without weight decay */
	if (!mt_pk_as_double(mt_pk_get(g, "weight_decay"), &x))
		return 0;
	return -1;
}

/* Megatron's non-distributed optimizer state of one file: Adam's state_dict (params
 * numbered group by group) and, for bf16/fp16 params, the fp32 masters group by group.
 * Its groups follow _get_param_groups: parameters in the model's order, split into
 * weight decay and no weight decay (biases and 1-D tensors). */
static int import_optimizer(struct import *im, const struct rankfile *f, const struct mt_pk *opt,
			    const struct oparam *op, int nop, int t, struct mt_err *err)
{
	const struct mt_pk *adam = opt, *masters = mt_pk_get(opt, "fp32_from_fp16_params"), *groups, *state;
	int *order = NULL, rc = -1, ng, cls[2] = { -1, -1 }, nd = 0, nn = 0;

	if (masters)
		adam = mt_pk_get(opt, "optimizer");
	groups = mt_pk_get(adam, "param_groups");
	state = mt_pk_get(adam, "state");
	if (!groups || groups->kind != MT_PK_LIST || !state || state->kind != MT_PK_DICT) {
		if (mt_pk_get(opt, "param_state_sharding_type") || (adam && !state))
			return mt_err_set(err, MT_EXIT_DATA, "'%s': the optimizer state is the distributed optimizer's, in "
					  "distrib_optim.pt, which is missing or not read: import with --no-load-optim for the "
					  "weights only", f->path);
		return mt_err_set(err, MT_EXIT_DATA, "'%s': the optimizer state is not Megatron's Adam state_dict "
				  "(param_groups, state): import with --no-load-optim for the weights only", f->path);
	}
	if (masters && (masters->kind != MT_PK_LIST || masters->n != groups->n))
		return mt_err_set(err, MT_EXIT_DATA, "'%s': fp32_from_fp16_params does not hold one list a parameter group",
				  f->path);
	ng = groups->n;
	for (int i = 0; i < nop; i++)
		op[i].nodecay ? nn++ : nd++;
	order = malloc((size_t)(nop ? nop : 1) * sizeof(int));
	if (!order)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	if (ng == 1) {
		for (int i = 0; i < nop; i++)
			order[i] = i;
	} else if (ng == 2) {
		int first_nodecay;
		for (int g = 0; g < 2; g++)
			cls[g] = group_class(groups->items[g]);
		if (cls[0] >= 0 && cls[1] >= 0 && cls[0] != cls[1])
			first_nodecay = cls[0];
		else {
			int n0 = groups->items[0]->kind == MT_PK_DICT && mt_pk_get(groups->items[0], "params") ?
				 mt_pk_get(groups->items[0], "params")->n : -1;
			first_nodecay = n0 == nd ? 0 : n0 == nn ? 1 : 0;
		}
		int k = 0;
		for (int pass = 0; pass < 2; pass++) {
			int want_nodecay = pass == 0 ? first_nodecay : !first_nodecay;
			for (int i = 0; i < nop; i++)
				if (op[i].nodecay == want_nodecay)
					order[k++] = i;
		}
	} else {
		mt_err_set(err, MT_EXIT_DATA, "'%s': %d optimizer parameter groups; mt reads Megatron's default grouping "
			   "(weight decay, no weight decay): import with --no-load-optim for the weights only", f->path, ng);
		goto out;
	}
	{
		int k = 0;
		for (int g = 0; g < ng; g++) {
			const struct mt_pk *grp = groups->items[g], *ids = mt_pk_get(grp, "params"),
					   *mg = masters ? masters->items[g] : NULL;
			if (!ids || ids->kind != MT_PK_LIST || (mg && (mg->kind != MT_PK_LIST || mg->n != ids->n))) {
				mt_err_set(err, MT_EXIT_DATA, "'%s': optimizer parameter group %d is malformed", f->path, g);
				goto out;
			}
			if (k + ids->n > nop) {
				mt_err_set(err, MT_EXIT_DATA, "'%s': the optimizer holds more parameters than the model (%d)",
					   f->path, nop);
				goto out;
			}
			for (int j = 0; j < ids->n; j++, k++) {
				const struct oparam *q = &op[order[k]];
				const struct mt_pk *st, *ea, *es;
				int64_t id;
				char what[256];
				if (mt_pk_as_int(ids->items[j], &id) || !(st = mt_pk_get_int(state, id))) {
					mt_err_set(err, MT_EXIT_DATA, "'%s': no Adam state for parameter %d of group %d ('%s')",
						   f->path, j, g, q->name);
					goto out;
				}
				ea = mt_pk_get(st, "exp_avg");
				es = mt_pk_get(st, "exp_avg_sq");
				if (im->step < 0) {
					double x;
					const struct mt_pk *s = mt_pk_get(st, "step");
					if (!s)
						s = mt_pk_get(grp, "step");
					if (scalar_of(f, s, &x, err) || x < 0) {
						mt_err_set(err, MT_EXIT_DATA, "'%s': no Adam step count for '%s'", f->path, q->name);
						goto out;
					}
					im->step = (int64_t)x;
				}
				if (!q->p)
					continue; /* the tied copy: the first stage's state counts */
				snprintf(what, sizeof(what), "exp_avg of %s", q->name);
				if (take(im, f, what, ea, q->p, t, im->m, err))
					goto out;
				snprintf(what, sizeof(what), "exp_avg_sq of %s", q->name);
				if (take(im, f, what, es, q->p, t, im->v, err))
					goto out;
				if (mg) {
					snprintf(what, sizeof(what), "fp32_from_fp16_params of %s", q->name);
					if (take(im, f, what, mg->items[j], q->p, t, im->w, err))
						goto out;
				}
				im->have_opt[(q->p - im->tab.p) * im->T + t] = 1;
			}
		}
		if (k != nop) {
			mt_err_set(err, MT_EXIT_DATA, "'%s': the optimizer holds %d parameters, the model %d", f->path, k, nop);
			goto out;
		}
	}
	rc = 0;
out:
	free(order);
	return rc;
}

static int import_file(struct import *im, const char *path, int t, int pp, struct mt_err *err)
{
	struct rankfile f;
	struct flat fl = { 0 };
	struct oparam *op = NULL;
	int nop = 0, rc = -1, nchunks = 0;
	const struct mt_pk *opt;

	if (rank_open(&f, path, im->o->check_crc, err))
		return -1;
	/* the model chunks: "model", or "model0", "model1"... with virtual stages */
	if (mt_pk_get(f.root, "model"))
		nchunks = 1;
	else
		while (1) {
			char k[32];
			snprintf(k, sizeof(k), "model%d", nchunks);
			if (!mt_pk_get(f.root, k))
				break;
			nchunks++;
		}
	if (nchunks == 0) {
		mt_err_set(err, MT_EXIT_DATA, "'%s': no 'model' in the checkpoint", path);
		goto out;
	}
	if (nchunks != im->sp.vp) {
		mt_err_set(err, MT_EXIT_DATA, "'%s': %d model chunks, args say %d virtual stages", path, nchunks, im->sp.vp);
		goto out;
	}
	for (int c = 0; c < nchunks; c++) {
		char k[32];
		const struct mt_pk *model;
		int lo, hi, start = fl.n;
		snprintf(k, sizeof(k), nchunks == 1 && mt_pk_get(f.root, "model") ? "model" : "model%d", c);
		model = mt_pk_get(f.root, k);
		if (model->kind != MT_PK_DICT) {
			mt_err_set(err, MT_EXIT_DATA, "'%s': '%s' is not a state dict", path, k);
			goto out;
		}
		if (flatten(model, "", 1, &fl, path, err))
			goto out;
		mt_pp_split_layers(&im->cfg, &im->sp, pp, c, &lo, &hi);
		for (int i = start; i < fl.n; i++) {
			int kind = 0, layer, legacy = 0, what = map_name(fl.names[i], im->cfg.untie_embeddings_and_output_weights,
									 &kind, &layer, &legacy);
			const struct mt_param *p;
			struct oparam *q;
			if (legacy)
				im->legacy = 1;
			if (what < 0) {
				if (strstr(fl.names[i], "q_layernorm") || strstr(fl.names[i], "k_layernorm"))
					mt_err_set(err, MT_EXIT_USAGE, "'%s': '%s': --qk-layernorm is not supported", path, fl.names[i]);
				else if (strstr(fl.names[i], "experts") || strstr(fl.names[i], "router"))
					mt_err_set(err, MT_EXIT_USAGE, "'%s': '%s': mixture-of-experts layers are not supported", path,
						   fl.names[i]);
				else
					mt_err_set(err, MT_EXIT_DATA, "'%s': '%s' in %s is not a tensor of a GPT model mt knows", path,
						   fl.names[i], k);
				goto out;
			}
			if (what == N_SKIP)
				continue;
			if (fl.vals[i]->kind != MT_PK_TENSOR) {
				mt_err_set(err, MT_EXIT_DATA, "'%s': '%s' is not a tensor", path, fl.names[i]);
				goto out;
			}
			if (layer >= 0) {
				if (layer >= hi - lo) {
					mt_err_set(err, MT_EXIT_DATA, "'%s': '%s': layer %d, but this stage holds %d layers (args)",
						   path, fl.names[i], layer, hi - lo);
					goto out;
				}
				layer += lo;
			}
			p = what == N_TIED ? mt_params_get(&im->tab, -1, MT_P_WORD_EMB) : mt_params_get(&im->tab, layer, kind);
			if (!p) {
				mt_err_set(err, MT_EXIT_DATA, "'%s': '%s' has no place in the model args describe (no such "
					   "parameter with this configuration)", path, fl.names[i]);
				goto out;
			}
			if (what == N_PARAM) {
				unsigned char *h = &im->have[(p - im->tab.p) * im->T + t];
				if (*h) {
					mt_err_set(err, MT_EXIT_DATA, "'%s': '%s' (mt's %s) appears twice", path, fl.names[i], p->name);
					goto out;
				}
				if (take(im, &f, fl.names[i], fl.vals[i], p, t, im->w, err))
					goto out;
				*h = 1;
				im->tensors++;
			} else {
				/* the tied copy: shaped as the embedding's shard, values the first stage's */
				int64_t r, cc;
				const struct mt_pk *x = fl.vals[i];
				mt_meg_shard_shape(p, im->T, &r, &cc);
				if (x->ndim != 2 || x->size[0] != r || x->size[1] != cc) {
					char got[128];
					shape_str(got, sizeof(got), x);
					mt_err_set(err, MT_EXIT_DATA, "'%s': the tied output copy '%s' has shape %s; args (TP %d) say "
						   "[%lld, %lld]", path, fl.names[i], got, im->T, (long long)r, (long long)cc);
					goto out;
				}
			}
			q = realloc(op, (size_t)(nop + 1) * sizeof(*op));
			if (!q) {
				mt_err_set(err, MT_EXIT_IO, "out of memory");
				goto out;
			}
			op = q;
			op[nop].p = what == N_TIED ? NULL : p;
			op[nop].name = fl.names[i];
			op[nop].ndim = fl.vals[i]->ndim;
			op[nop].nodecay = ends_with(fl.names[i], ".bias") || fl.vals[i]->ndim == 1;
			nop++;
		}
	}
	opt = mt_pk_get(f.root, "optimizer");
	if (opt && opt->kind == MT_PK_NONE)
		opt = NULL;
	if (im->o->optimizer) {
		if (im->optimizer < 0)
			im->optimizer = opt != NULL;
		else if (im->optimizer != (opt != NULL)) {
			mt_err_set(err, MT_EXIT_DATA, "'%s': %s optimizer state where rank 0's file %s: the checkpoint is "
				   "inconsistent (import with --no-load-optim for the weights only)", path, opt ? "holds" : "lacks",
				   opt ? "has none" : "has it");
			goto out;
		}
		if (opt && (!im->m && !(im->m = calloc((size_t)im->tab.total, sizeof(float))))) {
			mt_err_set(err, MT_EXIT_IO, "out of memory");
			goto out;
		}
		if (opt && (!im->v && !(im->v = calloc((size_t)im->tab.total, sizeof(float))))) {
			mt_err_set(err, MT_EXIT_IO, "out of memory");
			goto out;
		}
		if (opt && import_optimizer(im, &f, opt, op, nop, t, err))
			goto out;
	}
	rc = 0;
out:
	free(op);
	flat_free(&fl);
	rank_close(&f);
	return rc;
}

/* The iteration directory of a Megatron save directory, or the path itself. */
static int resolve(const char *src, char *out, size_t n, int64_t *iteration, struct mt_err *err)
{
	char *tracker = mt_path_join(src, MT_CKPT_MEGATRON_TRACKER), *text = NULL;
	struct stat st;

	if (!tracker)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	*iteration = -1;
	if (stat(tracker, &st) == 0) {
		char *end;
		long long it;
		if (mt_file_read(tracker, &text, NULL, err)) {
			free(tracker);
			return -1;
		}
		while (*text && (text[strlen(text) - 1] == '\n' || text[strlen(text) - 1] == ' '))
			text[strlen(text) - 1] = 0;
		if (!strcmp(text, "release")) {
			snprintf(out, n, "%s/release", src);
			*iteration = 0;
		} else {
			it = strtoll(text, &end, 10);
			if (end == text || *end || it < 0) {
				mt_err_set(err, MT_EXIT_DATA, "'%s': \"%s\" is neither an iteration nor \"release\"", tracker, text);
				free(text);
				free(tracker);
				return -1;
			}
			mt_ckpt_iter_dir(out, n, src, it, NULL); /* Megatron names them as mt does */
			*iteration = it;
		}
		free(text);
		free(tracker);
		return 0;
	}
	free(tracker);
	snprintf(out, n, "%s", src);
	{
		const char *b = strrchr(src, '/');
		b = b && b[1] ? b + 1 : src;
		if (!strncmp(b, "iter_", 5))
			*iteration = strtoll(b + 5, NULL, 10);
		else if (!strcmp(b, "release"))
			*iteration = 0;
	}
	return 0;
}

/* The rank folders: TP and PP from their names, every one present. */
static int scan_ranks(const char *dir, int *T, int *P, struct mt_err *err)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int maxt = -1, maxp = -1, n = 0, with_pp = -1;

	if (!d)
		return mt_err_errno(err, errno == ENOENT ? MT_EXIT_IO : MT_EXIT_IO, "cannot open '%s' (a Megatron checkpoint "
				    "directory or one of its iter_N directories)", dir);
	while ((e = readdir(d))) {
		int t, p = 0, k = 0, x = 0;
		if (strncmp(e->d_name, "mp_rank_", 8))
			continue;
		if (sscanf(e->d_name, "mp_rank_%2d_%3d_%3d%n", &t, &p, &x, &k) == 3 && !e->d_name[k]) {
			closedir(d);
			return mt_err_set(err, MT_EXIT_USAGE, "'%s/%s': expert-parallel folders are not supported", dir,
					  e->d_name);
		}
		k = 0;
		if (sscanf(e->d_name, "mp_rank_%2d_%3d%n", &t, &p, &k) == 2 && k == 14 && !e->d_name[k]) {
			if (with_pp == 0)
				goto mixed;
			with_pp = 1;
		} else if (k = 0, sscanf(e->d_name, "mp_rank_%2d%n", &t, &k) == 1 && k == 10 && !e->d_name[k]) {
			if (with_pp == 1)
				goto mixed;
			with_pp = 0;
			p = 0;
		} else {
			continue;
		}
		if (t > maxt)
			maxt = t;
		if (p > maxp)
			maxp = p;
		n++;
	}
	closedir(d);
	if (n == 0)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': no mp_rank_* folders and no metadata.json: neither of "
				  "Megatron's checkpoint formats (torch, torch_dist)", dir);
	*T = maxt + 1;
	*P = maxp + 1;
	if (n != *T * *P)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': %d mp_rank_* folders where TP %d x PP %d need %d: the checkpoint is "
				  "incomplete", dir, n, *T, *P, *T * *P);
	return 0;
mixed:
	closedir(d);
	return mt_err_set(err, MT_EXIT_DATA, "'%s': mp_rank_TT and mp_rank_TT_PPP folders side by side", dir);
}

static void rank_path(char *out, size_t n, const char *dir, int t, int p, int P, const char *file)
{
	if (P == 1)
		snprintf(out, n, "%s/mp_rank_%02d/%s", dir, t, file);
	else
		snprintf(out, n, "%s/mp_rank_%02d_%03d/%s", dir, t, p, file);
}


int mt_meg_import(const char *src, const char *ckptdir, const struct mt_meg_import_opts *o, struct mt_meg_report *r,
		  struct mt_err *err)
{
	struct import im;
	char dir[PATH_MAX], path[PATH_MAX + 64];
	struct rankfile f0;
	int rc = -1, have_f0 = 0, tp_args = 0;
	int64_t it = -1, ckv = 0, consumed_t = 0, consumed_v = 0;
	char *cfg = NULL, *args = NULL;

	memset(&im, 0, sizeof(im));
	memset(r, 0, sizeof(*r));
	im.o = o;
	im.optimizer = -1;
	im.step = -1;
	{
		int64_t latest = -1;
		if (mt_ckpt_latest(ckptdir, &latest, err))
			return -1;
		if (latest >= 0)
			return mt_err_set(err, MT_EXIT_USAGE, "'%s' already holds checkpoints (latest: iteration %lld): import "
					  "into a new directory", ckptdir, (long long)latest);
	}
	if (resolve(src, dir, sizeof(dir), &it, err))
		return -1;
	if (mt_td_detect(dir)) /* metadata.json: the torch_dist format (torchdist.h) */
		return mt_td_import(src, dir, it, ckptdir, o, r, err);
	if (scan_ranks(dir, &im.T, &im.P, err))
		return -1;
	rank_path(path, sizeof(path), dir, 0, 0, im.P, "model_optim_rng.pt");
	if (rank_open(&f0, path, 0, err))
		return -1;
	have_f0 = 1;
	if (mt_meg_args_config(mt_pk_get(f0.root, "args"), path, o, &im.cfg, &im.sp, &tp_args, err))
		goto out;
	if (tp_args != im.T || im.sp.size != im.P) {
		mt_err_set(err, MT_EXIT_DATA, "'%s': args say TP %d x PP %d, the folders TP %d x PP %d", dir, tp_args,
			   im.sp.size, im.T, im.P);
		goto out;
	}
	{
		const struct mt_pk *v = mt_pk_get(f0.root, "checkpoint_version");
		double x = 0;
		/* missing means 0 to Megatron (megatron-dist-ckpt.md section 3); every release since
		 * 2020 writes 3.0, and none defines a later one */
		if (!v || mt_pk_as_double(v, &x))
			x = 0;
		if (x < 2.0) {
			mt_err_set(err, MT_EXIT_DATA, "'%s': checkpoint_version %g%s: files older than 2.0 lay the QKV out "
				   "otherwise; load and save them once with Megatron-LM first", path, x,
				   v ? "" : " (none saved, which Megatron reads as 0)");
			goto out;
		}
		if (x > 3.0) {
			mt_err_set(err, MT_EXIT_DATA, "'%s': checkpoint_version %g is newer than any Megatron-LM release writes "
				   "(3.0): refused", path, x);
			goto out;
		}
		ckv = (int64_t)(x * 10 + 0.5);
		v = mt_pk_get(f0.root, "iteration");
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
	{
		const struct mt_pk *ns = mt_pk_get(f0.root, "args");
		struct mt_err e = { 0 };
		mt_meg_arg_int(ns, "consumed_train_samples", 0, &consumed_t, path, &e);
		mt_meg_arg_int(ns, "consumed_valid_samples", 0, &consumed_v, path, &e);
	}
	if (mt_params_build(&im.tab, &im.cfg, err)) {
		mt_err_prefix(err, "'%s': args", path);
		goto out;
	}
	im.w = malloc((size_t)im.tab.total * sizeof(float));
	im.have = calloc((size_t)im.tab.n * (size_t)im.T, 1);
	im.have_opt = calloc((size_t)im.tab.n * (size_t)im.T, 1);
	if (!im.w || !im.have || !im.have_opt) {
		mt_err_set(err, MT_EXIT_IO, "out of memory for the %lld weights", (long long)im.tab.total);
		goto out;
	}
	r->tp = im.T;
	r->pp = im.P;
	r->vp = im.sp.vp;
	r->iteration = it;
	r->cfg = im.cfg;
	for (int p = 0; p < im.P; p++)
		for (int t = 0; t < im.T; t++) {
			char dopt[PATH_MAX + 64];
			rank_path(path, sizeof(path), dir, t, p, im.P, "model_optim_rng.pt");
			rank_path(dopt, sizeof(dopt), dir, t, p, im.P, "distrib_optim.pt");
			if (o->optimizer && access(dopt, F_OK) == 0) {
				mt_err_set(err, MT_EXIT_DATA, "'%s': the distributed optimizer's state is not read (no Megatron "
					   "release's layout of it is specified: docs/mt-ckpt-reshard.md): import with "
					   "--no-load-optim for the weights only", dopt);
				goto out;
			}
			if (import_file(&im, path, t, p, err))
				goto out;
			r->files++;
		}
	/* every parameter from every tensor-parallel rank */
	for (int i = 0; i < im.tab.n; i++)
		for (int t = 0; t < im.T; t++) {
			if (!im.have[i * im.T + t]) {
				const struct mt_param *p = &im.tab.p[i];
				int stage = 0;
				for (int s = 0; s < im.P; s++)
					for (int c = 0; c < im.sp.vp; c++) {
						int lo, hi;
						mt_pp_split_layers(&im.cfg, &im.sp, s, c, &lo, &hi);
						if (p->layer >= lo && p->layer < hi)
							stage = s;
					}
				if (p->layer < 0)
					stage = p->kind == MT_P_WORD_EMB || p->kind == MT_P_POS_EMB ? 0 : im.P - 1;
				rank_path(path, sizeof(path), dir, t, stage, im.P, "model_optim_rng.pt");
				mt_err_set(err, MT_EXIT_DATA, "'%s': no tensor for mt's %s: the checkpoint lacks a weight that args "
					   "say the model has", path, p->name);
				goto out;
			}
			if (im.optimizer == 1 && !im.have_opt[i * im.T + t]) {
				rank_path(path, sizeof(path), dir, t, 0, im.P, "model_optim_rng.pt");
				mt_err_set(err, MT_EXIT_DATA, "'%s' (or its stage's file): no optimizer state for %s", path,
					   im.tab.p[i].name);
				goto out;
			}
		}
	r->optimizer = im.optimizer == 1;
	r->legacy_names = im.legacy;
	r->tensors = im.tensors;
	cfg = mt_config_to_json(&im.cfg);
	args = mt_meg_args_provenance(mt_pk_get(f0.root, "args"), src, r, ckv);
	if (!cfg || !args) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out;
	}
	{
		struct mt_ckpt_state st = { .iteration = it,
					    .consumed_train_samples = consumed_t,
					    .consumed_valid_samples = consumed_v,
					    .optimizer_step = r->optimizer ? (im.step > 0 ? im.step : 0) : 0,
					    .config_json = cfg,
					    .train_args_json = args };
		if (mt_ckpt_save(ckptdir, &im.tab, im.w, r->optimizer ? im.m : NULL, r->optimizer ? im.v : NULL, &st, 0,
				 err))
			goto out;
	}
	rc = 0;
out:
	if (have_f0)
		rank_close(&f0);
	mt_params_free(&im.tab);
	free(im.w);
	free(im.m);
	free(im.v);
	free(im.have);
	free(im.have_opt);
	free(im.buf);
	free(cfg);
	free(args);
	return rc;
}

