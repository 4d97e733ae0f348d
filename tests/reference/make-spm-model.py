#!/usr/bin/env python3
"""Train a small SentencePiece model for the tests with Python's sentencepiece trainer
(Debian's python3-sentencepiece), deterministically (fixed seed, one thread).

usage: make-spm-model.py {llama|unigram} CORPUS.jsonl PREFIX   (writes PREFIX.model)

The training text is every third line of the corpus whose "text" is a string of valid
UTF-8, cut into lines. Two kinds:
  llama    BPE as Llama 2's tokenizer.model is made: byte fallback, digits split, no
           normalization, whitespace kept, bos 1, eos 2, no pad; plus a user-defined
           piece "<|user|>" (matched in text by the library);
  unigram  the library's defaults (unigram, NFKC normalization, no byte fallback, so
           rare characters become <unk>), with a pad piece at id 3."""
import json
import os
import sys
import tempfile

import sentencepiece as spm


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("llama", "unigram"):
        sys.exit(__doc__)
    kind, corpus, prefix = sys.argv[1:]
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", delete=False) as f:
        with open(corpus, encoding="utf-8") as c:
            for i, line in enumerate(c):
                t = json.loads(line).get("text")
                if i % 3 or not isinstance(t, str):
                    continue
                try:
                    t.encode("utf-8")
                except UnicodeEncodeError:
                    continue
                for piece in t.split("\n"):
                    if piece.strip():
                        f.write(piece + "\n")
        text = f.name
    try:
        spm.set_random_generator_seed(1)
        common = dict(input=text, model_prefix=prefix, num_threads=1, minloglevel=2)
        if kind == "llama":
            spm.SentencePieceTrainer.train(
                **common, model_type="bpe", vocab_size=1500, character_coverage=0.99, byte_fallback=True,
                split_digits=True, allow_whitespace_only_pieces=True, remove_extra_whitespaces=False,
                normalization_rule_name="identity", user_defined_symbols=["<|user|>"])
        else:
            spm.SentencePieceTrainer.train(**common, model_type="unigram", vocab_size=1000, pad_id=3)
    finally:
        os.unlink(text)
    os.unlink(prefix + ".vocab")


if __name__ == "__main__":
    main()
