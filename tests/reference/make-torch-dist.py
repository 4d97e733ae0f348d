#!/usr/bin/env python3
"""Write Megatron-LM `--ckpt-format torch_dist` checkpoints with PyTorch's own
torch.distributed.checkpoint (DCP), shaped as Megatron-core shapes them, for mt's tests.

Needs torch >= 2.4 with torch.distributed (the GPU machine's torch 2.11; no GPU is used: one
CPU process per rank, gloo). Megatron itself is not needed: the tensors are the logical
tensors in the shared fixtures' source.npz (written by Megatron-LM core_v0.12.3's saver), and
the common state (args, iteration, scheduler, RNG, rerun state) is taken from those fixtures'
own `model_optim_rng.pt`, loaded with Megatron's classes stood in by placeholders that pickle
under the same names. What the ranks write follows ../shared/specs/megatron-dist-ckpt.md §2:

- one DCP key a tensor, every layer stacked on a leading axis of num_layers (`decoder.layers.*`),
  each chunk [1, ...] at (layer, ...); pipeline stages write their own layers of the same key;
- Transformer Engine's norm names on disk (`linear_qkv.layer_norm_weight`, ...);
- tensor-parallel chunks: axis 0 of QKV, fc1, the embedding and the output layer, axis 1 of
  linear_proj and fc2 (plus the layer axis); SwiGLU's fc1 as [all gate rows; all up rows],
  two chunks a rank a layer; everything else written by tensor rank 0 only;
- the tied output layer not written; the embedding by the first stage;
- byte entries as Megatron-core's save planner writes them: the bytes of torch.save([data]),
  not saved once more as DCP's default planner would;
- `_extra_state` of the four linear layers as byte entries torch.save([None]) by tensor rank 0,
  key `<prefix>._extra_state/shard_{layer}_{num_layers}`;
- `rng_state/shard_{pp}.{tp}_{PP}.{TP}` a rank, torch.save([rng state list]);
- the common state: `common.pt` (torch.save(common)) and a four-field metadata.json (core_v0.10-0.12 style, with
  FileSystemWriter(thread_count=2): two .distcp files a rank), or the byte entry
  `common_state/shard_0_1` (torch.save([common])) and a two-field metadata.json (Megatron-LM HEAD style, one file a
  rank);
- optionally the plain optimizer's state: `optimizer.state.{exp_avg,exp_avg_sq,fp32_param}.<key>`
  (fp32, the model's sharding), with exp_avg = 0.5 w, exp_avg_sq = w * w, fp32_param = w, so a
  reader's values can be checked against source.npz.

Usage: make-torch-dist.py FIXTURES_DIR OUT_DIR   (FIXTURES_DIR: shared/fixtures/megatron-core_v0.12.3)
Writes OUT_DIR/<model>-tp<T>pp<P>-<style>/{latest_checkpointed_iteration.txt,iter_0000100/}."""
import importlib.abc
import importlib.util
import io
import json
import os
import sys
import types

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed._shard.metadata import ShardMetadata
from torch.distributed._shard.sharded_tensor import Shard, ShardedTensor
from torch.distributed._shard.sharded_tensor.metadata import ShardedTensorMetadata, TensorProperties
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner

LAYOUTS = [  # model, TP, PP, style, optimizer
    ("gpt2", 1, 1, "m12", False),
    ("gpt2", 2, 2, "mh", True),
    ("llama", 2, 1, "m12", False),
    ("llama", 1, 2, "mh", True),
]


class _Members(type):
    """Enum members read as getattr(cls, 'name') (how Python 3.11+ pickles them): made on
    first use, and pickled back the same way."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        m = cls.__new__(cls)
        m._member = name
        setattr(cls, name, m)
        return m


class _Placeholder(metaclass=_Members):
    """A Megatron class without Megatron: keeps its arguments and state, pickles back under
    the same module and name (enums as GLOBAL + (value,) + REDUCE, or getattr(cls, name), as
    Python pickles them)."""

    def __init__(self, *a):
        self._a = a

    def __setstate__(self, st):
        self._st = st

    def __reduce__(self):
        if "_member" in self.__dict__:
            return (getattr, (type(self), self._member))
        st = getattr(self, "_st", None)
        return (type(self), self._a) if st is None else (type(self), self._a, st)


class _FakeModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        cls = type(name, (_Placeholder,), {"__module__": self.__name__, "__qualname__": name})
        setattr(self, name, cls)
        return cls


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname == "megatron" or fullname.startswith("megatron."):
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return _FakeModule(spec.name)

    def exec_module(self, module):
        module.__path__ = []


sys.meta_path.insert(0, _Finder())


def legacy_state(fixtures, model):
    f = os.path.join(fixtures, model, "tp1pp1", "iter_0000100", "mp_rank_00", "model_optim_rng.pt")
    return torch.load(f, map_location="cpu", weights_only=False)


def logical(fixtures, model, args):
    """source.npz's legacy names -> the DCP keys with their global (stacked) tensors."""
    z = np.load(os.path.join(fixtures, model, "source.npz"))
    L = args.num_layers
    bf = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(torch.bfloat16)
    stack = lambda name: bf(np.stack([z["language_model.encoder.layers.%d.%s" % (i, name)] for i in range(L)]))
    t = {"embedding.word_embeddings.weight": bf(z["language_model.embedding.word_embeddings.weight"])}
    if "language_model.embedding.position_embeddings.weight" in z.files:
        t["embedding.position_embeddings.weight"] = bf(z["language_model.embedding.position_embeddings.weight"])
    lay = {
        "self_attention.linear_qkv.layer_norm_weight": "input_norm.weight",
        "self_attention.linear_qkv.layer_norm_bias": "input_norm.bias",
        "self_attention.linear_qkv.weight": "self_attention.query_key_value.weight",
        "self_attention.linear_qkv.bias": "self_attention.query_key_value.bias",
        "self_attention.linear_proj.weight": "self_attention.dense.weight",
        "self_attention.linear_proj.bias": "self_attention.dense.bias",
        "mlp.linear_fc1.layer_norm_weight": "post_attention_norm.weight",
        "mlp.linear_fc1.layer_norm_bias": "post_attention_norm.bias",
        "mlp.linear_fc1.weight": "mlp.dense_h_to_4h.weight",
        "mlp.linear_fc1.bias": "mlp.dense_h_to_4h.bias",
        "mlp.linear_fc2.weight": "mlp.dense_4h_to_h.weight",
        "mlp.linear_fc2.bias": "mlp.dense_4h_to_h.bias",
    }
    for k, src in lay.items():
        if "language_model.encoder.layers.0." + src in z.files:
            t["decoder.layers." + k] = stack(src)
    for k in ("weight", "bias"):
        if "language_model.encoder.final_norm." + k in z.files:
            t["decoder.final_layernorm." + k] = bf(z["language_model.encoder.final_norm." + k])
    if "language_model.output_layer.weight" in z.files:
        t["output_layer.weight"] = bf(z["language_model.output_layer.weight"])
    return t


# tensor-parallel axis of each key (without the layer axis); None: replicated
TP_AXIS = {
    "embedding.word_embeddings.weight": 0, "output_layer.weight": 0,
    "decoder.layers.self_attention.linear_qkv.weight": 0, "decoder.layers.self_attention.linear_qkv.bias": 0,
    "decoder.layers.mlp.linear_fc1.weight": 0, "decoder.layers.mlp.linear_fc1.bias": 0,
    "decoder.layers.self_attention.linear_proj.weight": 1, "decoder.layers.mlp.linear_fc2.weight": 1,
}


def chunks(key, shape, args, T, P, t, p):
    """The chunks (offsets, sizes) rank (t, p) writes of a key's global shape."""
    L = args.num_layers
    per = L // P
    layered = key.startswith("decoder.layers.")
    ax = TP_AXIS.get(key)
    if layered:
        layers = range(p * per, (p + 1) * per)
    elif key.startswith("embedding."):
        layers = [None] if p == 0 else []
    else:  # final norm, output layer: the last stage
        layers = [None] if p == P - 1 else []
    out = []
    for l in layers:
        base_off = [l] if layered else []
        base_sz = [1] if layered else []
        inner = list(shape[1:] if layered else shape)
        if ax is None:
            if t != 0:
                continue
            out.append((base_off + [0] * len(inner), base_sz + inner))
            continue
        swiglu = key == "decoder.layers.mlp.linear_fc1.weight" and getattr(args, "swiglu", False)
        if swiglu:
            f = inner[0] // 2
            n = f // T
            for half in (0, 1):
                off = [0] * len(inner)
                off[0] = half * f + t * n
                sz = list(inner)
                sz[0] = n
                out.append((base_off + off, base_sz + sz))
            continue
        n = inner[ax] // T
        off = [0] * len(inner)
        off[ax] = t * n
        sz = list(inner)
        sz[ax] = n
        out.append((base_off + off, base_sz + sz))
    return out


def sharded(key, full, args, T, P, t, p, rank, dtype):
    """A ShardedTensor of full's global shape holding rank (t, p)'s chunks, with every rank's
    chunks in its metadata (as Megatron builds them: each rank knows the whole layout)."""
    props = TensorProperties(dtype=dtype)
    metas, locals_ = [], []
    for pp in range(P):
        for tt in range(T):
            r = tt + T * pp
            for off, sz in chunks(key, tuple(full.shape), args, T, P, tt, pp):
                m = ShardMetadata(shard_offsets=off, shard_sizes=sz, placement="rank:%d/cpu" % r)
                metas.append(m)
                if r == rank:
                    sl = tuple(slice(o, o + s) for o, s in zip(off, sz))
                    locals_.append(Shard(full[sl].to(dtype).contiguous().clone(), m))
    if not metas:
        return None
    md = ShardedTensorMetadata(shards_metadata=metas, size=full.shape, tensor_properties=props)
    return ShardedTensor._init_from_local_shards_and_global_metadata(locals_, md, process_group=None)


class MCoreLikeSavePlanner(DefaultSavePlanner):
    """Byte entries as Megatron-core's planner writes them: the bytes of torch.save([data])
    as they are (DCP's default planner would torch.save the BytesIO object once more)."""

    def transform_object(self, write_item, object):
        return object


def tsave(obj):
    b = io.BytesIO()
    torch.save(obj, b)
    b.seek(0)
    return b


def run_rank(rank, fixtures, out, model, T, P, style, optim, initfile):
    dist.init_process_group("gloo", init_method="file://" + initfile, rank=rank, world_size=T * P)
    t, p = rank % T, rank // T
    leg = legacy_state(fixtures, model)
    args = leg["args"]
    args.tensor_model_parallel_size, args.pipeline_model_parallel_size = T, P
    args.ckpt_format = "torch_dist"
    L = args.num_layers
    sd = {}
    for key, full in logical(fixtures, model, args).items():
        st = sharded(key, full, args, T, P, t, p, rank, torch.bfloat16)
        if st is None:
            continue
        sd[key] = st
        if optim:
            for name, val in (("exp_avg", full.float() * 0.5), ("exp_avg_sq", full.float() * full.float()),
                              ("fp32_param", full.float())):
                sd["optimizer.state.%s.%s" % (name, key)] = sharded(key, val, args, T, P, t, p, rank, torch.float32)
    if t == 0:
        per = L // P
        for l in range(p * per, (p + 1) * per):
            for lin in ("self_attention.linear_qkv", "self_attention.linear_proj", "mlp.linear_fc1", "mlp.linear_fc2"):
                sd["decoder.layers.%s._extra_state/shard_%d_%d" % (lin, l, L)] = tsave([None])
    sd["rng_state/shard_%d.%d_%d.%d" % (p, t, P, T)] = tsave([leg.get("rng_state")])
    common = {k: leg[k] for k in ("args", "checkpoint_version", "iteration", "opt_param_scheduler",
                                  "num_floating_point_operations_so_far") if k in leg}
    common["args"] = args
    if optim:
        common["optimizer"] = {"optimizer": {"param_groups": [
            {"lr": 1e-4, "weight_decay": 0.01, "betas": (0.9, 0.95), "eps": 1e-8, "step": 100,
             "wd_mult": 1.0, "lr_mult": 1.0, "is_expert_parallel": False, "is_decoupled_lr": False}]}}
    d = os.path.join(out, "iter_0000100")
    if style == "mh" and rank == 0:
        common["content_metadata"] = {"singleton_local_shards": False, "chained_optim_avoid_prefix": True}
        sd["common_state/shard_0_1"] = tsave([common])
    kw = {}
    try:
        from torch.distributed.checkpoint.filesystem import SerializationFormat
        kw["serialization_format"] = SerializationFormat.TORCH_SAVE
    except ImportError:
        pass
    writer = dcp.FileSystemWriter(d, thread_count=2 if style == "m12" else 1, **kw)
    dcp.save(sd, storage_writer=writer, planner=MCoreLikeSavePlanner())
    dist.barrier()
    if rank == 0:
        if style == "m12":
            torch.save(common, os.path.join(d, "common.pt"))
            cfg = {"sharded_backend": "torch_dist", "sharded_backend_version": 1,
                   "common_backend": "torch", "common_backend_version": 1}
        else:
            cfg = {"sharded_backend": "torch_dist", "sharded_backend_version": 1}
        with open(os.path.join(d, "metadata.json"), "w") as f:
            json.dump(cfg, f)
        with open(os.path.join(out, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write("100")
    dist.barrier()
    dist.destroy_process_group()


def main():
    fixtures, outdir = sys.argv[1], sys.argv[2]
    for model, T, P, style, optim in LAYOUTS:
        out = os.path.join(outdir, "%s-tp%dpp%d-%s" % (model, T, P, style))
        os.makedirs(out, exist_ok=True)
        initfile = os.path.join(outdir, ".init-%s-%d-%d" % (model, T, P))
        if os.path.exists(initfile):
            os.remove(initfile)
        mp.spawn(run_rank, args=(fixtures, out, model, T, P, style, optim, initfile), nprocs=T * P, join=True)
        os.remove(initfile) if os.path.exists(initfile) else None
        print(out, sorted(os.listdir(os.path.join(out, "iter_0000100"))))
        check(fixtures, out, model, optim)


def check(fixtures, out, model, optim):
    """Read the checkpoint back with PyTorch's own DCP loader and compare every tensor with
    the logical tensors it was written from."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    tmp = out + ".check.pt"
    dcp_to_torch_save(os.path.join(out, "iter_0000100"), tmp)
    got = torch.load(tmp, map_location="cpu", weights_only=False)
    os.remove(tmp)
    want = logical(fixtures, model, legacy_state(fixtures, model)["args"])
    for k, v in want.items():
        assert torch.equal(got[k], v), k
        if optim:
            assert torch.equal(got["optimizer.state.exp_avg_sq." + k], v.float() * v.float()), k
    print("  DCP's loader reads back", len(want), "tensors equal to source.npz;", len(got), "entries in all")


if __name__ == "__main__":
    main()
