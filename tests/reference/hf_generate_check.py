#!/usr/bin/python3
"""mt-generate's greedy ids against transformers' greedy generate on the exported model.

    hf_generate_check.py HF_DIR MT.jsonl --max-tokens N [--eod ID] [--device cpu|cuda]

For the GPU host, where transformers is installed. HF_DIR is what
`mt-ckpt-reshard export --format hf-gpt2|hf-llama CKPT HF_DIR` wrote for the checkpoint
that `mt-generate --json --temperature 0 --max-tokens N` ran on to make MT.jsonl. For each
line, transformers' AutoModelForCausalLM.generate (do_sample=False, its KV cache, fp32)
continues the line's "prompt_tokens" by N tokens, stopping at --eod if given (mt stops at
the tokenizer's end-of-document id; pass the same). The generated ids must equal mt's
"tokens". Note: transformers takes the argmax over the exported (unpadded) vocabulary, as
mt does over the real one. Exits 1 on any difference, 2 on usage or input errors.

    mt-generate --load CKPT --temperature 0 --max-tokens 32 --json "Once upon a time" \\
        "The meaning of life is" "In 1905," > mt.jsonl
    mt-ckpt-reshard export --format hf-gpt2 CKPT hf
    tests/reference/hf_generate_check.py hf mt.jsonl --max-tokens 32 --eod 50256
"""
import argparse
import json
import sys

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hf_dir")
    ap.add_argument("mt_jsonl")
    ap.add_argument("--max-tokens", type=int, required=True)
    ap.add_argument("--eod", type=int, default=None)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    try:
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained(a.hf_dir, torch_dtype=torch.float32).to(a.device).eval()
        with open(a.mt_jsonl) as f:
            lines = [json.loads(x) for x in f if x.strip()]
    except (ImportError, OSError, ValueError) as e:
        print(f"hf_generate_check.py: error: {e}", file=sys.stderr)
        return 2
    bad = 0
    for i, d in enumerate(lines):
        ids = torch.tensor([d["prompt_tokens"]], device=a.device)
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=a.max_tokens,
                                 do_sample=False, use_cache=True, eos_token_id=a.eod,
                                 pad_token_id=a.eod if a.eod is not None else 0)
        gen = out[0, ids.shape[1]:].tolist()
        same = gen == d["tokens"]
        bad += not same
        print(f"prompt {i}: {'same ids' if same else 'DIFFERENT'}: transformers {gen[:16]}, mt {d['tokens'][:16]}")
    print(f"{len(lines) - bad}/{len(lines)} prompts agree")
    return 1 if bad or not lines else 0


if __name__ == "__main__":
    sys.exit(main())
