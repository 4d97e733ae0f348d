#!/usr/bin/env python3
"""Reference ids from Python's native tokenizers, in ref-encode.js's output format (one
line per input line; sentences joined by " | "; "!missing" for a missing key).

usage: ref-encode.py tiktoken ENCODING RANKS_DIR < corpus.jsonl
       ref-encode.py hf TOKENIZER_JSON < corpus.jsonl

tiktoken: ENCODING is gpt2, cl100k_base or o200k_base; RANKS_DIR holds the .tiktoken
files (and GPT-2's files) that fetch.sh writes, so nothing is downloaded. Lone surrogates
are replaced as tiktoken itself does. hf: Hugging Face tokenizers' Tokenizer.encode with
its post-processor (add_special_tokens=True, as Megatron's _HuggingFaceTokenizer calls it:
a template's BOS/EOS around each text; added tokens in the text are matched)."""
import hashlib
import json
import os
import shutil
import sys
import tempfile


def tiktoken_encoder(name, ranks_dir):
    cache = tempfile.mkdtemp()
    base = "https://openaipublic.blob.core.windows.net/"
    files = {base + "encodings/r50k_base.tiktoken": "r50k_base.tiktoken",
             base + "encodings/cl100k_base.tiktoken": "cl100k_base.tiktoken",
             base + "encodings/o200k_base.tiktoken": "o200k_base.tiktoken",
             base + "gpt-2/encodings/main/vocab.bpe": "gpt2-merges.txt",
             base + "gpt-2/encodings/main/encoder.json": "gpt2-vocab.json"}
    for url, f in files.items():
        if os.path.exists(os.path.join(ranks_dir, f)):
            shutil.copy(os.path.join(ranks_dir, f), os.path.join(cache, hashlib.sha1(url.encode()).hexdigest()))
    os.environ["TIKTOKEN_CACHE_DIR"] = cache
    import tiktoken
    enc = tiktoken.get_encoding(name)
    return enc.encode_ordinary  # replaces lone surrogates itself


def hf_encoder(path):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(path)

    def encode(text):
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return tok.encode(text, add_special_tokens=True).ids
    return encode


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "tiktoken":
        encode = tiktoken_encoder(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 3 and sys.argv[1] == "hf":
        encode = hf_encoder(sys.argv[2])
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    out = sys.stdout
    for line in sys.stdin.buffer:
        d = json.loads(line.decode("utf-8"))
        v = d.get("text")
        if v is None:
            out.write("!missing\n")
            continue
        parts = [v] if isinstance(v, str) else v
        out.write(" | ".join(" ".join(map(str, encode(p))) for p in parts) + "\n")


if __name__ == "__main__":
    main()
