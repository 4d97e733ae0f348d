#!/usr/bin/env bash
# The issue's proof for mt-eval on the GPU machine (transformers installed there): mt-eval's
# WikiText perplexity equals the same windows scored in PyTorch by the Hugging Face model that
# `mt-ckpt-reshard export --format hf-gpt2` writes. A tiny GPT-2 is trained on the demo corpus
# with a 400-id BPE vocabulary (a multiple of tiny.conf's --make-vocab-size-divisible-by 8, so
# the vocabulary has no padding and the exported softmax is the same as mt's); then mt-eval and
# tests/reference/torch_eval.py --hf score the same text. Exits 1 when token_loss or word_ppl
# differ by more than 1e-5 relative.
#   tests/reference/eval_hf_check.sh [WORKDIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
W=${1:-$(mktemp -d)}
mkdir -p "$W"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
python3 share/demo/make-corpus.py --docs 2000 > "$W/c.jsonl"
build/bin/mt-tokenize train -q --input "$W/c.jsonl" --vocab-size 400 --output-prefix "$W/bpe"
build/bin/mt-tokenize -q --input "$W/c.jsonl" --json-keys text --tokenizer-type GPT2BPETokenizer \
	--vocab-file "$W/bpe-vocab.json" --merge-file "$W/bpe-merges.txt" --append-eod --output-prefix "$W/c"
build/bin/mt-train -q --config share/configs/tiny.conf --data-path "$W/c_text_document" --tokenizer-type GPT2BPETokenizer \
	--vocab-file "$W/bpe-vocab.json" --merge-file "$W/bpe-merges.txt" --split 90,8,2 --data-cache-path "$W/cache" \
	--micro-batch-size 4 --global-batch-size 8 --train-iters 150 --lr 3e-3 --save "$W/ck"
python3 -c 'import json, sys
docs = [json.loads(l)["text"] for l in open(sys.argv[1])]
open(sys.argv[2], "w").write(" ".join(docs[:40]) + "\n")' "$W/c.jsonl" "$W/text.txt"
build/bin/mt-ckpt-reshard export --format hf-gpt2 "$W/ck" "$W/hf"
build/bin/mt-eval -q --load "$W/ck" --wikitext "$W/text.txt" --json > "$W/mt.json"
/usr/bin/python3 tests/reference/torch_eval.py "$W/ck/iter_0000150/model.h5" --hf "$W/hf" \
	--vocab-file "$W/bpe-vocab.json" --merge-file "$W/bpe-merges.txt" --wikitext "$W/text.txt" > "$W/hf.json"
python3 - "$W/mt.json" "$W/hf.json" <<'PY'
import json, sys
mt, hf = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
bad = mt["tokens"] != hf["tokens"]
for k in ("token_loss", "token_ppl", "word_ppl"):
    a, b = mt["metrics"][k], hf[k]
    rel = abs(a - b) / abs(b)
    bad |= rel > 1e-5
    print(f"{k:11} mt-eval {a:.9g}  transformers {b:.9g}  relative {rel:.1e}")
print(f"targets: mt-eval {mt['tokens']}, transformers {hf['tokens']}")
print("FAILED" if bad else "OK: mt-eval's perplexity equals the exported model's in PyTorch")
sys.exit(1 if bad else 0)
PY
