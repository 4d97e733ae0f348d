#!/usr/bin/python3
"""Megatron-LM's own legacy checkpoints (shared/fixtures/megatron-core_v0.12.3) for mt's tests.

Reads torch.save files with zipfile and a restricted pickle.Unpickler (no torch: tensors
become numpy arrays of their raw elements, bf16 as uint16), mt's HDF5 checkpoints with h5py,
and the fixtures' ground truth (source.npz) with numpy. The mapping from Megatron's legacy
names to mt's is written here, from the fixtures' names, not taken from mt.

  keys [--values] FILE
      Every entry of a model_optim_rng.pt's `model`: its nested path (with each dict's
      type), the tensor's dtype and shape (and with --values a SHA-1 of its elements): two
      files with the same lines hold the same state dict.
  top FILE
      The saved dict's top-level keys, iteration and checkpoint_version.
  check MTCKPT SOURCE_NPZ --style gpt2|llama [--tp T --pp P]
      mt's checkpoint holds source.npz's logical tensors bit for bit under mt's names,
      iteration 100 and the model's sizes; with --tp/--pp its per-rank part files hold each
      rank's Megatron slice of them.
  same-source MTCKPT_A MTCKPT_B
      Two mt checkpoints hold the same model tensors, bit for bit.
  all-globals SRCDIR OUTDIR [--foreign]
      SRCDIR (a fixture at TP1PP1) again, its model_optim_rng.pt re-pickled (protocol 2,
      Python's own pickler, as torch.save) with every global of megatron-dist-ckpt.md 1.3
      added where Megatron puts it: enums (by name as Python 3.11 on pickles them, ModelType
      by value as older Pythons do), the rerun state machine's enums and NamedTuples, numpy's
      RNG state, a torch Generator on a device, BytesIO extra state, tensors with attributes
      and parameters in an optimizer, OptimizerConfig, PosixPath, SimpleNamespace, signals,
      sets, dtypes. The GLOBALs written are printed.
      --foreign adds a Transformer Engine FP8 tensor class to args.
  hostile OUTDIR deep-dict|deep-list|cycle|version [--depth N] [--ckpt-version V|none]
      A Megatron checkpoint directory (tracker, iter_0000100/mp_rank_00/model_optim_rng.pt)
      whose `model` is a dict nested N deep, a list nested N deep, a dict holding itself, or
      empty (version: checkpoint_version V, or none); args from the gpt2 fixture's sizes.
"""
import argparse
import collections
import hashlib
import io
import json
import os
import pickle
import struct
import sys
import zipfile

import numpy as np

STORAGE = {"FloatStorage": np.float32, "BFloat16Storage": np.uint16, "HalfStorage": np.float16,
           "DoubleStorage": np.float64, "LongStorage": np.int64, "IntStorage": np.int32, "ByteStorage": np.uint8,
           "BoolStorage": np.bool_}
DTNAME = {"FloatStorage": "float32", "BFloat16Storage": "bfloat16", "HalfStorage": "float16",
          "DoubleStorage": "float64", "LongStorage": "int64", "IntStorage": "int32", "ByteStorage": "uint8",
          "BoolStorage": "bool"}


class Opaque:
    def __init__(self, *a, **k):
        self.args = a

    def __setstate__(self, st):
        self.state = st


class Tensor:
    def __init__(self, dtype, array):
        self.dtype, self.array = dtype, array


def load(path):
    """The object saved in a torch.save ZIP, tensors as Tensor (raw elements)."""
    z = zipfile.ZipFile(path)
    names = z.namelist()
    top = names[0].split("/")[0]
    storages = {}

    class U(pickle.Unpickler):
        def find_class(self, mod, name):
            if (mod, name) == ("collections", "OrderedDict"):
                return collections.OrderedDict
            if (mod, name) == ("torch._utils", "_rebuild_tensor_v2"):
                def rebuild(st, off, size, stride, *rest):
                    dt, arr = st
                    it = arr.itemsize
                    a = np.lib.stride_tricks.as_strided(arr[off:], shape=size, strides=[s * it for s in stride])
                    return Tensor(dt, np.array(a))
                return rebuild
            if (mod, name) == ("argparse", "Namespace"):
                return argparse.Namespace
            if name == "getattr":
                return lambda cls, n: "%s.%s" % (cls.__name__, n)
            if mod == "torch" and name in STORAGE:
                return name
            if mod == "torch":
                return "torch." + name
            return type(name, (Opaque,), {})

        def persistent_load(self, pid):
            _, cls, key, loc, numel = pid
            if key not in storages:
                raw = z.read("%s/data/%s" % (top, key))
                storages[key] = (DTNAME[cls], np.frombuffer(raw, dtype=STORAGE[cls])[:numel])
            return storages[key]

    return U(io.BytesIO(z.read(top + "/data.pkl"))).load()


def walk(d, path):
    kind = "OrderedDict" if isinstance(d, collections.OrderedDict) else "dict"
    for k, v in d.items():
        p = "%s{%s}.%s" % (path, kind, k)
        if isinstance(v, dict):
            yield from walk(v, p)
        else:
            yield p, v


def cmd_keys(a):
    obj = load(a.file)
    for p, v in walk(obj["model"], "model"):
        if isinstance(v, Tensor):
            line = "%s %s %s" % (p, v.dtype, list(v.array.shape))
            if a.values:
                line += " " + hashlib.sha1(np.ascontiguousarray(v.array).tobytes()).hexdigest()
        else:
            line = "%s %r" % (p, v)
        print(line)


def cmd_top(a):
    obj = load(a.file)
    print(" ".join(obj), obj.get("iteration"), obj.get("checkpoint_version"))


# source.npz's legacy names -> mt's (megatron-core's) names
LAYER = {"input_norm": "input_layernorm", "self_attention.query_key_value": "self_attention.linear_qkv",
         "self_attention.dense": "self_attention.linear_proj", "post_attention_norm": "pre_mlp_layernorm",
         "mlp.dense_h_to_4h": "mlp.linear_fc1", "mlp.dense_4h_to_h": "mlp.linear_fc2"}


def mt_name(n):
    assert n.startswith("language_model."), n
    n = n[len("language_model."):]
    if n.startswith("embedding."):
        return n
    if n == "output_layer.weight":
        return n
    assert n.startswith("encoder."), n
    n = n[len("encoder."):]
    if n.startswith("final_norm."):
        return "decoder.final_layernorm." + n[len("final_norm."):]
    _, i, rest = n.split(".", 2)
    mod, wb = rest.rsplit(".", 1)
    return "decoder.layers.%s.%s.%s" % (i, LAYER[mod], wb)


def h5tensors(g, pre=""):
    import h5py
    out = {}
    for k, v in g.items():
        out.update(h5tensors(v, pre + k + "/") if isinstance(v, h5py.Group) else {pre + k: v[()]})
    return out


def bits(x):
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def rank_slice(name, x, t, T, swiglu):
    """Rank t's part of logical tensor x (Megatron's split of that parameter)."""
    col = ("linear_qkv." in name or "linear_fc1." in name or name.startswith("embedding.word_embeddings")
           or name.startswith("output_layer"))
    row = name.endswith("linear_proj.weight") or name.endswith("linear_fc2.weight")
    if col and swiglu and "linear_fc1." in name:
        h = x.shape[0] // 2
        n = h // T
        return np.concatenate([x[t * n:(t + 1) * n], x[h + t * n:h + (t + 1) * n]])
    if col:
        n = x.shape[0] // T
        return x[t * n:(t + 1) * n]
    if row:
        n = x.shape[1] // T
        return x[:, t * n:(t + 1) * n]
    return x


STYLE = {
    "gpt2": {"num-layers": 4, "hidden-size": 64, "num-attention-heads": 4, "num-query-groups": 4,
             "ffn-hidden-size": 256, "normalization": "LayerNorm", "position-embedding-type": "learned_absolute",
             "swiglu": False, "add-bias-linear": True, "untie-embeddings-and-output-weights": False},
    "llama": {"num-layers": 4, "hidden-size": 64, "num-attention-heads": 4, "num-query-groups": 2,
              "ffn-hidden-size": 192, "normalization": "RMSNorm", "position-embedding-type": "rope",
              "swiglu": True, "add-bias-linear": False, "untie-embeddings-and-output-weights": True},
}


def cmd_check(a):
    import h5py
    src = np.load(a.source)
    idx = os.path.join(a.ckpt, "iter_0000100", "model.h5")
    f = h5py.File(idx, "r")
    assert int(f.attrs["iteration"]) == 100, f.attrs["iteration"]
    assert open(os.path.join(a.ckpt, "latest")).read().strip() == "100"
    cfg = json.loads(f.attrs["config"])
    want = dict(STYLE[a.style], **{"seq-length": 32, "max-position-embeddings": 32, "padded-vocab-size": 1024,
                                   "vocab-size": 1001, "kv-channels": 16, "make-vocab-size-divisible-by": 128})
    for k, v in want.items():
        assert cfg[k] == v, "config %s: %r, want %r" % (k, cfg[k], v)
    model = h5tensors(f["model"])
    names = {mt_name(k): k for k in src.files}
    assert sorted(model) == sorted(names), set(model) ^ set(names)
    for k, s in names.items():
        x = src[s]
        assert x.dtype == np.float32 and not (bits(x) & 0xFFFF).any(), "%s: source.npz is not bf16 values" % s
        y = model[k]
        assert y.shape == x.shape, (k, y.shape, x.shape)
        assert np.array_equal(bits(y), bits(x)), "%s (%s): differs from source.npz" % (k, s)
    n = len(names)
    if a.tp:
        parts = sorted(p for p in os.listdir(os.path.join(a.ckpt, "iter_0000100")) if p.startswith("model-"))
        assert len(parts) == a.tp * a.pp, parts
        seen = collections.defaultdict(set)
        for p in parts:
            g = h5py.File(os.path.join(a.ckpt, "iter_0000100", p), "r")
            T, t, P = int(g.attrs["tp"]), int(g.attrs["tp_rank"]), int(g.attrs["pp"])
            assert (T, P) == (a.tp, a.pp), (p, T, P)
            for k, y in h5tensors(g["model"]).items():
                x = src[names[k]]
                want_x = rank_slice(k, x, t, T, STYLE[a.style]["swiglu"])
                assert y.shape == want_x.shape, (p, k, y.shape, want_x.shape)
                assert np.array_equal(bits(y), bits(want_x)), "%s %s: not rank %d's slice" % (p, k, t)
                seen[t].add(k)
        # split tensors in every rank's parts; replicated ones in rank 0's (at least)
        split = {k for k in names if rank_slice(k, src[names[k]], 0, 2, STYLE[a.style]["swiglu"]).shape !=
                 src[names[k]].shape}
        for t in range(a.tp):
            need = set(names) if t == 0 else split
            assert need <= seen[t], ("tp rank %d lacks" % t, need - seen[t])
    print("%d tensors bit-exact to source.npz%s" % (n, ", every rank's slice in place" if a.tp else ""))


def cmd_same(a):
    import h5py
    x = h5tensors(h5py.File(os.path.join(a.a, "iter_0000100", "model.h5"), "r")["model"])
    y = h5tensors(h5py.File(os.path.join(a.b, "iter_0000100", "model.h5"), "r")["model"])
    assert sorted(x) == sorted(y), set(x) ^ set(y)
    for k in x:
        assert np.array_equal(bits(x[k]), bits(y[k])), k
    print("%d tensors identical" % len(x))


# ---- hostile files: pickle opcodes written by hand (protocol 2, as torch.save) ----

def ustr(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def args_pickle():
    """A Namespace of the gpt2 fixture's sizes, as a protocol 2 pickle body (no PROTO, STOP)."""
    ns = argparse.Namespace(num_layers=4, hidden_size=64, num_attention_heads=4, ffn_hidden_size=256,
                            kv_channels=16, seq_length=32, max_position_embeddings=32, padded_vocab_size=1024,
                            make_vocab_size_divisible_by=128, vocab_size=1000, tokenizer_type="NullTokenizer",
                            tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
                            position_embedding_type="learned_absolute", normalization="LayerNorm",
                            add_bias_linear=True, swiglu=False, untie_embeddings_and_output_weights=False)
    b = pickle.dumps(ns, protocol=2)
    assert b[:2] == b"\x80\x02" and b[-1:] == b"."
    return b[2:-1]


def cmd_hostile(a):
    n = a.depth
    body = b"\x80\x02}(" + ustr("args") + args_pickle()
    if a.ckpt_version != "none":
        body += ustr("checkpoint_version") + b"G" + struct.pack(">d", float(a.ckpt_version))
    body += ustr("iteration") + b"Kd" + ustr("model")
    if a.kind == "deep-dict":
        # {'language_model': {'a': {'a': ... {'a': None} ...}}}: EMPTY_DICT MARK key ... SETITEMS
        body += b"}(" + ustr("language_model") + (b"}(" + ustr("a")) * n + b"N" + b"u" * n + b"u"
    elif a.kind == "deep-list":
        body += b"}(" + ustr("language_model") + b"](" * n + b"]" + b"e" * n + b"u"
    elif a.kind == "version":
        body += b"}"
    else:
        # {'language_model': d} with d['a'] = d: memo entry 90000 is the dict itself
        body += b"}(" + ustr("language_model") + b"}r" + struct.pack("<I", 90000) + b"(" + ustr("a")
        body += b"j" + struct.pack("<I", 90000) + b"uu"
    body += b"u."
    d = os.path.join(a.outdir, "iter_0000100", "mp_rank_00")
    os.makedirs(d)
    with open(os.path.join(a.outdir, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("100")
    with zipfile.ZipFile(os.path.join(d, "model_optim_rng.pt"), "w", zipfile.ZIP_STORED) as z:
        z.writestr("model_optim_rng/data.pkl", body)
        z.writestr("model_optim_rng/byteorder", "little")
        z.writestr("model_optim_rng/version", "3\n")


# ---- every global of section 1.3, pickled by Python as torch.save pickles (protocol 2) ----

def fake(modname, name, obj):
    """Put obj in a stand-in module (this process never imports torch or megatron)."""
    import types
    parts = modname.split(".")
    for i in range(1, len(parts) + 1):
        n = ".".join(parts[:i])
        if n not in sys.modules:
            sys.modules[n] = types.ModuleType(n)
        if i > 1:
            setattr(sys.modules[".".join(parts[:i - 1])], parts[i - 1], sys.modules[n])
    try:
        obj.__module__ = modname
        obj.__qualname__ = name
    except (AttributeError, TypeError):
        pass
    setattr(sys.modules[modname], name, obj)
    return obj


def cmd_all_globals(a):
    import dataclasses
    import enum
    import pathlib
    import random
    import shutil
    import signal
    import types
    import typing

    src = os.path.join(a.srcdir, "iter_0000100", "mp_rank_00", "model_optim_rng.pt")
    z = zipfile.ZipFile(src)
    top = z.namelist()[0].split("/")[0]

    def rebuild_tensor_v2(*args):
        pass

    def rebuild_parameter(*args):
        pass

    def rebuild_from_type_v2(*args):
        pass

    fake("torch._utils", "_rebuild_tensor_v2", rebuild_tensor_v2)
    fake("torch._utils", "_rebuild_parameter", rebuild_parameter)
    fake("torch._tensor", "_rebuild_from_type_v2", rebuild_from_type_v2)
    TensorCls = fake("torch", "Tensor", type("Tensor", (), {}))
    storage = {n: fake("torch", n, type(n, (), {})) for n in STORAGE}

    class DType:
        def __init__(self, n):
            self.n = n

        def __reduce__(self):
            return self.n
    DType.__module__ = "torch"
    dt = {n: fake("torch", n, DType(n)) for n in ("float32", "bfloat16", "float16")}

    class Device:
        def __init__(self, *a):
            self.a = a

        def __reduce__(self):
            return (Device, self.a)
    fake("torch", "device", Device)

    class Generator:
        def __reduce__(self):
            return (Generator, (Device("cuda", 0),), (SRef(("storage", "ByteStorage", "900", "cpu", 16)), 1234, 0))
    fake("torch._C", "Generator", Generator)

    class SRef:
        def __init__(self, pid):
            self.pid = pid

    class TRef:
        def __init__(self, pid, off, size, stride, attrs=None, param=False):
            self.pid, self.off, self.size, self.stride, self.attrs, self.param = pid, off, size, stride, attrs, param

        def __reduce__(self):
            args = (SRef(self.pid), self.off, self.size, self.stride, False, collections.OrderedDict())
            if self.attrs is not None:
                return (rebuild_from_type_v2, (rebuild_tensor_v2, TensorCls, args, self.attrs))
            if self.param:
                return (rebuild_parameter, (TRef(self.pid, self.off, self.size, self.stride), True,
                                            collections.OrderedDict()))
            return (rebuild_tensor_v2, args)

    def E(mod, name, members):
        e = enum.Enum(name, members)
        return fake(mod, name, e)
    ModelType = E("megatron.core.enums", "ModelType", [("encoder_or_decoder", 1), ("encoder_and_decoder", 2)])
    # this one by value, as Python up to 3.10 pickles enum members
    ModelType.__reduce_ex__ = lambda self, proto: (self.__class__, (self.value,))
    AttnBackend = E("megatron.core.transformer.enums", "AttnBackend", [("flash", 1), ("auto", 5)])
    CudaGraphModule = E("megatron.core.transformer.enums", "CudaGraphModule", [("attn", "attn"), ("mlp", "mlp")])
    InfScope = E("megatron.core.transformer.enums", "InferenceCudaGraphScope", [("none", "none")])
    CGScope = E("megatron.core.transformer.enums", "CudaGraphScope", [("full", "full")])
    RerunMode = E("megatron.core.rerun_state_machine", "RerunMode", [("DISABLED", "disabled")])
    RerunState = E("megatron.core.rerun_state_machine", "RerunState", [("NOT_RUNNING_YET", 0)])
    RerunDiag = E("megatron.core.rerun_state_machine", "RerunDiagnostic", [("TRANSIENT_ERROR", "transient_error")])
    Caller = fake("megatron.core.rerun_state_machine", "Caller",
                  typing.NamedTuple("Caller", [("message", str), ("rank", int)]))
    Call = fake("megatron.core.rerun_state_machine", "Call",
                typing.NamedTuple("Call", [("caller", object), ("sample_id", object)]))
    OptimizerConfig = fake("megatron.core.optimizer.optimizer_config", "OptimizerConfig",
                           dataclasses.make_dataclass("OptimizerConfig", [("lr", float), ("bf16", bool)]))

    class U(pickle.Unpickler):
        def find_class(self, mod, name):
            if (mod, name) == ("collections", "OrderedDict"):
                return collections.OrderedDict
            if (mod, name) == ("torch._utils", "_rebuild_tensor_v2"):
                return lambda st, off, size, stride, *r: TRef(st, off, size, stride)
            if (mod, name) == ("argparse", "Namespace"):
                return argparse.Namespace
            if name == "getattr":
                return lambda cls, n: cls.__name__ + "." + n
            if mod == "torch" and name in STORAGE:
                return name
            if mod == "torch":
                return dt.get(name, name)
            return type(name, (Opaque,), {})

        def persistent_load(self, pid):
            return pid

    obj = U(io.BytesIO(z.read(top + "/data.pkl"))).load()
    ns = obj["args"]
    ns.model_type = ModelType.encoder_or_decoder
    ns.attention_backend = AttnBackend.auto
    ns.cuda_graph_modules = [CudaGraphModule.attn, CudaGraphModule.mlp]
    ns.inference_cuda_graph_scope = InfScope.none
    ns.cuda_graph_scope_enum = CGScope.full
    ns.exit_signal = signal.SIGTERM
    ns.exit_signal_class = signal.Signals
    ns.params_dtype = dt["bfloat16"]
    ns.main_grads_dtype = ns.main_params_dtype = dt["float32"]
    ns.save = pathlib.PosixPath("/tmp/megatron-save")
    ns.extra = types.SimpleNamespace(x=1)
    ns.ranks = {0, 1}
    ns.optimizer_config = OptimizerConfig(lr=1e-4, bf16=True)
    if a.foreign:
        ns.fp8 = fake("transformer_engine.pytorch.float8_tensor", "Float8Tensor", type("Float8Tensor", (), {}))
    enc = obj["model"]["language_model"]["encoder"]
    enc["layers.0.self_attention.query_key_value._extra_state"] = io.BytesIO(b"\x00\x01te-extra")
    w = enc["layers.0.input_norm.weight"]
    obj["optimizer"] = {"optimizer": {"state": {}, "param_groups": []},
                        "fp32_from_fp16_params": [[TRef(w.pid, w.off, w.size, w.stride,
                                                        attrs={"tensor_model_parallel": False, "partition_dim": -1}),
                                                   TRef(w.pid, w.off, w.size, w.stride, param=True)]]}
    obj["rerun_state_machine"] = {
        "mode": RerunMode.DISABLED,
        "sharded": {"state": RerunState.NOT_RUNNING_YET, "current_iteration": 100,
                    "error_injector_checkpoint": {"error_injection_rate": 0,
                                                  "error_injection_type": RerunDiag.TRANSIENT_ERROR},
                    "failed_validation_call": Call(Caller("loss is NaN", 3), (1, 2))}}
    random.seed(1)
    np.random.seed(1)
    obj["rng_state"] = [{"random_rng_state": random.getstate(), "np_rng_state": np.random.get_state(),
                         "torch_rng_state": TRef(("storage", "ByteStorage", "900", "cpu", 16), 0, (16,), (1,)),
                         "rng_tracker_states": {"model-parallel-rng": Generator()}}]

    class P(pickle.Pickler):
        def persistent_id(self, o):
            if isinstance(o, SRef):
                kind, cls, key, loc, numel = o.pid
                return (kind, storage[cls], key, loc, numel)
            return None

    buf = io.BytesIO()
    P(buf, protocol=2).dump(obj)
    data = buf.getvalue()
    out = os.path.join(a.outdir, "iter_0000100", "mp_rank_00")
    os.makedirs(out)
    shutil.copy(os.path.join(a.srcdir, "latest_checkpointed_iteration.txt"), a.outdir)
    with zipfile.ZipFile(os.path.join(out, "model_optim_rng.pt"), "w", zipfile.ZIP_STORED) as o:
        for n in z.namelist():
            o.writestr(n, data if n == top + "/data.pkl" else z.read(n))
        o.writestr(top + "/data/900", bytes(range(16)))
    import pickletools
    print("\n".join(sorted({arg for op, arg, _ in pickletools.genops(data) if op.name == "GLOBAL"})))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("keys")
    p.add_argument("--values", action="store_true")
    p.add_argument("file")
    p = sub.add_parser("top")
    p.add_argument("file")
    p = sub.add_parser("check")
    p.add_argument("ckpt")
    p.add_argument("source")
    p.add_argument("--style", required=True, choices=sorted(STYLE))
    p.add_argument("--tp", type=int, default=0)
    p.add_argument("--pp", type=int, default=0)
    p = sub.add_parser("same-source")
    p.add_argument("a")
    p.add_argument("b")
    p = sub.add_parser("all-globals")
    p.add_argument("srcdir")
    p.add_argument("outdir")
    p.add_argument("--foreign", action="store_true")
    p = sub.add_parser("hostile")
    p.add_argument("outdir")
    p.add_argument("kind", choices=["deep-dict", "deep-list", "cycle", "version"])
    p.add_argument("--depth", type=int, default=100000)
    p.add_argument("--ckpt-version", default="3.0", help="checkpoint_version, or none to leave it out")
    a = ap.parse_args()
    {"keys": cmd_keys, "top": cmd_top, "check": cmd_check, "same-source": cmd_same, "hostile": cmd_hostile,
     "all-globals": cmd_all_globals}[a.cmd](a)


if __name__ == "__main__":
    main()
