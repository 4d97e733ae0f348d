/* Unit tests for lib/ckpt/safetensors.c: a round trip of F32/BF16/F16 tensors with metadata and
 * the 8-byte header alignment, a sharded set with its index, and every way a file can be
 * wrong (not JSON, truncated, header length past the file or over the cap, offsets
 * outside the data, overlapping or leaving holes, a size that does not match the shape,
 * an unknown dtype, a shard index naming a tensor its file lacks), each refused with a
 * message naming the file and, where there is one, the tensor. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/safetensors.h"
#include "tap.h"

static char dir[256];

static const char *path_of(const char *name)
{
	static char p[512];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return p;
}

/* A file from a header text and data bytes, with the header length given or computed. */
static void raw(const char *name, const char *hdr, long long hlen, const void *data, size_t n)
{
	FILE *f = fopen(path_of(name), "wb");
	uint64_t len = hlen >= 0 ? (uint64_t)hlen : strlen(hdr);
	unsigned char b[8];

	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(len >> (8 * i));
	fwrite(b, 1, 8, f);
	fwrite(hdr, 1, strlen(hdr), f);
	if (n)
		fwrite(data, 1, n, f);
	fclose(f);
}

static int refused(const char *name, const char *needle, const char *what)
{
	struct mt_st_file f;
	struct mt_err e = { 0 };
	int rc = mt_st_open(&f, path_of(name), &e);

	if (rc == 0) {
		mt_st_close(&f);
		return ok(0, "%s: refused", what);
	}
	ok(e.code == MT_EXIT_DATA && strstr(e.msg, path_of(name)), "%s: refused naming the file (%s)", what, e.msg);
	like(e.msg, needle, "%s: the message says why", what);
	return 0;
}

int main(void)
{
	float a[6] = { 1.5f, -2.25f, 3.0f, 0.1f, -0.0f, 65504.0f };
	uint16_t bf[3] = { 0x3fc0, 0xc010, 0x7f80 };  /* 1.5, -2.25, inf */
	uint16_t hf[3] = { 0x3e00, 0x0001, 0xfc00 };  /* 1.5, smallest subnormal, -inf */
	float out[6];
	struct mt_err e = { 0 };
	struct mt_st_file f;
	const struct mt_st_tensor *t;

	snprintf(dir, sizeof(dir), "/tmp/mt-test-safetensors.%d", (int)getpid());
	mkdir(dir, 0777);

	{
		struct mt_st_out o[3] = {
			{ "w.weight", MT_ST_F32, 2, { 2, 3 }, a },
			{ "b", MT_ST_BF16, 1, { 3 }, bf },
			{ "h", MT_ST_F16, 1, { 3 }, hf },
		};
		const char *meta[] = { "format", "pt" };
		ok(mt_st_write(path_of("rt.safetensors"), o, 3, meta, 1, &e) == 0, "write: %s", e.msg);
	}
	ok(mt_st_open(&f, path_of("rt.safetensors"), &e) == 0, "read back: %s", e.msg);
	is_int(f.n, 3, "three tensors");
	{
		unsigned char *p = f.map;
		uint64_t hl = 0;
		for (int i = 7; i >= 0; i--)
			hl = hl << 8 | p[i];
		ok(hl % 8 == 0 && p[8 + hl - 1] != 0, "the header is padded to a multiple of 8 bytes");
	}
	is_str(f.metadata_json, "{\"format\":\"pt\"}", "metadata read back");
	t = mt_st_find(&f, "w.weight");
	ok(t && t->dtype == MT_ST_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3, "shape and dtype");
	ok(t && mt_st_to_f32(t, out, 6, f.path, &e) == 0 && memcmp(out, a, sizeof(a)) == 0, "F32 values bit-identical");
	t = mt_st_find(&f, "b");
	ok(t && mt_st_to_f32(t, out, 3, f.path, &e) == 0 && out[0] == 1.5f && out[1] == -2.25f && out[2] > 3e38f,
	   "BF16 converted");
	t = mt_st_find(&f, "h");
	ok(t && mt_st_to_f32(t, out, 3, f.path, &e) == 0 && out[0] == 1.5f && out[1] == 5.9604644775390625e-08f &&
	   out[2] < -3e38f, "F16 converted, subnormals and infinities included");
	ok(t && mt_st_to_f32(t, out, 4, f.path, &e) == -1 && strstr(e.msg, "'h'"), "a wrong element count is refused");
	mt_st_close(&f);

	/* a set: shards with an index */
	{
		struct mt_st_out o1 = { "x", MT_ST_F32, 1, { 2 }, a }, o2 = { "y", MT_ST_F32, 1, { 3 }, a + 2 };
		struct mt_st_set s;
		FILE *ix;
		const char *p = NULL;
		ok(mt_st_write(path_of("model-00001-of-00002.safetensors"), &o1, 1, NULL, 0, &e) == 0 &&
		   mt_st_write(path_of("model-00002-of-00002.safetensors"), &o2, 1, NULL, 0, &e) == 0, "two shards written");
		ix = fopen(path_of("model.safetensors.index.json"), "w");
		fprintf(ix, "{\"metadata\": {}, \"weight_map\": {\"x\": \"model-00001-of-00002.safetensors\", "
			    "\"y\": \"model-00002-of-00002.safetensors\"}}");
		fclose(ix);
		ok(mt_st_set_open(&s, dir, &e) == 0 && s.nfiles == 2, "the index opens both shards: %s", e.msg);
		t = mt_st_set_find(&s, "y", &p);
		ok(t && p && strstr(p, "00002") && mt_st_to_f32(t, out, 3, p, &e) == 0 && out[0] == a[2], "a tensor is found in its shard");
		mt_st_set_close(&s);
		ix = fopen(path_of("model.safetensors.index.json"), "w");
		fprintf(ix, "{\"weight_map\": {\"x\": \"model-00002-of-00002.safetensors\"}}");
		fclose(ix);
		ok(mt_st_set_open(&s, dir, &e) == -1 && strstr(e.msg, "'x'") && strstr(e.msg, "lacks it"),
		   "an index naming the wrong shard is refused: %s", e.msg);
		ix = fopen(path_of("model.safetensors.index.json"), "w");
		fprintf(ix, "{\"weight_map\": {\"x\": \"../etc/passwd\"}}");
		fclose(ix);
		ok(mt_st_set_open(&s, dir, &e) == -1 && strstr(e.msg, "plain name"), "an index may not point outside the directory");
	}

	/* corrupt files */
	{
		float d[2] = { 1, 2 };
		raw("notjson.safetensors", "{\"a\": [1, 2", -1, d, 8);
		refused("notjson.safetensors", "not valid JSON", "a header that is not JSON");
		raw("array.safetensors", "[1, 2]  ", -1, NULL, 0);
		refused("array.safetensors", "does not start with '{'", "a header that is not an object");
		raw("short.safetensors", "", 0, NULL, 0);
		{
			FILE *fp = fopen(path_of("tiny.safetensors"), "wb");
			fwrite("\x10\x00\x00", 1, 3, fp);
			fclose(fp);
		}
		refused("tiny.safetensors", "too short", "a file shorter than the length field");
		raw("trunc.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4000, d, 8);
		refused("trunc.safetensors", "truncated", "a header length past the end of the file");
		raw("huge.safetensors", "{}", 200ll << 20, NULL, 0);
		refused("huge.safetensors", "at most", "a header length over the cap");
		raw("dtype.safetensors", "{\"a\":{\"dtype\":\"F8_E9\",\"shape\":[2],\"data_offsets\":[0,8]}}", -1, d, 8);
		refused("dtype.safetensors", "unknown dtype 'F8_E9'", "an unknown dtype");
		raw("off.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", -1, d, 8);
		refused("off.safetensors", "tensor 'a'", "offsets past the data");
		raw("size.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", -1, d, 8);
		refused("size.safetensors", "want 12", "a byte count that does not match the shape");
		raw("overlap.safetensors",
		    "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		    "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", -1, d, 8);
		refused("overlap.safetensors", "contiguous", "overlapping tensors");
		raw("hole.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", -1, d, 8);
		refused("hole.safetensors", "contiguous", "a hole before a tensor");
		raw("tail.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", -1, d, 8);
		refused("tail.safetensors", "cover 4 of the 8", "bytes after the last tensor");
		raw("neg.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", -1, d, 8);
		refused("neg.safetensors", "not a size", "a negative dimension");
		raw("meta.safetensors", "{\"__metadata__\":{\"n\":1}}", -1, NULL, 0);
		refused("meta.safetensors", "object of strings", "metadata that is not strings");
		raw("dup.safetensors",
		    "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		    "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", -1, d, 8);
		refused("dup.safetensors", "duplicate object key", "a tensor named twice");
		ok(mt_st_open(&f, path_of("missing.safetensors"), &e) == -1 && e.code == MT_EXIT_IO, "a missing file is an I/O error");
	}
	{
		char cmd[300];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			printf("# could not remove %s\n", dir);
	}
	return tap_done();
}
