#!/usr/bin/env bats
# The sbatch templates on a real one-node Slurm (tests/slurm/cluster.sh): the data-parallel
# template against the same run under mpiexec, the signal-save-requeue-resume cycle, the
# preprocessing array job and its merge against one mt-tokenize run, the eval cron helper,
# the 175B template's dry run, the Llama 2 template from imported weights. CPU backend, two ranks, a tiny model. Needs root and the
# Slurm packages (scripts/install-deps.sh); skipped with the reason otherwise.
load ../helpers
cpu_only
# helpers.bash takes the folder above this file for the root: one more level here
MT_ROOT=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
MT_BUILD=${BUILD:-build}
case $MT_BUILD in /*) ;; *) MT_BUILD=$MT_ROOT/$MT_BUILD ;; esac
export PATH="$MT_BUILD/bin:$MT_BUILD/tests:$PATH"

setup_file() {
	why=$("$MT_ROOT/tests/slurm/cluster.sh" check) || skip "no local Slurm: $why"
	command -v mpiexec >/dev/null || skip "mpiexec not found"
	# munged must traverse the path to its socket: a folder of our own under /tmp
	S=$(mktemp -d /tmp/mt-slurm.XXXXXX)
	export S
	eval "$("$MT_ROOT/tests/slurm/cluster.sh" start "$S")"
	export SLURM_CONF
	cd "$S"
	python3 "$MT_ROOT/share/markov/make-markov.py" --docs 600 > mk.jsonl 2> /dev/null
	mt-tokenize -q --input mk.jsonl --tokenizer-type NullTokenizer --vocab-size 64 --output-prefix mk
}

teardown_file() {
	if [ -z "${S:-}" ]; then return 0; fi
	"$MT_ROOT/tests/slurm/cluster.sh" stop "$S"
	rm -rf "$S"
}

setup() {
	cd "$S"
	T=$S/$BATS_TEST_NUMBER
	mkdir -p "$T"
	export OMP_NUM_THREADS=1
	# the small template on this machine: 2 ranks, CPU, the tiny model on the Markov corpus
	SB=(sbatch --parsable -n 2 --ntasks-per-node=2 --gpus-per-node=0 --cpus-per-task=1 --chdir="$T"
		--output="$T/job.out" --export=ALL,MT_BIN="$MT_BUILD/bin",MT_SLURM="$MT_ROOT/slurm",CONFIG="$MT_ROOT/share/configs/tiny.conf",DATA="$S/mk_text_document","TOKENIZER=--tokenizer-type NullTokenizer --vocab-size 64",CKPT="$T/ck",LOGS="$T/logs",DEVICE=cpu,PRECISION=,MICRO_BATCH=2,GLOBAL_BATCH=8,WARMUP=5,"EXTRA=--data-cache-path $S/cache --distributed-timeout-seconds 60")
}

# wait until job $1 has left the queue (at most $2 seconds); its final state on stdout
wait_job() {
	local id=$1 limit=${2:-120} st
	for _ in $(seq 1 $((limit * 5))); do
		st=$(scontrol show job "$id" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
		case $st in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) echo "$st"; return 0 ;; esac
		sleep 0.2
	done
	echo "job $id still ${st:-unknown} after $limit s" >&2
	scancel "$id" 2>/dev/null
	return 1
}

fields() {
	python3 -c 'import json,sys; [print(json.dumps({k: d[k] for k in ("iteration", "consumed_samples", "loss", "lr", "grad_norm", "valid_loss") if k in d})) for d in map(json.loads, open(sys.argv[1]))]' "$1"
}

# the mt-train flags a checkpoint was trained with, NUL-separated, without --save/--log-json/--load
ckpt_argv() {
	mt-ckpt-reshard inspect --json "$1" | python3 -c '
import json, sys
a = json.load(sys.stdin)["train_args"]["argv"]
out, skip = [], 0
for x in a:
    if skip: skip -= 1; continue
    if x in ("--save", "--log-json", "--load"): skip = 1; continue
    out.append(x)
sys.stdout.write("\0".join(out))'
}

@test "gpt-125m.sbatch: 2 ranks under srun give the log and checkpoint of the same run under mpiexec" {
	id=$("${SB[@]/--export=ALL,/--export=ALL,TRAIN_ITERS=20,SAVE_INTERVAL=10,}" "$MT_ROOT/templates/gpt-125m.sbatch")
	run -0 wait_job "$id" 120
	cat "$T/job.out"
	[ "$output" = COMPLETED ]
	grep -q "ranks: 2 = tensor 1 x data 2 x pipeline 1" "$T/job.out"   # the dry run first
	grep -q "2 ranks: data-parallel 2" "$T/job.out"
	[ "$(cat "$T/ck/latest")" = 20 ]
	[ "$(wc -l < "$T/logs/train.jsonl")" -ge 2 ]
	# the same flags under mpiexec, outside Slurm
	mapfile -d '' argv < <(ckpt_argv "$T/ck")
	(cd "$T" && env -u SLURM_CONF mpiexec -n 2 mt-train "${argv[@]}" --save "$T/ref" --log-json "$T/ref.jsonl" -q)
	[ "$(ckpt-hash "$T/ck")" = "$(ckpt-hash "$T/ref")" ]
	diff <(fields "$T/logs/train.jsonl") <(fields "$T/ref.jsonl")
}

@test "gpt-125m.sbatch: USR1 to the batch shell saves, requeues and resumes to the uninterrupted result" {
	id=$("${SB[@]/--export=ALL,/--export=ALL,TRAIN_ITERS=300,SAVE_INTERVAL=1000,}" "$MT_ROOT/templates/gpt-125m.sbatch")
	for _ in $(seq 1 600); do [ -s "$T/logs/train.jsonl" ] && break; sleep 0.2; done
	[ -s "$T/logs/train.jsonl" ]
	# (the waits are generous: a loaded 2-core machine can take minutes; each ends at success)
	# what --signal=B:USR1@600 does ten minutes before the time limit
	scancel --signal=USR1 --batch "$id"
	for _ in $(seq 1 600); do grep -q "requeueing job $id" "$T/job.out" 2>/dev/null && break; sleep 0.2; done
	grep -q "requeueing job $id" "$T/job.out"
	# the job goes back to the queue (it may pass through other states on the way)...
	for _ in $(seq 1 600); do
		scontrol show job "$id" | grep -q "JobState=PENDING.*" && scontrol show job "$id" | grep -q "Restarts=1" && break
		sleep 0.2
	done
	# ... where a requeued job waits for a begin time: start it now (past the second in
	# which slurmd revoked the last credential, which it would refuse), and see it start
	sleep 2
	for _ in $(seq 1 600); do
		grep -q "restart 1" "$T/job.out" && break
		scontrol update JobId="$id" StartTime=now 2>/dev/null || true
		sleep 0.5
	done
	grep -q "restart 1" "$T/job.out"
	run -0 wait_job "$id" 400
	cat "$T/job.out"
	[ "$output" = COMPLETED ]
	stopped=$(sed -n 's/.*stopping at iteration \([0-9]*\) (signal).*/\1/p' "$T/job.out")
	[ "$stopped" -gt 0 ] && [ "$stopped" -lt 300 ]
	grep -q "loaded checkpoint .* at iteration $stopped" "$T/job.out"
	grep -q "restart 1" "$T/job.out"
	[ "$(cat "$T/ck/latest")" = 300 ]
	# exact resume: the same weights as one uninterrupted run
	mapfile -d '' argv < <(ckpt_argv "$T/ck/iter_$(printf %07d "$stopped")")
	(cd "$T" && env -u SLURM_CONF mpiexec -n 2 mt-train "${argv[@]}" --save "$T/ref" -q)
	[ "$(ckpt-hash "$T/ck")" = "$(ckpt-hash "$T/ref")" ]
}

@test "preprocess.sbatch: an array job of 3 shards and the dependent merge equal one mt-tokenize run" {
	head -200 mk.jsonl > "$T/a.jsonl"
	sed -n 201,350p mk.jsonl | gzip > "$T/b.jsonl.gz"
	sed -n '351,$p' mk.jsonl > "$T/c.jsonl"
	printf '%s\n' "$T/a.jsonl" "$T/b.jsonl.gz" "$T/c.jsonl" > "$T/inputs.txt"
	export MT_BIN=$MT_BUILD/bin INPUTS=$T/inputs.txt OUT=$T/out NAME=corpus
	export TOKENIZER="--tokenizer-type NullTokenizer --vocab-size 64" EXTRA=
	run -0 "$MT_ROOT/slurm/submit-preprocess.sh" "$MT_ROOT/templates/preprocess.sbatch" --chdir="$T" \
		--output="$T/pre-%A_%a.out" --cpus-per-task=1
	read -r array merge <<<"$output"
	run -0 wait_job "$merge" 120
	cat "$T"/*.out
	[ "$output" = COMPLETED ]
	[ "$(ls "$T"/out/shards/*_text_document.idx | wc -l)" -eq 3 ]
	mt-tokenize -q --input "$T/a.jsonl" "$T/b.jsonl.gz" "$T/c.jsonl" --tokenizer-type NullTokenizer --vocab-size 64 \
		--output-prefix "$T/one"
	cmp "$T/out/corpus_text_document.bin" "$T/one_text_document.bin"
	cmp "$T/out/corpus_text_document.idx" "$T/one_text_document.idx"
}

@test "eval-cron.sh submits eval.sbatch once for each complete checkpoint, never twice" {
	mkdir -p "$T/ck"
	mt-train --config "$MT_ROOT/share/configs/tiny.conf" --mock-data --vocab-size 64 --micro-batch-size 2 \
		--global-batch-size 2 --train-iters 4 --save-interval 2 --save "$T/ck" -q
	mkdir "$T/ck/iter_0000006.tmp.123" # a save in progress is not a checkpoint
	# mt-eval is another tool's work: a stand-in that records what it was asked
	cat > "$T/fake-eval" <<-'EOF'
	#!/bin/sh
	echo "{\"args\": \"$*\"}"
	EOF
	chmod +x "$T/fake-eval"
	export MT_EVAL=$T/fake-eval RESULTS=$T/results EVAL_ARGS="--data-path x"
	run -0 "$MT_ROOT/slurm/eval-cron.sh" "$T/ck" "$MT_ROOT/templates/eval.sbatch" "$T/ledger.txt" --chdir="$T" \
		--gpus-per-node=0 --cpus-per-task=1 --output="$T/eval-%j.out"
	echo "$output"
	[ "$(grep -c '^submitted ' <<<"$output")" -eq 2 ]
	for id in $(awk '{print $3}' <<<"$output"); do run -0 wait_job "$id" 60; [ "$output" = COMPLETED ]; done
	grep -q -- "--load $T/ck/iter_0000002 --data-path x --json" "$T/results/iter_0000002.json"
	[ -s "$T/results/iter_0000004.json" ]
	run -0 "$MT_ROOT/slurm/eval-cron.sh" "$T/ck" "$MT_ROOT/templates/eval.sbatch" "$T/ledger.txt" --chdir="$T"
	[ -z "$output" ]
}

@test "srun --mpi=none (each task a world of one) is refused instead of training two copies" {
	run ! --separate-stderr timeout 60 srun -n 2 --cpus-per-task=1 --mpi=none --chdir="$T" mt-train \
		--config "$MT_ROOT/share/configs/tiny.conf" --mock-data --vocab-size 64 --micro-batch-size 2 --train-iters 2
	echo "$stderr"
	[[ $stderr == *"srun started 2 tasks but MPI sees each as a world of one: launch with srun --mpi=pmi2"* ]]
	run -0 --separate-stderr timeout 60 srun -n 2 --cpus-per-task=1 --mpi=pmi2 --chdir="$T" mt-train \
		--config "$MT_ROOT/share/configs/tiny.conf" --mock-data --vocab-size 64 --micro-batch-size 2 --train-iters 2 \
		--global-batch-size 4
	[[ $stderr == *"2 ranks: data-parallel 2"* ]]
}

@test "gpt-175b.sbatch shrunk to TP 2 x PP 4 on 8 CPU ranks: trains, saves, USR1 saves and requeues, resumes exactly" {
	echo "1 $S/mk_text_document" > "$T/blend.txt"
	# the template as it is, shrunk by its variables: 8 layers of hidden 64, 4 heads,
	# sequence 32, TP 2 x PP 4 (DP 1) on the CPU, 8 micro-batches a step after a rampup from 4
	id=$(sbatch --parsable --nodes=1 --ntasks=8 --ntasks-per-node=8 --gpus-per-node=0 --cpus-per-task=1 \
		--chdir="$T" --output="$T/job.out" \
		--export=ALL,MT_BIN="$MT_BUILD/bin",MT_SLURM="$MT_ROOT/slurm",CONFIG="$MT_ROOT/share/configs/gpt-175b.conf",DATA="$T/blend.txt","TOKENIZER=--tokenizer-type NullTokenizer --vocab-size 64",CKPT="$T/ck",LOGS="$T/logs",DATA_CACHE="$S/cache175",LAYERS=8,HIDDEN=64,HEADS=4,SEQ=32,TP=2,PP=4,DEVICE=cpu,PRECISION=,GLOBAL_BATCH=8,"RAMPUP=4 4 64",TRAIN_SAMPLES=1200,WARMUP_SAMPLES=80,DECAY_SAMPLES=1200,SAVE_INTERVAL=25,EVAL_INTERVAL=100,LOG_INTERVAL=10,"EXTRA=--distributed-timeout-seconds 120" \
		"$MT_ROOT/templates/gpt-175b.sbatch")
	# a periodic save first, then what --signal=B:USR1@600 does ten minutes before the end
	for _ in $(seq 1 900); do [ -s "$T/ck/latest" ] && break; sleep 0.2; done
	[ -s "$T/ck/latest" ]
	scancel --signal=USR1 --batch "$id"
	for _ in $(seq 1 600); do grep -q "requeueing job $id" "$T/job.out" 2>/dev/null && break; sleep 0.2; done
	grep -q "requeueing job $id" "$T/job.out"
	for _ in $(seq 1 600); do
		scontrol show job "$id" | grep -q "JobState=PENDING.*" && scontrol show job "$id" | grep -q "Restarts=1" && break
		sleep 0.2
	done
	# slurmd refuses a credential made in the second its previous one was revoked ("Job
	# credential revoked"): let that second pass before asking for the start now
	sleep 2
	for _ in $(seq 1 600); do
		grep -q "restart 1" "$T/job.out" && break
		scontrol update JobId="$id" StartTime=now 2>/dev/null || true
		sleep 0.5
	done
	grep -q "restart 1" "$T/job.out"
	run -0 wait_job "$id" 400
	cat "$T/job.out"
	[ "$output" = COMPLETED ]
	grep -q "ranks: 8 = tensor 2 x data 1 x pipeline 4" "$T/job.out" # the dry run first
	grep -q "pipeline: 4 stages of 1 model chunk(s), schedule 1f1b" "$T/job.out"
	# 1200 samples: 16 iterations of 4 in the rampup, then 142 of 8
	stopped=$(sed -n 's/.*stopping at iteration \([0-9]*\) (signal).*/\1/p' "$T/job.out")
	[ "$stopped" -gt 0 ] && [ "$stopped" -lt 158 ]
	grep -q "loaded checkpoint .* at iteration $stopped" "$T/job.out"
	[ "$(cat "$T/ck/latest")" = 158 ]
	# exact resume: the same weights as one uninterrupted run of the same flags
	mapfile -d '' argv < <(ckpt_argv "$T/ck/iter_$(printf %07d "$stopped")")
	(cd "$T" && env -u SLURM_CONF mpiexec -n 8 mt-train "${argv[@]}" --save "$T/ref" -q)
	[ "$(ckpt-hash "$T/ck")" = "$(ckpt-hash "$T/ref")" ]
}

@test "llama2-7b.sbatch shrunk to TP 2 x DP 2 on 4 CPU ranks: starts from weights imported from HF's layout, then resumes its own" {
	echo "1 $S/mk_text_document" > "$T/blend.txt"
	SHRINK=(--config "$MT_ROOT/share/configs/llama2-7b.conf" --num-layers 2 --hidden-size 64 --num-attention-heads 4
		--ffn-hidden-size 172 --seq-length 32 --max-position-embeddings 32)
	# the weights to start from: another run's
	(cd "$T" && env -u SLURM_CONF mt-train -q "${SHRINK[@]}" --data-path "$S/mk_text_document" --tokenizer-type NullTokenizer \
		--vocab-size 64 --data-cache-path "$S/cache" --micro-batch-size 4 --train-iters 30 --lr 3e-3 --log-interval 1 --device cpu \
		--save "$T/run0" --log-json "$T/init.jsonl")
	# through Hugging Face's layout and back, as released Llama 2 weights come in
	mt-ckpt-reshard -q export --format hf-llama "$T/run0" "$T/hf"
	mt-ckpt-reshard -q import --format hf-llama "$T/hf" "$T/init"
	job() {
		sbatch --parsable --nodes=1 --ntasks=4 --ntasks-per-node=4 --gpus-per-node=0 --cpus-per-task=1 --chdir="$T" \
			--output="$T/job$1.out" \
			--export=ALL,MT_BIN="$MT_BUILD/bin",MT_SLURM="$MT_ROOT/slurm",CONFIG="$MT_ROOT/share/configs/llama2-7b.conf",DATA="$T/blend.txt","TOKENIZER=--tokenizer-type NullTokenizer --vocab-size 64",INIT="$T/init",CKPT="$T/ck",LOGS="$T/logs$1",DATA_CACHE="$S/cache",LAYERS=2,HIDDEN=64,HEADS=4,FFN=172,SEQ=32,DEVICE=cpu,PRECISION=,MICRO_BATCH=2,GLOBAL_BATCH=8,TRAIN_ITERS=$2,WARMUP=2,SAVE_INTERVAL=10,EVAL_INTERVAL=100,LOG_INTERVAL=1,"EXTRA=--distributed-timeout-seconds 60" \
			"$MT_ROOT/templates/llama2-7b.sbatch"
	}
	id=$(job 1 20)
	run -0 wait_job "$id" 200
	cat "$T/job1.out"
	[ "$output" = COMPLETED ]
	grep -q "ranks: 4 = tensor 2 x data 2 x pipeline 1" "$T/job1.out"
	[ "$(cat "$T/ck/latest")" = 20 ]
	# the first start is the same run as --load INIT --finetune under mpiexec: INIT's weights,
	# a fresh step count and optimizer
	mapfile -d '' argv < <(ckpt_argv "$T/ck")
	[[ " ${argv[*]} " == *" --finetune "* ]]
	(cd "$T" && env -u SLURM_CONF mpiexec -n 4 mt-train "${argv[@]}" --load "$T/init" --save "$T/ref" --log-json "$T/ref.jsonl" -q)
	diff <(fields "$T/logs1/train.jsonl") <(fields "$T/ref.jsonl")
	[ "$(head -c 17 "$T/logs1/train.jsonl")" = '{"iteration": 1, ' ]
	# it starts where INIT's run ended, not from scratch: its first loss is near INIT's last
	python3 - "$T/init.jsonl" "$T/logs1/train.jsonl" <<'PY'
import json, sys
init = [json.loads(l) for l in open(sys.argv[1])]
run = [json.loads(l) for l in open(sys.argv[2])]
print(init[0]["loss"], init[-1]["loss"], run[0]["loss"])
assert run[0]["loss"] < init[0]["loss"] - 1.0 and abs(run[0]["loss"] - init[-1]["loss"]) < 0.5
PY
	# a second submission resumes from its own checkpoint (iteration 21 on), INIT unused
	id=$(job 2 30)
	run -0 wait_job "$id" 200
	cat "$T/job2.out"
	[ "$output" = COMPLETED ]
	[ "$(cat "$T/ck/latest")" = 30 ]
	[ "$(head -c 18 "$T/logs2/train.jsonl")" = '{"iteration": 21, ' ]
}

@test "llama2-7b.sbatch: its dry run puts Llama 2 7B on one node of 8 GPUs within 80 GB each" {
	run -0 --separate-stderr env MT_DRY_RUN=1 MT_BIN="$MT_BUILD/bin" CONFIG="$MT_ROOT/share/configs/llama2-7b.conf" \
		bash "$MT_ROOT/templates/llama2-7b.sbatch"
	[[ $output == *"parameters: 6738415616 "* ]]
	[[ $output == *"ranks: 8 = tensor 2 x data 4 x pipeline 1"* ]]
	[[ $output == *"batch: global 1024 = micro 1 x data-parallel 4 x 256 accumulation steps"* ]]
	python3 -c "import re,sys; t = float(re.search(r'^  total +(\S+) GiB', sys.argv[1], re.M).group(1)); assert 20 < t < 74, t" "$output"
	run -0 --separate-stderr env MT_DRY_RUN=all MT_BIN="$MT_BUILD/bin" CONFIG="$MT_ROOT/share/configs/llama2-7b.conf" \
		TOKENIZER="--tokenizer-type NullTokenizer --vocab-size 31999" DATA="$T/blend.txt" bash "$MT_ROOT/templates/llama2-7b.sbatch"
	[[ $output == *"ranks: 8 = tensor 2 x data 4 x pipeline 1"* ]]
}

@test "gpt-175b.sbatch: its dry run validates 1024 ranks without a GPU" {
	run -0 --separate-stderr env MT_DRY_RUN=1 MT_BIN="$MT_BUILD/bin" CONFIG="$MT_ROOT/share/configs/gpt-175b.conf" \
		bash "$MT_ROOT/templates/gpt-175b.sbatch"
	[[ $output == *"ranks: 1024 = tensor 8 x data 8 x pipeline 16"* ]]
	[[ $output == *"batch rampup: from 16 by 16"* ]]
	# every training flag of the template is one mt-train knows
	run -0 --separate-stderr env MT_DRY_RUN=all MT_BIN="$MT_BUILD/bin" CONFIG="$MT_ROOT/share/configs/gpt-175b.conf" \
		TOKENIZER="--tokenizer-type NullTokenizer --vocab-size 50256" DATA="$T/blend.txt" bash "$MT_ROOT/templates/gpt-175b.sbatch"
	[[ $output == *"ranks: 1024 = tensor 8 x data 8 x pipeline 16"* ]]
	# and inside a job of 16 tasks the world is the job's (16 does not divide by 8 x 16)
	run ! --separate-stderr env MT_DRY_RUN=1 SLURM_NTASKS=16 MT_BIN="$MT_BUILD/bin" \
		CONFIG="$MT_ROOT/share/configs/gpt-175b.conf" bash "$MT_ROOT/templates/gpt-175b.sbatch"
	[[ $stderr == *"world size 16 is not a multiple of tensor x pipeline parallel size 8 x 16"* ]]
}
