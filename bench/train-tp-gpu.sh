#!/usr/bin/env bash
# Tensor parallelism of mt-train on GPUs of one host (NCCL, one rank a GPU): tokens/s per GPU
# and MFU of a Llama-style model at each tensor-parallel size given, with sequence parallelism
# (and without, at TP > 1, with SP=both), all in one call; the ratio is tokens/s per GPU
# against TP=1's (the bar for TP=2 with SP: above 0.90 where the model fits one GPU).
# MFU = tokens/s per GPU x (6 P + 12 L D T) / PEAK (989e12: H100 SXM dense bf16; set PEAK for
# others), the formula bench/train-gpu.sh and the PyTorch scripts use.
#   bench/train-tp-gpu.sh [TP...]          default: 1 2 (those that fit the GPUs found)
#   env LAYERS (24) HIDDEN (2048) HEADS (16) QGROUPS (4) FFN (5632) SEQ (2048) MICRO (4) STEPS (12)
#       WARM (3) SP (1|0|both) MT_FLAGS (more mt-train flags)
set -uo pipefail
cd "$(dirname "$0")/.."
command -v mpiexec >/dev/null || { echo "train-tp-gpu: error: mpiexec not found" >&2; exit 4; }
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$NGPU" -ge 1 ] || { echo "train-tp-gpu: error: no GPU found" >&2; exit 4; }
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
TPS=("${@:-1 2}")
L=${LAYERS:-24} D=${HIDDEN:-2048} T=${SEQ:-2048} B=${MICRO:-4} STEPS=${STEPS:-12} WARM=${WARM:-3}
PEAK=${PEAK:-989e12}
ARCH=(--num-layers "$L" --hidden-size "$D" --num-attention-heads "${HEADS:-16}" --group-query-attention
	--num-query-groups "${QGROUPS:-4}" --ffn-hidden-size "${FFN:-5632}" --swiglu --normalization RMSNorm
	--position-embedding-type rope --disable-bias-linear --untie-embeddings-and-output-weights
	--seq-length "$T" --vocab-size 50257 --make-vocab-size-divisible-by 128)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
echo "# $(date -u +%F) $NGPU x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); Llama-style $L layers," \
	"hidden $D, T=$T, micro-batch $B, bf16; $STEPS steps, first $WARM left out"
base=
for tp in ${TPS[@]}; do
	[ "$tp" -le "$NGPU" ] || { echo "TP=$tp: skipped (only $NGPU GPUs)"; continue; }
	case ${SP:-1},$tp in 1,1 | 0,* | both,1) sps=(0) ;; 1,*) sps=(1) ;; both,*) sps=(0 1) ;; esac
	for sp in "${sps[@]}"; do
		flags=(--tensor-model-parallel-size "$tp")
		[ "$sp" = 1 ] && flags+=(--sequence-parallel)
		log=$W/tp$tp.$sp
		mpiexec -n "$tp" build/bin/mt-train --device cuda --bf16 "${ARCH[@]}" --mock-data --micro-batch-size "$B" \
			--global-batch-size "$B" --train-iters "$STEPS" --log-interval 1 --lr 3e-4 --clip-grad 1.0 --eval-iters 0 \
			--log-json "$log.jsonl" "${flags[@]}" ${MT_FLAGS:-} > "$log.log" 2>&1 ||
			{ echo "TP=$tp SP=$sp: mt-train failed:"; tail -5 "$log.log"; continue; }
		line=$(python3 - "$log.jsonl" "$log.log" "$tp" "$sp" "$B" "$T" "$L" "$D" "$WARM" "$PEAK" "${base:-0}" \
			"${HEADS:-16}" "${QGROUPS:-4}" "${FFN:-5632}" <<'PY'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
log = open(sys.argv[2]).read()
tp, sp, B, T, L, D, warm = map(int, sys.argv[3:10])
peak, base = float(sys.argv[10]), float(sys.argv[11])
H, G, F = map(int, sys.argv[12:15])
V = -(-50257 // (128 * tp)) * 128 * tp  # padded as mt pads for this TP size
# the whole model's parameters (every rank together): untied embedding and output layer,
# per layer QKV (GQA), output projection, SwiGLU's two input halves and output, two RMSNorms
P = 2 * V * D + L * (D * (D + 2 * D * G // H) + D * D + 3 * D * F + 2 * D) + D
mem = re.search(r"memory plan ([0-9.]+) GiB", log)
steps = [b["elapsed"] - a["elapsed"] for a, b in zip(rows[warm:], rows[warm + 1:])]
dt = sum(steps) / len(steps)
per_gpu = B * T / dt / tp
mfu = per_gpu * (6 * P + 12 * L * D * T) / peak
ratio = f"{per_gpu / base:.3f}" if base else ("1.000" if tp == 1 else "- (no TP=1 run)")
print(f"TP={tp} SP={sp}: {dt*1e3:.1f} ms/step, {per_gpu:,.0f} tok/s per GPU, MFU {100*mfu:.1f}%, "
      f"x TP=1 per GPU {ratio} (params {P/1e9:.2f}B, planned {mem.group(1) if mem else '?'} GiB a rank)|{per_gpu:.0f}")
PY
)
		echo "${line%|*}"
		[ -z "$base" ] && [ "$tp" = 1 ] && base=${line##*|}
	done
done
