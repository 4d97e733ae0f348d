#!/usr/bin/env python3
"""Load torch_dist checkpoints (mt-ckpt-reshard export --ckpt-format torch_dist) with PyTorch's
own distributed checkpoint reader: needs torch >= 2.4 (the GPU machine's 2.11), no GPU and no
process group.

  torchdist_dcp_load.py DIR...   (each DIR: a save directory with latest_checkpointed_iteration.txt)

For each: .metadata through plain pickle.load with the real torch.distributed.checkpoint classes
(what FileSystemReader does), the whole checkpoint through dcp_to_torch_save (DCP's planner and
reader), each tensor compared with its chunks read directly (torch.load of each chunk at its
offset, weights_only=True), a partial dcp.load of one layer tensor into a preallocated tensor,
the common state read as Megatron-LM HEAD's load_common_state_dict reads it (a dcp.load into a
BytesIO placeholder, then [0]) and the _extra_state byte entries ([None]).
Prints one line a directory and exits 1 at the first difference."""
import io
import os
import pickle
import sys
import tempfile

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata, TensorStorageMetadata


def check(save):
    it = open(os.path.join(save, "latest_checkpointed_iteration.txt")).read()
    d = os.path.join(save, "iter_%07d" % int(it))
    with open(os.path.join(d, ".metadata"), "rb") as f:
        md = pickle.load(f)
    assert isinstance(md, Metadata) and md.version == "1.0.0", md
    files = {}

    def chunk(si):
        if si.relative_path not in files:
            files[si.relative_path] = open(os.path.join(d, si.relative_path), "rb").read()
        return files[si.relative_path][si.offset:si.offset + si.length]

    direct = {}
    for idx, si in md.storage_data.items():
        ent = md.state_dict_metadata[idx.fqn]
        if isinstance(ent, TensorStorageMetadata):
            full = direct.setdefault(idx.fqn, torch.full(tuple(ent.size), float("nan"), dtype=ent.properties.dtype))
            x = torch.load(io.BytesIO(chunk(si)), weights_only=True)
            sl = tuple(slice(o, o + s) for o, s in zip(idx.offset, x.shape))
            full[sl] = x
        else:
            assert isinstance(ent, BytesStorageMetadata), ent
    with tempfile.TemporaryDirectory() as tmp:
        pt = os.path.join(tmp, "all.pt")
        dcp_to_torch_save(d, pt)
        sd = torch.load(pt, weights_only=False)
    for k, v in direct.items():
        if torch.isnan(v.float()).any():
            sys.exit("%s: %s is not covered by its chunks" % (save, k))
        if not torch.equal(sd[k], v):
            sys.exit("%s: %s differs between DCP's reader and its chunks" % (save, k))
    # Megatron's own reading of the common state (load_common_state_dict): dcp.load into a
    # BytesIO placeholder, then [0] of what DCP's planner torch.loads
    ph = {"common_state/shard_0_1": io.BytesIO()}
    dcp.load(ph, checkpoint_id=d)
    loaded = ph["common_state/shard_0_1"]
    if isinstance(loaded, io.BytesIO):
        loaded.seek(0)
        loaded = torch.load(loaded, weights_only=True)
    common = loaded[0]
    a = common["args"]
    extra = [k for k in sd if "._extra_state/" in k]
    x = sd[extra[0]]
    assert x == [None], x
    k = "decoder.layers.self_attention.linear_qkv.weight"
    part = torch.empty_like(sd[k])
    dcp.load({k: part}, checkpoint_id=d)
    if not torch.equal(part, sd[k]):
        sys.exit("%s: dcp.load of %s differs" % (save, k))
    print("%s: %d tensors, %d extra states (%r), args TP %d PP %d layers %d, iteration %d: DCP reads it" % (
        save, len(direct), len(extra), x, a.tensor_model_parallel_size, a.pipeline_model_parallel_size, a.num_layers,
        common["iteration"]))


if __name__ == "__main__":
    for s in sys.argv[1:]:
        check(s)
