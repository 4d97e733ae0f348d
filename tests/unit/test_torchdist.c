/* Unit tests for lib/ckpt/torchdist.c and the archive-at-an-offset reading it needs in
 * lib/ckpt/torchzip.c: a torch.save archive read at an offset inside a larger file and
 * from memory, a range past the end refused; a small distributed-checkpoint folder written
 * here (metadata.json, a .metadata pickle of DCP's classes, one .distcp holding two
 * chunks of a [4, 3] tensor, common.pt) read back, then edited: chunks that overlap, that
 * leave a gap, a chunk that is not a ZIP, another backend in metadata.json. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/pickle.h"
#include "ckpt/torchdist.h"
#include "ckpt/torchzip.h"
#include "tap.h"

#define DCPM "torch.distributed.checkpoint.metadata"

static char dir[] = "/tmp/mt-test-torchdist-XXXXXX";

static void raw(struct mt_pkw *w, unsigned char op)
{
	/* NEWOBJ and BUILD, which the writer has no call for */
	if (w->n + 1 > w->cap) {
		w->cap = w->cap ? 2 * w->cap : 256;
		w->b = realloc(w->b, w->cap);
	}
	w->b[w->n++] = op;
}

static void obj(struct mt_pkw *w, const char *module, const char *name)
{
	mt_pkw_global(w, module, name);
	mt_pkw_empty_tuple(w);
	raw(w, 0x81); /* NEWOBJ */
}

static void ints(struct mt_pkw *w, int n, const int64_t *v)
{
	mt_pkw_mark(w);
	for (int i = 0; i < n; i++)
		mt_pkw_int(w, v[i]);
	mt_pkw_tuple(w);
}

/* A torch.save archive of one fp32 tensor of shape r x c holding base, base + 1, ... */
static long write_chunk(const char *path, int64_t r, int64_t c, float base)
{
	struct mt_pkw w;
	struct mt_tzw z;
	struct mt_err e = { 0 };
	float v[64];
	int64_t shape[2] = { r, c };
	struct stat st;

	for (int i = 0; i < r * c; i++)
		v[i] = base + (float)i;
	mt_pkw_init(&w);
	mt_pkw_tensor(&w, MT_PKD_F32, "0", 2, shape);
	mt_pkw_stop(&w);
	mt_tzw_open(&z, path, "archive", &e);
	mt_tzw_add(&z, "data.pkl", w.b, w.n, &e);
	mt_tzw_add(&z, "data/0", v, (uint64_t)(r * c) * 4, &e);
	mt_tzw_finish(&z, &e);
	mt_pkw_free(&w);
	stat(path, &st);
	return (long)st.st_size;
}

/* .metadata: key "w" of [4, 3] fp32 in chunks at rows off[k] of rows[k] each, stored at
 * [at[k], at[k] + len[k]) of __0_0.distcp */
static void write_metadata(const int64_t *off, const int64_t *rows, const long *at, const long *len, int n)
{
	struct mt_pkw w;
	char path[256];
	FILE *f;
	int64_t size[2] = { 4, 3 };

	mt_pkw_init(&w);
	obj(&w, DCPM, "Metadata");
	mt_pkw_dict_begin(&w);
	mt_pkw_str(&w, "state_dict_metadata");
	mt_pkw_dict_begin(&w);
	mt_pkw_str(&w, "w");
	obj(&w, DCPM, "TensorStorageMetadata");
	mt_pkw_dict_begin(&w);
	mt_pkw_str(&w, "properties");
	obj(&w, DCPM, "TensorProperties");
	mt_pkw_mark(&w);
	mt_pkw_dtype(&w, MT_PKD_F32);
	mt_pkw_global(&w, "torch.serialization", "_get_layout");
	mt_pkw_mark(&w);
	mt_pkw_str(&w, "torch.strided");
	mt_pkw_tuple(&w);
	raw(&w, 'R');
	mt_pkw_bool(&w, 0);
	mt_pkw_global(&w, DCPM, "_MEM_FORMAT_ENCODING");
	mt_pkw_mark(&w);
	mt_pkw_int(&w, 0);
	mt_pkw_tuple(&w);
	raw(&w, 'R');
	mt_pkw_bool(&w, 0);
	mt_pkw_tuple(&w);
	raw(&w, 'b');
	mt_pkw_str(&w, "size");
	ints(&w, 2, size);
	mt_pkw_str(&w, "chunks");
	mt_pkw_list_begin(&w);
	for (int k = 0; k < n; k++) {
		int64_t o[2] = { off[k], 0 }, s[2] = { rows[k], 3 };
		obj(&w, DCPM, "ChunkStorageMetadata");
		mt_pkw_dict_begin(&w);
		mt_pkw_str(&w, "offsets");
		ints(&w, 2, o);
		mt_pkw_str(&w, "sizes");
		ints(&w, 2, s);
		mt_pkw_dict_end(&w);
		raw(&w, 'b');
	}
	mt_pkw_list_end(&w);
	mt_pkw_dict_end(&w);
	raw(&w, 'b');
	mt_pkw_dict_end(&w);
	mt_pkw_str(&w, "storage_data");
	mt_pkw_dict_begin(&w);
	for (int k = 0; k < n; k++) {
		int64_t o[2] = { off[k], 0 };
		obj(&w, DCPM, "MetadataIndex");
		mt_pkw_dict_begin(&w);
		mt_pkw_str(&w, "fqn");
		mt_pkw_str(&w, "w");
		mt_pkw_str(&w, "offset");
		ints(&w, 2, o);
		mt_pkw_dict_end(&w);
		raw(&w, 'b');
		obj(&w, "torch.distributed.checkpoint.filesystem", "_StorageInfo");
		mt_pkw_dict_begin(&w);
		mt_pkw_str(&w, "relative_path");
		mt_pkw_str(&w, "__0_0.distcp");
		mt_pkw_str(&w, "offset");
		mt_pkw_int(&w, at[k]);
		mt_pkw_str(&w, "length");
		mt_pkw_int(&w, len[k]);
		mt_pkw_dict_end(&w);
		raw(&w, 'b');
	}
	mt_pkw_dict_end(&w);
	mt_pkw_str(&w, "version");
	mt_pkw_str(&w, "1.0.0");
	mt_pkw_dict_end(&w);
	raw(&w, 'b');
	mt_pkw_stop(&w);
	snprintf(path, sizeof(path), "%s/.metadata", dir);
	f = fopen(path, "wb");
	fwrite(w.b, 1, w.n, f);
	fclose(f);
	mt_pkw_free(&w);
}

static void write_file(const char *name, const void *b, size_t n)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	fwrite(b, 1, n, f);
	fclose(f);
}

static void *slurp(const char *path, long *n)
{
	FILE *f = fopen(path, "rb");
	void *b;

	fseek(f, 0, SEEK_END);
	*n = ftell(f);
	rewind(f);
	b = malloc((size_t)*n);
	if (fread(b, 1, (size_t)*n, f) != (size_t)*n)
		*n = -1;
	fclose(f);
	return b;
}

static long n0, n1;
static unsigned char *all;

/* __0_0.distcp: two chunk archives, rows 0-1 (0..5) and rows 2-3 (6..11) */
static void make_distcp(void)
{
	char a0[300], a1[300];
	unsigned char *b0, *b1;

	snprintf(a0, sizeof(a0), "%s/a0", dir);
	snprintf(a1, sizeof(a1), "%s/a1", dir);
	write_chunk(a0, 2, 3, 0);
	write_chunk(a1, 2, 3, 6);
	b0 = slurp(a0, &n0);
	b1 = slurp(a1, &n1);
	all = malloc((size_t)(n0 + n1));
	memcpy(all, b0, (size_t)n0);
	memcpy(all + n0, b1, (size_t)n1);
	write_file("__0_0.distcp", all, (size_t)(n0 + n1));
	unlink(a0);
	unlink(a1);
	free(b0);
	free(b1);
}

/* torchzip: an archive at an offset, in memory, past the end */
static void test_torchdist_archive_at(void)
{
	char distcp[300];
	struct mt_tz z;
	struct mt_err e = { 0 };

	snprintf(distcp, sizeof(distcp), "%s/__0_0.distcp", dir);
	ok(mt_tz_open_at(&z, distcp, (uint64_t)n0, (uint64_t)n1, &e) == 0, "the second archive at its offset (%s)", e.msg);
	ok(z.n == 2 && mt_tz_find(&z, "data/0") && ((const float *)mt_tz_find(&z, "data/0")->data)[0] == 6.0f,
	   "its members, its data (6 first)");
	like(z.path, "__0_0.distcp (bytes ", "its name in messages says where it lies");
	mt_tz_close(&z);
	ok(mt_tz_open_mem(&z, "mem", all, (uint64_t)n0, &e) == 0 && ((const float *)mt_tz_find(&z, "data/0")->data)[5] ==
	   5.0f, "the first archive from memory (%s)", e.msg);
	mt_tz_close(&z);
	ok(mt_tz_open_at(&z, distcp, (uint64_t)n0, (uint64_t)n1 + 1, &e) == -1 && e.code == MT_EXIT_DATA,
	   "a range past the end of the file is refused");
	like(e.msg, "too short for the archive", "  as a truncated file");
}

/* a folder read back, then edited */
static void test_torchdist_folder(void)
{
	char path[300];
	struct mt_td td;
	struct mt_err e = { 0 };
	float out[12];
	const char *json = "{\"sharded_backend\": \"torch_dist\", \"sharded_backend_version\": 1}";

	write_file("metadata.json", json, strlen(json));
	{
		/* common.pt: {'iteration': 5} */
		struct mt_pkw w;
		struct mt_tzw t;
		mt_pkw_init(&w);
		mt_pkw_dict_begin(&w);
		mt_pkw_str(&w, "iteration");
		mt_pkw_int(&w, 5);
		mt_pkw_dict_end(&w);
		mt_pkw_stop(&w);
		snprintf(path, sizeof(path), "%s/common.pt", dir);
		mt_tzw_open(&t, path, "common", &e);
		mt_tzw_add(&t, "data.pkl", w.b, w.n, &e);
		mt_tzw_finish(&t, &e);
		mt_pkw_free(&w);
	}
	{
		int64_t off[2] = { 0, 2 }, rows[2] = { 2, 2 };
		long at[2] = { 0, n0 }, len[2] = { n0, n1 };
		const struct mt_td_item *it;
		int good = 1;
		write_metadata(off, rows, at, len, 2);
		ok(mt_td_detect(dir), "metadata.json: a distributed checkpoint");
		ok(mt_td_open(&td, dir, 1, &e) == 0, "the folder opens (%s)", e.msg);
		it = mt_td_find(&td, "w");
		ok(it && !it->bytes && it->dtype == MT_PKD_F32 && it->ndim == 2 && it->shape[0] == 4 && it->shape[1] == 3 &&
		   it->nc == 2 && it->c[1].at == (uint64_t)n0, "key w: fp32 [4, 3] in two chunks, the second at its offset");
		ok(td.common_pt && mt_pk_get(td.common, "iteration") && mt_pk_get(td.common, "iteration")->i == 5,
		   "the common state from common.pt");
		ok(it && mt_td_read(&td, it, 1, out, &e) == 0, "the tensor reads, CRCs checked (%s)", e.msg);
		for (int i = 0; i < 12; i++)
			good &= out[i] == (float)i;
		ok(good, "its 12 elements in place");
		mt_td_close(&td);
	}
	{
		int64_t off[2] = { 0, 0 }, rows[2] = { 2, 2 };
		long at[2] = { 0, n0 }, len[2] = { n0, n1 };
		write_metadata(off, rows, at, len, 2);
		ok(mt_td_open(&td, dir, 1, &e) == 0 && mt_td_read(&td, mt_td_find(&td, "w"), 0, out, &e) == -1 &&
		   e.code == MT_EXIT_DATA, "two chunks at one offset: refused");
		like(e.msg, "its chunks overlap", "  saying they overlap");
		mt_td_close(&td);
	}
	{
		int64_t off[1] = { 0 }, rows[1] = { 2 };
		long at[1] = { 0 }, len[1] = { n0 };
		write_metadata(off, rows, at, len, 1);
		ok(mt_td_open(&td, dir, 1, &e) == 0 && mt_td_read(&td, mt_td_find(&td, "w"), 0, out, &e) == -1 &&
		   e.code == MT_EXIT_DATA, "a chunk missing: refused");
		like(e.msg, "cover 6 of its 12 elements", "  saying how much the chunks cover");
		mt_td_close(&td);
	}
	{
		int64_t off[2] = { 0, 2 }, rows[2] = { 2, 2 };
		long at[2] = { 1, n0 }, len[2] = { n0 - 1, n1 };
		write_metadata(off, rows, at, len, 2);
		ok(mt_td_open(&td, dir, 1, &e) == 0 && mt_td_read(&td, mt_td_find(&td, "w"), 0, out, &e) == -1 &&
		   e.code == MT_EXIT_DATA, "a chunk that does not start PK\\x03\\x04: refused");
		like(e.msg, "does not start PK", "  saying so");
		like(e.msg, "__0_0.distcp", "  naming the file");
		mt_td_close(&td);
	}
	{
		const char *zarr = "{\"sharded_backend\": \"zarr\", \"sharded_backend_version\": 1}";
		write_file("metadata.json", zarr, strlen(zarr));
		ok(mt_td_open(&td, dir, 1, &e) == -1 && e.code == MT_EXIT_DATA, "zarr: refused");
		like(e.msg, "metadata.json': sharded_backend \"zarr\"", "  naming the file and the backend");
	}
}

int main(void)
{
	if (!mkdtemp(dir))
		return 1;
	make_distcp();
	test_torchdist_archive_at();
	test_torchdist_folder();
	{
		const char *names[] = { ".metadata", "metadata.json", "common.pt", "__0_0.distcp" };
		char path[300];
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
			snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
			unlink(path);
		}
		rmdir(dir);
	}
	free(all);
	return tap_done();
}
