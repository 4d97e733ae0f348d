#!/usr/bin/env python3
"""Write the seed corpus of fuzz_idx (tests/fuzz/fuzz_idx.c) into DIR: small valid
Megatron datasets of every dtype, empty ones, empty documents, documents of several
sequences, a multimodal modes array, each in the target's input format:
byte 0 flags (bit 0: size the .bin from the index; bits 1-3: vocabulary choice),
u32 LE length of the .idx, the .idx, the .bin. Written with struct only, from the
format in docs/formats.md.

usage: make-seeds.py DIR
"""
import os
import struct
import sys

FMT = {1: "B", 2: "b", 3: "h", 4: "i", 5: "q", 6: "d", 7: "f", 8: "H"}


def dataset(code, docs, modes=False):
    """docs: list of documents, each a list of sequences (lists of token values)."""
    item = struct.calcsize("<" + FMT[code])
    lens, ptrs, doc_idx, data = [], [], [0], b""
    for doc in docs:
        for seq in doc:
            ptrs.append(len(data))
            lens.append(len(seq))
            data += struct.pack(f"<{len(seq)}{FMT[code]}", *seq)
        doc_idx.append(len(lens))
    idx = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, len(lens), len(doc_idx))
    idx += struct.pack(f"<{len(lens)}i", *lens) + struct.pack(f"<{len(ptrs)}q", *ptrs)
    idx += struct.pack(f"<{len(doc_idx)}q", *doc_idx)
    if modes:
        idx += bytes(len(lens))
    assert len(data) == sum(lens) * item
    return idx, data


def unit(flags, idx, data):
    return bytes([flags]) + struct.pack("<I", len(idx)) + idx + data


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make-seeds.py DIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    seeds = {}
    for code in FMT:
        docs = [[[5, 6, 7]], [], [[1, 2], [3]], [[], [100]], [[0, 1, 2, 3, 4, 5, 6, 7]]]
        idx, data = dataset(code, docs)
        for vocab in range(8):
            seeds[f"dtype{code}-vocab{vocab}"] = unit(vocab << 1, idx, data)
        seeds[f"dtype{code}-sized"] = unit(1 | 6 << 1, idx, data[:3])
    seeds["empty"] = unit(0, *dataset(8, []))
    seeds["empty-docs"] = unit(0, *dataset(8, [[], [], []]))
    seeds["modes"] = unit(0, *dataset(8, [[[1, 2]], [[3]]], modes=True))
    seeds["one-token"] = unit(2, *dataset(1, [[[255]]]))
    seeds["negative"] = unit(4, *dataset(2, [[[-1, 1]]]))
    seeds["floats"] = unit(10, *dataset(7, [[[1.5, 2.0, -3.0]]]))
    seeds["many"] = unit(12, *dataset(8, [[[i % 300] * (i % 7)] for i in range(200)]))
    seeds["header-only"] = unit(0, b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, 0, 1), b"")
    for name, blob in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(blob)


if __name__ == "__main__":
    main()
