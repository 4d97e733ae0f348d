#!/usr/bin/python3
"""Greedy generation in PyTorch, to check mt-generate's tokens and log-probabilities against.

    torch_generate.py CKPT MT.jsonl --max-tokens N [--eod ID] [--lp-tol 1e-4]

CKPT is a checkpoint directory (its `latest` iteration), an iteration directory or a
model.h5. MT.jsonl is what `mt-generate --json --temperature 0 [--logprobs]` printed for
some prompts. For each line, the prompt's ids ("prompt_tokens") are extended greedily
by the independent model of torch_gpt.py (plain torch, no KV cache: the whole sequence
is run again for every token), choosing the argmax over the real vocabulary (the padded
ids never), stopping after N tokens or at the end-of-document id. The ids must equal
mt's "tokens" exactly. With --logprobs in mt's output, every log-probability (log-softmax
over the real vocabulary at temperature 1, of each prompt token after the first and of
each generated token) must be within --lp-tol of the reference's. Prints one line per
prompt; exits 1 on any difference, 2 on usage or input errors.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt import GPT, Names, read_ckpt  # noqa: E402


def resolve(path):
    if os.path.isdir(path):
        latest = os.path.join(path, "latest")
        if os.path.exists(latest):
            with open(latest) as f:
                path = os.path.join(path, "iter_%07d" % int(f.read().split()[0]))
        path = os.path.join(path, "model.h5")
    return path


def load(path):
    cfg, w = read_ckpt(resolve(path))
    model = GPT(cfg)
    names = Names(model)
    for name in names.map:
        names.load(name, w[name])
    model.eval()
    return cfg, model


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ckpt")
    ap.add_argument("mt_jsonl")
    ap.add_argument("--max-tokens", type=int, required=True)
    ap.add_argument("--eod", type=int, default=-1)
    ap.add_argument("--lp-tol", type=float, default=1e-4)
    a = ap.parse_args()
    try:
        cfg, model = load(a.ckpt)
        with open(a.mt_jsonl) as f:
            lines = [json.loads(x) for x in f if x.strip()]
    except (OSError, KeyError, ValueError) as e:
        print(f"torch_generate.py: error: {e}", file=sys.stderr)
        return 2
    vocab = cfg["vocab-size"]
    failures = 0
    for i, d in enumerate(lines):
        ids = list(d["prompt_tokens"])
        n0 = len(ids)
        gen_lp = []
        with torch.no_grad():
            for _ in range(a.max_tokens):
                z = model.logits(torch.tensor([ids]))[0, -1, :vocab].double()
                t = int(torch.argmax(z))
                gen_lp.append(float(F.log_softmax(z, -1)[t]))
                ids.append(t)
                if t == a.eod:
                    break
            gen = ids[n0:]
            ok = gen == d["tokens"]
            worst = 0.0
            if "logprobs" in d:
                lp = F.log_softmax(model.logits(torch.tensor([ids[:n0]]))[0, :, :vocab].double(), -1)
                ref_prompt = [float(lp[j, ids[j + 1]]) for j in range(n0 - 1)]
                if len(ref_prompt) != len(d["prompt_logprobs"]) or len(gen_lp) != len(d["logprobs"]):
                    ok = False
                    worst = float("inf")
                else:
                    for r, m in zip(ref_prompt + gen_lp, d["prompt_logprobs"] + d["logprobs"]):
                        worst = max(worst, abs(r - m))
                    ok = ok and worst <= a.lp_tol
        print(f"prompt {i}: {n0} tokens, torch {gen[:12]}{'...' if len(gen) > 12 else ''}, "
              f"{'same ids' if gen == d['tokens'] else 'mt ' + str(d['tokens'])}"
              + (f", worst |logprob diff| {worst:.2e}" if "logprobs" in d else "") + ("" if ok else "  FAIL"))
        failures += not ok
    print(f"{len(lines) - failures}/{len(lines)} prompts agree")
    return 1 if failures or not lines else 0


if __name__ == "__main__":
    sys.exit(main())
