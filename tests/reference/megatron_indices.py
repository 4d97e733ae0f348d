#!/usr/bin/python3
"""Megatron-core's GPTDataset and BlendedDataset index building, as a golden reference.

Written only from /work/shared/specs/megatron-formats.md sections 1, 3 and 4 (no Megatron
code was read or copied), to be compared with mt's C implementation. Every function says
which spec statement it implements; INDICES.md describes the CLI, its output and the points
where the spec left a choice open.

Needs numpy (Debian's /usr/bin/python3 has 1.24): numpy.random.RandomState IS the reference
for the shuffles (spec section 3, "Random numbers"); test_megatron_indices_selfcheck.py
checks that it agrees with the MT19937 / random_interval algorithm the spec describes.

CLI (one line per fact, arrays as "NAME DTYPE v0 v1 ..."; see INDICES.md):
  megatron_indices.py gpt --prefix PREFIX [--split "969, 30, 1"|none] --seq-length L
        [--seed 1234] [--num-samples train=N,valid=M,test=K] [--add-extra-token 1]
        [--no-drop-last] [--tokenizer-json JSON] [--cache-dir DIR] [--describe]
        [--print-samples K [--pad-id -1]]
  megatron_indices.py gpt-raw --lengths 5,3,9 [--num-samples N|none] --seq-length L
        [--seed 1234] [--add-extra-token 1] [--no-drop-last]
  megatron_indices.py blend --weights 0.3,0.7 --size N [--raw-weights]
  megatron_indices.py blend --exhaustive --sizes 5,7
  megatron_indices.py blend-plan --weights 1,3 --num-samples train=N,valid=M,test=K
        [--surplus 0.005]
  megatron_indices.py blend-gpt --data-path "0.3 P1 0.7 P2" [--split ...] --seq-length L
        [--seed 1234] [--num-samples ...] [--surplus 0.005] [--add-extra-token 1]
        [--no-drop-last] [--tokenizer-json JSON] [--cache-dir DIR] [--describe]
  megatron_indices.py make-idx --prefix P --lengths 5,3,9 [--docs 2,1] [--dtype-code 8]
        [--first-token 0]            (writes a synthetic P.idx/P.bin, prints nothing)
Exit 0; 1 with "megatron_indices.py: error: ..." on a bad dataset or impossible request;
2 on bad usage.
"""
import argparse
import hashlib
import json
import math
import os
import re
import struct
import sys
from collections import OrderedDict

import numpy as np

SPLIT_NAMES = ("train", "valid", "test")
INT32_MAX = np.iinfo(np.int32).max            # 2**31 - 1
UINT32_MAX = np.iinfo(np.uint32).max          # 2**32 - 1
DEFAULT_SPLIT = "969, 30, 1"                  # arguments.py default (spec section 3)
DEFAULT_SEED = 1234
DEFAULT_SURPLUS = 0.005


class Error(Exception):
    """A dataset or a request that Megatron would refuse (or loop on forever)."""


# --------------------------------------------------------------------------------------
# Section 1: the .idx file (only what the index building needs: the sequence lengths)
# --------------------------------------------------------------------------------------

IDX_MAGIC = b"MMIDIDX\x00\x00"
IDX_HEADER = struct.Struct("<9sQBQQ")          # magic, version, dtype code, S, D: 34 bytes
IDX_ITEMSIZE = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 8, 7: 4, 8: 2}


def read_idx(prefix):
    """(sequence_lengths int32[S], document_indices int64[D]) of PREFIX.idx.

    For GPT, the "documents" that --split divides and that document_index holds are the
    SEQUENCES of the file (spec section 3, "For GPT, N is the sequence count"), so
    callers use len(sequence_lengths) as N. The .bin is not read."""
    path = prefix + ".idx"
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise Error(f"cannot read '{path}': {e.strerror}")
    if len(raw) < IDX_HEADER.size:
        raise Error(f"'{path}': shorter than the 34-byte header")
    magic, version, code, nseq, ndoc = IDX_HEADER.unpack_from(raw, 0)
    if magic != IDX_MAGIC:
        raise Error(f"'{path}': bad magic {magic!r}")
    if version != 1:
        raise Error(f"'{path}': version {version}, expected 1")
    if code not in IDX_ITEMSIZE:
        raise Error(f"'{path}': unknown dtype code {code}")
    # 34 + 12 S + 8 D, or + S more bytes of modes for a multimodal file
    if len(raw) not in (34 + 12 * nseq + 8 * ndoc, 34 + 13 * nseq + 8 * ndoc):
        raise Error(f"'{path}': {len(raw)} bytes do not match S={nseq}, D={ndoc}")
    lengths = np.frombuffer(raw, dtype="<i4", count=nseq, offset=34).astype(np.int32)
    doc_idx = np.frombuffer(raw, dtype="<i8", count=ndoc, offset=34 + 12 * nseq).astype(np.int64)
    if ndoc < 1 or doc_idx[-1] != nseq:        # the load check Megatron's reader asserts
        raise Error(f"'{path}': doc_idx does not end at the sequence count {nseq}")
    return lengths, doc_idx


def write_idx(prefix, lengths, docs=None, code=8, first_token=0):
    """Write a synthetic PREFIX.idx/.bin (for tests): sequence i has lengths[i] tokens,
    the tokens counting up from first_token through the whole file (modulo 65500, so they
    fit uint16); docs: the number of sequences of each document (default: one each)."""
    lengths = [int(v) for v in lengths]
    docs = [1] * len(lengths) if docs is None else [int(v) for v in docs]
    if sum(docs) != len(lengths):
        raise Error(f"documents hold {sum(docs)} sequences, there are {len(lengths)}")
    itemsize = IDX_ITEMSIZE[code]
    np_dtype = IDX_NUMPY[code]
    total = sum(lengths)
    tokens = ((np.arange(total, dtype=np.int64) + first_token) % 65500).astype(np_dtype)
    pointers = np.zeros(len(lengths), dtype="<i8")
    if lengths:
        pointers[1:] = np.cumsum(np.asarray(lengths[:-1], dtype=np.int64)) * itemsize
    doc_idx = np.concatenate([[0], np.cumsum(docs)]).astype("<i8")
    d = os.path.dirname(prefix)
    if d:
        os.makedirs(d, exist_ok=True)
    with open(prefix + ".idx", "wb") as f:
        f.write(IDX_HEADER.pack(IDX_MAGIC, 1, code, len(lengths), len(doc_idx)))
        f.write(np.asarray(lengths, dtype="<i4").tobytes())
        f.write(pointers.tobytes())
        f.write(doc_idx.tobytes())
    with open(prefix + ".bin", "wb") as f:
        f.write(tokens.tobytes())


IDX_NUMPY = {1: "u1", 2: "i1", 3: "<i2", 4: "<i4", 5: "<i8", 6: "<f8", 7: "<f4", 8: "<u2"}


def read_tokens(prefix):
    """A function seq -> that sequence's token ids (a numpy array) from PREFIX.bin."""
    with open(prefix + ".idx", "rb") as f:
        code = IDX_HEADER.unpack(f.read(IDX_HEADER.size))[2]
    lengths, _ = read_idx(prefix)
    data = np.fromfile(prefix + ".bin", dtype=IDX_NUMPY[code])
    starts = np.concatenate([[0], np.cumsum(lengths.astype(np.int64))])
    if len(data) != starts[-1]:
        raise Error(f"'{prefix}.bin' holds {len(data)} tokens, the index {starts[-1]}")
    return lambda s: data[starts[s]:starts[s + 1]]


# --------------------------------------------------------------------------------------
# Section 3: --split into ranges
# --------------------------------------------------------------------------------------

def parse_split(split_str):
    """The normalized split vector: numbers matching [.0-9]+, padded to three with 0.0,
    each divided by their float64 sum."""
    vec = [float(tok) for tok in re.findall(r"[.0-9]+", split_str)]
    if len(vec) > 3:
        # The spec only says "pad to three"; more than three numbers is refused here.
        raise Error(f"split '{split_str}' has more than three numbers")
    vec += [0.0] * (3 - len(vec))
    total = sum(vec)            # left to right from 0: identical to numpy's sum for 3 items
    if total <= 0.0:
        raise Error(f"split '{split_str}' sums to {total}")
    return [w / total for w in vec]


def split_matrix(split_str):
    """[(start, end) or None] x 3 from the bookends [0 (an int), w0, w0+w1, w0+w1+w2].

    The bookends are accumulated left to right in float64, starting from the int 0 (so the
    first start stays the int 0 and prints as "0" in the description JSON). A split whose
    end <= start is None."""
    vec = parse_split(split_str)
    bookends = [0]
    for w in vec:
        bookends.append(bookends[-1] + w)
    return [(bookends[i], bookends[i + 1]) if bookends[i + 1] > bookends[i] else None
            for i in range(3)]


def split_ranges(split_str, n):
    """[(beg, end) or None] x 3: beg = int(round(start * N)), end = int(round(end * N)),
    Python's round (halves to even). For GPT, n is the SEQUENCE count."""
    out = []
    for span in split_matrix(split_str):
        if span is None:
            out.append(None)
        else:
            out.append((int(round(span[0] * n)), int(round(span[1] * n))))
    return out


def split_indices(split_str, n):
    """[int32 arange(beg, end) or None] x 3."""
    return [None if r is None else np.arange(r[0], r[1], dtype=np.int32)
            for r in split_ranges(split_str, n)]


# --------------------------------------------------------------------------------------
# Section 3: GPTDataset indices
# --------------------------------------------------------------------------------------

def tokens_per_epoch(lengths, indices):
    """T = sum of len[indices] (exact, int64)."""
    return int(np.sum(np.asarray(lengths, dtype=np.int64)[np.asarray(indices, dtype=np.int64)]))


def num_epochs(T, num_samples, seq_length, add_extra_token=1):
    """E = 1 if n is None, else the smallest E >= 1 with E*T >= n*L + X."""
    if num_samples is None:
        return 1
    need = num_samples * seq_length + add_extra_token
    if need <= T:
        return 1
    if T <= 0:
        raise Error(f"{num_samples} samples requested from a split of {T} tokens")
    return -(-need // T)        # ceil(need / T), exact integer arithmetic


def separate_final_epoch(E, T, num_samples, seq_length, add_extra_token=1):
    """(separate, sans, per). false if E = 1; else sans = ((E-1)*T - X)//L,
    per = (T - X)//L, and separate = (n - sans) < int(0.80 * per)."""
    if E == 1:
        return False, None, None
    L, X = seq_length, add_extra_token
    sans = ((E - 1) * T - X) // L
    per = (T - X) // L
    threshold = int(0.80 * per)          # float64 multiply, then truncate toward zero
    return (num_samples - sans) < threshold, sans, per


def build_document_index(indices, E, rs, separate):
    """indices tiled E times epoch-major, cast to int32 and shuffled once as a whole with
    rs; with separate_final_epoch, concat(build(E-1), build(1)): two shuffles in that
    order, from the same RandomState."""
    if separate:
        return np.concatenate([build_document_index(indices, E - 1, rs, False),
                               build_document_index(indices, 1, rs, False)])
    doc = np.tile(np.asarray(indices), E).astype(np.int32)
    rs.shuffle(doc)
    return doc


def sample_index_dtype(document_index, lengths):
    """int32 if max(len(doc_idx), max len) <= INT32_MAX, else int64. "max len" is taken
    over every sequence of the dataset (the lengths array the helper is given)."""
    biggest = max(len(document_index), int(np.max(lengths)) if len(lengths) else 0)
    return np.int32 if biggest <= INT32_MAX else np.int64


def num_sample_rows(E, T, seq_length, add_extra_token=1, drop_last=True):
    """num_si = (E*T - X)//L when dropping the last partial sample, else
    ceil((float)(E*T - X) / L) in C++ SINGLE precision: the int64 is converted to a
    float32 (round to nearest even), divided by L as a float32, and ceil'ed as a float32.
    (Megatron's observable quirk, reproduced on purpose: above 2**24 tokens this can
    differ from the exact ceiling by one or more samples, either way.)"""
    total = E * T - add_extra_token
    if drop_last:
        return total // seq_length
    f_total = np.array([total], dtype=np.int64).astype(np.float32)[0]   # direct int64->float
    f_len = np.array([seq_length], dtype=np.int64).astype(np.float32)[0]
    return int(np.ceil(np.float32(f_total / f_len)))


def build_sample_index(lengths, document_index, seq_length, E, T, add_extra_token=1,
                       drop_last=True):
    """The [num_si + 1, 2] array of (position in document_index, offset in that sequence)
    at which each sample starts, following helpers.cpp's loop as the spec gives it:

        out[0]=(0,0); d=0; off=0
        for k=1..num_si:
          rem=L+X
          while rem!=0:
            dl=len[doc_idx[d]]-off; rem-=dl
            if rem<=0: off+=rem+dl-X; rem=0
            elif d==len(doc_idx)-1: off=len[doc_idx[d]]-X; break
            else: d++; off=0
          out[k]=(d,off)
    """
    L, X = seq_length, add_extra_token
    num_si = num_sample_rows(E, T, L, X, drop_last)
    if num_si < 0:
        raise Error(f"{T} tokens are fewer than the extra token(s) X={X}")
    dtype = sample_index_dtype(document_index, lengths)
    seq_len = [int(v) for v in lengths]              # python ints: no overflow worries
    doc = [int(v) for v in document_index]
    last = len(doc) - 1
    out = np.zeros((num_si + 1, 2), dtype=dtype)
    d = 0
    off = 0
    for k in range(1, num_si + 1):
        rem = L + X
        while rem != 0:
            dl = seq_len[doc[d]] - off
            rem -= dl
            if rem <= 0:
                off += rem + dl - X
                rem = 0
            elif d == last:
                off = seq_len[doc[d]] - X
                break
            else:
                d += 1
                off = 0
        out[k, 0] = d
        out[k, 1] = off
    return out


def shuffle_index_dtype(total):
    """uint32, or int64 if total >= 2**32 - 2."""
    return np.int64 if total >= UINT32_MAX - 1 else np.uint32


def build_shuffle_index(sans, total, rs):
    """total = rows - 1. With separate_final_epoch (sans is not None): arange(0, sans) and
    arange(sans, total) shuffled separately (in that order) and concatenated; otherwise
    arange(total) shuffled. rs continues from the document_index shuffles."""
    dtype = shuffle_index_dtype(total)
    if sans is None:
        idx = np.arange(0, total, dtype=dtype)
        rs.shuffle(idx)
        return idx
    first = np.arange(0, sans, dtype=dtype)
    rs.shuffle(first)
    rest = np.arange(sans, total, dtype=dtype)
    rs.shuffle(rest)
    return np.concatenate([first, rest])


def gpt_plan(lengths, indices, num_samples, seq_length, add_extra_token=1):
    """The scalars that decide the indices: T, E, separate, sans, per."""
    T = tokens_per_epoch(lengths, indices)
    E = num_epochs(T, num_samples, seq_length, add_extra_token)
    separate, sans, per = separate_final_epoch(E, T, num_samples, seq_length, add_extra_token)
    return dict(T=T, E=E, separate=separate, sans=sans, per=per)


def gpt_indices(lengths, indices, num_samples, seq_length, seed, add_extra_token=1,
                drop_last=True):
    """(document_index int32, sample_index int32|int64 [rows, 2], shuffle_index
    uint32|int64) of one GPTDataset split.

    lengths: every sequence length of the dataset; indices: the split's int32 sequence
    indices; num_samples: n or None (one epoch). One RandomState(seed) is used for the
    document_index shuffle(s) first, then the shuffle_index shuffle(s)."""
    lengths = np.asarray(lengths)
    indices = np.asarray(indices, dtype=np.int32)
    if len(indices) == 0:
        raise Error("the split has no sequences")
    p = gpt_plan(lengths, indices, num_samples, seq_length, add_extra_token)
    rs = np.random.RandomState(seed)
    document_index = build_document_index(indices, p["E"], rs, p["separate"])
    sample_index = build_sample_index(lengths, document_index, seq_length, p["E"], p["T"],
                                      add_extra_token, drop_last)
    total = sample_index.shape[0] - 1
    shuffle_index = build_shuffle_index(p["sans"] if p["separate"] else None, total, rs)
    return document_index, sample_index, shuffle_index


def sample_tokens(tokens_of, document_index, sample_index, shuffle_index, idx,
                  seq_length, add_extra_token=1, pad=-1):
    """The L+X token ids of sample idx ("Fetching sample idx"): tokens_of(seq) gives a
    sequence's token list. Returns (text, n_real): text padded with pad to L+X."""
    i = int(shuffle_index[idx])
    d0, o0 = (int(v) for v in sample_index[i])
    d1, o1 = (int(v) for v in sample_index[i + 1])
    X = add_extra_token
    if d0 == d1:
        text = list(tokens_of(int(document_index[d0]))[o0:o1 + X])
    else:
        text = list(tokens_of(int(document_index[d0]))[o0:])
        for d in range(d0 + 1, d1):
            text += list(tokens_of(int(document_index[d])))
        text += list(tokens_of(int(document_index[d1]))[:o1 + X])
    n_real = len(text)
    return text + [pad] * (seq_length + X - n_real), n_real


# --------------------------------------------------------------------------------------
# Section 3: the cache (description JSON, md5 names, NPY files)
# --------------------------------------------------------------------------------------

def gpt_description(dataset_path, num_samples, index_split, seed, seq_length, split,
                    matrix, tokenizer):
    """The GPTDataset's identifiers, keys in the spec's order. matrix: split_matrix(split)
    (a list of 3 (start, end) or None), or None for per-split datasets; tokenizer: the
    tokenizer's unique_identifiers (a dict, kept in its order). X is not part of it."""
    return OrderedDict([
        ("class", "GPTDataset"),
        ("dataset_path", dataset_path),
        ("num_samples", num_samples),
        ("index_split", index_split),
        ("random_seed", seed),
        ("sequence_length", seq_length),
        ("split", split),
        ("split_matrix", None if matrix is None else [None if s is None else list(s)
                                                      for s in matrix]),
        ("tokenizer", tokenizer),
    ])


def blended_description(children, split_name, weights, size):
    """The BlendedDataset's identifiers: class, datasets (each child's identifiers),
    split, weights, size."""
    return OrderedDict([
        ("class", "BlendedDataset"),
        ("datasets", list(children)),
        ("split", split_name),
        ("weights", list(weights)),
        ("size", size),
    ])


def description_text(desc):
    """json.dumps(desc, indent=4): no trailing newline, ", " never used between items
    (Python 3 with indent uses "," then a newline), ": " between key and value,
    non-ASCII written as \\uXXXX (ensure_ascii)."""
    return json.dumps(desc, indent=4)


def description_md5(text):
    """H = MD5 hex of the UTF-8 description."""
    return hashlib.md5(text.encode("utf-8")).hexdigest()


def default_cache_dir(path_prefix):
    """{path_prefix}/cache/GPTDataset_indices, used when --data-cache-path is not set."""
    return os.path.join(path_prefix, "cache", "GPTDataset_indices")


def cache_paths(cache_dir, md5, cls, split_name, names):
    """{dir}/{H}-{cls}-{split}-{name} for each name."""
    return [os.path.join(cache_dir, f"{md5}-{cls}-{split_name}-{name}") for name in names]


def write_cache(cache_dir, cls, split_name, text, arrays):
    """Write {H}-{cls}-{split}-description.txt (the JSON, no trailing newline) and one
    {H}-{cls}-{split}-{name}.npy per (name, array), with numpy.save (NPY v1.0)."""
    md5 = description_md5(text)
    os.makedirs(cache_dir, exist_ok=True)
    (desc_path,) = cache_paths(cache_dir, md5, cls, split_name, ["description.txt"])
    with open(desc_path, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    for name, arr in arrays:
        (path,) = cache_paths(cache_dir, md5, cls, split_name, [name + ".npy"])
        np.save(path, arr, allow_pickle=False)
    return md5


# --------------------------------------------------------------------------------------
# Section 4: blending
# --------------------------------------------------------------------------------------

def parse_data_path(tokens):
    """[(weight or None, path)]: an odd number of tokens are all paths; an even number are
    (weight, path) pairs, unless some weight fails float(), in which case all are paths."""
    tokens = list(tokens)
    if len(tokens) % 2 == 0 and tokens:
        try:
            weights = [float(t) for t in tokens[0::2]]
        except ValueError:
            weights = None
        if weights is not None:
            return list(zip(weights, tokens[1::2]))
    return [(None, t) for t in tokens]


def normalize(weights):
    """w / sum(w) as float64, the sum taken by numpy.sum (see INDICES.md: for fewer than 8
    weights this is a plain left-to-right sum)."""
    w = np.asarray(weights, dtype=np.float64)
    return (w / np.sum(w)).tolist()


def blend_plan(weights, size, surplus=DEFAULT_SURPLUS):
    """The weighted builder for one split of size_s samples:
        w = normalize(weights)
        target[d] = int(ceil(size_s * w[d]))
        mid-level n[d] = int(ceil(ceil(size_s * w[d]) * (1 + surplus)))
        blended size = sum(target)
    Returns dict(weights=w, target=[...], num_samples=[...], size=...)."""
    if size is None:
        raise Error("a weighted blend needs a sample count for the split")
    w = normalize(weights)
    target = [int(math.ceil(size * wd)) for wd in w]
    mid = [int(math.ceil(math.ceil(size * wd) * (1 + surplus))) for wd in w]
    return dict(weights=w, target=target, num_samples=mid, size=sum(target))


def blend_indices(weights, size):
    """(dataset_index int16[size], dataset_sample_index int64[size]) from helpers.cpp's
    weighted argmax, weights used exactly as given (the BlendedDataset renormalizes them
    first when it has a size; see blended_weights):

        cnt[*]=0
        for s in 0..size-1:
          x=max((double)s,1.0); best=0; eb=w[0]*x-cnt[0]
          for d=1..: e=w[d]*x-cnt[d]; if e>eb {best=d; eb=e}
          dataset_index[s]=best; dataset_sample_index[s]=cnt[best]++

    Every operation is one IEEE double operation (no fused multiply-add)."""
    w = [float(v) for v in weights]
    if not 0 < len(w) < 32767:
        raise Error(f"{len(w)} datasets: a blend needs 1 to 32766")
    cnt = [0] * len(w)
    dataset_index = np.zeros(size, dtype=np.int16)
    dataset_sample_index = np.zeros(size, dtype=np.int64)
    for s in range(size):
        x = max(float(s), 1.0)
        best = 0
        eb = w[0] * x - float(cnt[0])
        for d in range(1, len(w)):
            e = w[d] * x - float(cnt[d])
            if e > eb:
                best = d
                eb = e
        dataset_index[s] = best
        dataset_sample_index[s] = cnt[best]
        cnt[best] += 1
    return dataset_index, dataset_sample_index


def blend_indices_exhaustive(sizes):
    """The exhaustive variant: w[d] = n[d] / sum(n); the same argmax (x = max(s, 1.0)), but
    only over datasets not yet exhausted, in ascending order, with a strict ">" (the first
    such dataset is the starting best); a dataset drops out once it has given n[d]
    samples; the length is sum(n)."""
    n = [int(v) for v in sizes]
    if not 0 < len(n) < 32767:
        raise Error(f"{len(n)} datasets: a blend needs 1 to 32766")
    total = sum(n)
    w = [float(v) / float(total) for v in n]   # int64 / int64 as doubles
    cnt = [0] * len(n)
    dataset_index = np.zeros(total, dtype=np.int16)
    dataset_sample_index = np.zeros(total, dtype=np.int64)
    for s in range(total):
        x = max(float(s), 1.0)
        best = -1
        eb = 0.0
        for d in range(len(n)):
            if cnt[d] >= n[d]:
                continue
            e = w[d] * x - float(cnt[d])
            if best < 0 or e > eb:
                best = d
                eb = e
        dataset_index[s] = best
        dataset_sample_index[s] = cnt[best]
        cnt[best] += 1
    return dataset_index, dataset_sample_index


def check_blend(dataset_index, dataset_sample_index, child_lengths):
    """IndexError if the blend asks any dataset for more samples than it has."""
    for d, have in enumerate(child_lengths):
        mask = dataset_index == d
        if mask.any() and int(dataset_sample_index[mask].max()) >= have:
            raise IndexError(f"the blend asks dataset {d} for sample "
                             f"{int(dataset_sample_index[mask].max())}, it has {have}")


# --------------------------------------------------------------------------------------
# Whole splits (what the CLI prints)
# --------------------------------------------------------------------------------------

def build_gpt_split(prefix, lengths, split, split_name, num_samples, seq_length, seed,
                    add_extra_token=1, drop_last=True, tokenizer=None):
    """One GPTDataset split of the dataset at prefix. split: the raw --split string, or
    None for a per-split dataset (the whole file). Returns None if the split is None,
    else a dict with range, plan, description (text, md5) and arrays (None if the range
    is empty)."""
    n_seq = len(lengths)
    if split is None:
        rng, matrix = (0, n_seq), None
    else:
        rng = split_ranges(split, n_seq)[SPLIT_NAMES.index(split_name)]
        matrix = split_matrix(split)
        if rng is None:
            return None
    desc = gpt_description(prefix, num_samples, split_name, seed, seq_length, split,
                           matrix, {} if tokenizer is None else tokenizer)
    text = description_text(desc)
    out = dict(name=split_name, range=rng, num_samples=num_samples, identifiers=desc,
               text=text, md5=description_md5(text), plan=None, arrays=None)
    if rng[1] > rng[0]:
        indices = np.arange(rng[0], rng[1], dtype=np.int32)
        out["plan"] = gpt_plan(lengths, indices, num_samples, seq_length, add_extra_token)
        out["arrays"] = gpt_indices(lengths, indices, num_samples, seq_length, seed,
                                    add_extra_token, drop_last)
    return out


def fmt_array(name, arr):
    """"NAME DTYPE v0 v1 ..." (a 2-D array flattened row-major)."""
    return " ".join([name, np.dtype(arr.dtype).name] + [str(v) for v in np.ravel(arr).tolist()])


def gpt_lines(res, with_description=False):
    lines = [f"split {res['name']} {res['range'][0]} {res['range'][1]}"]
    lines.append(f"num_samples {'none' if res['num_samples'] is None else res['num_samples']}")
    lines.append(f"description_md5 {res['md5']}")
    if with_description:
        lines.append("description " + json.dumps(res["text"]))
    if res["arrays"] is None:
        lines.append("empty")
        return lines
    p = res["plan"]
    lines.append(f"tokens_per_epoch {p['T']}")
    lines.append(f"num_epochs {p['E']}")
    lines.append(f"separate_final_epoch {int(p['separate'])}")
    for name, arr in zip(("document_index", "sample_index", "shuffle_index"), res["arrays"]):
        lines.append(fmt_array(name, arr))
    return lines


def gpt_cache(res, cache_dir):
    if cache_dir is not None and res["arrays"] is not None:
        write_cache(cache_dir, "GPTDataset", res["name"], res["text"],
                    zip(("document_index", "sample_index", "shuffle_index"), res["arrays"]))


# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------

def parse_counts(text, names=SPLIT_NAMES):
    """"train=N,valid=M,test=K" -> {name: int or None}; missing names and "none" are None."""
    out = {name: None for name in names}
    if not text:
        return out
    for item in text.split(","):
        key, sep, val = item.partition("=")
        key = key.strip()
        if not sep or key not in names:
            raise argparse.ArgumentTypeError(f"bad --num-samples item '{item}'")
        val = val.strip()
        out[key] = None if val.lower() == "none" else int(val)
    return out


def split_keys(text):
    """The split names that "train=N,..." mentions."""
    return {item.partition("=")[0].strip() for item in (text or "").split(",")}


def int_list(text):
    return [int(v) for v in text.split(",") if v.strip() != ""]


def float_list(text):
    return [float(v) for v in text.split(",") if v.strip() != ""]


def tokenizer_arg(text):
    val = json.loads(text, object_pairs_hook=OrderedDict)
    if not isinstance(val, dict):
        raise argparse.ArgumentTypeError("--tokenizer-json must be a JSON object")
    return val


def cmd_gpt(a):
    lengths, _ = read_idx(a.prefix)
    split = None if a.split.lower() == "none" else a.split
    counts = parse_counts(a.num_samples)
    given = split_keys(a.num_samples)
    lines = []
    for name in SPLIT_NAMES:
        if split is None and a.num_samples is not None and name not in given:
            continue                      # per-split mode: only the splits asked for
        drop_last = not (a.no_drop_last and name == "valid")
        res = build_gpt_split(a.prefix, lengths, split, name, counts[name], a.seq_length,
                              a.seed, a.add_extra_token, drop_last, a.tokenizer_json)
        if res is None:
            lines.append(f"split {name} none")
            continue
        lines += gpt_lines(res, a.describe)
        gpt_cache(res, a.cache_dir)
        if getattr(a, "print_samples", 0) and res["arrays"] is not None:
            tokens_of = read_tokens(a.prefix)
            doc, si, sh = res["arrays"]
            for k in range(min(a.print_samples, len(sh))):
                text, _ = sample_tokens(tokens_of, doc, si, sh, k, a.seq_length,
                                        a.add_extra_token, a.pad_id)
                lines.append(" ".join(["sample", str(k)] + [str(int(v)) for v in text]))
    return lines


def cmd_gpt_raw(a):
    lengths = np.asarray(int_list(a.lengths), dtype=np.int32)
    n = None if a.num_samples.lower() == "none" else int(a.num_samples)
    indices = np.arange(len(lengths), dtype=np.int32)
    p = gpt_plan(lengths, indices, n, a.seq_length, a.add_extra_token)
    arrays = gpt_indices(lengths, indices, n, a.seq_length, a.seed, a.add_extra_token,
                         not a.no_drop_last)
    lines = [f"tokens_per_epoch {p['T']}", f"num_epochs {p['E']}",
             f"separate_final_epoch {int(p['separate'])}"]
    for name, arr in zip(("document_index", "sample_index", "shuffle_index"), arrays):
        lines.append(fmt_array(name, arr))
    return lines


def cmd_blend(a):
    if a.exhaustive:
        if a.sizes is None:
            raise Error("--exhaustive needs --sizes")
        di, dsi = blend_indices_exhaustive(int_list(a.sizes))
    else:
        if a.weights is None or a.size is None:
            raise Error("blend needs --weights and --size (or --exhaustive --sizes)")
        w = float_list(a.weights)
        di, dsi = blend_indices(w if a.raw_weights else normalize(w), a.size)
    return [fmt_array("dataset_index", di), fmt_array("dataset_sample_index", dsi)]


def cmd_blend_plan(a):
    counts = parse_counts(a.num_samples)
    lines = []
    for name in SPLIT_NAMES:
        if counts[name] is None:
            lines.append(f"split {name} none")
            continue
        plan = blend_plan(float_list(a.weights), counts[name], a.surplus)
        lines.append(f"split {name} {counts[name]}")
        lines.append("weights " + " ".join(repr(w) for w in plan["weights"]))
        lines.append("target " + " ".join(map(str, plan["target"])))
        lines.append("num_samples " + " ".join(map(str, plan["num_samples"])))
        lines.append(f"size {plan['size']}")
    return lines


def cmd_blend_gpt(a):
    pairs = parse_data_path(a.data_path.split())
    if not pairs:
        raise Error("--data-path is empty")
    split = None if a.split.lower() == "none" else a.split
    counts = parse_counts(a.num_samples)
    weighted = pairs[0][0] is not None
    if len(pairs) == 1 and (not weighted or split is None):
        # one path with no weight, or one path of a per-split blend: a plain GPTDataset
        a.prefix = pairs[0][1]
        return cmd_gpt(a)
    files = [read_idx(path)[0] for _, path in pairs]
    lines = []
    given = split_keys(a.num_samples)
    for name in SPLIT_NAMES:
        if split is None and a.num_samples is not None and name not in given:
            continue                      # per-split mode: only the splits asked for
        drop_last = not (a.no_drop_last and name == "valid")
        size = counts[name]
        if split is not None and split_matrix(split)[SPLIT_NAMES.index(name)] is None:
            # the split vector is the same for every file: no dataset for this split
            lines.append(f"blend {name} none")
            continue
        if weighted:
            plan = blend_plan([w for w, _ in pairs], size, a.surplus)
            child_n = plan["num_samples"]
        else:
            child_n = [None] * len(pairs)     # one epoch each
        children = [build_gpt_split(path, files[d], split, name, child_n[d], a.seq_length,
                                    a.seed, a.add_extra_token, drop_last, a.tokenizer_json)
                    for d, (_, path) in enumerate(pairs)]
        if any(c["arrays"] is None for c in children):
            raise Error(f"a dataset has no sequences in the {name} split")
        child_len = [len(c["arrays"][2]) for c in children]
        if weighted:
            weights, bsize = plan["weights"], plan["size"]
        else:
            weights = child_len                  # the weights are the datasets' lengths
            bsize = None if size is None else min(size, sum(child_len))
        if bsize is not None:
            weights = normalize(weights)          # renormalized when there is a size
            di, dsi = blend_indices(weights, bsize)
        else:
            di, dsi = blend_indices_exhaustive(child_len)
        check_blend(di, dsi, child_len)
        desc = blended_description([c["identifiers"] for c in children], name, weights, bsize)
        text = description_text(desc)
        lines.append(f"blend {name}")
        lines.append("weights " + " ".join(repr(w) for w in weights))
        lines.append(f"size {'none' if bsize is None else bsize}")
        for d, c in enumerate(children):
            lines.append(f"dataset {d} {pairs[d][1]}")
            if weighted:
                lines.append(f"target {plan['target'][d]}")
            lines += gpt_lines(c, a.describe)
            gpt_cache(c, a.cache_dir)
        lines.append(f"blend_description_md5 {description_md5(text)}")
        if a.describe:
            lines.append("blend_description " + json.dumps(text))
        lines.append(fmt_array("dataset_index", di))
        lines.append(fmt_array("dataset_sample_index", dsi))
        if a.cache_dir is not None:
            write_cache(a.cache_dir, "BlendedDataset", name, text,
                        [("dataset_index", di), ("dataset_sample_index", dsi)])
    return lines


def cmd_make_idx(a):
    write_idx(a.prefix, int_list(a.lengths), None if a.docs is None else int_list(a.docs),
              a.dtype_code, a.first_token)
    return []


def main(argv=None):
    ap = argparse.ArgumentParser(prog="megatron_indices.py",
                                 description="Megatron-core GPT/Blended dataset indices")
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common_gpt(p):
        p.add_argument("--seq-length", type=int, required=True)
        p.add_argument("--seed", type=int, default=DEFAULT_SEED)
        p.add_argument("--add-extra-token", type=int, default=1, choices=(0, 1))
        p.add_argument("--no-drop-last", action="store_true")

    def common_files(p):
        p.add_argument("--split", default=DEFAULT_SPLIT)
        p.add_argument("--num-samples", default=None)
        p.add_argument("--tokenizer-json", type=tokenizer_arg, default=OrderedDict())
        p.add_argument("--cache-dir", default=None)
        p.add_argument("--describe", action="store_true")

    p = sub.add_parser("gpt")
    p.add_argument("--prefix", required=True)
    p.add_argument("--print-samples", type=int, default=0, metavar="K")
    p.add_argument("--pad-id", type=int, default=-1)
    common_gpt(p)
    common_files(p)
    p = sub.add_parser("gpt-raw")
    p.add_argument("--lengths", required=True)
    p.add_argument("--num-samples", default="none")
    common_gpt(p)
    p = sub.add_parser("blend")
    p.add_argument("--weights")
    p.add_argument("--size", type=int)
    p.add_argument("--raw-weights", action="store_true")
    p.add_argument("--exhaustive", action="store_true")
    p.add_argument("--sizes")
    p = sub.add_parser("blend-plan")
    p.add_argument("--weights", required=True)
    p.add_argument("--num-samples", required=True)
    p.add_argument("--surplus", type=float, default=DEFAULT_SURPLUS)
    p = sub.add_parser("blend-gpt")
    p.add_argument("--data-path", required=True)
    p.add_argument("--surplus", type=float, default=DEFAULT_SURPLUS)
    common_gpt(p)
    common_files(p)

    p = sub.add_parser("make-idx")
    p.add_argument("--prefix", required=True)
    p.add_argument("--lengths", required=True)
    p.add_argument("--docs")
    p.add_argument("--dtype-code", type=int, default=8, choices=sorted(IDX_ITEMSIZE))
    p.add_argument("--first-token", type=int, default=0)

    a = ap.parse_args(argv)
    if hasattr(a, "seq_length") and a.seq_length < 1:
        ap.error("--seq-length must be at least 1")
    try:
        if a.cmd in ("gpt", "blend-plan", "blend-gpt") and a.num_samples is not None:
            parse_counts(a.num_samples)
        lines = {"gpt": cmd_gpt, "gpt-raw": cmd_gpt_raw, "blend": cmd_blend,
                 "blend-plan": cmd_blend_plan, "blend-gpt": cmd_blend_gpt,
                 "make-idx": cmd_make_idx}[a.cmd](a)
    except argparse.ArgumentTypeError as e:
        ap.error(str(e))
    except (Error, IndexError, ValueError) as e:
        sys.stderr.write(f"megatron_indices.py: error: {e}\n")
        return 1
    sys.stdout.write("".join(line + "\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
