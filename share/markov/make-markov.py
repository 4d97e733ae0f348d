#!/usr/bin/env python3
"""A corpus with a known entropy floor, for mt-train's learning test.

A first-order Markov chain over V symbols, each state with K successors of random
probabilities (fixed seed). Documents are walks of random length from the stationary
distribution, written as JSON lines {"text": "id id id ..."} for mt-tokenize's
NullTokenizer (--vocab-size V). The best any model can do on the next token of a
walk is the chain's entropy rate H = sum_s pi(s) H(P(.|s)) nats, printed on stderr
(and with --entropy alone on stdout), so validation loss can be compared with it.

usage: make-markov.py [--vocab 64] [--successors 4] [--docs 4000] [--seed 7] > corpus.jsonl
       make-markov.py --entropy [same options]"""
import argparse
import json
import math
import random
import sys


def chain(v, k, seed):
    r = random.Random(seed)
    trans = []
    for _ in range(v):
        succ = r.sample(range(v), k)
        w = [r.random() ** 2 + 0.05 for _ in range(k)]
        tot = sum(w)
        trans.append([(s, x / tot) for s, x in zip(succ, w)])
    # stationary distribution by power iteration
    pi = [1.0 / v] * v
    for _ in range(2000):
        nxt = [0.0] * v
        for s in range(v):
            for t, p in trans[s]:
                nxt[t] += pi[s] * p
        pi = nxt
    h = -sum(pi[s] * sum(p * math.log(p) for _, p in trans[s]) for s in range(v))
    return trans, pi, h


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--successors", type=int, default=4)
    ap.add_argument("--docs", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--entropy", action="store_true")
    a = ap.parse_args()
    trans, pi, h = chain(a.vocab, a.successors, a.seed)
    if a.entropy:
        print(f"{h:.6f}")
        return
    print(f"make-markov: entropy rate {h:.6f} nats per token", file=sys.stderr)
    r = random.Random(a.seed + 1)
    out = sys.stdout
    for _ in range(a.docs):
        s = r.choices(range(a.vocab), weights=pi)[0]
        ids = [s]
        for _ in range(r.randint(40, 200)):
            succ, probs = zip(*trans[s])
            s = r.choices(succ, weights=probs)[0]
            ids.append(s)
        out.write(json.dumps({"text": " ".join(map(str, ids))}) + "\n")


if __name__ == "__main__":
    main()
