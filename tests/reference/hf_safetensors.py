"""A safetensors reader and writer of its own (numpy + json), for the Hugging Face
reference checks (hf_gpt2_logits.py, hf_llama_logits.py). It shares nothing with mt's
lib/ckpt/safetensors.c on purpose: the format as the safetensors project documents it
(8-byte little-endian header length, a JSON header of dtype/shape/data_offsets with an
optional __metadata__, the data after it), read into float32 numpy arrays."""
import json
import os
import struct

import numpy as np

_NP = {"F32": np.dtype("<f4"), "F64": np.dtype("<f8"), "F16": np.dtype("<f2"),
       "I32": np.dtype("<i4"), "I64": np.dtype("<i8"), "U8": np.dtype("u1")}


def _bf16_to_f32(raw):
    return (raw.astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16(a):
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = u + 0x7FFF + ((u >> 16) & 1)  # round to nearest even
    return (rounded >> 16).astype(np.uint16)


def read_file(path):
    """name -> float32 array (float tensors) or the raw array (others)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw = data[b:end]
        shape = tuple(e["shape"])
        if e["dtype"] == "BF16":
            arr = _bf16_to_f32(np.frombuffer(raw, dtype="<u2")).reshape(shape)
        else:
            arr = np.frombuffer(raw, dtype=_NP[e["dtype"]]).reshape(shape)
            if arr.dtype.kind == "f":
                arr = arr.astype(np.float32)
        out[name] = arr
    return out


def read_dir(d):
    """model.safetensors, or the shards model.safetensors.index.json names."""
    single = os.path.join(d, "model.safetensors")
    if os.path.exists(single):
        return read_file(single)
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    out = {}
    for fn in files:
        out.update(read_file(os.path.join(d, fn)))
    return out


def write_file(path, tensors, dtype="F32", metadata=None):
    """tensors: list of (name, float array); stored as dtype (F32, F16 or BF16)."""
    header, blobs, at = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, a in tensors:
        a = np.asarray(a, dtype=np.float32)
        if dtype == "BF16":
            raw = _f32_to_bf16(a).tobytes()
        elif dtype == "F16":
            raw = a.astype("<f2").tobytes()
        else:
            raw = a.astype("<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def write_dir(d, tensors, dtype="F32", shards=1):
    """model.safetensors, or `shards` files with an index as published checkpoints have."""
    os.makedirs(d, exist_ok=True)
    meta = {"format": "pt"}
    if shards <= 1:
        write_file(os.path.join(d, "model.safetensors"), tensors, dtype, meta)
        return
    per = -(-len(tensors) // shards)
    weight_map = {}
    for i in range(shards):
        part = tensors[i * per:(i + 1) * per]
        fn = "model-%05d-of-%05d.safetensors" % (i + 1, shards)
        write_file(os.path.join(d, fn), part, dtype, meta)
        weight_map.update({name: fn for name, _ in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=2)


def stored_values(a, dtype):
    """What a float32 array reads back as after storing it as dtype."""
    a = np.asarray(a, dtype=np.float32)
    if dtype == "BF16":
        return _bf16_to_f32(_f32_to_bf16(a))
    if dtype == "F16":
        return a.astype("<f2").astype(np.float32)
    return a
