#!/usr/bin/env python3
"""Reference tokenizer throughput for bench/tokenize.sh: Python tiktoken and Hugging Face
tokenizers on the same JSON-lines corpus, one thread and N threads.

usage: tokenize_ref.py CORPUS.jsonl VOCAB_JSON MERGES_TXT THREADS
Prints lines "name threads MB/s tokens" for what is installed; times the encode calls only
(the corpus is parsed first). MB are of UTF-8 text, 10^6 bytes."""
import json
import sys
import time


def texts(path):
    out = []
    with open(path, encoding="utf-8", errors="surrogatepass") as f:
        for line in f:
            d = json.loads(line)
            v = d.get("text")
            if isinstance(v, str):
                out.append(v)
            elif isinstance(v, list):
                out.extend(s for s in v if isinstance(s, str))
    # what tiktoken does with lone surrogates, done up front so every engine sees valid text
    return [t.encode("utf-16", "surrogatepass").decode("utf-16", "replace") for t in out]


def report(name, threads, nbytes, seconds, ntok):
    print(f"{name} {threads} {nbytes / seconds / 1e6:.2f} {ntok}", flush=True)


def main():
    corpus, vocab, merges, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    docs = texts(corpus)
    nbytes = sum(len(t.encode("utf-8")) for t in docs)
    try:
        import tiktoken
        for enc_name, name in (("gpt2", "tiktoken-gpt2"), ("cl100k_base", "tiktoken-cl100k")):
            try:
                enc = tiktoken.get_encoding(enc_name)
            except Exception as e:  # no network for the rank files: say so
                print(f"# {name}: {e}", file=sys.stderr)
                continue
            t = time.perf_counter()
            n = sum(len(enc.encode_ordinary(d)) for d in docs)
            report(name, 1, nbytes, time.perf_counter() - t, n)
            t = time.perf_counter()
            n = sum(len(x) for x in enc.encode_ordinary_batch(docs, num_threads=threads))
            report(name, threads, nbytes, time.perf_counter() - t, n)
    except ImportError:
        print("# tiktoken not installed", file=sys.stderr)
    try:
        from tokenizers import Tokenizer, models, pre_tokenizers, decoders
        tok = Tokenizer(models.BPE.from_file(vocab, merges))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        t = time.perf_counter()
        n = sum(len(tok.encode(d).ids) for d in docs)
        report("hf-tokenizers-gpt2", 1, nbytes, time.perf_counter() - t, n)
        import os
        os.environ["RAYON_NUM_THREADS"] = str(threads)
        t = time.perf_counter()
        n = sum(len(e.ids) for e in tok.encode_batch(docs))
        report("hf-tokenizers-gpt2", threads, nbytes, time.perf_counter() - t, n)
    except ImportError:
        print("# tokenizers not installed", file=sys.stderr)


if __name__ == "__main__":
    main()
