/* pickle.c: torch.save's pickle subset, read by a stack machine that executes nothing,
 * and written (pickle.h). */
#include "ckpt/pickle.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- dtypes ---- */

static const struct {
	const char *name, *storage;
	size_t size;
} dtypes[MT_PKD_NTYPES] = {
	[MT_PKD_F32] = { "float32", "FloatStorage", 4 },   [MT_PKD_F16] = { "float16", "HalfStorage", 2 },
	[MT_PKD_BF16] = { "bfloat16", "BFloat16Storage", 2 }, [MT_PKD_F64] = { "float64", "DoubleStorage", 8 },
	[MT_PKD_I64] = { "int64", "LongStorage", 8 },      [MT_PKD_I32] = { "int32", "IntStorage", 4 },
	[MT_PKD_I16] = { "int16", "ShortStorage", 2 },     [MT_PKD_I8] = { "int8", "CharStorage", 1 },
	[MT_PKD_U8] = { "uint8", "ByteStorage", 1 },       [MT_PKD_BOOL] = { "bool", "BoolStorage", 1 },
};

size_t mt_pk_dtype_size(enum mt_pk_dtype d) { return dtypes[d].size; }
const char *mt_pk_dtype_name(enum mt_pk_dtype d) { return dtypes[d].name; }
const char *mt_pk_storage_class(enum mt_pk_dtype d) { return dtypes[d].storage; }

/* ---- the arena ---- */

#define NODES_PER_BLOCK 1024
struct node_block {
	struct node_block *next;
	int used;
	struct mt_pk n[NODES_PER_BLOCK];
};
struct str_block {
	struct str_block *next;
	size_t used, cap;
	char s[];
};
struct mt_pk_arena {
	struct node_block *nodes;
	struct str_block *strs;
};

void mt_pk_arena_free(struct mt_pk_arena *a)
{
	if (!a)
		return;
	for (struct node_block *b = a->nodes, *nx; b; b = nx) {
		nx = b->next;
		for (int i = 0; i < b->used; i++)
			free(b->n[i].items);
		free(b);
	}
	for (struct str_block *b = a->strs, *nx; b; b = nx) {
		nx = b->next;
		free(b);
	}
	free(a);
}

static struct mt_pk *node(struct mt_pk_arena *a, enum mt_pk_kind k, uint64_t at)
{
	struct mt_pk *v;

	if (!a->nodes || a->nodes->used == NODES_PER_BLOCK) {
		struct node_block *b = malloc(sizeof(*b));
		if (!b)
			return NULL;
		b->used = 0;
		b->next = a->nodes;
		a->nodes = b;
	}
	v = &a->nodes->n[a->nodes->used++];
	memset(v, 0, sizeof(*v));
	v->kind = k;
	v->at = at;
	return v;
}

static char *str_alloc(struct mt_pk_arena *a, size_t n)
{
	struct str_block *b = a->strs;
	char *s;

	if (!b || b->cap - b->used < n + 1) {
		size_t cap = n + 1 > 65536 ? n + 1 : 65536;
		b = malloc(sizeof(*b) + cap);
		if (!b)
			return NULL;
		b->used = 0;
		b->cap = cap;
		b->next = a->strs;
		a->strs = b;
	}
	s = b->s + b->used;
	b->used += n + 1;
	return s;
}

static const char *str_dup(struct mt_pk_arena *a, const void *p, size_t n)
{
	char *s = str_alloc(a, n);

	if (s) {
		memcpy(s, p, n);
		s[n] = 0;
	}
	return s;
}

static int push_item(struct mt_pk *c, struct mt_pk *v)
{
	if (c->n == c->cap) {
		int cap = c->cap ? 2 * c->cap : 4;
		struct mt_pk **x = realloc(c->items, (size_t)cap * sizeof(*x));
		if (!x)
			return -1;
		c->items = x;
		c->cap = cap;
	}
	c->items[c->n++] = v;
	if (v->depth >= c->depth)
		c->depth = v->depth + 1;
	return 0;
}

/* ---- the globals ---- */

enum role {
	R_NONE,
	R_ODICT,      /* collections.OrderedDict: REDUCE () -> dict */
	R_TENSOR,     /* _rebuild_tensor_v2 */
	R_PARAM,      /* _rebuild_parameter(_with_state) */
	R_SIZE,       /* torch.Size(tuple) -> tuple */
	R_ENCODE,     /* _codecs.encode(str, 'latin1') -> bytes */
	R_STORAGE,    /* storage classes, in persistent ids */
	R_DTYPE,      /* torch dtypes, signal.SIG*: values */
	R_OBJECT,     /* opaque: REDUCE, NEWOBJ, BUILD make an object */
	R_GETATTR,    /* getattr(enum class, 'name'): how Python 3.11 on pickles enum members */
	R_ENUM,       /* an enum class: REDUCE (value,) or getattr(cls, 'NAME') -> an opaque member */
	R_FROM_TYPE,  /* torch._tensor._rebuild_from_type_v2(_rebuild_tensor_v2, torch.Tensor, args, state) */
	R_TYPE,       /* torch.Tensor: only as _rebuild_from_type_v2's type, never called */
};

static const struct {
	const char *name;
	enum role role;
} globals[] = {
	{ "collections.OrderedDict", R_ODICT },
	{ "torch._utils._rebuild_tensor_v2", R_TENSOR },
	{ "torch._utils._rebuild_parameter", R_PARAM },
	{ "torch._utils._rebuild_parameter_with_state", R_PARAM },
	{ "torch.Size", R_SIZE },
	{ "_codecs.encode", R_ENCODE },
	{ "__builtin__.getattr", R_GETATTR },
	{ "builtins.getattr", R_GETATTR },
	{ "argparse.Namespace", R_OBJECT },
	{ "types.SimpleNamespace", R_OBJECT },
	{ "torch.device", R_OBJECT },
	{ "builtins.set", R_OBJECT },
	{ "builtins.frozenset", R_OBJECT },
	{ "collections.Counter", R_OBJECT },
	/* megatron-dist-ckpt.md section 1.3: what core_v0.10 to HEAD legacy files can hold */
	{ "__builtin__.set", R_OBJECT },             /* protocol 2 names builtins so */
	{ "__builtin__.frozenset", R_OBJECT },
	{ "torch._tensor._rebuild_from_type_v2", R_FROM_TYPE }, /* a tensor with Python attributes */
	{ "torch.Tensor", R_TYPE },
	{ "torch._C.Generator", R_OBJECT },          /* graph-safe RNG tracker states */
	{ "_io.BytesIO", R_OBJECT },                 /* older Transformer Engine's _extra_state */
	{ "megatron.core.optimizer.optimizer_config.OptimizerConfig", R_OBJECT },
	{ "megatron.core.rerun_state_machine.Call", R_OBJECT },   /* NamedTuples */
	{ "megatron.core.rerun_state_machine.Caller", R_OBJECT },
	{ "megatron.core.rerun_state_machine.RerunMode", R_ENUM },
	{ "megatron.core.rerun_state_machine.RerunState", R_ENUM },
	{ "megatron.core.rerun_state_machine.RerunDiagnostic", R_ENUM },
	{ "megatron.core.enums.ModelType", R_ENUM },
	{ "megatron.core.transformer.enums.AttnBackend", R_ENUM },
	{ "megatron.core.transformer.enums.CudaGraphModule", R_ENUM },
	{ "megatron.core.transformer.enums.InferenceCudaGraphScope", R_ENUM },
	{ "megatron.core.transformer.enums.CudaGraphScope", R_ENUM },
	{ "pathlib.PosixPath", R_OBJECT },
	{ "pathlib.PurePosixPath", R_OBJECT },
	{ "pathlib.WindowsPath", R_OBJECT },
	{ "pathlib.PureWindowsPath", R_OBJECT },
	{ "pathlib.Path", R_OBJECT },
	{ "signal.Signals", R_ENUM },
	{ "numpy.core.multiarray._reconstruct", R_OBJECT },
	{ "numpy._core.multiarray._reconstruct", R_OBJECT },
	{ "numpy.core.multiarray.scalar", R_OBJECT },
	{ "numpy._core.multiarray.scalar", R_OBJECT },
	{ "numpy.ndarray", R_OBJECT },
	{ "numpy.dtype", R_OBJECT },
	{ "numpy.dtypes.UInt32DType", R_OBJECT },
	{ "numpy.dtypes.Float64DType", R_OBJECT },
	{ "numpy.dtypes.Int64DType", R_OBJECT },
	/* PyTorch's distributed checkpoint: the .metadata pickle (torchdist.h) */
	{ "torch.distributed.checkpoint.metadata.Metadata", R_OBJECT },
	{ "torch.distributed.checkpoint.metadata.TensorStorageMetadata", R_OBJECT },
	{ "torch.distributed.checkpoint.metadata.BytesStorageMetadata", R_OBJECT },
	{ "torch.distributed.checkpoint.metadata.ChunkStorageMetadata", R_OBJECT },
	{ "torch.distributed.checkpoint.metadata.MetadataIndex", R_OBJECT },
	{ "torch.distributed.checkpoint.metadata.StorageMeta", R_OBJECT },
	{ "torch.distributed.checkpoint.metadata.TensorProperties", R_OBJECT },
	{ "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING", R_OBJECT },
	{ "torch.distributed.checkpoint.filesystem._StorageInfo", R_OBJECT },
	{ "torch.serialization._get_layout", R_OBJECT },
};

static const char *const dtype_globals[] = {
	"torch.float32", "torch.float", "torch.float16", "torch.half", "torch.bfloat16", "torch.float64",
	"torch.double", "torch.int64", "torch.long", "torch.int32", "torch.int", "torch.int16", "torch.short",
	"torch.int8", "torch.uint8", "torch.bool", "torch.complex64", "torch.complex128", "torch.float8_e4m3fn",
	"torch.float8_e5m2", "torch.float8_e4m3fnuz", "torch.float8_e5m2fnuz", "torch.float8_e8m0fnu", "torch.uint16",
	"torch.uint32", "torch.uint64", "torch.complex32", "torch.chalf", "torch.cfloat", "torch.cdouble",
};

static enum role role_of(const char *name, enum mt_pk_dtype *d)
{
	for (size_t i = 0; i < sizeof(globals) / sizeof(globals[0]); i++)
		if (!strcmp(name, globals[i].name))
			return globals[i].role;
	for (size_t i = 0; i < sizeof(dtype_globals) / sizeof(dtype_globals[0]); i++)
		if (!strcmp(name, dtype_globals[i]))
			return R_DTYPE;
	if (!strncmp(name, "torch.", 6))
		for (int k = 0; k < MT_PKD_NTYPES; k++)
			if (!strcmp(name + 6, dtypes[k].storage)) {
				*d = (enum mt_pk_dtype)k;
				return R_STORAGE;
			}
	/* signals by name (signal.SIGTERM: Python pickles signal.Signals members as globals) */
	if (!strncmp(name, "signal.SIG", 10) && strlen(name) < 24)
		return R_DTYPE;
	return R_NONE;
}

/* ---- the machine ---- */

struct vm {
	const unsigned char *p;
	size_t len, pos;
	const char *where;
	struct mt_pk_arena *a;
	struct mt_pk **st;
	size_t sn, scap;
	struct mt_pk **memo;
	size_t mcap, mcount;
	struct mt_err *err;
	uint64_t op_at;
};

static int fail(struct vm *m, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct vm *m, int code, const char *fmt, ...)
{
	char msg[600];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return mt_err_set(m->err, code, "%s byte %llu: %s", m->where, (unsigned long long)m->op_at, msg);
}

#define OOM() fail(m, MT_EXIT_IO, "out of memory")

static const char *kind_name(enum mt_pk_kind k)
{
	switch (k) {
	case MT_PK_TUPLE: return "tuples";
	case MT_PK_LIST: return "lists";
	case MT_PK_DICT: return "dicts";
	case MT_PK_OBJECT: return "objects";
	case MT_PK_TENSOR: return "a tensor's attributes";
	default: return "values";
	}
}

/* Nesting is bounded, so that every walk of the tree (recursive or not) ends: a value
 * holds its depth (1 + its deepest part's, counted as parts are added), and one deeper
 * than MT_PK_MAX_DEPTH is refused as it is made. */
static int check_depth(struct vm *m, const struct mt_pk *v)
{
	if (v->depth > MT_PK_MAX_DEPTH)
		return fail(m, MT_EXIT_DATA, "%s nested more than %d deep: refused", kind_name(v->kind), MT_PK_MAX_DEPTH);
	return 0;
}

static void deepen(struct mt_pk *c, const struct mt_pk *part)
{
	if (part && part->depth >= c->depth)
		c->depth = part->depth + 1;
}

static int push(struct vm *m, struct mt_pk *v)
{
	if (!v)
		return OOM();
	if (check_depth(m, v))
		return -1;
	if (m->sn == m->scap) {
		size_t cap = m->scap ? 2 * m->scap : 64;
		struct mt_pk **x = realloc(m->st, cap * sizeof(*x));
		if (!x)
			return OOM();
		m->st = x;
		m->scap = cap;
	}
	m->st[m->sn++] = v;
	return 0;
}

static struct mt_pk *pop(struct vm *m)
{
	if (m->sn == 0 || m->st[m->sn - 1]->kind == MT_PK_MARK) {
		fail(m, MT_EXIT_DATA, "the stack is empty: the pickle is corrupt");
		return NULL;
	}
	return m->st[--m->sn];
}

static struct mt_pk *top(struct vm *m)
{
	if (m->sn == 0 || m->st[m->sn - 1]->kind == MT_PK_MARK) {
		fail(m, MT_EXIT_DATA, "the stack is empty: the pickle is corrupt");
		return NULL;
	}
	return m->st[m->sn - 1];
}

/* The index of the topmost mark, or -1 (after setting the error). */
static long find_mark(struct vm *m)
{
	for (size_t i = m->sn; i-- > 0;)
		if (m->st[i]->kind == MT_PK_MARK)
			return (long)i;
	fail(m, MT_EXIT_DATA, "no MARK on the stack: the pickle is corrupt");
	return -1;
}

static int need(struct vm *m, size_t n)
{
	if (m->len - m->pos < n)
		return fail(m, MT_EXIT_DATA, "the pickle ends inside an opcode's argument (truncated?)");
	return 0;
}

static uint32_t u32(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static int memo_put(struct vm *m, uint64_t i)
{
	struct mt_pk *v = top(m);

	if (!v)
		return -1;
	if (i > (1u << 26))
		return fail(m, MT_EXIT_DATA, "memo index %llu is out of range", (unsigned long long)i);
	if (i >= m->mcap) {
		size_t cap = m->mcap ? m->mcap : 64;
		struct mt_pk **x;
		while (cap <= i)
			cap *= 2;
		x = realloc(m->memo, cap * sizeof(*x));
		if (!x)
			return OOM();
		memset(x + m->mcap, 0, (cap - m->mcap) * sizeof(*x));
		m->memo = x;
		m->mcap = cap;
	}
	if (!m->memo[i])
		m->mcount++;
	m->memo[i] = v;
	return 0;
}

static int memo_get(struct vm *m, uint64_t i)
{
	if (i >= m->mcap || !m->memo[i])
		return fail(m, MT_EXIT_DATA, "memo entry %llu was never stored: the pickle is corrupt", (unsigned long long)i);
	return push(m, m->memo[i]);
}

static int read_line(struct vm *m, const char **s, size_t *n)
{
	const unsigned char *nl = memchr(m->p + m->pos, '\n', m->len - m->pos);

	if (!nl)
		return fail(m, MT_EXIT_DATA, "the pickle ends inside a GLOBAL's name (truncated?)");
	*s = (const char *)m->p + m->pos;
	*n = (size_t)(nl - (m->p + m->pos));
	m->pos += *n + 1;
	return 0;
}

static int make_global(struct vm *m, const char *mod, size_t mn, const char *name, size_t nn)
{
	struct mt_pk *g = node(m->a, MT_PK_GLOBAL, m->op_at);
	char *s;
	enum mt_pk_dtype d = MT_PKD_F32;

	if (!g || !(s = str_alloc(m->a, mn + nn + 1)))
		return OOM();
	memcpy(s, mod, mn);
	s[mn] = '.';
	memcpy(s + mn + 1, name, nn);
	s[mn + nn + 1] = 0;
	for (size_t i = 0; i < mn + nn + 1; i++)
		if ((unsigned char)s[i] < 32 || (unsigned char)s[i] > 126)
			return fail(m, MT_EXIT_DATA, "a GLOBAL's name holds unprintable bytes");
	if (role_of(s, &d) == R_NONE)
		return fail(m, MT_EXIT_DATA, "global '%s' is not in the list of globals read (pickle.h): refused", s);
	g->s = s;
	g->dtype = d;
	return push(m, g);
}

static struct mt_pk *make_seq(struct vm *m, enum mt_pk_kind k, long from)
{
	struct mt_pk *t = node(m->a, k, m->op_at);

	if (!t)
		return NULL;
	for (size_t i = (size_t)from; i < m->sn; i++)
		if (push_item(t, m->st[i]))
			return NULL;
	return t;
}

static int int_of(const struct mt_pk *v, int64_t *x)
{
	if (v->kind == MT_PK_INT || v->kind == MT_PK_BOOL) {
		*x = v->i;
		return 0;
	}
	return -1;
}

static int rebuild_tensor(struct vm *m, struct mt_pk *args, struct mt_pk **out)
{
	struct mt_pk *t, *st, *sz, *sd;
	int64_t off, extent = 0;

	if (args->kind != MT_PK_TUPLE || args->n < 6)
		return fail(m, MT_EXIT_DATA, "_rebuild_tensor_v2 needs 6 or 7 arguments");
	st = args->items[0];
	sz = args->items[2];
	sd = args->items[3];
	if (st->kind != MT_PK_STORAGE)
		return fail(m, MT_EXIT_DATA, "_rebuild_tensor_v2's first argument is not a storage");
	if (int_of(args->items[1], &off) || off < 0 || sz->kind != MT_PK_TUPLE || sd->kind != MT_PK_TUPLE ||
	    sz->n != sd->n || sz->n > MT_PK_MAX_DIMS)
		return fail(m, MT_EXIT_DATA, "_rebuild_tensor_v2: bad offset, size or stride (at most %d dimensions)",
			    MT_PK_MAX_DIMS);
	t = node(m->a, MT_PK_TENSOR, m->op_at);
	if (!t)
		return OOM();
	t->storage = st;
	t->dtype = st->dtype;
	t->offset = off;
	t->ndim = sz->n;
	int empty = 0;
	for (int i = 0; i < sz->n; i++) {
		if (int_of(sz->items[i], &t->size[i]) || int_of(sd->items[i], &t->stride[i]) || t->size[i] < 0 ||
		    t->stride[i] < 0 || t->size[i] > ((int64_t)1 << 40) || t->stride[i] > ((int64_t)1 << 40))
			return fail(m, MT_EXIT_DATA, "_rebuild_tensor_v2: bad size or stride in dimension %d", i);
		if (t->size[i] == 0)
			empty = 1;
		extent += (t->size[i] - 1) * t->stride[i];
	}
	if (!empty && (off > st->i || extent >= st->i - off))
		return fail(m, MT_EXIT_DATA, "a tensor's view (offset %lld, extent %lld) runs past its storage '%s' of "
			    "%lld elements", (long long)off, (long long)extent + 1, st->s, (long long)st->i);
	*out = t;
	return 0;
}

/* latin-1 bytes from the UTF-8 of a str (protocol 2 pickles bytes as _codecs.encode) */
static int encode_latin1(struct vm *m, struct mt_pk *args, struct mt_pk **out)
{
	struct mt_pk *s, *b;
	char *o;
	size_t k = 0;

	if (args->kind != MT_PK_TUPLE || args->n != 2 || (s = args->items[0])->kind != MT_PK_STR ||
	    args->items[1]->kind != MT_PK_STR ||
	    (strcmp(args->items[1]->s, "latin1") && strcmp(args->items[1]->s, "latin-1")))
		return fail(m, MT_EXIT_DATA, "_codecs.encode: only (str, 'latin1') is read");
	b = node(m->a, MT_PK_BYTES, m->op_at);
	if (!b || !(o = str_alloc(m->a, s->len)))
		return OOM();
	for (size_t i = 0; i < s->len;) {
		unsigned char c = (unsigned char)s->s[i];
		if (c < 0x80) {
			o[k++] = (char)c;
			i++;
		} else if ((c & 0xE0) == 0xC0 && i + 1 < s->len && c <= 0xC3) {
			o[k++] = (char)(((c & 0x1F) << 6) | ((unsigned char)s->s[i + 1] & 0x3F));
			i += 2;
		} else {
			return fail(m, MT_EXIT_DATA, "_codecs.encode: a character above U+00FF in a latin-1 string");
		}
	}
	o[k] = 0;
	b->s = o;
	b->len = k;
	*out = b;
	return 0;
}

static int op_reduce(struct vm *m)
{
	struct mt_pk *args = pop(m), *f, *r = NULL;
	enum mt_pk_dtype d;

	if (!args || !(f = pop(m)))
		return -1;
	if (f->kind != MT_PK_GLOBAL)
		return fail(m, MT_EXIT_DATA, "REDUCE calls something that is not a global");
	if (args->kind != MT_PK_TUPLE)
		return fail(m, MT_EXIT_DATA, "REDUCE of '%s' without an argument tuple", f->s);
	switch (role_of(f->s, &d)) {
	case R_ODICT:
		r = node(m->a, MT_PK_DICT, m->op_at);
		if (!r)
			return OOM();
		if (args->n == 1 && args->items[0]->kind == MT_PK_LIST) {
			/* OrderedDict([(k, v), ...]) */
			struct mt_pk *l = args->items[0];
			for (int i = 0; i < l->n; i++) {
				if (l->items[i]->kind != MT_PK_TUPLE || l->items[i]->n != 2)
					return fail(m, MT_EXIT_DATA, "OrderedDict of something other than pairs");
				if (push_item(r, l->items[i]->items[0]) || push_item(r, l->items[i]->items[1]))
					return OOM();
			}
			r->n /= 2;
		} else if (args->n) {
			return fail(m, MT_EXIT_DATA, "OrderedDict with unexpected arguments");
		}
		r->s = f->s;
		break;
	case R_TENSOR:
		if (rebuild_tensor(m, args, &r))
			return -1;
		break;
	case R_PARAM:
		if (args->n < 1 || args->items[0]->kind != MT_PK_TENSOR)
			return fail(m, MT_EXIT_DATA, "_rebuild_parameter of something other than a tensor");
		r = args->items[0];
		break;
	case R_SIZE:
		if (args->n != 1 || args->items[0]->kind != MT_PK_TUPLE)
			return fail(m, MT_EXIT_DATA, "torch.Size of something other than a tuple");
		r = args->items[0];
		break;
	case R_ENCODE:
		if (encode_latin1(m, args, &r))
			return -1;
		break;
	case R_OBJECT:
		r = node(m->a, MT_PK_OBJECT, m->op_at);
		if (!r)
			return OOM();
		r->s = f->s;
		r->args = args;
		deepen(r, args);
		break;
	case R_ENUM:
		/* an enum member by value (Python up to 3.10): (module.Class, (value,)) */
		if (args->n != 1 || (args->items[0]->kind != MT_PK_INT && args->items[0]->kind != MT_PK_STR &&
				     args->items[0]->kind != MT_PK_FLOAT && args->items[0]->kind != MT_PK_BOOL))
			return fail(m, MT_EXIT_DATA, "enum '%s' of something other than one plain value: refused", f->s);
		r = node(m->a, MT_PK_OBJECT, m->op_at);
		if (!r)
			return OOM();
		r->s = f->s;
		r->args = args;
		deepen(r, args);
		break;
	case R_GETATTR: {
		/* an enum member by name (Python 3.11 on): (module.Class.NAME, (class, 'NAME')); the class
		 * is a global already checked against the table */
		char *s;
		if (args->n != 2 || args->items[0]->kind != MT_PK_GLOBAL || args->items[1]->kind != MT_PK_STR ||
		    role_of(args->items[0]->s, &d) != R_ENUM)
			return fail(m, MT_EXIT_DATA, "getattr of something other than a listed enum class and a name: refused");
		r = node(m->a, MT_PK_OBJECT, m->op_at);
		if (!r || !(s = str_alloc(m->a, strlen(args->items[0]->s) + args->items[1]->len + 1)))
			return OOM();
		sprintf(s, "%s.%s", args->items[0]->s, args->items[1]->s);
		r->s = s;
		r->args = args;
		deepen(r, args);
		break;
	}
	case R_FROM_TYPE: {
		/* torch >= 2's pickling of a tensor with Python attributes (Megatron's fp32 master
		 * copies carry tensor_model_parallel, partition_dim...): the tensor, its attributes
		 * kept as its state */
		enum mt_pk_dtype d2;
		if (args->n != 4 || args->items[0]->kind != MT_PK_GLOBAL || role_of(args->items[0]->s, &d2) != R_TENSOR ||
		    args->items[1]->kind != MT_PK_GLOBAL || role_of(args->items[1]->s, &d2) != R_TYPE ||
		    args->items[2]->kind != MT_PK_TUPLE)
			return fail(m, MT_EXIT_DATA, "_rebuild_from_type_v2 of something other than (_rebuild_tensor_v2, "
				    "torch.Tensor, arguments, state): refused");
		if (rebuild_tensor(m, args->items[2], &r))
			return -1;
		r->state = args->items[3];
		deepen(r, r->state);
		break;
	}
	default:
		return fail(m, MT_EXIT_DATA, "global '%s' cannot be called (REDUCE): refused", f->s);
	}
	return push(m, r);
}

static int op_build(struct vm *m)
{
	struct mt_pk *state = pop(m), *inst;

	if (!state || !(inst = top(m)))
		return -1;
	if (inst->kind == MT_PK_OBJECT || inst->kind == MT_PK_DICT) {
		/* an object's state; an OrderedDict's {'_metadata': ...} (kept, never used) */
		inst->state = state;
		deepen(inst, state);
		return check_depth(m, inst);
	}
	return fail(m, MT_EXIT_DATA, "BUILD on a value that is not an object or OrderedDict");
}

static int op_persid(struct vm *m)
{
	struct mt_pk *pid = pop(m), *s;

	if (!pid)
		return -1;
	if (pid->kind != MT_PK_TUPLE || pid->n != 5 || pid->items[0]->kind != MT_PK_STR ||
	    strcmp(pid->items[0]->s, "storage") || pid->items[1]->kind != MT_PK_GLOBAL ||
	    pid->items[2]->kind != MT_PK_STR || pid->items[3]->kind != MT_PK_STR || pid->items[4]->kind != MT_PK_INT)
		return fail(m, MT_EXIT_DATA, "a persistent id that is not ('storage', class, key, location, numel)");
	{
		enum mt_pk_dtype d = MT_PKD_F32;
		if (role_of(pid->items[1]->s, &d) != R_STORAGE)
			return fail(m, MT_EXIT_DATA, "'%s' is not a storage class read here", pid->items[1]->s);
		s = node(m->a, MT_PK_STORAGE, m->op_at);
		if (!s)
			return OOM();
		s->dtype = d;
	}
	s->s = pid->items[2]->s;
	s->location = pid->items[3]->s;
	s->i = pid->items[4]->i;
	if (s->i < 0)
		return fail(m, MT_EXIT_DATA, "storage '%s' has a negative size", s->s);
	for (const char *c = s->s; *c; c++)
		if (*c == '/' || *c == '.' || (unsigned char)*c < 33)
			return fail(m, MT_EXIT_DATA, "storage key '%s' is not a plain name", s->s);
	return push(m, s);
}

static int str_op(struct vm *m, size_t n, enum mt_pk_kind k)
{
	struct mt_pk *v;

	if (need(m, n))
		return -1;
	v = node(m->a, k, m->op_at);
	if (!v || !(v->s = str_dup(m->a, m->p + m->pos, n)))
		return OOM();
	v->len = n;
	m->pos += n;
	return push(m, v);
}

static int int_op(struct vm *m, int64_t x)
{
	struct mt_pk *v = node(m->a, MT_PK_INT, m->op_at);

	if (!v)
		return OOM();
	v->i = x;
	return push(m, v);
}

static int long_op(struct vm *m, uint64_t n)
{
	uint64_t x = 0;

	if (need(m, n))
		return -1;
	if (n > 8)
		return fail(m, MT_EXIT_DATA, "an integer of %llu bytes does not fit 64 bits", (unsigned long long)n);
	for (uint64_t i = 0; i < n; i++)
		x |= (uint64_t)m->p[m->pos + i] << (8 * i);
	if (n > 0 && n < 8 && (m->p[m->pos + n - 1] & 0x80))
		x |= ~(uint64_t)0 << (8 * n); /* sign extension */
	m->pos += n;
	return int_op(m, (int64_t)x);
}

static int step(struct vm *m, int *done)
{
	unsigned char op;
	struct mt_pk *v, *t;
	long mk;

	m->op_at = m->pos;
	if (m->pos >= m->len)
		return fail(m, MT_EXIT_DATA, "the pickle ends without STOP (truncated?)");
	op = m->p[m->pos++];
	switch (op) {
	case 0x80: /* PROTO */
		if (need(m, 1))
			return -1;
		if (m->p[m->pos] > 5)
			return fail(m, MT_EXIT_DATA, "pickle protocol %d is not read", m->p[m->pos]);
		m->pos++;
		return 0;
	case 0x95: /* FRAME */
		if (need(m, 8))
			return -1;
		m->pos += 8;
		return 0;
	case '.': /* STOP */
		*done = 1;
		return 0;
	case '(': /* MARK */
		return push(m, node(m->a, MT_PK_MARK, m->op_at));
	case '0': /* POP */
		return pop(m) ? 0 : -1;
	case '1': /* POP_MARK */
		if ((mk = find_mark(m)) < 0)
			return -1;
		m->sn = (size_t)mk;
		return 0;
	case '2': /* DUP */
		if (!(v = top(m)))
			return -1;
		return push(m, v);
	case 'N':
		return push(m, node(m->a, MT_PK_NONE, m->op_at));
	case 0x88: case 0x89: /* NEWTRUE, NEWFALSE */
		if (!(v = node(m->a, MT_PK_BOOL, m->op_at)))
			return OOM();
		v->i = op == 0x88;
		return push(m, v);
	case 'J':
		if (need(m, 4))
			return -1;
		m->pos += 4;
		return int_op(m, (int32_t)u32(m->p + m->pos - 4));
	case 'K':
		if (need(m, 1))
			return -1;
		return int_op(m, m->p[m->pos++]);
	case 'M':
		if (need(m, 2))
			return -1;
		m->pos += 2;
		return int_op(m, m->p[m->pos - 2] | m->p[m->pos - 1] << 8);
	case 0x8a: /* LONG1 */
		if (need(m, 1))
			return -1;
		return long_op(m, m->p[m->pos++]);
	case 0x8b: /* LONG4 */
		if (need(m, 4))
			return -1;
		m->pos += 4;
		return long_op(m, u32(m->p + m->pos - 4));
	case 'G': { /* BINFLOAT, big-endian */
		uint64_t x = 0;
		if (need(m, 8))
			return -1;
		for (int i = 0; i < 8; i++)
			x = x << 8 | m->p[m->pos + i];
		m->pos += 8;
		if (!(v = node(m->a, MT_PK_FLOAT, m->op_at)))
			return OOM();
		memcpy(&v->f, &x, 8);
		return push(m, v);
	}
	case 'X': case 'T': case 'B': /* BINUNICODE, BINSTRING, BINBYTES */
		if (need(m, 4))
			return -1;
		m->pos += 4;
		return str_op(m, u32(m->p + m->pos - 4), op == 'B' ? MT_PK_BYTES : MT_PK_STR);
	case 0x8c: case 'U': case 'C': /* SHORT_BINUNICODE, SHORT_BINSTRING, SHORT_BINBYTES */
		if (need(m, 1))
			return -1;
		m->pos++;
		return str_op(m, m->p[m->pos - 1], op == 'C' ? MT_PK_BYTES : MT_PK_STR);
	case 0x8d: case 0x8e: case 0x96: { /* BINUNICODE8, BINBYTES8, BYTEARRAY8 */
		uint64_t n;
		if (need(m, 8))
			return -1;
		n = u32(m->p + m->pos) | (uint64_t)u32(m->p + m->pos + 4) << 32;
		m->pos += 8;
		return str_op(m, n, op == 0x8d ? MT_PK_STR : MT_PK_BYTES);
	}
	case ')':
		return push(m, node(m->a, MT_PK_TUPLE, m->op_at));
	case ']':
		return push(m, node(m->a, MT_PK_LIST, m->op_at));
	case '}':
		return push(m, node(m->a, MT_PK_DICT, m->op_at));
	case 0x8f: /* EMPTY_SET: a list here */
		return push(m, node(m->a, MT_PK_LIST, m->op_at));
	case 't': case 'l': case 0x91: /* TUPLE, LIST, FROZENSET */
		if ((mk = find_mark(m)) < 0)
			return -1;
		if (!(t = make_seq(m, op == 't' ? MT_PK_TUPLE : MT_PK_LIST, mk + 1)))
			return OOM();
		m->sn = (size_t)mk;
		return push(m, t);
	case 0x85: case 0x86: case 0x87: { /* TUPLE1..3 */
		int k = op - 0x84;
		if (m->sn < (size_t)k)
			return fail(m, MT_EXIT_DATA, "the stack is empty: the pickle is corrupt");
		for (int i = 0; i < k; i++)
			if (m->st[m->sn - 1 - i]->kind == MT_PK_MARK)
				return fail(m, MT_EXIT_DATA, "TUPLE%d over a MARK: the pickle is corrupt", k);
		if (!(t = make_seq(m, MT_PK_TUPLE, (long)(m->sn - (size_t)k))))
			return OOM();
		m->sn -= (size_t)k;
		return push(m, t);
	}
	case 'a': /* APPEND */
		if (!(v = pop(m)) || !(t = top(m)))
			return -1;
		if (t->kind != MT_PK_LIST)
			return fail(m, MT_EXIT_DATA, "APPEND to something that is not a list");
		return push_item(t, v) ? OOM() : check_depth(m, t);
	case 'e': case 0x90: /* APPENDS, ADDITEMS */
		if ((mk = find_mark(m)) < 0)
			return -1;
		if (mk == 0 || (t = m->st[mk - 1])->kind != MT_PK_LIST)
			return fail(m, MT_EXIT_DATA, "APPENDS to something that is not a list");
		for (size_t i = (size_t)mk + 1; i < m->sn; i++)
			if (push_item(t, m->st[i]))
				return OOM();
		m->sn = (size_t)mk;
		return check_depth(m, t);
	case 'd': /* DICT */
		if ((mk = find_mark(m)) < 0)
			return -1;
		if ((m->sn - (size_t)mk - 1) % 2)
			return fail(m, MT_EXIT_DATA, "DICT of an odd number of items");
		if (!(t = make_seq(m, MT_PK_DICT, mk + 1)))
			return OOM();
		t->n /= 2;
		m->sn = (size_t)mk;
		return push(m, t);
	case 's': /* SETITEM */
	case 'u': { /* SETITEMS */
		size_t from;
		if (op == 's') {
			if (m->sn < 3)
				return fail(m, MT_EXIT_DATA, "the stack is empty: the pickle is corrupt");
			from = m->sn - 2;
			mk = (long)from - 1;
			if (m->st[from]->kind == MT_PK_MARK || m->st[from + 1]->kind == MT_PK_MARK)
				return fail(m, MT_EXIT_DATA, "SETITEM over a MARK: the pickle is corrupt");
			t = m->st[mk];
		} else {
			if ((mk = find_mark(m)) < 0)
				return -1;
			from = (size_t)mk + 1;
			if (mk == 0)
				return fail(m, MT_EXIT_DATA, "SETITEMS with nothing to set into");
			t = m->st[mk - 1];
			if ((m->sn - from) % 2)
				return fail(m, MT_EXIT_DATA, "SETITEMS of an odd number of items");
		}
		if (t->kind != MT_PK_DICT)
			return fail(m, MT_EXIT_DATA, "SETITEM(S) into something that is not a dict");
		/* the dict keeps pairs in items[2k], items[2k + 1]; n counts pairs (the item
		 * array holds 2n); a key set twice keeps its first place and its last value */
		for (size_t i = from; i + 1 < m->sn; i += 2) {
			int j;
			for (j = 0; j < t->n; j++) {
				struct mt_pk *k = t->items[2 * j], *x = m->st[i];
				if (k->kind == x->kind && ((k->kind == MT_PK_STR && !strcmp(k->s, x->s)) ||
							   (k->kind == MT_PK_INT && k->i == x->i)))
					break;
			}
			if (j < t->n) {
				t->items[2 * j + 1] = m->st[i + 1];
				deepen(t, m->st[i + 1]);
				continue;
			}
			{
				int n = t->n;
				t->n = 2 * n; /* push_item appends at items[n] */
				if (push_item(t, m->st[i]) || push_item(t, m->st[i + 1]))
					return OOM();
				t->n = n + 1;
			}
		}
		m->sn = op == 's' ? m->sn - 2 : (size_t)mk;
		return check_depth(m, t);
	}
	case 'c': { /* GLOBAL */
		const char *mod, *name;
		size_t mn, nn;
		if (read_line(m, &mod, &mn) || read_line(m, &name, &nn))
			return -1;
		return make_global(m, mod, mn, name, nn);
	}
	case 0x93: { /* STACK_GLOBAL */
		struct mt_pk *name = pop(m), *mod;
		if (!name || !(mod = pop(m)))
			return -1;
		if (name->kind != MT_PK_STR || mod->kind != MT_PK_STR)
			return fail(m, MT_EXIT_DATA, "STACK_GLOBAL of something other than two strings");
		return make_global(m, mod->s, mod->len, name->s, name->len);
	}
	case 'R':
		return op_reduce(m);
	case 0x81: { /* NEWOBJ */
		struct mt_pk *args = pop(m), *cls;
		enum mt_pk_dtype d;
		if (!args || !(cls = pop(m)))
			return -1;
		if (cls->kind != MT_PK_GLOBAL || args->kind != MT_PK_TUPLE)
			return fail(m, MT_EXIT_DATA, "NEWOBJ of something that is not a class");
		if (role_of(cls->s, &d) == R_ODICT) {
			if (!(v = node(m->a, MT_PK_DICT, m->op_at)))
				return OOM();
			v->s = cls->s;
			return push(m, v);
		}
		if (role_of(cls->s, &d) != R_OBJECT)
			return fail(m, MT_EXIT_DATA, "class '%s' cannot be instantiated (NEWOBJ): refused", cls->s);
		if (!(v = node(m->a, MT_PK_OBJECT, m->op_at)))
			return OOM();
		v->s = cls->s;
		v->args = args;
		deepen(v, args);
		return push(m, v);
	}
	case 'b':
		return op_build(m);
	case 'Q':
		return op_persid(m);
	case 'h':
		if (need(m, 1))
			return -1;
		return memo_get(m, m->p[m->pos++]);
	case 'j':
		if (need(m, 4))
			return -1;
		m->pos += 4;
		return memo_get(m, u32(m->p + m->pos - 4));
	case 'q':
		if (need(m, 1))
			return -1;
		return memo_put(m, m->p[m->pos++]);
	case 'r':
		if (need(m, 4))
			return -1;
		m->pos += 4;
		return memo_put(m, u32(m->p + m->pos - 4));
	case 0x94: /* MEMOIZE */
		return memo_put(m, m->mcount);
	default:
		if (op >= 32 && op < 127)
			return fail(m, MT_EXIT_DATA, "pickle opcode 0x%02x ('%c') is not one torch.save writes: refused", op, op);
		return fail(m, MT_EXIT_DATA, "pickle opcode 0x%02x is not one torch.save writes: refused", op);
	}
}

int mt_pk_parse(const unsigned char *data, size_t len, const char *where, struct mt_pk_arena **arena,
		struct mt_pk **root, struct mt_err *err)
{
	struct vm m;
	int done = 0, rc = 0;

	memset(&m, 0, sizeof(m));
	m.p = data;
	m.len = len;
	m.where = where;
	m.err = err;
	m.a = calloc(1, sizeof(*m.a));
	*arena = m.a;
	*root = NULL;
	if (!m.a)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	while (!done && rc == 0)
		rc = step(&m, &done);
	if (rc == 0) {
		if (m.sn != 1 || m.st[0]->kind == MT_PK_MARK)
			rc = fail(&m, MT_EXIT_DATA, "STOP with %zu values on the stack: the pickle is corrupt", m.sn);
		else
			*root = m.st[0];
	}
	free(m.st);
	free(m.memo);
	return rc;
}

struct mt_pk *mt_pk_get(const struct mt_pk *d, const char *key)
{
	if (!d || d->kind != MT_PK_DICT)
		return NULL;
	for (int i = 0; i < d->n; i++)
		if (d->items[2 * i]->kind == MT_PK_STR && !strcmp(d->items[2 * i]->s, key))
			return d->items[2 * i + 1];
	return NULL;
}

struct mt_pk *mt_pk_get_int(const struct mt_pk *d, int64_t key)
{
	if (!d || d->kind != MT_PK_DICT)
		return NULL;
	for (int i = 0; i < d->n; i++)
		if (d->items[2 * i]->kind == MT_PK_INT && d->items[2 * i]->i == key)
			return d->items[2 * i + 1];
	return NULL;
}

struct mt_pk *mt_pk_attr(const struct mt_pk *o, const char *name)
{
	if (!o || o->kind != MT_PK_OBJECT || !o->state)
		return NULL;
	return mt_pk_get(o->state, name);
}

int mt_pk_as_int(const struct mt_pk *v, int64_t *out)
{
	if (!v)
		return -1;
	if (v->kind == MT_PK_INT || v->kind == MT_PK_BOOL) {
		*out = v->i;
		return 0;
	}
	if (v->kind == MT_PK_FLOAT && v->f == (double)(int64_t)v->f) {
		*out = (int64_t)v->f;
		return 0;
	}
	return -1;
}

int mt_pk_as_double(const struct mt_pk *v, double *out)
{
	if (!v)
		return -1;
	if (v->kind == MT_PK_INT || v->kind == MT_PK_BOOL) {
		*out = (double)v->i;
		return 0;
	}
	if (v->kind == MT_PK_FLOAT) {
		*out = v->f;
		return 0;
	}
	return -1;
}

int64_t mt_pk_numel(const struct mt_pk *t)
{
	int64_t n = 1;

	for (int i = 0; i < t->ndim; i++)
		n *= t->size[i];
	return n;
}

/* ---- writing ---- */

static void wb(struct mt_pkw *w, const void *p, size_t n)
{
	if (w->oom)
		return;
	if (w->cap - w->n < n) {
		size_t cap = w->cap ? w->cap : 4096;
		unsigned char *x;
		while (cap - w->n < n)
			cap *= 2;
		x = realloc(w->b, cap);
		if (!x) {
			w->oom = 1;
			return;
		}
		w->b = x;
		w->cap = cap;
	}
	memcpy(w->b + w->n, p, n);
	w->n += n;
}

static void wop(struct mt_pkw *w, unsigned char op) { wb(w, &op, 1); }

void mt_pkw_init(struct mt_pkw *w)
{
	memset(w, 0, sizeof(*w));
	wb(w, "\x80\x02", 2);
}

void mt_pkw_free(struct mt_pkw *w)
{
	free(w->b);
	memset(w, 0, sizeof(*w));
}

void mt_pkw_stop(struct mt_pkw *w) { wop(w, '.'); }
void mt_pkw_none(struct mt_pkw *w) { wop(w, 'N'); }
void mt_pkw_bool(struct mt_pkw *w, int v) { wop(w, v ? 0x88 : 0x89); }
void mt_pkw_mark(struct mt_pkw *w) { wop(w, '('); }
void mt_pkw_tuple(struct mt_pkw *w) { wop(w, 't'); }
void mt_pkw_empty_tuple(struct mt_pkw *w) { wop(w, ')'); }
void mt_pkw_list_begin(struct mt_pkw *w) { wb(w, "](", 2); }
void mt_pkw_list_end(struct mt_pkw *w) { wop(w, 'e'); }
void mt_pkw_dict_begin(struct mt_pkw *w) { wb(w, "}(", 2); }
void mt_pkw_dict_end(struct mt_pkw *w) { wop(w, 'u'); }

void mt_pkw_int(struct mt_pkw *w, int64_t v)
{
	unsigned char b[10];

	if (v >= 0 && v < 256) {
		b[0] = 'K';
		b[1] = (unsigned char)v;
		wb(w, b, 2);
	} else if (v >= 0 && v < 65536) {
		b[0] = 'M';
		b[1] = (unsigned char)v;
		b[2] = (unsigned char)(v >> 8);
		wb(w, b, 3);
	} else if (v >= INT32_MIN && v <= INT32_MAX) {
		uint32_t u = (uint32_t)(int32_t)v;
		b[0] = 'J';
		for (int i = 0; i < 4; i++)
			b[1 + i] = (unsigned char)(u >> (8 * i));
		wb(w, b, 5);
	} else {
		/* LONG1: the shortest little-endian two's complement */
		uint64_t u = (uint64_t)v;
		int n = 8;
		while (n > 1) {
			unsigned char hi = (unsigned char)(u >> (8 * (n - 1))), next = (unsigned char)(u >> (8 * (n - 2)));
			if ((hi == 0 && !(next & 0x80)) || (hi == 0xFF && (next & 0x80)))
				n--;
			else
				break;
		}
		b[0] = 0x8a;
		b[1] = (unsigned char)n;
		for (int i = 0; i < n; i++)
			b[2 + i] = (unsigned char)(u >> (8 * i));
		wb(w, b, 2 + (size_t)n);
	}
}

void mt_pkw_float(struct mt_pkw *w, double v)
{
	unsigned char b[9];
	uint64_t x;

	memcpy(&x, &v, 8);
	b[0] = 'G';
	for (int i = 0; i < 8; i++)
		b[1 + i] = (unsigned char)(x >> (8 * (7 - i)));
	wb(w, b, 9);
}

void mt_pkw_str(struct mt_pkw *w, const char *s)
{
	unsigned char b[5];
	size_t n = strlen(s);

	b[0] = 'X';
	for (int i = 0; i < 4; i++)
		b[1 + i] = (unsigned char)(n >> (8 * i));
	wb(w, b, 5);
	wb(w, s, n);
}

void mt_pkw_global(struct mt_pkw *w, const char *module, const char *name)
{
	wop(w, 'c');
	wb(w, module, strlen(module));
	wop(w, '\n');
	wb(w, name, strlen(name));
	wop(w, '\n');
}

void mt_pkw_odict_begin(struct mt_pkw *w)
{
	mt_pkw_global(w, "collections", "OrderedDict");
	wb(w, ")R(", 3);
}

void mt_pkw_namespace_begin(struct mt_pkw *w)
{
	mt_pkw_global(w, "argparse", "Namespace");
	wb(w, ")\x81}(", 4);
}

void mt_pkw_namespace_end(struct mt_pkw *w) { wb(w, "ub", 2); }

void mt_pkw_dtype(struct mt_pkw *w, enum mt_pk_dtype d)
{
	mt_pkw_global(w, "torch", dtypes[d].name);
}

void mt_pkw_tensor(struct mt_pkw *w, enum mt_pk_dtype d, const char *key, int ndim, const int64_t *shape)
{
	int64_t numel = 1, stride = 1, st[MT_PK_MAX_DIMS];

	for (int i = ndim - 1; i >= 0; i--) {
		st[i] = stride;
		stride *= shape[i];
	}
	for (int i = 0; i < ndim; i++)
		numel *= shape[i];
	mt_pkw_global(w, "torch._utils", "_rebuild_tensor_v2");
	mt_pkw_mark(w);
	/* the persistent id of the storage */
	mt_pkw_mark(w);
	mt_pkw_str(w, "storage");
	mt_pkw_global(w, "torch", dtypes[d].storage);
	mt_pkw_str(w, key);
	mt_pkw_str(w, "cpu");
	mt_pkw_int(w, numel);
	mt_pkw_tuple(w);
	wop(w, 'Q');
	mt_pkw_int(w, 0);
	if (ndim == 0) {
		mt_pkw_empty_tuple(w);
		mt_pkw_empty_tuple(w);
	} else {
		mt_pkw_mark(w);
		for (int i = 0; i < ndim; i++)
			mt_pkw_int(w, shape[i]);
		mt_pkw_tuple(w);
		mt_pkw_mark(w);
		for (int i = 0; i < ndim; i++)
			mt_pkw_int(w, st[i]);
		mt_pkw_tuple(w);
	}
	mt_pkw_bool(w, 0);
	mt_pkw_global(w, "collections", "OrderedDict");
	wb(w, ")R", 2);
	mt_pkw_tuple(w);
	wop(w, 'R');
}

/* ---- writing: the opcodes of pickled objects (DCP's .metadata) ---- */

void mt_pkw_reduce(struct mt_pkw *w) { wop(w, 'R'); }
void mt_pkw_newobj(struct mt_pkw *w) { wb(w, ")\x81", 2); }
void mt_pkw_build(struct mt_pkw *w) { wop(w, 'b'); }
