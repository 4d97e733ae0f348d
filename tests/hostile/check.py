#!/usr/bin/env python3
"""Judge the runs of tests/hostile/run-case.sh against cases.tsv (make-datasets.py):

    check.py TOOL DIR

Every run: no signal and no hang (exit status below 124), no sanitizer report on
stderr. A case the format calls 'data' must exit 3 with a message naming its .idx or
.bin; 'io' (a FIFO, a directory, a device, a missing file) must exit 4 naming the file;
'ok' must exit 0 for mt-index stat, and 0 or 3 for the tools that also need enough
tokens below the vocabulary (a refusal must say why); the untouched dataset and the
one with a modes array must exit 0 everywhere. Prints one line per failure and a
summary; exits 1 on any failure.
"""
import os
import sys

tool, d = sys.argv[1], sys.argv[2]
SAN = ("AddressSanitizer", "UndefinedBehaviorSanitizer", "runtime error:", "LeakSanitizer")
fails, n, signals, reports = [], 0, 0, 0
codes = {}
for line in open(os.path.join(d, "cases.tsv")):
    name, expect, tokens_ok = line.rstrip("\n").split("\t")
    base = os.path.join(d, "out", tool, name)
    try:
        rc = int(open(base + ".rc").read())
        err = open(base + ".err", errors="replace").read()
    except OSError as e:
        fails.append("%s: not run (%s)" % (name, e))
        continue
    n += 1
    codes[rc] = codes.get(rc, 0) + 1
    first = err.strip().splitlines()[-1] if err.strip() else ""
    if rc >= 124:
        signals += 1
        fails.append("%s: exit %d (signal or hang): %s" % (name, rc, first))
        continue
    if any(s in err for s in SAN):
        reports += 1
        fails.append("%s: sanitizer report: %s" % (name, [l for l in err.splitlines() if any(s in l for s in SAN)][0]))
        continue
    named = (name + ".idx") in err or (name + ".bin") in err
    if expect == "data":
        if rc != 3 or not named:
            fails.append("%s: corrupt, wants exit 3 naming the file; got %d: %s" % (name, rc, first))
    elif expect == "io":
        if rc != 4 or not named:
            fails.append("%s: not a usable file, wants exit 4 naming it; got %d: %s" % (name, rc, first))
    elif name in ("good", "modes") or tool == "stat":
        if rc != 0:
            fails.append("%s: valid, wants exit 0; got %d: %s" % (name, rc, first))
    elif rc not in (0, 3) or (rc == 3 and "error:" not in err):
        fails.append("%s: valid, wants exit 0 or a clean 3; got %d: %s" % (name, rc, first))
for f in fails:
    print("# " + f)
print("# %s: %d cases, exit codes %s, %d signals or hangs, %d sanitizer reports, %d failures"
      % (tool, n, dict(sorted(codes.items())), signals, reports, len(fails)))
sys.exit(1 if fails or n == 0 else 0)
