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
    p = sub.add_parser("hostile")
    p.add_argument("outdir")
    p.add_argument("kind", choices=["deep-dict", "deep-list", "cycle", "version"])
    p.add_argument("--depth", type=int, default=100000)
    p.add_argument("--ckpt-version", default="3.0", help="checkpoint_version, or none to leave it out")
    a = ap.parse_args()
    {"keys": cmd_keys, "top": cmd_top, "check": cmd_check, "same-source": cmd_same, "hostile": cmd_hostile}[a.cmd](a)


if __name__ == "__main__":
    main()
