#!/usr/bin/env python3
"""Check a Megatron-LM `--ckpt-format torch_dist` checkpoint (iter_N/ with .metadata,
__<rank>_<n>.distcp, metadata.json) as mt-ckpt-reshard export writes it, without
torch.distributed.checkpoint (the distribution's torch 1.13 lacks it): the DCP classes are
stood in by plain classes registered under their real module names, and the unpickler
accepts only the globals PyTorch's own .metadata holds.

  torchdist_check.py check OUT CKPT --tp T --pp P [--dtype fp32|bf16|fp16]
      OUT's .metadata structure (classes, fields, version "1.0.0"), every key and chunk
      against the layout Megatron-core gives a GPT at TP x PP (derived here from the key
      names: layers stacked on a leading axis, TP axis 0 of QKV/fc1/embedding/output layer,
      axis 1 of linear_proj/fc2, SwiGLU's fc1 in two halves, replicated tensors and
      _extra_state by tensor rank 0, the common state by rank 0), every chunk read with
      zipfile and torch.load at its offset and compared with the mt checkpoint CKPT's own
      tensors (h5py), converted to the dtype as torch converts; chunks cover each tensor once.
  torchdist_check.py layout A B
      the model keys of two checkpoints (optimizer, RNG and common entries left out) with
      their global sizes and each rank's chunks, equal; and the same DCP globals.
"""
import argparse
import glob
import io
import os
import pickle
import re
import sys
import types
import zipfile

import numpy as np

DCP_MD = "torch.distributed.checkpoint.metadata"
DCP_FS = "torch.distributed.checkpoint.filesystem"


class _Obj:
    """A stand-in dataclass: NEWOBJ then BUILD with a dict (or a tuple, kept whole)."""

    def __setstate__(self, st):
        if isinstance(st, dict):
            self.__dict__.update(st)
        else:
            self.state = st


def _cls(name):
    return type(name, (_Obj,), {})


MD_CLASSES = {n: _cls(n) for n in ("Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata",
                                   "MetadataIndex", "StorageMeta", "TensorProperties")}


class _MemFormat:
    def __init__(self, v):
        self.value = v


MD_CLASSES["_MEM_FORMAT_ENCODING"] = _MemFormat
FS_CLASSES = {"_StorageInfo": _cls("_StorageInfo")}

for modname, classes in ((DCP_MD, MD_CLASSES), (DCP_FS, FS_CLASSES)):
    parts = modname.split(".")
    for i in range(len(parts) - 2, len(parts)):
        sub = ".".join(parts[:i + 1])
        if sub not in sys.modules:
            sys.modules[sub] = types.ModuleType(sub)
    for k, v in classes.items():
        setattr(sys.modules[modname], k, v)

ALLOWED = {(DCP_MD, n) for n in MD_CLASSES} | {(DCP_FS, "_StorageInfo"), ("torch", "Size"),
                                                ("torch.serialization", "_get_layout"), ("pathlib", "PosixPath")}
DTYPES = ("float32", "bfloat16", "float16")


class Unpickler(pickle.Unpickler):
    def __init__(self, f):
        super().__init__(f)
        self.seen = set()

    def find_class(self, module, name):
        if (module, name) not in ALLOWED and not (module == "torch" and name in DTYPES):
            raise pickle.UnpicklingError("global %s.%s is not one of DCP's" % (module, name))
        self.seen.add((module, name))
        if module.startswith("torch.distributed"):
            return getattr(sys.modules[module], name)
        if (module, name) == ("torch.serialization", "_get_layout"):
            return lambda s: ("layout", s)
        if (module, name) == ("torch", "Size"):
            return tuple
        if module == "torch":
            return ("dtype", name)
        return super().find_class(module, name)


def fail(msg):
    sys.exit("torchdist_check: " + msg)


def load_md(d):
    with open(os.path.join(d, ".metadata"), "rb") as f:
        u = Unpickler(f)
        md = u.load()
    if type(md).__name__ != "Metadata":
        fail(".metadata holds a %s" % type(md).__name__)
    for field in ("state_dict_metadata", "planner_data", "storage_data", "storage_meta", "version"):
        if field not in md.__dict__:
            fail("Metadata lacks %s" % field)
    return md, u.seen


def iterdir(out):
    it = open(os.path.join(out, "latest_checkpointed_iteration.txt")).read()
    if not re.fullmatch(r"[0-9]+", it):
        fail("tracker holds %r" % it)
    return os.path.join(out, "iter_%07d" % int(it))


def rank_of(path):
    m = re.fullmatch(r"__([0-9]+)_([0-9]+)\.distcp", path)
    if not m:
        fail("storage file %r" % path)
    return int(m.group(1))


def chunks_by_key(md):
    """key -> sorted [(rank, offsets, sizes)] from storage_data"""
    out = {}
    for idx, si in md.storage_data.items():
        sz = None
        ent = md.state_dict_metadata[idx.fqn]
        if type(ent).__name__ == "TensorStorageMetadata":
            ch = [c for c in ent.chunks if tuple(c.offsets) == tuple(idx.offset)]
            if len(ch) != 1:
                fail("%s: offset %s matches %d chunks" % (idx.fqn, idx.offset, len(ch)))
            if ent.chunks[idx.index] is not ch[0]:
                fail("%s: index %d is not the chunk at %s" % (idx.fqn, idx.index, idx.offset))
            sz = tuple(ch[0].sizes)
            out.setdefault(idx.fqn, []).append((rank_of(si.relative_path), tuple(idx.offset), sz))
        else:
            if getattr(idx, "offset", None) is not None:
                fail("%s: a byte entry with an offset" % idx.fqn)
            out.setdefault(idx.fqn, []).append((rank_of(si.relative_path), None, None))
    return {k: sorted(v, key=str) for k, v in out.items()}


def model_key(k):
    return not (k.startswith("optimizer.") or k.startswith("rng_state") or k.startswith("common_state")
                or k.startswith("rerun_state_machine"))


def cmd_layout(a, b):
    da, db = iterdir(a), iterdir(b)
    ma, ga = load_md(da)
    mb, gb = load_md(db)
    # the classes; not the dtypes (a checkpoint with fp32 optimizer state names torch.float32 too)
    # nor StorageMeta's checkpoint_id (a PosixPath in PyTorch's, None in mt's)
    ga = {g for g in ga if g[0] != "torch" or g[1] == "Size"} - {("pathlib", "PosixPath")}
    gb = {g for g in gb if g[0] != "torch" or g[1] == "Size"} - {("pathlib", "PosixPath")}
    if ga != gb:
        fail("globals differ: %s" % sorted(ga ^ gb))
    ka = {k: v for k, v in chunks_by_key(ma).items() if model_key(k)}
    kb = {k: v for k, v in chunks_by_key(mb).items() if model_key(k)}
    if set(ka) != set(kb):
        fail("keys differ: only in %s: %s; only in %s: %s" % (a, sorted(set(ka) - set(kb)), b, sorted(set(kb) - set(ka))))
    for k in ka:
        sa, sb = ma.state_dict_metadata[k], mb.state_dict_metadata[k]
        if type(sa).__name__ != type(sb).__name__:
            fail("%s: %s against %s" % (k, type(sa).__name__, type(sb).__name__))
        if hasattr(sa, "size") and tuple(sa.size) != tuple(sb.size):
            fail("%s: size %s against %s" % (k, tuple(sa.size), tuple(sb.size)))
        if ka[k] != kb[k]:
            fail("%s: chunks %s against %s" % (k, ka[k], kb[k]))
    print("%d model keys, %d chunks alike" % (len(ka), sum(len(v) for v in ka.values())))


# ---- check against the mt checkpoint ----

TE_NAMES = {"self_attention.linear_qkv.layer_norm_weight": "input_layernorm.weight",
            "self_attention.linear_qkv.layer_norm_bias": "input_layernorm.bias",
            "mlp.linear_fc1.layer_norm_weight": "pre_mlp_layernorm.weight",
            "mlp.linear_fc1.layer_norm_bias": "pre_mlp_layernorm.bias"}
AXIS0 = ("self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias", "mlp.linear_fc1.weight",
         "mlp.linear_fc1.bias", "embedding.word_embeddings.weight", "output_layer.weight")
AXIS1 = ("self_attention.linear_proj.weight", "mlp.linear_fc2.weight")
LINEARS = ("self_attention.linear_qkv", "self_attention.linear_proj", "mlp.linear_fc1", "mlp.linear_fc2")


def expected_chunks(key, gshape, T, P, L, swiglu):
    """[(rank, offsets, sizes)] Megatron-core writes for key of global shape gshape"""
    out = []
    layer = key.startswith("decoder.layers.")
    rest = key[len("decoder.layers."):] if layer else key
    inner = gshape[1:] if layer else gshape
    for p in range(P):
        for t in range(T):
            r = t + T * p
            if layer:
                lays = range(p * L // P, (p + 1) * L // P)
            elif key.startswith("embedding."):
                lays = [None] if p == 0 else []
            else:
                lays = [None] if p == P - 1 else []
            for l in lays:
                pre_o, pre_s = ((l,), (1,)) if layer else ((), ())
                if rest in AXIS0:
                    if swiglu and rest.startswith("mlp.linear_fc1."):
                        n = inner[0] // 2 // T
                        for h in (0, inner[0] // 2):
                            out.append((r, pre_o + (h + t * n,) + (0,) * (len(inner) - 1),
                                        pre_s + (n,) + tuple(inner[1:])))
                    else:
                        n = inner[0] // T
                        out.append((r, pre_o + (t * n,) + (0,) * (len(inner) - 1), pre_s + (n,) + tuple(inner[1:])))
                elif rest in AXIS1:
                    n = inner[1] // T
                    out.append((r, pre_o + (0, t * n), pre_s + (inner[0], n)))
                elif t == 0:
                    out.append((r, pre_o + (0,) * len(inner), pre_s + tuple(inner)))
    return sorted(out, key=str)


def cmd_check(out, ckpt, T, P, dtype):
    import h5py
    import torch
    tdt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    d = iterdir(out)
    names = sorted(os.listdir(d))
    want = sorted([".metadata", "metadata.json"] + ["__%d_0.distcp" % r for r in range(T * P)])
    if names != want:
        fail("%s holds %s, not %s" % (d, names, want))
    md, seen = load_md(d)
    if md.version != "1.0.0":
        fail("version %r" % md.version)
    if type(md.storage_meta).__name__ != "StorageMeta" or not isinstance(md.storage_meta.save_id, str):
        fail("storage_meta %r" % md.storage_meta)
    if set(md.planner_data) != set(md.state_dict_metadata) or any(v != (k,) for k, v in md.planner_data.items()):
        fail("planner_data is not each key's path (key,)")
    files = {r: open(os.path.join(d, "__%d_0.distcp" % r), "rb").read() for r in range(T * P)}

    def payload(si):
        if set(vars(si)) != {"relative_path", "offset", "length"}:
            fail("_StorageInfo fields %s" % sorted(vars(si)))
        b = files[rank_of(si.relative_path)][si.offset:si.offset + si.length]
        if len(b) != si.length or b[:4] != b"PK\x03\x04":
            fail("%s at %d: not a ZIP of %d bytes" % (si.relative_path, si.offset, si.length))
        z = zipfile.ZipFile(io.BytesIO(b))
        if not all(n.startswith("archive/") for n in z.namelist()) or "archive/data.pkl" not in z.namelist():
            fail("%s at %d: members %s" % (si.relative_path, si.offset, z.namelist()))
        return b

    h5 = h5py.File(glob.glob(os.path.join(ckpt, "iter_*", "model.h5"))[0] if os.path.isdir(ckpt) else ckpt, "r")
    mt = {k[len("model/"):]: np.asarray(h5[k]) for k in [n for n in _datasets(h5) if n.startswith("model/")]}
    L = max(int(m.group(1)) for m in (re.match(r"decoder\.layers\.([0-9]+)\.", k) for k in mt) if m) + 1
    swiglu = None
    by_key = chunks_by_key(md)
    common = None
    nchunks = 0
    # every byte entry: its writer and its payload
    for idx, si in md.storage_data.items():
        if type(md.state_dict_metadata[idx.fqn]).__name__ != "BytesStorageMetadata":
            continue
        # Megatron-core's ShardedObject: torch.save([data]) as it is (its save planner does not
        # wrap it again), read back by DCP's torch.load and taken [0] (load_common_state_dict)
        lst = torch.load(io.BytesIO(payload(si)))
        if not isinstance(lst, list) or len(lst) != 1:
            fail("%s: holds %r, not a list of one object" % (idx.fqn, type(lst).__name__))
        obj = lst[0]
        r = rank_of(si.relative_path)
        if idx.fqn == "common_state/shard_0_1":
            if r != 0:
                fail("common state from rank %d" % r)
            common = obj
        else:
            m = re.fullmatch(r"decoder\.layers\.(.+)\._extra_state/shard_([0-9]+)_([0-9]+)", idx.fqn)
            if not m or m.group(1) not in LINEARS or int(m.group(3)) != L or obj is not None:
                fail("byte entry %s holding %r" % (idx.fqn, obj))
            l = int(m.group(2))
            if r != T * (l * P // L):
                fail("%s from rank %d" % (idx.fqn, r))
        nchunks += 1
    nextra = sum(1 for k in md.state_dict_metadata if "._extra_state/" in k)
    if nextra != 4 * L:
        fail("%d _extra_state entries, not %d" % (nextra, 4 * L))
    if common is None:
        fail("no common_state/shard_0_1")
    args = common["args"]
    if (args.tensor_model_parallel_size, args.pipeline_model_parallel_size, args.ckpt_format) != (T, P, "torch_dist"):
        fail("args say TP %s PP %s format %s" % (args.tensor_model_parallel_size, args.pipeline_model_parallel_size,
                                                 args.ckpt_format))
    if common["checkpoint_version"] != 3.0 or args.num_layers != L:
        fail("common state %r" % {k: v for k, v in common.items() if k != "args"})
    swiglu = args.swiglu
    # every tensor: its chunks where Megatron-core puts them, and their values
    seen_model = set()
    for key, ent in md.state_dict_metadata.items():
        if type(ent).__name__ == "BytesStorageMetadata":
            continue
        props = ent.properties.state
        if props[0] != ("dtype", str(tdt)[len("torch."):]) or props[1] != ("layout", "torch.strided") or \
                props[2] is not False or props[3].value != 0 or props[4] is not False:
            fail("%s: properties %r" % (key, props))
        layer = key.startswith("decoder.layers.")
        rest = key[len("decoder.layers."):] if layer else key
        rest = TE_NAMES.get(rest, rest)
        if layer:
            full = np.stack([mt["decoder.layers.%d.%s" % (l, rest)] for l in range(L)])
        elif key == "output_layer.weight" and "output_layer.weight" not in mt:
            fail("output_layer.weight written for a tied model")
        else:
            full = mt[rest]
        seen_model.add(rest if not layer else "layers." + rest)
        gshape = tuple(ent.size)
        vocab = key in ("embedding.word_embeddings.weight", "output_layer.weight")
        if vocab:
            if gshape[0] < full.shape[0] or gshape[0] % T:
                fail("%s: %s rows" % (key, gshape))
            pad = np.repeat(full[args.vocab_size - 1:args.vocab_size], gshape[0] - full.shape[0], axis=0)
            full = np.concatenate([full, pad])
        if tuple(full.shape) != gshape:
            fail("%s: global size %s, mt's %s" % (key, gshape, full.shape))
        exp = expected_chunks(key, gshape, T, P, L, swiglu)
        if by_key[key] != exp:
            fail("%s: chunks %s, Megatron-core's %s" % (key, by_key[key], exp))
        cover = np.zeros(gshape, dtype=np.int32)
        want_t = torch.from_numpy(full).to(tdt)
        for idx, si in md.storage_data.items():
            if idx.fqn != key:
                continue
            ch = ent.chunks[idx.index]
            sl = tuple(slice(o, o + s) for o, s in zip(ch.offsets, ch.sizes))
            x = torch.load(io.BytesIO(payload(si)))
            if x.dtype != tdt or tuple(x.shape) != tuple(ch.sizes) or not x.is_contiguous():
                fail("%s at %s: %s %s" % (key, tuple(ch.offsets), x.dtype, tuple(x.shape)))
            if not torch.equal(x, want_t[sl]):
                fail("%s at %s: values differ from mt's" % (key, tuple(ch.offsets)))
            cover[sl] += 1
            nchunks += 1
        if not (cover == 1).all():
            fail("%s: chunks do not cover it once" % key)
    # every mt tensor written (the tied output layer excepted)
    for k in mt:
        m = re.match(r"decoder\.layers\.[0-9]+\.(.+)", k)
        name = "layers." + m.group(1) if m else k
        if name not in seen_model:
            fail("mt's %s is not in the export" % k)
    if nchunks != len(md.storage_data):
        fail("%d entries checked of %d" % (nchunks, len(md.storage_data)))
    print("%d keys, %d chunks checked" % (len(md.state_dict_metadata), nchunks))


def _datasets(h5):
    out = []
    h5.visititems(lambda n, o: out.append(n) if hasattr(o, "shape") else None)
    return out


def main():
    ap = argparse.ArgumentParser()
    sp = ap.add_subparsers(dest="cmd", required=True)
    c = sp.add_parser("check")
    c.add_argument("out")
    c.add_argument("ckpt")
    c.add_argument("--tp", type=int, default=1)
    c.add_argument("--pp", type=int, default=1)
    c.add_argument("--dtype", default="fp32")
    l = sp.add_parser("layout")
    l.add_argument("a")
    l.add_argument("b")
    a = ap.parse_args()
    if a.cmd == "check":
        cmd_check(a.out, a.ckpt, a.tp, a.pp, a.dtype)
    else:
        cmd_layout(a.a, a.b)


if __name__ == "__main__":
    main()
