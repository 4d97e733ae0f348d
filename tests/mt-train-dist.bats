#!/usr/bin/env bats
# mt-train with several processes under mpiexec (MPICH): data parallelism bit-exact
# against one process, the distributed optimizer, resuming with another number of
# ranks, the signal handshake, a rank that hangs or dies, --dry-run.
load helpers
cpu_only

setup_file() {
	cd "$BATS_FILE_TMPDIR"
	python3 "$MT_ROOT/share/markov/make-markov.py" --docs 600 > mk.jsonl 2> /dev/null
	mt-tokenize -q --input mk.jsonl --tokenizer-type NullTokenizer --vocab-size 64 --output-prefix mk
}

setup() {
	command -v mpiexec >/dev/null || skip "mpiexec not found (scripts/install-deps.sh installs MPICH)"
	cd "$BATS_TEST_TMPDIR"
	F=$BATS_FILE_TMPDIR
	# one thread a rank: two ranks share the CI's two cores, and the same thread count
	# on both sides makes the comparison exact
	export OMP_NUM_THREADS=1
	TINY=(--config "$MT_ROOT/share/configs/tiny.conf" --data-path "$F/mk_text_document" --tokenizer-type NullTokenizer
		--vocab-size 64 --split 95,5,0 --data-cache-path cache --lr 1e-3 --lr-decay-style cosine --lr-warmup-iters 2
		--log-interval 1 --distributed-timeout-seconds 60)
}

# the fields that must agree between two runs' JSON logs
fields() {
	python3 -c 'import json,sys; [print(json.dumps({k: d[k] for k in ("iteration", "consumed_samples", "loss", "lr", "grad_norm", "valid_loss") if k in d})) for d in map(json.loads, open(sys.argv[1]))]' "$1"
}

@test "dist.h's collectives on 1, 2 and 3 ranks give the known results" {
	for n in 1 2 3; do
		run -0 mpiexec -n $n dist-check
		echo "$output"
		[ "$(grep -c '^ok ' <<<"$output")" -eq 8 ]
		! grep -q '^not ok' <<<"$output"
	done
}

@test "DP=2 and DP=4 give DP=1's losses, gradient norms, validation and weights bit for bit" {
	M=("${TINY[@]}" --micro-batch-size 2 --global-batch-size 8 --train-iters 6 --eval-interval 3 --eval-iters 2 -q)
	mt-train "${M[@]}" --save A --log-json A.jsonl
	mpiexec -n 2 mt-train "${M[@]}" --save B --log-json B.jsonl
	mpiexec -n 4 mt-train "${M[@]}" --save C --log-json C.jsonl
	[ "$(wc -l < A.jsonl)" -eq 6 ]
	diff <(fields A.jsonl) <(fields B.jsonl)
	diff <(fields A.jsonl) <(fields C.jsonl)
	grep -q valid_loss B.jsonl
	[ "$(ckpt-hash A)" = "$(ckpt-hash B)" ]
	[ "$(ckpt-hash A)" = "$(ckpt-hash C)" ]
	# and the sample order matters: another micro-batch split of the same global batch
	# gives other gradients (the comparison above can fail)
	mt-train "${M[@]}" --micro-batch-size 4 --save D --log-json D.jsonl
	a=$(ckpt-hash A)
	d=$(ckpt-hash D)
	[ "$a" != "$d" ]
}

@test "--use-distributed-optimizer: DP=2 matches DP=1 bit for bit; the checkpoint holds whole moments" {
	M=("${TINY[@]}" --micro-batch-size 2 --global-batch-size 4 --train-iters 5 -q)
	mt-train "${M[@]}" --save A --log-json A.jsonl
	mpiexec -n 2 mt-train "${M[@]}" --use-distributed-optimizer --save B --log-json B.jsonl
	diff <(fields A.jsonl) <(fields B.jsonl)
	[ "$(ckpt-hash A)" = "$(ckpt-hash B)" ]
	run -0 mt-ckpt-reshard inspect B
	[ "$(grep -c $'^tensor\toptimizer/exp_avg/' <<<"$output")" -eq 28 ]
}

@test "resume with another number of ranks: DP=2 ZeRO -> DP=1 and DP=1 -> DP=2 ZeRO equal an uninterrupted run" {
	M=("${TINY[@]}" --micro-batch-size 2 --global-batch-size 4 --train-iters 8 -q)
	mt-train "${M[@]}" --save A --log-json A.jsonl
	mpiexec -n 2 mt-train "${M[@]}" --use-distributed-optimizer --save B --exit-interval 4 --log-json B.jsonl
	[ "$(cat B/latest)" = 4 ]
	mt-train "${M[@]}" --save B --load B --log-json B.jsonl
	[ "$(ckpt-hash A)" = "$(ckpt-hash B)" ]
	diff <(fields A.jsonl) <(fields B.jsonl)
	mt-train "${M[@]}" --save C --exit-interval 4 --log-json C.jsonl
	mpiexec -n 2 mt-train "${M[@]}" --use-distributed-optimizer --save C --load C --log-json C.jsonl
	[ "$(ckpt-hash A)" = "$(ckpt-hash C)" ]
	diff <(fields A.jsonl) <(fields C.jsonl)
}

@test "--rampup-batch-size: Megatron's batch sizes and iteration count; DP=2 with ZeRO equals DP=1" {
	M=("${TINY[@]}" --micro-batch-size 2 --global-batch-size 12 --train-samples 100 --rampup-batch-size 4 4 24
		--lr-warmup-samples 8 -q)
	mt-train "${M[@]}" --save A --log-json A.jsonl
	mpiexec -n 2 mt-train "${M[@]}" --use-distributed-optimizer --save B --log-json B.jsonl
	# 2 increments of 12 samples: batches 4 4 4 8 8, then 12 until 100 samples (11 iterations)
	run -0 python3 -c 'import json,sys; print(" ".join(str(json.loads(l)["consumed_samples"]) for l in open(sys.argv[1])))' A.jsonl
	[ "$output" = "4 8 12 20 28 40 52 64 76 88 100" ]
	diff <(fields A.jsonl) <(fields B.jsonl)
	[ "$(ckpt-hash A)" = "$(ckpt-hash B)" ]
	# Megatron's rule: a rampup needs sample-based training; the batch must divide among the ranks
	run -2 --separate-stderr mt-train "${TINY[@]}" --micro-batch-size 2 --global-batch-size 12 --train-iters 5 \
		--rampup-batch-size 4 4 24
	[[ $stderr == *"need --train-samples"* ]]
	run ! --separate-stderr mpiexec -n 2 mt-train "${TINY[@]}" --micro-batch-size 2 --global-batch-size 12 \
		--train-samples 100 --rampup-batch-size 6 6 24
	[[ $stderr == *"start and increment must be multiples of --micro-batch-size 2 x 2"* ]]
}

@test "--step-batch-size-schedule: resumed on two ranks (ZeRO) it equals one rank's run; batches already passed need not divide" {
	# batches of 1 up to sample 4 (256 tokens of 64) on one rank, then 4 on two: Megatron
	# checks only the batches still to come, so the first entry need not divide by two
	S=("${TINY[@]}" --micro-batch-size 1 --train-iters 6 --step-batch-size-schedule "0:1 256:4" -q)
	mt-train "${S[@]}" --save C --log-json C.jsonl
	mt-train "${S[@]}" --save D --exit-interval 4 --log-json D.jsonl
	mpiexec -n 2 mt-train "${S[@]}" --use-distributed-optimizer --save D --load D --log-json D.jsonl
	run -0 python3 -c 'import json,sys; print(" ".join(str(json.loads(l)["consumed_samples"]) for l in open(sys.argv[1])))' D.jsonl
	[ "$output" = "1 2 3 4 8 12" ]
	diff <(fields C.jsonl) <(fields D.jsonl)
	[ "$(ckpt-hash C)" = "$(ckpt-hash D)" ]
	run ! --separate-stderr mpiexec -n 2 mt-train "${S[@]}"
	[[ $stderr == *"'0:1': batch 1 is not a multiple of micro-batch x data-parallel size 2"* ]]
}

@test "a signal to one rank stops every rank at the same step, saved, exit 0; the run resumes" {
	M=("${TINY[@]}" --micro-batch-size 2 --global-batch-size 4 --train-iters 100000 --log-interval 100000)
	MT_TEST_TAG=sig$$ mpiexec -n 2 mt-train "${M[@]}" --save ck 2> err.txt &
	pid=$!
	for _ in $(seq 1 100); do [ -n "$(rank_pid sig$$ 1)" ] && break; sleep 0.1; done
	sleep 2
	kill -USR1 "$(rank_pid sig$$ 1)"
	wait "$pid"
	cat err.txt
	it=$(cat ck/latest)
	[ "$it" -gt 0 ] && [ "$it" -lt 100000 ]
	grep -q "stopping at iteration $it (signal)" err.txt
	[ "$(grep -c 'saved checkpoint' err.txt)" -eq 1 ]
	run -0 ckpt-hash ck
	[[ $output == "iteration $it "* ]]
	run -0 mpiexec -n 2 mt-train "${M[@]}" --train-iters $((it + 2)) --save ck --load ck -q
	[ "$(cat ck/latest)" = $((it + 2)) ]
}

@test "a rank that hangs: the others stop within the timeout, naming the rank and the step" {
	M=("${TINY[@]}" --micro-batch-size 2 --global-batch-size 4 --train-iters 20 -q --distributed-timeout-seconds 3)
	SECONDS=0
	MT_TEST_HANG_RANK=1 MT_TEST_HANG_STEP=3 run ! --separate-stderr timeout 60 mpiexec -n 2 mt-train "${M[@]}"
	echo "status $status after $SECONDS s; stdout: $output; stderr: $stderr"
	[ "$SECONDS" -lt 30 ]
	[[ $stderr == *"mt-train: error: rank 0 (tp 0, dp 0, pp 0): rank 1 (tp 0, dp 1, pp 0) did not reach step 3 within 3 s"* ]]
	# rank 0 hanging: another rank names it, after twice the timeout
	MT_TEST_HANG_RANK=0 MT_TEST_HANG_STEP=2 run ! --separate-stderr timeout 60 mpiexec -n 2 mt-train "${M[@]}"
	[[ $stderr == *"rank 1 (tp 0, dp 1, pp 0): rank 0 (tp 0, dp 0, pp 0) did not reach step 2 within 6 s"* ]]
}

@test "a rank killed with SIGKILL: the job ends in bounded time with a message naming the dead process" {
	M=("${TINY[@]}" --micro-batch-size 2 --global-batch-size 4 --train-iters 100000 -q --distributed-timeout-seconds 5)
	MT_TEST_TAG=kill$$ timeout 60 mpiexec -n 2 mt-train "${M[@]}" > out.txt 2>&1 &
	pid=$!
	for _ in $(seq 1 100); do [ -n "$(rank_pid kill$$ 1)" ] && break; sleep 0.1; done
	sleep 1
	victim=$(rank_pid kill$$ 1)
	kill -9 "$victim"
	SECONDS=0
	rc=0
	wait "$pid" || rc=$?
	cat out.txt
	[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]
	[ "$SECONDS" -lt 20 ]
	# the launcher names the process (mpiexec), mt-train names the rank (a timeout), or,
	# when the survivor was reading the victim's memory at the kill, MPI's transport stops
	# it naming the process it could not read ("process_vm_readv(pid=...): No such process")
	grep -Eq "PID $victim|pid=$victim .*No such process|rank 1 \(tp 0, dp 1, pp 0\) did not reach step" out.txt
}

@test "flags: pipeline parallelism needs its ranks, batch not divisible by micro x DP" {
	# pipeline parallelism needs as many ranks (tests/mt-train-pp.bats runs it)
	run -2 --separate-stderr mt-train "${TINY[@]}" --micro-batch-size 2 --train-iters 5 --pipeline-model-parallel-size 2
	[[ $stderr == *"world size 1 is not a multiple of tensor x pipeline parallel size 1 x 2"* ]]
	run ! --separate-stderr mpiexec -n 2 mt-train "${TINY[@]}" --micro-batch-size 2 --global-batch-size 6 --train-iters 2
	[[ $stderr == *"must be a multiple of --micro-batch-size 2 x 2 data-parallel ranks"* ]]
}

@test "--dry-run: the 175B config on 1024 ranks (TP 8 x PP 16 x DP 8) without a GPU" {
	run -0 --separate-stderr mt-train --config "$MT_ROOT/share/configs/gpt-175b.conf" --dry-run --world-size 1024 \
		--tensor-model-parallel-size 8 --pipeline-model-parallel-size 16 --micro-batch-size 1 --global-batch-size 1536 \
		--rampup-batch-size 16 16 5859375 --bf16 --use-distributed-optimizer --device cuda
	echo "$output"
	[[ $output == *"ranks: 1024 = tensor 8 x data 8 x pipeline 16"* ]]
	[[ $output == *"128 node(s) of 8 GPUs"* ]]
	[[ $output == *"data-parallel              0..56 step 8 (8 ranks)"* ]]
	[[ $output == *"pipeline-parallel          0..960 step 64 (16 ranks)"* ]]
	# 175B parameters (Megatron's GPT-3 175B: 174.6 B with the padded GPT-2 vocabulary)
	python3 -c "import re,sys; n = int(re.search(r'parameters: (\d+)', sys.argv[1]).group(1)); assert 174.0e9 < n < 175.5e9, n" "$output"
	[[ $output == *"batch: global 1536 = micro 1 x data-parallel 8 x 192 accumulation steps"* ]]
	[[ $output == *"in 95 increments of 61677 samples"* ]]
	# the distributed optimizer's state, sharded over the 8 data-parallel ranks
	[[ $output == *"fp32 master + 2 moments; 1/8 of them on each data-parallel rank"* ]]
	# FLOPs per step: 6 N T (+ attention) with T = 2048 x 1536 tokens, about 3.4e18
	python3 -c "import re,sys; f = float(re.search(r'flops per step: (\S+)', sys.argv[1]).group(1)); assert 3.2e18 < f < 3.8e18, f" "$output"
	# per GPU it must fit an 80 GB GPU
	python3 -c "import re,sys; t = float(re.search(r'total +(\S+) GiB', sys.argv[1]).group(1)); assert 10 < t < 80, t" "$output"
	# a world that does not divide is refused
	run -2 --separate-stderr mt-train --config "$MT_ROOT/share/configs/gpt-175b.conf" --dry-run --world-size 1000 \
		--tensor-model-parallel-size 8 --pipeline-model-parallel-size 16 --micro-batch-size 1
	[[ $stderr == *"not a multiple of tensor x pipeline"* ]]
	run -2 --separate-stderr mt-train --config "$MT_ROOT/share/configs/gpt-175b.conf" --dry-run --world-size 1024 \
		--tensor-model-parallel-size 8 --pipeline-model-parallel-size 16 --micro-batch-size 1 --global-batch-size 1536 \
		--rampup-batch-size 12 16 5859375
	[[ $stderr == *"rampup"* ]]
}

@test "--dry-run: a GPU run's activations leave out the attention's s x s scores, a CPU run's keep them" {
	D=(--config "$MT_ROOT/share/configs/gpt2-small.conf" --vocab-size 50257 --dry-run --micro-batch-size 8 --bf16)
	# GPT-2 small, s 1024, b 8, h 768, a 12: s b h = 6291456, 5 a s / h = 80; 12 layers
	run -0 --separate-stderr mt-train "${D[@]}" --device cuda
	[[ $output == *"flash attention: s*b*h*34"* ]]
	python3 -c "import re,sys; g = float(re.search(r'activations +(\S+) GiB', sys.argv[1]).group(1)); assert abs(g - 6291456 * 34 * 12 / 2**30) < 0.01, g" "$output"
	# what a GPU holds besides the tensors: the CUDA context and libraries; and its logits,
	# one chunk of at most 512 MiB in bf16 (s b v 2 = 824 MB here), the CPU's all in fp32
	[[ $output == *"CUDA context, libraries         0.50 GiB (one rank, no NCCL"* ]]
	[[ $output == *"logits                          0.50 GiB"* ]]
	run -0 --separate-stderr mt-train "${D[@]}" --device cpu
	[[ $output == *"no parallelism: s*b*h*(34 + 5*a*s/h)"* ]]
	[[ $output != *"CUDA context"* ]]
	[[ $output == *"logits                          1.54 GiB"* ]]
	python3 -c "import re,sys; g = float(re.search(r'activations +(\S+) GiB', sys.argv[1]).group(1)); assert abs(g - 6291456 * 114 * 12 / 2**30) < 0.01, g" "$output"
	# recomputation is counted as asked, flash attention or not
	run -0 --separate-stderr mt-train "${D[@]}" --device cuda --recompute-granularity full
	[[ $output == *"full recompute: 2*s*b*h"* ]]
	# TP=2 with SP: 34/t, plus the two norms' outputs the CUDA backend keeps gathered
	run -0 --separate-stderr mt-train "${D[@]}" --device cuda --world-size 2 --tensor-model-parallel-size 2 --sequence-parallel
	[[ $output == *"norms' outputs kept gathered: s*b*h*(34/t + 4*(t-1)/t)"* ]]
	[[ $output == *"CUDA context, libraries         1.35 GiB (with NCCL's buffers"* ]]
	python3 -c "import re,sys; g = float(re.search(r'activations +(\S+) GiB', sys.argv[1]).group(1)); assert abs(g - 6291456 * 19 * 12 / 2**30) < 0.01, g" "$output"
}

@test "the Llama 2 configs count the parameters of Meta's released 7B, 13B and 70B models" {
	# the totals of the Hugging Face checkpoints (embedding and output layer untied, 32000
	# tokens: unpadded at TP=1, where 32000 is a multiple of 128)
	for want in 7b:6738415616 13b:13015864320 70b:68976648192; do
		run -0 --separate-stderr mt-train --config "$MT_ROOT/share/configs/llama2-${want%%:*}.conf" --micro-batch-size 1 \
			--bf16 --dry-run
		[[ $output == *"parameters: ${want#*:} "* ]]
	done
	# 70B on 8 nodes: TP=8 x PP=8 with SP and the distributed optimizer over DP=2 fits 80 GB GPUs
	run -0 --separate-stderr mt-train --config "$MT_ROOT/share/configs/llama2-70b.conf" --micro-batch-size 1 \
		--global-batch-size 1024 --bf16 --dry-run --world-size 128 --tensor-model-parallel-size 8 \
		--pipeline-model-parallel-size 8 --sequence-parallel --use-distributed-optimizer
	[[ $output == *"ranks: 128 = tensor 8 x data 2 x pipeline 8"* ]]
	python3 -c "import re,sys; t = float(re.search(r'^  total +(\S+) GiB', sys.argv[1], re.M).group(1)); assert 10 < t < 75, t" "$output"
}

@test "--dry-run: fp32 under the distributed optimizer counts the sharded master besides the whole weights" {
	D=(--config "$MT_ROOT/share/configs/gpt2-small.conf" --vocab-size 50257 --dry-run --world-size 4
		--micro-batch-size 8 --global-batch-size 32 --device cuda)
	run -0 --separate-stderr mt-train "${D[@]}"
	[[ $output == *"optimizer state                 0.93 GiB (2 fp32 moments)"* ]]
	run -0 --separate-stderr mt-train "${D[@]}" --use-distributed-optimizer
	# 124.5M parameters x (4 + 4 + 4) bytes / 4 ranks; the fp32 weights stay whole
	[[ $output == *"weights                         0.46 GiB"* ]]
	[[ $output == *"optimizer state                 0.35 GiB (fp32 master + 2 moments; 1/4 of them on each data-parallel rank)"* ]]
	run -0 --separate-stderr mt-train "${D[@]}" --use-distributed-optimizer --bf16
	[[ $output == *"weights                         0.23 GiB"* ]]
	[[ $output == *"optimizer state                 0.35 GiB (fp32 master + 2 moments; 1/4"* ]]
}
