#!/usr/bin/env bash
# The cost of opening a dataset: mt_idx_open checks every length, pointer and document
# index against the .bin size (lib/data/idx.c); this times it against an open that reads
# the header only, on a synthetic dataset of DOCS documents and about TOKENS tokens
# (defaults 10^6 and 10^8; the .bin is a sparse file, only the .idx is read), with the
# .idx in the page cache (it was just written), best of 5.
#   bench/idx-open.sh [DOCS] [TOKENS]
set -euo pipefail
cd "$(dirname "$0")/.."
DOCS=${1:-1000000}
TOKENS=${2:-100000000}
PY=/usr/bin/python3
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
[ -f build/libmt.a ] || make -j2 build/libmt.a >/dev/null
cc -std=gnu11 -O2 -D_GNU_SOURCE -Ilib -o "$W/idx-open" bench/idx-open.c build/libmt.a -lpthread
$PY - "$W/d" "$DOCS" "$TOKENS" <<'PY'
import sys, numpy as np
prefix, docs, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(1)
lens = rng.integers(1, 2 * tokens // docs, size=docs).astype(np.int32)
ptrs = np.zeros(docs, dtype=np.int64)
np.cumsum(lens[:-1].astype(np.int64) * 2, out=ptrs[1:])
with open(prefix + ".idx", "wb") as f:
    f.write(b"MMIDIDX\x00\x00" + np.uint64(1).tobytes() + np.uint8(8).tobytes()
            + np.uint64(docs).tobytes() + np.uint64(docs + 1).tobytes())
    f.write(lens.tobytes()); f.write(ptrs.tobytes()); f.write(np.arange(docs + 1, dtype=np.int64).tobytes())
with open(prefix + ".bin", "wb") as f:
    f.truncate(int(lens.sum()) * 2)
print(f"# dataset: {docs} documents, {int(lens.sum())} tokens", file=sys.stderr)
PY
echo "# $(nproc) CPUs; $(date -u +%F)"
"$W/idx-open" "$W/d" 5
