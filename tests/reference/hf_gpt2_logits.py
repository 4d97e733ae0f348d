#!/usr/bin/python3
"""GPT-2 as Hugging Face's transformers defines it (GPT2LMHeadModel), written from its
conventions in PyTorch, independent of mt's code and of tests/reference/torch_gpt.py:
Conv1D weights stored [in, out] (y = x @ W + b), the fused c_attn's columns split as
[all query heads | all key heads | all value heads], GELU with the tanh approximation
(gelu_new), pre-norm blocks, final ln_f, output tied to wte. Weights are read with
hf_safetensors.py (numpy + json), never with mt's reader. fp64 throughout.

  hf_gpt2_logits.py compare MODELDIR --ids 1,2,3 --mt FILE.npy [--tol 1e-4]
      log-softmax of the model's logits for the ids against mt's (mt-logprobs' output);
      prints "max |diff| X over N values", exit 1 when X > tol
  hf_gpt2_logits.py random OUTDIR [--layers 2 --hidden 64 --heads 4 --vocab 100
      --positions 32 --ffn 256 --eps 1e-5] [--dtype F32|F16|BF16] [--shards N]
      [--release-layout] [--seed 1]
      random weights (biases and norms far from 0 and 1) in HF naming + config.json;
      --release-layout writes the names without "transformer." and the attn.bias masks,
      as the original GPT-2 release has them
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_safetensors as st  # noqa: E402


def load(d):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    w = st.read_dir(d)
    w = {(k[len("transformer."):] if k.startswith("transformer.") else k): torch.from_numpy(np.array(v, dtype=np.float64))
         for k, v in w.items()}
    return cfg, w


def layer_norm(x, g, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * g + b


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(cfg, w, ids):
    h, nh, eps = cfg["n_embd"], cfg["n_head"], cfg.get("layer_norm_epsilon", 1e-5)
    hd, T = h // nh, len(ids)
    idx = torch.tensor(ids)
    x = w["wte.weight"][idx] + w["wpe.weight"][torch.arange(T)]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    for l in range(cfg["n_layer"]):
        p = "h.%d." % l
        a = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # Conv1D: [in, out]
        q, k, v = qkv.split(h, dim=-1)
        q, k, v = (t.view(T, nh, hd).transpose(0, 1) for t in (q, k, v))
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        s = s.masked_fill(mask, float("-inf"))
        y = (torch.softmax(s, -1) @ v).transpose(0, 1).reshape(T, h)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        m = layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        m = gelu_new(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + m @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = layer_norm(x, w["ln_f.weight"], w["ln_f.bias"], eps)
    return x @ w["wte.weight"].T


def compare(args):
    cfg, w = load(args.model)
    ids = [int(t) for t in args.ids.split(",")]
    ref = torch.log_softmax(forward(cfg, w, ids), -1).numpy()
    mt = np.load(args.mt)
    if mt.shape != ref.shape:
        print("shape mismatch: mt %s, reference %s" % (mt.shape, ref.shape))
        return 1
    # below e^-80 both mean "never" (mt's fp32 probabilities underflow there)
    d = float(np.abs(np.maximum(mt, -80) - np.maximum(ref, -80)).max())
    print("max |diff| %.3g over %d values (tolerance %g)" % (d, ref.size, args.tol))
    return 0 if d <= args.tol else 1


def random_model(args):
    g = np.random.default_rng(args.seed)
    h, L, V, P, F = args.hidden, args.layers, args.vocab, args.positions, args.ffn
    pre = "" if args.release_layout else "transformer."

    def n(*shape, s=0.1, mean=0.0):
        return (mean + s * g.standard_normal(shape)).astype(np.float32)
    t = [(pre + "wte.weight", n(V, h, s=0.3)), (pre + "wpe.weight", n(P, h, s=0.1))]
    for l in range(L):
        p = pre + "h.%d." % l
        t += [(p + "ln_1.weight", n(h, mean=1.0)), (p + "ln_1.bias", n(h)),
              (p + "attn.c_attn.weight", n(h, 3 * h, s=0.2)), (p + "attn.c_attn.bias", n(3 * h)),
              (p + "attn.c_proj.weight", n(h, h)), (p + "attn.c_proj.bias", n(h)),
              (p + "ln_2.weight", n(h, mean=1.0)), (p + "ln_2.bias", n(h)),
              (p + "mlp.c_fc.weight", n(h, F)), (p + "mlp.c_fc.bias", n(F)),
              (p + "mlp.c_proj.weight", n(F, h)), (p + "mlp.c_proj.bias", n(h))]
        if args.release_layout:
            t.append((p + "attn.bias", np.tril(np.ones((P, P), np.float32))[None, None]))
    t += [(pre + "ln_f.weight", n(h, mean=1.0)), (pre + "ln_f.bias", n(h))]
    st.write_dir(args.outdir, t, args.dtype, args.shards)
    cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V, "n_positions": P,
           "n_embd": h, "n_layer": L, "n_head": args.heads, "n_inner": F, "activation_function": "gelu_new",
           "layer_norm_epsilon": args.eps, "tie_word_embeddings": True}
    if F == 4 * h:
        cfg["n_inner"] = None
    with open(os.path.join(args.outdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare")
    c.add_argument("model")
    c.add_argument("--ids", required=True)
    c.add_argument("--mt", required=True)
    c.add_argument("--tol", type=float, default=1e-4)
    r = sub.add_parser("random")
    r.add_argument("outdir")
    r.add_argument("--layers", type=int, default=2)
    r.add_argument("--hidden", type=int, default=64)
    r.add_argument("--heads", type=int, default=4)
    r.add_argument("--vocab", type=int, default=100)
    r.add_argument("--positions", type=int, default=32)
    r.add_argument("--ffn", type=int, default=256)
    r.add_argument("--eps", type=float, default=1e-5)
    r.add_argument("--dtype", default="F32", choices=["F32", "F16", "BF16"])
    r.add_argument("--shards", type=int, default=1)
    r.add_argument("--release-layout", action="store_true")
    r.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    return compare(a) if a.cmd == "compare" else random_model(a)


if __name__ == "__main__":
    sys.exit(main())
