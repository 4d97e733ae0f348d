#!/bin/sh
# bench/ckpt.sh: checkpoint save and load speed of mt-train at 1, 2, 4 and 8 MPI ranks on one
# machine, against the disk's own sequential speed measured in the same run with dd, and
# the same tensors written by parallel HDF5 into one file (bench/ckpt-phdf5.c) where
# pkg-config knows hdf5-mpich.
#
#   bench/ckpt.sh                       # 1 2 4 8 ranks, about 2.4 GB of state (200M parameters x 12 bytes)
#   bench/ckpt.sh 2 8                   # those rank counts only
#   HIDDEN=512 LAYERS=4 bench/ckpt.sh   # smaller
#   CKPT_BENCH_DIR=/scratch bench/ckpt.sh
#
# The parallel-HDF5 comparison needs Debian's libhdf5-mpich-dev (apt-get install
# libhdf5-mpich-dev; it installs beside the serial HDF5 that mt links); without it that
# table is skipped. A run of the default size takes about 10 minutes on 2 cores (ranks
# beyond the cores share them) and needs about 7 GB of memory and 5 GB of disk.
#
# Layouts: 1 rank writes one self-contained model.h5; 2 ranks TP=2; 4 ranks TP=2 x PP=2;
# 8 ranks TP=2 x PP=2 x DP=2 with ZeRO-1; other counts DP=N with ZeRO-1. mt-train runs
# on the CPU backend (--device cpu) with one OpenMP thread a rank.
#
# Env:
#   BUILD           mt's build directory (build)
#   MPIEXEC         the MPI launcher (mpiexec; MPICH's here); run as $MPIEXEC -n N ...
#   CKPT_BENCH_DIR  where to write: a directory on the disk to measure; the run makes a
#                   fresh mt-ckpt-bench.XXXXXX inside it and removes that at the end
#                   (default $TMPDIR, else /tmp: check that it is not a tmpfs)
#   HIDDEN LAYERS HEADS VOCAB   the GPT model (1024, 12, 16, 50257)
#   RANKS           rank counts when none are given as arguments ("1 2 4 8")
#   PHDF5           0: skip the parallel-HDF5 comparison
#   CC              compiler for bench/ckpt-phdf5.c (cc)
#
# Each run trains 2 steps and saves after each (--save-interval 1): the second save is
# the steady state (the first also pays for touching the host buffers' memory the
# first time, first_s). The --async-save run trains 3 steps, so that the save of step 2
# has a step after it to overlap (that of the last step has none).
#
# dd writes as many bytes as the model's state three times each way, buffered with
# conv=fsync and with oflag=direct; the median is the reference (the disk of a shared
# machine varies from one run to the next: the three are printed).
#
# Columns of the first table (one line a rank count):
#   MB         bytes of the iteration directory (parts and index), 10^6
#   save_s     mt-train's time for the second save, from the copy to host memory to
#              `latest` moved (every rank's part written and fsynced, the index, renames)
#   MB/s %dd   MB / save_s, and that as a share of dd's buffered write with fsync
#   load_s     the slowest rank's time to read its slices (--load), after the pages of
#              the checkpoint were dropped from the page cache (dd iflag=nocache), so
#              that the load reads the disk; load_MB/s = MB / load_s
#   async_wait how long the step loop waited for the second save with --async-save
#              (the slowest rank): in save() and, where the writer thread copies the
#              state (the CPU backend), for that copy at the next optimizer step
#   copy_s     the copy of the state to host memory (the slowest rank): in the writer
#              thread beside the next step's forward and backward passes, so that
#              async_wait can be below it
#   first_s    the first save's time (synchronous)
# Second table: MB/s of the same tensors, each rank its own slices, written as mt's
# per-rank files without mt's checks and index (files), and into one file by MPI-IO with
# independent and with collective transfers; barrier_ms is one MPI_Barrier's latency
# (each collective step of parallel HDF5 costs at least that).
set -eu

usage() {
	sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'
	exit "$1"
}
for a in "$@"; do
	case $a in
	-h | --help) usage 0 ;;
	*[!0-9]* | '' | 0) echo "bench/ckpt.sh: '$a' is not a rank count (a positive integer); -h for help" >&2 && exit 2 ;;
	esac
done
[ $# -gt 0 ] && RANKS="$*"
RANKS=${RANKS:-"1 2 4 8"}
for a in $RANKS; do
	case $a in
	*[!0-9]* | 0) echo "bench/ckpt.sh: RANKS: '$a' is not a rank count (a positive integer)" >&2 && exit 2 ;;
	esac
done

BUILD=${BUILD:-build}
MPIEXEC=${MPIEXEC:-mpiexec}
HIDDEN=${HIDDEN:-1024} LAYERS=${LAYERS:-12} HEADS=${HEADS:-16} VOCAB=${VOCAB:-50257}
PHDF5=${PHDF5:-1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$BUILD/bin/mt-train" ] || { echo "bench/ckpt.sh: no $BUILD/bin/mt-train: build mt first (make), or set BUILD" >&2; exit 2; }
command -v "$MPIEXEC" >/dev/null 2>&1 || { echo "bench/ckpt.sh: MPI launcher '$MPIEXEC' not found (apt-get install mpich, or set MPIEXEC)" >&2; exit 2; }
PATH=$(cd "$BUILD" && pwd)/bin:$PATH
cores=$(getconf _NPROCESSORS_ONLN)
export OMP_NUM_THREADS=1
BASE=${CKPT_BENCH_DIR:-${TMPDIR:-/tmp}}
[ -d "$BASE" ] || { echo "bench/ckpt.sh: CKPT_BENCH_DIR '$BASE' is not a directory" >&2; exit 2; }
W=$(mktemp -d "$BASE/mt-ckpt-bench.XXXXXX")
trap 'rm -rf "$W"' EXIT
trap 'exit 130' INT TERM
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
# drop a file's pages from the page cache (they are clean after an fsync)
uncache() { for f in "$@"; do dd if="$f" iflag=nocache count=0 status=none 2>/dev/null || true; done; }

M="--device cpu --num-layers $LAYERS --hidden-size $HIDDEN --num-attention-heads $HEADS --seq-length 32
   --max-position-embeddings 32 --mock-data --vocab-size $VOCAB --micro-batch-size 1 --lr 1e-4
   --log-interval 1 --distributed-timeout-seconds 1800"

layout() {
	case $1 in
	1) echo "" ;;
	2) echo "--tensor-model-parallel-size 2" ;;
	4) echo "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2" ;;
	8) echo "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --use-distributed-optimizer" ;;
	*) echo "--use-distributed-optimizer" ;;
	esac
}
dp_of() { case $1 in 1 | 2 | 4) echo 1 ;; 8) echo 2 ;; *) echo "$1" ;; esac; }
name_of() {
	case $1 in
	1) echo "1 (one file)" ;;
	2) echo "2 (TP=2)" ;;
	4) echo "4 (TP=2 PP=2)" ;;
	8) echo "8 (TP=2 PP=2 DP=2 Z1)" ;;
	*) echo "$1 (DP=$1 Z1)" ;;
	esac
}

# --- the model's size, and the disk's speed for as many bytes --------------------------
# shellcheck disable=SC2086
params=$(mt-train $M --global-batch-size 1 --train-iters 1 --dry-run 2>&1 | sed -n 's/.*parameters: *\([0-9][0-9]*\).*/\1/p' | head -1)
[ -n "$params" ] || params=$((12 * LAYERS * HIDDEN * HIDDEN + VOCAB * HIDDEN))
mb=$((params * 12 / 1000000))
[ "$mb" -ge 1 ] || mb=1
fs=$(stat -f -c %T "$W" 2>/dev/null || echo '?')
# MB/s of one dd: ddrun ARGS...; nothing when it fails (no O_DIRECT on tmpfs)
ddrun() {
	t0=$(now)
	dd "$@" status=none 2>/dev/null || return 0
	t1=$(now)
	awk -v m="$mb" -v s="$(secs "$t0" "$t1")" 'BEGIN { printf "%.0f\n", m * 1.048576 / s }'
}
median() { tr ' ' '\n' | grep . | sort -n | awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : "" }'; }
dd_f="" dd_d="" dd_r=""
for _ in 1 2 3; do
	dd_f="$dd_f $(ddrun if=/dev/zero of="$W/dd" bs=1M count=$mb conv=fsync)"
	uncache "$W/dd"
	dd_r="$dd_r $(ddrun if="$W/dd" of=/dev/null bs=1M)"
	rm -f "$W/dd"
	dd_d="$dd_d $(ddrun if=/dev/zero of="$W/dd" bs=1M count=$mb oflag=direct conv=fsync)"
	rm -f "$W/dd"
done
# shellcheck disable=SC2086,SC2116
dd_f=$(echo $dd_f) dd_d=$(echo $dd_d) dd_r=$(echo $dd_r)
dd_fsync=$(echo "$dd_f" | median)
dd_direct=$(echo "$dd_d" | median)
dd_read=$(echo "$dd_r" | median)
[ -n "$dd_fsync" ] || { echo "bench/ckpt.sh: dd could not write $mb MiB into $W" >&2; exit 1; }
[ -n "$dd_direct" ] || dd_direct="n/a (no O_DIRECT here)"

echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(uname -n), $cores cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo); $W on $fs"
echo "# model: $LAYERS layers x $HIDDEN, vocabulary $VOCAB: $params parameters (~$mb MB of fp32 weights and AdamW moments)"
echo "# disk, $mb MiB, median of 3 (the 3): dd bs=1M conv=fsync $dd_fsync MB/s ($dd_f); oflag=direct $dd_direct MB/s ($dd_d); read after iflag=nocache $dd_read MB/s ($dd_r)"

# --- parallel HDF5 -------------------------------------------------------------------------
ph=""
if [ "$PHDF5" != 0 ] && pkg-config --exists hdf5-mpich 2>/dev/null; then
	# shellcheck disable=SC2046
	if ${CC:-cc} -O2 -o "$W/ckpt-phdf5" "$ROOT/bench/ckpt-phdf5.c" $(pkg-config --cflags --libs hdf5-mpich) 2>"$W/cc.txt"; then
		ph="$W/ckpt-phdf5"
	else
		echo "# bench/ckpt-phdf5.c did not build (parallel HDF5 skipped):"
		sed 's/^/#   /' "$W/cc.txt"
	fi
elif [ "$PHDF5" != 0 ]; then
	echo "# parallel HDF5 skipped: pkg-config knows no hdf5-mpich (apt-get install libhdf5-mpich-dev)"
fi

# --- mt-train at each rank count --------------------------------------------------------------
val() { sed -n "$1" "$2" | tail -1; }
fail() {
	echo "bench/ckpt.sh: $1 failed at $2 ranks; its log:" >&2
	tail -20 "$3" >&2
	exit 1
}
printf '%-24s %7s %7s %7s %5s %7s %9s %10s %7s %7s\n' ranks MB save_s MB/s %dd load_s load_MB/s async_wait copy_s first_s
: >"$W/ph.txt"
for n in $RANKS; do
	L=$(layout "$n")
	G="--global-batch-size $(dp_of "$n") --train-iters 2 --save-interval 1"
	ck="$W/ck"
	rm -rf "$ck"
	# shellcheck disable=SC2086
	"$MPIEXEC" -n "$n" mt-train $M $G $L --save "$ck" >"$W/save.txt" 2>&1 || fail "the save" "$n" "$W/save.txt"
	save=$(val 's/.*saved checkpoint at iteration 2 .* in \([0-9.]*\) s .*/\1/p' "$W/save.txt")
	first=$(val 's/.*saved checkpoint at iteration 1 .* in \([0-9.]*\) s .*/\1/p' "$W/save.txt")
	rm -rf "$ck/iter_0000001"
	bytes=$(du -sb "$ck/iter_0000002" | cut -f1)
	if [ -n "$ph" ]; then
		# a first run, not counted, touches the memory the page cache will take: on a
		# virtual machine, memory that a process has just given back is slow to touch
		# again, and would otherwise burden whichever layout runs first
		"$MPIEXEC" -n "$n" "$ph" files "$ck/iter_0000002" "$W/ph.out" >/dev/null 2>&1 || true
		rm -f "$W"/ph.out*
		for mode in files independent collective; do
			rm -f "$W"/ph.out*
			"$MPIEXEC" -n "$n" "$ph" "$mode" "$ck/iter_0000002" "$W/ph.out" >>"$W/ph.txt" 2>"$W/phe.txt" ||
				echo "$mode $n failed: $(tail -1 "$W/phe.txt")" >>"$W/ph.txt"
		done
		rm -f "$W"/ph.out*
	fi
	uncache "$ck"/iter_0000002/*.h5
	# shellcheck disable=SC2086
	"$MPIEXEC" -n "$n" mt-train $M $G $L --load "$ck" >"$W/load.txt" 2>&1 || fail "the load" "$n" "$W/load.txt"
	load=$(val 's/.*loaded checkpoint .* in \([0-9.]*\) s.*/\1/p' "$W/load.txt")
	rm -rf "$ck"
	# shellcheck disable=SC2086
	"$MPIEXEC" -n "$n" mt-train $M $G $L --train-iters 3 --save "$ck" --async-save >"$W/async.txt" 2>&1 || fail "the --async-save run" "$n" "$W/async.txt"
	wait=$(val 's/.*saved checkpoint at iteration 2 .*the step loop waited \([0-9.]*\) s.*/\1/p' "$W/async.txt")
	# the copy inside the wait, or in the writer thread (the CPU backend)
	copy=$(val 's/.*saved checkpoint at iteration 2 .*, \([0-9.]*\) s of it copying.*/\1/p
		s/.*saved checkpoint at iteration 2 .*host memory in \([0-9.]*\) s).*/\1/p' "$W/async.txt")
	rm -rf "$ck"
	for v in "$save" "$first" "$load" "$wait" "$copy"; do
		[ -n "$v" ] || { echo "bench/ckpt.sh: a time is missing from mt-train's logs at $n ranks" >&2; tail -5 "$W"/save.txt "$W"/load.txt "$W"/async.txt >&2; exit 1; }
	done
	awk -v name="$(name_of "$n")" -v b="$bytes" -v s="$save" -v d="$dd_fsync" -v l="$load" -v w="$wait" -v c="$copy" -v f="$first" \
		'BEGIN { printf "%-24s %7.0f %7.2f %7.0f %4.0f%% %7.2f %9.0f %10.3f %7.3f %7.2f\n", name, b / 1e6, s, b / 1e6 / s, 100 * b / 1e6 / s / d, l, b / 1e6 / l, w, c, f }'
done

if [ -n "$ph" ]; then
	echo
	echo "# the same tensors, each rank its slices, fsynced; MB/s (bench/ckpt-phdf5.c)"
	printf '%-6s %7s %9s %12s %11s %11s\n' ranks MB files independent collective barrier_ms
	for n in $RANKS; do
		awk -v n="$n" '$2 == n && $1 ~ /^(files|independent|collective)$/ { mb = $3; r[$1] = $5; b = $6 }
			$2 == n && $3 == "failed:" { r[$1] = "failed" }
			END { printf "%-6s %7s %9s %12s %11s %11s\n", n, mb, r["files"], r["independent"], r["collective"], b }' "$W/ph.txt"
	done
	grep ' failed: ' "$W/ph.txt" | sed 's/^/# /' || true
fi
