#!/usr/bin/python3
"""Deterministically corrupted checkpoints for tests/hostile-ckpt.bats:

    make-ckpts.py GOOD SHARDED OUT

GOOD is a checkpoint directory of a tiny model (iter_0000004 with the optimizer state),
SHARDED the same checkpoint rewritten as two tensor-parallel parts (mt-ckpt-reshard
--target-tensor-parallel-size 2). Writes OUT/NAME/iter_0000004/... for every case and
OUT/cases.tsv: NAME, KIND, DETAIL, one line each, where KIND says what every tool must do:

  ok        untouched: exit 0 everywhere
  tensor    the bytes of tensor DETAIL changed: the tools that read tensors exit 3 naming
            it and its checksum; inspect (which reads no tensor data) exits 0
  nonfinite tensor DETAIL holds a NaN or an infinity under a valid checksum: exit 3 naming
            it wherever tensors are read; inspect 0
  config    the model config is absurd (state checksum recomputed, or none): exit 3 in
            every tool that builds the model; inspect (which describes, builds nothing) 0
  content   a tensor's shape, dtype or checksum attribute, or the config text, is wrong
            where only a reader of the model looks: as config
  data      anything else that is wrong: exit 3 everywhere
  meta      a bit flip in HDF5 metadata: exit 0 or 3, never a signal or a sanitizer report
            (a flip in a byte no reader looks at changes nothing)

The checksums are computed with libxxhash through ctypes (XXH3-64, as mt stores them);
the structure is written with h5py. Same input, same output: every choice comes from a
fixed seed.
"""
import ctypes
import json
import os
import random
import shutil
import struct
import sys

import h5py
import numpy as np

GOOD, SHARDED, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
IT = "iter_0000004"
rng = random.Random(19)
xx = ctypes.CDLL("libxxhash.so.0")
xx.XXH3_64bits.restype = ctypes.c_uint64
xx.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
cases = []


def xxh3(b):
    return xx.XXH3_64bits(bytes(b), len(b))


def le64(v):
    return struct.pack("<q", v)


def state_hash(f):
    a = f.attrs
    opt = int(f["optimizer"].attrs["step"]) if "optimizer" in f else -1
    b = b"mt-checkpoint-state" + le64(1) + le64(int(a["iteration"])) + le64(int(a["consumed_train_samples"]))
    b += le64(int(a["consumed_valid_samples"])) + le64(opt)
    for k in ("config", "train_args", "scheduler"):
        s = a[k]
        s = s.encode() if isinstance(s, str) else bytes(s)
        b += le64(len(s)) + s
    return xxh3(b)


def new(name, kind, detail="-", src=GOOD):
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(os.path.join(src, IT), os.path.join(d, IT))
    cases.append((name, kind, detail))
    return os.path.join(d, IT)


def model(d):
    return os.path.join(d, "model.h5")


def data_ranges(path):
    """(name, offset, size) of every contiguous dataset's bytes."""
    out = []
    with h5py.File(path, "r") as f:
        def visit(n, o):
            if isinstance(o, h5py.Dataset) and not o.is_virtual and o.id.get_offset() is not None:
                out.append((n, o.id.get_offset(), o.id.get_storage_size()))
        f.visititems(visit)
    return out


def flip(path, off, bit):
    with open(path, "r+b") as fh:
        fh.seek(off)
        b = fh.read(1)
        fh.seek(off)
        fh.write(bytes([b[0] ^ (1 << bit)]))


def set_attrs(path, fix_hash=True, **kw):
    with h5py.File(path, "r+") as f:
        for k, v in kw.items():
            f.attrs[k] = v
        if fix_hash:
            f.attrs.modify("state_xxh3", np.uint64(state_hash(f)))


def set_config(path, fix_hash=True, **kw):
    with h5py.File(path, "r+") as f:
        c = json.loads(f.attrs["config"])
        c.update(kw)
        f.attrs["config"] = json.dumps(c)
        if fix_hash:
            f.attrs.modify("state_xxh3", np.uint64(state_hash(f)))
        else:
            del f.attrs["state_xxh3"]


def put_tensor(path, name, arr):
    """Replace dataset name's values in place, with a valid checksum."""
    with h5py.File(path, "r+") as f:
        d = f[name]
        d[...] = arr
        d.attrs.modify("xxh3", np.uint64(xxh3(np.ascontiguousarray(arr, dtype="<f4").tobytes())))


def main():
    os.makedirs(OUT, exist_ok=True)
    good = model(os.path.join(GOOD, IT))
    ranges = data_ranges(good)
    tensors = [r for r in ranges if r[0] != "rng"]
    size = os.path.getsize(good)

    new("good", "ok")
    new("good-sharded", "ok", src=SHARDED)

    # truncations: 24 lengths from the first byte to one byte short
    for i, frac in enumerate([0, 0.001, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99]):
        d = new("trunc-%02d" % i, "data")
        os.truncate(model(d), int(size * frac))
    for i in range(8):
        d = new("trunc-tail-%d" % i, "data")
        os.truncate(model(d), size - 1 - rng.randrange(0, 4096))

    # bit flips in tensor data: 40 tensors of every group, each caught by its checksum
    for i, (name, off, n) in enumerate(rng.sample(tensors, 40)):
        d = new("flip-data-%02d" % i, "tensor", name)
        flip(model(d), off + rng.randrange(n), rng.randrange(8))
    # in the parts of a sharded checkpoint: the index names the logical tensor
    sd = os.path.join(SHARDED, IT)
    parts = sorted(p for p in os.listdir(sd) if p.startswith("model-tp"))
    for i in range(12):
        part = parts[i % len(parts)]
        pr = [r for r in data_ranges(os.path.join(sd, part)) if r[2] > 0]
        name, off, n = pr[rng.randrange(len(pr))]
        d = new("flip-part-%02d" % i, "tensor", name, src=SHARDED)
        flip(os.path.join(d, part), off + rng.randrange(n), rng.randrange(8))

    # bit flips in HDF5 metadata: anywhere outside the tensors' bytes
    def in_data(o):
        return any(off <= o < off + n for _, off, n in ranges)
    metas = [o for o in range(size) if not in_data(o)]
    for i in range(40):
        d = new("flip-meta-%02d" % i, "meta")
        flip(model(d), metas[rng.randrange(len(metas))], rng.randrange(8))
    # a whole byte smashed in the superblock and the first object header
    for i, o in enumerate([0, 8, 9, 12, 24, 40, 48]):
        d = new("smash-head-%d" % i, "meta")
        with open(model(d), "r+b") as fh:
            fh.seek(o)
            fh.write(b"\xff")

    # attributes: wrong versions, formats, counters (with a recomputed state checksum, so
    # the field's own check speaks), a broken state checksum
    for i, (k, v) in enumerate([("format_version", 2), ("format_version", 0), ("format_version", -1),
                                ("format", "mt-checkpoint-part"), ("format", "x")]):
        d = new("attr-version-%d" % i, "data")
        set_attrs(model(d), **{k: v})
    for i, (k, v) in enumerate([("iteration", -1), ("iteration", 1 << 62), ("iteration", 3),
                                ("consumed_train_samples", -1), ("consumed_train_samples", -(1 << 40)),
                                ("consumed_train_samples", 1 << 60), ("consumed_valid_samples", -7),
                                ("consumed_valid_samples", 1 << 61)]):
        d = new("attr-counter-%d" % i, "data")
        set_attrs(model(d), **{k: np.int64(v)})
    for i, k in enumerate(["iteration", "consumed_train_samples", "config"]):
        d = new("attr-missing-%d" % i, "data")
        with h5py.File(model(d), "r+") as f:
            del f.attrs[k]
    d = new("attr-state-hash", "data")
    set_attrs(model(d), fix_hash=False, consumed_train_samples=np.int64(6))
    d = new("attr-config-garbled", "content")
    with h5py.File(model(d), "r+") as f:
        f.attrs["config"] = "{\"num-layers\": 2, \"hidden"
        f.attrs.modify("state_xxh3", np.uint64(state_hash(f)))
    d = new("attr-opt-step", "data")
    with h5py.File(model(d), "r+") as f:
        f["optimizer"].attrs["step"] = np.int64(-3)
        f.attrs.modify("state_xxh3", np.uint64(state_hash(f)))
    # per-tensor checksums: lost, garbled, of another type
    weights = [t for t in tensors if t[0].startswith("model/")]
    for i, (name, _, _) in enumerate(rng.sample(weights, 6)):
        d = new("xxh-%d" % i, "content" if i % 3 else "tensor", name)
        with h5py.File(model(d), "r+") as f:
            a = f[name].attrs
            if i % 3 == 0:
                a.modify("xxh3", np.uint64(int(a["xxh3"]) ^ 1))
            elif i % 3 == 1:
                del a["xxh3"]
            else:
                del a["xxh3"]
                a["xxh3"] = "deadbeef"

    # absurd configs, checked against the file before anything is sized from them
    for i, kw in enumerate([{"num-layers": 100000000}, {"num-layers": 3}, {"hidden-size": 1 << 30},
                            {"ffn-hidden-size": 1 << 30}, {"padded-vocab-size": 1 << 40},
                            {"num-attention-heads": 1 << 20}, {"hidden-size": 65536, "num-attention-heads": 64},
                            {"num-layers": -1}, {"seq-length": -5}, {"vocab-size": 1 << 50}]):
        d = new("config-%d" % i, "config")
        set_config(model(d), fix_hash=i % 2 == 0, **kw)

    # shapes and dtypes that disagree with the config, with valid checksums
    for i, name in enumerate(["model/decoder.layers.0.self_attention.linear_qkv.weight", "model/embedding.word_embeddings.weight"]):
        d = new("shape-%d" % i, "content")
        with h5py.File(model(d), "r+") as f:
            a = dict(f[name].attrs)
            x = f[name][...][:-1]
            del f[name]
            f[name] = x
            for k, v in a.items():
                f[name].attrs[k] = v
            f[name].attrs.modify("xxh3", np.uint64(xxh3(x.astype("<f4").tobytes())))
    d = new("dtype-f64", "content")
    name = "model/decoder.final_layernorm.weight"
    with h5py.File(model(d), "r+") as f:
        x = f[name][...].astype("<f8")
        a = dict(f[name].attrs)
        del f[name]
        f[name] = x
        for k, v in a.items():
            f[name].attrs[k] = v
    d = new("huge-rng", "data")
    with h5py.File(model(d), "r+") as f:
        del f["rng"]
        f.create_dataset("rng", shape=(1 << 40,), dtype="u1")

    # NaN and infinities under valid checksums: refused everywhere the tensors are read
    for i, (name, _, _) in enumerate(rng.sample(tensors, 6)):
        d = new("nonfinite-%d" % i, "nonfinite", name)
        with h5py.File(model(d), "r") as f:
            x = f[name][...]
        x.flat[rng.randrange(x.size)] = [np.nan, np.inf, -np.inf][i % 3]
        put_tensor(model(d), name, x)

    # external storage, external and soft links: nothing outside the checkpoint is read
    secret = os.path.join(OUT, "secret.bin")
    np.arange(4096, dtype="<f4").tofile(secret)
    with h5py.File(os.path.join(OUT, "other.h5"), "w") as f:
        f["x"] = np.zeros((208, 64), "<f4")
    name = "model/embedding.word_embeddings.weight"
    for i, src in enumerate(["/etc/passwd", secret]):
        d = new("external-storage-%d" % i, "data")
        with h5py.File(model(d), "r+") as f:
            shp = f[name].shape
            a = dict(f[name].attrs)
            del f[name]
            f.create_dataset(name, shape=shp, dtype="<f4", external=[(src, 0, h5py.h5f.UNLIMITED)])
            for k, v in a.items():
                f[name].attrs[k] = v
    for i, (lname, target) in enumerate([(name, os.path.join(OUT, "other.h5")), ("model/extra", "/etc/passwd"),
                                         ("model/decoder.final_layernorm.bias", "../../other.h5")]):
        d = new("external-link-%d" % i, "data")
        with h5py.File(model(d), "r+") as f:
            if lname in f:
                del f[lname]
            f[lname] = h5py.ExternalLink(target, "/x")
    for i, lname in enumerate(["model/decoder.final_layernorm.bias", "model/alias"]):
        d = new("soft-link-%d" % i, "data")
        with h5py.File(model(d), "r+") as f:
            if lname in f:
                del f[lname]
            f[lname] = h5py.SoftLink("/model/decoder.final_layernorm.weight")
    # virtual datasets whose sources leave the directory, or are not the parts
    vname = "model/decoder.final_layernorm.weight"
    for i, src in enumerate([os.path.join(OUT, "other.h5"), "../../other.h5", "/etc/passwd", ".",
                             "model-tp00-pp000-dp0000.h5"]):
        sharded = i != 3
        d = new("vds-%d" % i, "data", src=SHARDED if sharded else GOOD)
        with h5py.File(model(d), "r+") as f:
            shp = f[vname].shape
            a = dict(f[vname].attrs)
            del f[vname]
            lay = h5py.VirtualLayout(shape=shp, dtype="<f4")
            lay[...] = h5py.VirtualSource(src, "/x" if i < 3 else ("/model/decoder.final_layernorm.bias" if i == 3 else "/model/other"), shape=shp)
            f.create_virtual_dataset(vname, lay, fillvalue=0)
            for k, v in a.items():
                f[vname].attrs[k] = v
    # parts: missing, truncated, of another size than the index says, holding a link
    for i in range(len(parts)):
        d = new("part-missing-%d" % i, "data", src=SHARDED)
        os.unlink(os.path.join(d, parts[i]))
        d = new("part-trunc-%d" % i, "data", src=SHARDED)
        p = os.path.join(d, parts[i])
        os.truncate(p, os.path.getsize(p) // 2)
    d = new("part-link", "data", src=SHARDED)
    p = os.path.join(d, parts[0])
    with h5py.File(p, "r+") as f:
        f["model/leak"] = h5py.ExternalLink("/etc/passwd", "/x")
    d = new("part-is-dir", "data", src=SHARDED)
    os.unlink(os.path.join(d, parts[1]))
    os.mkdir(os.path.join(d, parts[1]))
    d = new("part-list-hash", "data", src=SHARDED)
    with h5py.File(model(d), "r+") as f:
        b = f.attrs["shard_bytes"]
        b[0] += 1
        f.attrs["shard_bytes"] = b
    # the file itself: gone, a directory, empty, not HDF5
    d = new("no-model", "data")
    os.unlink(model(d))
    d = new("empty-model", "data")
    os.truncate(model(d), 0)
    d = new("text-model", "data")
    with open(model(d), "w") as fh:
        fh.write("not a checkpoint\n" * 100)

    with open(os.path.join(OUT, "cases.tsv"), "w") as fh:
        for c in cases:
            fh.write("\t".join(c) + "\n")


main()
