#!/usr/bin/python3
"""An independent reference of mt-eval's text tasks: Megatron's zero-shot WikiText
perplexity and LAMBADA cloze accuracy, in PyTorch on a checkpoint's weights.

    torch_eval.py CKPT.h5 --vocab-file V --merge-file M [--wikitext F] [--lambada F]
                  [--overlapping-eval 32]

Written from the task's description (the spec's section 7), not from mt's C code: the
model is tests/reference/torch_gpt.py's (plain torch.nn, loaded by logical name from the
HDF5 file), and the tokenizer is a small GPT-2 byte-level BPE written here (byte-to-
unicode table, vocab.json, merges.txt by rank, GPT-2's pre-tokenization pattern with
Python's `re`: letters are [^\\W\\d_], digits \\d, which agrees with \\p{L}/\\p{N} on the
tests' text). Prints one JSON object per task per line, in mt-eval's metric names:

  wikitext: token_loss, token_ppl, word_ppl, token_word_ratio, tokens (targets), words,
            windows, seconds (the forward passes only), positions (windows x seq-length);
  lambada:  accuracy, accuracy_strict, examples, correct, correct_strict, and
            min_margin: the smallest gap between the best and second-best logit at any
            answer position (a decision closer than rounding could go either way).

With --hf DIR the same windows and rows go through the Hugging Face model that
mt-ckpt-reshard export wrote (transformers is installed on the GPU machine): the issue's
proof that mt-eval's perplexity equals PyTorch's on the exported model. bench/eval.sh uses
--micro-batch-size, --threads and --device for the timing.
"""
import argparse
import json
import math
import os
import re
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt import GPT, Names, read_ckpt  # noqa: E402


class BPE:
    PAT = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")

    def __init__(self, vocab_file, merge_file):
        with open(vocab_file, encoding="utf-8") as f:
            self.ids = json.load(f)
        with open(merge_file, encoding="utf-8") as f:
            lines = [l for l in f.read().split("\n") if l and not l.startswith("#version")]
        self.ranks = {tuple(l.split(" ")): i for i, l in enumerate(lines)}
        # GPT-2's printable stand-ins for the 256 bytes
        keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
        table, extra = {}, 0
        for b in range(256):
            if b in keep:
                table[b] = chr(b)
            else:
                table[b] = chr(256 + extra)
                extra += 1
        self.byte_char = table
        self.eod = self.ids["<|endoftext|>"]

    def piece(self, word):
        parts = [self.byte_char[b] for b in word.encode("utf-8")]
        while len(parts) > 1:
            best, at = None, -1
            for i in range(len(parts) - 1):
                r = self.ranks.get((parts[i], parts[i + 1]))
                if r is not None and (best is None or r < best):
                    best, at = r, i
            if best is None:
                break
            a, b = parts[at], parts[at + 1]
            merged, i = [], 0
            while i < len(parts):
                if i < len(parts) - 1 and parts[i] == a and parts[i + 1] == b:
                    merged.append(a + b)
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        return [self.ids[p] for p in parts]

    def encode(self, text):
        out = []
        for m in self.PAT.finditer(text):
            out += self.piece(m.group(0))
        return out


# Megatron's zero-shot detokenizers, as the rules of lib/text/detok.h describe them, chosen by a
# substring of the path (the first of "ptb", "wiki", "lambada" found).
def detok_wikitext(s):
    s = s.replace("s '", "s'")
    s = re.sub(r"/' [0-9]/", "/'[0-9]/", s)
    for a, b in ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."), (" : ", ": "), (" ; ", "; "), (" . ", ". "),
                 (" ! ", "! "), (" ? ", "? "), (" , ", ", ")):
        s = s.replace(a, b)
    s = re.sub(r"\(\s*([^\)]*?)\s*\)", r"(\1)", s)
    s = re.sub(r"\[\s*([^\]]*?)\s*\]", r"[\1]", s)
    s = re.sub(r"{\s*([^}]*?)\s*}", r"{\1}", s)
    s = re.sub(r"\"\s*([^\"]*?)\s*\"", r'"\1"', s)
    s = re.sub(r"'\s*([^']*?)\s*'", r"'\1'", s)
    for a, b in (("= = = =", "===="), ("= = =", "==="), ("= =", "=="), (" \u00b0 ", "\u00b0"), (" \n", "\n"),
                 ("\n ", "\n"), (" N ", " 1 "), (" 's", "'s")):
        s = s.replace(a, b)
    return s


def detok_ptb(s):
    for a, b in ((" '", "'"), (" \n", "\n"), ("\n ", "\n"), (" n't", "n't"), (" N ", "1 "), ("$ 1", "$1"),
                 ("# 1", "#1")):
        s = s.replace(a, b)
    return s


def detok_lambada(s):
    return "\n" + s.replace("\u201c", '"').replace("\u201d", '"').strip()


DETOK = {"none": lambda s: s, "wikitext": detok_wikitext, "ptb": detok_ptb, "lambada": detok_lambada}


def detok_for_path(path):
    for key, name in (("ptb", "ptb"), ("wiki", "wikitext"), ("lambada", "lambada")):
        if key in path:
            return name
    return "none"


def logits_of(model, tokens):
    """The model's logits [B, T, V] over the tokenizer's vocabulary (padding rows cut off, as
    mt-eval's text tasks and an exported model score): torch_gpt.GPT's forward up to the
    output layer (or a transformers model's logits, with --hf)."""
    if not isinstance(model, GPT):
        return model(input_ids=tokens).logits.float()[..., :model.mt_vocab_size]
    B, T = tokens.shape
    x = model.wte(tokens)
    if model.wpe is not None:
        x = x + model.wpe(torch.arange(T, device=tokens.device))
    rope = model.rope_tables(T, x.dtype) if model.rope else None
    if rope is not None:
        rope = tuple(r.to(tokens.device) for r in rope)
    for layer in model.layers:
        x = layer(x, rope)
    x = model.lnf(x)
    return F.linear(x, model.out.weight if model.out is not None else model.wte.weight)[..., :model.mt_vocab_size]


def wikitext(model, bpe, path, L, overlap, B=1, device="cpu", detok="auto"):
    raw = open(path, "rb").read().decode("utf-8")
    n_orig = len(raw.strip().split(" "))
    detok = detok_for_path(path) if detok == "auto" else detok
    toks = bpe.encode(DETOK[detok](raw))
    n_tok = len(toks)
    o = max(1, overlap or L)
    windows = max(math.ceil(max(n_tok - 1 - o, 0) / o) + 1, 1)
    rows, masks = [], []
    for k in range(windows):
        seq = toks[k * o: k * o + L + 1]
        mask = [1] * len(seq)
        seq = seq + [bpe.eod] * (L + 1 - len(seq))
        mask = (mask + [0] * (L + 1 - len(mask)))[1:]
        if k > 0 and o != L:
            mask[:-o] = [0] * (L - o)
        rows.append(seq)
        masks.append(mask)
    total, counted = 0.0, 0
    t0 = time.perf_counter()
    with torch.no_grad():
        for i in range(0, windows, B):  # B windows per forward pass, as mt-eval's --micro-batch-size
            t = torch.tensor(rows[i: i + B], device=device)
            m = torch.tensor(masks[i: i + B], dtype=torch.float64, device=device)
            lg = logits_of(model, t[:, :-1])
            ce = F.cross_entropy(lg.reshape(-1, lg.shape[-1]).double(), t[:, 1:].reshape(-1), reduction="none")
            total += float((ce * m.reshape(-1)).sum())
            counted += int(m.sum())
    seconds = time.perf_counter() - t0
    loss = total / (n_tok - 1)
    ratio = (n_tok - 1) / (n_orig - 1)
    return {"task": "wikitext", "token_loss": loss, "token_ppl": math.exp(min(20, loss)),
            "word_ppl": math.exp(min(20, loss * ratio)), "token_word_ratio": ratio, "tokens": counted,
            "words": n_orig, "windows": windows, "seconds": seconds, "positions": windows * L,
            "detokenizer": detok}


def lambada(model, bpe, path, L):
    correct, correct_strict, n, margin = 0, 0, 0, float("inf")
    with torch.no_grad():
        for line in open(path, encoding="utf-8"):
            if not line.strip():
                continue
            text = json.loads(line)["text"]
            toks = bpe.encode(text)
            w = text.split()[-1]
            cases = [(toks[:-1], toks[-1:]), (bpe.encode(text[: text.rfind(w)].strip()), bpe.encode(" " + w))]
            for strict, (ctx, ans) in enumerate(cases):
                seq = ctx + ans
                mask = [0] * len(ctx) + [1] * len(ans)
                if len(seq) > L + 1:  # mt-eval drops context from the left; Megatron cannot run these
                    cut = len(seq) - (L + 1)
                    seq, mask = seq[cut:], mask[cut:]
                mask = (mask + [0] * (L + 1 - len(mask)))[1:]
                seq = seq + [bpe.eod] * (L + 1 - len(seq))
                t = torch.tensor([seq])
                lg = logits_of(model, t[:, :-1])[0]
                top2 = lg.topk(2, dim=-1)
                ok = True
                for j, mj in enumerate(mask):
                    if mj:
                        ok &= int(top2.indices[j, 0]) == seq[j + 1]
                        margin = min(margin, float(top2.values[j, 0] - top2.values[j, 1]))
                if strict:
                    correct_strict += ok
                else:
                    correct += ok
            n += 1
    return {"task": "lambada", "accuracy": correct / n, "accuracy_strict": correct_strict / n, "examples": n,
            "correct": correct, "correct_strict": correct_strict, "min_margin": margin}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ckpt", help="an iteration's model.h5 (its config gives seq-length with --hf too)")
    ap.add_argument("--hf", metavar="DIR",
                    help="score with transformers' AutoModelForCausalLM from DIR (mt-ckpt-reshard export) instead of "
                         "the torch_gpt model")
    ap.add_argument("--vocab-file", required=True)
    ap.add_argument("--merge-file", required=True)
    ap.add_argument("--wikitext")
    ap.add_argument("--lambada")
    ap.add_argument("--overlapping-eval", type=int, default=32)
    ap.add_argument("--detokenizer", default="auto", choices=["auto"] + list(DETOK))
    ap.add_argument("--micro-batch-size", type=int, default=1, help="windows per forward pass (--wikitext)")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda on the GPU machine (--wikitext)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg, w = read_ckpt(a.ckpt)
    if a.hf:
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained(a.hf, torch_dtype=torch.float32)
    else:
        model = GPT(cfg)
        names = Names(model)
        for name in names.map:
            names.load(name, w[name])
    model.eval()
    model.to(a.device)
    model.mt_vocab_size = cfg["vocab-size"]
    bpe = BPE(a.vocab_file, a.merge_file)
    L = cfg["seq-length"]
    if a.wikitext:
        print(json.dumps(wikitext(model, bpe, a.wikitext, L, a.overlapping_eval, a.micro_batch_size, a.device,
                                  a.detokenizer)))
    if a.lambada:
        print(json.dumps(lambada(model, bpe, a.lambada, L)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
