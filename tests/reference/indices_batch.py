#!/usr/bin/python3
"""Random configurations for the index algorithms, and the reference's answers to them,
in the format of tests/helpers/indices (megatron_indices.py's arrays, "end" after each).

usage: indices_batch.py --generate SEED COUNT > configs   (gpt, blend and exhaustive lines)
       indices_batch.py < configs > answers"""
import random
import sys

import numpy as np

import megatron_indices as mi


def generate(seed, count):
    r = random.Random(seed)
    for i in range(count):
        kind = r.random()
        if kind < 0.7:
            n = r.randint(1, 200)
            lens = [r.choice([0, 1, 2]) if r.random() < 0.05 else r.randint(1, r.choice([8, 50, 400])) for _ in range(n)]
            if sum(lens) < 3:
                lens[0] += 3
            L = r.randint(1, 64)
            X = 1 if r.random() < 0.85 else 0
            T = sum(lens)
            if r.random() < 0.15:
                N = -1
            else:
                per = max((T - X) // L, 1)
                N = r.randint(1, per * r.choice([1, 2, 3, 6]))  # often several epochs
            print(f"gpt {L} {N} {r.randint(0, 2**32 - 1)} {X} {1 if r.random() < 0.8 else 0} "
                  + ",".join(map(str, lens)))
        elif kind < 0.9:
            k = r.choice([1, 2, 3, 5, 8, 13, 40])
            w = [r.choice([r.random(), r.randint(1, 9), 1e-3 * r.random()]) for _ in range(k)]
            print(f"blend {r.randint(0, 3000)} " + ",".join(repr(x) for x in w))
        else:
            k = r.randint(1, 6)
            sizes = [r.randint(0, 300) for _ in range(k)]
            sizes[0] += 1  # an all-empty blend has no weights at all
            print("exhaustive " + ",".join(map(str, sizes)))


def answer(line):
    f = line.split()
    if f[0] == "gpt":
        L, N, seed, X, drop = map(int, f[1:6])
        lens = np.asarray([int(x) for x in f[6].split(",")], dtype=np.int32)
        idx = np.arange(len(lens), dtype=np.int32)
        n = None if N < 0 else N
        try:
            p = mi.gpt_plan(lens, idx, n, L, X)
            arrays = mi.gpt_indices(lens, idx, n, L, seed, X, bool(drop))
        except Exception:
            return ["error"]
        out = [f"tokens_per_epoch {p['T']}", f"num_epochs {p['E']}", f"separate_final_epoch {int(p['separate'])}"]
        for name, arr in zip(("document_index", "sample_index", "shuffle_index"), arrays):
            out.append(mi.fmt_array(name, arr))
        return out
    if f[0] == "blend":
        w = [float(x) for x in f[2].split(",")]
        di, dsi = mi.blend_indices(mi.normalize(w), int(f[1]))
    else:
        di, dsi = mi.blend_indices_exhaustive([int(x) for x in f[1].split(",")])
    return [mi.fmt_array("dataset_index", di), mi.fmt_array("dataset_sample_index", dsi)]


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--generate":
        generate(int(sys.argv[2]), int(sys.argv[3]))
        return
    for line in sys.stdin:
        if line.strip():
            print("\n".join(answer(line)))
            print("end")


if __name__ == "__main__":
    main()
