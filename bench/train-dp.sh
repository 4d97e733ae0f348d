#!/usr/bin/env bash
# Data-parallel scaling of mt-train: tokens/s per rank at 1 rank and at each of RANKS
# ranks (mpiexec, one host), with and without --use-distributed-optimizer, all in one
# call, and the scaling efficiency (tokens/s per rank at N / tokens/s at 1).
#
# With GPUs (nvidia-smi finds them): GPT-2 124M, T=1024, --device cuda --bf16, micro-batch
# 32 a GPU, one rank per GPU (NCCL; NVLink multicast off unless NCCL_NVLS_ENABLE is set);
# the bar is >= 95% at 4 GPUs. Then PyTorch's DistributedDataParallel on the same GPUs
# (bench/torch_gpt2_bench.py under torchrun, the same micro-batch; TORCH_DDP=0 skips it,
# TORCH_COMPILE=0 runs it eager). Without GPUs: the CPU backend on the tiny model,
# OMP_NUM_THREADS cores per rank (so 1 rank and N ranks use the same cores per rank;
# ranks beyond the cores only measure oversubscription). Mock data throughout.
#   bench/train-dp.sh [RANKS...]          default: "2 4" (GPU), "2" (CPU)
#   ITERS=30 SKIP=10 MICRO=32 bench/train-dp.sh 2 4
set -euo pipefail
cd "$(dirname "$0")/.."
command -v mpiexec >/dev/null || { echo "train-dp: error: mpiexec not found" >&2; exit 4; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
	KIND=gpu
	NGPU=$(nvidia-smi -L | wc -l)
	RANKS=("${@:-2 4}")
	MICRO=${MICRO:-32}
	MODEL=(--config share/configs/gpt2-small.conf --vocab-size 50257 --device cuda --bf16 --eval-iters 0)
	ITERS=${ITERS:-30}
	DEVICE="$NGPU x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
	# NVLink multicast (NVLS) off: on a shared host it can take the GPUs out of service
	export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1}
	export NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1}
else
	KIND=cpu
	RANKS=("${@:-2}")
	MICRO=${MICRO:-4}
	MODEL=(--config share/configs/tiny.conf --vocab-size 64)
	ITERS=${ITERS:-30}
	cores=$(nproc --all)
	export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
	DEVICE="CPU, $cores cores, OMP_NUM_THREADS=$OMP_NUM_THREADS per rank"
fi
read -r -a RANKS <<<"${RANKS[*]}"
SKIP=${SKIP:-10}

# tokens/s per rank over the iterations after SKIP (warm-up), from the JSON log
run() { # NRANKS [flags...]
	local n=$1 log="$W/log.$1.$RANDOM.jsonl"
	shift
	# the global batch grows with the ranks: the per-rank work stays the same (weak scaling)
	mpiexec -n "$n" build/bin/mt-train "${MODEL[@]}" --mock-data --micro-batch-size "$MICRO" \
		--global-batch-size $((MICRO * n)) --train-iters "$ITERS" --lr 1e-4 --log-interval 1 \
		--log-json "$log" -q "$@" >&2
	/usr/bin/python3 - "$log" "$SKIP" "$n" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
skip, n = int(sys.argv[2]), int(sys.argv[3])
rows = rows[skip:] if len(rows) > skip else rows
# each row is one iteration of the same tokens: total tokens / total seconds
print("%.1f" % (len(rows) / sum(1 / r["tokens_per_second"] for r in rows) / n))
PY
}

echo "# mt-train data parallel, $KIND: $DEVICE; micro-batch $MICRO, $ITERS iterations (first $SKIP skipped); $(date -u +%F); commit $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
printf '%-8s %-22s %16s %12s\n' ranks optimizer "tokens/s/rank" efficiency
for opt in replicated distributed; do
	flags=()
	[ $opt = distributed ] && flags=(--use-distributed-optimizer)
	base=$(run 1 "${flags[@]}")
	printf '%-8s %-22s %16s %12s\n' 1 "$opt" "$base" "1.000"
	for n in "${RANKS[@]}"; do
		t=$(run "$n" "${flags[@]}")
		printf '%-8s %-22s %16s %12s\n' "$n" "$opt" "$t" "$(/usr/bin/python3 -c "print('%.3f' % ($t / $base))")"
	done
done

# PyTorch DDP on the same GPUs, the same micro-batch per GPU: tokens/s per GPU at N
# against one GPU without DDP
if [ $KIND = gpu ] && [ "${TORCH_DDP:-1}" != 0 ] && /usr/bin/python3 -c 'import torch' 2>/dev/null; then
	tps() { sed -n 's/.* \([0-9,]*\) tok\/s.*/\1/p' | tr -d , | tail -1; }
	steps=$((ITERS - SKIP > 10 ? ITERS - SKIP : 10))
	base=$(B=$MICRO STEPS=$steps COMPILE=${TORCH_COMPILE:-1} /usr/bin/python3 bench/torch_gpt2_bench.py 2>"$W/torch1.err" | tps || true)
	if [ -n "$base" ]; then
		printf '%-8s %-22s %16s %12s\n' 1 "pytorch" "$base" "1.000"
		for n in "${RANKS[@]}"; do
			t=$(B=$MICRO STEPS=$steps COMPILE=${TORCH_COMPILE:-1} /usr/bin/python3 -m torch.distributed.run --standalone \
				--nproc_per_node "$n" bench/torch_gpt2_bench.py 2>"$W/torch$n.err" | tps || true)
			[ -n "$t" ] || { echo "pytorch DDP x$n failed:"; tail -5 "$W/torch$n.err"; continue; }
			printf '%-8s %-22s %16s %12s\n' "$n" "pytorch DDP" "$t" "$(/usr/bin/python3 -c "print('%.3f' % ($t / $base))")"
		done
	else
		echo "pytorch failed:"; tail -5 "$W/torch1.err"
	fi
fi
