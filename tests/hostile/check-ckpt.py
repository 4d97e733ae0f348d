#!/usr/bin/env python3
"""Judge the runs of tests/hostile/run-ckpt-case.sh against cases.tsv (make-ckpts.py):

    check-ckpt.py TOOL DIR

Every run: no signal and no hang (exit status below 124), no sanitizer report. Then, by
the case's kind (make-ckpts.py's docstring): 'ok' exits 0; 'data' exits 3 with an error
naming the checkpoint; 'tensor' exits 3 naming the tensor and its checksum wherever the
tool reads that tensor (inspect reads none, eval, generate and export no optimizer
state: 0 there); 'nonfinite' exits 3 naming the tensor and
the nan or inf (inspect: 0); 'config' and 'content' exit 3 wherever the model is built
(inspect: 0);
'meta' exits 0 or 3. Prints one line per failure and a summary; exits 1 on any failure.
"""
import os
import sys

tool, d = sys.argv[1], sys.argv[2]
SAN = ("AddressSanitizer", "UndefinedBehaviorSanitizer", "runtime error:", "LeakSanitizer")
fails, n, signals, reports, caught = [], 0, 0, 0, 0
codes = {}
def reads(tensor):
    """Does the tool read this tensor? The weights-only tools read no optimizer state."""
    if tool == "inspect":
        return False
    return tool in ("verify", "train") or tensor == "-" or tensor.startswith("model/")


for line in open(os.path.join(d, "cases.tsv")):
    name, kind, detail = line.rstrip("\n").split("\t")
    base = os.path.join(d, "out", tool, name)
    try:
        rc = int(open(base + ".rc").read())
        err = open(base + ".err", errors="replace").read()
    except OSError as e:
        fails.append("%s: not run (%s)" % (name, e))
        continue
    n += 1
    codes[rc] = codes.get(rc, 0) + 1
    last = err.strip().splitlines()[-1] if err.strip() else ""
    if rc >= 124:
        signals += 1
        fails.append("%s: exit %d (signal or hang): %s" % (name, rc, last))
        continue
    if any(s in err for s in SAN):
        reports += 1
        fails.append("%s: sanitizer report: %s" % (name, [l for l in err.splitlines() if any(s in l for s in SAN)][0]))
        continue
    named = ("cases/%s/" % name) in err
    if kind == "ok" or (kind in ("tensor", "nonfinite") and not reads(detail)) or (kind in ("config", "content") and tool == "inspect"):
        if rc != 0:
            fails.append("%s: wants exit 0; got %d: %s" % (name, rc, last))
    elif kind == "meta":
        if rc not in (0, 3) or (rc == 3 and not named):
            fails.append("%s: wants 0 or a 3 naming the checkpoint; got %d: %s" % (name, rc, last))
    elif rc != 3 or not named:
        fails.append("%s: wants exit 3 naming the checkpoint; got %d: %s" % (name, rc, last))
    elif kind == "tensor":
        if ("'%s" % detail) not in err or "checksum" not in err:
            fails.append("%s: wants tensor '%s' named with its checksum: %s" % (name, detail, last))
        else:
            caught += 1
    elif kind == "nonfinite":
        if ("'%s'" % detail) not in err or not ("nan" in err or "inf" in err):
            fails.append("%s: wants tensor '%s' named as non-finite: %s" % (name, detail, last))
for f in fails:
    print("# " + f)
print("# %s: %d cases, exit codes %s, %d signals or hangs, %d sanitizer reports, %d corrupted tensors caught by "
      "their checksum, %d failures" % (tool, n, dict(sorted(codes.items())), signals, reports, caught, len(fails)))
sys.exit(1 if fails or n == 0 else 0)
