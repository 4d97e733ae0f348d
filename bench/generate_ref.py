#!/usr/bin/python3
"""The PyTorch side of bench/generate.sh: greedy generation with a KV cache, GPT-2 124M shape.

    generate_ref.py --batch B --prompt-len P --new-tokens N [--device cpu|cuda]
                    [--dtype float32|bfloat16] [--threads T] [--impl auto|transformers|torch]

With transformers importable (the GPU host has it), transformers' GPT2LMHeadModel.generate
with its KV cache (greedy, min_new_tokens = max_new_tokens so every row makes N tokens);
otherwise a plain-PyTorch GPT-2 with a preallocated KV cache (written here for the
benchmark: pre-norm blocks, GELU tanh, tied output, one prefill of the prompts, then
one-token steps). Random weights (std 0.02) and random prompt ids: only speed is measured.
One untimed warm-up run of 4 tokens first. Prints one JSON line: implementation, batch,
generated tokens, seconds, tokens/s, milliseconds per step.
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

L, H, NH, VOCAB, PADDED, POS = 12, 768, 12, 50257, 50304, 1024


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(H), nn.LayerNorm(H)
        self.qkv, self.proj = nn.Linear(H, 3 * H), nn.Linear(H, H)
        self.fc, self.fc2 = nn.Linear(H, 4 * H), nn.Linear(4 * H, H)

    def forward(self, x, pos0, K, V):
        B, T, _ = x.shape
        hd = H // NH
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, NH, hd).permute(2, 0, 3, 1, 4)  # each [B, NH, T, hd]
        K[:, :, pos0:pos0 + T] = k
        V[:, :, pos0:pos0 + T] = v
        kk, vv = K[:, :, :pos0 + T], V[:, :, :pos0 + T]
        s = torch.matmul(q, kk.transpose(-1, -2)) / math.sqrt(hd)
        if T > 1:  # query i (position pos0 + i) sees keys 0..pos0 + i
            mask = torch.ones(T, pos0 + T, dtype=torch.bool, device=x.device).tril(pos0)
            s = s.masked_fill(~mask, float("-inf"))
        y = torch.matmul(F.softmax(s, dim=-1), vv).transpose(1, 2).reshape(B, T, H)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class KVGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(PADDED, H), nn.Embedding(POS, H)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.lnf = nn.LayerNorm(H)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def step(self, ids, pos0, cache):
        T = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(pos0, pos0 + T, device=ids.device))
        for b, (K, V) in zip(self.blocks, cache):
            x = b(x, pos0, K, V)
        return F.linear(self.lnf(x[:, -1]), self.wte.weight)[:, :VOCAB]

    def generate(self, ids, n):
        B, P = ids.shape
        dt, dev = self.wte.weight.dtype, ids.device
        cache = [(torch.empty(B, NH, P + n, H // NH, dtype=dt, device=dev),
                  torch.empty(B, NH, P + n, H // NH, dtype=dt, device=dev)) for _ in range(L)]
        out = []
        z = self.step(ids, 0, cache)
        for i in range(n):
            t = z.argmax(-1, keepdim=True)
            out.append(t)
            if i + 1 < n:
                z = self.step(t, P + i, cache)
        return torch.cat(out, 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--impl", default="auto", choices=("auto", "transformers", "torch"))
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dtype = getattr(torch, a.dtype)
    impl = a.impl
    if impl == "auto":
        try:
            import transformers  # noqa: F401
            impl = "transformers"
        except ImportError:
            impl = "torch"
    ids = torch.randint(0, VOCAB, (a.batch, a.prompt_len), device=a.device)
    with torch.no_grad():
        if impl == "transformers":
            from transformers import GPT2Config, GPT2LMHeadModel
            cfg = GPT2Config(vocab_size=VOCAB, n_positions=POS, n_embd=H, n_layer=L, n_head=NH)
            model = GPT2LMHeadModel(cfg).to(a.device, dtype).eval()

            def run(n):
                return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                                      do_sample=False, use_cache=True, pad_token_id=0)
        else:
            model = KVGPT().to(a.device, dtype).eval()

            def run(n):
                return model.generate(ids, n)

        run(4)
        if a.device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = run(a.new_tokens)
        if a.device.startswith("cuda"):
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
    made = out.shape[1] - (a.prompt_len if impl == "transformers" else 0)
    if made != a.new_tokens:
        print(f"generate_ref.py: error: made {made} tokens a row, not {a.new_tokens}", file=sys.stderr)
        return 1
    n = a.batch * a.new_tokens
    if impl == "transformers":
        import transformers
        impl += " " + transformers.__version__ + " on torch"
    print(json.dumps({"impl": impl + (" " + torch.__version__), "device": a.device, "dtype": a.dtype, "batch": a.batch,
                      "tokens": n, "seconds": round(dt, 3), "tokens_per_s": round(n / dt, 1),
                      "ms_per_step": round(1000 * dt / a.new_tokens, 2), "threads": torch.get_num_threads()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
