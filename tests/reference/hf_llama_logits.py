#!/usr/bin/python3
"""Llama as Hugging Face's transformers defines it (LlamaForCausalLM), written from its
conventions in PyTorch, independent of mt's code and of tests/reference/torch_gpt.py:
nn.Linear weights [out, in] (y = x @ W.T), separate q/k/v/o projections, rotary
embeddings applied with rotate_half over the two halves of each head
(inv_freq = 1 / theta^(2i/d), cos/sin of cat(freqs, freqs)), grouped-query attention
repeating each key/value head for consecutive query heads, RMSNorm, SwiGLU as
down(silu(gate(x)) * up(x)), lm_head (or the embedding when tied). Weights are read
with hf_safetensors.py (numpy + json), never with mt's reader. fp64 throughout.

  hf_llama_logits.py compare MODELDIR --ids 1,2,3 --mt FILE.npy [--tol 1e-4]
  hf_llama_logits.py random OUTDIR [--layers 2 --hidden 64 --heads 4 --kv-heads 2
      --vocab 100 --positions 64 --ffn 128 --eps 1e-5 --theta 10000] [--tied] [--bias]
      [--dtype F32|F16|BF16] [--shards N] [--inv-freq] [--seed 1]
      (--inv-freq adds the rotary_emb.inv_freq buffers older checkpoints carry)
"""
import argparse
import json
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
    w = {k: torch.from_numpy(np.array(v, dtype=np.float64)) for k, v in st.read_dir(d).items()}
    return cfg, w


def rms_norm(x, g, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * g


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def lin(w, name, x):
    y = x @ w[name + ".weight"].T
    return y + w[name + ".bias"] if name + ".bias" in w else y


def forward(cfg, w, ids):
    h, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or h // nh
    eps = cfg.get("rms_norm_eps", 1e-6)
    theta = cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0)
    T = len(ids)
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    freqs = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[None], emb.sin()[None]  # [1, T, hd]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        a = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = lin(w, p + "self_attn.q_proj", a).view(T, nh, hd).transpose(0, 1)
        k = lin(w, p + "self_attn.k_proj", a).view(T, nkv, hd).transpose(0, 1)
        v = lin(w, p + "self_attn.v_proj", a).view(T, nkv, hd).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(nh // nkv, dim=0)
        v = v.repeat_interleave(nh // nkv, dim=0)
        s = (q @ k.transpose(-1, -2)) / (hd ** 0.5)
        s = s.masked_fill(mask, float("-inf"))
        y = (torch.softmax(s, -1) @ v).transpose(0, 1).reshape(T, nh * hd)
        x = x + lin(w, p + "self_attn.o_proj", y)
        m = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        x = x + lin(w, p + "mlp.down_proj", torch.nn.functional.silu(lin(w, p + "mlp.gate_proj", m)) *
                    lin(w, p + "mlp.up_proj", m))
    x = rms_norm(x, w["model.norm.weight"], eps)
    out = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else w["lm_head.weight"]
    return x @ out.T


def compare(args):
    cfg, w = load(args.model)
    ids = [int(t) for t in args.ids.split(",")]
    ref = torch.log_softmax(forward(cfg, w, ids), -1).numpy()
    mt = np.load(args.mt)
    if mt.shape != ref.shape:
        print("shape mismatch: mt %s, reference %s" % (mt.shape, ref.shape))
        return 1
    d = float(np.abs(np.maximum(mt, -80) - np.maximum(ref, -80)).max())
    print("max |diff| %.3g over %d values (tolerance %g)" % (d, ref.size, args.tol))
    return 0 if d <= args.tol else 1


def random_model(args):
    g = np.random.default_rng(args.seed)
    h, L, V, F, nh, nkv = args.hidden, args.layers, args.vocab, args.ffn, args.heads, args.kv_heads
    hd = h // nh

    def n(*shape, s=0.1, mean=0.0):
        return (mean + s * g.standard_normal(shape)).astype(np.float32)
    t = [("model.embed_tokens.weight", n(V, h, s=0.3))]
    for l in range(L):
        p = "model.layers.%d." % l
        t.append((p + "input_layernorm.weight", n(h, mean=1.0)))
        for name, o, i in (("self_attn.q_proj", nh * hd, h), ("self_attn.k_proj", nkv * hd, h),
                           ("self_attn.v_proj", nkv * hd, h), ("self_attn.o_proj", h, nh * hd)):
            t.append((p + name + ".weight", n(o, i, s=0.2)))
            if args.bias:
                t.append((p + name + ".bias", n(o)))
        t.append((p + "post_attention_layernorm.weight", n(h, mean=1.0)))
        for name, o, i in (("mlp.gate_proj", F, h), ("mlp.up_proj", F, h), ("mlp.down_proj", h, F)):
            t.append((p + name + ".weight", n(o, i, s=0.15)))
            if args.bias:
                t.append((p + name + ".bias", n(o)))
        if args.inv_freq:
            t.append((p + "self_attn.rotary_emb.inv_freq", n(hd // 2)))
    t.append(("model.norm.weight", n(h, mean=1.0)))
    if not args.tied:
        t.append(("lm_head.weight", n(V, h, s=0.3)))
    st.write_dir(args.outdir, t, args.dtype, args.shards)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": h,
           "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": nh, "num_key_value_heads": nkv,
           "hidden_act": "silu", "max_position_embeddings": args.positions, "rms_norm_eps": args.eps,
           "rope_theta": args.theta, "rope_scaling": None, "attention_bias": args.bias, "mlp_bias": args.bias,
           "tie_word_embeddings": args.tied, "bos_token_id": 1, "eos_token_id": 2}
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
    r.add_argument("--kv-heads", type=int, default=2)
    r.add_argument("--vocab", type=int, default=100)
    r.add_argument("--positions", type=int, default=64)
    r.add_argument("--ffn", type=int, default=128)
    r.add_argument("--eps", type=float, default=1e-5)
    r.add_argument("--theta", type=float, default=10000.0)
    r.add_argument("--tied", action="store_true")
    r.add_argument("--bias", action="store_true")
    r.add_argument("--inv-freq", action="store_true")
    r.add_argument("--dtype", default="F32", choices=["F32", "F16", "BF16"])
    r.add_argument("--shards", type=int, default=1)
    r.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    return compare(a) if a.cmd == "compare" else random_model(a)


if __name__ == "__main__":
    sys.exit(main())
