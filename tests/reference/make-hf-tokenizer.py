#!/usr/bin/env python3
"""Write a Hugging Face tokenizer.json for a byte-level BPE model from GPT-2 style
vocab.json + merges.txt, in the layout the `tokenizers` library saves.

usage: make-hf-tokenizer.py VOCAB_JSON MERGES_TXT [--split REGEX] [--ignore-merges]
           [--bos TOKEN] [--eos TOKEN] [--normalizer NFC|NFKC|NFD|NFKD] > tokenizer.json

Default: GPT-2's own layout (ByteLevel pre-tokenizer with its built-in regex).
--split REGEX: the newer layout (Llama 3 style): a Split pre-tokenizer with REGEX, then
ByteLevel without a regex. --ignore-merges sets the model's ignore_merges flag.
--bos/--eos: a post-processor as Llama 3's file has it, Sequence[ByteLevel, TemplateProcessing]
whose single template is [BOS] $A [EOS] (either may be left out), the tokens' ids under
special_tokens. --normalizer: that Unicode normalization form as the file's normalizer."""
import argparse
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("vocab")
    ap.add_argument("merges")
    ap.add_argument("--split")
    ap.add_argument("--ignore-merges", action="store_true")
    ap.add_argument("--bos")
    ap.add_argument("--eos")
    ap.add_argument("--normalizer")
    a = ap.parse_args()
    with open(a.vocab, encoding="utf-8") as f:
        vocab = json.load(f)
    with open(a.merges, encoding="utf-8") as f:
        merges = [l.rstrip("\n") for l in f if l.strip() and not l.startswith("#version")]
    specials = [t for t in vocab if t.startswith("<|")]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    if a.split:
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": a.split}, "behavior": "Isolated", "invert": False},
            dict(byte_level, use_regex=False)]}
    else:
        pre = byte_level
    post = dict(byte_level, trim_offsets=False)
    if a.bos or a.eos:
        single = ([{"SpecialToken": {"id": a.bos, "type_id": 0}}] if a.bos else []) + \
            [{"Sequence": {"id": "A", "type_id": 0}}] + \
            ([{"SpecialToken": {"id": a.eos, "type_id": 0}}] if a.eos else [])
        pair = single + [{"Sequence": {"id": "B", "type_id": 1}}]
        special = {t: {"id": t, "ids": [vocab[t]], "tokens": [t]} for t in (a.bos, a.eos) if t}
        post = {"type": "Sequence", "processors": [
            post, {"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": special}]}
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": vocab[t], "content": t, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": True, "special": True} for t in specials],
        "normalizer": {"type": a.normalizer} if a.normalizer else None,
        "pre_tokenizer": pre,
        "post_processor": post,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": a.ignore_merges, "vocab": vocab, "merges": merges},
    }
    print(json.dumps(tok, ensure_ascii=False))


if __name__ == "__main__":
    main()
