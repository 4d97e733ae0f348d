#!/usr/bin/env bash
# The demo pipeline on the built-in corpus, run by `make demo`: tokenize, index,
# train, evaluate, generate, and export to Hugging Face's format, on the CPU (the GPU
# when one is visible) in a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/build/bin:$PATH"
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
rm -rf "$DEMO/ckpt" "$DEMO/train-log.jsonl" "$DEMO/tensorboard"
mt-train --config share/configs/tiny.conf --data-path "$DEMO/corpus_text_document" \
	--tokenizer-type GPT2BPETokenizer --vocab-file "$DEMO/bpe-vocab.json" --merge-file "$DEMO/bpe-merges.txt" \
	--micro-batch-size 16 --global-batch-size 32 --train-iters 400 --lr 3e-3 --min-lr 3e-4 \
	--lr-decay-style cosine --lr-warmup-iters 30 --log-interval 50 --eval-interval 200 --eval-iters 10 \
	--data-cache-path "$DEMO/cache" --save "$DEMO/ckpt" --log-json "$DEMO/train-log.jsonl" \
	--tensorboard-dir "$DEMO/tensorboard" --log-validation-ppl-to-tensorboard
python3 - "$DEMO/train-log.jsonl" <<'PY' >&2
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("  loss by iteration: " + ", ".join(f"{r['iteration']}: {r['loss']:.3f}" for r in rows))
print(f"  validation loss {rows[-1].get('valid_loss', float('nan')):.3f} (perplexity {rows[-1].get('valid_ppl', float('nan')):.2f})")
PY

step "evaluate: mt-eval on the held-out splits and a text, as a cron job would (mt-eval --watch)"
python3 - "$DEMO" <<'PY'
import sys
from subprocess import run, PIPE
# twenty fresh stories the model has not seen (another seed), as one text file
out = run([sys.executable, "share/demo/make-corpus.py", "--docs", "20", "--seed", "7"], stdout=PIPE, check=True).stdout
import json
open(sys.argv[1] + "/heldout.txt", "w").write(" ".join(json.loads(l)["text"] for l in out.decode().splitlines()) + "\n")
PY
mt-eval --load "$DEMO/ckpt" --valid --test --wikitext "$DEMO/heldout.txt"
rm -f "$DEMO/ledger.jsonl"
mt-eval -q --watch "$DEMO/ckpt" --ledger "$DEMO/ledger.jsonl" --valid --tensorboard-dir "$DEMO/tensorboard"
echo "  ledger: $(wc -l < "$DEMO/ledger.jsonl") line(s) in $DEMO/ledger.jsonl" >&2
echo "  curves: tensorboard --logdir $DEMO/tensorboard (training and evaluation, Megatron's tag names)" >&2

step "generate: mt-generate, greedy and sampled, with a KV cache"
mt-generate --load "$DEMO/ckpt" --max-tokens 40 --temperature 0 "Once upon a time" "The little dog"
mt-generate --load "$DEMO/ckpt" --max-tokens 40 --temperature 0.8 --top-p 0.9 --seed 1 "Once upon a time"

step "export: the checkpoint as a Hugging Face GPT-2 (model.safetensors, config.json, tokenizer files)"
rm -rf "$DEMO/hf"
mt-ckpt-reshard export --format hf-gpt2 "$DEMO/ckpt" "$DEMO/hf"
ls "$DEMO/hf" | sed 's/^/  /' >&2

step "done: $DEMO/ holds the corpus, its vocabulary, the tokenized dataset, its index caches, a trained checkpoint, its evaluation ledger and its Hugging Face export"
