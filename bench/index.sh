#!/usr/bin/env bash
# Sample-index building speed: mt-index build against the numpy reference
# (tests/reference/megatron_indices.py: numpy's RandomState shuffles, the sample index
# loop in Python where Megatron has C++) on a synthetic dataset of DOCS documents and
# about TOKENS tokens (defaults: 10^6 and 10^9; the .bin is a sparse file, only the .idx
# is read). Prints both times, the ratio, and checks that the cache files are identical.
#   bench/index.sh [DOCS] [TOKENS] [SEQ_LENGTH]
set -euo pipefail
cd "$(dirname "$0")/.."
DOCS=${1:-1000000}
TOKENS=${2:-1000000000}
L=${3:-2048}
PY=/usr/bin/python3
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

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
print(f"# dataset: {docs} documents, {int(lens.sum())} tokens, seq-length", file=sys.stderr)
PY
TRAIN=$(( TOKENS / L ))
echo "# $DOCS documents, ~$TOKENS tokens, L=$L, $TRAIN train samples (one epoch), split 969,30,1; $(nproc) CPUs; $(date -u +%F)"
t0=$(date +%s.%N)
build/bin/mt-index build --data-path "$W/d" --seq-length "$L" --train-samples "$TRAIN" --valid-samples 1000 \
	--test-samples 100 --data-cache-path "$W/mt" > /dev/null 2>&1 ||
	build/bin/mt-blend build --data-path "$W/d" --seq-length "$L" --train-samples "$TRAIN" --valid-samples 1000 \
	--test-samples 100 --data-cache-path "$W/mt" > /dev/null
t1=$(date +%s.%N)
$PY tests/reference/megatron_indices.py gpt --prefix "$W/d" --seq-length "$L" \
	--num-samples "train=$TRAIN,valid=1000,test=100" --cache-dir "$W/ref" > /dev/null
t2=$(date +%s.%N)
diff -r "$W/ref" "$W/mt" > /dev/null && same=identical || same=DIFFERENT
awk -v a="$t0" -v b="$t1" -v c="$t2" -v same="$same" 'BEGIN {
	printf "mt-index build: %.2f s\nnumpy reference: %.2f s\nratio: %.1fx faster; cache files %s\n",
		b - a, c - b, (c - b) / (b - a), same }'
