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

step "vocabulary: mt-tokenize train (byte-level BPE in GPT-2's file format)"
mt-tokenize train --input "$DEMO/corpus.jsonl.zst" --vocab-size 4096 --output-prefix "$DEMO/bpe"

step "tokenize: mt-tokenize -> $DEMO/corpus_text_document.{bin,idx}"
mt-tokenize --input "$DEMO/corpus.jsonl.zst" --json-keys text \
	--tokenizer-type GPT2BPETokenizer --vocab-file "$DEMO/bpe-vocab.json" --merge-file "$DEMO/bpe-merges.txt" \
	--append-eod --output-prefix "$DEMO/corpus"

step "look: the first document, decoded back from its token ids"
mt-tokenize decode --tokenizer-type GPT2BPETokenizer --vocab-file "$DEMO/bpe-vocab.json" \
	--merge-file "$DEMO/bpe-merges.txt" --dataset "$DEMO/corpus_text_document" --docs 0:1

step "index: mt-index stat and verify"
mt-index stat "$DEMO/corpus_text_document"
vocab=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))))' "$DEMO/bpe-vocab.json")
mt-index verify --vocab-size "$vocab" "$DEMO/corpus_text_document"

step "plan: what 2000 samples of 128 tokens will read (mt-blend plan)"
mt-blend plan --data-path "$DEMO/corpus_text_document" --seq-length 128 --train-samples 2000 \
	--global-batch-size 16 --eval-interval 50 --eval-iters 4

step "indices: Megatron's sample-index caches for each split (mt-index build)"
mt-index build --data-path "$DEMO/corpus_text_document" --seq-length 128 --train-samples 2000 \
	--global-batch-size 16 --eval-interval 50 --eval-iters 4 --data-cache-path "$DEMO/cache" > /dev/null
ls "$DEMO/cache" | sed 's/^/  /' >&2

step "train: a tiny GPT on the corpus, on the CPU (about half a minute); watch the loss fall"
rm -rf "$DEMO/ckpt"
mt-train --config share/configs/tiny.conf --data-path "$DEMO/corpus_text_document" \
	--tokenizer-type GPT2BPETokenizer --vocab-file "$DEMO/bpe-vocab.json" --merge-file "$DEMO/bpe-merges.txt" \
	--micro-batch-size 16 --global-batch-size 32 --train-iters 400 --lr 3e-3 --min-lr 3e-4 \
	--lr-decay-style cosine --lr-warmup-iters 30 --log-interval 50 --eval-interval 200 --eval-iters 10 \
	--data-cache-path "$DEMO/cache" --save "$DEMO/ckpt" --log-json "$DEMO/train-log.jsonl"
python3 - "$DEMO/train-log.jsonl" <<'PY' >&2
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("  loss by iteration: " + ", ".join(f"{r['iteration']}: {r['loss']:.3f}" for r in rows))
print(f"  validation loss {rows[-1].get('valid_loss', float('nan')):.3f} (perplexity {rows[-1].get('valid_ppl', float('nan')):.2f})")
PY

step "done: $DEMO/ holds the corpus, its vocabulary, the tokenized dataset, its index caches and a trained checkpoint (evaluate and generate stages arrive with those tools)"
