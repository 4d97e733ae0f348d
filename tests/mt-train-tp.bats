#!/usr/bin/env bats
# mt-train with tensor parallelism on CPU ranks (MPICH): GPT-2-style and Llama-style tiny
# models at TP=2 and TP=4, with and without sequence parallelism, with data parallelism and
# ZeRO-1, against one process from the same initial weights; two runs of one layout
# bit-identical; checkpoints written at TP=2 resumed at other layouts; the errors before work.
load helpers
cpu_only

setup_file() {
	cd "$BATS_FILE_TMPDIR"
	# 60 symbols: the NullTokenizer's vocabulary is 61 (with its end of document), padded
	# to 64 at TP 1, 2 and 4 with --make-vocab-size-divisible-by 16 (16 x TP divides 64)
	python3 "$MT_ROOT/share/markov/make-markov.py" --vocab 60 --docs 600 > mk.jsonl 2> /dev/null
	mt-tokenize -q --input mk.jsonl --tokenizer-type NullTokenizer --vocab-size 60 --output-prefix mk
}

setup() {
	command -v mpiexec >/dev/null || skip "mpiexec not found (scripts/install-deps.sh installs MPICH)"
	cd "$BATS_TEST_TMPDIR"
	F=$BATS_FILE_TMPDIR
	export OMP_NUM_THREADS=1
	DATA=(--data-path "$F/mk_text_document" --tokenizer-type NullTokenizer --vocab-size 60 --split 95,5,0
		--data-cache-path "$F/cache" --make-vocab-size-divisible-by 16 --lr 1e-3 --lr-decay-style cosine
		--lr-warmup-iters 2 --clip-grad 1.0 --weight-decay 0.1 --log-interval 1 --distributed-timeout-seconds 120
		--micro-batch-size 2 --global-batch-size 4 --seq-length 32 --max-position-embeddings 32 -q)
	GPT=(--config "$MT_ROOT/share/configs/tiny.conf" "${DATA[@]}")
	# Llama-style: RoPE, RMSNorm, SwiGLU, no biases, untied output, 8 heads in 4 query groups
	LLAMA=(--config "$MT_ROOT/share/configs/llama-tiny.conf" --num-attention-heads 8 --num-query-groups 4 "${DATA[@]}")
}

# per-step loss and gradient norm of two JSON logs within a relative tolerance (default 1e-5)
close() {
	python3 - "$1" "$2" "${3:-1e-5}" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
tol = float(sys.argv[3])
assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
worst = 0.0
for x, y in zip(a, b):
    assert x["iteration"] == y["iteration"], (x, y)
    for k in ("loss", "grad_norm"):
        r = abs(x[k] - y[k]) / abs(x[k])
        worst = max(worst, r)
        assert r <= tol, "iteration %d %s: %r against %r (relative %.3g)" % (x["iteration"], k, x[k], y[k], r)
print("worst relative difference %.3g over %d steps" % (worst, len(a)))
PY
}

# the fields that must be identical between two runs of one layout
fields() {
	python3 -c 'import json,sys; [print(json.dumps({k: d[k] for k in ("iteration", "loss", "lr", "grad_norm")})) for d in map(json.loads, open(sys.argv[1]))]' "$1"
}

@test "GPT-2-style: TP=2 and TP=4, with and without --sequence-parallel, within 1e-5 of one process" {
	M=("${GPT[@]}" --train-iters 10)
	mt-train "${M[@]}" --log-json one.jsonl
	[ "$(wc -l < one.jsonl)" -eq 10 ]
	for tp in 2 4; do
		mpiexec -n $tp mt-train "${M[@]}" --tensor-model-parallel-size $tp --log-json tp$tp.jsonl
		close one.jsonl tp$tp.jsonl
		mpiexec -n $tp mt-train "${M[@]}" --tensor-model-parallel-size $tp --sequence-parallel --log-json sp$tp.jsonl
		close one.jsonl sp$tp.jsonl
	done
	# the comparison can fail: another seed is another model
	mt-train "${M[@]}" --seed 7 --log-json other.jsonl
	run ! close one.jsonl other.jsonl
}

@test "Llama-style (GQA, SwiGLU, RoPE, untied): TP=2 and TP=4, with and without --sequence-parallel, within 1e-5 of one process" {
	M=("${LLAMA[@]}" --train-iters 10)
	mt-train "${M[@]}" --log-json one.jsonl
	for tp in 2 4; do
		mpiexec -n $tp mt-train "${M[@]}" --tensor-model-parallel-size $tp --log-json tp$tp.jsonl
		close one.jsonl tp$tp.jsonl
		mpiexec -n $tp mt-train "${M[@]}" --tensor-model-parallel-size $tp --sequence-parallel --log-json sp$tp.jsonl
		close one.jsonl sp$tp.jsonl
	done
}

@test "two runs of one layout are bit-identical (TP=2 with sequence parallelism; TP=4)" {
	for f in "--tensor-model-parallel-size 2 --sequence-parallel" "--tensor-model-parallel-size 4"; do
		n=${f#--tensor-model-parallel-size }
		n=${n%% *}
		mpiexec -n "$n" mt-train "${LLAMA[@]}" --train-iters 6 $f --save A --log-json A.jsonl
		mpiexec -n "$n" mt-train "${LLAMA[@]}" --train-iters 6 $f --save B --log-json B.jsonl
		diff <(fields A.jsonl) <(fields B.jsonl)
		[ "$(ckpt-hash A)" = "$(ckpt-hash B)" ]
		rm -rf A B A.jsonl B.jsonl
	done
}

@test "TP=2 x DP=2, and TP=2 x DP=2 with ZeRO-1, within 1e-5 of one process" {
	M=("${GPT[@]}" --train-iters 10)
	mt-train "${M[@]}" --log-json one.jsonl
	mpiexec -n 4 mt-train "${M[@]}" --tensor-model-parallel-size 2 --log-json dp.jsonl
	close one.jsonl dp.jsonl
	mpiexec -n 4 mt-train "${M[@]}" --tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer \
		--log-json zero.jsonl
	close one.jsonl zero.jsonl
	M=("${LLAMA[@]}" --train-iters 10)
	mt-train "${M[@]}" --log-json lone.jsonl
	mpiexec -n 2 mt-train "${M[@]}" --tensor-model-parallel-size 2 --use-distributed-optimizer --log-json lzero.jsonl
	close lone.jsonl lzero.jsonl
}

@test "a TP=2 checkpoint holds the one-process names and shapes, and resumes at TP=1, TP=4 and TP=1 x DP=2" {
	# two steps after the checkpoint: the second one's loss depends on the AdamW moments
	M=("${LLAMA[@]}" --train-iters 7)
	mpiexec -n 2 mt-train "${M[@]}" --tensor-model-parallel-size 2 --save A --save-interval 5 --log-json A.jsonl
	mt-train "${M[@]}" --train-iters 5 --save one
	# the same tensors, names and global shapes as a checkpoint of one process
	diff <(mt-ckpt-reshard inspect A/iter_0000005 | grep "^tensor" | cut -f1-4) <(mt-ckpt-reshard inspect one | grep "^tensor" | cut -f1-4)
	[ "$(mt-ckpt-reshard inspect one | grep -c "^tensor")" -gt 20 ]
	tail -2 A.jsonl > want.jsonl
	for layout in "1 1" "4 4" "2 1"; do
		set -- $layout
		rm -rf R && mkdir R && cp -R A/iter_0000005 R/ && echo 5 > R/latest
		mpiexec -n "$1" mt-train "${M[@]}" --tensor-model-parallel-size "$2" --load R --save R --log-json R$1$2.jsonl
		close want.jsonl R$1$2.jsonl
	done
}

@test "tensor parallelism's errors before work: heads, query groups, ffn size, world size, sequence length" {
	run -2 --separate-stderr mt-train "${GPT[@]}" --train-iters 1 --num-attention-heads 2 --tensor-model-parallel-size 4
	[[ $stderr == *"--num-attention-heads 2"*"--tensor-model-parallel-size 4"* ]] || { echo "$stderr"; false; }
	run -2 --separate-stderr mt-train "${LLAMA[@]}" --train-iters 1 --num-query-groups 2 --tensor-model-parallel-size 4
	[[ $stderr == *"--num-query-groups 2"*"--tensor-model-parallel-size 4"* ]] || { echo "$stderr"; false; }
	run -2 --separate-stderr mt-train "${GPT[@]}" --train-iters 1 --ffn-hidden-size 90 --tensor-model-parallel-size 4
	[[ $stderr == *"--ffn-hidden-size 90"*"--tensor-model-parallel-size 4"* ]] || { echo "$stderr"; false; }
	run -2 --separate-stderr mt-train "${GPT[@]}" --train-iters 1 --seq-length 30 --max-position-embeddings 30 \
		--tensor-model-parallel-size 4 --sequence-parallel
	[[ $stderr == *"--seq-length 30"*"--tensor-model-parallel-size 4"* ]] || { echo "$stderr"; false; }
	run -2 --separate-stderr mpiexec -n 3 mt-train "${GPT[@]}" --train-iters 1 --tensor-model-parallel-size 2
	[[ $stderr == *"world size 3"*"2"* ]] || { echo "$stderr"; false; }
}

@test "--label-smoothing: the loss is Megatron's smoothed cross-entropy, the same at TP=1 and TP=2" {
	M=("${GPT[@]}" --train-iters 4 --label-smoothing 0.1)
	mt-train "${M[@]}" --log-json one.jsonl
	mpiexec -n 2 mt-train "${M[@]}" --tensor-model-parallel-size 2 --sequence-parallel --log-json tp.jsonl
	close one.jsonl tp.jsonl
	mt-train "${GPT[@]}" --train-iters 4 --log-json plain.jsonl
	run ! close one.jsonl plain.jsonl
	run -2 --separate-stderr mt-train "${GPT[@]}" --train-iters 1 --label-smoothing 1
	[[ $stderr == *"--label-smoothing must be in [0, 1)"* ]]
}

@test "with tensor parallelism: a signal to one rank saves and stops all at one step; the run resumes at TP=2" {
	M=("${GPT[@]}" --train-iters 100000 --log-interval 100000)
	MT_TEST_TAG=tpsig$$ mpiexec -n 2 mt-train "${M[@]}" --tensor-model-parallel-size 2 --sequence-parallel --save ck 2> err.txt &
	pid=$!
	for _ in $(seq 1 100); do [ -n "$(rank_pid tpsig$$ 1)" ] && break; sleep 0.1; done
	sleep 2
	kill -USR1 "$(rank_pid tpsig$$ 1)"
	wait "$pid"
	it=$(cat ck/latest)
	[ "$it" -gt 0 ] && [ "$it" -lt 100000 ]
	run -0 mpiexec -n 2 mt-train "${M[@]}" --tensor-model-parallel-size 2 --sequence-parallel --train-iters $((it + 2)) \
		--save ck --load ck
	[ "$(cat ck/latest)" = $((it + 2)) ]
}

@test "with tensor parallelism: a rank that hangs is named with its coordinates within the timeout" {
	M=("${GPT[@]}" --train-iters 20 --distributed-timeout-seconds 3)
	SECONDS=0
	MT_TEST_HANG_RANK=1 MT_TEST_HANG_STEP=3 run ! --separate-stderr timeout 60 mpiexec -n 4 mt-train "${M[@]}" \
		--tensor-model-parallel-size 2
	echo "status $status after $SECONDS s; stderr: $stderr"
	[ "$SECONDS" -lt 40 ]
	[[ $stderr == *"rank 1 (tp 1, dp 0, pp 0)"* ]]
}
