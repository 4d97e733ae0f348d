#!/usr/bin/env bash
# Tensor parallelism of mt-train on CPU ranks: tokens/s and the bytes each rank sends a
# step at TP 1, 2 and 4, with and without --sequence-parallel, in one call, next to the
# analytical volume (Megatron, Korthikanti et al.): without SP each layer does 4
# all-reduces of b x s x h elements a micro-batch (2 forward, 2 backward); with SP the
# same bytes move as all-gather/reduce-scatter pairs, plus the 2 all-gathers that
# re-gather the column-parallel inputs for the weight gradients (Megatron does them too).
# An all-reduce of n elements sends 2 (t-1)/t n elements a rank (ring; mt's ordered
# reduce-scatter + all-gather is the same), an all-gather or reduce-scatter (t-1)/t n.
# The embedding and the output layer add 2 all-reduces of b x s x h a micro-batch (1 and
# 1) without SP; with SP the replicated parameters' partial gradients are all-reduced;
# the cross-entropy's row statistics are 3 doubles a token. The script counts all of
# them, so the ratio measured / analytical shows traffic nobody planned.
#   bench/train-tp.sh                  default model: hidden 256, 4 layers, seq 128
#   ITERS=12 SKIP=4 MICRO=4 HIDDEN=256 LAYERS=4 SEQ=128 bench/train-tp.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v mpiexec >/dev/null || { echo "train-tp: error: mpiexec not found" >&2; exit 4; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
ITERS=${ITERS:-12}
SKIP=${SKIP:-4}
MICRO=${MICRO:-4}
HIDDEN=${HIDDEN:-256}
LAYERS=${LAYERS:-4}
SEQ=${SEQ:-128}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
MODEL=(--num-layers "$LAYERS" --hidden-size "$HIDDEN" --num-attention-heads 8 --seq-length "$SEQ"
	--max-position-embeddings "$SEQ" --vocab-size 4096 --make-vocab-size-divisible-by 128 --device cpu)
echo "# mt-train tensor parallelism, CPU ($(nproc --all) cores, OMP_NUM_THREADS=$OMP_NUM_THREADS a rank),"
echo "# $LAYERS layers, hidden $HIDDEN, seq $SEQ, micro-batch $MICRO (one a step), fp32; $(date -u +%F)"
printf '%-4s %-4s %14s %16s %16s %8s\n' tp sp tokens/s bytes/step analytical ratio

for tp in 1 2 4; do
	for sp in 0 1; do
		[ $tp = 1 ] && [ $sp = 1 ] && continue
		log=$W/$tp.$sp.jsonl
		flags=(--tensor-model-parallel-size $tp)
		[ $sp = 1 ] && flags+=(--sequence-parallel)
		mpiexec -n $tp build/bin/mt-train "${MODEL[@]}" --mock-data --micro-batch-size "$MICRO" \
			--global-batch-size "$MICRO" --train-iters "$ITERS" --lr 1e-4 --log-interval 1 --eval-iters 0 \
			--log-json "$log" -q "${flags[@]}" >&2
		/usr/bin/python3 - "$log" "$SKIP" "$tp" "$sp" "$LAYERS" "$MICRO" "$SEQ" "$HIDDEN" <<'PY'
import json, sys
log, skip, t, sp, L, b, s, h = sys.argv[1], *map(int, sys.argv[2:])
rows = [json.loads(l) for l in open(log)][skip:]
tps = len(rows) / sum(1 / r["tokens_per_second"] for r in rows)
meas = sum(r.get("tp_bytes_per_step", 0) for r in rows) / len(rows)
n = b * s * h
if t == 1:
    ana = 0
elif not sp:
    # 4 all-reduces a layer, 2 for the embedding and output layer
    ana = (4 * L + 2) * 2 * (t - 1) / t * n * 4
else:
    # a layer: forward 2 all-gathers + 2 reduce-scatters, backward 4 all-gathers + 2
    # reduce-scatters; outside the layers: the embedding's reduce-scatter, the output
    # layer's all-gather and reduce-scatter, the embedding gradient's all-gather, and
    # the final norm input's all-gather in backward
    ana = (10 * L + 5) * (t - 1) / t * n * 4
    # the gradients of the replicated parameters, partial per rank with SP, all-reduced:
    # learned positions s x h, per layer 2 norms' weight and bias and 2 biases, the final norm
    ana += 2 * (t - 1) / t * (s * h + 6 * L * h + 2 * h) * 4
if t > 1:
    # the cross-entropy's row maxima, sums and losses: 3 all-gathers of b x s doubles
    ana += 3 * (t - 1) * b * s * 8
ratio = "%.3f" % (meas / ana) if ana else "-"
print("%-4d %-4s %14.0f %16.0f %16.0f %8s" % (t, "yes" if sp else "no", tps, meas, ana, ratio))
PY
	done
done
