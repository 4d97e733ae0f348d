/* Unit tests for lib/ckpt/pickle.c and lib/ckpt/torchzip.c: a pickle Python wrote (memo
 * shared between keys, LONG1, BINFLOAT, TUPLE2, UTF-8), mt's writer read back by mt's reader
 * (a Namespace of every plain type, an OrderedDict of tensors), refusals with their byte
 * offsets (a foreign opcode, a global outside the list, a truncated pickle, a stack
 * underflow, a tensor view past its storage, an unset memo entry), the globals of Megatron's
 * own files (enums by name and by value, a tensor with Python attributes, BytesIO,
 * Generator; a listed module's unlisted name refused), nesting bounded at MT_PK_MAX_DEPTH
 * (and a dict holding itself read as such), and the ZIP container:
 * members 64-byte aligned, CRC-32s, a corrupt byte caught, a truncated file refused. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/pickle.h"
#include "ckpt/torchzip.h"
#include "tap.h"

/* pickle.dumps({'a': l, 'b': l, 'c': (1.5, -3), 'big': -(2**40), 'u': 'hé', 'n': None,
 * 't': True}, protocol=2) with l = [1, 2] */
static const unsigned char py[] =
	"\x80\x02\x7d\x71\x00\x28\x58\x01\x00\x00\x00\x61\x71\x01\x5d\x71\x02\x28\x4b\x01\x4b\x02\x65\x58\x01\x00"
	"\x00\x00\x62\x71\x03\x68\x02\x58\x01\x00\x00\x00\x63\x71\x04\x47\x3f\xf8\x00\x00\x00\x00\x00\x00\x4a\xfd"
	"\xff\xff\xff\x86\x71\x05\x58\x03\x00\x00\x00\x62\x69\x67\x71\x06\x8a\x06\x00\x00\x00\x00\x00\xff\x58\x01"
	"\x00\x00\x00\x75\x71\x07\x58\x03\x00\x00\x00\x68\xc3\xa9\x71\x08\x58\x01\x00\x00\x00\x6e\x71\x09\x4e\x58"
	"\x01\x00\x00\x00\x74\x71\x0a\x88\x75\x2e";

static int parse(const void *b, size_t n, struct mt_pk_arena **a, struct mt_pk **root, struct mt_err *e)
{
	memset(e, 0, sizeof(*e));
	return mt_pk_parse(b, n, "'x.pt' data.pkl", a, root, e);
}

static void python_pickle(void)
{
	struct mt_pk_arena *a;
	struct mt_pk *r, *v;
	struct mt_err e;
	int64_t x;
	double f;

	ok(parse(py, sizeof(py) - 1, &a, &r, &e) == 0, "a pickle Python wrote parses (%s)", e.msg);
	ok(r && r->kind == MT_PK_DICT && r->n == 7, "a dict of 7 keys");
	ok(mt_pk_get(r, "a") == mt_pk_get(r, "b") && mt_pk_get(r, "a")->kind == MT_PK_LIST && mt_pk_get(r, "a")->n == 2,
	   "the memo shares one list between two keys");
	v = mt_pk_get(r, "c");
	ok(v && v->kind == MT_PK_TUPLE && v->n == 2 && !mt_pk_as_double(v->items[0], &f) && f == 1.5 &&
	   !mt_pk_as_int(v->items[1], &x) && x == -3, "TUPLE2 of a BINFLOAT and a negative BININT");
	ok(!mt_pk_as_int(mt_pk_get(r, "big"), &x) && x == -(1LL << 40), "LONG1 of a negative 6-byte integer");
	is_str(mt_pk_get(r, "u")->s, "h\xc3\xa9", "UTF-8 strings");
	ok(mt_pk_get(r, "n")->kind == MT_PK_NONE && mt_pk_get(r, "t")->kind == MT_PK_BOOL && mt_pk_get(r, "t")->i == 1,
	   "None and True");
	ok(mt_pk_get(r, "missing") == NULL, "an absent key is NULL");
	mt_pk_arena_free(a);
}

static void writer_round_trip(void)
{
	struct mt_pkw w;
	struct mt_pk_arena *a;
	struct mt_pk *r, *ns, *m, *t;
	struct mt_err e;
	int64_t shape[2] = { 3, 4 }, x;
	double f;
	const int64_t ints[] = { 0, 255, 256, 65535, 65536, -1, INT32_MAX, INT32_MIN, (int64_t)1 << 40, -((int64_t)1 << 40),
				 INT64_MAX, INT64_MIN };
	int good = 1;

	mt_pkw_init(&w);
	mt_pkw_dict_begin(&w);
	mt_pkw_str(&w, "args");
	mt_pkw_namespace_begin(&w);
	for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
		char k[16];
		snprintf(k, sizeof(k), "i%zu", i);
		mt_pkw_str(&w, k);
		mt_pkw_int(&w, ints[i]);
	}
	mt_pkw_str(&w, "f");
	mt_pkw_float(&w, -0.1);
	mt_pkw_str(&w, "s");
	mt_pkw_str(&w, "RMSNorm");
	mt_pkw_str(&w, "b");
	mt_pkw_bool(&w, 0);
	mt_pkw_str(&w, "dtype");
	mt_pkw_dtype(&w, MT_PKD_BF16);
	mt_pkw_str(&w, "none");
	mt_pkw_none(&w);
	mt_pkw_namespace_end(&w);
	mt_pkw_str(&w, "model");
	mt_pkw_odict_begin(&w);
	mt_pkw_str(&w, "w");
	mt_pkw_tensor(&w, MT_PKD_BF16, "0", 2, shape);
	mt_pkw_str(&w, "w._extra_state");
	mt_pkw_none(&w);
	mt_pkw_dict_end(&w);
	mt_pkw_dict_end(&w);
	mt_pkw_stop(&w);
	ok(!w.oom, "the writer's buffer grows");
	ok(parse(w.b, w.n, &a, &r, &e) == 0, "mt's reader reads mt's writer (%s)", e.msg);
	ns = mt_pk_get(r, "args");
	ok(ns && ns->kind == MT_PK_OBJECT && !strcmp(ns->s, "argparse.Namespace"), "args is a Namespace");
	for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
		char k[16];
		snprintf(k, sizeof(k), "i%zu", i);
		if (mt_pk_as_int(mt_pk_attr(ns, k), &x) || x != ints[i]) {
			good = 0;
			printf("# %s: got %lld want %lld\n", k, (long long)x, (long long)ints[i]);
		}
	}
	ok(good, "integers of every width round-trip (BININT1, BININT2, BININT, LONG1)");
	ok(!mt_pk_as_double(mt_pk_attr(ns, "f"), &f) && f == -0.1, "a float round-trips exactly");
	is_str(mt_pk_attr(ns, "s")->s, "RMSNorm", "a string attribute");
	ok(mt_pk_attr(ns, "b")->kind == MT_PK_BOOL && mt_pk_attr(ns, "b")->i == 0, "a bool attribute");
	is_str(mt_pk_attr(ns, "dtype")->s, "torch.bfloat16", "a dtype is a global value");
	m = mt_pk_get(r, "model");
	ok(m && m->kind == MT_PK_DICT && m->n == 2, "the model is an OrderedDict of 2 entries");
	t = mt_pk_get(m, "w");
	ok(t && t->kind == MT_PK_TENSOR && t->dtype == MT_PKD_BF16 && t->ndim == 2 && t->size[0] == 3 && t->size[1] == 4 &&
	   t->stride[0] == 4 && t->stride[1] == 1 && t->offset == 0 && t->storage->i == 12 && !strcmp(t->storage->s, "0") &&
	   !strcmp(t->storage->location, "cpu"), "a tensor: storage, shape, C-order strides");
	mt_pk_arena_free(a);
	mt_pkw_free(&w);
}

static void refusals(void)
{
	static const struct {
		const char *b;
		size_t n;
		const char *msg, *what;
	} cases[] = {
		{ "\x80\x02" "N(i__builtin__\nobject\n0.", 26, "byte 4: pickle opcode 0x69 ('i') is not one torch.save writes",
		  "INST, a protocol 0 opcode" },
		{ "\x80\x02" "cposix\nsystem\n.", 17, "byte 2: global 'posix.system' is not in the list", "os.system" },
		{ "\x80\x02" "}q\x00(X\x05\x00\x00\x00" "a", 12, "ends inside an opcode's argument", "a truncated pickle" },
		{ "\x80\x02" "N", 3, "ends without STOP", "no STOP" },
		{ "\x80\x02" "a.", 4, "the stack is empty", "a stack underflow" },
		{ "\x80\x02" "h\x05.", 5, "memo entry 5 was never stored", "an unset memo entry" },
		{ "\x80\x02\x80\x09.", 5, "pickle protocol 9 is not read", "protocol 9" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct mt_pk_arena *a;
		struct mt_pk *r;
		struct mt_err e;
		ok(parse(cases[i].b, cases[i].n, &a, &r, &e) == -1 && e.code == MT_EXIT_DATA, "refused: %s", cases[i].what);
		like(e.msg, cases[i].msg, "  with its offset and reason");
		like(e.msg, "'x.pt' data.pkl", "  naming the file");
		mt_pk_arena_free(a);
	}
	{
		/* a tensor of 3 x 4 over a storage of 11 elements */
		struct mt_pkw w;
		struct mt_pk_arena *a;
		struct mt_pk *r;
		struct mt_err e;
		int64_t shape[2] = { 3, 4 };
		mt_pkw_init(&w);
		mt_pkw_tensor(&w, MT_PKD_F32, "0", 2, shape);
		mt_pkw_stop(&w);
		/* the numel of the persistent id is the BININT1 12 after "cpu" */
		for (size_t i = 0; i + 5 < w.n; i++)
			if (!memcmp(w.b + i, "cpu", 3) && w.b[i + 3] == 'K' && w.b[i + 4] == 12)
				w.b[i + 4] = 11;
		ok(parse(w.b, w.n, &a, &r, &e) == -1, "refused: a tensor view past its storage");
		like(e.msg, "runs past its storage '0' of 11 elements", "  saying so");
		mt_pk_arena_free(a);
		mt_pkw_free(&w);
	}
}

static int parses(const char *b, size_t n, struct mt_pk_arena **a, struct mt_pk **r, struct mt_err *e)
{
	return parse(b, n, a, r, e);
}

#define P2 "\x80\x02"
#define GA "c__builtin__\ngetattr\n"

static void megatron_globals(void)
{
	struct mt_pk_arena *a;
	struct mt_pk *r;
	struct mt_err e;
	int64_t x;
	static const char by_name[] = P2 GA "cmegatron.core.rerun_state_machine\nRerunMode\n"
				      "X\x08\x00\x00\x00" "DISABLED\x86R.";
	static const char by_value[] = P2 "cmegatron.core.enums\nModelType\nK\x01\x85R.";
	static const char bytesio[] = P2 "c_io\nBytesIO\n)\x81" "c_codecs\nencode\nX\x02\x00\x00\x00" "xyX\x06\x00\x00\x00"
				      "latin1\x86RK\x00N\x87" "b.";
	static const char generator[] = P2 "ctorch._C\nGenerator\nctorch\ndevice\nX\x03\x00\x00\x00" "cpu\x85R\x85R}b.";

	ok(parses(by_name, sizeof(by_name) - 1, &a, &r, &e) == 0 && r->kind == MT_PK_OBJECT &&
	   !strcmp(r->s, "megatron.core.rerun_state_machine.RerunMode.DISABLED"),
	   "an enum member by name (Python 3.11 on, getattr): module.Class.NAME (%s)", e.msg);
	mt_pk_arena_free(a);
	ok(parses(by_value, sizeof(by_value) - 1, &a, &r, &e) == 0 && r->kind == MT_PK_OBJECT &&
	   !strcmp(r->s, "megatron.core.enums.ModelType") && r->args->n == 1 && !mt_pk_as_int(r->args->items[0], &x) &&
	   x == 1, "an enum member by value (Python up to 3.10): the class and (value,) (%s)", e.msg);
	mt_pk_arena_free(a);
	ok(parses(bytesio, sizeof(bytesio) - 1, &a, &r, &e) == 0 && r->kind == MT_PK_OBJECT && !strcmp(r->s, "_io.BytesIO") &&
	   r->state && r->state->kind == MT_PK_TUPLE && r->state->items[0]->kind == MT_PK_BYTES &&
	   r->state->items[0]->len == 2, "a BytesIO (older Transformer Engine's extra state): an object (%s)", e.msg);
	mt_pk_arena_free(a);
	ok(parses(generator, sizeof(generator) - 1, &a, &r, &e) == 0 && r->kind == MT_PK_OBJECT &&
	   !strcmp(r->s, "torch._C.Generator"), "a torch Generator on a torch.device: an object (%s)", e.msg);
	mt_pk_arena_free(a);
	{
		/* _rebuild_from_type_v2(_rebuild_tensor_v2, torch.Tensor, (args), {attributes}) */
		static const char rt[] = "ctorch._utils\n_rebuild_tensor_v2\n";
		static const char head[] = "ctorch._tensor\n_rebuild_from_type_v2\n(ctorch._utils\n_rebuild_tensor_v2\nctorch\nTensor\n";
		static const char state[] = "}(X\x15\x00\x00\x00tensor_model_parallel\x88ut.";
		struct mt_pkw w;
		int64_t shape[2] = { 2, 3 };
		unsigned char b[1024];
		size_t n = 2;
		mt_pkw_init(&w);
		mt_pkw_tensor(&w, MT_PKD_F32, "0", 2, shape);
		memcpy(b, P2, 2);
		memcpy(b + n, head, sizeof(head) - 1);
		n += sizeof(head) - 1;
		/* the tensor's argument tuple: mt's writer's bytes less its GLOBAL and its REDUCE */
		memcpy(b + n, w.b + 2 + sizeof(rt) - 1, w.n - 2 - (sizeof(rt) - 1) - 1);
		n += w.n - 2 - (sizeof(rt) - 1) - 1;
		memcpy(b + n, state, sizeof(state) - 1);
		n += sizeof(state) - 1;
		b[n++] = 'R';
		b[n++] = '.';
		/* state's TUPLE closes the MARK after the GLOBAL; the final R calls it */
		memmove(b + n - 3, b + n - 2, 2);
		n--;
		ok(parses((const char *)b, n, &a, &r, &e) == 0 && r->kind == MT_PK_TENSOR && r->ndim == 2 && r->size[1] == 3 &&
		   r->state && mt_pk_get(r->state, "tensor_model_parallel") &&
		   mt_pk_get(r->state, "tensor_model_parallel")->kind == MT_PK_BOOL,
		   "a tensor with Python attributes (_rebuild_from_type_v2): the tensor, its attributes as its state (%s)",
		   e.msg);
		mt_pk_arena_free(a);
		mt_pkw_free(&w);
	}
	{
		static const struct {
			const char *b;
			size_t n;
			const char *msg, *what;
		} cases[] = {
			{ P2 GA "cargparse\nNamespace\nX\x01\x00\x00\x00" "a\x86R.", 53, "getattr of something other than a listed enum",
			  "getattr on a class that is not an enum" },
			{ P2 "cmegatron.core.transformer.enums\nFoo\n.", 39,
			  "global 'megatron.core.transformer.enums.Foo' is not in the list", "an enum module's unlisted name" },
			{ P2 "ctorch\nTensor\n)R.", 18, "'torch.Tensor' cannot be called", "torch.Tensor called" },
			{ P2 "cmegatron.core.enums\nModelType\n)\x81.", 36, "cannot be instantiated", "an enum made by NEWOBJ" },
			{ P2 "cmegatron.core.enums\nModelType\n)R.", 35, "of something other than one plain value",
			  "an enum of no value" },
		};
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			ok(parses(cases[i].b, cases[i].n, &a, &r, &e) == -1 && e.code == MT_EXIT_DATA, "refused: %s",
			   cases[i].what);
			like(e.msg, cases[i].msg, "  saying so (%s)", e.msg);
			mt_pk_arena_free(a);
		}
	}
	{
		/* lists nested MT_PK_MAX_DEPTH deep are read; one more is refused */
		char b[1024];
		for (int d = MT_PK_MAX_DEPTH; d <= MT_PK_MAX_DEPTH + 1; d++) {
			size_t n = 0;
			memcpy(b, P2, 2);
			n = 2;
			for (int i = 0; i < d; i++) {
				b[n++] = ']';
				b[n++] = '(';
			}
			b[n++] = ']';
			for (int i = 0; i < d; i++)
				b[n++] = 'e';
			b[n++] = '.';
			if (d == MT_PK_MAX_DEPTH) {
				ok(parses(b, n, &a, &r, &e) == 0 && r->depth == MT_PK_MAX_DEPTH, "lists nested %d deep are read (%s)",
				   d, e.msg);
			} else {
				ok(parses(b, n, &a, &r, &e) == -1 && e.code == MT_EXIT_DATA, "lists nested %d deep are refused", d);
				like(e.msg, "lists nested more than 100 deep: refused", "  saying so, with the offset (%s)", e.msg);
			}
			mt_pk_arena_free(a);
		}
	}
	{
		/* d = {}; d['a'] = d */
		static const char cyc[] = P2 "}q\x00(X\x01\x00\x00\x00" "ah\x00u.";
		ok(parses(cyc, sizeof(cyc) - 1, &a, &r, &e) == 0 && mt_pk_get(r, "a") == r,
		   "a dict holding itself is read as such (walks bound their own depth) (%s)", e.msg);
		mt_pk_arena_free(a);
	}
}

static void zip(void)
{
	char path[] = "/tmp/mt-test-torchzip-XXXXXX";
	int fd = mkstemp(path);
	struct mt_tzw w;
	struct mt_tz z;
	struct mt_err e = { 0 };
	unsigned char data[1000];
	const struct mt_tz_entry *m;
	FILE *f;
	long size;

	for (int i = 0; i < 1000; i++)
		data[i] = (unsigned char)(i * 7);
	close(fd);
	unlink(path);
	ok(mt_tzw_open(&w, path, "model_optim_rng", &e) == 0, "the writer opens");
	ok(mt_tzw_add(&w, "data.pkl", "\x80\x02N.", 4, &e) == 0 && mt_tzw_add(&w, "data/0", data, 1000, &e) == 0 &&
	   mt_tzw_add(&w, "data/1", data, 3, &e) == 0 && mt_tzw_add(&w, "version", "3\n", 2, &e) == 0 &&
	   mt_tzw_finish(&w, &e) == 0, "members and the end records are written (%s)", e.msg);
	ok(mt_tz_open(&z, path, &e) == 0, "and read back (%s)", e.msg);
	is_str(z.prefix, "model_optim_rng/", "the top folder");
	is_int(z.n, 4, "four members");
	m = mt_tz_find(&z, "data/0");
	ok(m && m->size == 1000 && !memcmp(m->data, data, 1000), "a member's bytes, in place");
	ok(m && (m->data - (const unsigned char *)z.map) % 64 == 0 && (mt_tz_find(&z, "data/1")->data -
	   (const unsigned char *)z.map) % 64 == 0, "data starts on 64-byte boundaries");
	ok(mt_tz_check_crc(&z, m, &e) == 0, "its CRC-32 checks");
	mt_tz_close(&z);
	/* flip a byte of data/0, then cut the file */
	f = fopen(path, "r+b");
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	ok(mt_tz_open(&z, path, &e) == 0, "reopened");
	{
		long at = (long)(mt_tz_find(&z, "data/0")->data - (const unsigned char *)z.map) + 10;
		mt_tz_close(&z);
		fseek(f, at, SEEK_SET);
		fputc(0xAA ^ data[10], f);
	}
	fclose(f);
	ok(mt_tz_open(&z, path, &e) == 0 && mt_tz_check_crc(&z, mt_tz_find(&z, "data/0"), &e) == -1, "a flipped byte fails "
	   "the CRC check");
	like(e.msg, "fails its CRC-32 check", "  saying so");
	mt_tz_close(&z);
	ok(truncate(path, size / 2) == 0, "truncate the file");
	ok(mt_tz_open(&z, path, &e) == -1 && e.code == MT_EXIT_DATA, "a truncated file is refused");
	like(e.msg, "truncated", "  saying it may be truncated");
	like(e.msg, path, "  naming the file");
	unlink(path);
}

int main(void)
{
	python_pickle();
	writer_round_trip();
	refusals();
	megatron_globals();
	zip();
	return tap_done();
}
