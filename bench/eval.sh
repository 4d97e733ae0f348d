#!/usr/bin/env bash
# mt-eval's throughput on the WikiText task against the same computation in PyTorch, in one
# run: a GPT-2 124M-shaped model (gpt2-small.conf, one training step on mock data, so the
# weights are near their initialization), a BPE vocabulary trained by mt-tokenize on the demo
# corpus, and a text of generated stories cut into windows of SEQ tokens with stride STRIDE,
# MBS windows per forward pass. Both sides compute the same windows and the same masked loss
# (tests/reference/torch_eval.py, fp32 model, no_grad); their token_loss must agree, and the
# ratio of tokens/s (window positions per second) is printed. mt-eval's time is its whole task
# (tokenizing included); PyTorch's is its forward passes only.
#   bench/eval.sh                       CPU (this machine), the defaults below
#   DEVICE=cuda bench/eval.sh           on the GPU machine (fp32, both sides)
#   DOCS=200 SEQ=256 STRIDE=256 MBS=4 THREADS=2 CONF=share/configs/gpt2-small.conf bench/eval.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DOCS=${DOCS:-40} SEQ=${SEQ:-256} STRIDE=${STRIDE:-256} MBS=${MBS:-4} DEVICE=${DEVICE:-cpu}
NCPU=$(nproc --all)
THREADS=${THREADS:-$NCPU} CONF=${CONF:-share/configs/gpt2-small.conf}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=$THREADS

python3 share/demo/make-corpus.py --docs 2000 > "$W/c.jsonl"
build/bin/mt-tokenize train -q --input "$W/c.jsonl" --vocab-size 4096 --output-prefix "$W/bpe"
python3 -c 'import json, sys
docs = [json.loads(l)["text"] for l in open(sys.argv[1])]
open(sys.argv[2], "w").write(" ".join(docs[:int(sys.argv[3])]) + "\n")' "$W/c.jsonl" "$W/text.txt" "$DOCS"
build/bin/mt-train -q --config "$CONF" --seq-length "$SEQ" --max-position-embeddings "$SEQ" --mock-data \
	--tokenizer-type GPT2BPETokenizer --vocab-file "$W/bpe-vocab.json" --merge-file "$W/bpe-merges.txt" \
	--micro-batch-size 1 --train-iters 1 --lr 1e-4 --save "$W/ck"

build/bin/mt-eval -q --load "$W/ck" --wikitext "$W/text.txt" --overlapping-eval "$STRIDE" --micro-batch-size "$MBS" \
	--json --device "$DEVICE" > "$W/mt.json"
/usr/bin/python3 tests/reference/torch_eval.py "$W/ck/iter_0000001/model.h5" --vocab-file "$W/bpe-vocab.json" \
	--merge-file "$W/bpe-merges.txt" --wikitext "$W/text.txt" --overlapping-eval "$STRIDE" \
	--micro-batch-size "$MBS" --threads "$THREADS" --device "$DEVICE" > "$W/torch.json"

echo "# $NCPU CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(date -u +%F), device $DEVICE, threads $THREADS"
python3 - "$W/mt.json" "$W/torch.json" "$CONF" <<'PY'
import json, sys
mt, ref = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
pos = mt["windows"] * mt["seq_length"]
assert pos == ref["positions"], (pos, ref["positions"])
a, b = mt["metrics"]["token_loss"], ref["token_loss"]
print(f"{sys.argv[3]}: seq {mt['seq_length']}, stride {mt['overlapping_eval']}, {mt['windows']} windows = {pos} positions, "
      f"{mt['tokens']} targets; token_loss mt {a:.6f} torch {b:.6f} (relative {abs(a - b) / b:.1e})")
print(f"mt-eval: {mt['seconds']:.2f} s, {pos / mt['seconds']:.0f} tokens/s")
print(f"PyTorch: {ref['seconds']:.2f} s, {pos / ref['seconds']:.0f} tokens/s")
print(f"ratio mt-eval / PyTorch: {ref['seconds'] / mt['seconds']:.2f}x")
if abs(a - b) > 1e-4 * b:
    sys.exit("the two token losses disagree")
PY
