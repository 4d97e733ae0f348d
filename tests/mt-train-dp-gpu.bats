#!/usr/bin/env bats
# mt-train with one rank per GPU under mpiexec (NCCL): DP=2 and DP=4 against DP=1 with the
# same global batch in fp32 and bf16, with and without the distributed optimizer; ZeRO
# checkpoints in the global layout, resumed at another number of ranks and on the CPU; a
# rank that hangs or is killed; ranks without a GPU of their own. Every test is tagged gpu
# and skips with fewer than two GPUs (CI has none; tests/mt-train-dist.bats covers the CPU).
load helpers

PY=${MT_PYTHON:-/usr/bin/python3}

setup() {
	command -v nvidia-smi >/dev/null 2>&1 && [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -ge 2 ] ||
		skip "fewer than two GPUs on this machine"
	command -v mpiexec >/dev/null || skip "mpiexec not found"
	cd "$BATS_TEST_TMPDIR"
	# NVLink multicast (NVLS) stays off: it can take a shared host's GPUs out of service
	export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1}
	export NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1}
	NGPU=$(nvidia-smi -L | grep -c '^GPU')
	# micro-batch 2, global batch 8: 4 micro-batches on one GPU, 2 on each of two, 1 on each of four
	TINY=(--device cuda --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 200
		--mock-data --micro-batch-size 2 --global-batch-size 8 --lr 1e-3 --log-interval 1 --eval-iters 0
		--distributed-timeout-seconds 60 --ddp-bucket-size 20000)
}

# close A.jsonl B.jsonl TOL: every iteration's loss and gradient norm agree within TOL (relative)
close() {
	"$PY" - "$@" <<'PY'
import json, sys
def rows(p):
    return {r["iteration"]: (r["loss"], r["grad_norm"]) for r in map(json.loads, open(p))}
a, b, tol = rows(sys.argv[1]), rows(sys.argv[2]), float(sys.argv[3])
assert a and sorted(a) == sorted(b), (sorted(a), sorted(b))
worst = max(abs(a[i][k] - b[i][k]) / abs(b[i][k]) for i in a for k in (0, 1))
print(f"{sys.argv[1]} vs {sys.argv[2]}: worst relative difference {worst:.3g} over {len(a)} iterations (limit {tol})")
sys.exit(0 if worst <= tol else 1)
PY
}

# same_ckpt DIR1 DIR2 TOL: the latest checkpoints' weights and AdamW moments, tensor by tensor
# (the largest difference over the tensor's largest magnitude: AdamW turns the reduction
# order's rounding into differences of about 1e-4 of a bias after a few steps; a piece in
# the wrong place would differ by the whole value)
same_ckpt() {
	"$PY" - "$@" <<'PY'
import glob, sys
import h5py, numpy as np
def latest(d):
    return h5py.File(sorted(glob.glob(d + "/iter_*/model.h5"))[-1], "r")
a, b, tol = latest(sys.argv[1]), latest(sys.argv[2]), float(sys.argv[3])
names = []
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and n.split("/")[0] in ("model", "optimizer") else None)
worst, where = 0.0, ""
for n in names:
    x, y = np.asarray(a[n], dtype=np.float64), np.asarray(b[n], dtype=np.float64)
    assert x.shape == y.shape, (n, x.shape, y.shape)
    d = np.abs(x - y).max() / max(np.abs(y).max(), 1e-30)
    if d > worst:
        worst, where = d, n
print(f"{len(names)} tensors; worst relative difference {worst:.3g} ({where}; limit {tol})")
assert len([n for n in names if n.startswith("optimizer/exp_avg/")]) > 0
sys.exit(0 if worst <= tol else 1)
PY
}

# bats test_tags=gpu
@test "gpu dp: DP=2 and DP=4 match DP=1 with the same global batch, fp32 and bf16, with and without ZeRO-1" {
	ranks=(2)
	[ "$NGPU" -ge 4 ] && ranks=(2 4)
	for prec in fp32 bf16; do
		P=()
		tol=2e-5
		[ $prec = bf16 ] && P=(--bf16) && tol=5e-3
		mt-train "${TINY[@]}" "${P[@]}" --train-iters 10 --log-json $prec-1.jsonl -q
		for n in "${ranks[@]}"; do
			mpiexec -n $n mt-train "${TINY[@]}" "${P[@]}" --train-iters 10 --log-json $prec-$n.jsonl -q
			close $prec-$n.jsonl $prec-1.jsonl $tol
			mpiexec -n $n mt-train "${TINY[@]}" "${P[@]}" --train-iters 10 --use-distributed-optimizer \
				--log-json $prec-$n-zero.jsonl -q
			close $prec-$n-zero.jsonl $prec-1.jsonl $tol
		done
	done
	# the comparison can fail: other samples give other losses
	mpiexec -n 2 mt-train "${TINY[@]}" --train-iters 10 --seed 7 --log-json other.jsonl -q
	run ! close other.jsonl fp32-1.jsonl 2e-5
}

# bats test_tags=gpu
@test "gpu dp: ZeRO-1 over 3 ranks, which divide no bucket evenly (the leftovers every rank owns), matches DP=1" {
	[ "$NGPU" -ge 3 ] || skip "fewer than three GPUs"
	M=("${TINY[@]}" --global-batch-size 6 --train-iters 10)
	mt-train "${M[@]}" --log-json one.jsonl -q
	mpiexec -n 3 mt-train "${M[@]}" --use-distributed-optimizer --log-json three.jsonl -q
	close three.jsonl one.jsonl 2e-5
}

# bats test_tags=gpu
@test "gpu dp: ZeRO-1 keeps 1/N of the optimizer state; the gradient buckets and NCCL are reported" {
	mt-train "${TINY[@]}" --bf16 --train-iters 1 2> one.txt
	mpiexec -n 2 mt-train "${TINY[@]}" --bf16 --train-iters 1 --use-distributed-optimizer 2> two.txt
	cat one.txt two.txt
	grep -q "2 data-parallel ranks over NCCL [0-9.]*, [0-9]* gradient buckets" two.txt
	grep -q "optimizer state [0-9.]* (ZeRO-1" two.txt
	# master weights and moments of half the parameters: the plan's optimizer state halves
	"$PY" - one.txt two.txt <<'PY'
import re, sys
def mb(p):
    return float(re.search(r"model: \d+ parameters; backend cuda holds ([0-9.]+) MB", open(p).read()).group(1))
def opt(p):
    return float(re.search(r"optimizer state ([0-9.]+)", open(p).read()).group(1))
print(mb(sys.argv[1]), mb(sys.argv[2]), opt(sys.argv[1]), opt(sys.argv[2]))
assert mb(sys.argv[2]) < mb(sys.argv[1])
PY
}

# bats test_tags=gpu
@test "gpu dp: a ZeRO-1 checkpoint holds whole tensors and resumes at another DP size, on one GPU and on the CPU" {
	n=2
	[ "$NGPU" -ge 4 ] && n=4
	M=("${TINY[@]}" --train-iters 8)
	mt-train "${M[@]}" --save A --save-interval 4 --log-json A.jsonl -q
	mpiexec -n $n mt-train "${M[@]}" --use-distributed-optimizer --save B --exit-interval 4 --log-json B.jsonl -q
	[ "$(cat B/latest)" = 4 ]
	# the gathered checkpoint equals the one-GPU run's at iteration 4 (weights and moments)
	mkdir -p A4 && cp -r A/iter_0000004 A4/ && echo 4 > A4/latest
	same_ckpt B A4 5e-3
	run -0 mt-ckpt-reshard inspect B
	[ "$(grep -c $'^tensor\toptimizer/exp_avg/' <<<"$output")" -eq 28 ]
	# resumed with two ranks (ZeRO), with one GPU and on the CPU: iterations 5-8 as uninterrupted
	cp -r B C && cp -r B D
	mpiexec -n 2 mt-train "${M[@]}" --use-distributed-optimizer --save B --load B --log-json B.jsonl -q
	close B.jsonl A.jsonl 2e-5
	mt-train "${M[@]}" --save C --load C --log-json C.jsonl -q
	mt-train "${M[@]}" --device cpu --save D --load D --log-json D.jsonl -q
	tail -4 A.jsonl > A58.jsonl
	tail -4 C.jsonl > C58.jsonl
	tail -4 D.jsonl > D58.jsonl
	close C58.jsonl A58.jsonl 2e-5
	close D58.jsonl A58.jsonl 1e-4
	# and a one-GPU checkpoint resumes under ZeRO with two ranks
	cp -r A4 E
	mpiexec -n 2 mt-train "${M[@]}" --use-distributed-optimizer --save E --load E --log-json E.jsonl -q
	close E.jsonl A58.jsonl 2e-5
	same_ckpt E A 5e-3
}

# bats test_tags=gpu
@test "gpu dp: a rank that hangs before its reduction: the others stop within the timeout, naming the rank and step" {
	M=("${TINY[@]}" --train-iters 20 -q --distributed-timeout-seconds 5)
	SECONDS=0
	MT_TEST_HANG_RANK=1 MT_TEST_HANG_STEP=3 MT_TEST_HANG_BACKWARD=1 run ! --separate-stderr \
		timeout 120 mpiexec -n 2 mt-train "${M[@]}"
	echo "status $status after $SECONDS s; stderr: $stderr"
	[ "$status" -ne 124 ] && [ "$SECONDS" -lt 60 ]
	[[ $stderr == *"mt-train: error: rank 0 (tp 0, dp 0, pp 0): rank 1 (tp 0, dp 1, pp 0) did not reach step 3 within 5 s"* ]]
	# the ZeRO path, and a hang after the step
	SECONDS=0
	MT_TEST_HANG_RANK=1 MT_TEST_HANG_STEP=2 run ! --separate-stderr \
		timeout 120 mpiexec -n 2 mt-train "${M[@]}" --use-distributed-optimizer
	echo "status $status after $SECONDS s; stderr: $stderr"
	[ "$status" -ne 124 ] && [ "$SECONDS" -lt 60 ]
	[[ $stderr == *"rank 1 (tp 0, dp 1, pp 0) did not reach step 2 within 5 s"* ]]
}

# bats test_tags=gpu
@test "gpu dp: a rank killed with SIGKILL ends the job in bounded time with a message naming it" {
	M=("${TINY[@]}" --train-iters 1000000 --log-interval 100000 -q --distributed-timeout-seconds 5)
	MT_TEST_TAG=gkill$$ timeout 120 mpiexec -n 2 mt-train "${M[@]}" > out.txt 2>&1 &
	pid=$!
	for _ in $(seq 1 200); do [ -n "$(rank_pid gkill$$ 1)" ] && break; sleep 0.1; done
	victim=$(rank_pid gkill$$ 1)
	[ -n "$victim" ]
	sleep 6 # past NCCL's start-up, into the training
	kill -9 "$victim"
	SECONDS=0
	rc=0
	wait "$pid" || rc=$?
	cat out.txt
	[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]
	[ "$SECONDS" -lt 60 ]
	# as in tests/mt-train-dist.bats, MPI's transport may be the one to name the process
	grep -Eq "PID $victim|pid=$victim .*No such process|rank 1 \(tp 0, dp 1, pp 0\) did not reach step|another rank died or hangs" out.txt
}

# bats test_tags=gpu
@test "gpu dp: ranks that would share a GPU are refused with a clear message" {
	CUDA_VISIBLE_DEVICES=0 run ! --separate-stderr timeout 120 mpiexec -n 2 mt-train "${TINY[@]}" --train-iters 2
	echo "$stderr"
	[[ $stderr == *"ranks 0 and 1 share GPU 0 on this node: start one rank per GPU"* ]]
	if [ "$NGPU" -ge 3 ]; then
		CUDA_VISIBLE_DEVICES=0,1 run ! --separate-stderr timeout 120 mpiexec -n 3 mt-train "${TINY[@]}" \
			--global-batch-size 6 --train-iters 2
		echo "$stderr"
		[[ $stderr == *"3 ranks on this node but 2 GPUs are visible: start one rank per GPU"* ]]
	fi
}
