#!/usr/bin/env bash
# mt-train's CPU step time: GPT-2 124M (fp32, AdamW) at micro-batch 4 and T=64, and the tiny
# config, on mock data. Prints seconds per step (the first step, which faults in the
# buffers, is left out), tokens/s, achieved GFLOP/s (6 x parameters x tokens plus attention,
# docs/mt-train.md's count) and the ratio to the reference figures this machine kind was
# measured at on 2026-11-21: llm.c's fp32 CPU trainer 6.0 s a step (the bar: 3.0 s), Debian's
# PyTorch 1.13 183 s a step. (Running llm.c needs its sources, which cannot be fetched here;
# PyTorch at 3 minutes a step is a correctness reference, not a speed one.)
#   bench/train-cpu.sh [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-6}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

run() { # name config extra...
	local name=$1 conf=$2; shift 2
	build/bin/mt-train --config "$conf" --mock-data --micro-batch-size 4 --global-batch-size 4 \
		--train-iters "$STEPS" --log-interval 1 --lr 1e-4 --log-json "$W/$name.jsonl" "$@" 2> "$W/$name.log"
	python3 - "$W/$name.jsonl" "$name" "$(grep -o 'model: [0-9]* parameters' "$W/$name.log" | cut -d' ' -f2)" "$@" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
name, params = sys.argv[2], int(sys.argv[3])
args = sys.argv[4:]
T = int(args[args.index("--seq-length") + 1]) if "--seq-length" in args else 64
steps = [b["elapsed"] - a["elapsed"] for a, b in zip(rows, rows[1:])]
s = sum(steps) / len(steps)
tok = 4 * T
print(f"{name}: {params} parameters, {s:.3f} s/step over {len(steps)} steps, {tok / s:.0f} tokens/s, "
      f"{6 * params * tok / s / 1e9:.1f} GFLOP/s (6ND)")
if name == "gpt2-124M":
    print(f"  against llm.c's 6.0 s/step: {6.0 / s:.2f}x; the bar 3.0 s/step: {'met' if s <= 3.0 else 'not met'}; "
          f"against Debian's PyTorch 183 s/step: {183 / s:.0f}x")
PY
}

echo "# $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(date -u +%F), OMP_NUM_THREADS=${OMP_NUM_THREADS:-all}"
run gpt2-124M share/configs/gpt2-small.conf --seq-length 64 --vocab-size 50257
run tiny share/configs/tiny.conf --vocab-size 256
