#!/usr/bin/python3
"""Property of a blend: over every prefix of s samples, how far each source's count is
from its share w*s. Reads "blend SIZE w0,w1,..." configurations (file argv[1]) and the
answers of tests/helpers/indices (stdin); prints the worst lag and lead per number of
sources, and exits 1 if a two-source blend is ever off by more than one sample, if any
source is ever more than one sample ahead of its share, or if one of D > 2 sources lags
by D-1 or more. (Megatron's greedy choice keeps two sources within one sample; with more,
a source can fall up to about 1.8 samples behind, and mt must choose as Megatron does.)"""
import sys


def main():
    all_cfgs = [l.split() for l in open(sys.argv[1]) if l.strip()]
    blocks, cur = [], []
    for l in sys.stdin:
        if l.strip() == "end":
            blocks.append(cur)
            cur = []
        else:
            cur.append(l.split())
    assert len(all_cfgs) == len(blocks), (len(all_cfgs), len(blocks))
    pairs = [(c, [a for a in b if a[0] == "dataset_index"][0]) for c, b in zip(all_cfgs, blocks) if c[0] == "blend"]
    cfgs = [p[0] for p in pairs]
    answers = [p[1] for p in pairs]
    worst = {}
    bad = 0
    for cfg, ans in zip(cfgs, answers):
        w = [float(x) for x in cfg[2].split(",")]
        tot = sum(w)
        w = [x / tot for x in w]
        d = len(w)
        cnt = [0] * d
        lag = lead = 0.0
        for s, v in enumerate(ans[2:], 1):
            cnt[int(v)] += 1
            for k in range(d):
                diff = cnt[k] - w[k] * s
                lead = max(lead, diff)
                lag = max(lag, -diff)
        a, b = worst.get(d, (0.0, 0.0))
        worst[d] = (max(a, lag), max(b, lead))
        eps = 1e-9
        if lead > 1 + eps or (d <= 2 and lag > 1 + eps) or (d > 2 and lag >= d - 1):
            bad += 1
            print(f"off: {len(w)} sources, size {cfg[1]}: lag {lag:.3f}, lead {lead:.3f}")
    for d in sorted(worst):
        print(f"{d} sources: worst lag {worst[d][0]:.3f}, worst lead {worst[d][1]:.3f}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
