#!/usr/bin/python3
"""An independent PyTorch implementation of mt's GPT, to check the CPU backend against.

    torch_gpt.py --tokens TOKENS.npy DIR [--lr 1e-3] [--weight-decay 0.1] [--dtype float32]

DIR is what tests/helpers/gpt-step wrote (read its header for the layout). The model is
written here from the description of Megatron-core's GPT (plain torch.nn, not mt's code
and not transformers): pre-norm blocks x += proj(attn(norm1(x))); x += fc2(act(fc1(norm2(x))));
learned or rotary positions (Megatron's non-interleaved rotate-half), LayerNorm or RMSNorm,
GELU (tanh approximation) or SwiGLU, biases or not, grouped-query attention, causal
softmax(q k^T / sqrt(hd)) v, an output layer tied to the word embeddings or not, and the
mean cross-entropy over the targets that are not -1, over the padded vocabulary. Queries,
keys and values are three separate Linear layers here; the fused Megatron tensor
linear_qkv (per query group: its query heads, its key head, its value head, each
kv_channels rows) is split on loading and re-fused to compare.

It loads the initial weights from DIR/ckpt/iter_0000000/model.h5 by logical name (the
model's config from the file's `config` attribute), runs the batch and compares:

  * the loss, and the loss of each AdamW step on the same batch: relative difference
    below 1e-5;
  * every parameter's gradient: per tensor, max|mt - torch| / max|torch| below 1e-4;
  * every weight after the steps: per tensor, max|mt - torch| below 1% of the farthest
    AdamW can move an element (steps * lr) and the relative L2 difference below 1e-4
    (TOLERANCES below says why max/max does not work there).

torch.optim.AdamW(lr, betas (0.9, 0.999), eps 1e-8, foreach=False) with weight decay on
the 2-D parameters (linear weights and embeddings, Megatron's rule) and none on biases
and norm weights. (Debian's torch 1.13 updates exp_avg as mul_(beta1).add_(grad, 1 - beta1)
where mt follows torch 2.x's lerp_: they differ in last bits only, well within the
tolerances.) Prints a table; exits 1 when anything is out of tolerance, 2 on usage
or input errors.
"""
import argparse
import json
import math
import os
import sys

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# TOLERANCES. Both sides compute in fp32 from the same fp32 weights and differ only in
# rounding (matmul summation orders; mt sums norms, softmax and attention in double;
# different exp/tanh), a few ulps per value that grow somewhat through two layers and
# the backward pass.
#
# Loss: relative difference below LOSS_RTOL (measured: at most ~1.5e-7).
#
# Gradients: per tensor, max|mt - torch| / max|torch| below GRAD_TOL. Relative to the
# tensor's largest value, because single elements can be near zero (their own relative
# error means nothing), while a real mistake (a layout, a missing term, a wrong head or
# position) moves a tensor's gradient by a sizable fraction of its scale. Measured: at
# most ~9e-7, so 1e-4 leaves 100x for other BLAS builds and torch versions.
#
# These figures are for the tests' models at Megatron's init std 0.02. With much larger
# weights (std 0.2) ten AdamW steps at lr 1e-3 become chaotic enough that torch fp32 and
# torch fp64 disagree beyond the limits below too: keep the std small.
#
# Weights after the AdamW steps: max|diff| / max|w| is NOT a usable measure here, and
# this is AdamW, not mt: an element whose gradient is near eps (1e-8) in some step moves
# by lr * g / (|g| + eps), where g is rounding-sized and its ~1e-2 relative error goes
# straight into the update. torch fp32 against torch fp64 from the same start differs by
# up to 1.8e-4 of max|w| on these tiny models (seed-dependent). So, per tensor:
#   max|mt - torch| <= WEIGHT_ABS * steps * lr: no element's trajectory differs by more
#       than 1% of the farthest AdamW moves one (measured: at most 0.2%);
#   ||mt - torch||_2 / ||torch||_2 <= WEIGHT_L2: the tensor as a whole agrees (measured:
#       at most 1.4e-5, one such element dominating); a missing or extra weight decay
#       gives lr * wd * steps = 1e-3, a bias-correction or moment mistake more.
LOSS_RTOL = 1e-5
GRAD_TOL = 1e-4
WEIGHT_ABS = 1e-2
WEIGHT_L2 = 1e-4
# With learned positions the key bias's gradient is zero in exact arithmetic (it adds
# q . b_k to every score of a query, which softmax does not see): on both sides it is
# rounding noise (~1e-12; the gradient check above holds it to 1e-4 of the fused bias's
# largest gradient), and AdamW turns noise into noise of up to lr per step (lr * g /
# (|g| + eps)). Those rows of linear_qkv.bias are left out of the weight comparison;
# their magnitudes are printed (row "kbias": mt, torch).


class RMSNorm(nn.Module):
    def __init__(self, h, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(h))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def make_norm(cfg):
    h, eps = cfg["hidden-size"], cfg["norm-epsilon"]
    if cfg["normalization"] == "RMSNorm":
        return RMSNorm(h, eps)
    return nn.LayerNorm(h, eps=eps)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, bias = cfg["hidden-size"], cfg["add-bias-linear"]
        self.np, self.ng, self.hd = cfg["num-attention-heads"], cfg["num-query-groups"], cfg["kv-channels"]
        self.q = nn.Linear(h, self.np * self.hd, bias=bias)
        self.k = nn.Linear(h, self.ng * self.hd, bias=bias)
        self.v = nn.Linear(h, self.ng * self.hd, bias=bias)
        self.proj = nn.Linear(self.np * self.hd, h, bias=bias)

    def forward(self, x, rope):
        B, T, _ = x.shape
        q = self.q(x).view(B, T, self.np, self.hd).transpose(1, 2)  # [B, heads, T, hd]
        k = self.k(x).view(B, T, self.ng, self.hd).transpose(1, 2)
        v = self.v(x).view(B, T, self.ng, self.hd).transpose(1, 2)
        if rope is not None:
            cos, sin = rope
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        # query head j belongs to group j // (heads per group)
        k = k.repeat_interleave(self.np // self.ng, dim=1)
        v = v.repeat_interleave(self.np // self.ng, dim=1)
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.hd)
        causal = torch.ones(T, T, dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~causal, float("-inf"))
        y = torch.matmul(F.softmax(s, dim=-1), v)
        return self.proj(y.transpose(1, 2).reshape(B, T, self.np * self.hd))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, f, bias = cfg["hidden-size"], cfg["ffn-hidden-size"], cfg["add-bias-linear"]
        self.swiglu = cfg["swiglu"]
        self.fc1 = nn.Linear(h, 2 * f if self.swiglu else f, bias=bias)
        self.fc2 = nn.Linear(f, h, bias=bias)

    def forward(self, x):
        x = self.fc1(x)
        if self.swiglu:
            a, b = x.chunk(2, dim=-1)
            x = F.silu(a) * b
        else:
            x = F.gelu(x, approximate="tanh")
        return self.fc2(x)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1, self.attn, self.ln2, self.mlp = make_norm(cfg), Attention(cfg), make_norm(cfg), MLP(cfg)

    def forward(self, x, rope):
        x = x + self.attn(self.ln1(x), rope)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.label_smoothing = 0.0
        h, V = cfg["hidden-size"], cfg["padded-vocab-size"]
        self.rope = cfg["position-embedding-type"] == "rope"
        self.wte = nn.Embedding(V, h)
        self.wpe = None if self.rope else nn.Embedding(cfg["max-position-embeddings"], h)
        self.layers = nn.ModuleList([Block(cfg) for _ in range(cfg["num-layers"])])
        self.lnf = make_norm(cfg)
        self.out = nn.Linear(h, V, bias=False) if cfg["untie-embeddings-and-output-weights"] else None

    def rope_tables(self, T, dtype):
        # Megatron's RotaryEmbedding: inv_freq = 1 / base^(arange(0, hd, 2) / hd) in fp32,
        # freqs = outer(positions, inv_freq), emb = cat(freqs, freqs)
        hd = self.cfg["kv-channels"]
        inv = 1.0 / (self.cfg["rotary-base"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        emb = torch.outer(torch.arange(T, dtype=torch.float32), inv)
        emb = torch.cat((emb, emb), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def forward(self, tokens, targets):
        B, T = tokens.shape
        logits = self.logits(tokens)
        # Megatron's label smoothing eps gives every other class eps/(K-1); PyTorch's
        # gives every class (the target too) its label_smoothing/K: the same loss with
        # label_smoothing = eps K / (K - 1)
        K = logits.shape[-1]
        ls = self.label_smoothing * K / (K - 1) if self.label_smoothing > 0 else 0.0
        return F.cross_entropy(logits.view(B * T, -1), targets.reshape(-1), ignore_index=-1, label_smoothing=ls)

    def logits(self, tokens):
        """[B, T, padded vocab] logits of every position (torch_generate.py uses them too)"""
        B, T = tokens.shape
        x = self.wte(tokens)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(T))
        rope = self.rope_tables(T, x.dtype) if self.rope else None
        for layer in self.layers:
            x = layer(x, rope)
        x = self.lnf(x)
        return F.linear(x, self.out.weight if self.out is not None else self.wte.weight)


class Names:
    """Megatron-core's logical names <-> this model's tensors (the QKV split and fused)."""

    def __init__(self, model):
        c = model.cfg
        self.model = model
        self.per, self.ng, self.hd = c["num-attention-heads"] // c["num-query-groups"], c["num-query-groups"], c["kv-channels"]
        n = {"embedding.word_embeddings.weight": model.wte.weight}
        if model.wpe is not None:
            n["embedding.position_embeddings.weight"] = model.wpe.weight
        for i, L in enumerate(model.layers):
            p = f"decoder.layers.{i}."
            n[p + "input_layernorm.weight"] = L.ln1.weight
            if isinstance(L.ln1, nn.LayerNorm):
                n[p + "input_layernorm.bias"] = L.ln1.bias
            n[p + "self_attention.linear_qkv.weight"] = (L.attn.q.weight, L.attn.k.weight, L.attn.v.weight)
            if L.attn.q.bias is not None:
                n[p + "self_attention.linear_qkv.bias"] = (L.attn.q.bias, L.attn.k.bias, L.attn.v.bias)
            n[p + "self_attention.linear_proj.weight"] = L.attn.proj.weight
            if L.attn.proj.bias is not None:
                n[p + "self_attention.linear_proj.bias"] = L.attn.proj.bias
            n[p + "pre_mlp_layernorm.weight"] = L.ln2.weight
            if isinstance(L.ln2, nn.LayerNorm):
                n[p + "pre_mlp_layernorm.bias"] = L.ln2.bias
            n[p + "mlp.linear_fc1.weight"] = L.mlp.fc1.weight
            if L.mlp.fc1.bias is not None:
                n[p + "mlp.linear_fc1.bias"] = L.mlp.fc1.bias
            n[p + "mlp.linear_fc2.weight"] = L.mlp.fc2.weight
            if L.mlp.fc2.bias is not None:
                n[p + "mlp.linear_fc2.bias"] = L.mlp.fc2.bias
        n["decoder.final_layernorm.weight"] = model.lnf.weight
        if isinstance(model.lnf, nn.LayerNorm):
            n["decoder.final_layernorm.bias"] = model.lnf.bias
        if model.out is not None:
            n["output_layer.weight"] = model.out.weight
        self.map = n

    def fuse(self, q, k, v):
        # [ng*per*hd (+ ...), ...] -> per group: per query heads, then its key, then its value
        rest = q.shape[1:]
        q = q.reshape(self.ng, self.per * self.hd, *rest)
        k = k.reshape(self.ng, self.hd, *rest)
        v = v.reshape(self.ng, self.hd, *rest)
        return torch.cat((q, k, v), dim=1).reshape(-1, *rest)

    def split(self, w):
        rest = w.shape[1:]
        w = w.reshape(self.ng, (self.per + 2) * self.hd, *rest)
        q = w[:, : self.per * self.hd].reshape(-1, *rest)
        k = w[:, self.per * self.hd : (self.per + 1) * self.hd].reshape(-1, *rest)
        v = w[:, (self.per + 1) * self.hd :].reshape(-1, *rest)
        return q, k, v

    def get(self, name, grad=False):
        t = self.map[name]
        if isinstance(t, tuple):
            return self.fuse(*[x.grad if grad else x.detach() for x in t])
        return t.grad if grad else t.detach()

    def load(self, name, value):
        t = self.map[name]
        value = torch.from_numpy(np.ascontiguousarray(value))
        with torch.no_grad():
            if isinstance(t, tuple):
                for dst, src in zip(t, self.split(value)):
                    dst.copy_(src)
            else:
                if tuple(t.shape) != tuple(value.shape):
                    raise ValueError(f"{name}: shape {tuple(value.shape)} in the checkpoint, {tuple(t.shape)} here")
                t.copy_(value)


def read_ckpt(path):
    with h5py.File(path, "r") as f:
        cfg = json.loads(f.attrs["config"])
        tensors = {k: f["model"][k][()] for k in f["model"].keys()}
    return cfg, tensors


def compare(ref, got):
    """max|diff|, max|ref|, max|diff| / max|ref|, ||diff||_2 / ||ref||_2"""
    ref = ref.detach().double().cpu().numpy()
    got = np.asarray(got, dtype=np.float64)
    if ref.shape != got.shape:
        inf = float("inf")
        return inf, 0.0, inf, inf
    diff, scale = float(np.abs(ref - got).max()), float(np.abs(ref).max())
    l2d, l2r = float(np.linalg.norm(ref - got)), float(np.linalg.norm(ref))

    def ratio(x, y):
        return x / y if y > 0 else (0.0 if x == 0 else float("inf"))

    return diff, scale, ratio(diff, scale), ratio(l2d, l2r)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="gpt-step's output directory")
    ap.add_argument("--tokens", required=True, help="the int32 .npy (2, B*T) gpt-step ran")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--label-smoothing", type=float, default=0.0, help="Megatron's --label-smoothing (what gpt-step ran)")
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                    help="float64 runs the reference in double (to see how much of a difference is fp32 rounding)")
    ap.add_argument("-q", "--quiet", action="store_true", help="print only failures and the summary")
    a = ap.parse_args()
    dtype = getattr(torch, a.dtype)
    torch.manual_seed(0)

    try:
        cfg, w0 = read_ckpt(os.path.join(a.dir, "ckpt", "iter_0000000", "model.h5"))
        with open(os.path.join(a.dir, "losses.txt")) as f:
            mt_losses = [float(x) for x in f.read().split()]
        steps = len(mt_losses)
        _, w_end = read_ckpt(os.path.join(a.dir, "ckpt", f"iter_{steps:07d}", "model.h5"))
        bt = np.load(a.tokens)
    except (OSError, KeyError, ValueError) as e:
        print(f"torch_gpt.py: error: {e}", file=sys.stderr)
        return 2
    T = cfg["seq-length"]
    if bt.dtype != np.int32 or bt.ndim != 2 or bt.shape[0] != 2 or bt.shape[1] % T:
        print(f"torch_gpt.py: error: {a.tokens}: want int32 of shape (2, B*{T})", file=sys.stderr)
        return 2
    tokens = torch.from_numpy(bt[0].astype(np.int64)).view(-1, T)
    targets = torch.from_numpy(bt[1].astype(np.int64)).view(-1, T)

    model = GPT(cfg)
    model.label_smoothing = a.label_smoothing
    names = Names(model)
    ours, theirs = set(names.map), set(w0)
    if ours != theirs:
        print(f"FAIL parameter names: missing from the checkpoint {sorted(ours - theirs)}, "
              f"not in the reference {sorted(theirs - ours)}")
        return 1
    try:
        for name in names.map:
            names.load(name, w0[name])
    except ValueError as e:
        print(f"FAIL {e}")
        return 1
    model.to(dtype)

    failures = []
    rows = []  # kind, name, max|diff|, max|ref|, max|diff| / max|ref|, relative L2, failed

    # the first forward/backward: loss and gradients
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.999), eps=1e-8, foreach=False)
    ref_losses = []
    for s in range(steps):
        opt.zero_grad(set_to_none=False)
        loss = model(tokens, targets)
        loss.backward()
        ref_losses.append(loss.item())
        if s == 0:
            for name in names.map:
                g = np.load(os.path.join(a.dir, "grads", name + ".npy"))
                diff, scale, rel, l2 = compare(names.get(name, grad=True), g)
                bad = not rel <= GRAD_TOL
                rows.append(("grad", name, diff, scale, rel, l2, bad))
                if bad:
                    failures.append(f"gradient of {name}: max|diff| {diff:.3g} is {rel:.3g} of max|ref| {scale:.3g}"
                                    f" (> {GRAD_TOL:g})")
        opt.step()

    wabs = WEIGHT_ABS * steps * a.lr  # 1e-4 for 10 steps at 1e-3
    for name in names.map:
        ref, got = names.get(name), w_end[name]
        if name.endswith("linear_qkv.bias") and not model.rope:
            q = ref.numel() * names.per // (names.per + 2)
            kmask = names.fuse(torch.zeros(q), torch.ones((ref.numel() - q) // 2),
                               torch.zeros((ref.numel() - q) // 2)).bool()
            kmt, kref = float(np.abs(got[kmask.numpy()]).max()), float(ref[kmask].abs().max())
            rows.append(("kbias", name, kmt, kref, float("nan"), float("nan"), False))
            ref, got = ref[~kmask], got[~kmask.numpy()]
        diff, scale, rel, l2 = compare(ref, got)
        bad = not (diff <= wabs and l2 <= WEIGHT_L2)
        rows.append(("weight", name, diff, scale, rel, l2, bad))
        if bad:
            failures.append(f"weight {name} after {steps} steps: max|diff| {diff:.3g} (limit {wabs:.3g}), "
                            f"relative L2 {l2:.3g} (limit {WEIGHT_L2:g})")

    loss_worst = 0.0
    for s, (r, m) in enumerate(zip(ref_losses, mt_losses)):
        rel = abs(r - m) / abs(r)
        loss_worst = max(loss_worst, rel)
        if not a.quiet:
            print(f"loss step {s + 1:2d}  torch {r:.9f}  mt {m:.9f}  rel {rel:.2e}")
        if not rel <= LOSS_RTOL:
            failures.append(f"loss of step {s + 1}: torch {r!r}, mt {m!r}: relative {rel:.3g} > {LOSS_RTOL:g}")
    if not a.quiet:
        print(f"{'kind':6} {'tensor':52} {'max|diff|':>10} {'max|ref|':>10} {'diff/ref':>10} {'rel L2':>10}")
        for kind, name, diff, scale, rel, l2, bad in rows:
            if kind == "kbias":  # not compared: max|w| of the key rows, mt and torch
                print(f"{kind:6} {name:52} {diff:10.3e} {scale:10.3e}  (max|key bias|: mt, torch; not compared)")
                continue
            print(f"{kind:6} {name:52} {diff:10.3e} {scale:10.3e} {rel:10.3e} {l2:10.3e}{'  FAIL' if bad else ''}")
    # the worst figures per kind of tensor (layers merged)
    worst = {}
    for kind, name, diff, scale, rel, l2, bad in rows:
        if kind == "kbias":
            continue
        key = (kind, ".".join(name.split(".")[-2:]))
        w = worst.setdefault(key, [0.0, 0.0, 0.0])
        w[0], w[1], w[2] = max(w[0], diff), max(w[1], rel), max(w[2], l2)
    print(f"worst: loss rel {loss_worst:.2e}")
    for (kind, t), (diff, rel, l2) in worst.items():
        print(f"worst: {kind:6} {t:32} max|diff| {diff:.2e}  diff/ref {rel:.2e}  rel L2 {l2:.2e}")
    for f in failures:
        print("FAIL " + f)
    print(f"{'FAILED' if failures else 'OK'}: {len(names.map)} tensors (gradient and weight), {steps} losses ({a.dtype} reference)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
