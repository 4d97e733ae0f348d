#!/usr/bin/env bash
# mt-generate's generated tokens/s, GPT-2 124M shape (random weights: one mt-train step at
# lr 1e-6 on mock data), greedy, 16-token prompts, NEW tokens each (default 256), at
# batch 1 and batch 32, against the same generation in PyTorch with a KV cache in the
# same run on the same machine (bench/generate_ref.py: transformers' generate where
# transformers is installed, its own KV-cache loop otherwise), with the ratio.
# mt's figure is its own stderr summary: generated tokens over the wall time of
# generation (prefill included, model loading not), as PyTorch's is timed.
#   bench/generate.sh [NEW]      env: BATCHES ("1 32"), THREADS (OMP_NUM_THREADS; default nproc),
#                                     MT_DEVICE (cuda when a GPU is visible, else cpu),
#                                     MT_DTYPE (bf16 or fp32 on cuda; default bf16),
#                                     REF_DEVICE (default MT_DEVICE), REF_DTYPE (bfloat16 on cuda,
#                                     float32 on the CPU)
# The ratio line names the device and precision each side ran in.
set -euo pipefail
cd "$(dirname "$0")/.."
NEW=${1:-256}
BATCHES=${BATCHES:-1 32}
THREADS=${THREADS:-$(nproc)}
if [ -z "${MT_DEVICE:-}" ]; then
	MT_DEVICE=cpu
	command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && MT_DEVICE=cuda
fi
MT_DTYPE=${MT_DTYPE:-$([ "$MT_DEVICE" = cuda ] && echo bf16 || echo fp32)}
REF_DEVICE=${REF_DEVICE:-$MT_DEVICE}
REF_DTYPE=${REF_DTYPE:-$([ "$REF_DEVICE" = cuda ] && echo bfloat16 || echo float32)}
MT_FLAGS=(--device "$MT_DEVICE")
[ "$MT_DEVICE" = cuda ] && MT_FLAGS+=("--$MT_DTYPE")
PY=${MT_PYTHON:-$(command -v python3 || echo /usr/bin/python3)} # the one with torch (and transformers) where several exist
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=$THREADS

GPU=$([ "$MT_DEVICE" = cuda ] && nvidia-smi --query-gpu=name --format=csv,noheader | head -1 || echo none)
echo "# $(getconf _NPROCESSORS_ONLN) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(date -u +'%F %H:%M UTC'),"\
	"OMP_NUM_THREADS=$THREADS, GPU: $GPU, load average $(cut -d' ' -f1-3 /proc/loadavg), $NEW new tokens, 16-token prompts"
build/bin/mt-train --config share/configs/gpt2-small.conf --mock-data --vocab-size 50257 --seq-length 64 \
	--micro-batch-size 1 --train-iters 1 --lr 1e-6 --save "$W/ck" -q
for B in $BATCHES; do
	$PY -c 'import random, sys
r = random.Random(int(sys.argv[1]))
for _ in range(int(sys.argv[1])): print(" ".join(str(r.randrange(50257)) for _ in range(16)))' "$B" > "$W/prompts.txt"
	build/bin/mt-generate --load "$W/ck" "${MT_FLAGS[@]}" --tokenizer-type NullTokenizer --eod-id -1 --temperature 0 --max-tokens "$NEW" \
		--batch-size "$B" --prompts-file "$W/prompts.txt" > "$W/out.txt" 2> "$W/mt.log"
	mt=$(grep -o '([0-9.]* tokens/s' "$W/mt.log" | tr -d '(' | cut -d' ' -f1)
	# the summary ends "(... tokens/s, batch B, DEVICE PRECISION)"
	eng=$(grep -o 'tokens/s, batch [0-9]*, [a-z0-9]* [a-z0-9]*)' "$W/mt.log" | sed 's/.*, \([a-z0-9]*\) \([a-z0-9]*\))/\1, \2/')
	[ -n "$mt" ] && [ -n "$eng" ] || { cat "$W/mt.log" >&2; exit 1; }
	ref=$($PY bench/generate_ref.py --batch "$B" --new-tokens "$NEW" --threads "$THREADS" --device "$REF_DEVICE" \
		--dtype "$REF_DTYPE")
	$PY - "$B" "$mt" "$ref" "$NEW" "$eng" <<'PY'
import json, sys
b, mt, ref, new, eng = int(sys.argv[1]), float(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
print(f"batch {b:3d}: mt-generate ({eng}) {mt:9.1f} tokens/s ({1000 * b / mt:7.1f} ms a step) | "
      f"{ref['impl']} ({ref['device']}, {ref['dtype']}) {ref['tokens_per_s']:9.1f} tokens/s "
      f"({ref['ms_per_step']:7.1f} ms a step) | mt / reference {mt / ref['tokens_per_s']:.2f}x")
PY
done
