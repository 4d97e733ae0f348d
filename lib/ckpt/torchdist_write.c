/* torchdist_write.c: mt checkpoints written as Megatron-LM distributed checkpoints
 * (`--ckpt-format torch_dist`, as Megatron-LM HEAD writes them): the files of iter_N/ for a
 * target TP x PP, in the shapes Megatron-core gives its sharded state dict, laid out as
 * PyTorch's distributed checkpoint (DCP) lays them out.
 *
 * Each rank (tp + TP * pp) gets one __<rank>_0.distcp: its chunks one after another, each a
 * complete torch.save ZIP (top folder "archive/"). Layer tensors are one key
 * (`decoder.layers.<rest>`) with a leading axis of num_layers, a chunk [1, ...] at (layer,
 * ...); the norms under Transformer Engine's names; TP chunks along axis 0 (QKV, fc1, the
 * embedding, the untied output layer) or axis 1 (linear_proj, fc2) of the TP=1 layout,
 * SwiGLU's fc1 as [all gate rows; all up rows] (two chunks a rank a layer); replicated
 * tensors by tensor rank 0; the tied output layer not written. Byte entries (each linear
 * layer's `_extra_state/shard_<layer>_<layers>` from tensor rank 0, and rank 0's
 * `common_state/shard_0_1`, the common dict with args) are torch.save([object]) as
 * Megatron-core writes its ShardedObjects. `.metadata` is the pickled Metadata (protocol 2 opcodes,
 * the real classes of torch.distributed.checkpoint, version "1.0.0"); metadata.json has
 * Megatron-LM HEAD's two fields. No optimizer or RNG state is written.
 *
 * The directory itself (temporary name, tracker, rename) and the checks of the target layout
 * are megatron_export.c's; the facts are in shared/specs/megatron-dist-ckpt.md §2. */
#include "ckpt/torchdist_write.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/atomic.h"
#include "base/files.h"
#include "ckpt/torchzip.h"

#define DCP "torch.distributed.checkpoint.metadata"
#define MAXD 3

struct chunk {
	char key[192];
	const struct mt_param *p;   /* NULL: a byte entry */
	int common;                 /* byte entry: 1 the common state, 0 an _extra_state */
	int rank, ndim, index;      /* index: its place in its key's list of chunks */
	int64_t gsize[MAXD], off[MAXD], size[MAXD];
	int64_t r0, nr, c0, nc;     /* its rows and columns of the 2-D Megatron-global tensor */
	uint64_t foff, flen;        /* where it lies in its rank's file */
};

struct plan {
	struct chunk *c;
	int n, cap;
};

static struct chunk *add(struct plan *pl)
{
	if (pl->n == pl->cap) {
		int cap = pl->cap ? 2 * pl->cap : 256;
		struct chunk *x = realloc(pl->c, (size_t)cap * sizeof(*x));
		if (!x)
			return NULL;
		pl->c = x;
		pl->cap = cap;
	}
	memset(&pl->c[pl->n], 0, sizeof(pl->c[0]));
	return &pl->c[pl->n++];
}

/* one chunk of q: rows [r0, r0 + nr) of R, columns [c0, c0 + nc); layer >= 0 prepends the
 * layer axis */
static int add_tensor(struct plan *pl, const char *key, const struct mt_param *q, int layer, int L, int rank, int64_t R,
		      int64_t r0, int64_t nr, int64_t c0, int64_t nc)
{
	struct chunk *x = add(pl);
	int d = 0;

	if (!x)
		return -1;
	snprintf(x->key, sizeof(x->key), "%s", key);
	x->p = q;
	x->rank = rank;
	x->r0 = r0, x->nr = nr, x->c0 = c0, x->nc = nc;
	if (layer >= 0) {
		x->gsize[d] = L, x->off[d] = layer, x->size[d] = 1;
		d++;
	}
	x->gsize[d] = R, x->off[d] = r0, x->size[d] = nr;
	d++;
	if (q->ndim == 2) {
		x->gsize[d] = q->shape[1], x->off[d] = c0, x->size[d] = nc;
		d++;
	}
	x->ndim = d;
	return 0;
}

/* tensor rank t's chunks of q (the whole model's parameter, in Megatron's TP=1 layout) */
static int add_param(struct plan *pl, const char *key, const struct mt_param *q, int layer, int L, int T, int t,
		     int rank, int64_t padded)
{
	int64_t R = q->shape[0], C = q->shape[1];

	switch (q->split) {
	case MT_SPLIT_NONE:
		return t ? 0 : add_tensor(pl, key, q, layer, L, rank, R, 0, R, 0, C);
	case MT_SPLIT_VOCAB:
		R = padded;
		/* fall through */
	case MT_SPLIT_COLUMN:
		return add_tensor(pl, key, q, layer, L, rank, R, t * (R / T), R / T, 0, C);
	case MT_SPLIT_COLUMN_HALVES: {
		int64_t n = R / 2 / T;
		return add_tensor(pl, key, q, layer, L, rank, R, t * n, n, 0, C) ||
		       add_tensor(pl, key, q, layer, L, rank, R, R / 2 + t * n, n, 0, C);
	}
	case MT_SPLIT_ROW:
		return add_tensor(pl, key, q, layer, L, rank, R, 0, R, t * (C / T), C / T);
	}
	return 0;
}

static int add_bytes(struct plan *pl, int rank, int common, const char *fmt, int a, int b)
{
	struct chunk *x = add(pl);

	if (!x)
		return -1;
	snprintf(x->key, sizeof(x->key), fmt, a, b);
	x->rank = rank;
	x->common = common;
	return 0;
}

static const struct {
	enum mt_param_kind kind;
	const char *name;
} layer_keys[] = {
	{ MT_P_LN1_W, "self_attention.linear_qkv.layer_norm_weight" },
	{ MT_P_LN1_B, "self_attention.linear_qkv.layer_norm_bias" },
	{ MT_P_QKV_W, "self_attention.linear_qkv.weight" },
	{ MT_P_QKV_B, "self_attention.linear_qkv.bias" },
	{ MT_P_PROJ_W, "self_attention.linear_proj.weight" },
	{ MT_P_PROJ_B, "self_attention.linear_proj.bias" },
	{ MT_P_LN2_W, "mlp.linear_fc1.layer_norm_weight" },
	{ MT_P_LN2_B, "mlp.linear_fc1.layer_norm_bias" },
	{ MT_P_FC1_W, "mlp.linear_fc1.weight" },
	{ MT_P_FC1_B, "mlp.linear_fc1.bias" },
	{ MT_P_FC2_W, "mlp.linear_fc2.weight" },
	{ MT_P_FC2_B, "mlp.linear_fc2.bias" },
};

static const char *const linears[] = { "self_attention.linear_qkv", "self_attention.linear_proj", "mlp.linear_fc1",
				       "mlp.linear_fc2" };

/* every rank's chunks, rank by rank, each rank's in Megatron-core's state-dict order */
static int make_plan(const struct mt_model *m, const struct mt_meg_export_opts *o, int64_t padded, struct plan *pl)
{
	const struct mt_config *c = &m->cfg;
	const struct mt_params *tab = &m->params;
	int T = o->tp, P = o->pp, L = c->num_layers;

	for (int p = 0; p < P; p++)
		for (int t = 0; t < T; t++) {
			struct mt_pp_split sp = { P, 1, 0, 0 };
			int rank = t + T * p, lo, hi;
			const struct mt_param *q;
			char key[192];
			if (p == 0) {
				if (add_param(pl, "embedding.word_embeddings.weight", mt_params_get(tab, -1, MT_P_WORD_EMB), -1,
					      L, T, t, rank, padded))
					return -1;
				q = mt_params_get(tab, -1, MT_P_POS_EMB);
				if (q && add_param(pl, "embedding.position_embeddings.weight", q, -1, L, T, t, rank, padded))
					return -1;
			}
			mt_pp_split_layers(c, &sp, p, 0, &lo, &hi);
			for (size_t j = 0; j < sizeof(layer_keys) / sizeof(layer_keys[0]); j++)
				for (int l = lo; l < hi; l++) {
					q = mt_params_get(tab, l, layer_keys[j].kind);
					snprintf(key, sizeof(key), "decoder.layers.%s", layer_keys[j].name);
					if (q && add_param(pl, key, q, l, L, T, t, rank, padded))
						return -1;
				}
			if (p == P - 1) {
				q = mt_params_get(tab, -1, MT_P_FINAL_W);
				if (q && add_param(pl, "decoder.final_layernorm.weight", q, -1, L, T, t, rank, padded))
					return -1;
				q = mt_params_get(tab, -1, MT_P_FINAL_B);
				if (q && add_param(pl, "decoder.final_layernorm.bias", q, -1, L, T, t, rank, padded))
					return -1;
				q = mt_params_get(tab, -1, MT_P_OUTPUT);
				if (c->untie_embeddings_and_output_weights && q &&
				    add_param(pl, "output_layer.weight", q, -1, L, T, t, rank, padded))
					return -1;
			}
			if (t == 0)
				for (int l = lo; l < hi; l++)
					for (int k = 0; k < 4; k++) {
						char fmt[96];
						snprintf(fmt, sizeof(fmt), "decoder.layers.%s._extra_state/shard_%%d_%%d", linears[k]);
						if (add_bytes(pl, rank, 0, fmt, l, L))
							return -1;
					}
			if (rank == 0 && add_bytes(pl, 0, 1, "common_state/shard_%d_%d", 0, 1))
				return -1;
		}
	/* each chunk's place among its key's chunks, in rank order: DCP's MetadataIndex.index */
	for (int i = 0; i < pl->n; i++)
		for (int j = 0; j < i; j++)
			if (!strcmp(pl->c[j].key, pl->c[i].key))
				pl->c[i].index++;
	return 0;
}

/* torch.save's ZIP of one pickle (and its storage "0" when data is not NULL), appended to the
 * .distcp file fp (named path) at its current position; *outn its length. Written in place:
 * building each chunk in a temporary file (fsync'd) and copying it in cost a 0.93B model's
 * torch_dist export (1.7 GB) 22 s against 1.3 s for cp -r of the files, most of it sys time
 * (bench/ckpt-megatron.sh). */
static int tsave(FILE *fp, const char *path, const struct mt_pkw *pk, const void *data, uint64_t dn,
		 unsigned long long serial, size_t *outn, struct mt_err *err)
{
	struct mt_tzw z;
	char id[48];
	off_t at = ftello(fp), end;

	if (pk->oom)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	if (at < 0)
		return mt_err_errno(err, MT_EXIT_IO, "cannot write '%s'", path);
	if (mt_tzw_open_fp(&z, fp, path, "archive", err))
		return -1;
	snprintf(id, sizeof(id), "%020llu%020llu", serial, (unsigned long long)getpid());
	if (mt_tzw_add(&z, "data.pkl", pk->b, pk->n, err) || mt_tzw_add(&z, ".format_version", "1", 1, err) ||
	    mt_tzw_add(&z, ".storage_alignment", "64", 2, err) || mt_tzw_add(&z, "byteorder", "little", 6, err) ||
	    (data && mt_tzw_add(&z, "data/0", data, dn, err)) || mt_tzw_add(&z, "version", "3\n", 2, err) ||
	    mt_tzw_add(&z, ".data/serialization_id", id, strlen(id), err) || mt_tzw_finish(&z, err)) {
		mt_tzw_abort(&z);
		return -1;
	}
	end = ftello(fp);
	if (end < 0)
		return mt_err_errno(err, MT_EXIT_IO, "cannot write '%s'", path);
	*outn = (size_t)(end - at);
	return 0;
}

/* a byte entry's payload as Megatron-core writes a ShardedObject (its save planner keeps the
 * bytes as they are): torch.save([obj]), obj the common dict or an _extra_state's None */
static int byte_payload(const struct mt_model *m, const struct mt_meg_export_opts *o, int64_t padded,
			const struct chunk *x, FILE *fp, const char *path, unsigned long long *serial, size_t *outn,
			struct mt_err *err)
{
	struct mt_pkw w;
	int rc;

	mt_pkw_init(&w);
	mt_pkw_list_begin(&w);
	if (x->common) {
		mt_pkw_dict_begin(&w);
		mt_pkw_str(&w, "args");
		mt_meg_args_write(&w, m, o, padded, 0);
		mt_pkw_str(&w, "checkpoint_version");
		mt_pkw_float(&w, 3.0);
		mt_pkw_str(&w, "iteration");
		mt_pkw_int(&w, m->iteration);
		mt_pkw_str(&w, "num_floating_point_operations_so_far");
		mt_pkw_int(&w, 0);
		mt_pkw_str(&w, "content_metadata");
		mt_pkw_dict_begin(&w);
		mt_pkw_str(&w, "singleton_local_shards");
		mt_pkw_bool(&w, 0);
		mt_pkw_str(&w, "chained_optim_avoid_prefix");
		mt_pkw_bool(&w, 1);
		mt_pkw_dict_end(&w);
		mt_pkw_dict_end(&w);
	} else {
		mt_pkw_none(&w);
	}
	mt_pkw_list_end(&w);
	mt_pkw_stop(&w);
	rc = tsave(fp, path, &w, NULL, 0, (*serial)++, outn, err);
	mt_pkw_free(&w);
	return rc;
}

/* a tensor chunk's payload: torch.save of the chunk, contiguous, in the export dtype. Each row
 * is converted straight from the model into *buf, a buffer kept across the chunks of a file
 * (grown to *cap bytes): a float copy of every chunk and two fresh buffers per chunk spent a
 * quarter of the export's time clearing new pages in the kernel (perf, bench/ckpt-megatron.sh) */
static int tensor_payload(const struct mt_model *m, const struct mt_meg_export_opts *o, const struct chunk *x,
			  FILE *fp, const char *path, unsigned long long *serial, void **buf, size_t *cap, size_t *outn,
			  struct mt_err *err)
{
	const struct mt_param *q = x->p;
	int64_t C = q->shape[1], numel = x->nr * x->nc, fill = m->cfg.vocab_size - 1;
	size_t es = mt_pk_dtype_size(o->dtype), need = (size_t)numel * es;
	unsigned char *d;
	struct mt_pkw w;
	int rc;

	if (need > *cap) {
		void *nb = realloc(*buf, need);
		if (!nb)
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
		*buf = nb;
		*cap = need;
	}
	d = *buf;
	/* rows past mt's vocabulary (Megatron's padding) are copies of the last real row, as in
	 * the legacy export */
	for (int64_t i = 0; i < x->nr; i++) {
		int64_t g = x->r0 + i, src = g < q->shape[0] ? g : fill;
		mt_meg_to_dtype(o->dtype, m->w + q->offset + src * C + x->c0, d + (size_t)(i * x->nc) * es, x->nc);
	}
	mt_pkw_init(&w);
	mt_pkw_tensor(&w, o->dtype, "0", x->ndim, x->size);
	mt_pkw_stop(&w);
	rc = tsave(fp, path, &w, d, (uint64_t)need, (*serial)++, outn, err);
	mt_pkw_free(&w);
	return rc;
}

static int write_rank(const struct mt_model *m, const struct mt_meg_export_opts *o, int64_t padded, struct plan *pl,
		      int rank, const char *iterdir, struct mt_err *err)
{
	char path[PATH_MAX + 32];
	unsigned long long serial = (unsigned long long)rank << 32;
	uint64_t pos = 0;
	void *buf = NULL;
	size_t cap = 0;
	FILE *fp;

	snprintf(path, sizeof(path), "%s/__%d_0.distcp", iterdir, rank);
	fp = fopen(path, "wbx");
	if (!fp)
		return mt_err_errno(err, MT_EXIT_IO, "cannot create '%s'", path);
	for (int i = 0; i < pl->n; i++) {
		struct chunk *x = &pl->c[i];
		size_t n = 0;
		if (x->rank != rank)
			continue;
		if (x->p ? tensor_payload(m, o, x, fp, path, &serial, &buf, &cap, &n, err)
			 : byte_payload(m, o, padded, x, fp, path, &serial, &n, err)) {
			free(buf);
			fclose(fp);
			return -1;
		}
		x->foff = pos;
		x->flen = n;
		pos += n;
	}
	free(buf);
	if (fflush(fp) != 0 || fsync(fileno(fp)) != 0) {
		fclose(fp);
		return mt_err_errno(err, MT_EXIT_IO, "cannot write '%s'", path);
	}
	if (fclose(fp) != 0)
		return mt_err_errno(err, MT_EXIT_IO, "cannot write '%s'", path);
	return 0;
}

/* ---- .metadata ---- */

static void size_obj(struct mt_pkw *w, int n, const int64_t *v)
{
	mt_pkw_global(w, "torch", "Size");
	mt_pkw_mark(w);
	mt_pkw_mark(w);
	for (int i = 0; i < n; i++)
		mt_pkw_int(w, v[i]);
	mt_pkw_tuple(w);
	mt_pkw_tuple(w);
	mt_pkw_reduce(w);
}

/* TensorStorageMetadata(properties, size, chunks) of x's key, every rank's chunks */
static void tensor_md(struct mt_pkw *w, const struct plan *pl, const struct chunk *x, enum mt_pk_dtype d)
{
	mt_pkw_global(w, DCP, "TensorStorageMetadata");
	mt_pkw_newobj(w);
	mt_pkw_dict_begin(w);
	mt_pkw_str(w, "properties");
	/* TensorProperties' state: (dtype, layout, requires_grad, memory_format, pin_memory) */
	mt_pkw_global(w, DCP, "TensorProperties");
	mt_pkw_newobj(w);
	mt_pkw_mark(w);
	mt_pkw_dtype(w, d);
	mt_pkw_global(w, "torch.serialization", "_get_layout");
	mt_pkw_mark(w);
	mt_pkw_str(w, "torch.strided");
	mt_pkw_tuple(w);
	mt_pkw_reduce(w);
	mt_pkw_bool(w, 0);
	mt_pkw_global(w, DCP, "_MEM_FORMAT_ENCODING");
	mt_pkw_mark(w);
	mt_pkw_int(w, 0); /* TORCH_CONTIGUOUS_FORMAT */
	mt_pkw_tuple(w);
	mt_pkw_reduce(w);
	mt_pkw_bool(w, 0);
	mt_pkw_tuple(w);
	mt_pkw_build(w);
	mt_pkw_str(w, "size");
	size_obj(w, x->ndim, x->gsize);
	mt_pkw_str(w, "chunks");
	mt_pkw_list_begin(w);
	for (int i = 0; i < pl->n; i++) {
		const struct chunk *y = &pl->c[i];
		if (strcmp(y->key, x->key))
			continue;
		mt_pkw_global(w, DCP, "ChunkStorageMetadata");
		mt_pkw_newobj(w);
		mt_pkw_dict_begin(w);
		mt_pkw_str(w, "offsets");
		size_obj(w, y->ndim, y->off);
		mt_pkw_str(w, "sizes");
		size_obj(w, y->ndim, y->size);
		mt_pkw_dict_end(w);
		mt_pkw_build(w);
	}
	mt_pkw_list_end(w);
	mt_pkw_dict_end(w);
	mt_pkw_build(w);
}

static int first_of_key(const struct plan *pl, int i)
{
	for (int j = 0; j < i; j++)
		if (!strcmp(pl->c[j].key, pl->c[i].key))
			return 0;
	return 1;
}

static int write_metadata(const struct plan *pl, const struct mt_meg_export_opts *o, const char *iterdir,
			  struct mt_err *err)
{
	struct mt_pkw w;
	char path[PATH_MAX + 32], uuid[40], name[64];
	unsigned char r[16] = { 0 };
	FILE *u = fopen("/dev/urandom", "rb");
	int rc;

	if (!u || fread(r, 1, 16, u) != 16) {
		/* a save id only names the save: any distinct text will do */
		unsigned long long x = (unsigned long long)getpid() * 0x9E3779B97F4A7C15ull ^ (unsigned long long)time(NULL);
		for (int i = 0; i < 16; i++)
			r[i] = (unsigned char)(x >> (8 * (i % 8)) ^ (unsigned)i * 37u);
	}
	if (u)
		fclose(u);
	r[6] = (unsigned char)((r[6] & 0x0F) | 0x40);
	r[8] = (unsigned char)((r[8] & 0x3F) | 0x80);
	snprintf(uuid, sizeof(uuid), "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", r[0], r[1],
		 r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13], r[14], r[15]);

	mt_pkw_init(&w);
	mt_pkw_global(&w, DCP, "Metadata");
	mt_pkw_newobj(&w);
	mt_pkw_dict_begin(&w);
	mt_pkw_str(&w, "state_dict_metadata");
	mt_pkw_dict_begin(&w);
	for (int i = 0; i < pl->n; i++) {
		if (!first_of_key(pl, i))
			continue;
		mt_pkw_str(&w, pl->c[i].key);
		if (pl->c[i].p) {
			tensor_md(&w, pl, &pl->c[i], o->dtype);
		} else {
			mt_pkw_global(&w, DCP, "BytesStorageMetadata");
			mt_pkw_newobj(&w);
		}
	}
	mt_pkw_dict_end(&w);
	/* the flattening map of DCP's default planner: each key to the path (key,) */
	mt_pkw_str(&w, "planner_data");
	mt_pkw_dict_begin(&w);
	for (int i = 0; i < pl->n; i++) {
		if (!first_of_key(pl, i))
			continue;
		mt_pkw_str(&w, pl->c[i].key);
		mt_pkw_mark(&w);
		mt_pkw_str(&w, pl->c[i].key);
		mt_pkw_tuple(&w);
	}
	mt_pkw_dict_end(&w);
	mt_pkw_str(&w, "storage_data");
	mt_pkw_dict_begin(&w);
	for (int i = 0; i < pl->n; i++) {
		const struct chunk *x = &pl->c[i];
		mt_pkw_global(&w, DCP, "MetadataIndex");
		mt_pkw_newobj(&w);
		mt_pkw_dict_begin(&w);
		mt_pkw_str(&w, "fqn");
		mt_pkw_str(&w, x->key);
		mt_pkw_str(&w, "index");
		if (x->p) {
			mt_pkw_int(&w, x->index);
			mt_pkw_str(&w, "offset");
			size_obj(&w, x->ndim, x->off);
		} else {
			mt_pkw_none(&w);
		}
		mt_pkw_dict_end(&w);
		mt_pkw_build(&w);
		/* _StorageInfo's state drops its None fields (transform_descriptors) */
		mt_pkw_global(&w, "torch.distributed.checkpoint.filesystem", "_StorageInfo");
		mt_pkw_newobj(&w);
		mt_pkw_dict_begin(&w);
		mt_pkw_str(&w, "relative_path");
		snprintf(name, sizeof(name), "__%d_0.distcp", x->rank);
		mt_pkw_str(&w, name);
		mt_pkw_str(&w, "offset");
		mt_pkw_int(&w, (int64_t)x->foff);
		mt_pkw_str(&w, "length");
		mt_pkw_int(&w, (int64_t)x->flen);
		mt_pkw_dict_end(&w);
		mt_pkw_build(&w);
	}
	mt_pkw_dict_end(&w);
	mt_pkw_str(&w, "storage_meta");
	mt_pkw_global(&w, DCP, "StorageMeta");
	mt_pkw_newobj(&w);
	mt_pkw_dict_begin(&w);
	mt_pkw_str(&w, "checkpoint_id");
	mt_pkw_none(&w);
	mt_pkw_str(&w, "save_id");
	mt_pkw_str(&w, uuid);
	mt_pkw_str(&w, "load_id");
	mt_pkw_none(&w);
	mt_pkw_str(&w, "modules");
	mt_pkw_list_begin(&w);
	mt_pkw_list_end(&w);
	mt_pkw_dict_end(&w);
	mt_pkw_build(&w);
	mt_pkw_str(&w, "version");
	mt_pkw_str(&w, "1.0.0");
	mt_pkw_dict_end(&w);
	mt_pkw_build(&w);
	mt_pkw_stop(&w);
	if (w.oom) {
		mt_pkw_free(&w);
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	snprintf(path, sizeof(path), "%s/.metadata", iterdir);
	rc = mt_atomic_write_file(path, w.b, w.n, err);
	mt_pkw_free(&w);
	return rc;
}

int mt_meg_torchdist_write(const struct mt_model *m, const struct mt_meg_export_opts *o, const char *iterdir,
			   int64_t padded, int64_t *files, struct mt_err *err)
{
	static const char json[] = "{\"sharded_backend\": \"torch_dist\", \"sharded_backend_version\": 1}";
	struct plan pl = { 0 };
	char path[PATH_MAX + 32];
	int rc = -1;

	if (padded % o->tp)
		return mt_err_set(err, MT_EXIT_USAGE, "the vocabulary of %lld does not split into %d tensor-parallel shards",
				  (long long)padded, o->tp);
	if (make_plan(m, o, padded, &pl)) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out;
	}
	for (int rank = 0; rank < o->tp * o->pp; rank++) {
		if (write_rank(m, o, padded, &pl, rank, iterdir, err))
			goto out;
		(*files)++;
	}
	if (write_metadata(&pl, o, iterdir, err))
		goto out;
	/* written last, as Megatron does: its presence says the checkpoint is whole */
	snprintf(path, sizeof(path), "%s/metadata.json", iterdir);
	if (mt_atomic_write_file(path, json, strlen(json), err))
		goto out;
	rc = 0;
out:
	free(pl.c);
	return rc;
}
