#!/usr/bin/python3
"""Megatron-LM legacy (`--ckpt-format torch`) checkpoints for mt-ckpt-reshard's tests.

Independent of mt's C code: written from the key names and layouts of Megatron-LM's own
checkpoints (megatron/training/checkpointing.py, megatron/core's GPT model; the facts are
in shared/specs/megatron-parallel.md sections 6 and 7) with torch.save, and read back with
torch.load. Runs on Debian's /usr/bin/python3 (python3-torch 1.13, numpy, h5py).

  write DIR --style gpt2|llama --tp T --pp P [--optimizer] [--dtype bf16|fp16|fp32]
        [--names core|legacy|te] [--kv-heads G] [--vp V] [--iteration N] [--seed S]
      A Megatron checkpoint of one logical model (the seed decides every weight; the
      layout does not), at tensor x pipeline (x virtual) parallel sizes.
  check-import MTCKPT --style ... [--optimizer] [--dtype ...] [--seed S] [--kv-heads G]
      mt's checkpoint (HDF5, read with h5py) holds the logical model `write` wrote:
      weights (the fp32 master weights with --optimizer, else the stored dtype's values),
      and with --optimizer the Adam moments and step.
  check-export DIR --ckpt MTCKPT --tp T --pp P [--dtype ...]
      The Megatron checkpoint mt wrote at DIR: the tracker, the folder names, every file
      loaded by torch.load through an unpickler that allows only torch's default
      weights_only globals plus argparse.Namespace (what Megatron-LM's safe-globals loading
      allows) and only the opcodes torch's weights_only unpickler runs; each rank's keys and
      shapes as Megatron's model at that TP x PP has them; the tensors, reassembled, equal
      mt's logical ones.
  same CKPT_A CKPT_B [--optimizer]
      Two mt checkpoints hold the same tensors, bit for bit.
  hostile DIR KIND
      Damage a checkpoint written by `write` (truncate, opcode, global, shape).
"""
import argparse
import enum
import io
import os
import pickle
import pickletools
import random
import signal
import sys
import types
from collections import OrderedDict

import numpy as np
import torch


# ---- the model ----

def dims(a):
    if a.style == "gpt2":
        return dict(L=4, h=64, heads=4, groups=4, d=16, f=256, V=250, div=8, seq=32, swiglu=False, bias=True,
                    tied=True, norm="LayerNorm", pos="learned_absolute")
    g = a.kv_heads
    return dict(L=4, h=64, heads=4, groups=g, d=16, f=160, V=250, div=8, seq=32, swiglu=True, bias=False,
                tied=False, norm="RMSNorm", pos="rope")


def padded_vocab(m, tp):
    mult = m["div"] * tp
    return -(-m["V"] // mult) * mult


def logical(a, m):
    """The logical tensors, mt's (= megatron-core's) names, float32, from the seed. The
    padded vocabulary is that of TP=1... every TP size the tests use gives the same one."""
    rs = np.random.RandomState(a.seed)
    h, f, d, np_, g, L = m["h"], m["f"], m["d"], m["heads"], m["groups"], m["L"]
    Vp = padded_vocab(m, 1)
    W = OrderedDict()

    def r(*shape, scale=0.05):
        return (rs.standard_normal(shape) * scale).astype(np.float32)

    W["embedding.word_embeddings.weight"] = r(Vp, h)
    if m["pos"] == "learned_absolute":
        W["embedding.position_embeddings.weight"] = r(m["seq"], h)
    for i in range(L):
        p = "decoder.layers.%d." % i
        W[p + "input_layernorm.weight"] = 1 + r(h)
        if m["norm"] == "LayerNorm":
            W[p + "input_layernorm.bias"] = r(h)
        W[p + "self_attention.linear_qkv.weight"] = r((np_ + 2 * g) * d, h)
        if m["bias"]:
            W[p + "self_attention.linear_qkv.bias"] = r((np_ + 2 * g) * d)
        W[p + "self_attention.linear_proj.weight"] = r(h, np_ * d)
        if m["bias"]:
            W[p + "self_attention.linear_proj.bias"] = r(h)
        W[p + "pre_mlp_layernorm.weight"] = 1 + r(h)
        if m["norm"] == "LayerNorm":
            W[p + "pre_mlp_layernorm.bias"] = r(h)
        W[p + "mlp.linear_fc1.weight"] = r(2 * f if m["swiglu"] else f, h)
        if m["bias"]:
            W[p + "mlp.linear_fc1.bias"] = r(2 * f if m["swiglu"] else f)
        W[p + "mlp.linear_fc2.weight"] = r(h, f)
        if m["bias"]:
            W[p + "mlp.linear_fc2.bias"] = r(h)
    W["decoder.final_layernorm.weight"] = 1 + r(h)
    if m["norm"] == "LayerNorm":
        W["decoder.final_layernorm.bias"] = r(h)
    if not m["tied"]:
        W["output_layer.weight"] = r(Vp, h)
    # Adam's moments of each tensor, after the weights (so that they do not change them)
    M = OrderedDict((k, r(*v.shape, scale=1e-3)) for k, v in W.items())
    S = OrderedDict((k, np.abs(r(*v.shape, scale=1e-4))) for k, v in W.items())
    return W, M, S


def split_kind(name, m):
    """How Megatron's tensor parallelism cuts a tensor: (dim, how)."""
    if name.endswith("word_embeddings.weight") or name == "output_layer.weight":
        return 0, "rows"
    if "linear_qkv." in name:
        return 0, "rows"              # contiguous row blocks, whole groups or fragments of one
    if "linear_fc1." in name:
        return 0, "halves" if m["swiglu"] else "rows"
    if name.endswith("linear_proj.weight") or name.endswith("linear_fc2.weight"):
        return 1, "rows"
    return None, None                 # norms, row-parallel biases, positions: replicated


def shard(x, name, m, t, r):
    dim, how = split_kind(name, m)
    if dim is None:
        return x
    if how == "halves":
        half = x.shape[0] // 2
        n = half // t
        return np.concatenate([x[r * n:(r + 1) * n], x[half + r * n:half + (r + 1) * n]])
    n = x.shape[dim] // t
    return x[r * n:(r + 1) * n] if dim == 0 else x[:, r * n:(r + 1) * n]


def stage_layers(m, pp, vp, stage, chunk):
    per = m["L"] // (pp * vp)
    first = (chunk * pp + stage) * per
    return list(range(first, first + per))


TORCH_DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def to_t(x, dt):
    return torch.from_numpy(np.ascontiguousarray(x)).to(TORCH_DT[dt])


def core_names(m, layers, first, last, te):
    """(megatron name, mt logical name) of a chunk's tensors in the module's order; None
    logical names are _extra_state entries."""
    out = []
    if first:
        out.append(("embedding.word_embeddings.weight", "embedding.word_embeddings.weight"))
        if m["pos"] == "learned_absolute":
            out.append(("embedding.position_embeddings.weight", "embedding.position_embeddings.weight"))
    ln = ["weight", "bias"] if m["norm"] == "LayerNorm" else ["weight"]
    lin = ["weight", "bias"] if m["bias"] else ["weight"]
    for j, i in enumerate(layers):
        P, G = "decoder.layers.%d." % j, "decoder.layers.%d." % i
        if not te:
            out += [(P + "input_layernorm." + s, G + "input_layernorm." + s) for s in ln]
        # Attention builds linear_proj before SelfAttention builds linear_qkv
        out += [(P + "self_attention.linear_proj." + s, G + "self_attention.linear_proj." + s) for s in lin]
        out.append((P + "self_attention.linear_proj._extra_state", None))
        if te:
            out += [(P + "self_attention.linear_qkv.layer_norm_" + s, G + "input_layernorm." + s) for s in ln]
        out += [(P + "self_attention.linear_qkv." + s, G + "self_attention.linear_qkv." + s) for s in lin]
        out.append((P + "self_attention.linear_qkv._extra_state", None))
        if not te:
            out += [(P + "pre_mlp_layernorm." + s, G + "pre_mlp_layernorm." + s) for s in ln]
        if te:
            out += [(P + "mlp.linear_fc1.layer_norm_" + s, G + "pre_mlp_layernorm." + s) for s in ln]
        out += [(P + "mlp.linear_fc1." + s, G + "mlp.linear_fc1." + s) for s in lin]
        out.append((P + "mlp.linear_fc1._extra_state", None))
        out += [(P + "mlp.linear_fc2." + s, G + "mlp.linear_fc2." + s) for s in lin]
        out.append((P + "mlp.linear_fc2._extra_state", None))
    if last:
        out += [("decoder.final_layernorm." + s, "decoder.final_layernorm." + s) for s in ln]
        if not m["tied"]:
            out.append(("output_layer.weight", "output_layer.weight"))
        elif not first:
            out.append(("output_layer.weight", "embedding.word_embeddings.weight"))  # the tied copy
        out.append(("output_layer._extra_state", None))
    return out


def legacy_model(m, layers, first, last, tensors):
    """The pre-core nested state dict; tensors maps mt names to this rank's tensors."""
    lm = OrderedDict()
    if first:
        emb = OrderedDict()
        emb["word_embeddings"] = OrderedDict(weight=tensors["embedding.word_embeddings.weight"])
        if m["pos"] == "learned_absolute":
            emb["position_embeddings"] = OrderedDict(weight=tensors["embedding.position_embeddings.weight"])
        lm["embedding"] = emb
    enc = OrderedDict()
    ln = ["weight", "bias"] if m["norm"] == "LayerNorm" else ["weight"]
    lin = ["weight", "bias"] if m["bias"] else ["weight"]
    for j, i in enumerate(layers):
        P, G = "layers.%d." % j, "decoder.layers.%d." % i
        for s in ln:
            enc[P + "input_norm." + s] = tensors[G + "input_layernorm." + s]
        for s in lin:
            enc[P + "self_attention.query_key_value." + s] = tensors[G + "self_attention.linear_qkv." + s]
        for s in lin:
            enc[P + "self_attention.dense." + s] = tensors[G + "self_attention.linear_proj." + s]
        for s in ln:
            enc[P + "post_attention_norm." + s] = tensors[G + "pre_mlp_layernorm." + s]
        for s in lin:
            enc[P + "mlp.dense_h_to_4h." + s] = tensors[G + "mlp.linear_fc1." + s]
        for s in lin:
            enc[P + "mlp.dense_4h_to_h." + s] = tensors[G + "mlp.linear_fc2." + s]
    if last:
        for s in ln:
            enc["final_norm." + s] = tensors["decoder.final_layernorm." + s]
    lm["encoder"] = enc
    if last and not m["tied"]:
        lm["output_layer"] = OrderedDict(weight=tensors["output_layer.weight"])
    model = OrderedDict(language_model=lm)
    if last and m["tied"] and not first:
        model["word_embeddings_for_head"] = OrderedDict(weight=tensors["embedding.word_embeddings.weight"])
    return model


def flat_params(d, prefix=""):
    """(name, tensor) of a (nested) state dict in order, parameters only."""
    for k, v in d.items():
        if isinstance(v, dict):
            yield from flat_params(v, prefix + k + ".")
        elif isinstance(v, torch.Tensor):
            yield prefix + k, v


def fake_megatron_enum():
    """A Megatron enum in args, pickled by name as Megatron's own are."""
    names = ["megatron", "megatron.core", "megatron.core.transformer", "megatron.core.transformer.enums"]
    for n in names:
        if n not in sys.modules:
            sys.modules[n] = types.ModuleType(n)
    mod = sys.modules[names[-1]]
    if not hasattr(mod, "AttnBackend"):
        AttnBackend = enum.Enum("AttnBackend", [("flash", 1), ("fused", 2), ("unfused", 3), ("local", 4), ("auto", 5)])
        AttnBackend.__module__ = names[-1]
        mod.AttnBackend = AttnBackend
    return mod.AttnBackend.auto


def make_args(a, m, it):
    ns = argparse.Namespace()
    v = vars(ns)
    v.update(num_layers=m["L"], hidden_size=m["h"], ffn_hidden_size=m["f"], num_attention_heads=m["heads"],
             kv_channels=m["d"], group_query_attention=m["groups"] != m["heads"],
             num_query_groups=m["groups"] if m["groups"] != m["heads"] else 1,
             seq_length=m["seq"], max_position_embeddings=m["seq"], position_embedding_type=m["pos"],
             rotary_base=10000, rotary_percent=1.0, rotary_interleaved=False, normalization=m["norm"],
             norm_epsilon=1e-5, swiglu=m["swiglu"], add_bias_linear=m["bias"], add_qkv_bias=m["bias"],
             untie_embeddings_and_output_weights=not m["tied"], make_vocab_size_divisible_by=m["div"],
             padded_vocab_size=padded_vocab(m, a.tp), vocab_size=None, tensor_model_parallel_size=a.tp,
             pipeline_model_parallel_size=a.pp,
             virtual_pipeline_model_parallel_size=a.vp if a.vp > 1 else None,
             num_layers_per_virtual_pipeline_stage=m["L"] // (a.pp * a.vp) if a.vp > 1 else None,
             decoder_first_pipeline_num_layers=None, decoder_last_pipeline_num_layers=None,
             init_method_std=0.02, bf16=a.dtype == "bf16", fp16=a.dtype == "fp16", params_dtype=TORCH_DT[a.dtype],
             iteration=it, consumed_train_samples=it * 16, consumed_valid_samples=32, micro_batch_size=2,
             global_batch_size=16, lr=3e-4, min_lr=3e-5, weight_decay=0.1, adam_beta1=0.9, adam_beta2=0.95,
             adam_eps=1e-8, clip_grad=1.0, tokenizer_type="GPT2BPETokenizer", vocab_file="/data/gpt2-vocab.json",
             merge_file="/data/gpt2-merges.txt", data_path=["1.0", "/data/corpus_text_document"],
             save="/ckpt/run", load=None, exit_signal=signal.SIGTERM, attention_backend=fake_megatron_enum(),
             transformer_impl="transformer_engine" if a.names == "te" else "local",
             use_distributed_optimizer=False, ckpt_format="torch", rank=0, world_size=a.tp * a.pp)
    return ns


def rng_state():
    rs = np.random.RandomState(1)
    return [dict(random_rng_state=random.Random(1).getstate(), np_rng_state=rs.get_state(),
                 torch_rng_state=torch.get_rng_state(), cuda_rng_state=torch.get_rng_state(),
                 rng_tracker_states={"model-parallel-rng": torch.get_rng_state()})]


def cmd_write(a):
    m = dims(a)
    W, M, S = logical(a, m)
    if padded_vocab(m, a.tp) != padded_vocab(m, 1):
        sys.exit("the fixture's vocabulary must pad alike at TP=1 and TP=%d" % a.tp)
    it = a.iteration
    os.makedirs(a.dir, exist_ok=True)
    with open(os.path.join(a.dir, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(it))
    for pp in range(a.pp):
        for tp in range(a.tp):
            folder = "mp_rank_%02d" % tp if a.pp == 1 else "mp_rank_%02d_%03d" % (tp, pp)
            path = os.path.join(a.dir, "iter_%07d" % it, folder)
            os.makedirs(path, exist_ok=True)
            sd = OrderedDict()
            sd["args"] = make_args(a, m, it)
            sd["checkpoint_version"] = 3.0
            sd["iteration"] = it
            params = []          # (mt name, module parameter) in named_parameters order
            for c in range(a.vp):
                layers = stage_layers(m, a.pp, a.vp, pp, c)
                first, last = pp == 0 and c == 0, pp == a.pp - 1 and c == a.vp - 1
                if a.names == "legacy":
                    tensors = {k: to_t(shard(v, k, m, a.tp, tp), a.dtype) for k, v in W.items()}
                    model = legacy_model(m, layers, first, last, tensors)
                    rev = {id(v): k for k, v in tensors.items()}
                    params += [(rev[id(t)], t) for _, t in flat_params(model)]
                else:
                    model = OrderedDict()
                    for meg, mt in core_names(m, layers, first, last, a.names == "te"):
                        if mt is None:
                            model[meg] = None
                        else:
                            model[meg] = to_t(shard(W[mt], mt, m, a.tp, tp), a.dtype)
                            params.append((mt, model[meg]))
                sd["model%d" % c if a.vp > 1 else "model"] = model
            if a.optimizer:
                sd["optimizer"] = optimizer_state(a, m, params, M, S, W, tp)
                sd["opt_param_scheduler"] = dict(max_lr=3e-4, min_lr=3e-5, lr_warmup_steps=10, num_steps=it * 16,
                                                 lr_decay_steps=1000, lr_decay_style="cosine", start_wd=0.1,
                                                 end_wd=0.1, wd_incr_style="constant", wd_incr_steps=1000)
            sd["rng_state"] = rng_state()
            sd["num_floating_point_operations_so_far"] = 1.5e12
            torch.save(sd, os.path.join(path, "model_optim_rng.pt"))


def optimizer_state(a, m, params, M, S, W, tp):
    """Megatron's non-distributed optimizer: torch Adam's state_dict (params numbered group
    by group: weight-decay group, then the no-decay group of biases and 1-D tensors) and,
    with bf16/fp16 params, the fp32 master copies group by group."""
    decay = [(n, p) for n, p in params if not (n.endswith(".bias") or p.dim() == 1)]
    nodecay = [(n, p) for n, p in params if n.endswith(".bias") or p.dim() == 1]
    groups, state, masters, idx = [], {}, [], 0
    for wd, members in ((1.0, decay), (0.0, nodecay)):
        ids = []
        mg = []
        for n, p in members:
            state[idx] = {"step": torch.tensor(7.0),
                          "exp_avg": torch.from_numpy(np.ascontiguousarray(shard(M[n], n, m, a.tp, tp))),
                          "exp_avg_sq": torch.from_numpy(np.ascontiguousarray(shard(S[n], n, m, a.tp, tp)))}
            mg.append(torch.from_numpy(np.ascontiguousarray(shard(W[n], n, m, a.tp, tp))))
            ids.append(idx)
            idx += 1
        groups.append({"lr": 3e-4, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1 * wd, "amsgrad": False,
                       "maximize": False, "foreach": None, "capturable": False, "differentiable": False,
                       "fused": None, "wd_mult": wd, "lr_mult": 1.0, "is_expert_parallel": False,
                       "is_decoupled_lr": False, "params": ids})
        masters.append(mg)
    adam = {"state": state, "param_groups": groups}
    if a.dtype == "fp32":
        return adam
    out = {"optimizer": adam, "fp32_from_fp16_params": masters}
    if a.dtype == "fp16":
        out["grad_scaler"] = {"scale": torch.tensor(65536.0), "growth_tracker": 3}
    return out


# ---- checks ----

def h5(ckpt):
    import glob
    import h5py
    files = sorted(glob.glob(os.path.join(ckpt, "iter_*", "model.h5")))
    if not files:
        sys.exit("no iter_*/model.h5 under %s" % ckpt)
    return h5py.File(files[-1], "r")


def cmd_check_import(a):
    m = dims(a)
    W, M, S = logical(a, m)
    f = h5(a.ckpt)
    got = sorted(f["model"].keys())
    if got != sorted(W.keys()):
        sys.exit("tensors differ: mt has %s, the model %s" % (sorted(set(got) - set(W)), sorted(set(W) - set(got))))
    bad = 0
    for k, x in W.items():
        want = x if a.optimizer or a.dtype == "fp32" else to_t(x, a.dtype).float().numpy()
        y = f["model"][k][()]
        if y.shape != want.shape or not np.array_equal(y, want):
            print("weight %s differs" % k)
            bad += 1
    if a.optimizer:
        if "optimizer" not in f or int(f["optimizer"].attrs["step"]) != 7:
            sys.exit("no optimizer state, or its step is not 7")
        for grp, ref in (("exp_avg", M), ("exp_avg_sq", S)):
            for k, x in ref.items():
                if not np.array_equal(f["optimizer"][grp][k][()], x):
                    print("%s %s differs" % (grp, k))
                    bad += 1
    elif "optimizer" in f:
        sys.exit("optimizer state where the Megatron checkpoint had none")
    if bad:
        sys.exit("%d tensors differ" % bad)
    print("%d tensors equal%s" % (len(W), " with the optimizer state" if a.optimizer else ""))


# torch 2.6's weights_only default allow-list (the part a checkpoint can use) plus
# argparse.Namespace, which Megatron-LM registers (megatron/core/safe_globals.py)
ALLOWED = {("collections", "OrderedDict"), ("torch._utils", "_rebuild_tensor_v2"), ("argparse", "Namespace"),
           ("torch._utils", "_rebuild_parameter"), ("torch", "Size")}
ALLOWED |= {("torch", n) for n in ("FloatStorage", "HalfStorage", "BFloat16Storage", "DoubleStorage", "LongStorage",
                                   "IntStorage", "float32", "float16", "bfloat16", "float64", "int64", "int32")}
# the opcodes torch's weights_only unpickler runs
OPCODES = {"PROTO", "STOP", "MARK", "GLOBAL", "REDUCE", "BUILD", "NEWOBJ", "BINPERSID", "EMPTY_DICT", "EMPTY_LIST",
           "EMPTY_TUPLE", "SETITEM", "SETITEMS", "APPEND", "APPENDS", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "NONE",
           "NEWTRUE", "NEWFALSE", "BININT", "BININT1", "BININT2", "LONG1", "BINFLOAT", "BINUNICODE", "BINPUT",
           "LONG_BINPUT", "BINGET", "LONG_BINGET"}


class SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) not in ALLOWED:
            raise pickle.UnpicklingError("global %s.%s is not allowed" % (module, name))
        return super().find_class(module, name)


safe_pickle = types.ModuleType("safe_pickle")
safe_pickle.Unpickler = SafeUnpickler
safe_pickle.load = pickle.load
safe_pickle.__name__ = "pickle"


def check_opcodes(path):
    import zipfile
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        top = names[0].split("/")[0]
        if top != "model_optim_rng":
            sys.exit("%s: top folder %r" % (path, top))
        for n in names:
            info = z.getinfo(n)
            if info.compress_type != zipfile.ZIP_STORED:
                sys.exit("%s: %s is compressed" % (path, n))
        data = z.read(top + "/data.pkl")
        for op, arg, pos in pickletools.genops(data):
            if op.name not in OPCODES:
                sys.exit("%s: opcode %s at %d is not one torch's weights_only unpickler runs" % (path, op.name, pos))
            if op.name == "PROTO" and arg != 2:
                sys.exit("%s: protocol %d" % (path, arg))


def cmd_check_export(a):
    f = h5(a.ckpt)
    L = {k: f["model"][k][()] for k in f["model"].keys()}
    with open(os.path.join(a.dir, "latest_checkpointed_iteration.txt")) as t:
        it = int(t.read())
    it_dir = os.path.join(a.dir, "iter_%07d" % it)
    want_folders = sorted(("mp_rank_%02d" % t if a.pp == 1 else "mp_rank_%02d_%03d" % (t, p))
                          for t in range(a.tp) for p in range(a.pp))
    if sorted(os.listdir(it_dir)) != want_folders:
        sys.exit("folders %s, want %s" % (sorted(os.listdir(it_dir)), want_folders))
    rebuilt = {}
    nfiles = 0
    for p in range(a.pp):
        for t in range(a.tp):
            folder = "mp_rank_%02d" % t if a.pp == 1 else "mp_rank_%02d_%03d" % (t, p)
            path = os.path.join(it_dir, folder, "model_optim_rng.pt")
            check_opcodes(path)
            sd = torch.load(path, map_location="cpu", pickle_module=safe_pickle)
            nfiles += 1
            args = sd["args"]
            if not isinstance(args, argparse.Namespace):
                sys.exit("%s: args is a %s" % (path, type(args)))
            for k, v in vars(args).items():
                if not isinstance(v, (int, float, str, bool, type(None), list, torch.dtype)):
                    sys.exit("%s: args.%s is a %s" % (path, k, type(v)))
            if sd["iteration"] != it or sd["checkpoint_version"] != 3.0:
                sys.exit("%s: iteration %r, checkpoint_version %r" % (path, sd["iteration"], sd["checkpoint_version"]))
            if (args.tensor_model_parallel_size, args.pipeline_model_parallel_size) != (a.tp, a.pp):
                sys.exit("%s: args say TP %d PP %d" % (path, args.tensor_model_parallel_size,
                                                      args.pipeline_model_parallel_size))
            m = dict(L=args.num_layers, h=args.hidden_size, heads=args.num_attention_heads,
                     groups=args.num_query_groups if args.group_query_attention else args.num_attention_heads,
                     d=args.kv_channels, f=args.ffn_hidden_size, swiglu=args.swiglu, bias=args.add_bias_linear,
                     tied=not args.untie_embeddings_and_output_weights, norm=args.normalization,
                     pos=args.position_embedding_type, div=args.make_vocab_size_divisible_by)
            Vp = args.padded_vocab_size
            if Vp % (m["div"] * a.tp):
                sys.exit("%s: padded_vocab_size %d is not a multiple of %d x %d" % (path, Vp, m["div"], a.tp))
            vp = args.virtual_pipeline_model_parallel_size or 1
            layers = stage_layers(m, a.pp, vp, p, 0)
            first, last = p == 0, p == a.pp - 1
            names = core_names(m, layers, first, last, False)
            model = sd["model"]
            if list(model.keys()) != [n for n, _ in names]:
                sys.exit("%s: keys %s\nwant %s" % (path, list(model.keys()), [n for n, _ in names]))
            for meg, mt in names:
                x = model[meg]
                if mt is None:
                    if x is not None:
                        sys.exit("%s: %s is not None" % (path, meg))
                    continue
                if x.dtype != TORCH_DT[a.dtype]:
                    sys.exit("%s: %s is %s" % (path, meg, x.dtype))
                full = L[mt]
                rows = Vp if ("word_embeddings" in mt or mt == "output_layer.weight") else full.shape[0]
                gshape = (rows,) + full.shape[1:]
                dim, how = split_kind(mt if meg != "output_layer.weight" else "output_layer.weight", m)
                want = list(gshape)
                if dim is not None:
                    want[dim] //= a.tp
                if list(x.shape) != want:
                    sys.exit("%s: %s has shape %s, want %s" % (path, meg, list(x.shape), want))
                if meg == "output_layer.weight" and mt != "output_layer.weight":
                    continue  # the last stage's tied copy: compared below with the embedding
                rebuilt.setdefault(mt, {})[t] = x.float().numpy()
    # reassemble and compare with mt's logical tensors (rows past mt's padding: the last real row)
    for mt, parts in rebuilt.items():
        dim, how = split_kind(mt, m)
        if dim is None:
            x = parts[0]
            for t in parts:
                if not np.array_equal(parts[t], x):
                    sys.exit("%s differs between TP ranks" % mt)
        elif how == "halves":
            n = parts[0].shape[0] // 2
            x = np.concatenate([parts[t][:n] for t in range(a.tp)] + [parts[t][n:] for t in range(a.tp)])
        else:
            x = np.concatenate([parts[t] for t in range(a.tp)], axis=dim)
        y = L[mt]
        want = to_t(y, a.dtype).float().numpy()
        if x.shape[0] > y.shape[0] and dim == 0 and "qkv" not in mt:
            x = x[:y.shape[0]]
        if x.shape != want.shape or not np.array_equal(x, want):
            sys.exit("%s differs from mt's (shapes %s %s)" % (mt, x.shape, want.shape))
    missing = set(L) - set(rebuilt)
    if missing:
        sys.exit("not exported: %s" % sorted(missing))
    print("%d files, %d tensors: shapes per rank and values as expected" % (nfiles, len(rebuilt)))


def cmd_same(a):
    """Two mt checkpoints hold the same model tensors (and moments, when both have them), bit for bit."""
    x, y = h5(a.a), h5(a.b)
    groups = ["model"] + (["optimizer/exp_avg", "optimizer/exp_avg_sq"] if a.optimizer else [])
    n = 0
    for g in groups:
        kx, ky = sorted(x[g].keys()), sorted(y[g].keys())
        if kx != ky:
            sys.exit("%s: tensors differ: %s" % (g, sorted(set(kx) ^ set(ky))))
        for k in kx:
            u, v = x[g][k][()], y[g][k][()]
            if u.shape != v.shape or u.tobytes() != v.tobytes():
                sys.exit("%s/%s differs (shapes %s %s)" % (g, k, u.shape, v.shape))
            n += 1
    print("%d tensors identical" % n)


def cmd_hostile(a):
    """Damage rank 0's file of a checkpoint written by `write`."""
    import glob
    path = sorted(glob.glob(os.path.join(a.dir, "iter_*", "mp_rank_*", "model_optim_rng.pt")))[0]
    raw = open(path, "rb").read()
    if a.kind == "truncate":
        open(path, "wb").write(raw[:len(raw) // 2])
        return
    fake_megatron_enum()  # the fixture's args hold one
    sd = torch.load(path, map_location="cpu")
    if a.kind == "shape":
        k = [k for k in sd["model"] if k.endswith("linear_fc2.weight")][0]
        sd["model"][k] = sd["model"][k][:, :-1].clone()
        torch.save(sd, path)
        return
    if a.kind == "global":
        sd["args"].evil = os.system  # pickled as GLOBAL posix.system: not in mt's list
        torch.save(sd, path)
        return
    if a.kind == "opcode":
        # protocol 2's data.pkl with an INST opcode ('i', protocol 0) spliced in front of STOP
        buf = io.BytesIO()
        torch.save(sd, buf)
        import zipfile
        zin = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zo:
            for info in zin.infolist():
                data = zin.read(info)
                if info.filename.endswith("data.pkl"):
                    data = data[:-1] + b"(i__builtin__\nobject\n0."
                zo.writestr(info.filename.replace("archive/", "model_optim_rng/"), data)
        open(path, "wb").write(out.getvalue())
        return
    sys.exit("unknown kind %s" % a.kind)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)

    def model_opts(p):
        p.add_argument("--style", choices=["gpt2", "llama"], default="gpt2")
        p.add_argument("--kv-heads", type=int, default=2)
        p.add_argument("--seed", type=int, default=1234)
        p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
        p.add_argument("--optimizer", action="store_true")

    w = sub.add_parser("write")
    w.add_argument("dir")
    model_opts(w)
    w.add_argument("--tp", type=int, default=1)
    w.add_argument("--pp", type=int, default=1)
    w.add_argument("--vp", type=int, default=1)
    w.add_argument("--names", choices=["core", "legacy", "te"], default="core")
    w.add_argument("--iteration", type=int, default=500)
    c = sub.add_parser("check-import")
    c.add_argument("ckpt")
    model_opts(c)
    e = sub.add_parser("check-export")
    e.add_argument("dir")
    e.add_argument("--ckpt", required=True)
    e.add_argument("--tp", type=int, default=1)
    e.add_argument("--pp", type=int, default=1)
    e.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="fp32")
    s = sub.add_parser("same")
    s.add_argument("a")
    s.add_argument("b")
    s.add_argument("--optimizer", action="store_true")
    h = sub.add_parser("hostile")
    h.add_argument("dir")
    h.add_argument("kind", choices=["truncate", "opcode", "global", "shape"])
    a = ap.parse_args()
    {"write": cmd_write, "check-import": cmd_check_import, "check-export": cmd_check_export,
     "same": cmd_same, "hostile": cmd_hostile}[a.cmd](a)


if __name__ == "__main__":
    main()
