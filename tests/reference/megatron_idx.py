#!/usr/bin/env python3
"""Read a Megatron indexed dataset (PREFIX.idx + PREFIX.bin) and print it.

An independent reader for the mt-tokenize tests, written from Megatron-LM's format
(core/datasets/indexed_dataset.py; /work/shared/specs/megatron-formats.md section 1)
with the struct module only, sharing nothing with lib/data/idx.c:

  .idx: b"MMIDIDX\\0\\0", u64 version (1), u8 dtype code, u64 S (sequences),
        u64 D (documents + 1), int32 lengths[S], int64 pointers[S], int64 doc_idx[D]
  .bin: the tokens of every sequence end to end, little-endian, no header

usage: megatron_idx.py [--header | --index] PREFIX
  (default)  each document on one line: its sequences joined by " | ", ids by spaces
             (the format of ref-encode.js and idx-dump)
  --header   "version V", "dtype CODE NAME", "sequences S", "documents D-1", one a line
  --index    "lengths ...", "pointers ...", "doc_idx ...", one a line

Before printing it checks what Megatron's reader assumes: the magic, version 1, a
known dtype code, an .idx of exactly 34 + 12 S + 8 D bytes (not multimodal), pointers
that start at 0 and advance by length x itemsize, doc_idx starting at 0, never
decreasing and ending at S, and a .bin of exactly sum(lengths) x itemsize bytes.
Exit 0, or 1 with "megatron_idx.py: error: ..." when a check fails, 2 on bad usage.
"""
import struct
import sys

MAGIC = b"MMIDIDX\x00\x00"
HEADER = struct.Struct("<9sQBQQ")  # 34 bytes
# Megatron's DType codes: (struct format letter, item size, name)
DTYPES = {
    1: ("B", 1, "uint8"),
    2: ("b", 1, "int8"),
    3: ("h", 2, "int16"),
    4: ("i", 4, "int32"),
    5: ("q", 8, "int64"),
    6: ("d", 8, "float64"),
    7: ("f", 4, "float32"),
    8: ("H", 2, "uint16"),
}


def die(msg, code=1):
    sys.stderr.write(f"megatron_idx.py: error: {msg}\n")
    sys.exit(code)


def read(prefix):
    """The checked header, arrays and tokens of PREFIX as a dict."""
    idx_path, bin_path = prefix + ".idx", prefix + ".bin"
    try:
        with open(idx_path, "rb") as f:
            idx = f.read()
        with open(bin_path, "rb") as f:
            data = f.read()
    except OSError as e:
        die(f"cannot read '{e.filename}': {e.strerror}")
    if len(idx) < HEADER.size:
        die(f"'{idx_path}': {len(idx)} bytes, shorter than the 34-byte header")
    magic, version, code, nseq, ndoc = HEADER.unpack_from(idx, 0)
    if magic != MAGIC:
        die(f"'{idx_path}': bad magic {magic!r}")
    if version != 1:
        die(f"'{idx_path}': version {version}, expected 1")
    if code not in DTYPES:
        die(f"'{idx_path}': unknown dtype code {code}")
    fmt, size, name = DTYPES[code]
    want = HEADER.size + 12 * nseq + 8 * ndoc
    if len(idx) != want:
        die(f"'{idx_path}': {len(idx)} bytes, expected 34 + 12*{nseq} + 8*{ndoc} = {want}")
    off = HEADER.size
    lengths = struct.unpack_from(f"<{nseq}i", idx, off)
    off += 4 * nseq
    pointers = struct.unpack_from(f"<{nseq}q", idx, off)
    off += 8 * nseq
    doc_idx = struct.unpack_from(f"<{ndoc}q", idx, off)

    expect = 0
    for i, (n, p) in enumerate(zip(lengths, pointers)):
        if n < 0:
            die(f"'{idx_path}': sequence {i} has length {n}")
        if p != expect:
            die(f"'{idx_path}': sequence {i} points at byte {p}, expected {expect}")
        expect += n * size
    if ndoc < 1 or doc_idx[0] != 0:
        die(f"'{idx_path}': doc_idx does not start at 0")
    if any(b < a for a, b in zip(doc_idx, doc_idx[1:])):
        die(f"'{idx_path}': doc_idx decreases")
    if doc_idx[-1] != nseq:
        die(f"'{idx_path}': doc_idx ends at {doc_idx[-1]}, expected the sequence count {nseq}")
    if len(data) != expect:
        die(f"'{bin_path}': {len(data)} bytes, the index describes {expect}")
    tokens = struct.unpack(f"<{expect // size}{fmt}", data)
    return dict(version=version, code=code, name=name, lengths=lengths, pointers=pointers,
                doc_idx=doc_idx, tokens=tokens, itemsize=size)


def main():
    args = sys.argv[1:]
    mode = "docs"
    if args and args[0] in ("--header", "--index"):
        mode = args.pop(0)[2:]
    if len(args) != 1 or args[0].startswith("-"):
        die("usage: megatron_idx.py [--header | --index] PREFIX", 2)
    ds = read(args[0])
    out = []
    if mode == "header":
        out.append(f"version {ds['version']}")
        out.append(f"dtype {ds['code']} {ds['name']}")
        out.append(f"sequences {len(ds['lengths'])}")
        out.append(f"documents {len(ds['doc_idx']) - 1}")
    elif mode == "index":
        for key in ("lengths", "pointers", "doc_idx"):
            out.append(" ".join([key] + [str(v) for v in ds[key]]))
    else:
        tokens, lengths, doc_idx = ds["tokens"], ds["lengths"], ds["doc_idx"]
        starts = [0] * (len(lengths) + 1)
        for i, n in enumerate(lengths):
            starts[i + 1] = starts[i] + n
        for d in range(len(doc_idx) - 1):
            seqs = range(doc_idx[d], doc_idx[d + 1])
            out.append(" | ".join(" ".join(map(str, tokens[starts[s]:starts[s + 1]])) for s in seqs))
    sys.stdout.write("".join(line + "\n" for line in out))


if __name__ == "__main__":
    main()
