#!/usr/bin/env python3
"""Reference ids of Megatron's SentencePiece tokenizers, from Python's sentencepiece
library (Debian's python3-sentencepiece), for the mt-tokenize tests.

usage: spm-encode.py TYPE MODEL [--key KEY] [--decode] < corpus.jsonl > ids.txt
TYPE: SentencePieceTokenizer, GPTSentencePieceTokenizer or Llama2Tokenizer.

What each type adds around the library's ids follows Megatron-LM's tokenizer.py
(_SentencePieceTokenizer, _GPTSentencePieceTokenizer, _Llama2Tokenizer):
  - SentencePieceTokenizer: <CLS> <SEP> <EOD> <MASK>, then the pad, bos and eos pieces
    (<PAD> <BOS> <EOS> where the model has no such id), appended after the model's
    pieces unless already there; tokenize() finds the earliest of these texts (the
    first in that order on a tie), encodes the text before it alone and emits its id;
    eod is <EOD>'s id;
  - GPTSentencePieceTokenizer: the library's encode_as_ids; eod is the model's eos;
  - Llama2Tokenizer: [bos] + encode(s); eod is the model's eos.
Output lines as ref-encode.js writes them: a string's ids separated by spaces, a list
of strings each sentence's ids joined by " | ", "!missing" without the key. Lone UTF-16
surrogates reach the tokenizer as U+FFFD each (as mt-tokenize repairs them).
The first line written to stderr is "vocab_size eod" of the tokenizer as Megatron builds it.
--decode: instead of ids, each string document's text after encode and Megatron's
detokenize, as raw UTF-8, each followed by a newline (as mt-tokenize decode writes it)."""
import json
import sys

import sentencepiece


class Megatron:
    def __init__(self, kind, model):
        self.kind = kind
        self.sp = sentencepiece.SentencePieceProcessor(model_file=model)
        self.vocab = {self.sp.id_to_piece(i): i for i in range(len(self.sp))}
        self.special = {}
        if kind == "SentencePieceTokenizer":
            def add(t):
                if t not in self.vocab:
                    self.vocab[t] = len(self.vocab)
                self.special[t] = self.vocab[t]

            for t in ("<CLS>", "<SEP>", "<EOD>", "<MASK>"):
                add(t)
            for getter, fallback in ((self.sp.pad_id, "<PAD>"), (self.sp.bos_id, "<BOS>"),
                                     (self.sp.eos_id, "<EOS>")):
                try:
                    add(self.sp.id_to_piece(getter()))
                except IndexError:
                    add(fallback)
            self.eod = self.special["<EOD>"]
        else:
            self.eod = self.sp.eos_id()
        self.inv_special = {v: k for k, v in self.special.items()}
        self.vocab_size = len(self.vocab)

    def tokenize(self, text):
        if self.kind == "GPTSentencePieceTokenizer":
            return self.sp.encode_as_ids(text)
        if self.kind == "Llama2Tokenizer":
            return [self.sp.bos_id()] + self.sp.encode(text)
        ids, idx = [], 0
        while True:
            indices = {}
            for token in self.special:
                try:
                    indices[token] = text[idx:].index(token)
                except ValueError:
                    continue
            if not indices:
                break
            nxt = min(indices, key=indices.get)
            at = idx + indices[nxt]
            ids.extend(self.sp.encode_as_ids(text[idx:at]))
            ids.append(self.special[nxt])
            idx = at + len(nxt)
        ids.extend(self.sp.encode_as_ids(text[idx:]))
        return ids

    def detokenize(self, ids):
        if self.kind != "SentencePieceTokenizer":
            return self.sp.decode_ids(ids)
        text, last = "", 0
        for i, t in enumerate(ids):
            if t in self.inv_special:
                text += self.sp.decode_ids(ids[last:i]) + " "
                text += self.inv_special[t] + " "
                last = i + 1
        return text + self.sp.decode_ids(ids[last:])


def clean(s):
    # lone surrogates to U+FFFD, valid pairs joined
    return s.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def main():
    args = sys.argv[1:]
    key, decode = "text", False
    if "--key" in args:
        i = args.index("--key")
        key = args[i + 1]
        del args[i:i + 2]
    if "--decode" in args:
        args.remove("--decode")
        decode = True
    if len(args) != 2:
        sys.exit(__doc__)
    tok = Megatron(args[0], args[1])
    sys.stderr.write("%d %d\n" % (tok.vocab_size, tok.eod))
    out = []
    for line in sys.stdin:
        v = json.loads(line).get(key)
        if decode:
            if isinstance(v, str):
                out.append(tok.detokenize(tok.tokenize(clean(v))))
            continue
        if v is None:
            out.append("!missing")
        elif isinstance(v, str):
            out.append(" ".join(map(str, tok.tokenize(clean(v)))))
        else:
            out.append(" | ".join(" ".join(map(str, tok.tokenize(clean(s)))) for s in v))
    sys.stdout.buffer.write("".join(o + "\n" for o in out).encode("utf-8", "surrogatepass"))


if __name__ == "__main__":
    main()
