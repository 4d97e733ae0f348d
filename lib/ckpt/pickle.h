/* pickle.h: the subset of Python's pickle that torch.save writes, read and written.
 *
 * Reading runs the pickle's opcodes on a stack machine of its own, without executing
 * anything: the result is a tree of inert values. Protocol 2 as torch.save writes it
 * (and the few opcodes of protocols 3 and 4 that a newer Python may emit) is read; any
 * other opcode (the text opcodes of protocol 0, INST, OBJ, EXT*, PERSID) is refused with
 * its byte offset. Globals are looked up in a fixed table, each with the one role it may
 * play; a global outside it is refused by name and offset. The table holds every global of
 * megatron-dist-ckpt.md section 1.3 (what Megatron-LM core_v0.10 to HEAD legacy files can
 * hold) and a few of the same kinds:
 *
 *   collections.OrderedDict                  REDUCE with () or ([pairs]) -> a dict (BUILD of its _metadata kept)
 *   torch._utils._rebuild_tensor_v2          REDUCE -> a tensor (storage, offset, size, stride)
 *   torch._tensor._rebuild_from_type_v2      REDUCE (_rebuild_tensor_v2, torch.Tensor, args, state) -> a
 *     + torch.Tensor                         tensor, its Python attributes as its state; torch.Tensor is
 *                                            only ever that type argument
 *   torch._utils._rebuild_parameter(_with_state)  REDUCE -> its tensor
 *   torch.FloatStorage, BFloat16Storage...   inside a persistent id ('storage', cls, key, location, numel)
 *   torch.float32, torch.bfloat16...         values (dtypes, as in args.params_dtype)
 *   signal.SIGTERM and kin                   values (args.exit_signal)
 *   enums: megatron.core.enums.ModelType; megatron.core.transformer.enums.AttnBackend,
 *     CudaGraphModule, InferenceCudaGraphScope, CudaGraphScope;
 *     megatron.core.rerun_state_machine.RerunMode, RerunState, RerunDiagnostic; signal.Signals
 *                                            REDUCE (value,) -> an opaque object (class, (value,))
 *   __builtin__/builtins.getattr             REDUCE (enum class, 'NAME') -> an opaque object
 *                                            ("module.Class.NAME", (class, 'NAME')): enum members as
 *                                            Python pickles them (by value up to 3.10,
 *                                            by name from 3.11); never instantiated
 *   torch.Size                               REDUCE -> a tuple
 *   _codecs.encode                           REDUCE (str, 'latin1') -> bytes (protocol 2's bytes)
 *   argparse.Namespace, types.SimpleNamespace, megatron.core.optimizer.optimizer_config.OptimizerConfig,
 *   megatron.core.rerun_state_machine.Call and Caller (NamedTuples), _io.BytesIO, torch._C.Generator,
 *   torch.device, numpy's _reconstruct, ndarray, dtype, scalar; pathlib.PosixPath and kin;
 *   builtins.set, frozenset (and __builtin__'s), collections.Counter
 *                                            REDUCE/NEWOBJ/BUILD -> an opaque object
 *   torch.distributed.checkpoint's Metadata classes, _StorageInfo, torch.serialization._get_layout,
 *   _io.BytesIO                              the same (a distributed checkpoint's .metadata; a
 *                                            byte entry saved as a BytesIO, its bytes in the state)
 *
 * Nesting is bounded (MT_PK_MAX_DEPTH, struct mt_pk's depth): a deeper pickle is refused
 * with its offset. Memo references can still make cycles, so a walk of the tree stops at a
 * depth of its own.
 *
 * Opaque objects are kept (class name, arguments, state) but never interpreted: the walk
 * covers the whole pickle, and what mt needs (the model's tensors, args' numbers and
 * strings, the optimizer's tensors) is plain values. Values live in an arena freed at once.
 *
 * Writing emits protocol 2 with only opcodes and globals that torch.load(weights_only=True)
 * accepts (torch 2.6's default allow-list plus argparse.Namespace, which Megatron-LM
 * registers as a safe global): see mt_pkw_*. */
#ifndef MT_PICKLE_H
#define MT_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

enum mt_pk_kind {
	MT_PK_NONE, MT_PK_BOOL, MT_PK_INT, MT_PK_FLOAT, MT_PK_STR, MT_PK_BYTES,
	MT_PK_TUPLE, MT_PK_LIST, MT_PK_DICT, MT_PK_GLOBAL, MT_PK_OBJECT, MT_PK_TENSOR, MT_PK_STORAGE,
	MT_PK_MARK  /* internal */
};

/* Storage and tensor element types. */
enum mt_pk_dtype {
	MT_PKD_F32, MT_PKD_F16, MT_PKD_BF16, MT_PKD_F64, MT_PKD_I64, MT_PKD_I32, MT_PKD_I16, MT_PKD_I8, MT_PKD_U8,
	MT_PKD_BOOL, MT_PKD_NTYPES
};
size_t mt_pk_dtype_size(enum mt_pk_dtype d);
const char *mt_pk_dtype_name(enum mt_pk_dtype d);   /* "float32", "bfloat16"... */
const char *mt_pk_storage_class(enum mt_pk_dtype d); /* "FloatStorage"... */

#define MT_PK_MAX_DIMS 8

struct mt_pk {
	enum mt_pk_kind kind;
	uint64_t at;                 /* byte offset of the opcode that made it */
	int64_t i;                   /* BOOL, INT; STORAGE: numel */
	double f;                    /* FLOAT */
	const char *s;               /* STR, BYTES (len bytes, NUL-terminated); GLOBAL: "module.name";
				      * STORAGE: its key; OBJECT: its class name */
	size_t len;
	struct mt_pk **items;        /* TUPLE, LIST: n items; DICT: n pairs, key at 2k, value at 2k + 1 */
	int n, cap;
	struct mt_pk *args, *state;  /* OBJECT: constructor arguments, BUILD state (NULL if none) */
	/* STORAGE: dtype, key (s), location, numel (i); TENSOR: its storage, view */
	enum mt_pk_dtype dtype;
	const char *location;
	struct mt_pk *storage;
	int64_t offset;              /* TENSOR: storage offset, in elements */
	int ndim;
	int64_t size[MT_PK_MAX_DIMS], stride[MT_PK_MAX_DIMS];
	int depth;                   /* nesting: 0 for a leaf, else 1 + its deepest part's (at most MT_PK_MAX_DEPTH) */
};

/* The deepest nesting the reader makes (deeper: refused as it is made). The tree may still
 * hold cycles (a memoized container put inside itself): a walk of it must stop at a depth
 * of its own, e.g. this one. */
#define MT_PK_MAX_DEPTH 100

struct mt_pk_arena;

/* Parse data (len bytes) into *root. where names the pickle in messages
 * ("'x/model_optim_rng.pt' data.pkl"). The arena holds every value; free it with
 * mt_pk_arena_free (also after a failure, when *arena is not NULL). */
int mt_pk_parse(const unsigned char *data, size_t len, const char *where, struct mt_pk_arena **arena,
		struct mt_pk **root, struct mt_err *err);
void mt_pk_arena_free(struct mt_pk_arena *a);

/* Look-ups; NULL when absent or not of that kind. */
struct mt_pk *mt_pk_get(const struct mt_pk *dict, const char *key);         /* string key */
struct mt_pk *mt_pk_get_int(const struct mt_pk *dict, int64_t key);         /* int key */
struct mt_pk *mt_pk_attr(const struct mt_pk *obj, const char *name);        /* an object's attribute (its BUILD dict) */
/* A number as int64 / double (BOOL, INT, FLOAT); 0 on success. */
int mt_pk_as_int(const struct mt_pk *v, int64_t *out);
int mt_pk_as_double(const struct mt_pk *v, double *out);
int64_t mt_pk_numel(const struct mt_pk *t);
/* Number of bytes a storage needs: numel * dtype size. */

/* ---- writing ---- */
struct mt_pkw {
	unsigned char *b;
	size_t n, cap;
	int oom;
};
void mt_pkw_init(struct mt_pkw *w);          /* PROTO 2 */
void mt_pkw_free(struct mt_pkw *w);
void mt_pkw_stop(struct mt_pkw *w);          /* STOP; check w->oom after */
void mt_pkw_none(struct mt_pkw *w);
void mt_pkw_bool(struct mt_pkw *w, int v);
void mt_pkw_int(struct mt_pkw *w, int64_t v);
void mt_pkw_float(struct mt_pkw *w, double v);
void mt_pkw_str(struct mt_pkw *w, const char *s);
void mt_pkw_mark(struct mt_pkw *w);
void mt_pkw_tuple(struct mt_pkw *w);         /* MARK ... TUPLE */
void mt_pkw_empty_tuple(struct mt_pkw *w);
void mt_pkw_list_begin(struct mt_pkw *w);    /* EMPTY_LIST MARK */
void mt_pkw_list_end(struct mt_pkw *w);      /* APPENDS */
void mt_pkw_dict_begin(struct mt_pkw *w);    /* EMPTY_DICT MARK */
void mt_pkw_odict_begin(struct mt_pkw *w);   /* collections.OrderedDict() MARK */
void mt_pkw_dict_end(struct mt_pkw *w);      /* SETITEMS */
void mt_pkw_global(struct mt_pkw *w, const char *module, const char *name);
void mt_pkw_namespace_begin(struct mt_pkw *w); /* argparse.Namespace(), then its __dict__: EMPTY_DICT MARK */
void mt_pkw_namespace_end(struct mt_pkw *w);   /* SETITEMS BUILD */
void mt_pkw_dtype(struct mt_pkw *w, enum mt_pk_dtype d); /* torch.float32... */
/* A contiguous tensor of `shape` over storage `key` (numel elements of dtype d, on
 * location "cpu"): torch._utils._rebuild_tensor_v2(storage, 0, size, stride, False, OrderedDict()). */
void mt_pkw_tensor(struct mt_pkw *w, enum mt_pk_dtype d, const char *key, int ndim, const int64_t *shape);

/* Objects as Python pickles them (protocol 2 opcodes): REDUCE, NEWOBJ of an empty tuple
 * (after the class), BUILD. */
void mt_pkw_reduce(struct mt_pkw *w);
void mt_pkw_newobj(struct mt_pkw *w);
void mt_pkw_build(struct mt_pkw *w);

#endif
