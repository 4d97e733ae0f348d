#!/usr/bin/python3
"""mt-ckpt-reshard export/import against transformers itself (for the machine where
transformers is installed; CI has only torch, see hf_gpt2_logits.py).

  /usr/bin/python3 tests/reference/hf_transformers_check.py [--ckpt CKPT --format hf-gpt2|hf-llama]...
                   [--hf-dir DIR --format ...] [--keep DIR]

With no arguments it runs its own cases: GPT2LMHeadModel and LlamaForCausalLM (grouped-
query attention, tied and untied, with and without biases) built by transformers with
random weights (perturbed so that norms and biases are not 1 and 0), saved by
save_pretrained (fp32, bf16, and sharded with an index), imported by mt, then
  1. mt's log-probabilities (build/tests/mt-logprobs) against transformers' on a prompt;
  2. mt's export of the imported checkpoint loaded back by transformers' from_pretrained:
     the same log-probabilities, and weights equal to the ones transformers saved;
  3. greedy continuation: transformers' generate() against the argmax of mt's
     log-probabilities, step by step (mt-logprobs on the growing sequence).
--ckpt adds an mt checkpoint of yours (exported, then compared with transformers; with a
GPT-2 BPE tokenizer, its exported files are loaded by AutoTokenizer and checked against
mt-tokenize decode);
--hf-dir adds a Hugging Face directory of yours (e.g. a downloaded gpt2): imported, then
compared. Prints one PASS/FAIL line per check with the largest difference, then
PASS or FAIL; exits 0 or 1. Runs on the CPU in float64 (transformers' eager attention).
Builds the two mt programs it needs when they are missing (make CUDA=0).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESHARD = os.path.join(ROOT, "bin", "mt-ckpt-reshard")
LOGPROBS = os.path.join(ROOT, "build", "tests", "mt-logprobs")
TOL = 1e-4
failures = []


def run(*cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd), p.returncode, p.stderr.strip()))
    return p


def report(name, diff, tol=TOL, extra=""):
    ok = diff <= tol
    print("%s  %-72s max diff %.3g (tolerance %g)%s" % ("PASS" if ok else "FAIL", name, diff, tol, extra), flush=True)
    if not ok:
        failures.append(name)


def mt_logprobs(ckpt, ids, tmp):
    out = os.path.join(tmp, "lp.npy")
    run(LOGPROBS, ckpt, "--ids", ",".join(map(str, ids)), "-o", out)
    return np.load(out)


def hf_logprobs(model, ids):
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()
    return torch.log_softmax(logits, -1).numpy()


def diff(a, b):
    if a.shape != b.shape:
        return float("inf")
    return float(np.abs(np.maximum(a, -80) - np.maximum(b, -80)).max())


def load_hf(d):
    from transformers import AutoModelForCausalLM
    try:
        m = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float64, attn_implementation="eager")
    except TypeError:  # transformers before attn_implementation
        m = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float64)
    return m.eval()


def prompt(vocab, n=12):
    return [(i * 7919 + 11) % vocab for i in range(n)]


def check_greedy(name, model, ckpt, ids, tmp, steps=8):
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=steps, do_sample=False, num_beams=1,
                             pad_token_id=0, eos_token_id=None)[0].tolist()[len(ids):]
    seq = list(ids)
    for _ in range(steps):
        seq.append(int(mt_logprobs(ckpt, seq, tmp)[-1].argmax()))
    mine = seq[len(ids):]
    same = mine == out
    print("%s  %-72s transformers %s, mt %s" % ("PASS" if same else "FAIL", name + ": greedy tokens", out, mine),
          flush=True)
    if not same:
        failures.append(name + " greedy")


def check_tokenizer(name, out, model):
    """The exported GPT-2 tokenizer files load in transformers and agree with mt's decoder."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(out)
    text = "Hello world: the quick brown fox, 1234 times.\n  Indented"
    ids = tok.encode(text)
    mt = run(os.path.join(ROOT, "bin", "mt-tokenize"), "decode", "--tokenizer-type", "GPT2BPETokenizer",
             "--vocab-file", os.path.join(out, "vocab.json"), "--merge-file", os.path.join(out, "merges.txt"),
             *map(str, ids)).stdout
    same = tok.decode(ids) == text and mt.rstrip("\n") == text and tok.eos_token_id == model.config.eos_token_id
    print("%s  %-72s %d ids, eos %s" % ("PASS" if same else "FAIL", name + ": tokenizer files (transformers, mt decode)",
                                         len(ids), tok.eos_token_id), flush=True)
    if not same:
        failures.append(name + " tokenizer")


def case(name, model, fmt, tmp, dtype=torch.float32, shard=None):
    """transformers saves -> mt imports -> compare; mt exports -> transformers loads -> compare."""
    d = os.path.join(tmp, name)
    hf_in, ck, hf_out = d + "-hf", d + "-ck", d + "-export"
    kw = {"safe_serialization": True}
    if shard:
        kw["max_shard_size"] = shard
    model.to(dtype).save_pretrained(hf_in, **kw)
    ref = load_hf(hf_in)  # the saved values (bf16 ones included), in float64
    vocab = ref.config.vocab_size
    ids = prompt(vocab)
    run(RESHARD, "import", "-q", "--format", fmt, hf_in, ck)
    want = hf_logprobs(ref, ids)
    report(name + ": import, mt vs transformers", diff(mt_logprobs(ck, ids, tmp), want))
    run(RESHARD, "export", "-q", "--format", fmt, ck, hf_out)
    back = load_hf(hf_out)
    report(name + ": export loaded by transformers vs transformers' own", diff(hf_logprobs(back, ids), want))
    sa, sb = ref.state_dict(), back.state_dict()
    wd = max(float((sa[k] - sb[k]).abs().max()) for k in sa if k in sb and sa[k].shape == sb[k].shape)
    missing = [k for k in sa if k not in sb or sa[k].shape != sb[k].shape]
    report(name + ": exported weights equal the saved ones", wd if not missing else float("inf"), 0.0,
           " missing %s" % missing if missing else "")
    check_greedy(name, ref, ck, ids[:6], tmp)


def guarded(name, fn, *args):
    """One case's crash is that case's failure; the others still run."""
    try:
        fn(name, *args)
    except Exception as e:
        print("FAIL  %s: %s" % (name, e), flush=True)
        failures.append(name)


def perturb(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


def builtin_cases(tmp):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    g = GPT2Config(vocab_size=1000, n_positions=64, n_embd=64, n_layer=2, n_head=4, resid_pdrop=0, embd_pdrop=0,
                   attn_pdrop=0)
    guarded("gpt2-fp32", case, perturb(GPT2LMHeadModel(g), 1), "hf-gpt2", tmp)
    guarded("gpt2-bf16-sharded", case, perturb(GPT2LMHeadModel(g), 2), "hf-gpt2", tmp, torch.bfloat16, "100KB")
    for nm, kw in (("llama-gqa-untied", {}), ("llama-tied-bias", {"tie_word_embeddings": True, "attention_bias": True,
                                                                    "mlp_bias": True, "num_key_value_heads": 4})):
        base = dict(vocab_size=1000, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0)
        base.update(kw)
        guarded(nm, case, perturb(LlamaForCausalLM(LlamaConfig(**base)), 3), "hf-llama", tmp)
    guarded("llama-bf16-sharded", case, perturb(LlamaForCausalLM(LlamaConfig(
        vocab_size=1000, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, max_position_embeddings=64, rope_theta=500000.0)), 4), "hf-llama", tmp,
        torch.bfloat16, "100KB")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ckpt", action="append", default=[], help="an mt checkpoint to export and compare")
    ap.add_argument("--hf-dir", action="append", default=[], help="a Hugging Face directory to import and compare")
    ap.add_argument("--format", action="append", default=[], help="hf-gpt2 or hf-llama, one per --ckpt/--hf-dir")
    ap.add_argument("--keep", help="work here instead of a temporary directory")
    ap.add_argument("--tol", type=float, default=2e-3,
                    help="for --ckpt/--hf-dir: largest log-probability difference (2e-3: mt computes in fp32, "
                         "transformers here in fp64; a 124M GPT-2 with random weights differs by 1e-2 in fp32 "
                         "torch itself); the built-in tiny cases use 1e-4")
    a = ap.parse_args()
    if len(a.format) != len(a.ckpt) + len(a.hf_dir):
        ap.error("give one --format per --ckpt and --hf-dir")
    if not (os.access(RESHARD, os.X_OK) and os.access(LOGPROBS, os.X_OK)):
        subprocess.run(["make", "-C", ROOT, "-j4", "CUDA=0", "build/bin/mt-ckpt-reshard", "build/tests/mt-logprobs"], check=True)
    import transformers
    print("transformers %s, torch %s" % (transformers.__version__, torch.__version__))
    tmp = a.keep or tempfile.mkdtemp(prefix="mt-hf-check.")
    os.makedirs(tmp, exist_ok=True)
    try:
        if not a.ckpt and not a.hf_dir:
            builtin_cases(tmp)
        fmts = iter(a.format)
        for i, ck in enumerate(a.ckpt):
            out = os.path.join(tmp, "ckpt%d-export" % i)
            run(RESHARD, "export", "-q", "--format", next(fmts), ck, out)
            m = load_hf(out)
            ids = prompt(m.config.vocab_size)
            report("%s: export loaded by transformers vs mt" % ck, diff(hf_logprobs(m, ids), mt_logprobs(ck, ids, tmp)),
                   a.tol)
            check_greedy(ck, m, ck, ids[:6], tmp)
            if os.path.exists(os.path.join(out, "vocab.json")):
                check_tokenizer(ck, out, m)
        for i, hd in enumerate(a.hf_dir):
            ck = os.path.join(tmp, "hf%d-ck" % i)
            run(RESHARD, "import", "-q", "--format", next(fmts), hd, ck)
            m = load_hf(hd)
            ids = prompt(m.config.vocab_size)
            report("%s: import, mt vs transformers" % hd, diff(mt_logprobs(ck, ids, tmp), hf_logprobs(m, ids)), a.tol)
            check_greedy(hd, m, ck, ids[:6], tmp)
    except Exception as e:  # a crash is a failure with its reason, not a traceback to read
        print("FAIL  %s" % e)
        failures.append(str(e))
    print("FAIL (%d: %s)" % (len(failures), "; ".join(failures)) if failures else "PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
