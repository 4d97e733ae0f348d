#!/usr/bin/env bash
# Tensor parallelism of mt-train on GPUs of one host (NCCL, one rank a GPU): tokens/s per GPU
# and MFU of a Llama-style model at each tensor-parallel size given, with sequence parallelism
# (and without, at TP > 1, with SP=both), all in one call; the ratio is tokens/s per GPU
# against TP=1's (the bar for TP=2 with SP: above 0.90 where the model fits one GPU).
# With PP=n each size runs TP x n ranks (one pipeline of n stages). Each run also prints the
# most memory any of its GPUs held (nvidia-smi, sampled every 200 ms) beside what
# `mt-train --dry-run` predicts for a GPU of that layout.
# MFU = tokens/s per GPU x (6 P + 12 L D T) / PEAK (989e12: H100 SXM dense bf16; set PEAK for
# others), the formula bench/train-gpu.sh and the PyTorch scripts use.
#   bench/train-tp-gpu.sh [TP...]          default: 1 2 (those that fit the GPUs found)
#   env LAYERS (24) HIDDEN (2048) HEADS (16) QGROUPS (4) FFN (5632) SEQ (2048) MICRO (4)
#       GLOBAL (MICRO) VOCAB (50257) PP (1) STEPS (12) WARM (3) SP (1|0|both)
#       MT_FLAGS (more mt-train flags, e.g. --recompute-granularity full)
#       TORCH=1: after each mt-train run, PyTorch's own tensor parallelism on the same model,
#       GPUs and batch (bench/torch_llama_tp.py under torchrun; PP=1 only), and the ratio of
#       tokens/s; TORCH_COMPILE=1 compiles its layers (else eager)
set -uo pipefail
cd "$(dirname "$0")/.."
command -v mpiexec >/dev/null || { echo "train-tp-gpu: error: mpiexec not found" >&2; exit 4; }
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$NGPU" -ge 1 ] || { echo "train-tp-gpu: error: no GPU found" >&2; exit 4; }
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
TPS=("${@:-1 2}")
L=${LAYERS:-24} D=${HIDDEN:-2048} T=${SEQ:-2048} B=${MICRO:-4} STEPS=${STEPS:-12} WARM=${WARM:-3}
GB=${GLOBAL:-$B} PP=${PP:-1} VOCAB=${VOCAB:-50257}
PEAK=${PEAK:-989e12}
ARCH=(--num-layers "$L" --hidden-size "$D" --num-attention-heads "${HEADS:-16}" --group-query-attention
	--num-query-groups "${QGROUPS:-4}" --ffn-hidden-size "${FFN:-5632}" --swiglu --normalization RMSNorm
	--position-embedding-type rope --disable-bias-linear --untie-embeddings-and-output-weights
	--seq-length "$T" --vocab-size "$VOCAB" --make-vocab-size-divisible-by 128)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
echo "# $(date -u +%F) $NGPU x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); Llama-style $L layers," \
	"hidden $D, T=$T, micro-batch $B, global batch $GB, PP=$PP, bf16; $STEPS steps, first $WARM left out"
base=
for tp in ${TPS[@]}; do
	n=$((tp * PP))
	[ "$n" -le "$NGPU" ] || { echo "TP=$tp PP=$PP: skipped (only $NGPU GPUs)"; continue; }
	case ${SP:-1},$tp in 1,1 | 0,* | both,1) sps=(0) ;; 1,*) sps=(1) ;; both,*) sps=(0 1) ;; esac
	for sp in "${sps[@]}"; do
		flags=(--tensor-model-parallel-size "$tp" --pipeline-model-parallel-size "$PP")
		[ "$sp" = 1 ] && flags+=(--sequence-parallel)
		log=$W/tp$tp.$sp
		run=(build/bin/mt-train --device cuda --bf16 "${ARCH[@]}" --mock-data --micro-batch-size "$B"
			--global-batch-size "$GB" --train-iters "$STEPS" --log-interval 1 --lr 3e-4 --clip-grad 1.0 --eval-iters 0
			"${flags[@]}" ${MT_FLAGS:-})
		"${run[@]}" --dry-run --world-size "$n" > "$log.dry" 2>&1 || { echo "TP=$tp SP=$sp: --dry-run failed:"; tail -3 "$log.dry"; }
		nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > "$log.mem" 2>/dev/null &
		smi=$!
		mpiexec -n "$n" "${run[@]}" --log-json "$log.jsonl" > "$log.log" 2>&1
		rc=$?
		kill $smi 2>/dev/null; wait $smi 2>/dev/null
		[ $rc = 0 ] || { echo "TP=$tp SP=$sp: mt-train failed:"; tail -5 "$log.log"; continue; }
		line=$(python3 - "$log.jsonl" "$log.log" "$tp" "$sp" "$GB" "$T" "$L" "$D" "$WARM" "$PEAK" "${base:-0}" \
			"${HEADS:-16}" "${QGROUPS:-4}" "${FFN:-5632}" "$VOCAB" "$n" "$log.mem" "$log.dry" "$NGPU" <<'PY'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
log = open(sys.argv[2]).read()
tp, sp, B, T, L, D, warm = map(int, sys.argv[3:10])
peak, base = float(sys.argv[10]), float(sys.argv[11])
H, G, F, vocab, n = map(int, sys.argv[12:17])
ngpu = int(sys.argv[19])
# the most any GPU held: nvidia-smi prints one line a GPU per sample, GPUs in order
mem = [float(x) for x in open(sys.argv[17]).read().split() if x.replace(".", "").isdigit()]
held = max(mem[i] for i in range(len(mem)) if i % ngpu < n) / 1024 if mem else 0
dry = re.search(r"^  total +([0-9.]+) GiB", open(sys.argv[18]).read(), re.M)
V = -(-vocab // (128 * tp)) * 128 * tp  # padded as mt pads for this TP size
# the whole model's parameters (every rank together): untied embedding and output layer,
# per layer QKV (GQA), output projection, SwiGLU's two input halves and output, two RMSNorms
P = 2 * V * D + L * (D * (D + 2 * D * G // H) + D * D + 3 * D * F + 2 * D) + D
plan = re.search(r"memory plan ([0-9.]+) GiB", log)
steps = [b["elapsed"] - a["elapsed"] for a, b in zip(rows[warm:], rows[warm + 1:])]
dt = sum(steps) / len(steps)
per_gpu = B * T / dt / n
mfu = per_gpu * (6 * P + 12 * L * D * T) / peak
ratio = f"{per_gpu / base:.3f}" if base else ("1.000" if tp == 1 else "- (no TP=1 run)")
pred = float(dry.group(1)) if dry else 0
vs = f" ({held / pred:.2f}x)" if pred and held else ""
print(f"TP={tp} SP={sp}{f' PP={n // tp}' if n > tp else ''}: {dt*1e3:.1f} ms/step, {per_gpu:,.0f} tok/s per GPU, "
      f"MFU {100*mfu:.1f}%, x TP=1 per GPU {ratio} (params {P/1e9:.2f}B; memory: rank 0 planned "
      f"{plan.group(1) if plan else '?'} GiB, most held {held:.1f} GiB, --dry-run {dry.group(1) if dry else '?'} GiB{vs})"
      f"|{per_gpu:.0f}")
PY
)
		echo "${line%|*}"
		if [ -z "$base" ] && [ "$tp" = 1 ]; then base=${line##*|}; fi
		# PyTorch's tensor parallelism on the same model, GPUs and batch (TORCH=1)
		if [ "${TORCH:-0}" = 1 ] && [ "$PP" = 1 ]; then
			LAYERS=$L HIDDEN=$D HEADS=${HEADS:-16} QGROUPS=${QGROUPS:-4} FFN=${FFN:-5632} VOCAB=$VOCAB SEQ=$T MICRO=$B \
				STEPS=$((STEPS - WARM)) WARM=$WARM SP=$sp PEAK=$PEAK COMPILE=${TORCH_COMPILE:-0} torchrun --standalone --nproc-per-node "$tp" \
				bench/torch_llama_tp.py > "$log.torch" 2>&1 || { echo "TP=$tp SP=$sp: PyTorch failed:"; grep -v "^W" "$log.torch" | tail -15; continue; }
			t=$(grep '^torch TP=' "$log.torch")
			echo "${t%|*}; mt-train/PyTorch $(python3 -c "print(f'{$(echo "${line##*|}") / ${t##*|}:.3f}')")"
		fi
	done
done
exit 0
