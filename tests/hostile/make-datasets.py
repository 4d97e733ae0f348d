#!/usr/bin/env python3
"""Corrupted indexed datasets for tests/hostile.bats, the same every run.

    make-datasets.py DIR

writes DIR/good.{bin,idx} (a valid uint16 dataset of 40 documents, tokens below 200)
and one variant per case, DIR/<case>.{bin,idx}: truncations, bit flips in the header
and the arrays, wrong versions and dtypes, huge counts, lengths of 2^31-1 and -1,
pointers past the end, document indices out of order, FIFOs, directories and devices
where files belong. DIR/cases.tsv has one line per case:

    name  expect  tokens_ok

expect is what an independent reading of the format (check() below, written from
docs/formats.md, not from lib/data/idx.c) says a reader must do: 'ok' (a valid
dataset), 'data' (corrupt: exit 3) or 'io' (not a regular file, or missing: exit 4);
tokens_ok is 1 when every token of a valid dataset is below 200. Only Python's
standard library is used.
"""
import os
import random
import struct
import sys

MAGIC = b"MMIDIDX\x00\x00"
SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 8, 7: 4, 8: 2}


def base():
    rng = random.Random(1)
    lens, docs = [], [0]
    for d in range(40):
        nseq = 0 if d == 7 else (2 if d % 9 == 3 else 1)  # one empty document, a few of two sequences
        for _ in range(nseq):
            lens.append(rng.randint(20, 120))
        docs.append(len(lens))
    toks = [rng.randrange(200) for _ in range(sum(lens))]
    return lens, docs, toks


def encode(lens, ptrs, docs, dtype=8, s=None, d=None, version=1, magic=MAGIC):
    s = len(lens) if s is None else s
    d = len(docs) if d is None else d
    out = bytearray(magic + struct.pack("<Q", version % 2**64) + bytes([dtype]) + struct.pack("<QQ", s % 2**64, d % 2**64))
    out += b"".join(struct.pack("<i", v) for v in lens)
    out += b"".join(struct.pack("<Q", v % 2**64) for v in ptrs)
    out += b"".join(struct.pack("<Q", v % 2**64) for v in docs)
    return bytes(out)


def check(idx, binsize):
    """The format's rules: 'ok' or 'data'."""
    if len(idx) < 34 or idx[:9] != MAGIC:
        return "data"
    version, = struct.unpack_from("<Q", idx, 9)
    dtype = idx[17]
    s, d = struct.unpack_from("<QQ", idx, 18)
    if version != 1 or dtype not in SIZES or d < 1 or 34 + 12 * s + 8 * d > len(idx):
        return "data"
    item = SIZES[dtype]
    lens = struct.unpack_from("<%di" % s, idx, 34)
    ptrs = struct.unpack_from("<%dq" % s, idx, 34 + 4 * s)
    docs = struct.unpack_from("<%dq" % d, idx, 34 + 12 * s)
    at = 0
    for n, p in zip(lens, ptrs):
        if n < 0 or p != at:
            return "data"
        at += n * item
    if at != binsize or docs[0] != 0 or docs[-1] != s:
        return "data"
    if any(b < a for a, b in zip(docs, docs[1:])):
        return "data"
    return "ok"


def tokens_ok(idx, binb):
    dtype = idx[17]
    if dtype != 8:
        return 0
    return int(all(t < 200 for t in struct.unpack("<%dH" % (len(binb) // 2), binb)))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    lens, docs, toks = base()
    ptrs = [2 * sum(lens[:i]) for i in range(len(lens))]
    good_idx = encode(lens, ptrs, docs)
    good_bin = struct.pack("<%dH" % len(toks), *toks)
    S, D = len(lens), len(docs)
    rng = random.Random(19)
    cases = []

    def add(name, idx, binb, expect=None):
        with open(os.path.join(out, name + ".idx"), "wb") as f:
            f.write(idx)
        with open(os.path.join(out, name + ".bin"), "wb") as f:
            f.write(binb)
        e = expect or check(idx, len(binb))
        cases.append((name, e, tokens_ok(idx, binb) if e == "ok" else 0))

    def flip(b, bit):
        b = bytearray(b)
        b[bit // 8] ^= 1 << (bit % 8)
        return bytes(b)

    def put(b, off, fmt, v):
        b = bytearray(b)
        struct.pack_into(fmt, b, off, v)
        return bytes(b)

    add("good", good_idx, good_bin)
    # truncated .idx: inside the header, then inside each array
    cuts = sorted(set([0, 1, 5, 8, 9, 16, 17, 18, 25, 26, 33, 35, 34 + 4 * S - 1, 34 + 12 * S - 3, len(good_idx) - 1,
                       len(good_idx) - 8] + [rng.randrange(34, len(good_idx)) for _ in range(14)]))
    for c in cuts:
        add("idx_cut_%d" % c, good_idx[:c], good_bin)
    # the .bin too short, too long, empty
    for n in [0, 1, len(good_bin) // 2, len(good_bin) - 1, len(good_bin) - 2]:
        add("bin_cut_%d" % n, good_idx, good_bin[:n])
    add("bin_long_1", good_idx, good_bin + b"\x00")
    add("bin_long_2", good_idx, good_bin + b"\x00\x00")
    # the header: magic, version, dtype, counts
    for k in range(9):
        add("magic_%d" % k, put(good_idx, k, "<B", good_idx[k] ^ 0xFF), good_bin)
    for v in [0, 2, 256, 2**31 - 1, 2**63, 2**64 - 1]:
        add("version_%d" % v, put(good_idx, 9, "<Q", v), good_bin)
    for t in [0, 1, 2, 3, 4, 5, 6, 7, 9, 255]:
        add("dtype_%d" % t, put(good_idx, 17, "<B", t), good_bin)
    for s in [0, 1, S - 1, S + 1, 2**31 - 1, 2**31, 2**32, 2**62, 2**63 - 1, 2**64 - 1]:
        add("nseq_%d" % s, put(good_idx, 18, "<Q", s), good_bin)
    for d in [0, 1, D - 1, D + 1, 2**31 - 1, 2**63, 2**64 - 1]:
        add("ndoc_%d" % d, put(good_idx, 26, "<Q", d), good_bin)
    for k in range(48):
        add("hdr_flip_%d" % k, flip(good_idx, rng.randrange(34 * 8)), good_bin)
    # lengths
    for at in [0, S // 2, S - 1]:
        for v in [2**31 - 1, -1, -2**31, 0, lens[at] + 1, lens[at] - 1, 2**30]:
            add("len_%d_%d" % (at, v), put(good_idx, 34 + 4 * at, "<i", v), good_bin)
    # pointers
    for at in [0, 1, S // 2, S - 1]:
        for name, v in [("m1", -1), ("max", 2**63 - 1), ("end", len(good_bin)), ("past", len(good_bin) + 2),
                        ("next", ptrs[at] + 2), ("prev", ptrs[at] - 2), ("far", 2**62)]:
            add("ptr_%d_%s" % (at, name), put(good_idx, 34 + 4 * S + 8 * at, "<q", v), good_bin)
    # document indices
    for at in [0, 1, D // 2, D - 2, D - 1]:
        for name, v in [("m1", -1), ("big", S + 1), ("max", 2**63 - 1), ("min", -2**63), ("down", docs[at] - 1),
                        ("up", docs[at] + 1)]:
            add("doc_%d_%s" % (at, name), put(good_idx, 34 + 12 * S + 8 * at, "<q", v), good_bin)
    swapped = docs[:]
    swapped[5], swapped[20] = swapped[20], swapped[5]
    add("doc_swapped", encode(lens, ptrs, swapped), good_bin)
    add("doc_all_zero", encode(lens, ptrs, [0] * (D - 1) + [S]), good_bin)
    # bit flips anywhere in the arrays, and in the tokens
    for k in range(60):
        add("arr_flip_%d" % k, flip(good_idx, rng.randrange(34 * 8, len(good_idx) * 8)), good_bin)
    for k in range(12):
        add("tok_flip_%d" % k, good_idx, flip(good_bin, rng.randrange(len(good_bin) * 8)))
    # a consistent dataset with one sequence of 2^31-1 tokens: the .bin is a sparse 4 GiB file
    big_lens = lens[:-1] + [2**31 - 1]
    add("len_max_consistent", encode(big_lens, ptrs, docs), good_bin[:2 * sum(lens[:-1])])  # .bin of the wrong size
    # a trailing multimodal modes array is allowed
    add("modes", good_idx + bytes(S), good_bin, "ok")
    # not regular files, or not there
    def special(name, what_idx, what_bin):
        for ext, what in ((".idx", what_idx), (".bin", what_bin)):
            p = os.path.join(out, name + ext)
            if what == "file":
                with open(p, "wb") as f:
                    f.write(good_idx if ext == ".idx" else good_bin)
            elif what == "fifo":
                os.mkfifo(p)
            elif what == "dir":
                os.mkdir(p)
            elif what == "null":
                os.symlink("/dev/null", p)
        cases.append((name, "io", 0))
    special("fifo_idx", "fifo", "file")
    special("fifo_bin", "file", "fifo")
    special("dir_idx", "dir", "file")
    special("dir_bin", "file", "dir")
    special("dev_idx", "null", "file")
    special("missing_idx", "none", "file")
    special("missing_bin", "file", "none")
    with open(os.path.join(out, "cases.tsv"), "w") as f:
        for c in cases:
            f.write("%s\t%s\t%d\n" % c)
    print("%d cases" % len(cases), file=sys.stderr)


main()
