#!/bin/sh
# bench/ckpt-megatron.sh: mt-ckpt-reshard's Megatron-LM export and import of a 1B-class model,
# in both of Megatron's formats (torch_dist, the default, and the legacy torch files), against
# the disk: `cp -r` of the same files in the same run (a read and a write of the same bytes,
# as an export or import reads one format and writes the other). Prints GB/s (of Megatron's
# files) and the ratio to cp's.
#
#   bench/ckpt-megatron.sh                   # Llama-style 0.93B (16 x 2048, GQA 16/4, SwiGLU 5632), bf16 files
#   LAYERS=4 bench/ckpt-megatron.sh          # smaller
#   CKPT_BENCH_DIR=/scratch bench/ckpt-megatron.sh
#
# The mt checkpoint it starts from is made by one mt-train step on the CPU (--no-save-optim):
# about 16 bytes a parameter of memory for that step (15 GB at the default size) and 4 bytes
# a parameter of disk, plus 2 bytes a parameter for each Megatron copy.
#
# Env: BUILD (build), CKPT_BENCH_DIR (default $TMPDIR, else /tmp), LAYERS HIDDEN HEADS QGROUPS
# FFN VOCAB (16 2048 16 4 5632 32000), TP PP (the Megatron layout written: 2 2).
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN=$BUILD/bin
LAYERS=${LAYERS:-16} HIDDEN=${HIDDEN:-2048} HEADS=${HEADS:-16} QGROUPS=${QGROUPS:-4} FFN=${FFN:-5632}
VOCAB=${VOCAB:-32000} TP=${TP:-2} PP=${PP:-2}
W=$(mktemp -d "${CKPT_BENCH_DIR:-${TMPDIR:-/tmp}}/mt-ckpt-megatron.XXXXXX")
trap 'rm -rf "$W"' EXIT INT TERM

now() { date +%s.%N; }
secs() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$2"; }
bytes() { du -sb "$1" | cut -f1; }
rate() { python3 -c "import sys; print(f'{int(sys.argv[1]) / 1e9 / float(sys.argv[2]):.2f}')" "$1" "$2"; }

echo "model: Llama-style, $LAYERS layers, hidden $HIDDEN, heads $HEADS/$QGROUPS, ffn $FFN, vocabulary $VOCAB; Megatron layout TP $TP x PP $PP, bf16"
t0=$(now)
OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)} "$BIN/mt-train" -q --device cpu --num-layers "$LAYERS" --hidden-size "$HIDDEN" \
	--num-attention-heads "$HEADS" --group-query-attention --num-query-groups "$QGROUPS" --ffn-hidden-size "$FFN" --swiglu \
	--normalization RMSNorm --position-embedding-type rope --disable-bias-linear --untie-embeddings-and-output-weights \
	--seq-length 32 --vocab-size "$VOCAB" --mock-data --micro-batch-size 1 --global-batch-size 1 --train-iters 1 \
	--lr 1e-4 --no-save-optim --save "$W/mt"
echo "mt checkpoint: $(bytes "$W/mt") bytes, made in $(secs "$t0" "$(now)") s"
sync

run() { # NAME COMMAND...: time it, print seconds
	name=$1
	shift
	sync
	t0=$(now)
	"$@"
	sync
	s=$(secs "$t0" "$(now)")
	echo "$s"
}

for fmt in torch_dist torch; do
	s=$(run export "$BIN/mt-ckpt-reshard" export -q --format megatron --ckpt-format "$fmt" --dtype bf16 \
		--target-tensor-parallel-size "$TP" --target-pipeline-parallel-size "$PP" "$W/mt" "$W/meg-$fmt")
	n=$(bytes "$W/meg-$fmt")
	c=$(run cp cp -r "$W/meg-$fmt" "$W/copy-$fmt")
	rm -rf "$W/copy-$fmt"
	echo "export $fmt: $n bytes in $s s, $(rate "$n" "$s") GB/s; cp -r of the same files $c s, $(rate "$n" "$c") GB/s; ratio to cp $(python3 -c "print(f'{$c / $s:.2f}')")"
	s=$(run import "$BIN/mt-ckpt-reshard" import -q --format megatron --no-load-optim "$W/meg-$fmt" "$W/back-$fmt")
	echo "import $fmt: $n bytes in $s s, $(rate "$n" "$s") GB/s; ratio to cp $(python3 -c "print(f'{$c / $s:.2f}')")"
	rm -rf "$W/back-$fmt" "$W/meg-$fmt"
done
