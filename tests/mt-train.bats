#!/usr/bin/env bats
# mt-train on the CPU: learning, exact resume, checkpoints, signals, bad steps, flags.
load helpers
cpu_only

setup_file() {
	cd "$BATS_FILE_TMPDIR"
	python3 "$MT_ROOT/share/markov/make-markov.py" --docs 3000 > mk.jsonl 2> /dev/null
	python3 "$MT_ROOT/share/markov/make-markov.py" --entropy > floor.txt
	mt-tokenize -q --input mk.jsonl --tokenizer-type NullTokenizer --vocab-size 64 --output-prefix mk
}

setup() {
	cd "$BATS_TEST_TMPDIR"
	F=$BATS_FILE_TMPDIR
	TINY=(--config "$MT_ROOT/share/configs/tiny.conf" --data-path "$F/mk_text_document" --tokenizer-type NullTokenizer
		--vocab-size 64 --split 95,5,0 --data-cache-path cache)
}

@test "learning: on a Markov corpus the validation loss comes within 10% of the entropy floor" {
	run -0 --separate-stderr mt-train "${TINY[@]}" --micro-batch-size 8 --global-batch-size 16 --train-iters 400 \
		--lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine --lr-warmup-iters 20 --log-interval 100 \
		--eval-interval 400 --eval-iters 8 --log-json log.jsonl
	floor=$(cat "$F/floor.txt")
	valid=$(python3 -c 'import json,sys; print([json.loads(l) for l in open("log.jsonl")][-1]["valid_loss"])')
	echo "valid loss $valid, floor $floor"
	python3 -c "import sys; v, f = $valid, $floor; sys.exit(0 if f <= v * 1.02 and v <= 1.10 * f else 1)"
	# and it started far above: the first logged loss is near log(vocab)
	python3 -c 'import json, math; l = [json.loads(x) for x in open("log.jsonl")]; assert l[0]["loss"] > 1.5, l[0]'
}

@test "resume is exact: N steps, stop, resume N gives the same weights, moments and losses as 2N" {
	M=("${TINY[@]}" --micro-batch-size 4 --global-batch-size 8 --lr 1e-3 --lr-decay-style cosine --lr-warmup-iters 3
		--log-interval 1 --eval-interval 5 --eval-iters 2 -q)
	mt-train "${M[@]}" --train-iters 20 --save A --log-json A.jsonl
	mt-train "${M[@]}" --train-iters 20 --save B --exit-interval 10 --log-json B.jsonl
	[ "$(cat B/latest)" = 10 ]
	mt-train "${M[@]}" --train-iters 20 --save B --load B --log-json B.jsonl
	[ "$(ckpt-hash A)" = "$(ckpt-hash B)" ]
	fields() { python3 -c 'import json,sys; [print(json.dumps({k: d[k] for k in ("iteration", "loss", "lr", "grad_norm", "valid_loss") if k in d})) for d in map(json.loads, open(sys.argv[1]))]' "$1"; }
	diff <(fields A.jsonl) <(fields B.jsonl)
}

@test "--step-batch-size-schedule: each step's batch from the tokens consumed, across a resume; bad schedules refused" {
	export OMP_NUM_THREADS=1 # tiny steps: threads cost more than they give
	# thresholds are tokens, on sample floor(T / 64): 192 -> sample 3, 0.45K -> sample 7
	M=(--config "$MT_ROOT/share/configs/tiny.conf" --mock-data --vocab-size 64 --micro-batch-size 1 --lr 1e-3
		--lr-decay-style cosine --log-interval 1 --step-batch-size-schedule "0:1 192:2" 0.45K:4 -q)
	samples() { python3 -c 'import json,sys; print(" ".join(str(json.loads(l)["consumed_samples"]) for l in open(sys.argv[1])))' "$1"; }
	mt-train "${M[@]}" --train-iters 7 --save A --log-json A.jsonl
	[ "$(samples A.jsonl)" = "1 2 3 5 7 11 15" ]
	# stopped in the middle of the schedule, resumed: the same batches, weights and moments
	mt-train "${M[@]}" --train-iters 7 --save B --exit-interval 4 --log-json B.jsonl
	mt-train "${M[@]}" --train-iters 7 --save B --load B --log-json B.jsonl
	[ "$(samples B.jsonl)" = "1 2 3 5 7 11 15" ]
	[ "$(ckpt-hash A)" = "$(ckpt-hash B)" ]
	fields() { python3 -c 'import json,sys; [print(json.dumps({k: d[k] for k in ("iteration", "loss", "lr", "grad_norm")})) for d in map(json.loads, open(sys.argv[1]))]' "$1"; }
	diff <(fields A.jsonl) <(fields B.jsonl)
	# --train-samples (over a dataset, whose plan also counts samples): whole batches (the 4
	# of 15..19 does not fit in 18); the schedule's last batch is --global-batch-size, given
	# or not
	run -0 --separate-stderr mt-train "${TINY[@]}" --micro-batch-size 1 --step-batch-size-schedule "0:1 192:2 0.45K:4" \
		--train-samples 18 --global-batch-size 4 --log-interval 100
	[[ $stderr == *"done: 7 iterations"* ]]
	run -2 --separate-stderr mt-train "${M[@]}" --train-iters 2 --global-batch-size 8
	[[ $stderr == *"ends at a batch of 4 but --global-batch-size is 8"* ]]
	run -2 --separate-stderr mt-train "${M[@]}" --train-iters 2 --micro-batch-size 2
	[[ $stderr == *"--step-batch-size-schedule '0:1': batch 1 is not a multiple of micro-batch x data-parallel size 2"* ]]
	run -2 --separate-stderr mt-train "${M[@]}" --train-iters 2 --step-batch-size-schedule "0:1 10:2"
	[[ $stderr == *"'0:1' and '10:2': both thresholds fall on sample 0 of --seq-length 64"* ]]
	run -2 --separate-stderr mt-train "${M[@]}" --train-iters 2 --step-batch-size-schedule "0:1 2x:2"
	[[ $stderr == *"'2x:2': not TOKENS:BATCH"* ]]
	run -2 --separate-stderr mt-train "${M[@]}" --train-iters 2 --step-batch-size-schedule "0:2 1K:1 500:4"
	[[ $stderr == *"'500:4': thresholds must start at 0 and grow"* ]]
	run -2 --separate-stderr mt-train "${M[@]}" --train-iters 2 --rampup-batch-size 1 1 8
	[[ $stderr == *"not both"* ]]
}

@test "checkpoints: latest names the newest complete one, --keep-last removes older ones" {
	run -0 mt-train "${TINY[@]}" --micro-batch-size 2 --global-batch-size 2 --train-iters 8 --save ck \
		--save-interval 2 --keep-last 2 -q
	[ "$(cat ck/latest)" = 8 ]
	[ "$(ls -d ck/iter_* | wc -l)" -eq 2 ]
	[ -d ck/iter_0000006 ]
	[ -d ck/iter_0000008 ]
	run -0 ckpt-hash ck/iter_0000006
	[[ $output == "iteration 6 samples 12 step 6 "* ]]
}

@test "SIGTERM saves at the next step boundary and exits 0; the run resumes from there" {
	mt-train "${TINY[@]}" --micro-batch-size 8 --global-batch-size 8 --train-iters 100000 --save ck -q &
	pid=$!
	for _ in $(seq 1 100); do [ -e cache ] && break; sleep 0.1; done
	sleep 1
	kill -TERM "$pid"
	wait "$pid"
	it=$(cat ck/latest)
	[ "$it" -gt 0 ]
	[ "$it" -lt 100000 ]
	run -0 ckpt-hash ck
	[[ $output == "iteration $it "* ]]
}

@test "a non-finite loss or gradient stops the run at once, naming the iteration (Megatron's --check-for-nan-in-loss-and-grad)" {
	run -3 --separate-stderr mt-train "${TINY[@]}" --micro-batch-size 4 --global-batch-size 4 --train-iters 50 \
		--lr 1e38 --clip-grad 0 --save ck --save-interval 100 --log-interval 1
	[[ $stderr == *"error: iteration "*": the "*" is "*": stopping"* ]]
	[[ $stderr != *"skipped 1"* ]]
	[ ! -e ck/latest ]
	# the flag spelled out is the default
	run -3 --separate-stderr mt-train "${TINY[@]}" --micro-batch-size 4 --global-batch-size 4 --train-iters 50 \
		--lr 1e38 --clip-grad 0 --check-for-nan-in-loss-and-grad
	[[ $stderr == *"error: iteration "*": stopping"* ]]
}

@test "--no-check-for-nan-in-loss-and-grad: non-finite steps are skipped and counted; too many in a row stop with an error; no NaN checkpoint is written" {
	run -3 --separate-stderr mt-train "${TINY[@]}" --micro-batch-size 4 --global-batch-size 4 --train-iters 50 \
		--lr 1e38 --clip-grad 0 --max-skipped-steps 3 --save ck --save-interval 100 --log-interval 1 \
		--no-check-for-nan-in-loss-and-grad
	[[ $stderr == *"4 steps in a row had a non-finite loss or gradient"* ]]
	[[ $stderr == *"skipped 3"* ]]
	[ ! -e ck/latest ]
	# a save after the weights blew up is refused, naming the tensor; nothing is left behind
	run -3 --separate-stderr mt-train "${TINY[@]}" --micro-batch-size 4 --global-batch-size 4 --train-iters 50 \
		--lr 1e38 --clip-grad 0 --save ck --save-interval 1 --no-check-for-nan-in-loss-and-grad
	[[ $stderr == *"refusing to save checkpoint"*"holds inf"* || $stderr == *"holds nan"* ]]
	[ ! -e ck/latest ]
	[ -z "$(ls ck 2>/dev/null)" ]
}

@test "--mock-data trains without a dataset; Llama-style options train too" {
	run -0 --separate-stderr mt-train --config "$MT_ROOT/share/configs/llama-tiny.conf" --mock-data --vocab-size 100 \
		--micro-batch-size 2 --global-batch-size 4 --train-iters 5 --log-interval 5 --lr 1e-3
	[[ $stderr == *"iteration 5/5 | loss "* ]]
}

@test "flags: required ones, values Megatron allows that mt does not support yet, bad values" {
	run -2 --separate-stderr mt-train "${TINY[@]}" --train-iters 5
	[[ $stderr == *"--micro-batch-size is required"* ]]
	run -2 --separate-stderr mt-train "${TINY[@]}" --micro-batch-size 2 --train-iters 5 --pipeline-model-parallel-size 3
	[[ $stderr == *"--num-layers 2 is not a multiple of --pipeline-model-parallel-size 3"* ]]
	# tensor parallelism needs as many ranks (tests/mt-train-tp.bats runs it)
	run -2 --separate-stderr mt-train "${TINY[@]}" --micro-batch-size 2 --train-iters 5 --tensor-model-parallel-size 2
	[[ $stderr == *"world size 1 is not a multiple of tensor x pipeline parallel size 2 x 1"* ]]
	run -2 --separate-stderr mt-train "${TINY[@]}" --micro-batch-size 3 --global-batch-size 8 --train-iters 5
	[[ $stderr == *"multiple of --micro-batch-size"* ]]
	run -2 --separate-stderr mt-train "${TINY[@]}" --micro-batch-size 2 --train-iters 5 --normalization BatchNorm
	[[ $stderr == *"LayerNorm or RMSNorm"* ]]
	run -2 --separate-stderr mt-train --config "$MT_ROOT/share/configs/tiny.conf" --mock-data --micro-batch-size 2 --train-iters 5
	[[ $stderr == *"vocabulary size is unknown"* ]]
	run -4 --separate-stderr mt-train --config nope.conf --mock-data
	[[ $stderr == *"cannot open config 'nope.conf'"* ]]
}

@test "flags: bad values and bad combinations are usage errors (exit 2) naming the flag, before anything runs" {
	local M=(--config "$MT_ROOT/share/configs/tiny.conf" --mock-data --vocab-size 100 --micro-batch-size 2 --train-iters 2)
	bad() { # bad 'message' flags...
		local want=$1
		shift
		run -2 --separate-stderr mt-train "$@"
		[[ $stderr == *"$want"* ]] || { echo "mt-train $*: wanted '$want', got: $stderr"; false; }
	}
	bad "--hidden-size 65 is not a multiple of --num-attention-heads 4" "${M[@]}" --hidden-size 65 --num-attention-heads 4
	bad "option '--lr': 'inf' is not a finite number" "${M[@]}" --lr inf
	bad "option '--lr': 'nan' is not a number" "${M[@]}" --lr nan
	bad "option '--min-lr': '-inf' is not a finite number" "${M[@]}" --min-lr -inf
	bad "--lr must be a finite number >= 0, not '-1'" "${M[@]}" --lr -1
	bad "--adam-beta1 must be in [0, 1), not '2'" "${M[@]}" --adam-beta1 2
	bad "--adam-beta2 must be in [0, 1), not '1'" "${M[@]}" --adam-beta2 1
	bad "--adam-eps must be positive, not '-1'" "${M[@]}" --adam-eps -1
	bad "--init-method-std must be positive, not '-1'" "${M[@]}" --init-method-std -1
	bad "--weight-decay must be a finite number >= 0" "${M[@]}" --weight-decay -0.1
	bad "--clip-grad must be a finite number >= 0" "${M[@]}" --clip-grad -1
	bad "--norm-epsilon must be positive" "${M[@]}" --norm-epsilon 0
	bad "--mock-data and --data-path (or the other data flags) exclude each other" "${M[@]}" --data-path "$F/mk_text_document"
	bad "--config given twice" "${M[@]}" --config "$MT_ROOT/share/configs/tiny.conf"
	bad "--num-layers is required" --hidden-size 64 --num-attention-heads 4 --seq-length 16 --mock-data --vocab-size 100 \
		--micro-batch-size 2 --train-iters 2
	bad "--hidden-size is required" --num-layers 2 --num-attention-heads 4 --seq-length 16 --mock-data --vocab-size 100 \
		--micro-batch-size 2 --train-iters 2
	bad "--hidden-size 1073741824: the default --ffn-hidden-size (4 x --hidden-size) does not fit in 32 bits" \
		"${M[@]}" --hidden-size 1073741824
	bad "option '--hidden-size': 4294967296 is out of range" "${M[@]}" --hidden-size 4294967296
	bad "option '--seq-length': 4294967296 is out of range" "${M[@]}" --seq-length 4294967296
	bad "the model is too large" "${M[@]}" --num-layers 2147483647 --hidden-size 65536
	bad "--micro-batch-size 1000000000000 x --seq-length 64 x the vocabulary: too large" "${M[@]}" \
		--micro-batch-size 1000000000000
	# and a kv-channels given explicitly still lets the heads not divide the hidden size, as in Megatron
	run -0 --separate-stderr mt-train "${M[@]}" --hidden-size 66 --num-attention-heads 4 --kv-channels 16 --ffn-hidden-size 128
}

@test "mt-ckpt-reshard inspect lists every tensor of the table, the state and the training flags" {
	mt-train "${TINY[@]}" --micro-batch-size 2 --global-batch-size 4 --train-iters 3 --save ck -q --lr 1e-3
	run -0 --separate-stderr mt-ckpt-reshard inspect ck
	[[ $output == *$'iteration\t3'* ]]
	[[ $output == *$'consumed_train_samples\t12'* ]]
	[ "$(grep -c $'^tensor\tmodel/' <<<"$output")" -eq 28 ]
	[ "$(grep -c $'^tensor\toptimizer/exp_avg/' <<<"$output")" -eq 28 ]
	[[ $output == *"model/decoder.layers.1.mlp.linear_fc2.weight"*"[64, 256]"* ]]
	[[ $output == *'"micro_batch_size":2'* || $output == *'"micro_batch_size": 2'* ]]
	run -0 mt-ckpt-reshard inspect --json ck/iter_0000003
	python3 -c 'import json,sys; d = json.loads(sys.stdin.read()); assert d["iteration"] == 3, d' <<<"$output"
	run -3 --separate-stderr mt-ckpt-reshard inspect "$F/mk_text_document.idx"
	# a layout rewrite keeps every tensor: two parts and the index, the same listing
	run -0 --separate-stderr mt-ckpt-reshard --load ck --save out --target-tensor-parallel-size 2
	[ "$(ls out/iter_0000003 | wc -l)" -eq 3 ]
	diff <(mt-ckpt-reshard inspect out | grep "^tensor") <(mt-ckpt-reshard inspect ck | grep "^tensor")
}

# The PyTorch reference (tests/reference/torch_gpt.py) runs on Debian's /usr/bin/python3 with
# python3-torch and python3-h5py (scripts/install-deps.sh --test); the python3 on PATH may lack them.
need_torch() {
	/usr/bin/python3 -c 'import h5py, numpy, torch' 2>/dev/null ||
		skip "/usr/bin/python3 lacks torch or h5py (scripts/install-deps.sh --test installs them)"
}

# gpt-step on a tiny model (2 layers, hidden 32, 4 heads, seq 16, vocab 50 padded to 64, B=2,
# some targets -1), then the independent torch model on the same weights and batch: loss,
# every gradient, and the losses and weights of 10 AdamW steps (tolerances in torch_gpt.py)
torch_check() {
	/usr/bin/python3 -c 'import numpy as np
r = np.random.RandomState(7)
tok, tgt = r.randint(0, 50, 32), r.randint(0, 50, 32)
tgt[[3, 17, 31]] = -1
np.save("batch.npy", np.stack([tok, tgt]).astype(np.int32))'
	gpt-step --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 50 \
		--make-vocab-size-divisible-by 16 --seed 1234 --tokens batch.npy --output step "$@"
	"$MT_ROOT/tests/reference/torch_gpt.py" --tokens batch.npy ${SMOOTH:+--label-smoothing $SMOOTH} step
}

@test "PyTorch reference: GPT-2 style (learned positions, LayerNorm, GELU, biases, tied output)" {
	need_torch
	torch_check
}

@test "PyTorch reference: Llama style (rope, RMSNorm, SwiGLU, no biases, untied output, 4 heads in 2 groups)" {
	need_torch
	torch_check --position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear \
		--untie-embeddings-and-output-weights --num-query-groups 2
}

@test "PyTorch reference: --label-smoothing 0.1 is Megatron's smoothed cross-entropy (loss, gradients, 10 steps)" {
	need_torch
	SMOOTH=0.1 torch_check --label-smoothing 0.1
	# and the reference tells them apart: smoothing on mt's side only fails
	run ! torch_check --label-smoothing 0.1
}

@test "--exit-duration-in-mins saves and stops once the time is spent; the run resumes from there" {
	M=("${TINY[@]}" --micro-batch-size 4 --global-batch-size 8 --lr 1e-3 --log-interval 1 -q)
	# 0.0001 minutes (6 ms) is spent by the first step: it saves there and exits 0
	run -0 mt-train "${M[@]}" --train-iters 50 --save C --exit-duration-in-mins 0.0001
	it=$(cat C/latest)
	[ "$it" -ge 1 ]
	[ "$it" -lt 50 ]
	run -0 mt-train "${M[@]}" --train-iters 50 --save C --load C
	[ "$(cat C/latest)" = 50 ]
	run -2 mt-train "${M[@]}" --train-iters 5 --exit-duration-in-mins -1
}

@test "bench/train-gpu.sh: ROUNDS=3 runs mt-train and the PyTorch script in turn and prints each ratio and their median (stand-ins for both)" {
	mkdir -p t/bench t/build/bin
	cp "$MT_ROOT/bench/train-gpu.sh" t/bench/
	# mt-train's stand-in logs steps of 1 s, 2 s from its third run on; --log-json appends
	cat > t/build/bin/mt-train <<'SH'
#!/usr/bin/env bash
j= n=1
while [ $# -gt 0 ]; do case $1 in --log-json) j=$2; shift ;; --train-iters) n=$2; shift ;; esac; shift; done
echo "mt-train: model: 124475904 parameters" >&2
echo "mt-train: memory plan 22.00 GiB" >&2
echo run >> "$(dirname "$0")/runs"
k=$(wc -l < "$(dirname "$0")/runs")
for i in $(seq 1 "$n"); do echo "{\"elapsed\": $(( i * (k > 2 ? 2 : 1) )), \"loss\": 10.0}" >> "$j"; done
SH
	chmod +x t/build/bin/mt-train
	echo 'print("torch GPT-2 124M B=64 T=1024 compile=True: 1000.0 ms/step, 65,536 tok/s")' > t/bench/torch_gpt2_bench.py
	ROUNDS=3 STEPS=6 TUNING=0 run -0 bash t/bench/train-gpu.sh 64
	[ "$(grep -c '^B=64: mt-train / PyTorch tokens/s = 1.000$' <<< "$output")" = 2 ]
	grep -qx 'B=64: mt-train / PyTorch tokens/s = 0.500' <<< "$output"
	grep -qx 'B=64: median of 3 rounds: mt-train / PyTorch tokens/s = 1.000 (rounds: 1.000, 1.000, 0.500)' <<< "$output"
	# one round (the default): one ratio, no median
	rm t/build/bin/runs
	STEPS=6 TUNING=0 run -0 bash t/bench/train-gpu.sh 64
	grep -qx 'B=64: mt-train / PyTorch tokens/s = 1.000' <<< "$output"
	! grep -q median <<< "$output"
}
