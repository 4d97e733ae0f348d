#!/usr/bin/env bash
# Pipeline parallelism of mt-train on CPU ranks: the measured bubble of each schedule at
# P stages (default 4) next to the papers' formula, in one call.
#
# Measured: each stage logs, per step, the seconds its passes computed and the seconds
# from the start of its schedule to the moment the last stage's losses reached it (the
# step's pipeline part, which every stage leaves together); idle = step - compute, and
# the bubble is idle / compute, the papers' unit (bubble time over the ideal time of the
# micro-batches' passes): (p - 1)/m for 1F1B, (p - 1)/(v m) interleaved, and for ZB-H1
# (p - 1)(T_F + T_B - T_W)/(m (T_F + T_B + T_W)), given here with equal pass times and
# with the pass times measured in the same run (T_B the input-gradient pass, T_W the
# weight-gradient pass). "mean" averages the stages, "first" is stage 0 (which idles
# longest in 1F1B's cool-down). On GPUs the host's clock does not see the passes (they run
# asynchronously): there, PP=n bench/train-tp-gpu.sh gives tokens/s and MFU per GPU of a
# pipeline over NCCL against one GPU.
#   bench/train-pp.sh                        P=4, 8 micro-batches a step, 8 layers
#   P=4 M=8 LAYERS=8 HIDDEN=256 SEQ=128 MICRO=2 ITERS=8 SKIP=3 bench/train-pp.sh
# With more ranks than cores the ranks share them: compute times stretch while several
# stages compute at once, and the bubble measured is what the schedule leaves idle on
# that machine, not a property of the schedule alone (run it where P cores are free).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v mpiexec >/dev/null || { echo "train-pp: error: mpiexec not found" >&2; exit 4; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
P=${P:-4}
M=${M:-8}
LAYERS=${LAYERS:-8}
HIDDEN=${HIDDEN:-256}
SEQ=${SEQ:-128}
MICRO=${MICRO:-2}
ITERS=${ITERS:-8}
SKIP=${SKIP:-3}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
MODEL=(--num-layers "$LAYERS" --hidden-size "$HIDDEN" --num-attention-heads 8 --seq-length "$SEQ"
	--max-position-embeddings "$SEQ" --vocab-size 4096 --make-vocab-size-divisible-by 128 --device cpu)
echo "# mt-train pipeline parallelism, CPU ($(nproc --all) cores, OMP_NUM_THREADS=$OMP_NUM_THREADS a rank, $P ranks),"
echo "# $LAYERS layers, hidden $HIDDEN, seq $SEQ, micro-batch $MICRO, $M micro-batches a step, fp32; $(date -u +%F)"
printf '%-12s %9s %9s %9s %9s  %-30s %10s\n' schedule formula 'f(T meas)' mean first 'stages' tokens/s

for sched in 1f1b interleaved zb-h1; do
	log=$W/$sched.jsonl
	flags=(--pipeline-model-parallel-size "$P" --pipeline-schedule "$sched")
	[ "$sched" = interleaved ] && flags+=(--num-virtual-stages-per-pipeline-rank 2)
	mpiexec -n "$P" build/bin/mt-train "${MODEL[@]}" --mock-data --micro-batch-size "$MICRO" \
		--global-batch-size $((MICRO * M)) --train-iters "$ITERS" --lr 1e-4 --log-interval 1 --eval-iters 0 \
		--log-json "$log" -q "${flags[@]}" >&2
	/usr/bin/python3 - "$log" "$SKIP" "$sched" "$P" "$M" <<'PY'
import json, sys
log, skip, sched, p, m = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
rows = [json.loads(l) for l in open(log)][skip:]
v = 2 if sched == "interleaved" else 1
eq = {"1f1b": (p - 1) / m, "interleaved": (p - 1) / (v * m), "zb-h1": (p - 1) / (3 * m)}[sched]
meas = sum(r["pp_bubble_formula"] for r in rows) / len(rows)
stages = [sum(r["pp_bubble"][q] for r in rows) / len(rows) for q in range(p)]
tps = len(rows) / sum(1 / r["tokens_per_second"] for r in rows)
print("%-12s %9.4f %9.4f %9.4f %9.4f  %-30s %10.0f" % (sched, eq, meas, sum(stages) / p, stages[0],
      " ".join("%.3f" % x for x in stages), tps))
PY
done
