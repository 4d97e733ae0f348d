#!/usr/bin/env python3
"""Python's json module's verdict on each line of stdin, in the format of
tests/helpers/jsontext-check: "err" if json.loads refuses the line or it is not an object,
"missing" / "nottext" for the key, else the key's strings (lone surrogates replaced by
U+FFFD, as tiktoken does) as UTF-8 hex joined by "|".

usage: json-check.py [KEY] < lines
       json-check.py --mutate SEED N < lines   (write N mutated copies of the lines)"""
import json
import random
import sys


def verdict(raw, key):
    try:
        d = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return "err"
    if not isinstance(d, dict):
        return "err"
    if key not in d:
        return "missing"
    v = d[key]
    parts = [v] if isinstance(v, str) else v if isinstance(v, list) and all(isinstance(x, str) for x in v) else None
    if parts is None:
        return "nottext"
    fix = lambda s: s.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")
    return "|".join(fix(p).hex() for p in parts)


def mutate(lines, seed, n):
    r = random.Random(seed)
    alphabet = [b'"', b"\\", b"{", b"}", b"[", b"]", b",", b":", b" ", b"\t", b"u", b"d8", b"\\u", b"\\ud800",
                b"0", b"-", b"e", b".", b"N", b"I", b"\x00", b"\x1f", b"\x7f", b"\xc3", b"\xa9", b"\xff", b"\xed\xa0\x80"]
    for _ in range(n):
        s = bytearray(r.choice(lines))
        for _ in range(r.randint(1, 3)):
            i = r.randrange(len(s) + 1)
            op = r.random()
            if op < 0.4 and s:
                del s[i % len(s)]
            elif op < 0.8:
                s[i:i] = r.choice(alphabet)
            elif s:
                s[i % len(s)] = r.randrange(256)
        yield bytes(s).replace(b"\n", b" ")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--mutate":
        lines = [l.rstrip(b"\n") for l in sys.stdin.buffer if l.strip()]
        out = sys.stdout.buffer
        for m in mutate(lines, int(sys.argv[2]), int(sys.argv[3])):
            out.write(m + b"\n")
        return
    key = sys.argv[1] if len(sys.argv) > 1 else "text"
    for line in sys.stdin.buffer:
        print(verdict(line.rstrip(b"\n"), key))


if __name__ == "__main__":
    main()
