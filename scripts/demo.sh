#!/usr/bin/env bash
# The demo pipeline on the built-in corpus, run by `make demo`. Each stage
# uses the tools that exist in this version; later versions add stages
# (tokenize, index, train, evaluate, generate) here as the tools land.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/bin:$PATH"
DEMO=${DEMO_DIR:-demo}
mkdir -p "$DEMO"

step() { printf '\n== %s\n' "$*" >&2; }

step "corpus: share/demo/make-corpus.py -> $DEMO/corpus.jsonl.zst"
python3 share/demo/make-corpus.py --docs 20000 | zstd -q -f -o "$DEMO/corpus.jsonl.zst"
ls -l "$DEMO/corpus.jsonl.zst" >&2

step "tools in this build"
for t in mt-tokenize mt-index mt-blend mt-train mt-ckpt-reshard mt-eval mt-generate; do
	"$t" --version | head -n 1
done

step "done: the demo corpus is in $DEMO/ (the tokenize, index, train, eval and generate stages arrive with those tools)"
