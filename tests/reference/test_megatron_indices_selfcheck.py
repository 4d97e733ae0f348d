#!/usr/bin/python3
"""Self-checks of megatron_indices.py against the invariants of the spec
(/work/shared/specs/megatron-formats.md sections 1, 3, 4), hand-worked examples, and an
independent pure-Python MT19937 that replays every shuffle.

usage: test_megatron_indices_selfcheck.py [--configs N] [--seed S] [--quick]
Prints one summary line per group and "selfcheck: OK (...)"; exit 1 on the first
failure with "selfcheck: FAIL: ...".
"""
import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import megatron_indices as mi  # noqa: E402

CLI = os.path.join(HERE, "megatron_indices.py")


def fail(msg):
    sys.stdout.write(f"selfcheck: FAIL: {msg}\n")
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


# --------------------------------------------------------------------------------------
# An independent MT19937 + random_interval + shuffle, written from the spec's description
# ("Random numbers", section 3), to show that numpy's RandomState is what the spec says.
# --------------------------------------------------------------------------------------

class PureMT:
    N, M = 624, 397

    def __init__(self, seed):
        mt = [0] * self.N
        mt[0] = seed & 0xFFFFFFFF                       # init_genrand(seed)
        for i in range(1, self.N):
            mt[i] = (1812433253 * (mt[i - 1] ^ (mt[i - 1] >> 30)) + i) & 0xFFFFFFFF
        self.mt, self.pos = mt, self.N

    def _twist(self):
        mt = self.mt
        for i in range(self.N):
            y = (mt[i] & 0x80000000) | (mt[(i + 1) % self.N] & 0x7FFFFFFF)
            v = mt[(i + self.M) % self.N] ^ (y >> 1)
            mt[i] = v ^ 0x9908B0DF if y & 1 else v
        self.pos = 0

    def genrand32(self):
        if self.pos >= self.N:
            self._twist()
        y = self.mt[self.pos]
        self.pos += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        y ^= y >> 18
        return y

    def random_interval(self, m):
        if m == 0:
            return 0
        mask = m
        for sh in (1, 2, 4, 8, 16, 32):
            mask |= mask >> sh                           # every lower bit set
        if m <= 0xFFFFFFFF:
            while True:
                v = self.genrand32() & mask
                if v <= m:
                    return v
        while True:
            hi = self.genrand32()
            lo = self.genrand32()
            v = ((hi << 32) | lo) & mask
            if v <= m:
                return v

    def shuffle(self, a):
        """In place on a Python list: for i = n-1 down to 1, swap a[i], a[random_interval(i)]."""
        for i in range(len(a) - 1, 0, -1):
            j = self.random_interval(i)
            a[i], a[j] = a[j], a[i]
        return a


def pure_gpt_indices(lengths, indices, n, L, seed, X, drop_last):
    """document_index and shuffle_index replayed with PureMT, sample_index from the
    stream-position characterization (not helpers.cpp's loop):
      sample k (k >= 1) row = where the stream position e_k - X lies, e_k = k*L + X:
        if e_k <= E*T: d = the first position in document_index whose cumulative end
        >= e_k, off = e_k - X - (cumulative start of d);
        else (the partial last sample ran off the end): d = last, off = len[last] - X."""
    T = int(sum(int(lengths[i]) for i in indices))
    E = 1
    if n is not None:
        while E * T < n * L + X:
            E += 1
    sep = False
    if E > 1:
        sans = ((E - 1) * T - X) // L
        per = (T - X) // L
        sep = (n - sans) < int(0.8 * per)
    rng = PureMT(seed)
    idx = [int(v) for v in indices]
    if sep:
        doc = rng.shuffle(idx * (E - 1)) + rng.shuffle(list(idx))
    else:
        doc = rng.shuffle(idx * E)
    num_si = mi.num_sample_rows(E, T, L, X, drop_last)
    cum_end = np.cumsum([int(lengths[d]) for d in doc])
    rows = [(0, 0)]
    for k in range(1, num_si + 1):
        e = k * L + X
        if e <= E * T:
            d = int(np.searchsorted(cum_end, e, side="left"))
            start = int(cum_end[d]) - int(lengths[doc[d]])
            rows.append((d, e - X - start))
        else:
            rows.append((len(doc) - 1, int(lengths[doc[-1]]) - X))
    if sep:
        shuf = rng.shuffle(list(range(0, sans))) + rng.shuffle(list(range(sans, num_si)))
    else:
        shuf = rng.shuffle(list(range(num_si)))
    return dict(T=T, E=E, sep=sep, doc=doc, rows=rows, shuf=shuf)


def numpy_sum_model(a):
    """numpy.sum of a contiguous float64 array (numpy 1.24's pairwise_sum), which
    megatron_indices.normalize uses for w / sum(w): fewer than 8 items are added left to
    right from 0.0; 8..128 items use 8 running sums r[j] (r[j] = a[j], then r[j] += a[i+j]
    for each further whole block of 8), combined as ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)),
    then the leftover items added one by one; more than 128: split at n2 = n/2 rounded
    down to a multiple of 8, and add the two halves' sums."""
    n = len(a)
    if n < 8:
        res = 0.0
        for x in a:
            res += x
        return res
    if n <= 128:
        r = list(a[:8])
        i = 8
        while i < n - n % 8:
            for j in range(8):
                r[j] += a[i + j]
            i += 8
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        while i < n:
            res += a[i]
            i += 1
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return numpy_sum_model(a[:n2]) + numpy_sum_model(a[n2:])


def check_numpy_sum(r, count):
    for _ in range(count):
        n = r.randrange(1, 700)
        a = [r.random() * r.choice([1, 1e-3, 1e3]) for _ in range(n)]
        check(float(np.sum(np.asarray(a))) == numpy_sum_model(a), f"numpy.sum model, n={n}")
        w = [x / numpy_sum_model(a) for x in a]
        check(mi.normalize(a) == w, "normalize = w / numpy_sum_model(w)")
    print(f"sum: numpy.sum (used by normalize) == the documented pairwise model, {count} arrays")


# --------------------------------------------------------------------------------------
# 1. numpy's RandomState is the spec's MT19937 shuffle
# --------------------------------------------------------------------------------------

def check_rng(r, count):
    # First outputs of MT19937 seeded with init_genrand(5489) are the reference values
    # of the original mt19937ar.c (its default seed): 3499211612 581869302 3890346734.
    check([PureMT(5489).genrand32() for _ in range(1)] == [3499211612], "MT19937 5489")
    g = PureMT(5489)
    check([g.genrand32() for _ in range(3)] == [3499211612, 581869302, 3890346734],
          "MT19937 reference outputs")
    for t in range(count):
        seed = r.choice([0, 1, 1234, 2**32 - 1, r.randrange(2**32)])
        sizes = [r.randrange(0, 700) for _ in range(r.randrange(1, 4))]
        dtypes = [r.choice([np.int32, np.uint32, np.int64]) for _ in sizes]
        rs = np.random.RandomState(seed)
        pm = PureMT(seed)
        for n, dt in zip(sizes, dtypes):      # chained shuffles share one state
            a = np.arange(n, dtype=dt)
            rs.shuffle(a)
            b = pm.shuffle(list(range(n)))
            check(a.tolist() == b, f"numpy shuffle != spec shuffle (seed {seed}, sizes {sizes})")
    print(f"rng: numpy RandomState.shuffle == spec MT19937/random_interval shuffle, {count} chains")


# --------------------------------------------------------------------------------------
# 2. Hand-worked examples
# --------------------------------------------------------------------------------------

def check_hand():
    # --- split_ranges ---------------------------------------------------------------
    # "969, 30, 1": [969, 30, 1]/1000 = [0.969, 0.03, 0.001]; bookends [0, 0.969,
    # 0.969+0.03 = 0.999 (as a double it prints 0.999), 1.0]; x1000 -> 0, 969, 999, 1000.
    check(mi.split_ranges("969, 30, 1", 1000) == [(0, 969), (969, 999), (999, 1000)], "split 969")
    check(mi.split_matrix("969, 30, 1") == [(0, 0.969), (0.969, 0.999), (0.999, 1.0)], "matrix")
    # "1,1" -> [0.5, 0.5, 0.0]; bookends [0, 0.5, 1.0, 1.0]; N=5: round(2.5) = 2 (half to
    # even), round(5.0) = 5; the third split has end <= start: None.
    check(mi.split_ranges("1,1", 5) == [(0, 2), (2, 5), None], "split 1,1 N=5")
    # N=7: round(3.5) = 4 (half to even).
    check(mi.split_ranges("1,1", 7) == [(0, 4), (4, 7), None], "split 1,1 N=7")
    # "6,3,1": bookends [0, 0.6, 0.6+0.3 = 0.8999999999999999, 0.9999999999999999]; N=10:
    # round(8.999999999999998) = 9, round(9.999999999999998) = 10.
    m = mi.split_matrix("6,3,1")
    check(m[1][1] == 0.8999999999999999 and m[2][1] == 0.9999999999999999, "6,3,1 bookends")
    check(mi.split_ranges("6,3,1", 10) == [(0, 6), (6, 9), (9, 10)], "split 6,3,1")
    # "100,0,0": [(0, N), None, None]; the numbers regex also takes "98.5 / 1.5":
    check(mi.split_ranges("100,0,0", 7) == [(0, 7), None, None], "split 100,0,0")
    check(mi.split_ranges("98.5 / 1.5", 200) == [(0, 197), (197, 200), None], "split 98.5")
    idx = mi.split_indices("969, 30, 1", 1000)
    check(idx[1].dtype == np.int32 and idx[1].tolist() == list(range(969, 999)), "indices")

    # --- epochs and separate_final_epoch -------------------------------------------
    # lengths [10,10,10]: T = 30; L = 4, X = 1; per = (30-1)//4 = 7, int(0.8*7) =
    # int(5.6000000000000005) = 5.
    #   n = 11: n*L+X = 45 -> E = 2 (30 < 45 <= 60); sans = (30-1)//4 = 7; 11-7 = 4 < 5:
    #           separate.
    #   n = 12: 49 -> E = 2; 12-7 = 5, not < 5: one shuffle.
    #   n = 7:  29 <= 30 -> E = 1: never separate.
    L3 = np.array([10, 10, 10], np.int32)
    I3 = np.arange(3, dtype=np.int32)
    for n, E, sep in ((11, 2, True), (12, 2, False), (7, 1, False), (None, 1, False), (0, 1, False)):
        p = mi.gpt_plan(L3, I3, n, 4, 1)
        check((p["E"], p["separate"]) == (E, sep), f"plan n={n}: {p}")
    # n=11, separate: document_index = shuffle(tile(I,1)) ++ shuffle(I): each half is a
    # permutation of [0,1,2]; num_si = (60-1)//4 = 14; shuffle_index = shuffle(0..6) ++
    # shuffle(7..13).
    d, s, sh = mi.gpt_indices(L3, I3, 11, 4, 1234)
    check(sorted(d[:3].tolist()) == [0, 1, 2] and sorted(d[3:].tolist()) == [0, 1, 2], "sep doc")
    check(s.shape == (15, 2) and sorted(sh[:7].tolist()) == list(range(7))
          and sorted(sh[7:].tolist()) == list(range(7, 14)), "sep shuffle")

    # --- sample_index, by hand -------------------------------------------------------
    # lengths [3,5,2], document order [0,1,2], L = 4, X = 1; T = 10; drop: num_si =
    # (10-1)//4 = 2.
    #   k=1: rem=5; d=0: dl=3, rem=2 > 0 -> d=1, off=0; dl=5, rem=-3 <= 0 ->
    #        off = 0 + (-3) + 5 - 1 = 1.                          row (1,1) (stream pos 4)
    #   k=2: rem=5; d=1: dl=5-1=4, rem=1 > 0 -> d=2, off=0; dl=2, rem=-1 ->
    #        off = 0 - 1 + 2 - 1 = 0.                             row (2,0) (stream pos 8)
    # no drop: num_si = ceil(9/4 as float) = 3;
    #   k=3: rem=5; d=2: dl=2, rem=3 > 0 and d is the last -> off = 2-1 = 1. row (2,1)
    lens = np.array([3, 5, 2], np.int32)
    doc = np.array([0, 1, 2], np.int32)
    s = mi.build_sample_index(lens, doc, 4, 1, 10, 1, True)
    check(s.dtype == np.int32 and s.tolist() == [[0, 0], [1, 1], [2, 0]], f"sample_index {s}")
    s = mi.build_sample_index(lens, doc, 4, 1, 10, 1, False)
    check(s.tolist() == [[0, 0], [1, 1], [2, 0], [2, 1]], f"sample_index nodrop {s}")
    # X = 0: samples do not overlap. k=1: rem=4; d=0: rem=1 -> d=1; dl=5, rem=-4 ->
    # off = 0-4+5-0 = 1; k=2: rem=4; dl=4, rem=0 -> off = 1+0+4 = 5 (the end of doc 1).
    s = mi.build_sample_index(lens, doc, 4, 1, 10, 0, True)
    check(s.tolist() == [[0, 0], [1, 1], [1, 5]], f"sample_index X=0 {s}")

    # --- the whole GPT split with seed 1234 ----------------------------------------
    # MT19937(1234)'s first outputs are 822569775, 2137449171, 2671936806, 3512589365,
    # 1880026316.
    # Shuffling [0,1,2]: i=2: mask 3: 822569775&3 = 3 > 2 rejected, 2137449171&3 = 3
    # rejected, 2671936806&3 = 2 -> j=2 (no change); i=1: mask 1: 3512589365&1 = 1 -> j=1.
    # So document_index = [0,1,2] and sample_index is the one above.
    g = PureMT(1234)
    check([g.genrand32() for _ in range(5)] ==
          [822569775, 2137449171, 2671936806, 3512589365, 1880026316],
          "MT19937(1234) outputs")
    d, s, sh = mi.gpt_indices(lens, np.arange(3, dtype=np.int32), 2, 4, 1234)
    check(d.dtype == np.int32 and d.tolist() == [0, 1, 2], f"doc {d}")
    check(s.tolist() == [[0, 0], [1, 1], [2, 0]], f"si {s}")
    check(sh.dtype == np.uint32 and sorted(sh.tolist()) == [0, 1], f"shuffle {sh}")
    # shuffle_index continues the same stream: shuffling [0,1]: i=1: mask 1: the 5th
    # output 1880026316 & 1 = 0 -> j=0, swap: [1, 0].
    check(sh.tolist() == [1, 0] == PureMT_after(1234, 4, [0, 1]), "shuffle continues the stream")

    # --- single-precision num_si (no drop) -------------------------------------------
    # 2**24+1 = 16777217 is not a float32: it becomes 16777216, so ceil(./1) = 16777216,
    # one less than the exact ceiling; 16777219 becomes 16777220, one MORE.
    check(mi.num_sample_rows(1, 16777218, 1, 1, False) == 16777216, "float32 down")
    check(mi.num_sample_rows(1, 16777220, 1, 1, False) == 16777220, "float32 up")
    check(mi.num_sample_rows(1, 16777218, 1, 1, True) == 16777217, "drop exact")
    check(mi.num_sample_rows(3, 10, 4, 1, False) == 8, "ceil(29/4) = 8")

    # --- dtype rules ------------------------------------------------------------------
    check(mi.shuffle_index_dtype(2**32 - 3) == np.uint32, "uint32 below 2^32-2")
    check(mi.shuffle_index_dtype(2**32 - 2) == np.int64, "int64 at 2^32-2")
    check(mi.sample_index_dtype(np.zeros(5), np.array([2**31 - 1], np.int64)) == np.int32, "si32")
    check(mi.sample_index_dtype(np.zeros(5), np.array([2**31], np.int64)) == np.int64, "si64")

    # --- blending ----------------------------------------------------------------------
    # w = (0.3, 0.7), size 5 (x = max(s,1)):
    #   s=0 x=1: e = (0.3, 0.7)               -> 1, cnt (0,1)
    #   s=1 x=1: e = (0.3, 0.7-1 = -0.3)      -> 0, cnt (1,1)
    #   s=2 x=2: e = (0.6-1, 1.4-1 = 0.4)     -> 1, cnt (1,2)
    #   s=3 x=3: e = (0.9-1, 2.1-2 = 0.1)     -> 1, cnt (1,3)
    #   s=4 x=4: e = (1.2-1 = 0.2, 2.8-3)     -> 0, cnt (2,3)
    di, dsi = mi.blend_indices([0.3, 0.7], 5)
    check(di.dtype == np.int16 and dsi.dtype == np.int64, "blend dtypes")
    check(di.tolist() == [1, 0, 1, 1, 0] and dsi.tolist() == [0, 0, 1, 2, 1], f"blend {di} {dsi}")
    # ties go to the lowest index (strict >): w = (0.5, 0.5): s=0 x=1: (0.5, 0.5) -> 0;
    # s=1 x=1: (-0.5, 0.5) -> 1; s=2 x=2: (0, 0) -> 0; s=3: (-0.5, 0.5) -> 1.
    di, dsi = mi.blend_indices([0.5, 0.5], 4)
    check(di.tolist() == [0, 1, 0, 1] and dsi.tolist() == [0, 0, 1, 1], "blend ties")
    # exhaustive (1, 2): w = (1/3, 2/3): s=0: (.33, .67) -> 1; s=1: x=1: (.33, -.33) -> 0,
    # dataset 0 is done; s=2: only dataset 1 -> 1.
    di, dsi = mi.blend_indices_exhaustive([1, 2])
    check(di.tolist() == [1, 0, 1] and dsi.tolist() == [0, 0, 1], f"exhaustive {di} {dsi}")
    # plan: weights (1, 3) -> (0.25, 0.75).
    #   size 1000: targets ceil(250) = 250, ceil(750) = 750; mid ceil(250*1.005 =
    #   251.24999999999997) = 252, ceil(753.75) = 754; blended size 1000.
    #   size 10: targets ceil(2.5) = 3, ceil(7.5) = 8 (blended size 11 > 10);
    #   mid ceil(3.015) = 4, ceil(8.04) = 9.
    p = mi.blend_plan([1, 3], 1000)
    check((p["weights"], p["target"], p["num_samples"], p["size"]) ==
          ([0.25, 0.75], [250, 750], [252, 754], 1000), f"plan 1000 {p}")
    p = mi.blend_plan([1, 3], 10)
    check((p["target"], p["num_samples"], p["size"]) == ([3, 8], [4, 9], 11), f"plan 10 {p}")
    check(mi.parse_data_path(["0.3", "a", "0.7", "b"]) == [(0.3, "a"), (0.7, "b")], "path w")
    check(mi.parse_data_path(["a", "b"]) == [(None, "a"), (None, "b")], "path 2 paths")
    check(mi.parse_data_path(["1", "a", "b"]) == [(None, "1"), (None, "a"), (None, "b")], "odd")

    # --- description JSON ------------------------------------------------------------
    want = """{
    "class": "GPTDataset",
    "dataset_path": "data/x_text_document",
    "num_samples": 100,
    "index_split": "valid",
    "random_seed": 1234,
    "sequence_length": 1024,
    "split": "969, 30, 1",
    "split_matrix": [
        [
            0,
            0.969
        ],
        [
            0.969,
            0.999
        ],
        [
            0.999,
            1.0
        ]
    ],
    "tokenizer": {
        "class": "T",
        "vocab": "\\u00e9"
    }
}"""
    desc = mi.gpt_description("data/x_text_document", 100, "valid", 1234, 1024, "969, 30, 1",
                              mi.split_matrix("969, 30, 1"), {"class": "T", "vocab": "\u00e9"})
    text = mi.description_text(desc)
    check(text == want, "description text:\n" + text)
    check(mi.description_md5(text) == hashlib.md5(want.encode()).hexdigest(), "md5")
    d2 = mi.gpt_description("p", None, "train", 1, 8, None, None, {})
    check(mi.description_text(d2).endswith('"split": null,\n    "split_matrix": null,\n'
                                           '    "tokenizer": {}\n}'), "nulls")
    check('"num_samples": null' in mi.description_text(d2), "num_samples null")
    b = mi.blended_description([d2], "train", [0.25, 0.75], 11)
    bt = mi.description_text(b)
    check(bt.startswith('{\n    "class": "BlendedDataset",\n    "datasets": [\n        {\n'
                        '            "class": "GPTDataset",') and
          bt.endswith('    "split": "train",\n    "weights": [\n        0.25,\n        0.75\n'
                      '    ],\n    "size": 11\n}'), "blend description:\n" + bt)
    print("hand: split_ranges, epochs/separate, sample_index, seed-1234 split, float32 num_si, "
          "dtypes, blend, exhaustive, plan, data-path, descriptions: OK")


def PureMT_after(seed, skip, arr):
    g = PureMT(seed)
    for _ in range(skip):
        g.genrand32()
    return g.shuffle(list(arr))


# --------------------------------------------------------------------------------------
# 3. Random GPT configurations
# --------------------------------------------------------------------------------------

def random_gpt_config(r):
    nseq = r.randrange(1, 40)
    zeros = r.random() < 0.15
    lengths = [r.randrange(0 if zeros else 1, r.choice([3, 10, 60])) for _ in range(nseq)]
    if sum(lengths) == 0:
        lengths[0] = 1
    L = r.randrange(1, 17)
    X = r.choice([1, 1, 1, 0])
    beg = r.randrange(0, nseq)
    end = r.randrange(beg + 1, nseq + 1)
    T = sum(lengths[beg:end])
    if T < X + 1:
        return None
    per = (T - X) // L
    mode = r.random()
    if mode < 0.1:
        n = None
    elif mode < 0.5:                                  # near an epoch boundary
        ep = r.randrange(1, 6)
        n = max(0, ep * per + r.randrange(-3, 4))
    else:
        n = r.randrange(0, 6 * max(per, 1) + 5)
    return dict(lengths=lengths, L=L, X=X, beg=beg, end=end, n=n,
                seed=r.randrange(2**32), drop=r.random() < 0.75)


def check_gpt_config(c, stats):
    lengths = np.asarray(c["lengths"], np.int32)
    idx = np.arange(c["beg"], c["end"], dtype=np.int32)
    L, X, n = c["L"], c["X"], c["n"]
    doc, si, sh = mi.gpt_indices(lengths, idx, n, L, c["seed"], X, c["drop"])
    p = mi.gpt_plan(lengths, idx, n, L, X)
    T, E = p["T"], p["E"]
    tag = f"config {c}"

    # epochs: enough tokens, and minimal
    if n is not None:
        check(E * T >= n * L + X and (E == 1 or (E - 1) * T < n * L + X), "E not minimal " + tag)
    else:
        check(E == 1, "E with n None " + tag)
    # document_index
    check(doc.dtype == np.int32 and len(doc) == E * len(idx), "doc length " + tag)
    counts = np.bincount(doc - c["beg"], minlength=len(idx))
    check((counts == E).all(), "doc multiset " + tag)
    if p["separate"]:
        tail = np.sort(doc[-len(idx):])
        check((tail == idx).all(), "last epoch not a permutation " + tag)
    # sample_index shape, dtype, monotonic rows, offsets in range
    num_si = si.shape[0] - 1
    check(si.dtype == np.int32 and si.shape[1] == 2, "si dtype " + tag)
    check(num_si == (mi.num_sample_rows(E, T, L, X, c["drop"])), "num_si " + tag)
    if c["drop"]:
        check(num_si == (E * T - X) // L, "num_si drop " + tag)
    else:
        check(num_si == -(-(E * T - X) // L), "num_si nodrop (small: exact) " + tag)
    check(tuple(si[0]) == (0, 0), "si[0] " + tag)
    rows = [tuple(v) for v in si.tolist()]
    check(all(a <= b for a, b in zip(rows, rows[1:])), "si rows not monotonic " + tag)
    for d, off in rows[1:]:
        ln = int(lengths[doc[d]])
        check(0 <= d < len(doc) and (-X <= off <= ln), "offset out of range " + tag)
    # shuffle_index: a permutation, split at sans when separate
    check(sh.dtype == np.uint32 and len(sh) == num_si, "shuffle dtype/length " + tag)
    check(sorted(sh.tolist()) == list(range(num_si)), "shuffle not a permutation " + tag)
    if p["separate"]:
        sans = p["sans"]
        check(sorted(sh[:sans].tolist()) == list(range(sans)), "separate shuffle halves " + tag)
    # independent replay (pure MT19937 + stream-position sample_index)
    ref = pure_gpt_indices(lengths, idx, n, L, c["seed"], X, c["drop"])
    check((ref["E"], ref["sep"]) == (E, p["separate"]), "replay plan " + tag)
    check(ref["doc"] == doc.tolist(), "replay document_index " + tag)
    check(ref["rows"] == rows, f"replay sample_index {ref['rows']} vs {rows} " + tag)
    check(ref["shuf"] == sh.tolist(), "replay shuffle_index " + tag)
    # every sample is L+X consecutive tokens of the epoch stream, overlapping by X
    offs = np.concatenate([[0], np.cumsum(lengths.astype(np.int64))])
    tokens_of = lambda s: list(range(offs[s], offs[s + 1]))   # distinct ids per token
    stream = [t for s in doc for t in tokens_of(int(s))]
    for k in range(num_si):
        text, real = mi.sample_tokens(tokens_of, doc, si, sh, k, L, X)
        i = int(sh[k])
        want = stream[i * L: i * L + L + X]
        check(len(text) == L + X, "sample length " + tag)
        check(text[:real] == want and real == len(want), f"sample {k} tokens " + tag)
        if c["drop"] or i < num_si - 1:
            check(real == L + X, f"sample {k} short " + tag)
    stats["configs"] += 1
    stats["multi_epoch"] += E > 1
    stats["separate"] += p["separate"]
    stats["nodrop"] += not c["drop"]
    stats["samples"] += num_si


# --------------------------------------------------------------------------------------
# 4. Random blends
# --------------------------------------------------------------------------------------

def check_blends(r, count):
    """Prefix proportions. With dev_d(s) = cnt_d(s) - w_d*s after s samples:
      - a dataset is never more than one sample ahead: dev <= 1 (it is only picked when
        w_d*s - cnt_d >= 0, the largest deficit, which is >= 0 since the deficits sum to 0);
      - so a dataset is never more than D-1 behind (the deficits sum to zero);
      - with two datasets, both bounds give |dev| <= 1: "within one sample".
    With three or more the greedy can fall more than one sample behind (1.9 seen with 9
    datasets): that is the algorithm, not a bug, so only the bounds above are checked."""
    worst_ahead = 0.0
    worst_behind = {}
    over_mid = 0
    for _ in range(count):
        D = r.choice([1, 2, 2, 3, 5, 9, 20])
        raw = [r.choice([r.random(), r.randrange(1, 100), 1e-3 + r.random() * 1e-2]) for _ in range(D)]
        size = r.randrange(1, 3000)
        plan = mi.blend_plan(raw, size)
        check(plan["size"] == sum(plan["target"]) and plan["size"] >= size, "plan size")
        for w, t, m in zip(plan["weights"], plan["target"], plan["num_samples"]):
            check(t >= size * w and t - 1 < size * w and m >= t, "plan target/mid")
        w = mi.normalize(plan["weights"])            # the BlendedDataset renormalizes
        di, dsi = mi.blend_indices(w, plan["size"])
        W = np.asarray(w)
        cnt = np.zeros(D, np.int64)
        ahead = behind = 0.0
        for s in range(plan["size"]):
            d = int(di[s])
            check(dsi[s] == cnt[d], "dataset_sample_index is not the running count")
            cnt[d] += 1
            dev = cnt - W * (s + 1)
            ahead = max(ahead, float(dev.max()))
            behind = max(behind, float(-dev.min()))
        check(ahead <= 1.0 + 1e-9, f"a dataset ran {ahead} samples ahead (weights {w})")
        check(behind <= max(1, D - 1) + 1e-9, f"a dataset fell {behind} behind (weights {w})")
        worst_ahead = max(worst_ahead, ahead)
        worst_behind[D] = max(worst_behind.get(D, 0.0), behind)
        over_mid += int(any(c > m for c, m in zip(cnt, plan["num_samples"])))
        # exhaustive
        sizes = [r.randrange(0, 200) for _ in range(D)]
        if sum(sizes) == 0:
            sizes[0] = 1
        di, dsi = mi.blend_indices_exhaustive(sizes)
        check(len(di) == sum(sizes), "exhaustive length")
        for d in range(D):
            check(dsi[di == d].tolist() == list(range(sizes[d])), "exhaustive counts")
    behind_txt = ", ".join(f"{D}: {v:.3f}" for D, v in sorted(worst_behind.items()))
    print(f"blend: {count} weighted blends: no dataset ever > 1 sample ahead of w*s "
          f"(worst {worst_ahead:.4f}); worst lag by dataset count {{{behind_txt}}} "
          f"(<= 1 for 2 datasets, <= D-1 always); dataset_sample_index = running count; "
          f"{over_mid} asked a dataset for more than its mid-level n; "
          f"{count} exhaustive blends exact")


# --------------------------------------------------------------------------------------
# 5. The CLI and the cache files on synthetic datasets
# --------------------------------------------------------------------------------------

def run_cli(args):
    p = subprocess.run([sys.executable, CLI] + args, capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"CLI {args}: rc {p.returncode}: {p.stderr}")
    return p.stdout.splitlines()


def parse_arrays(lines):
    out = []
    for line in lines:
        f = line.split()
        if len(f) >= 2 and f[1] in ("int16", "int32", "int64", "uint32"):
            out.append((f[0], f[1], [int(v) for v in f[2:]]))
    return out


def check_npy(path, arr):
    with open(path, "rb") as f:
        raw = f.read()
    check(raw[:8] == b"\x93NUMPY\x01\x00", f"{path}: not NPY v1.0")
    hlen = int.from_bytes(raw[8:10], "little")
    check((10 + hlen) % 64 == 0 and raw[10 + hlen - 1:10 + hlen] == b"\n", f"{path}: header")
    header = raw[10:10 + hlen].decode("latin1")
    want = "{'descr': '%s', 'fortran_order': False, 'shape': %r, }" % (arr.dtype.str, arr.shape)
    check(header.startswith(want) and header[len(want):-1].strip(" ") == "", f"{path}: {header!r}")
    check(raw[10 + hlen:] == np.ascontiguousarray(arr).tobytes(), f"{path}: data")
    loaded = np.load(path)
    check(loaded.dtype == arr.dtype and np.array_equal(loaded, arr), f"{path}: np.load")


def check_cli():
    with tempfile.TemporaryDirectory() as tmp:
        a = os.path.join(tmp, "ds", "a")
        b = os.path.join(tmp, "ds", "b")
        run_cli(["make-idx", "--prefix", a, "--lengths", "3,5,2,7,1,4,6,8,2,9",
                 "--docs", "2,1,3,1,1,2"])
        run_cli(["make-idx", "--prefix", b, "--lengths", ",".join(str(5 + i % 7) for i in range(40))])
        lengths, doc_idx = mi.read_idx(a)
        check(lengths.tolist() == [3, 5, 2, 7, 1, 4, 6, 8, 2, 9], "read_idx lengths")
        check(doc_idx.tolist() == [0, 2, 3, 6, 7, 8, 10], "read_idx doc_idx")
        cache = os.path.join(tmp, "cache")
        out = run_cli(["gpt", "--prefix", a, "--split", "6,3,1", "--seq-length", "4",
                       "--num-samples", "train=30,valid=8,test=3", "--cache-dir", cache,
                       "--tokenizer-json", '{"class": "X", "n": 5}'])
        check(out[0] == "split train 0 6" and "split valid 6 9" in out and
              "split test 9 10" in out, "gpt split lines")
        arrays = parse_arrays(out)
        md5s = [l.split()[1] for l in out if l.startswith("description_md5 ")]
        check(len(arrays) == 9 and len(md5s) == 3, "gpt output shape")
        for k, (name, md5) in enumerate(zip(("train", "valid", "test"), md5s)):
            dpath = os.path.join(cache, f"{md5}-GPTDataset-{name}-description.txt")
            with open(dpath, "rb") as f:
                text = f.read()
            check(hashlib.md5(text).hexdigest() == md5 and not text.endswith(b"\n"), "desc md5")
            desc = json.loads(text)
            check(list(desc) == ["class", "dataset_path", "num_samples", "index_split",
                                 "random_seed", "sequence_length", "split", "split_matrix",
                                 "tokenizer"] and desc["index_split"] == name
                  and desc["dataset_path"] == a and desc["tokenizer"] == {"class": "X", "n": 5},
                  "description keys")
            for j, fname in enumerate(("document_index", "sample_index", "shuffle_index")):
                aname, dt, vals = arrays[3 * k + j]
                check(aname == fname, "array order")
                arr = np.load(os.path.join(cache, f"{md5}-GPTDataset-{name}-{fname}.npy"))
                check(arr.dtype.name == dt and np.ravel(arr).tolist() == vals, "cache == printed")
                check_npy(os.path.join(cache, f"{md5}-GPTDataset-{name}-{fname}.npy"), arr)
                if fname == "sample_index":
                    check(arr.ndim == 2 and arr.shape[1] == 2, "sample_index 2-D")
        # --print-samples: each sample is L+X tokens of the epoch stream, padded with -1
        out6 = run_cli(["gpt", "--prefix", a, "--split", "6,3,1", "--seq-length", "4",
                        "--num-samples", "train=30,valid=2", "--no-drop-last",
                        "--print-samples", "1000"])
        tokens_of = mi.read_tokens(a)
        blocks = [[]]
        for line in out6[1:]:
            if line.startswith("split "):
                blocks.append([])
            blocks[-1].append(line)
        nsamp = 0
        for blk in blocks:
            arrs = parse_arrays(blk)
            doc, sh = arrs[0][2], arrs[2][2]
            stream = [int(t) for d in doc for t in tokens_of(d)]
            for line in (l for l in blk if l.startswith("sample ")):
                f = [int(v) for v in line.split()[1:]]
                i = sh[f[0]]
                want = stream[i * 4:i * 4 + 5]
                check(f[1:] == want + [-1] * (5 - len(want)), f"printed sample {line}")
                nsamp += 1
        check(nsamp == sum(len(parse_arrays(b)[2][2]) for b in blocks), "all samples printed")
        # gpt-raw agrees with gpt on the train split (indices 0..5 = all of a 6-seq file)
        out2 = run_cli(["gpt-raw", "--lengths", "3,5,2,7,1,4", "--num-samples", "30",
                        "--seq-length", "4"])
        check(parse_arrays(out2) == arrays[:3], "gpt-raw == gpt train")
        # blend CLI
        out3 = run_cli(["blend", "--weights", "0.3,0.7", "--size", "5"])
        check(out3 == ["dataset_index int16 1 0 1 1 0", "dataset_sample_index int64 0 0 1 2 1"],
              f"blend CLI {out3}")
        out3 = run_cli(["blend", "--exhaustive", "--sizes", "1,2"])
        check(out3 == ["dataset_index int16 1 0 1", "dataset_sample_index int64 0 0 1"], "exh")
        # blend-gpt with a cache
        bc = os.path.join(tmp, "bcache")
        out4 = run_cli(["blend-gpt", "--data-path", f"1 {a} 3 {b}", "--split", "8,2,0",
                        "--seq-length", "3", "--num-samples", "train=20,valid=4",
                        "--cache-dir", bc])
        check(out4[0] == "blend train" and "blend test none" in out4, "blend-gpt blocks")
        bmd5 = [l.split()[1] for l in out4 if l.startswith("blend_description_md5 ")]
        check(len(bmd5) == 2, "blend md5 lines")
        for name, md5 in zip(("train", "valid"), bmd5):
            with open(os.path.join(bc, f"{md5}-BlendedDataset-{name}-description.txt"), "rb") as f:
                text = f.read()
            check(hashlib.md5(text).hexdigest() == md5, "blend desc md5")
            desc = json.loads(text)
            check(list(desc) == ["class", "datasets", "split", "weights", "size"] and
                  len(desc["datasets"]) == 2 and desc["split"] == name, "blend desc keys")
            for fname, dt in (("dataset_index", np.int16), ("dataset_sample_index", np.int64)):
                arr = np.load(os.path.join(bc, f"{md5}-BlendedDataset-{name}-{fname}.npy"))
                check(arr.dtype == dt, "blend cache dtype")
                check_npy(os.path.join(bc, f"{md5}-BlendedDataset-{name}-{fname}.npy"), arr)
        # the train blend: weights (0.25, 0.75), size 20: targets 5, 15; mid n 6, 16
        check("target 5" in out4 and "target 15" in out4 and "size 20" in out4, "blend-gpt plan")
        nums = [l for l in out4 if l.startswith("num_samples ")]
        check(nums[:2] == ["num_samples 6", "num_samples 16"], f"children n {nums}")
        # a per-split (no --split) GPT: the whole file, split/split_matrix null
        out5 = run_cli(["gpt", "--prefix", a, "--split", "none", "--seq-length", "4",
                        "--num-samples", "valid=3", "--describe"])
        check(out5[0] == "split valid 0 10" and not any(l.startswith("split train") for l in out5),
              "per-split gpt")
        desc = json.loads(json.loads(out5[3].split(" ", 1)[1]))
        check(desc["split"] is None and desc["split_matrix"] is None, "per-split nulls")
        # --no-drop-last only changes the valid split
        o1 = run_cli(["gpt", "--prefix", b, "--seq-length", "4", "--split", "5,5,5"])
        o2 = run_cli(["gpt", "--prefix", b, "--seq-length", "4", "--split", "5,5,5", "--no-drop-last"])
        a1, a2 = parse_arrays(o1), parse_arrays(o2)
        check(a1[0:3] == a2[0:3] and a1[6:9] == a2[6:9] and a1[3:6] != a2[3:6], "valid-only no-drop")
    print("cli: make-idx/read_idx, gpt (+cache, --print-samples, NPY v1.0 headers, description md5), gpt-raw, "
          "blend, blend --exhaustive, blend-gpt (+cache), per-split gpt, valid-only --no-drop-last: OK")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.configs = 200
    r = random.Random(a.seed)
    check_rng(r, 60 if a.quick else 300)
    check_numpy_sum(r, 200 if a.quick else 2000)
    check_hand()
    stats = dict(configs=0, multi_epoch=0, separate=0, nodrop=0, samples=0)
    while stats["configs"] < a.configs:
        c = random_gpt_config(r)
        if c is not None:
            check_gpt_config(c, stats)
    print(f"gpt: {stats['configs']} random configs ({stats['multi_epoch']} multi-epoch, "
          f"{stats['separate']} separate_final_epoch, {stats['nodrop']} no-drop-last, "
          f"{stats['samples']} samples token-checked): epochs minimal, document_index "
          f"multiset/last epoch, sample_index rows, shuffle permutations, pure-MT replay: OK")
    check_blends(r, 60 if a.quick else 300)
    check_cli()
    print(f"selfcheck: OK (seed {a.seed})")


if __name__ == "__main__":
    main()
