#!/bin/sh
# bench/ckpt.sh: checkpoint save and load speed of mt-train at 1, 2, 4 and 8 ranks on one
# machine, against the disk's own sequential write speed measured in the same run (dd with
# conv=fsync). Prints one line a layout: MB written, seconds, MB/s and the share of dd's
# MB/s; the load's seconds; with --async-save how long the step loop waited.
#
#   bench/ckpt.sh                      # about 2.4 GB of state (200M parameters x 12 bytes)
#   HIDDEN=512 LAYERS=4 bench/ckpt.sh  # smaller
#
# Env: BUILD (build), DIR (a scratch directory on the disk to measure; removed at the
# end), HIDDEN, LAYERS, HEADS, VOCAB, RANKS ("1 2 4 8"). Ranks are MPICH processes
# (mpiexec), oversubscribed where the machine has fewer cores. The load reads what the
# save has just written, mostly from the page cache unless the machine lacks memory.
set -eu
BUILD=${BUILD:-build}
PATH=$(cd "$BUILD" && pwd)/bin:$PATH
export OMP_NUM_THREADS=1
HIDDEN=${HIDDEN:-1024} LAYERS=${LAYERS:-12} HEADS=${HEADS:-16} VOCAB=${VOCAB:-50257} RANKS=${RANKS:-"1 2 4 8"}
DIR=${DIR:-$(mktemp -d "${TMPDIR:-/tmp}/mt-ckpt-bench.XXXXXX")}
mkdir -p "$DIR"
trap 'rm -rf "$DIR"' EXIT
now() { date +%s.%N; }

M="--num-layers $LAYERS --hidden-size $HIDDEN --num-attention-heads $HEADS --seq-length 32 --max-position-embeddings 32
   --mock-data --vocab-size $VOCAB --micro-batch-size 1 --lr 1e-4 --log-interval 1 --distributed-timeout-seconds 1800"

# the disk: as many bytes as the model's state, written sequentially and fsynced
params=$(mt-train $M --global-batch-size 1 --train-iters 1 --dry-run 2>&1 | sed -n 's/.*parameters: *\([0-9][0-9]*\).*/\1/p' | head -1)
[ -n "$params" ] || params=$((12 * LAYERS * HIDDEN * HIDDEN + VOCAB * HIDDEN))
mb=$((params * 12 / 1000000))
t0=$(now)
dd if=/dev/zero of="$DIR/dd" bs=1M count=$mb conv=fsync 2>/dev/null
t1=$(now)
rm -f "$DIR/dd"
disk=$(echo "$mb $t0 $t1" | awk '{printf "%.0f", $1 / ($3 - $2)}')
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(uname -n), $(nproc) cores; model $LAYERS layers x $HIDDEN, $params parameters (~$mb MB of fp32 weights and AdamW moments)"
echo "# disk: dd bs=1M count=$mb conv=fsync: $disk MB/s"
printf '%-28s %8s %8s %8s %7s %8s %10s\n' layout MB save_s MB/s disk% load_s async_wait

layout() {
	case $1 in
	1) echo "" ;;
	2) echo "--tensor-model-parallel-size 2" ;;
	4) echo "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2" ;;
	8) echo "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --use-distributed-optimizer" ;;
	*) echo "--use-distributed-optimizer" ;;
	esac
}

for n in $RANKS; do
	L=$(layout "$n")
	dp=1
	[ "$n" -eq 8 ] && dp=2
	G="--global-batch-size $dp --train-iters 1"
	rm -rf "$DIR/ck"
	mpiexec -n "$n" mt-train $M $G $L --save "$DIR/ck" 2> "$DIR/save.txt"
	save=$(sed -n 's/.*saved checkpoint .* in \([0-9.]*\) s.*/\1/p' "$DIR/save.txt" | tail -1)
	bytes=$(du -sb "$DIR/ck/iter_0000001" | cut -f1)
	mpiexec -n "$n" mt-train $M $G $L --load "$DIR/ck" 2> "$DIR/load.txt"
	load=$(sed -n 's/.*loaded checkpoint .* in \([0-9.]*\) s.*/\1/p' "$DIR/load.txt" | head -1)
	rm -rf "$DIR/ck"
	mpiexec -n "$n" mt-train $M $G $L --save "$DIR/ck" --async-save 2> "$DIR/async.txt"
	wait=$(sed -n 's/.*the step loop waited \([0-9.]*\) s.*/\1/p' "$DIR/async.txt" | tail -1)
	rm -rf "$DIR/ck"
	echo "$n ranks${L:+ ($L)}" | sed 's/--tensor-model-parallel-size /TP=/; s/--pipeline-model-parallel-size / PP=/; s/--use-distributed-optimizer/ ZeRO-1/' |
		awk -v b="$bytes" -v s="$save" -v d="$disk" -v l="$load" -v w="$wait" \
			'{printf "%-28s %8.0f %8.2f %8.0f %6.0f%% %8.2f %10.3f\n", $0, b / 1e6, s, b / 1e6 / s, 100 * b / 1e6 / s / d, l, w}'
done
