#!/usr/bin/env bats
# Megatron's checkpoint flags in mt-train: --use-checkpoint-args, --finetune, --no-load-optim,
# --no-load-rng, --no-save-optim, and the message that names the field a checkpoint of
# another model differs in.
load helpers
cpu_only

setup() {
	cd "$BATS_TEST_TMPDIR"
	MODEL=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
		--make-vocab-size-divisible-by 8)
	RUN=(--mock-data --vocab-size 61 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --lr-decay-style cosine
		--lr-warmup-iters 3 --lr-decay-iters 20 --log-interval 1 --eval-iters 0 -q)
}

fields() {
	python3 -c 'import json,sys; [print(json.dumps({k: d[k] for k in ("iteration", "loss", "lr", "grad_norm")})) for d in map(json.loads, open(sys.argv[1]))]' "$1"
}

@test "--use-checkpoint-args: a resume without the model's flags continues exactly like the run that wrote it" {
	mt-train "${MODEL[@]}" "${RUN[@]}" --swiglu --normalization RMSNorm --train-iters 6 --save A --log-json A.jsonl
	mt-train "${MODEL[@]}" "${RUN[@]}" --swiglu --normalization RMSNorm --train-iters 6 --save B --exit-interval 3 \
		--log-json B.jsonl
	# no model flag at all, not even the vocabulary
	run -0 --separate-stderr mt-train --mock-data --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 \
		--lr-decay-style cosine --lr-warmup-iters 3 --lr-decay-iters 20 --log-interval 1 --eval-iters 0 --train-iters 6 \
		--load B --save B --use-checkpoint-args --log-json B.jsonl
	[[ $stderr == *"--use-checkpoint-args: the model of"*"2 layers, hidden 64, 4 heads, sequence 32"* ]] || { echo "$stderr"; false; }
	diff <(fields A.jsonl) <(fields B.jsonl)
	[ "$(ckpt-hash A)" = "$(ckpt-hash B)" ]
	run -2 --separate-stderr mt-train --mock-data --micro-batch-size 2 --train-iters 1 --use-checkpoint-args
	[[ $stderr == *"--use-checkpoint-args needs --load"* ]]
}

@test "a checkpoint of another model: the message names the flag and both values" {
	mt-train "${MODEL[@]}" "${RUN[@]}" --train-iters 2 --save A
	run -2 --separate-stderr mt-train "${MODEL[@]}" "${RUN[@]}" --num-layers 3 --train-iters 3 --load A
	[[ $stderr == *"holds another model: --num-layers 3 here, 2 in the checkpoint"* ]] || { echo "$stderr"; false; }
	run -2 --separate-stderr mt-train "${MODEL[@]}" "${RUN[@]}" --normalization RMSNorm --train-iters 3 --load A
	[[ $stderr == *"holds another model: --normalization RMSNorm here, LayerNorm in the checkpoint"* ]] || { echo "$stderr"; false; }
	run -2 --separate-stderr mt-train "${MODEL[@]}" "${RUN[@]/61/62}" --train-iters 3 --load A
	[[ $stderr == *"the vocabulary size"*"62 here, 61 in the checkpoint"* ]] || { echo "$stderr"; false; }
}

@test "--finetune: the weights alone, from iteration 0, with a fresh schedule and optimizer" {
	mt-train "${MODEL[@]}" "${RUN[@]}" --train-iters 5 --save A
	mt-train "${MODEL[@]}" "${RUN[@]}" --train-iters 3 --log-json fresh.jsonl
	mt-train "${MODEL[@]}" "${RUN[@]}" --train-iters 3 --load A --finetune --save F --log-json ft.jsonl
	python3 - <<'PY'
import json
f = [json.loads(l) for l in open("fresh.jsonl")]
t = [json.loads(l) for l in open("ft.jsonl")]
assert [d["iteration"] for d in t] == [1, 2, 3], t
assert [d["lr"] for d in t] == [d["lr"] for d in f], (t, f)      # the schedule from its start
assert t[0]["loss"] < f[0]["loss"] - 1e-3, (t[0], f[0])         # trained weights, not fresh ones
PY
	run -0 ckpt-hash F
	[[ $output == "iteration 3 samples 12 step 3 "* ]] || { echo "$output"; false; }
}

@test "--no-load-optim keeps the iteration, starts the moments and the schedule again; --no-load-rng is accepted" {
	mt-train "${MODEL[@]}" "${RUN[@]}" --train-iters 4 --save A
	mt-train "${MODEL[@]}" "${RUN[@]}" --train-iters 2 --log-json fresh.jsonl
	mt-train "${MODEL[@]}" "${RUN[@]}" --train-iters 6 --load A --no-load-optim --no-load-rng --log-json n.jsonl
	python3 - <<'PY'
import json
f = [json.loads(l) for l in open("fresh.jsonl")]
n = [json.loads(l) for l in open("n.jsonl")]
assert [d["iteration"] for d in n] == [5, 6], n
assert [d["lr"] for d in n] == [d["lr"] for d in f], (n, f)
PY
	run -2 --separate-stderr mt-train "${MODEL[@]}" "${RUN[@]}" --train-iters 1 --finetune
	[[ $stderr == *"--finetune goes with --load"* ]]
}

@test "--no-save-optim writes the weights only; resuming it without --no-load-optim warns, with it trains quietly" {
	mt-train "${MODEL[@]}" "${RUN[@]}" --train-iters 2 --save W --no-save-optim
	run -0 mt-ckpt-reshard inspect W
	[[ $output == *"optimizer_step"*"none"* ]] || { echo "$output"; false; }
	R=()
	for x in "${RUN[@]}"; do [ "$x" = -q ] || R+=("$x"); done
	run -0 --separate-stderr mt-train "${MODEL[@]}" "${R[@]}" --train-iters 3 --load W
	[[ $stderr == *"holds no optimizer state: the AdamW moments start at zero"* ]] || { echo "$stderr"; false; }
	run -0 --separate-stderr mt-train "${MODEL[@]}" "${R[@]}" --train-iters 3 --load W --no-load-optim --save W
	[[ $stderr != *"holds no optimizer state"* ]] || { echo "$stderr"; false; }
	[ "$(cat W/latest)" = 3 ]
}
