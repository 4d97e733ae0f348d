#!/usr/bin/python3
"""An independent reference of mt-eval's --multiple-choice: lm-evaluation-harness's
multiple_choice scoring in PyTorch on a checkpoint's weights.

    torch_choice.py CKPT.h5 --vocab-file V --merge-file M FILE.jsonl

Written from lm-evaluation-harness's description of its tasks and of loglikelihood
requests, not from mt's C code: the model is torch_gpt.py's and the GPT-2 tokenizer
torch_eval.py's. Per question: the task's context (HellaSwag: preprocess(activity_label +
": " + ctx_a + " " + ctx_b.capitalize()), endings preprocessed; PIQA and ARC: "Question:
... \\nAnswer:"; or "context" as given), one request (context, " " + choice) per choice;
_encode_pair moves the context's trailing whitespace to the continuation and takes the
continuation's tokens as those of context + continuation after the context's own; an
empty context is the end-of-text token; the last seq_length + 1 tokens go in. The
score is the summed log-softmax (over the tokenizer's ids) of the continuation tokens;
acc is argmax(lls) == gold, acc_norm argmax(lls / len(choice)) == gold (numpy's argmax).

Prints one JSON object: acc, acc_norm, examples, correct, correct_norm, lls (per question,
the list of sums) and min_gap (the smallest difference between the two best scores, raw
or normalized, of any question: a decision closer than rounding could go either way).
"""
import argparse
import json
import os
import re
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_eval import BPE, logits_of  # noqa: E402
from torch_gpt import GPT, Names, read_ckpt  # noqa: E402


def hellaswag_preprocess(text):
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    text = text.replace("  ", " ")
    return text


def question(d):
    if "endings" in d and "context" not in d:
        if all(k in d for k in ("activity_label", "ctx_a", "ctx_b")):
            ctx = d["activity_label"] + ": " + d["ctx_a"] + " " + d["ctx_b"].capitalize()
        else:
            ctx = d["ctx"]
        return hellaswag_preprocess(ctx), [hellaswag_preprocess(e) for e in d["endings"]], int(d["label"])
    if "goal" in d:
        return "Question: " + d["goal"] + "\nAnswer:", [d["sol1"], d["sol2"]], int(d["label"])
    if "question" in d and isinstance(d.get("choices"), dict):
        return ("Question: " + d["question"] + "\nAnswer:", d["choices"]["text"],
                d["choices"]["label"].index(d["answerKey"]))
    ctx = d["context"] if "context" in d else d["query"]
    choices = d["choices"] if "choices" in d else d["endings"]
    gold = d["label"] if "label" in d else d["gold"]
    return ctx, choices, int(gold)


def encode_pair(bpe, context, continuation):
    if context == "":
        return [bpe.eod], bpe.encode(continuation)
    n = len(context) - len(context.rstrip())
    if n:
        continuation = context[-n:] + continuation
        context = context[:-n]
    whole = bpe.encode(context + continuation)
    ctx = bpe.encode(context)
    return ctx, whole[len(ctx):]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ckpt")
    ap.add_argument("file")
    ap.add_argument("--vocab-file", required=True)
    ap.add_argument("--merge-file", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    cfg, w = read_ckpt(a.ckpt)
    model = GPT(cfg)
    names = Names(model)
    for name in names.map:
        names.load(name, w[name])
    model.eval()
    model.mt_vocab_size = cfg["vocab-size"]
    bpe = BPE(a.vocab_file, a.merge_file)
    L = cfg["seq-length"]
    correct = correct_norm = n = 0
    all_lls, gap = [], float("inf")
    with torch.no_grad():
        for line in open(a.file, encoding="utf-8"):
            if not line.strip():
                continue
            ctx, choices, gold = question(json.loads(line))
            lls = []
            for ch in choices:
                c, cont = encode_pair(bpe, ctx, " " + ch)
                seq = (c + cont)[-(L + 1):]
                inp = torch.tensor([seq[:-1]])
                lp = F.log_softmax(logits_of(model, inp)[0].double(), dim=-1)
                k = len(cont)
                tgt = torch.tensor(seq[-k:])
                lls.append(float(lp[len(seq) - 1 - k:len(seq) - 1].gather(1, tgt[:, None]).sum()))
            lls = np.array(lls)
            norm = lls / np.array([float(len(ch)) for ch in choices])
            for v in (lls, norm):
                s = np.sort(v)
                if len(s) > 1:
                    gap = min(gap, float(s[-1] - s[-2]))
            correct += int(np.argmax(lls) == gold)
            correct_norm += int(np.argmax(norm) == gold)
            n += 1
            all_lls.append(lls.tolist())
    print(json.dumps({"acc": correct / n, "acc_norm": correct_norm / n, "examples": n, "correct": correct,
                      "correct_norm": correct_norm, "min_gap": gap, "lls": all_lls}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
