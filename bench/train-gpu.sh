#!/usr/bin/env bash
# mt-train on one GPU against PyTorch on the same GPU in the same run, bf16, AdamW (clip
# 1.0), random tokens. MODEL=gpt2 (default): GPT-2 124M, T=1024, against
# bench/torch_gpt2_bench.py; MODEL=llama: a Llama-style 1.1B (16 layers, hidden 2048, GQA
# 16/4, SwiGLU 5632, RoPE, RMSNorm, no biases, untied), T=2048, against
# bench/torch_llama_bench.py. For each micro-batch given: mt-train's tokens/s (mean step
# time over the steps after the first WARM), MFU and its planned device memory (everything
# it allocates), then PyTorch's (torch.compile, SDPA flash attention, fused AdamW; its peak
# is torch.cuda.max_memory_allocated) and the ratio.
#
# MFU = tokens/s x (6 P' + 12 L D T) / 989e12: the matmul FLOPs of forward and backward per
# token (P' = the parameters less GPT-2's position table, a lookup; the tied output layer
# counted through the embedding) plus attention 12 L D T (causal masking not discounted),
# over the H100 SXM dense bf16 peak: the formula and peak the PyTorch scripts print.
#
# mt-train runs with its matmul tuning (MT_CUDA_MATMUL_TUNING, docs/mt-train.md): a short run
# first times cuBLASLt's candidates of each product under sustained load and writes its picks
# (its time is printed, not counted), and the measured run reads them, as a user's runs after
# the first would. TUNING=FILE keeps the picks in FILE (reused if it exists); TUNING=0 takes
# cuBLASLt's first candidates.
#
# ROUNDS=N runs the pair N times in turn (mt-train, PyTorch, mt-train, ...) after the one
# tuning run and prints each round's ratio and their median: the GPU's clock under its power
# limit drifts within a call by about as much as the differences being measured.
#   bench/train-gpu.sh [MICRO_BATCHES...]   (default: 32 64 for gpt2, 8 for llama)
#   env MODEL, STEPS (20), WARM (3), ROUNDS (1), MT_ONLY=1, MT_FLAGS (more mt-train flags), TUNING
set -uo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-20}
WARM=${WARM:-3}
MODEL=${MODEL:-gpt2}
BS=("$@")
if [ "$MODEL" = llama ]; then
	[ ${#BS[@]} -gt 0 ] || BS=(8)
	ARCH=(--num-layers 16 --hidden-size 2048 --num-attention-heads 16 --group-query-attention --num-query-groups 4
		--ffn-hidden-size 5632 --swiglu --normalization RMSNorm --position-embedding-type rope
		--disable-bias-linear --untie-embeddings-and-output-weights --seq-length 2048)
	DIMS="16 2048 2048 0 Llama-style"
	REF=bench/torch_llama_bench.py
else
	[ ${#BS[@]} -gt 0 ] || BS=(32 64)
	ARCH=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --max-position-embeddings 1024)
	DIMS="12 768 1024 1 GPT-2-124M"
	REF=bench/torch_gpt2_bench.py
fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true

TUNING=${TUNING:-$W/tuning.tsv}
[ "$TUNING" = 0 ] && TUNING=

for B in "${BS[@]}"; do
	if [ -n "$TUNING" ]; then
		t0=$(date +%s.%N)
		MT_CUDA_MATMUL_TUNING=$TUNING build/bin/mt-train --device cuda --bf16 "${ARCH[@]}" --vocab-size 50257 \
			--mock-data --micro-batch-size "$B" --global-batch-size "$B" --train-iters 1 --eval-iters 0 \
			${MT_FLAGS:-} 2> "$W/tune$B.log" > /dev/null || { echo "mt-train's tuning run B=$B failed:"; tail -5 "$W/tune$B.log"; continue; }
		echo "mt-train matmul tuning B=$B: $(grep -c ' candidates: ' "$W/tune$B.log") products timed in" \
			"$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.0f}')" "$t0" "$(date +%s.%N)") s" \
			"($(grep -c -v '^#' "$TUNING") picks in $TUNING)"
	fi
	ratios=()
	for ((r = 1; r <= ${ROUNDS:-1}; r++)); do
		[ "${ROUNDS:-1}" -gt 1 ] && echo "round $r:"
		rm -f "$W/mt$B.jsonl" # --log-json appends
		MT_CUDA_MATMUL_TUNING=$TUNING build/bin/mt-train --device cuda --bf16 "${ARCH[@]}" --vocab-size 50257 --mock-data \
			--micro-batch-size "$B" --global-batch-size "$B" --train-iters "$STEPS" --log-interval 1 \
			--lr 6e-4 --weight-decay 0.1 --clip-grad 1.0 --eval-iters 0 --log-json "$W/mt$B.jsonl" ${MT_FLAGS:-} 2> "$W/mt$B.log"
		rc=$?
		[ $rc -eq 0 ] || { echo "mt-train B=$B failed ($rc):"; tail -5 "$W/mt$B.log"; break; }
		python3 - "$W/mt$B.jsonl" "$W/mt$B.log" "$B" "$WARM" $DIMS > "$W/mt$B.txt" <<'PY'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
log = open(sys.argv[2]).read()
B, warm = int(sys.argv[3]), int(sys.argv[4])
P = int(re.search(r"model: (\d+) parameters", log).group(1))
mem = re.search(r"memory plan ([0-9.]+) GiB", log).group(1)
L, D, T, pos, name = int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8]), sys.argv[9]
steps = [b["elapsed"] - a["elapsed"] for a, b in zip(rows[warm:], rows[warm + 1:])]
dt = sum(steps) / len(steps)
tok = B * T / dt
flops = 6 * (P - pos * T * D) + 12 * L * D * T
print(f"mt-train {name} B={B} T={T} bf16: {dt*1e3:.1f} ms/step, {tok:,.0f} tok/s, MFU {100*flops*tok/989e12:.1f}% "
      f"(params {P/1e6:.1f}M, loss {rows[-1]['loss']:.3f}, planned device memory {mem} GiB)")
print(f"TOKS {tok:.0f}")
PY
		grep -v '^TOKS' "$W/mt$B.txt"
		[ "${MT_ONLY:-0}" = 1 ] && continue
		B=$B STEPS=$STEPS python3 "$REF" > "$W/pt$B.txt" 2>&1
		tail -1 "$W/pt$B.txt"
		mt=$(grep '^TOKS' "$W/mt$B.txt" | cut -d' ' -f2)
		pt=$(tail -1 "$W/pt$B.txt" | grep -o '[0-9,]* tok/s' | tr -d ',' | cut -d' ' -f1)
		if [ -n "$mt" ] && [ -n "$pt" ]; then
			ratios+=("$(python3 -c "print($mt / $pt)")")
			python3 -c "print(f'B=$B: mt-train / PyTorch tokens/s = {${ratios[-1]}:.3f}')"
		fi
	done
	[ ${#ratios[@]} -lt 2 ] || python3 -c "
import statistics, sys
r = [float(x) for x in sys.argv[2:]]
print(f'B={sys.argv[1]}: median of {len(r)} rounds: mt-train / PyTorch tokens/s = {statistics.median(r):.3f} (rounds: ' + ', '.join(f'{x:.3f}' for x in r) + ')')" "$B" "${ratios[@]}"
done
